/* Anthropic's Messages API over an OpenAI chat backend, its answer side
 * (a part of anthropic.c's module, anthropic.h): a chat completion into a
 * Message, a chat stream's chunks into Anthropic's events, and Anthropic's
 * error bodies. A backend's answer is read as loosely as the chat clients
 * read it: a member of the wrong type is taken as absent where that can
 * still give a Message, and is an error where it cannot. */
#include "config.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/anthropic.h"
#include "infergate/buf.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"

/* ---- a whole answer ---- */

/* "msg_" and the completion's id past its "chatcmpl-": the same answer
 * keeps one id across the two APIs, for logs. */
static char *message_id(const char *chat_id)
{
	if (!chat_id)
		chat_id = "";
	if (strncmp(chat_id, "chatcmpl-", 9) == 0)
		chat_id += 9;
	if (strncmp(chat_id, "msg_", 4) == 0)
		chat_id += 4;
	char *id = ig_strdupf("msg_%s", chat_id);
	if (!id)
		abort();
	return id;
}

/* The stop string the backend says it matched (vLLM's choice "stop_reason",
 * SGLang's "matched_stop"; a token id there is an end of sequence), when it
 * is one of the request's stop sequences. */
static const char *matched_stop(json_t *choice, json_t *stops)
{
	json_t *m = json_object_get(choice, "stop_reason");
	if (!json_is_string(m))
		m = json_object_get(choice, "matched_stop");
	if (!json_is_string(m) || !json_is_array(stops))
		return NULL;
	size_t i;
	json_t *s;
	json_array_foreach(stops, i, s)
		if (json_is_string(s) && json_equal(s, m))
			return json_string_value(m);
	return NULL;
}

/* Anthropic's stop_reason for a finish_reason (both servers' map:
 * stop -> end_turn, length -> max_tokens, tool_calls -> tool_use). */
static const char *stop_reason(const char *finish, const char *matched, bool tool_used)
{
	if (finish && strcmp(finish, "length") == 0)
		return "max_tokens";
	if (finish && strcmp(finish, "content_filter") == 0)
		return "refusal";
	if (tool_used || (finish && strcmp(finish, "tool_calls") == 0))
		return "tool_use";
	return matched ? "stop_sequence" : "end_turn";
}

/* usage: prompt_tokens, completion_tokens, cached_tokens. */
static json_t *usage_of(json_t *u, bool with_input)
{
	json_t *out = json_object();
	json_t *pt = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
	json_t *cached = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
	if (with_input)
		json_object_set_new(out, "input_tokens", json_integer(json_is_integer(pt) ? json_integer_value(pt) : 0));
	json_object_set_new(out, "output_tokens", json_integer(json_is_integer(ct) ? json_integer_value(ct) : 0));
	if (json_is_integer(cached))
		json_object_set(out, "cache_read_input_tokens", cached);
	return out;
}

/* A tool call's arguments as the tool_use input: a JSON object ("" is
 * none, as some servers send for a call without arguments). */
static json_t *tool_input(json_t *args)
{
	if (!json_is_string(args) || json_string_length(args) == 0)
		return json_is_object(args) ? json_incref(args) : json_object();
	json_t *in = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
	if (!json_is_object(in)) {
		json_decref(in);
		return NULL;
	}
	return in;
}

static char *chat_error(const char *what)
{
	char *e = ig_strdupf("the backend's answer is not a chat completion: %s", what);
	if (!e)
		abort();
	return e;
}

