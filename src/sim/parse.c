/* Reading a generation request (chat, completions, the Responses API,
 * SGLang's /generate) into the engine's struct sim_req: the body's JSON
 * checked as the imitated server's schema and serving code check it, with
 * their messages, the prompt text the answer is seeded from, its token
 * counts, the context-length check, and what the answer will be (its
 * length, "length" when max_tokens cuts it). A refusal comes back as a
 * struct sim_perr; answering it is server.c's, running the request the
 * engine's. */
#include "config.h"
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/blockhash.h"
#include "infergate/buf.h"
#include "infergate/chattmpl.h"
#include "infergate/tokenizer.h"
#include "infergate/util.h"
#include "parse.h"
#include "schema.h"
#include "stored.h"

/* A request the servers' schema validation would refuse: 400, param null
 * (FastAPI's handler names the field in the message, not in param). */
static int fail(struct sim_perr *e, char *msg)
{
	return sim_refuse(e, 400, SIM_T_VALIDATION, NULL, msg);
}

/* Any other refusal. */
static int refuse(struct sim_perr *e, unsigned status, const char *type, const char *param, char *msg)
{
	return sim_refuse(e, status, type, param, msg);
}

/* Appends a message's content (string, null, or an array of parts whose
 * "text" members count) to the prompt. Returns 0 or -1. */
static int add_content(struct ig_buf *p, json_t *content)
{
	if (!content || json_is_null(content))
		return 0;
	if (json_is_string(content))
		return ig_buf_append(p, json_string_value(content), json_string_length(content));
	if (!json_is_array(content))
		return -1;
	size_t i;
	json_t *part;
	json_array_foreach(content, i, part) {
		if (!json_is_object(part))
			return -1;
		json_t *text = json_object_get(part, "text");
		if (text && !json_is_string(text))
			return -1;
		if (text && ig_buf_append(p, json_string_value(text), json_string_length(text)) < 0)
			return -1;
	}
	return 0;
}

/* A message list as prompt text: each message's role and content on lines
 * of their own (chat's "messages", the Responses API's "input"). */
static int messages_text(json_t *msgs, const char *what, struct ig_buf *p, struct sim_perr *e)
{
	size_t i;
	json_t *m;
	json_array_foreach(msgs, i, m) {
		json_t *role = json_is_object(m) ? json_object_get(m, "role") : NULL;
		if (!json_is_string(role))
			return fail(e, ig_strdupf("%s[%zu] must be an object with a string 'role'", what, i));
		ig_buf_append(p, json_string_value(role), json_string_length(role));
		ig_buf_append(p, "\n", 1);
		if (add_content(p, json_object_get(m, "content")) < 0)
			return fail(e, ig_strdupf("%s[%zu].content must be a string, null or an array of parts", what, i));
		ig_buf_append(p, "\n", 1);
	}
	return 0;
}

/* The prompt text the answer is seeded from: for chat, each message's role
 * and content on their own lines. Returns 0 or -1 with *e. */
