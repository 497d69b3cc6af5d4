/* Streaming responses (--stream): parse Server-Sent Events as they arrive,
 * note the first token (for TTFT), and rebuild the body a non-streaming
 * request would have returned, so OUTPUT has one shape. Text, finish reasons
 * and usage are kept; per-token extras (logprobs, tool call deltas) are not. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "bulk.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"

void ig_stream_init(struct ig_stream *s)
{
	memset(s, 0, sizeof(*s));
	ig_sse_init(&s->lines);
}

void ig_stream_free(struct ig_stream *s)
{
	ig_sse_free(&s->lines);
	json_decref(s->meta);
	json_decref(s->usage);
	json_decref(s->error);
	for (size_t i = 0; i < s->n_choices; i++) {
		ig_buf_free(&s->text[i]);
		json_decref(s->finish[i]);
	}
	free(s->text);
	free(s->finish);
	memset(s, 0, sizeof(*s));
}

static int ensure_choice(struct ig_stream *s, size_t idx)
{
	if (idx < s->n_choices)
		return 0;
	if (idx > 1024)
		return -1;
	struct ig_buf *t = realloc(s->text, (idx + 1) * sizeof(*t));
	if (!t)
		return -1;
	s->text = t;
	json_t **f = realloc(s->finish, (idx + 1) * sizeof(*f));
	if (!f)
		return -1;
	s->finish = f;
	for (size_t i = s->n_choices; i <= idx; i++) {
		ig_buf_init(&s->text[i]);
		s->finish[i] = NULL;
	}
	s->n_choices = idx + 1;
	return 0;
}

/* One `data:` payload. Returns 1 when it carried the first token. */
static int event(struct ig_stream *s, const char *p, size_t n)
{
	int first = 0;

	if (n == 6 && memcmp(p, "[DONE]", 6) == 0) {
		s->done = 1;
		return 0;
	}
	json_t *o = json_loadb(p, n, 0, NULL);
	if (!json_is_object(o)) {
		s->bad = 1;
		json_decref(o);
		return 0;
	}
	struct ig_oaerror e; /* {"error": {...}}, or SGLang's flat shape */
	int is_error = ig_oaerror_read(o, &e) == 0;
	ig_oaerror_clear(&e);
	if (is_error) {
		json_decref(s->error);
		s->error = json_incref(o);
		json_decref(o);
		return 0;
	}
	if (!s->meta) {
		s->meta = json_object();
		const char *keys[] = {"id", "created", "model", "system_fingerprint"};
		for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			json_t *v = json_object_get(o, keys[i]);
			if (v)
				json_object_set(s->meta, keys[i], v);
		}
	}
	json_t *choices = json_object_get(o, "choices");
	size_t i;
	json_t *c;
	json_array_foreach(choices, i, c) {
		json_t *jidx = json_object_get(c, "index");
		size_t idx = json_is_integer(jidx) && json_integer_value(jidx) >= 0
				     ? (size_t)json_integer_value(jidx) : i;
		if (ensure_choice(s, idx) < 0) {
			s->bad = 1;
			break;
		}
		json_t *t = json_object_get(json_object_get(c, "delta"), "content");
		if (!t)
			t = json_object_get(c, "text");
		if (json_is_string(t) && json_string_length(t) > 0) {
			ig_buf_append(&s->text[idx], json_string_value(t), json_string_length(t));
			if (!s->first_token)
				first = s->first_token = 1;
		}
		json_t *fr = json_object_get(c, "finish_reason");
		if (fr && !json_is_null(fr)) {
			json_decref(s->finish[idx]);
			s->finish[idx] = json_incref(fr);
		}
	}
	json_t *u = json_object_get(o, "usage");
	if (json_is_object(u)) {
		json_decref(s->usage);
		s->usage = json_incref(u);
	}
	json_decref(o);
	return first;
}

struct feed {
	struct ig_stream *s;
	int first;
};

static void on_data(void *arg, const char *p, size_t n, size_t line_len IG_UNUSED, size_t rest IG_UNUSED)
{
	struct feed *f = arg;
	if (!p)
		f->s->bad = 1; /* a chunk too long to read */
	else if (event(f->s, p, n))
		f->first = 1;
}

int ig_stream_feed(struct ig_stream *s, const char *p, size_t n)
{
	struct feed f = {s, 0};
	if (ig_sse_feed(&s->lines, p, n, on_data, &f) < 0)
		return -1;
	return f.first;
}

json_t *ig_stream_body(struct ig_stream *s, enum ig_endpoint ep, const char **err)
{
	if (s->error) {
		*err = "the stream carried an error event";
		return NULL;
	}
	if (s->bad) {
		*err = "the stream carried a chunk that is not JSON";
		return NULL;
	}
	if (!s->done) {
		*err = "the stream ended without data: [DONE]";
		return NULL;
	}
	json_t *b = json_object();
	json_t *m = s->meta;
	json_object_set(b, "id", m && json_object_get(m, "id") ? json_object_get(m, "id") : json_null());
	json_object_set_new(b, "object", json_string(ep == IG_EP_CHAT ? "chat.completion" : "text_completion"));
	if (m && json_object_get(m, "created"))
		json_object_set(b, "created", json_object_get(m, "created"));
	if (m && json_object_get(m, "model"))
		json_object_set(b, "model", json_object_get(m, "model"));
	if (m && json_object_get(m, "system_fingerprint"))
		json_object_set(b, "system_fingerprint", json_object_get(m, "system_fingerprint"));
	json_t *choices = json_array();
	for (size_t i = 0; i < s->n_choices; i++) {
		json_t *text = json_stringn(ig_buf_head(&s->text[i]), ig_buf_pending(&s->text[i]));
		if (!text) /* a token split a UTF-8 sequence badly: keep what is valid */
			text = json_string("");
		json_t *c = json_object();
		json_object_set_new(c, "index", json_integer((json_int_t)i));
		if (ep == IG_EP_CHAT)
			json_object_set_new(c, "message", json_pack("{s:s, s:o}", "role", "assistant", "content", text));
		else
			json_object_set_new(c, "text", text);
		json_object_set_new(c, "logprobs", json_null());
		json_object_set(c, "finish_reason", s->finish[i] ? s->finish[i] : json_null());
		json_array_append_new(choices, c);
	}
	json_object_set_new(b, "choices", choices);
	json_object_set(b, "usage", s->usage ? s->usage : json_null());
	return b;
}