json_t *ig_anth_from_chat(json_t *completion, json_t *stop_sequences, char **err)
{
	json_t *choices = json_object_get(completion, "choices"), *choice = json_array_get(choices, 0);
	json_t *msg = json_object_get(choice, "message"), *id = json_object_get(completion, "id");
	json_t *model = json_object_get(completion, "model"), *content = json_object_get(msg, "content");
	json_t *calls = json_object_get(msg, "tool_calls"), *finish = json_object_get(choice, "finish_reason");
	size_t i;
	json_t *tc;

	*err = NULL;
	if (!json_is_object(completion) || !json_is_object(choice) || !json_is_object(msg)) {
		*err = chat_error("no choices[0].message");
		return NULL;
	}
	if (content && !json_is_null(content) && !json_is_string(content)) {
		*err = chat_error("message.content is not a string");
		return NULL;
	}
	if (calls && !json_is_null(calls) && !json_is_array(calls)) {
		*err = chat_error("message.tool_calls is not a list");
		return NULL;
	}
	char *mid = message_id(json_string_value(id));
	json_t *blocks = json_array();
	if (json_is_string(content) && json_string_length(content) > 0)
		json_array_append_new(blocks, json_pack("{s:s, s:O}", "type", "text", "text", content));
	json_array_foreach(calls, i, tc) {
		json_t *fn = json_object_get(tc, "function"), *tid = json_object_get(tc, "id");
		json_t *name = json_object_get(fn, "name");
		json_t *input = json_is_string(name) ? tool_input(json_object_get(fn, "arguments")) : NULL;
		if (!input) {
			*err = ig_strdupf("the backend's tool call %zu has %s", i,
					  json_is_string(name) ? "arguments that are not a JSON object" : "no name");
			free(mid);
			json_decref(blocks);
			return NULL;
		}
		char *gen = json_is_string(tid) ? NULL : ig_strdupf("toolu_%s_%zu", mid + 4, i);
		json_array_append_new(blocks, json_pack("{s:s, s:s, s:O, s:o}", "type", "tool_use", "id",
							gen ? gen : json_string_value(tid), "name", name, "input", input));
		free(gen);
	}
	const char *matched = json_is_string(finish) && strcmp(json_string_value(finish), "stop") == 0
				      ? matched_stop(choice, stop_sequences)
				      : NULL;
	const char *sr = stop_reason(json_string_value(finish), matched, json_array_size(calls) > 0);
	json_t *out = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", mid, "type", "message", "role",
				"assistant", "model", json_is_string(model) ? json_string_value(model) : "", "content",
				blocks, "stop_reason", sr, "stop_sequence",
				strcmp(sr, "stop_sequence") == 0 ? json_string(matched) : json_null(), "usage",
				usage_of(json_object_get(completion, "usage"), true));
	free(mid);
	return out;
}

/* ---- the stream ---- */

enum blk { BLK_NONE, BLK_TEXT, BLK_TOOL };

struct ig_anth_stream {
	char *model;
	json_t *stops;      /* the request's stop_sequences, or NULL */
	char *id;           /* the Message's id, from the first chunk */
	bool started;       /* message_start went out */
	bool ended;         /* message_stop or an error went out */
	enum blk open;      /* the block open now */
	long index;         /* its index, or the next block's when none is open */
	long tool;          /* the chat tool call index of an open tool block */
	json_t *tools_seen; /* chat tool call indexes given a block, as keys */
	char *finish;       /* the finish_reason, when one came */
	char *matched;      /* the stop string matched, when the backend said */
	json_t *usage;      /* the last usage object seen */
	long input_hint;    /* the prompt's tokens as the caller counted them, or -1 */
	bool tool_used;
};

struct ig_anth_stream *ig_anth_stream_new(const char *model, json_t *stop_sequences)
{
	struct ig_anth_stream *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->model = strdup(model ? model : "");
	st->tools_seen = json_object();
	if (!st->model || !st->tools_seen) {
		ig_anth_stream_free(st);
		return NULL;
	}
	st->stops = json_incref(stop_sequences);
	st->input_hint = -1;
	return st;
}

void ig_anth_stream_input_tokens(struct ig_anth_stream *st, long n)
{
	st->input_hint = n;
}

void ig_anth_stream_free(struct ig_anth_stream *st)
{
	if (!st)
		return;
	free(st->model);
	free(st->id);
	free(st->finish);
	free(st->matched);
	json_decref(st->stops);
	json_decref(st->tools_seen);
	json_decref(st->usage);
	free(st);
}

bool ig_anth_stream_ended(const struct ig_anth_stream *st)
{
	return st->ended;
}

static void emit(json_t *events, const char *name, json_t *data)
{
	json_array_append_new(events, json_pack("{s:s, s:o}", "event", name, "data", data));
}

static void start(struct ig_anth_stream *st, json_t *events)
{
	if (st->started)
		return;
	st->started = true;
	if (!st->id)
		st->id = message_id(NULL);
	json_t *pt = json_object_get(st->usage, "prompt_tokens");
	json_int_t in = json_is_integer(pt) ? json_integer_value(pt) : st->input_hint > 0 ? st->input_hint : 0;
	json_t *u = json_pack("{s:I, s:i}", "input_tokens", in, "output_tokens", 0);
	emit(events, "message_start",
	     json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type", "message_start", "message", "id",
		       st->id, "type", "message", "role", "assistant", "model", st->model, "content", "stop_reason",
		       "stop_sequence", "usage", u));
}

static void close_block(struct ig_anth_stream *st, json_t *events)
{
	if (st->open == BLK_NONE)
		return;
	emit(events, "content_block_stop",
	     json_pack("{s:s, s:I}", "type", "content_block_stop", "index", (json_int_t)st->index));
	st->open = BLK_NONE;
	st->index++;
}

static void delta(struct ig_anth_stream *st, json_t *events, json_t *d)
{
	emit(events, "content_block_delta",
	     json_pack("{s:s, s:I, s:o}", "type", "content_block_delta", "index", (json_int_t)st->index, "delta", d));
}

