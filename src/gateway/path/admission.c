/* Admission (admission.h): the checks and readings of a request before it
 * meets the scheduler. Reads the client's connection (headers, query) and
 * its body; writes the request's admission record and waiter, and a
 * refusal into a->err.
 * Not here: the request's answer (proxy.c), who runs next (dispatch.c). */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/routes.h"
#include "gateway.h"
#include "infergate/blockhash.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "keys/ratelimit.h"
#include "keys/respstore.h"
#include "path/admission.h"
#include "sched/cluster_view.h"
#include "sched/prompt.h"

static const struct ig_route *rt(const struct ig_gw *gw, const struct ig_admission *a)
{
	return ig_gw_route(gw->cfg, a->route_idx);
}

void ig_admission_init(struct ig_admission *a)
{
	memset(a, 0, sizeof(*a));
	a->max_tokens = -1;
}

/* A backend's count of tokens, held to 0..IG_ADMISSION_TOKENS_MAX (its
 * usage is its word: two of them added must not overflow). */
static long tokens_held(long n)
{
	return n < 0 ? 0 : n > IG_ADMISSION_TOKENS_MAX ? IG_ADMISSION_TOKENS_MAX : n;
}

void ig_admission_settle(struct ig_admission *a, long prompt_tokens, long completion_tokens, bool ok)
{
	if (!a->tok_charge || a->tok_settled)
		return;
	a->tok_settled = true;
	long used = prompt_tokens >= 0 ? tokens_held(prompt_tokens) + tokens_held(completion_tokens)
		    : ok ? a->tok_charge : 0;
	ig_bucket_refill(&a->key->tpm, ig_now_ms());
	ig_bucket_give(&a->key->tpm, (double)(a->tok_charge - used));
}

void ig_admission_free(struct ig_gw *gw, struct ig_admission *a, bool ok)
{
	ig_admission_settle(a, -1, -1, ok);
	if (a->key)
		ig_clients_release(&gw->clients, a->key);
	a->key = NULL;
	free(a->model);
	free(a->alias);
	free(a->prev_id);
	free(a->resp_id);
	free(a->up_path);
	free(a->err.message);
	free(a->answer);
	a->model = a->alias = a->prev_id = a->resp_id = a->up_path = a->err.message = a->answer = NULL;
}

uint32_t ig_admission_owner(const struct ig_gw *gw, const struct ig_admission *a)
{
	return gw->api_keys.enabled ? ig_respstore_owner(a->key_id) : 0;
}

/* ---- refusals ---- */

static void refuse(struct ig_admission *a, unsigned status, const char *type, const char *param, const char *code,
		   const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));
static void refuse(struct ig_admission *a, unsigned status, const char *type, const char *param, const char *code,
		   const char *fmt, va_list ap)
{
	free(a->err.message);
	a->err.message = ig_oaerror_vmessagef(fmt, ap); /* NULL: out of memory, which proxy.c answers */
	a->err.status = status;
	a->err.type = type;
	a->err.param = param;
	a->err.code = code;
}