static int prompt_text(struct sim_req *r, json_t *root, struct ig_buf *p, bool vllm, struct sim_perr *e)
{
	if (r->kind == SIM_GENERATE) { /* "text", or "input_ids" as /detokenize reads them */
		json_t *text = json_object_get(root, "text"), *ids = json_object_get(root, "input_ids");
		if (json_is_string(text))
			return ig_buf_append(p, json_string_value(text), json_string_length(text));
		char *t = json_is_array(ids) && !text ? sim_text_detokenize(ids) : NULL;
		if (!t)
			return refuse(e, 400, SIM_T_BAD_REQUEST, NULL,
				      strdup(text || ids ? "'text' must be a string or 'input_ids' a list of token ids "
							   "(infergate-sim answers one prompt)"
							 : "Either text, input_ids or input_embeds should be provided."));
		ig_buf_append(p, t, strlen(t));
		free(t);
		return 0;
	}
	if (r->kind == SIM_RESPONSES) {
		/* "instructions", then "input": a string or a list of messages
		 * ({"role", "content"}, content a string or parts) */
		json_t *ins = json_object_get(root, "instructions"), *in = json_object_get(root, "input");
		if (ins && !json_is_null(ins) && !json_is_string(ins))
			return fail(e, strdup("'instructions' must be a string"));
		if (json_is_string(ins))
			ig_buf_printf(p, "system\n%s\n", json_string_value(ins));
		if (json_is_string(in)) {
			ig_buf_printf(p, "user\n");
			ig_buf_append(p, json_string_value(in), json_string_length(in));
			ig_buf_append(p, "\n", 1);
			return 0;
		}
		if (!json_is_array(in) || json_array_size(in) == 0)
			return fail(e, strdup("'input' must be a string or a non-empty array of messages"));
		return messages_text(in, "input", p, e);
	}
	if (r->kind == SIM_CHAT) {
		json_t *msgs = json_object_get(root, "messages");
		if (!msgs)
			return fail(e, strdup("'messages' is required"));
		if (!json_is_array(msgs) || json_array_size(msgs) == 0)
			return fail(e, strdup("'messages' must be a non-empty array"));
		/* continue_final_message: the final message is a prefill the
		 * model continues. vLLM's ChatCompletionRequest
		 * (vllm/entrypoints/openai/protocol.py) wants it with
		 * add_generation_prompt false ("Cannot be used at the same time
		 * as add_generation_prompt", which defaults to true); SGLang's
		 * (python/sglang/srt/entrypoints/openai/protocol.py) has no
		 * add_generation_prompt and takes it alone. The answer is seeded
		 * from the messages before it, so a prefill that is the start of
		 * that answer (what a gateway relayed before a backend broke) is
		 * continued word for word; the answer holds only the new words. */
		json_t *cfm = json_object_get(root, "continue_final_message"),
		       *agp = json_object_get(root, "add_generation_prompt");
		if ((cfm && !json_is_null(cfm) && !json_is_boolean(cfm)) ||
		    (agp && !json_is_null(agp) && !json_is_boolean(agp)))
			return fail(e, strdup("'continue_final_message' and 'add_generation_prompt' must be booleans"));
		if (json_is_true(cfm)) {
			if (vllm && !json_is_false(agp))
				return fail(e, strdup("Cannot set both `continue_final_message` and `add_generation_prompt` to "
						      "True."));
			size_t last = json_array_size(msgs) - 1;
			json_t *fin = json_array_get(msgs, last);
			json_t *content = json_is_object(fin) ? json_object_get(fin, "content") : NULL;
			if (last > 0 && json_is_string(content)) {
				json_t *before = json_array();
				for (size_t i = 0; i < last; i++)
					json_array_append(before, json_array_get(msgs, i));
				int rc = messages_text(before, "messages", p, e);
				json_decref(before);
				if (rc < 0)
					return rc;
				r->prefill = strndup(json_string_value(content), json_string_length(content));
				r->prefill_len = json_string_length(content);
				return 0;
			}
		}
		return messages_text(msgs, "messages", p, e);
	}
	json_t *prompt = json_object_get(root, "prompt");
	if (!prompt)
		return fail(e, strdup("'prompt' is required"));
	if (json_is_array(prompt) && json_array_size(prompt) == 1)
		prompt = json_array_get(prompt, 0);
	if (!json_is_string(prompt))
		return fail(e, strdup("'prompt' must be a string (or an array of one string)"));
	ig_buf_append(p, json_string_value(prompt), json_string_length(prompt));
	return 0;
}

/* A positive integer member, or 0 when absent or null. Returns 0 or -1. */
static int get_limit(json_t *root, const char *key, long *out, struct sim_perr *e)
{
	json_t *v = json_object_get(root, key);
	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < 1)
		return fail(e, ig_strdupf("'%s' must be an integer of at least 1", key));
	json_int_t n = json_integer_value(v);
	*out = n > 1000000000 ? 1000000000 : (long)n;
	return 0;
}

