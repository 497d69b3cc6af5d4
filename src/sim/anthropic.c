/* Anthropic's Messages API in infergate-sim, as SGLang and vLLM serve it:
 * the request translated to a chat request (src/common/anthropic.c) that
 * the chat path then parses and generates, so a Message's text is the chat
 * route's text for the same conversation; the chat answer translated back
 * as the engine writes it. What differs between the two servers is taken
 * from their handlers:
 *   SGLang  sgl-project/sglang python/sglang/srt/entrypoints/anthropic/
 *           serving.py (AnthropicServing) and protocol.py: ids msg_<uuid
 *           hex>, fields dumped with exclude_none (no stop_sequence, usage
 *           with cache_read_input_tokens), a failure of the chat path 500
 *           internal_error "Internal processing error", or in a stream an
 *           `error` event (api_error "Stream processing error") after which
 *           the stream still ends with message_delta and message_stop.
 *   vLLM    vllm-project/vllm vllm/entrypoints/anthropic/serving.py
 *           (AnthropicServingMessages), protocol.py and api_router.py: the
 *           chat completion's id kept, events dumped with exclude_unset
 *           (message_start's message without type and role, message_delta
 *           with stop_reason alone), the chat path's errors as
 *           {"type": "error", "error": {"type": <its type>, "message"}}
 *           with their status (translate_error_response), a stream's error
 *           chunk an `error` event (internal_error) that ends the stream.
 * In both, a body the request models refuse (not JSON, a wrong type) gets
 * the framework's validation answer, in the server's OpenAI shape, as the
 * chat route's do; neither server reports stop_sequence. Not modelled:
 * tool calls (the simulator's chat path makes none, so a Message never has
 * tool_use blocks), and the servers' leniency: they ignore fields they do
 * not know, where the translation here refuses them as Anthropic's API
 * does. Not here: routing, MHD, the engine. */
#include "config.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "anthropic.h"
#include "infergate/anthropic.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "parse.h"

struct sim_anth {
	enum sim_flavor flavor;
	struct ig_anth_stream *st;
	struct ig_buf out;  /* translated stream bytes not yet read */
	char *model;        /* the request's model (SGLang's Message names it) */
	char msg_id[40];    /* SGLang: msg_ and a uuid4 hex */
	bool ended;         /* vLLM: an error event ended the stream */
	bool stream;        /* the request asked for a stream */
};

static char *dump(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!s)
		abort();
	return s;
}

static void answer(struct sim_anth_answer *a, unsigned status, char *body)
{
	a->status = status;
	a->body = body;
	a->ctype = "application/json";
}

/* The framework's validation answer (RequestValidationError), in the
 * server's OpenAI shape, as server.c's respond_error writes it. */
static void invalid(struct sim *s, const char *msg, struct sim_anth_answer *a)
{
	json_t *j;
	if (s->conf->flavor == SIM_FLAVOR_VLLM)
		j = json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", msg, "type", SIM_T_VALIDATION, "param",
			      "code", 400);
	else
		j = json_pack("{s:s, s:s, s:s, s:n, s:i}", "object", "error", "message", msg, "type", SIM_T_VALIDATION,
			      "param", "code", 400);
	answer(a, 400, dump(j));
}

/* Anthropic's error body with the given type (vLLM keeps the chat path's
 * type names; SGLang writes its own). */
static void anth_error(unsigned status, const char *type, const char *msg, struct sim_anth_answer *a)
{
	answer(a, status, ig_anth_error_json(status, type, msg));
}

/* The request body as JSON, or the validation answer. */
static json_t *load(struct sim *s, const char *body, size_t len, struct sim_anth_answer *a)
{
	json_error_t jerr;
	json_t *root = json_loadb(body ? body : "", len, 0, &jerr);
	if (!root) {
		char *msg = ig_strdupf("invalid JSON body: %s (line %d, column %d)", jerr.text, jerr.line, jerr.column);
		invalid(s, msg, a);
		free(msg);
	}
	return root;
}

