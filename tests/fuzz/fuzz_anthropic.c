/* libFuzzer target: the Anthropic Messages translation (src/common/
 * anthropic.c), which reads clients' bodies and backends' answers. The
 * first byte picks what the rest is: 0 a Messages request, 1 a
 * count_tokens request, 2 a chat completion, 3 a chat stream (one chunk a
 * line as ig_anth_stream_data takes them, "[DONE]" the end), 4 a
 * backend's error body. Invariants: a request
 * gives a chat request or a message, never both or neither, and a chat
 * request has a model and messages; a stream's events start with
 * message_start (or are one error), blocks open and close in pairs with
 * the same index, and the end is message_stop or an error. */
#include "config.h"
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/anthropic.h"
#include "infergate/buf.h"

static void request(const uint8_t *p, size_t n, enum ig_anth_kind kind)
{
	json_t *req = json_loadb((const char *)p, n, JSON_DECODE_ANY, NULL);
	char *err = NULL;
	json_t *chat = ig_anth_to_chat(req, kind, &err);
	if ((chat == NULL) == (err == NULL))
		abort();
	if (chat && (!json_is_string(json_object_get(chat, "model")) ||
		     !json_is_array(json_object_get(chat, "messages"))))
		abort();
	char *s = chat ? json_dumps(chat, JSON_COMPACT) : NULL;
	if (chat && !s)
		abort(); /* the chat request must serialise */
	free(s);
	free(err);
	json_decref(chat);
	json_decref(req);
}

static void completion(const uint8_t *p, size_t n)
{
	json_t *c = json_loadb((const char *)p, n, JSON_DECODE_ANY, NULL);
	json_t *stops = json_pack("[s, s]", "END", "\n\n");
	char *err = NULL;
	json_t *m = ig_anth_from_chat(c, stops, &err);
	if ((m == NULL) == (err == NULL))
		abort();
	if (m && !json_is_array(json_object_get(m, "content")))
		abort();
	free(err);
	json_decref(m);
	json_decref(stops);
	json_decref(c);
}

static void check_order(json_t *events)
{
	long open = -1, next = 0;
	size_t i;
	json_t *ev;
	json_array_foreach(events, i, ev) {
		const char *name = json_string_value(json_object_get(ev, "event"));
		json_t *data = json_object_get(ev, "data");
		long idx = (long)json_integer_value(json_object_get(data, "index"));
		if (!name || !json_is_object(data))
			abort();
		if (i == 0 && strcmp(name, "message_start") != 0 && strcmp(name, "error") != 0)
			abort();
		if (strcmp(name, "content_block_start") == 0) {
			if (open != -1 || idx != next)
				abort();
			open = idx;
		} else if (strcmp(name, "content_block_delta") == 0) {
			if (open != idx)
				abort();
		} else if (strcmp(name, "content_block_stop") == 0) {
			if (open != idx)
				abort();
			open = -1;
			next++;
		} else if (strcmp(name, "message_stop") == 0 || strcmp(name, "error") == 0) {
			if (i + 1 != json_array_size(events))
				abort(); /* nothing after the end */
		}
	}
	const char *last = json_string_value(json_object_get(json_array_get(events, json_array_size(events) - 1),
							      "event"));
	if (!last || (strcmp(last, "message_stop") != 0 && strcmp(last, "error") != 0))
		abort();
}

static void stream(const uint8_t *p, size_t n)
{
	json_t *stops = json_pack("[s]", "END");
	struct ig_anth_stream *st = ig_anth_stream_new("m", stops);
	json_t *events = json_array();
	json_decref(stops);
	if (!st)
		abort();
	for (size_t off = 0; off < n;) {
		const uint8_t *nl = memchr(p + off, '\n', n - off);
		size_t len = nl ? (size_t)(nl - (p + off)) : n - off;
		ig_anth_stream_data(st, (const char *)p + off, len, events);
		off += len + 1;
	}
	ig_anth_stream_done(st, events);
	if (!ig_anth_stream_ended(st))
		abort();
	check_order(events);
	struct ig_buf b;
	ig_buf_init(&b);
	if (ig_anth_sse_append(&b, events) < 0)
		abort();
	ig_buf_free(&b);
	json_decref(events);
	ig_anth_stream_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	switch (data[0] % 5) {
	case 0: request(p, n, IG_ANTH_MESSAGES); break;
	case 1: request(p, n, IG_ANTH_COUNT_TOKENS); break;
	case 2: completion(p, n); break;
	case 3: stream(p, n); break;
	default: {
		char *s = ig_anth_error_from_backend(400 + data[0] % 200, (const char *)p, n);
		json_t *j = json_loads(s, 0, NULL);
		if (!json_is_object(json_object_get(j, "error")))
			abort();
		json_decref(j);
		free(s);
	}
	}
	return 0;
}