/* The context-length check of the imitated server, with its message (an
 * input tokens, max_new the max_tokens asked, 0 when none). Returns 0 or -1
 * with *e. SGLang: an input of at least the context, or input + max_new
 * reaching it (after sgl-project/sglang
 * python/sglang/srt/managers/tokenizer_manager.py _validate_one_request).
 * vLLM: an input of at least the context, or input + max_tokens above it
 * (vllm-project/vllm vllm/entrypoints/openai/engine/serving.py
 * _validate_input). Both answer 400 BadRequestError, streamed or not:
 * SGLang's serving_chat.py and serving_completions.py run the generator's
 * first step before sending 200 ("Kick-start the generator to trigger
 * validation before HTTP 200 is sent"), vLLM validates before generating. */
static int check_context(struct sim *s, long in, long max_new, struct sim_perr *e)
{
	long ctx = s->conf->context_length;

	if (ctx <= 0)
		return 0;
	if (s->conf->flavor == SIM_FLAVOR_VLLM) {
		if (in >= ctx)
			return refuse(e, 400, SIM_T_BAD_REQUEST, "input_tokens",
				      ig_strdupf("This model's maximum context length is %ld tokens. However, your "
						 "request has %ld input tokens. Please reduce the length of the input "
						 "messages.", ctx, in));
		if (max_new > 0 && in + max_new > ctx)
			return refuse(e, 400, SIM_T_BAD_REQUEST, "max_tokens",
				      ig_strdupf("'max_tokens' or 'max_completion_tokens' is too large: %ld. This "
						 "model's maximum context length is %ld tokens and your request has "
						 "%ld input tokens (%ld > %ld - %ld).", max_new, ctx, in, max_new, ctx, in));
		return 0;
	}
	if (in >= ctx)
		return refuse(e, 400, SIM_T_BAD_REQUEST, NULL,
			      ig_strdupf("The input (%ld tokens) is longer than the model's context length (%ld tokens).",
					 in, ctx));
	if (max_new > 0 && in + max_new >= ctx)
		return refuse(e, 400, SIM_T_BAD_REQUEST, NULL,
			      ig_strdupf("Requested token count exceeds the model's maximum context length of %ld "
					 "tokens. You requested a total of %ld tokens: %ld tokens from the input "
					 "messages and %ld tokens for the completion. Please reduce the number of "
					 "tokens in the input messages or the completion to fit within the limit.",
					 ctx, in + max_new, in, max_new));
	return 0;
}


static int responses_state(struct sim *s, struct sim_req *r, json_t *root, struct sim_perr *e)
{
	json_t *prev = json_object_get(root, "previous_response_id"), *store = json_object_get(root, "store");
	if (prev && !json_is_null(prev) && !json_is_string(prev))
		return fail(e, strdup("'previous_response_id' must be a string"));
	if (store && !json_is_null(store) && !json_is_boolean(store))
		return fail(e, strdup("'store' must be a boolean"));
	r->store = !json_is_false(store);
	if (!json_is_string(prev))
		return 0;
	if (json_string_length(prev) >= sizeof(r->prev_id) || !sim_stored_find(s, json_string_value(prev)))
		return refuse(e, 404, "invalid_request_error", NULL,
			      ig_strdupf("Response with id '%s' not found.", json_string_value(prev)));
	snprintf(r->prev_id, sizeof(r->prev_id), "%s", json_string_value(prev));
	return 0;
}

/* Structured outputs (schema.c): a request that asks for JSON gets a
 * document of its schema's shape as its answer, of about `natural` tokens;
 * *n its tokens. Its grammar starts at the answer's first token, after any
 * prefill, as a grammar engine's does: a continued request gets a whole new
 * document. Returns 0, or -1 (e filled) when its schema is not JSON. */