static void set_error(struct ig_admission *a, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void set_error(struct ig_admission *a, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	refuse(a, status, NULL, NULL, code, fmt, ap);
	va_end(ap);
}

/* An invalid_request_error about one parameter (a 400 about a field of
 * the body, as OpenAI words it, or a 404). */
static void set_param_error(struct ig_admission *a, unsigned status, const char *param, const char *code,
			    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void set_param_error(struct ig_admission *a, unsigned status, const char *param, const char *code,
			    const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	refuse(a, status, "invalid_request_error", param, code, fmt, ap);
	va_end(ap);
}

/* An error of a given type about one parameter (403 model_not_allowed,
 * the rate limits' 429 typed "requests" or "tokens" as OpenAI's are). */
static void set_typed_error(struct ig_admission *a, unsigned status, const char *type, const char *param,
			    const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void set_typed_error(struct ig_admission *a, unsigned status, const char *type, const char *param,
			    const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	refuse(a, status, type, param, code, fmt, ap);
	va_end(ap);
}

/* Inserts `"stream_options":{"include_usage":true},` as the body's first
 * member, the rest byte for byte. Returns 0 or -1 (out of memory). */
static int splice_usage_option(struct ig_buf *body)
{
	static const char member[] = "\"stream_options\":{\"include_usage\":true},";
	const char *p = memchr(body->data, '{', body->len);
	size_t at = (size_t)(p - body->data) + 1, tail = body->len - at;
	char *saved = malloc(tail + 1);
	if (!saved)
		return -1;
	memcpy(saved, body->data + at, tail);
	body->len = at;
	int rc = ig_buf_append(body, member, sizeof(member) - 1) < 0 || ig_buf_append(body, saved, tail) < 0 ? -1 : 0;
	free(saved);
	return rc;
}

/* session: the key its requests share a backend by: X-Session-Id, else the
 * body's "user" (Anthropic's: metadata.user_id, where Claude Code puts its
 * session's id), else the API key; hashed (FNV-1a, then mixed). 0 none. */
static uint64_t session_of(const struct ig_admission *a, struct MHD_Connection *conn, json_t *root)
{
	const char *id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Session-Id");
	char tag = 'h';
	if (!id || !*id) {
		id = json_string_value(json_object_get(root, "user"));
		tag = 'u';
	}
	if (!id || !*id)
		id = json_string_value(json_object_get(json_object_get(root, "metadata"), "user_id"));
	if (!id || !*id) {
		id = a->key_id;
		tag = 'k';
	}
	if (!*id)
		return 0;
	uint64_t h = 1469598103934665603ull;
	h = (h ^ (unsigned char)tag) * 1099511628211ull;
	for (const unsigned char *p = (const unsigned char *)id; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h ? h : 1;
}

/* "a string", "an integer", ...: what OpenAI's messages call a JSON value. */
static const char *json_kind(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "an array";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
		return "an integer";
	case JSON_REAL:
		return "a decimal";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		break;
	}
	return "null";
}

/* The fields the gateway itself reads, checked as OpenAI does (everything
 * else is the backend's business). Returns 0, or -1 with a 400 set. */
static int check_fields(struct ig_gw *gw, struct ig_admission *a, json_t *root)
{
	json_t *v = json_object_get(root, "model");
	if (!v && !(rt(gw, a)->flags & IG_RT_MODEL_OPTIONAL)) {
		set_param_error(a, 400, "model", "missing_required_parameter", "you must provide a model parameter");
		return -1;
	}
	if (v && !json_is_string(v)) {
		set_param_error(a, 400, "model", "invalid_type",
				"Invalid type for 'model': expected a string, but got %s instead.", json_kind(v));
		return -1;
	}
	if (v && json_string_length(v) == 0) {
		set_param_error(a, 400, "model", "empty_string",
				"Invalid 'model': empty string. Expected a non-empty model name.");
		return -1;
	}
	v = json_object_get(root, "stream");
	if (v && !json_is_boolean(v) && !json_is_null(v)) {
		set_param_error(a, 400, "stream", "invalid_type",
				"Invalid type for 'stream': expected a boolean, but got %s instead.", json_kind(v));
		return -1;
	}
	/* the counts the token estimate multiplies: bounded here, so that its
	 * arithmetic (token_estimate) stays in range whatever a client sends */
	static const char *const counts[] = {"max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of",
					     "sampling_params.max_new_tokens"};
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		const char *dot = strchr(counts[i], '.');
		v = dot ? json_object_get(json_object_get(root, "sampling_params"), dot + 1) : json_object_get(root, counts[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_integer(v)) {
			set_param_error(a, 400, counts[i], "invalid_type",
					"Invalid type for '%s': expected an integer, but got %s instead.", counts[i],
					json_kind(v));
			return -1;
		}
		if (json_integer_value(v) < 1) {
			set_param_error(a, 400, counts[i], "integer_below_min_value",
					"Invalid '%s': integer below minimum value. Expected a value >= 1, but got %lld "
					"instead.",
					counts[i], (long long)json_integer_value(v));
			return -1;
		}
		if (json_integer_value(v) > IG_ADMISSION_COUNT_MAX) {
			set_param_error(a, 400, counts[i], "integer_above_max_value",
					"Invalid '%s': integer above maximum value. Expected a value <= %ld, but got %lld "
					"instead.",
					counts[i], IG_ADMISSION_COUNT_MAX, (long long)json_integer_value(v));
			return -1;
		}
	}
	v = json_object_get(root, "previous_response_id");
	if (v && !json_is_string(v) && !json_is_null(v)) {
		set_param_error(a, 400, "previous_response_id", "invalid_type",
				"Invalid type for 'previous_response_id': expected a string, but got %s instead.",
				json_kind(v));
		return -1;
	}
	v = json_object_get(root, "stream_options");
	if (v && !json_is_object(v) && !json_is_null(v)) {
		set_param_error(a, 400, "stream_options", "invalid_type",
				"Invalid type for 'stream_options': expected an object, but got %s instead.", json_kind(v));
		return -1;
	}
	return 0;
}

/* Bytes of text in a prompt-like value: a string, content parts
 * ({"type": "text", "text": ...}) or arrays of them; a token id counts 4. */
static size_t text_bytes(json_t *v)
{
	size_t n = 0, i;
	json_t *x;
	if (json_is_string(v))
		return json_string_length(v);
	if (json_is_integer(v))
		return 4;
	if (json_is_object(v)) /* a text part, or a block holding blocks (Anthropic's tool_result) */
		return text_bytes(json_object_get(v, "text")) + text_bytes(json_object_get(v, "content"));
	json_array_foreach(v, i, x)
		n += text_bytes(x);
	return n;
}

/* Bytes of a value's compact JSON (tools' definitions, which a chat
 * template renders into the prompt); 0 for none. */
static size_t json_bytes(json_t *v)
{
	if (!v)
		return 0;
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	size_t n = s ? strlen(s) : 0;
	free(s);
	return n;
}

/* A request's prompt in tokens: its text at 4 bytes a token (a chat
 * message's role and two separators counted with its text, as
 * infergate-sim counts it; Anthropic's top-level system, and the tools
 * either API defines). */
static long prompt_estimate(json_t *root)
{
	json_t *msgs = json_object_get(root, "messages"), *m;
	size_t bytes = 0, i;
	if (json_is_array(msgs)) {
		json_array_foreach(msgs, i, m)
			bytes += text_bytes(json_object_get(m, "role")) + text_bytes(json_object_get(m, "content")) + 2;
		bytes += text_bytes(json_object_get(root, "system")) + json_bytes(json_object_get(root, "tools"));
	} else {
		bytes = text_bytes(json_object_get(root, "prompt")) + text_bytes(json_object_get(root, "input")) +
			text_bytes(json_object_get(root, "text"));
	}
	return (long)((bytes + 3) / 4);
}

/* The tokens a request may use, charged to its key's tpm at admission:
 * its prompt (prompt_estimate, kept in a->prompt_estimate) plus the output
 * it may ask for (max_tokens times n or best_of, else default_max_tokens).
 * check_fields bounded the counts; the sum is still held to
 * IG_ADMISSION_TOKENS_MAX, past any key's tpm (a request asking more is
 * "too large" for every limited key), and the backends' outstanding
 * tokens (least-tokens) add such estimates up. */
static long token_estimate(const struct ig_gw *gw, struct ig_admission *a, json_t *root, long exact)
{
	long prompt = a->prompt_estimate = exact >= 0 ? exact : prompt_estimate(root);
	if (!(rt(gw, a)->flags & IG_RT_OUTPUT))
		return prompt > 0 ? prompt : 1;
	long choices = 1, out, total;
	static const char *const several[] = {"n", "best_of"};
	for (size_t i = 0; i < 2; i++) {
		json_t *n = json_object_get(root, several[i]);
		if (json_is_integer(n) && json_integer_value(n) > choices)
			choices = json_integer_value(n) < IG_ADMISSION_COUNT_MAX ? (long)json_integer_value(n)
										   : IG_ADMISSION_COUNT_MAX;
	}
	if (__builtin_mul_overflow(choices, a->max_tokens > 0 ? a->max_tokens : gw->cfg->default_max_tokens, &out) ||
	    __builtin_add_overflow(prompt, out, &total) || total > IG_ADMISSION_TOKENS_MAX)
		return IG_ADMISSION_TOKENS_MAX;
	return total;
}

/* Appends the text of a prompt-like value (as text_bytes counts it). */
static void text_append(struct ig_buf *b, json_t *v)
{
	size_t i;
	json_t *x;
	if (json_is_string(v))
		ig_buf_append(b, json_string_value(v), json_string_length(v));
	else if (json_is_object(v))
		text_append(b, json_object_get(v, "text"));
	else
		json_array_foreach(v, i, x)
			text_append(b, x);
}

/* Blocks considered of one prompt (1 MiB of text, about 260,000 tokens:
 * cache-aware's cost counts the prompt's length from its chain). */
#define MAX_CHAIN 16384

/* cache-aware: the prompt as a chain of block hashes (blockhash.h): its
 * token ids when the model's tokenizer gave them (ig_block_chain_ids: the
 * keys of the exact index); else its text: for chat the messages in
 * order, "role\ncontent\n" each (as infergate-sim builds its prompt), for
 * completions the prompt. Returns 0 or -1. */
static int prefix_chain(struct ig_waiter *w, json_t *root, const uint32_t *ids, size_t nids)
{
	if (ids) {
		size_t n = nids / IG_BLOCK_TOKENS < MAX_CHAIN ? nids / IG_BLOCK_TOKENS : MAX_CHAIN;
		if (n && !(w->pick.chain = malloc(n * sizeof(*w->pick.chain))))
			return -1;
		w->pick.nchain = n ? ig_block_chain_ids(ids, nids, w->pick.chain, n) : 0;
		return 0;
	}
	struct ig_buf t;
	json_t *msgs = json_object_get(root, "messages"), *m;
	size_t i;
	ig_buf_init(&t);
	if (json_is_array(msgs)) {
		json_array_foreach(msgs, i, m) {
			text_append(&t, json_object_get(m, "role"));
			ig_buf_append(&t, "\n", 1);
			text_append(&t, json_object_get(m, "content"));
			ig_buf_append(&t, "\n", 1);
		}
	} else {
		text_append(&t, json_object_get(root, "prompt"));
	}
	size_t n = t.len / IG_BLOCK_BYTES < MAX_CHAIN ? t.len / IG_BLOCK_BYTES : MAX_CHAIN;
	if (n) {
		if (!(w->pick.chain = malloc(n * sizeof(*w->pick.chain)))) {
			ig_buf_free(&t);
			return -1;
		}
		w->pick.nchain = ig_block_chain(t.data, t.len, w->pick.chain, n);
	}
	ig_buf_free(&t);
	return 0;
}

/* /tokenize for a model whose tokenizer the gateway holds, answered by
 * the gateway in vLLM's shape (vllm/entrypoints/openai/protocol.py
 * TokenizeResponse: count, tokens; max_model_len is the engine's to say). */
static char *tokenize_answer(const uint32_t *ids, size_t n)
{
	json_t *tokens = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(tokens, json_integer(ids[i]));
	json_t *o = json_pack("{s:I, s:o}", "count", (json_int_t)n, "tokens", tokens);
	char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return s;
}

/* Whether the gateway should ask for the stream's usage itself: a stream
 * whose client did not set stream_options.include_usage. */
static bool wants_usage(const struct ig_gw *gw, const struct ig_admission *a, json_t *root)
{
	if (!a->stream || !gw->cfg->stream_usage || !(rt(gw, a)->flags & IG_RT_USAGE_OPTION))
		return false;
	return !json_is_true(json_object_get(json_object_get(root, "stream_options"), "include_usage"));
}

/* A request that names no model (a route where it is optional) goes to
 * the one model the gateway serves; with several, the client must choose.
 * NULL with the error set. */
static const char *only_model(struct ig_gw *gw, struct ig_admission *a)
{
	const struct ig_sched *s = &gw->sched;
	const char *one = NULL;
	size_t n = 0;
	struct ig_buf names;
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i]->named && n++ == 0)
			one = s->v[i]->name;
	if (n == 1)
		return one;
	if (n == 0) {
		set_error(a, 503, "no_backend", "no backend has named the model it serves yet: name one in 'model'");
		return NULL;
	}
	ig_buf_init(&names);
	for (size_t i = 0, k = 0; i < s->n; i++)
		if (s->v[i]->named)
			ig_buf_printf(&names, "%s'%s'", k++ ? ", " : "", s->v[i]->name);
	set_param_error(a, 400, "model", "missing_required_parameter",
			"this gateway serves several models (%s): name one in 'model'", names.data);
	ig_buf_free(&names);
	return NULL;
}

/* Reads and checks what dispatch and the routing policy need. The body is forwarded byte for
 * byte, unless its model is an alias, or stream_options had to be changed
 * (set but without include_usage): then it is re-serialised. An absent
 * stream_options is added in front, the rest untouched. Returns 0 or -1
 * (error set). */
int ig_admission_body(struct ig_gw *gw, struct ig_admission *a, struct MHD_Connection *conn, struct ig_buf *body,
		      json_t *parsed, const json_error_t *jerr, struct ig_waiter *w)
{
	json_t *root = parsed;
	unsigned needs = gw->sched.policy ? gw->sched.policy->needs : 0;
	for (int i = 0; i < 2; i++) /* a pair's halves' policies (pd.*) */
		if (gw->sched.pd_policy[i] && gw->cfg->pd_pairs)
			needs |= gw->sched.pd_policy[i]->needs;

	if (!root) {
		set_error(a, 400, "invalid_json",
			  "We could not parse the JSON body of your request: %s (line %d, column %d)",
			  jerr->text, jerr->line, jerr->column);
		return -1;
	}
	if (!json_is_object(root)) {
		set_error(a, 400, "invalid_body", "the request body must be a JSON object");
		json_decref(root);
		return -1;
	}
	if (check_fields(gw, a, root) < 0) {
		json_decref(root);
		return -1;
	}
	/* a route that never streams answers one body, whatever was asked */
	a->stream = json_is_true(json_object_get(root, "stream")) && !(rt(gw, a)->flags & IG_RT_NO_STREAM);
	const char *model = json_string_value(json_object_get(root, "model"));
	if (!model && !(model = only_model(gw, a))) {
		json_decref(root);
		return -1;
	}
	const char *served = ig_conf_alias_target(gw->cfg, model);
	a->model = strdup(served ? served : model);
	json_t *mt = json_object_get(root, "max_tokens");
	if (!json_is_integer(mt))
		mt = json_object_get(root, "max_completion_tokens");
	if (!json_is_integer(mt))
		mt = json_object_get(root, "max_output_tokens");
	if (!json_is_integer(mt)) /* SGLang's native /generate */
		mt = json_object_get(json_object_get(root, "sampling_params"), "max_new_tokens");
	if (json_is_integer(mt))
		a->max_tokens = (long)json_integer_value(mt);
	/* The prompt in the model's own tokens, when the gateway has its
	 * tokenizer and someone asks: a template that refuses the messages is
	 * the engine's to answer (it renders the same), so the text counts. */
	uint32_t *ids = NULL;
	size_t nids = 0;
	long exact = -1;
	bool pd_short = gw->cfg->pd_pairs && gw->cfg->pd_min_prompt_tokens > 0;
	bool counts = a->key->tpm.limit > 0 || (needs & IG_POLICY_NEEDS_TOKENS) || gw->cfg->hedge_after_ms || pd_short;
	bool tokenize = strcmp(rt(gw, a)->path, "/tokenize") == 0;
	if ((counts || tokenize || (needs & IG_POLICY_NEEDS_PREFIX)) && ig_prompt_has_tokenizer(gw->prompts, a->model)) {
		char terr[256] = "no prompt it knows";
		int trc = ig_prompt_tokens(gw->prompts, a->model, root, &ids, &nids, terr, sizeof(terr));
		if (trc > 0)
			exact = (long)nids;
		else
			ig_log_debug("model %s: a prompt not tokenized (%s)", a->model, terr);
		if (tokenize && trc < 0) { /* the template's refusal, as vLLM answers it */
			set_param_error(a, 400, "messages", "invalid_request_error", "%s", terr);
			json_decref(root);
			return -1;
		}
		if (tokenize && trc > 0)
			a->answer = tokenize_answer(ids, nids);
	}
	/* the chain of its ids now, and the ids let go: a refusal below
	 * returns without them */
	int crc = ids && (needs & IG_POLICY_NEEDS_PREFIX) ? prefix_chain(w, root, ids, nids) : 0;
	bool chained = ids != NULL;
	free(ids);
	if (counts)
		a->tok_estimate = token_estimate(gw, a, root, exact); /* and the prompt's: a hedge's waste */
	w->pick.tokens = a->tok_estimate;
	if (pd_short && a->prompt_estimate >= 0 && a->prompt_estimate < gw->cfg->pd_min_prompt_tokens)
		w->pick.role = IG_PICK_ALONE; /* a short prompt: a server that prefills it alone (try_pd.c) */
	if (needs & IG_POLICY_NEEDS_SESSION)
		w->pick.session = session_of(a, conn, root);
	if (rt(gw, a)->flags & IG_RT_RESPONSES) {
		json_t *prev = json_object_get(root, "previous_response_id");
		if (json_is_string(prev)) {
			a->prev_id = strdup(json_string_value(prev));
			int b = gw->responses ? ig_respstore_get(gw->responses, json_string_value(prev), json_string_length(prev),
								 ig_admission_owner(gw, a), ig_now_ms())
					      : -1;
			/* With keys, a conversation is continued only for the key that
			 * stored it: one the gateway does not hold for this key (another
			 * key's, or one it never saw or forgot) is refused here, as
			 * GET /v1/responses/{id} refuses it, not sent to a backend that
			 * would continue whoever's it is. Without keys there is one
			 * tenant: an id not held is routed like any request. */
			if (b < 0 && gw->api_keys.enabled) {
				set_param_error(a, 404, "previous_response_id", "previous_response_not_found",
						"Previous response with id '%.200s' not found.", json_string_value(prev));
				json_decref(root);
				return -1;
			}
			w->pick.pinned = b >= 0 ? 1 + b : 0;
		}
		a->store = !json_is_false(json_object_get(root, "store")); /* stored unless told not to */
	}
	if (!chained && (needs & IG_POLICY_NEEDS_PREFIX))
		crc = prefix_chain(w, root, NULL, 0);
	if (crc < 0) {
		json_decref(root);
		set_error(a, 500, "internal_error", "out of memory");
		return -1;
	}
	bool rewrite = served != NULL, splice = false;
	if (served) {
		a->alias = strdup(model);
		json_object_set_new(root, "model", json_string(served));
	}
	if (wants_usage(gw, a, root)) {
		a->usage_added = true;
		json_t *so = json_object_get(root, "stream_options");
		if (!so && !rewrite) {
			splice = true; /* absent: a member in front, the rest as sent */
		} else {
			if (!json_is_object(so)) /* null */
				json_object_set_new(root, "stream_options", so = json_object());
			json_object_set_new(so, "include_usage", json_true());
			rewrite = true;
		}
	}
	int rc = 0;
	if (rewrite) {
		char *text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
		ig_buf_reset(body);
		if (!text || ig_buf_append(body, text, strlen(text)) < 0)
			rc = -1;
		free(text);
	} else if (splice) {
		rc = splice_usage_option(body);
	}
	json_decref(root);
	if (rc < 0)
		set_error(a, 500, "internal_error", "out of memory");
	return rc;
}

/* One query argument, percent-encoded again, onto the path. */
static enum MHD_Result add_argument(void *cls, enum MHD_ValueKind kind IG_UNUSED, const char *key,
				    const char *value)
{
	struct ig_buf *b = cls;
	char *k = curl_easy_escape(NULL, key, 0), *v = value ? curl_easy_escape(NULL, value, 0) : NULL;
	if (k)
		ig_buf_printf(b, "%c%s%s%s", strchr(b->data, '?') ? '&' : '?', k, v ? "=" : "", v ? v : "");
	curl_free(k);
	curl_free(v);
	return MHD_YES;
}

/* A stored response's route (GET or DELETE PATH/{id}, its cancel, its
 * input items): sent as it came (path and query) to the backend that holds
 * the response, in the queue of the first model it serves. An id the
 * gateway did not see stored (or that another key stored) is OpenAI's 404.
 * Returns 0, or -1 with the error set. */
int ig_admission_by_id(struct ig_gw *gw, struct ig_admission *a, struct MHD_Connection *conn, struct ig_waiter *w)
{
	const char *tmpl = rt(gw, a)->path, *hole = strstr(tmpl, "{id}");
	struct ig_buf path;
	ig_buf_init(&path);
	ig_buf_printf(&path, "%.*s%s%s", (int)(hole - tmpl), tmpl, a->resp_id, hole + 4);
	MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, add_argument, &path);
	a->up_path = path.data; /* taken over */
	const char *stream = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "stream");
	a->stream = stream && strcmp(stream, "true") == 0; /* vLLM: a background response's events again */
	int b = gw->responses ? ig_respstore_get(gw->responses, a->resp_id, strlen(a->resp_id), ig_admission_owner(gw, a),
						 ig_now_ms())
			      : -1;
	const struct ig_backend *held = b >= 0 ? ig_backend_fleet_find_id(&gw->fleet, b) : NULL;
	json_t *names = held ? ig_backend_model_names(held) : NULL;
	const char *model = json_string_value(json_array_get(names, 0));
	if (model) {
		a->model = strdup(model);
		w->pick.pinned = 1 + b;
	} else {
		set_param_error(a, 404, "response_id", "response_not_found", "Response with id '%s' not found%s.",
				a->resp_id, b < 0 ? "" : held ? " (its backend names no model yet)"
							: " (its backend has left the gateway)");
	}
	json_decref(names);
	return model ? 0 : -1;
}