static void text(struct ig_anth_stream *st, json_t *events, json_t *s)
{
	if (st->open != BLK_TEXT) {
		close_block(st, events);
		emit(events, "content_block_start",
		     json_pack("{s:s, s:I, s:{s:s, s:s}}", "type", "content_block_start", "index", (json_int_t)st->index,
			       "content_block", "type", "text", "text", ""));
		st->open = BLK_TEXT;
	}
	delta(st, events, json_pack("{s:s, s:O}", "type", "text_delta", "text", s));
}

/* One entry of a chunk's delta.tool_calls: a new call opens a tool_use
 * block; its arguments go out as input_json_delta as they come. A call's
 * arguments after another block began cannot be placed (Anthropic's blocks
 * do not interleave): an error, which no server here makes. */
static int tool_delta(struct ig_anth_stream *st, json_t *events, json_t *tc, size_t pos, char **err)
{
	json_t *idx = json_object_get(tc, "index"), *fn = json_object_get(tc, "function");
	json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
	json_t *id = json_object_get(tc, "id");
	long k = json_is_integer(idx) ? (long)json_integer_value(idx) : (long)pos;
	char key[32];

	if (!json_is_object(tc) || (fn && !json_is_null(fn) && !json_is_object(fn)) ||
	    (args && !json_is_null(args) && !json_is_string(args))) {
		*err = chat_error("a tool call delta of the wrong shape");
		return -1;
	}
	snprintf(key, sizeof(key), "%ld", k);
	if (st->open != BLK_TOOL || st->tool != k) {
		if (json_object_get(st->tools_seen, key)) {
			*err = ig_strdupf("the backend streamed tool call %ld's arguments after another block began", k);
			return -1;
		}
		close_block(st, events);
		char *gen = json_is_string(id) ? NULL : ig_strdupf("toolu_%s_%ld", st->id + 4, k);
		emit(events, "content_block_start",
		     json_pack("{s:s, s:I, s:{s:s, s:s, s:s, s:{}}}", "type", "content_block_start", "index",
			       (json_int_t)st->index, "content_block", "type", "tool_use", "id",
			       gen ? gen : json_string_value(id), "name", json_is_string(name) ? json_string_value(name) : "",
			       "input"));
		free(gen);
		json_object_set_new(st->tools_seen, key, json_true());
		st->open = BLK_TOOL;
		st->tool = k;
		st->tool_used = true;
	}
	if (json_is_string(args) && json_string_length(args) > 0)
		delta(st, events, json_pack("{s:s, s:O}", "type", "input_json_delta", "partial_json", args));
	return 0;
}

static void set_str(char **slot, const char *v)
{
	free(*slot);
	*slot = v ? strdup(v) : NULL;
}

/* An error chunk in any server's shape: {"error": {...}} (vLLM, OpenAI,
 * SGLang's nested one) or SGLang's flat {"object": "error", ...}. */
static bool error_chunk(json_t *chunk, unsigned *status, const char **msg)
{
	json_t *e = json_object_get(chunk, "error");
	if (!e && json_is_string(json_object_get(chunk, "object")) &&
	    strcmp(json_string_value(json_object_get(chunk, "object")), "error") == 0)
		e = chunk;
	if (!e)
		return false;
	json_t *code = json_object_get(e, "code"), *m = json_object_get(e, "message");
	*status = json_is_integer(code) && json_integer_value(code) >= 400 && json_integer_value(code) < 600
			  ? (unsigned)json_integer_value(code)
			  : 500;
	*msg = json_is_string(m) ? json_string_value(m) : json_is_string(e) ? json_string_value(e) : "backend error";
	return true;
}