static int json_answer(struct sim_req *r, json_t *root, long natural, long *n, struct sim_perr *e)
{
	json_t *schema, *owned;
	char *err;
	int so = sim_schema_of(root, &schema, &owned, &err);
	if (so < 0)
		return fail(e, err);
	if (so == 0)
		return 0;
	struct ig_buf doc;
	ig_buf_init(&doc);
	*n = sim_schema_doc(schema, r->text_seed, natural > 0 ? natural : 1, &doc);
	json_decref(owned);
	r->doc = doc.data;
	r->doc_len = doc.len;
	r->text_skip = 0;
	return 0;
}

/* SGLang: the rank a request asks for, "routed_dp_rank" (its current name
 * in GenerateReqInput and the OpenAI protocol, python/sglang/srt/managers/
 * io_struct.py, what sgl-model-gateway sends) or "data_parallel_rank" (the
 * name before, read by python/sglang/srt/managers/data_parallel_controller.py
 * maybe_external_dp_rank_routing), unless the header X-Data-Parallel-Rank
 * named one (server.c). vLLM takes it from the header only. */
static int dp_rank_field(struct sim_req *r, json_t *root, struct sim_perr *e)
{
	static const char *const keys[] = {"routed_dp_rank", "data_parallel_rank"};
	if (r->dp_rank_set) /* the header's, which comes first (server.c) */
		return 0;
	for (size_t i = 0; i < 2; i++) {
		json_t *v = json_object_get(root, keys[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_integer(v))
			return fail(e, ig_strdupf("'%s' must be an integer", keys[i]));
		json_int_t k = json_integer_value(v);
		r->dp_rank = k < -1000000 ? -1000000 : k > 1000000 ? 1000000 : (long)k;
		r->dp_rank_set = true;
		return 0;
	}
	return 0;
}

/* SGLang's adapter: "lora_path" (the adapter's name, in chat, completions
 * and /generate), else a model "BASE:ADAPTER" (after sgl-project/sglang
 * python/sglang/srt/entrypoints/openai/serving_base.py, which takes the
 * part after the last ':'). One not loaded is a ValueError, 400
 * (python/sglang/srt/lora/lora_registry.py acquire). */
static int sglang_lora(struct sim *s, struct sim_req *r, json_t *root, json_t *model, struct sim_perr *e)
{
	json_t *lp = json_object_get(root, "lora_path");
	const char *want = NULL;
	if (!s->eng.lora)
		return 0;
	if (lp && !json_is_null(lp) && !json_is_string(lp))
		return fail(e, strdup("'lora_path' must be a string (infergate-sim takes one request at a time)"));
	if (json_is_string(lp))
		want = json_string_value(lp);
	else if (json_is_string(model) && strrchr(json_string_value(model), ':'))
		want = strrchr(json_string_value(model), ':') + 1;
	if (!want)
		return 0;
	if ((r->lora = sim_loras_find(&s->eng.loras, want)) >= 0)
		return 0;
	struct ig_buf k;
	ig_buf_init(&k);
	for (size_t i = 0; i < s->eng.loras.n; i++)
		if (!s->eng.loras.a[i].gone)
			ig_buf_printf(&k, "%s'%s'", k.len ? ", " : "", s->eng.loras.a[i].name);
	ig_buf_append(&k, "", 1);
	refuse(e, 400, SIM_T_BAD_REQUEST, NULL,
	       ig_strdupf("The following requested LoRA adapters are not loaded: %s\nLoaded adapters: dict_keys([%s]).", want,
			  k.data));
	ig_buf_free(&k);
	return -1;
}

int sim_parse_completion(struct sim *s, struct sim_req *r, const char *body, size_t len, struct sim_perr *e)
{
	json_error_t jerr;
	json_t *root = json_loadb(body ? body : "", len, 0, &jerr);
	struct ig_buf p;
	int ret = -1;

	ig_buf_init(&p);
	if (!root) {
		fail(e, ig_strdupf("invalid JSON body: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column));
		goto out;
	}
	if (!json_is_object(root)) {
		fail(e, strdup("the request body must be a JSON object"));
		goto out;
	}
	json_t *model = json_object_get(root, "model");
	if (model && !json_is_null(model) && !json_is_string(model)) {
		fail(e, strdup("'model' must be a string"));
		goto out;
	}
	json_t *stream = json_object_get(root, "stream");
	if (stream && !json_is_null(stream) && !json_is_boolean(stream)) {
		fail(e, strdup("'stream' must be a boolean"));
		goto out;
	}
	r->stream = json_is_true(stream);
	json_t *so = json_object_get(root, "stream_options");
	if (so && !json_is_null(so)) {
		json_t *iu = json_is_object(so) ? json_object_get(so, "include_usage") : NULL;
		if (!json_is_object(so) || (iu && !json_is_null(iu) && !json_is_boolean(iu))) {
			fail(e, strdup("'stream_options' must be an object with a boolean 'include_usage'"));
			goto out;
		}
		r->include_usage = r->stream && json_is_true(iu);
	}
	long max_tokens, max_completion_tokens;
	/* "ignore_eos": the answer runs to its limit, as benchmark clients ask
	 * (vllm bench serve --ignore-eos, SGLang's bench_serving): a request of
	 * the chat/completions protocol's extra sampling parameters in both
	 * servers (sglang python/sglang/srt/entrypoints/openai/protocol.py,
	 * vllm vllm/entrypoints/openai/protocol.py; /generate: in
	 * sampling_params, sglang python/sglang/srt/sampling/sampling_params.py). */
	json_t *ieos = json_object_get(root, "ignore_eos");
	if (r->kind == SIM_GENERATE && json_is_object(json_object_get(root, "sampling_params")))
		ieos = json_object_get(json_object_get(root, "sampling_params"), "ignore_eos");
	if (ieos && !json_is_null(ieos) && !json_is_boolean(ieos)) {
		fail(e, strdup("'ignore_eos' must be a boolean"));
		goto out;
	}
	if (r->kind == SIM_GENERATE) {
		/* GenerateReqInput (python/sglang/srt/managers/io_struct.py):
		 * sampling_params.max_new_tokens, rid */
		json_t *sp = json_object_get(root, "sampling_params"), *rid = json_object_get(root, "rid");
		max_completion_tokens = 0;
		r->include_usage = false;
		if (sp && !json_is_null(sp) && !json_is_object(sp)) {
			fail(e, strdup("'sampling_params' must be an object"));
			goto out;
		}
		max_tokens = 0;
		if (json_is_object(sp) && get_limit(sp, "max_new_tokens", &max_tokens, e) < 0)
			goto out;
		if (rid && !json_is_null(rid) && (!json_is_string(rid) || json_string_length(rid) == 0 ||
						  json_string_length(rid) >= sizeof(r->id))) {
			fail(e, ig_strdupf("'rid' must be a string of 1..%zu bytes (infergate-sim)", sizeof(r->id) - 1));
			goto out;
		}
		if (json_is_string(rid))
			snprintf(r->id, sizeof(r->id), "%s", json_string_value(rid));
	} else if (r->kind == SIM_RESPONSES) {
		max_completion_tokens = 0;
		r->include_usage = false;
		if (get_limit(root, "max_output_tokens", &max_tokens, e) < 0 || responses_state(s, r, root, e) < 0)
			goto out;
	} else if (get_limit(root, "max_tokens", &max_tokens, e) < 0 ||
		   get_limit(root, "max_completion_tokens", &max_completion_tokens, e) < 0) {
		goto out;
	}
	json_t *n = json_object_get(root, "n");
	if (n && !json_is_null(n) && !(json_is_integer(n) && json_integer_value(n) == 1)) {
		fail(e, strdup("'n' must be 1 (infergate-sim answers one choice)"));
		goto out;
	}
	json_t *prio = json_object_get(root, "priority");
	/* Without one, the last of all: SGLang's scheduler gives a request
	 * with no priority (and no --default-priority-value) the worst one,
	 * -sys.maxsize - 1, or sys.maxsize with low values first
	 * (python/sglang/srt/managers/scheduler.py _set_or_validate_priority). */
	if (s->conf->priority_scheduling)
		r->priority = s->conf->low_first ? LONG_MAX : LONG_MIN;
	if (s->conf->priority_scheduling && prio && !json_is_null(prio)) {
		if (!json_is_integer(prio)) {
			fail(e, strdup("'priority' must be an integer"));
			goto out;
		}
		json_int_t v = json_integer_value(prio);
		r->priority = v > 1000000000 ? 1000000000 : v < -1000000000 ? -1000000000 : (long)v;
	}
	if (prompt_text(r, root, &p, s->conf->flavor == SIM_FLAVOR_VLLM, e) < 0)
		goto out;
	/* vLLM serves its model names only; SGLang answers whatever a request
	 * names (vllm-project/vllm vllm/entrypoints/openai/engine/serving.py
	 * _check_model: a missing or empty name is the served model). */
	if (s->conf->flavor == SIM_FLAVOR_VLLM && json_is_string(model) && json_string_length(model) > 0 &&
	    strcmp(json_string_value(model), s->conf->model) != 0 &&
	    (!s->eng.lora || (r->lora = sim_loras_find(&s->eng.loras, json_string_value(model))) < 0)) {
		refuse(e, 404, "NotFoundError", "model",
		       ig_strdupf("The model `%s` does not exist.", json_string_value(model)));
		goto out;
	}
	if (s->conf->flavor == SIM_FLAVOR_SGLANG && (sglang_lora(s, r, root, model, e) < 0 || dp_rank_field(r, root, e) < 0))
		goto out;
	/* vLLM's processor checks the rank the header asked for
	 * (vllm/v1/engine/input_processor.py process_inputs); SGLang's
	 * controller would index its workers with it (the simulator refuses
	 * with a message of its own). */
	if (r->dp_rank_set && (r->dp_rank < 0 || r->dp_rank >= s->conf->dp_ranks)) {
		refuse(e, 400, SIM_T_BAD_REQUEST, NULL,
		       s->conf->flavor == SIM_FLAVOR_VLLM
			       ? ig_strdupf("data_parallel_rank %ld is out of range [0, %ld).", r->dp_rank, s->conf->dp_ranks)
			       : ig_strdupf("routed_dp_rank %ld is out of range [0, %ld) (infergate-sim)", r->dp_rank,
					    s->conf->dp_ranks));
		goto out;
	}

	const char *name = json_is_string(model) && json_string_length(model) > 0 ? json_string_value(model)
										   : s->conf->model;
	json_t *jname = json_string(name);
	r->model_json = json_dumps(jname, JSON_ENCODE_ANY | JSON_COMPACT);
	json_decref(jname);
	if (!r->model_json)
		abort();
	r->text_seed = sim_text_seed(p.data ? p.data : "", p.len, (uint64_t)s->conf->seed);
	if (r->prefill) {
		/* the prefill is the start of this answer: go on after it; else
		 * an answer of its own, seeded from the prefill too */
		r->text_skip = sim_text_prefix_words(r->text_seed, r->prefill, r->prefill_len, 1000000);
		if (!r->text_skip) {
			ig_buf_append(&p, r->prefill, r->prefill_len);
			r->text_seed = sim_text_seed(p.data, p.len, (uint64_t)s->conf->seed);
		}
	}
	size_t at;
	long words;
	if (r->kind == SIM_COMPLETION && !r->prefill && (at = sim_text_split(p.data, p.len, (uint64_t)s->conf->seed, &words))) {
		/* a prompt that ends with the start of its own answer: the answer
		 * goes on after it, as a chat's prefill does */
		r->text_seed = sim_text_seed(p.data, at, (uint64_t)s->conf->seed);
		r->text_skip = words;
		p.len = at;
	}
	/* A prefill that is the answer's start is prompt, its words tokens
	 * as they were generated (a server's tokenizer reads its own output
	 * back into about the same tokens). */
	/* --tokenizer: the prompt in the model's own ids, a chat's messages
	 * rendered by its template first, as the engine renders them */
	uint32_t *ids = NULL;
	size_t nids = 0;
	if (s->conf->tok) {
		if (r->kind == SIM_CHAT && s->conf->tmpl && !r->prefill) {
			char *text = NULL, why[512];
			size_t tlen = 0;
			if (ig_chattmpl_render_request(s->conf->tmpl, root, &text, &tlen, why, sizeof(why)) < 0) {
				refuse(e, 400, SIM_T_BAD_REQUEST, "messages", strdup(why));
				goto out;
			}
			p.len = 0;
			ig_buf_append(&p, text, tlen);
			free(text);
		}
		if (ig_tokenizer_encode(s->conf->tok, p.data ? p.data : "", p.len, true, &ids, &nids) < 0)
			abort();
	}
	r->prompt_tokens = (ids ? (long)nids : sim_text_prompt_tokens(p.len)) + r->text_skip;
	if (sim_conf_steps(s->conf) && ids) {
		/* the chain of the ids' blocks (blockhash.h), all ids kept: the
		 * answer's join them (engine.c chain_answer) */
		r->nchain = nids / IG_BLOCK_TOKENS;
		if (r->nchain && !(r->chain = malloc(r->nchain * sizeof(*r->chain))))
			abort();
		ig_block_chain_ids(ids, nids, r->chain, r->nchain);
		r->tokens = ids;
		r->ntokens = nids;
		ids = NULL;
	} else if (sim_conf_steps(s->conf)) {
		/* The prompt as blocks for the prefix cache (kvcache.h), and
		 * what is left of it, which the answer's text continues. */
		if (p.len >= IG_BLOCK_BYTES) {
			r->chain = malloc(p.len / IG_BLOCK_BYTES * sizeof(*r->chain));
			if (!r->chain)
				abort();
			r->nchain = ig_block_chain(p.data, p.len, r->chain, p.len / IG_BLOCK_BYTES);
		}
		if (s->conf->kv_events) { /* the token ids the KV events carry */
			r->tokens = malloc((r->nchain ? r->nchain : 1) * IG_BLOCK_TOKENS * sizeof(*r->tokens));
			if (!r->tokens)
				abort();
			sim_kv_text_tokens(p.data, r->nchain, r->tokens);
		}
		r->ntail = p.len % IG_BLOCK_BYTES;
		if (r->ntail)
			memcpy(r->tail, p.data + p.len - r->ntail, r->ntail);
	}
	free(ids);
	if (check_context(s, r->prompt_tokens, max_completion_tokens > 0 ? max_completion_tokens : max_tokens, e) < 0)
		goto out;
	long natural = s->conf->output_tokens > 0 ? s->conf->output_tokens : sim_text_natural_tokens(r->text_seed);
	long limit = max_tokens;
	if (max_completion_tokens > 0 && (limit == 0 || max_completion_tokens < limit))
		limit = max_completion_tokens;
	natural = natural > r->text_skip ? natural - r->text_skip : 0; /* what a prefill left of it */
	if (r->kind != SIM_RESPONSES && json_answer(r, root, natural, &natural, e) < 0)
		goto out;
	r->n_tokens = natural;
	if (limit > 0 && (natural > limit || (json_is_true(ieos) && !r->doc))) {
		/* ignore_eos: no end of sequence before the limit, which then
		 * ends it ("length") */
		r->n_tokens = limit;
		r->length_cut = true;
	}
	sim_text_start(&r->text, r->text_seed, r->text_skip);
	sim_text_doc(&r->text, r->doc, r->doc_len);
	ret = 0;
out:
	json_decref(root);
	ig_buf_free(&p);
	return ret;
}