/* Whose request it is (a->key: the SHA-256 of its bearer token, ""
 * without one; server.c checked it against the keys file), whose share it
 * counts against (the same, or one shared key with scheduling fifo) and its
 * class: X-Infergate-Priority, else the key's default, else normal (fifo:
 * one class). Returns 0, or -1 with an error set. */
int ig_admission_classify(struct ig_gw *gw, struct ig_admission *a, struct MHD_Connection *conn,
			  struct ig_waiter *w)
{
	const char *prio = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Infergate-Priority");
	const char *timeout = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Infergate-Timeout-Ms");
	bool fifo = gw->cfg->scheduling != 0;

	if ((a->key = ig_clients_get(&gw->clients, a->key_id)))
		a->key->refs++;
	if (a->key && (w->q.key = fifo ? ig_clients_get(&gw->clients, "") : a->key))
		w->q.key->refs++;
	if (!w->q.key) {
		set_error(a, 500, "internal_error", "out of memory");
		return -1;
	}
	if (prio) {
		int c = ig_conf_class_parse(prio);
		if (c < 0) {
			set_param_error(a, 400, "X-Infergate-Priority", "invalid_priority",
					"Invalid 'X-Infergate-Priority' header: '%.64s' (expected high, normal or low)", prio);
			return -1;
		}
		w->q.klass = c;
	} else if (a->key->klass >= 0) {
		w->q.klass = a->key->klass;
	}
	if (fifo)
		w->q.klass = IG_CLASS_NORMAL;
	if (timeout) {
		/* the client's deadline for the whole request: queue, attempts,
		 * retries (proxy.c ends it with a 504 when it passes) */
		char *end;
		long v = strtol(timeout, &end, 10);
		if (end == timeout || *end || v < 1 || v > 86400000) {
			set_param_error(a, 400, "X-Infergate-Timeout-Ms", "invalid_timeout",
					"Invalid 'X-Infergate-Timeout-Ms' header: '%.64s' (expected milliseconds, 1 to "
					"86400000)", timeout);
			return -1;
		}
		a->timeout_ms = v;
		a->deadline_ms = ig_now_ms() + (uint64_t)v;
	}
	return 0;
}