struct sim_anth *sim_anth_begin(struct sim *s, struct ig_buf *body, struct sim_anth_answer *a)
{
	json_t *root = load(s, body->data, body->len, a), *chat;
	char *err = NULL;
	if (!root)
		return NULL;
	if (!(chat = ig_anth_to_chat(root, IG_ANTH_MESSAGES, &err))) {
		invalid(s, err, a);
		free(err);
		json_decref(root);
		return NULL;
	}
	struct sim_anth *x = calloc(1, sizeof(*x));
	if (!x)
		abort();
	x->flavor = s->conf->flavor;
	x->stream = json_is_true(json_object_get(chat, "stream"));
	x->model = strdup(json_string_value(json_object_get(root, "model")));
	memcpy(x->msg_id, "msg_", 4);
	ig_random_hex(x->msg_id + 4, 32);
	/* no stop sequences: neither server reports one (end_turn) */
	x->st = ig_anth_stream_new(x->model, NULL);
	if (!x->model || !x->st)
		abort();
	ig_buf_init(&x->out);
	char *text = dump(chat);
	ig_buf_reset(body);
	if (ig_buf_append(body, text, strlen(text)) < 0)
		abort();
	free(text);
	json_decref(root);
	return x;
}

void sim_anth_free(struct sim_anth *x)
{
	if (!x)
		return;
	ig_anth_stream_free(x->st);
	ig_buf_free(&x->out);
	free(x->model);
	free(x);
}

/* SGLang's stream after a failure of the chat path: the error chunk its
 * converter cannot read, then [DONE] (message_delta, message_stop; no
 * message_start, none having come). */
static const char SGLANG_FAILED_STREAM[] =
	"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Stream processing error\"}}\n\n"
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":"
	"{\"input_tokens\":0,\"output_tokens\":0,\"cache_read_input_tokens\":0}}\n\n"
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

void sim_anth_error(struct sim *s, struct sim_anth *x, unsigned status, const char *type, const char *msg,
		    struct sim_anth_answer *a)
{
	if (s->conf->flavor == SIM_FLAVOR_VLLM) {
		anth_error(status, type, msg, a);
	} else if (x->stream) {
		answer(a, 200, strdup(SGLANG_FAILED_STREAM));
		a->ctype = "text/event-stream";
	} else { /* _handle_non_streaming: an ORJSONResponse is no ChatCompletionResponse */
		anth_error(500, "internal_error", "Internal processing error", a);
	}
}

/* The servers' own fields, from the translation's Anthropic ones. */
static void flavor_event(struct sim_anth *x, struct sim_req *r, const char *name, json_t *data)
{
	bool vllm = x->flavor == SIM_FLAVOR_VLLM;
	if (strcmp(name, "message_start") == 0) {
		json_t *m = json_object_get(data, "message");
		if (vllm) { /* exclude_unset: the defaults type and role are left out;
			     * continuous_usage_stats: the first chunk's usage has the prompt */
			json_object_set_new(m, "id", json_string(r->id));
			json_object_set_new(json_object_get(m, "usage"), "input_tokens", json_integer(r->prompt_tokens));
			json_object_del(m, "type");
			json_object_del(m, "role");
		} else { /* exclude_none */
			json_object_set_new(m, "id", json_string(x->msg_id));
			json_object_set_new(m, "model", json_string(x->model));
			json_object_del(m, "stop_reason");
			json_object_del(m, "stop_sequence");
			json_object_set_new(json_object_get(m, "usage"), "cache_read_input_tokens", json_integer(0));
		}
	} else if (strcmp(name, "message_delta") == 0) {
		json_t *u = json_object_get(data, "usage");
		json_object_del(json_object_get(data, "delta"), "stop_sequence");
		if (vllm)
			json_object_del(u, "cache_read_input_tokens");
		else if (!json_object_get(u, "cache_read_input_tokens"))
			json_object_set_new(u, "cache_read_input_tokens", json_integer(0));
	}
}

static void write_events(struct sim_anth *x, struct sim_req *r, json_t *events)
{
	size_t i;
	json_t *ev;
	json_array_foreach(events, i, ev)
		flavor_event(x, r, json_string_value(json_object_get(ev, "event")), json_object_get(ev, "data"));
	if (ig_anth_sse_append(&x->out, events) < 0)
		abort();
}