int ig_anth_stream_feed(struct ig_anth_stream *st, json_t *chunk, json_t *events, char **err)
{
	unsigned status;
	const char *emsg;

	*err = NULL;
	if (st->ended)
		return 0;
	if (!json_is_object(chunk)) {
		*err = chat_error("a chunk that is not an object");
		return -1;
	}
	if (error_chunk(chunk, &status, &emsg)) {
		ig_anth_stream_fail(st, status, emsg, events);
		return 0;
	}
	json_t *choices = json_object_get(chunk, "choices"), *u = json_object_get(chunk, "usage");
	if (!json_is_array(choices)) {
		*err = chat_error("a chunk without choices");
		return -1;
	}
	if (json_is_object(u)) {
		json_decref(st->usage);
		st->usage = json_incref(u);
	}
	if (!st->started) {
		json_t *id = json_object_get(chunk, "id"), *model = json_object_get(chunk, "model");
		st->id = message_id(json_string_value(id));
		if (json_is_string(model))
			set_str(&st->model, json_string_value(model));
		start(st, events);
	}
	json_t *choice = json_array_get(choices, 0);
	if (!choice)
		return 0; /* the usage chunk */
	json_t *ci = json_object_get(choice, "index");
	if (!json_is_object(choice)) {
		*err = chat_error("a choice that is not an object");
		return -1;
	}
	if (json_is_integer(ci) && json_integer_value(ci) != 0)
		return 0; /* n > 1: the Message is choice 0 */
	json_t *d = json_object_get(choice, "delta"), *content = json_object_get(d, "content");
	json_t *calls = json_object_get(d, "tool_calls"), *finish = json_object_get(choice, "finish_reason");
	if ((d && !json_is_null(d) && !json_is_object(d)) || (content && !json_is_null(content) && !json_is_string(content)) ||
	    (calls && !json_is_null(calls) && !json_is_array(calls))) {
		*err = chat_error("a delta of the wrong shape");
		return -1;
	}
	if (json_is_string(content) && json_string_length(content) > 0)
		text(st, events, content);
	size_t i;
	json_t *tc;
	json_array_foreach(calls, i, tc)
		if (tool_delta(st, events, tc, i, err) < 0)
			return -1;
	if (json_is_string(finish)) {
		set_str(&st->finish, json_string_value(finish));
		const char *m = matched_stop(choice, st->stops);
		if (m)
			set_str(&st->matched, m);
	}
	return 0;
}

void ig_anth_stream_done(struct ig_anth_stream *st, json_t *events)
{
	if (st->ended)
		return;
	start(st, events);
	close_block(st, events);
	const char *m = st->finish && strcmp(st->finish, "stop") == 0 ? st->matched : NULL;
	const char *sr = stop_reason(st->finish, m, st->tool_used);
	emit(events, "message_delta",
	     json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason", sr,
		       "stop_sequence", strcmp(sr, "stop_sequence") == 0 ? json_string(m) : json_null(), "usage",
		       usage_of(st->usage, true)));
	emit(events, "message_stop", json_pack("{s:s}", "type", "message_stop"));
	st->ended = true;
}


void ig_anth_stream_fail(struct ig_anth_stream *st, unsigned status, const char *message, json_t *events)
{
	if (st->ended)
		return;
	emit(events, "error",
	     json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", ig_anth_error_type(status), "message",
		       ig_oaerror_string(message ? message : "")));
	st->ended = true;
}

void ig_anth_stream_data(struct ig_anth_stream *st, const char *data, size_t len, json_t *events)
{
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
		ig_anth_stream_done(st, events);
		return;
	}
	json_error_t jerr;
	json_t *c = json_loadb(data ? data : "", len, 0, &jerr);
	char *err = NULL;
	if (!c)
		err = ig_strdupf("the backend's stream has a chunk that is not JSON: %s", jerr.text);
	else
		ig_anth_stream_feed(st, c, events, &err);
	if (err)
		ig_anth_stream_fail(st, 502, err, events);
	free(err);
	json_decref(c);
}

int ig_anth_sse_append(struct ig_buf *out, json_t *events)
{
	size_t i;
	json_t *ev;
	json_array_foreach(events, i, ev) {
		char *data = json_dumps(json_object_get(ev, "data"), JSON_COMPACT);
		if (!data)
			return -1;
		int rc = ig_buf_printf(out, "event: %s\ndata: %s\n\n", json_string_value(json_object_get(ev, "event")),
				       data);
		free(data);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* ---- errors ---- */

const char *ig_anth_error_type(unsigned status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 402: return "billing_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 413: return "request_too_large";
	case 429: return "rate_limit_error";
	/* Anthropic's reference lists no 503; its SDK calls it
	 * ServiceUnavailableError, and the type that says "temporarily not
	 * serving, retry" is 529's */
	case 503:
	case 529: return "overloaded_error";
	case 504: return "timeout_error";
	default:  return status >= 500 ? "api_error" : "invalid_request_error";
	}
}


char *ig_anth_error_json(unsigned status, const char *type, const char *message)
{
	json_t *j = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type",
			      type ? type : ig_anth_error_type(status), "message", ig_oaerror_string(message ? message : ""));
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		abort();
	return s;
}

char *ig_anth_error_from_backend(unsigned status, const char *body, size_t len)
{
	json_t *root = json_loadb(body ? body : "", len, 0, NULL);
	struct ig_oaerror e = {0};
	char *out;
	if (root && ig_oaerror_read(root, &e) == 0 && e.message) {
		out = ig_anth_error_json(status, NULL, json_string_value(e.message));
	} else {
		/* a body that is not an error we know: its text, NUL-free */
		char *text = strndup(body ? body : "", len);
		if (!text)
			abort();
		out = ig_anth_error_json(status, NULL, text);
		free(text);
	}
	ig_oaerror_clear(&e);
	json_decref(root);
	return out;
}