/* Takes its key's buckets' state for the x-ratelimit-* headers. */
static void snapshot_limits(const struct ig_cluster_view *v, struct ig_admission *a, uint64_t now_ms)
{
	struct ig_key *k = a->key;
	ig_bucket_refill(&k->rpm, now_ms);
	ig_bucket_refill(&k->tpm, now_ms);
	/* with a cluster, what the other gateways' shares held at their last
	 * sync too: the fleet's remaining */
	a->rl_req_left = ig_bucket_remaining(&k->rpm) + (long)ig_cluster_others_req(v, k);
	a->rl_tok_left = ig_bucket_remaining(&k->tpm) + (long)ig_cluster_others_tok(v, k);
	a->rl_req_reset_ms = ig_bucket_reset_ms(&k->rpm);
	a->rl_tok_reset_ms = ig_bucket_reset_ms(&k->tpm);
	a->rl_shown = true;
}

/* What the key's entry allows: the model (403 model_not_allowed) and its
 * rates (429 rate_limit_exceeded, typed "requests" or "tokens" as OpenAI
 * types them, with when to retry). Returns 0 admitted (its token charge
 * taken), or -1 with the error set. */
int ig_admission_limits(struct ig_gw *gw, struct ig_admission *a)
{
	struct ig_key *k = a->key;
	const struct ig_keyent *e = k->ent;
	char wait[32];
	uint64_t retry_ms, now = ig_now_ms();

	if (!e)
		return 0;
	if (!ig_keyset_model_allowed(e, a->model, a->alias)) {
		set_typed_error(a, 403, "permission_error", "model", "model_not_allowed",
				"The API key '%s' is not allowed to use the model '%s'", e->name,
				a->alias ? a->alias : a->model);
		return -1;
	}
	if (!e->rpm && !e->tpm)
		return 0;
	k->dem_req += 1; /* what it asked for, admitted or not: its share follows it (cluster.c) */
	k->dem_tok += (double)a->tok_estimate;
	enum ig_limit l = ig_ratelimit_admit(&k->rpm, &k->tpm, a->tok_estimate, (double)e->tpm, now, &retry_ms);
	snapshot_limits(gw->cluster_view, a, now);
	if (l == IG_LIMIT_NONE) {
		a->tok_charge = a->tok_estimate;
		return 0;
	}
	uint64_t floor_ms = ig_cluster_retry_floor(gw->cluster_view, k);
	if (l == IG_LIMIT_REQUESTS && retry_ms < floor_ms)
		retry_ms = floor_ms; /* several gateways: see cluster_view.h */
	ig_ratelimit_duration(wait, sizeof(wait), retry_ms);
	if (l == IG_LIMIT_REQUESTS) {
		k->limited_requests++;
		a->err.retry_after_ms = retry_ms;
		set_typed_error(a, 429, "requests", NULL, "rate_limit_exceeded",
				"Rate limit reached for the API key '%s' on requests per min (RPM): Limit %ld, Remaining "
				"%ld, Requested 1. Please try again in %s.", e->name, e->rpm, a->rl_req_left, wait);
	} else if (l == IG_LIMIT_TOKENS) {
		k->limited_tokens++;
		a->err.retry_after_ms = retry_ms;
		set_typed_error(a, 429, "tokens", NULL, "rate_limit_exceeded",
				"Rate limit reached for the API key '%s' on tokens per min (TPM): Limit %ld, Remaining "
				"%ld, Requested %ld (the prompt's estimate and max_tokens). Please try again in %s.",
				e->name, e->tpm, a->rl_tok_left, a->tok_estimate, wait);
	} else {
		k->limited_tokens++;
		a->err.retry_after_ms = UINT64_MAX; /* waiting would not help */
		set_typed_error(a, 429, "tokens", NULL, "rate_limit_exceeded",
				"Request too large for the API key '%s' on tokens per min (TPM): Limit %ld, Requested %ld "
				"(the prompt's estimate and max_tokens). Lower max_tokens or send less.",
				e->name, e->tpm, a->tok_estimate);
	}
	return -1;
}