/* One chat chunk (a `data:` payload) of the engine's. */
static void chunk(struct sim_anth *x, struct sim_req *r, const char *p, size_t n)
{
	json_t *events = json_array();
	if (n == 6 && memcmp(p, "[DONE]", 6) == 0) {
		ig_anth_stream_done(x->st, events);
	} else if (!x->ended) {
		json_t *c = json_loadb(p, n, 0, NULL);
		char *err = NULL;
		if (json_object_get(c, "error")) {
			/* the converters cannot read an error chunk as a chat chunk */
			if (x->flavor == SIM_FLAVOR_VLLM) {
				x->ended = true; /* the converter's except: one event, then the end */
				char *e = ig_anth_error_json(0, "internal_error",
							     "1 validation error for ChatCompletionStreamResponse");
				ig_buf_printf(&x->out, "event: error\ndata: %s\n\n", e);
				free(e);
			} else {
				ig_buf_printf(&x->out, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":"
						       "\"api_error\",\"message\":\"Stream processing error\"}}\n\n");
			}
		} else if (ig_anth_stream_feed(x->st, c, events, &err) < 0) {
			ig_anth_stream_fail(x->st, 500, err, events);
			free(err);
		}
		json_decref(c);
	}
	if (x->ended && x->flavor == SIM_FLAVOR_VLLM)
		json_array_clear(events);
	write_events(x, r, events);
	json_decref(events);
}

struct ig_buf *sim_anth_stream(struct sim_anth *x, struct sim_req *r)
{
	for (;;) {
		const char *head = ig_buf_head(&r->out);
		size_t n = ig_buf_pending(&r->out);
		const char *end = memmem(head, n, "\n\n", 2);
		if (!end)
			break;
		/* the event's data lines (the engine writes one each) */
		for (const char *line = head; line < end;) {
			const char *nl = memchr(line, '\n', (size_t)(end - line));
			const char *stop = nl ? nl : end;
			if ((size_t)(stop - line) >= 6 && memcmp(line, "data: ", 6) == 0)
				chunk(x, r, line + 6, (size_t)(stop - line) - 6);
			line = stop + 1;
		}
		ig_buf_consume(&r->out, (size_t)(end - head) + 2);
	}
	return &x->out;
}

void sim_anth_final(struct sim *s IG_UNUSED, struct sim_anth *x, struct sim_req *r, struct sim_anth_answer *a)
{
	json_t *c = json_loadb(ig_buf_head(&r->out), ig_buf_pending(&r->out), 0, NULL);
	char *err = NULL;
	json_t *m = ig_anth_from_chat(c, NULL, &err);
	json_t *cached = json_object_get(json_object_get(json_object_get(c, "usage"), "prompt_tokens_details"),
					 "cached_tokens");
	if (!m) {
		anth_error(500, "internal_error", err, a);
		free(err);
		json_decref(c);
		return;
	}
	json_object_del(m, "stop_sequence"); /* None: left out by both */
	json_t *u = json_object_get(m, "usage");
	if (x->flavor == SIM_FLAVOR_VLLM) { /* messages_full_converter: the chat id, no cache count */
		json_object_set(m, "id", json_object_get(c, "id"));
		json_object_del(u, "cache_read_input_tokens");
	} else { /* _convert_response: a new id, the cached count or 0 */
		json_object_set_new(m, "id", json_string(x->msg_id));
		json_object_set_new(u, "cache_read_input_tokens",
				    json_integer(json_is_integer(cached) ? json_integer_value(cached) : 0));
	}
	json_decref(c);
	answer(a, 200, dump(m));
}

void sim_anth_count_tokens(struct sim *s, const char *body, size_t len, struct sim_anth_answer *a)
{
	json_t *root = load(s, body, len, a), *chat;
	char *err = NULL;
	if (!root)
		return;
	chat = ig_anth_to_chat(root, IG_ANTH_COUNT_TOKENS, &err);
	json_decref(root);
	if (!chat) {
		invalid(s, err, a);
		free(err);
		return;
	}
	/* the prompt as the chat path reads and counts it (parse.c), the
	 * request then dropped */
	char *text = dump(chat);
	struct sim_req r;
	struct sim_perr e = {0, NULL, NULL, NULL};
	sim_engine_req_init(&r, SIM_CHAT);
	if (sim_parse_completion(s, &r, text, strlen(text), &e) < 0) {
		if (s->conf->flavor == SIM_FLAVOR_VLLM)
			anth_error(e.status, e.type, e.msg, a);
		else /* handle_count_tokens' except */
			anth_error(500, "internal_error", "Internal server error", a);
		free(e.msg);
	} else if (s->conf->flavor == SIM_FLAVOR_VLLM) {
		answer(a, 200, dump(json_pack("{s:I, s:{s:I}}", "input_tokens", (json_int_t)r.prompt_tokens,
					      "context_management", "original_input_tokens", (json_int_t)r.prompt_tokens)));
	} else {
		answer(a, 200, dump(json_pack("{s:I}", "input_tokens", (json_int_t)r.prompt_tokens)));
	}
	sim_engine_req_free(&r);
	free(text);
}
