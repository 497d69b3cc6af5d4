/* The relay (relay.h): curl's callbacks, SSE events read and rewritten,
 * libmicrohttpd's content reader. Lock-free by construction: it touches its
 * struct ig_relay, the backend's atomics, and asks the rest of its request
 * through ops.
 * Not here: starting or ending attempts, the answer's headers (proxy.c). */
#include "config.h"
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/routes.h"
#include "infergate/anthropic.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "path/relay.h"

/* A streaming response may hold this much for a slow client before the
 * upstream transfer is paused; it is resumed below the low mark. */
#define STREAM_HIGH_WATER (256 * 1024)
#define STREAM_LOW_WATER (64 * 1024)
/* A non-streamed upstream body larger than this is refused (502). */
#define MAX_BUFFERED_BODY (256L * 1024 * 1024)

static size_t on_header(char *buf, size_t size, size_t nitems, void *userdata);
static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata);
static void usage_from_json(struct ig_relay *r, const char *text, size_t len);

void ig_relay_init(struct ig_relay *r, const struct ig_relay_ops *ops)
{
	memset(r, 0, sizeof(*r));
	r->ops = ops;
	ig_buf_init(&r->up_headers);
	ig_buf_init(&r->resp);
	ig_sse_init(&r->lines);
	r->prompt_tokens = r->completion_tokens = -1;
	ig_cont_init(&r->cont, 0);
}

void ig_relay_free(struct ig_relay *r)
{
	ig_buf_free(&r->up_headers);
	ig_buf_free(&r->resp);
	ig_sse_free(&r->lines);
	free(r->stream_error_msg);
	r->stream_error_msg = NULL;
	ig_cont_free(&r->cont);
	ig_anth_stream_free(r->xlate_stream);
	r->xlate_stream = NULL;
	free(r->xlate_model);
	r->xlate_model = NULL;
	json_decref(r->xlate_stop);
	r->xlate_stop = NULL;
}

void ig_relay_attempt(struct ig_relay *r, struct ig_xfer *x, struct ig_backend *b)
{
	r->xfer = x;
	r->backend = b;
	r->up_status = 0;
	r->headers_done = false;
	r->paused = false;
	r->skip_blank = false;
	ig_buf_reset(&r->up_headers);
	if (r->committed) /* a continuation: what came whole still goes out */
		r->resp.len = r->resp.off + r->ready;
	else
		ig_buf_reset(&r->resp);
	ig_sse_reset(&r->lines);
	if (!r->committed)
		r->ready = 0;
	r->stream_error = 0;
	free(r->stream_error_msg);
	r->stream_error_msg = NULL;
	if (r->xlate && r->stream && !r->committed) { /* translated from the attempt's first chunk */
		ig_anth_stream_free(r->xlate_stream);
		if (!(r->xlate_stream = ig_anth_stream_new(r->xlate_model, r->xlate_stop)))
			abort();
		if (r->xlate_input >= 0)
			ig_anth_stream_input_tokens(r->xlate_stream, r->xlate_input);
	}
	r->last_io_ms = ig_now_ms();
	curl_easy_setopt(x->easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(x->easy, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, r);
}

void ig_relay_whole_body(struct ig_relay *r)
{
	if (ig_relay_streaming(r) || r->up_status < 200 || r->up_status >= 300 || !r->resp.len)
		return;
	usage_from_json(r, r->resp.data, r->resp.len);
	if (r->store && !r->stored) {
		json_t *o = json_loadb(r->resp.data, r->resp.len, 0, NULL);
		r->ops->stored(r, o);
		r->stored = true;
		json_decref(o);
	}
}

int ig_relay_hop_by_hop(const char *name, size_t n)
{
	static const char *const names[] = {"connection", "keep-alive", "proxy-connection",
		"proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
		"transfer-encoding", "upgrade", "content-length", "host", "expect",
		"accept-encoding", "x-request-id", "date"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == n && strncasecmp(name, names[i], n) == 0)
			return 1;
	return 0;
}

/* curl's header callback (and on_body, its write callback): with the lock
 * let go (relay.h). */
static size_t on_header(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct ig_relay *r = userdata;
	size_t n = size * nitems;

	r->last_io_ms = ig_now_ms();
	atomic_store(&r->backend->last_io_ms, r->last_io_ms);
	if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		const char *sp = memchr(buf, ' ', n);
		r->up_status = sp ? strtol(sp + 1, NULL, 10) : 0;
		ig_buf_reset(&r->up_headers);
		r->headers_done = false;
		return n;
	}
	if (n <= 2 && (buf[0] == '\r' || buf[0] == '\n')) {
		if (r->up_status >= 200)
			r->headers_done = true;
		return n;
	}
	const char *colon = memchr(buf, ':', n);
	if (!colon || colon == buf)
		return n;
	size_t nlen = (size_t)(colon - buf);
	if (ig_relay_hop_by_hop(buf, nlen))
		return n;
	const char *v = colon + 1, *end = buf + n;
	while (v < end && (*v == ' ' || *v == '\t'))
		v++;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ' || end[-1] == '\t'))
		end--;
	/* Header values go to MHD: no CR or LF may survive (STYLE.md pitfall). */
	for (const char *p = v; p < end; p++)
		if (*p == '\r' || *p == '\n')
			return n;
	ig_buf_append(&r->up_headers, buf, nlen);
	ig_buf_append(&r->up_headers, "", 1);
	ig_buf_append(&r->up_headers, v, (size_t)(end - v));
	ig_buf_append(&r->up_headers, "", 1);
	return n;
}

/* Takes prompt/completion tokens from a "usage" object, if it has them. */
static void take_usage(struct ig_relay *r, json_t *usage)
{
	json_t *p = json_object_get(usage, "prompt_tokens"), *c = json_object_get(usage, "completion_tokens");
	if (!p && !c) { /* the Responses API's names */
		p = json_object_get(usage, "input_tokens");
		c = json_object_get(usage, "output_tokens");
	}
	if (json_is_integer(p))
		r->prompt_tokens = (long)json_integer_value(p);
	if (json_is_integer(c))
		r->completion_tokens = (long)json_integer_value(c);
}

/* Parses only the value of the last "usage" key (or the route's: SGLang's
 * native "meta_info"), not the whole answer: it
 * was a tenth of the gateway's CPU on short completions and grows with the
 * text. "usage" comes last at the top level in OpenAI, SGLang and vLLM
 * answers. The quoted key followed by ':' cannot occur inside a JSON
 * string, where quotes are escaped; jansson parses the value. */
static void usage_from_json(struct ig_relay *r, const char *text, size_t len)
{
	int where = r->usage_where;
	if (where == IG_USAGE_NONE)
		return;
	const char *key = where == IG_USAGE_META_INFO ? "\"meta_info\"" : "\"usage\"";
	size_t kn = strlen(key);
	const char *end = text + len, *value = NULL;
	for (const char *p = text; (p = memmem(p, (size_t)(end - p), key, kn)); ) {
		p += kn;
		while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
			p++;
		if (p < end && *p == ':')
			value = ++p;
	}
	if (!value)
		return;
	json_t *usage = json_loadb(value, (size_t)(end - value), JSON_DISABLE_EOF_CHECK, NULL);
	if (json_is_object(usage))
		take_usage(r, usage);
	json_decref(usage);
}

/* Replaces the n bytes that end `tail` bytes before the end of b with w
 * (wn bytes). Positions counted from the end survive a reserve()'s move.
 * Returns 0 or -1 (b unchanged). */
static int buf_replace_back(struct ig_buf *b, size_t tail, size_t n, const char *w, size_t wn)
{
	char *saved = malloc(tail + 1);
	if (!saved)
		return -1;
	if (tail)
		memcpy(saved, b->data + b->len - tail, tail);
	b->len -= tail + n;
	int rc = ig_buf_append(b, w, wn) < 0 || ig_buf_append(b, saved, tail) < 0 ? -1 : 0;
	free(saved);
	return rc;
}

/* An error event in a stream that was answered 200: SGLang and vLLM send
 * `data: {"error": {...}}` then `data: [DONE]` when a request fails after
 * the headers went out (SGLang's serving_base.py
 * create_streaming_error_response). The request failed: it is counted and
 * logged as the error's status, not as the 200. An event in SGLang's flat
 * shape is rewritten into OpenAI's, which is what OpenAI clients look for.
 * Returns the rewritten payload (malloc'd) or NULL. */
static char *stream_error(struct ig_relay *r, const char *payload, size_t len)
{
	json_t *o = json_loadb(payload, len, 0, NULL);
	struct ig_oaerror e;
	char *rewritten = NULL;

	if (ig_oaerror_read(o, &e) == 0) {
		unsigned st = ig_oaerror_status(&e);
		r->stream_error = st ? st : 500;
		free(r->stream_error_msg);
		r->stream_error_msg = strdup(json_string_value(e.message));
		/* a Responses API error event keeps its own shape */
		if (!e.nested && !r->responses && !r->anthropic)
			rewritten = ig_oaerror_to_json(&e, r->stream_error);
	}
	ig_oaerror_clear(&e);
	json_decref(o);
	return rewritten;
}

/* Streams carry usage in one event (the last before [DONE] with
 * include_usage, or on the final chunk with vLLM's continuous usage), and
 * may carry an error event. Only a data line that names "usage" or "error"
 * is parsed, and of "usage" only its value. */
struct scan {
	struct ig_relay *r;
	size_t changed; /* lowest pending position a rewrite changed, or SIZE_MAX */
	size_t cut;     /* the pending bytes end here (a dropped error event and all
			 * after it), or SIZE_MAX */
};

/* The usage event a stream ends with when include_usage is set: no
 * choices, a usage object (SGLang serving_chat.py and vLLM serving_chat.py
 * both send {"id", "object", "created", "model", "choices": [], "usage"}). */
static bool is_usage_event(const char *d, size_t dn)
{
	if (!memmem(d, dn, "\"usage\"", 7))
		return false;
	json_t *o = json_loadb(d, dn, 0, NULL);
	json_t *ch = json_object_get(o, "choices");
	bool yes = json_is_object(json_object_get(o, "usage")) && (!ch || (json_is_array(ch) && json_array_size(ch) == 0));
	json_decref(o);
	return yes;
}

#define USAGE_NULL ",\"usage\":null"

/* An event taken out whole: its line, its LF and the blank line after it
 * (now or when it arrives: skip_blank). Returns the lowest position
 * changed, or SIZE_MAX. */
static size_t drop_event(struct ig_relay *r, size_t line_len, size_t rest)
{
	struct ig_buf *b = &r->resp;
	const char *after = b->data + b->len - rest;
	size_t blank = rest >= 1 && after[0] == '\n' ? 1 : rest >= 2 && after[0] == '\r' && after[1] == '\n' ? 2 : 0;
	if (!blank)
		r->skip_blank = true;
	if (buf_replace_back(b, rest - blank, line_len + 1 + blank, "", 0) < 0)
		return SIZE_MAX;
	return ig_buf_pending(b) - (rest - blank);
}

/* What include_usage added, taken out again for a client that did not ask
 * for it: the usage event (the line, its LF and the blank line after it,
 * now or when it arrives: skip_blank), or the "usage": null member that
 * OpenAI puts on every other chunk (SGLang and vLLM omit it). The line ends
 * `rest` bytes before the end of r->resp; returns the lowest position
 * changed, or SIZE_MAX. */
static size_t hide_usage(struct ig_relay *r, const char *d, size_t dn, size_t line_len, size_t rest)
{
	struct ig_buf *b = &r->resp;
	size_t nul = sizeof(USAGE_NULL) - 1;
	if (is_usage_event(d, dn))
		return drop_event(r, line_len, rest);
	if (dn > nul && d[dn - 1] == '}' && memcmp(d + dn - 1 - nul, USAGE_NULL, nul) == 0) {
		/* after the member: '}', the CR if any, the LF, then rest */
		const char *lf = b->data + b->len - rest - 1;
		size_t cr = lf - b->data >= 1 && lf[-1] == '\r' ? 1 : 0;
		size_t tail = 1 + cr + 1 + rest;
		if (buf_replace_back(b, tail, nul, "", 0) < 0)
			return SIZE_MAX;
		return ig_buf_pending(b) - tail;
	}
	return SIZE_MAX;
}

static void changed_at(struct scan *sc, size_t at)
{
	if (at < sc->changed)
		sc->changed = at;
}

/* A continuation's event in the first attempt's name, or dropped (cont.h);
 * *d, *dn, *line_len then describe what stands in its place. Returns the
 * new line (free it after) or NULL; *dropped when it is gone. */
static char *continuation_event(struct scan *sc, const char **d, size_t *dn, size_t *line_len, size_t rest,
				bool *dropped)
{
	struct ig_relay *r = sc->r;
	char *ev, *w = NULL;
	*dropped = false;
	switch (ig_cont_event(&r->cont, *d, *dn, &ev)) {
	case IG_CONT_DROP:
		changed_at(sc, drop_event(r, *line_len, rest));
		*dropped = true;
		break;
	case IG_CONT_REWRITE:
		w = ig_strdupf("data: %s", ev);
		free(ev);
		if (buf_replace_back(&r->resp, rest + 1, *line_len, w, strlen(w)) < 0) {
			free(w);
			return NULL;
		}
		*line_len = strlen(w);
		changed_at(sc, ig_buf_pending(&r->resp) - rest - 1 - *line_len);
		*d = w + 6;
		*dn = *line_len - 6;
		break;
	case IG_CONT_KEEP:
		break;
	}
	return w;
}

/* A chat stream's data line in its place as Anthropic's events (xlate.h):
 * the chunk's usage read first, then the line replaced by the events it
 * makes ("event: NAME\ndata: JSON" blocks; the last one's blank line is
 * the line's own), or taken out with its blank line when it makes none.
 * The translator ends the stream at [DONE] (message_delta, message_stop)
 * and turns an error chunk into Anthropic's error event. */
static void translated_event(struct scan *sc, const char *d, size_t dn, size_t line_len, size_t rest)
{
	struct ig_relay *r = sc->r;
	struct ig_buf ev;
	ig_buf_init(&ev);
	usage_from_json(r, d, dn);
	if (memmem(d, dn, "\"error\"", 7)) /* the status and message it ends with, for the log */
		free(stream_error(r, d, dn));
	json_t *events = json_array();
	if (!events)
		abort();
	ig_anth_stream_data(r->xlate_stream, d, dn, events);
	if (json_array_size(events) > 0)
		r->ops->event(r);
	if (ig_anth_sse_append(&ev, events) < 0)
		abort();
	json_decref(events);
	if (ev.len < 2) {
		changed_at(sc, drop_event(r, line_len, rest));
	} else if (buf_replace_back(&r->resp, rest + 1, line_len, ev.data, ev.len - 2) == 0) {
		changed_at(sc, ig_buf_pending(&r->resp) - rest - 1 - (ev.len - 2));
	}
	ig_buf_free(&ev);
}

static void on_sse_data(void *arg, const char *d, size_t dn, size_t line_len, size_t rest)
{
	struct scan *sc = arg;
	struct ig_relay *r = sc->r;
	r->sse_events++;
	if (!d || r->cont.broken)
		return; /* longer than IG_SSE_MAX_LINE: relayed, not read; or dropped below */
	if (r->xlate_stream) {
		translated_event(sc, d, dn, line_len, rest);
		return;
	}
	bool dropped = false;
	char *w = r->cont.max > 0 ? continuation_event(sc, &d, &dn, &line_len, rest, &dropped) : NULL;
	if (dropped)
		return;
	usage_from_json(r, d, dn); /* finds "usage" or returns */
	if (r->store && !r->stored && memmem(d, dn, "\"response.created\"", 18)) {
		json_t *o = json_loadb(d, dn, 0, NULL);
		r->ops->stored(r, json_object_get(o, "response")); /* takes the lock */
		r->stored = true;
		json_decref(o);
	}
	r->ops->event(r);
	if (r->usage_added && r->sse) {
		size_t at = hide_usage(r, d, dn, line_len, rest);
		changed_at(sc, at);
		if (at != SIZE_MAX)
			goto out;
	}
	char *fixed = memmem(d, dn, "\"error\"", 7) ? stream_error(r, d, dn) : NULL;
	if (r->stream_error >= 500 && r->committed && r->sse && ig_cont_possible(&r->cont)) {
		/* A backend's failure mid-stream: this event and all after it
		 * dropped, the stream continued elsewhere (proxy.c). */
		r->cont.broken = true;
		sc->cut = ig_buf_pending(&r->resp) - rest - 1 - line_len;
		free(fixed);
		goto out;
	}
	if (fixed && r->sse) {
		/* The line ends at its LF, rest + 1 bytes before the end of resp. */
		size_t tail = rest + 1;
		char *ev = ig_strdupf("data: %s", fixed);
		if (buf_replace_back(&r->resp, tail, line_len, ev, strlen(ev)) == 0)
			changed_at(sc, ig_buf_pending(&r->resp) - tail - strlen(ev));
		free(ev);
	}
	free(fixed);
out:
	free(w);
}

/* p..n were just appended to r->resp. Returns the lowest position (in
 * r->resp's pending bytes) that a rewritten event changed, or SIZE_MAX. */
static size_t scan_sse(struct ig_relay *r, const char *p, size_t n)
{
	struct scan sc = {r, SIZE_MAX, SIZE_MAX};
	ig_sse_feed(&r->lines, p, n, on_sse_data, &sc);
	if (sc.cut != SIZE_MAX) {
		r->resp.len = r->resp.off + sc.cut;
		r->skip_blank = false;
		changed_at(&sc, sc.cut);
	}
	return sc.changed;
}

/* The value of a header relayed from the backend, or NULL. */
const char *ig_relay_header(const struct ig_relay *r, const char *name)
{
	const char *p = r->up_headers.data, *end = p + r->up_headers.len;
	while (p && p < end) {
		const char *n = p, *v = n + strlen(n) + 1;
		if (strcasecmp(n, name) == 0)
			return v;
		p = v + strlen(v) + 1;
	}
	return NULL;
}

/* SSE events are relayed whole: bytes up to the last blank line are ready,
 * a partial event waits for its end. If the backend dies mid-event, the
 * client then gets whole events and an error event, never a torn one glued
 * to the error. Other streamed bodies are relayed as they come. */
static void mark_ready(struct ig_relay *r, size_t scanned_before)
{
	size_t pending = ig_buf_pending(&r->resp);
	if (!r->sse) {
		r->ready = pending;
		return;
	}
	const char *h = ig_buf_head(&r->resp);
	size_t from = scanned_before > 2 ? scanned_before - 2 : 0;
	for (size_t i = pending; i-- > from + 1;) {
		if (h[i] == '\n' && (h[i - 1] == '\n' || (h[i - 1] == '\r' && i >= 2 && h[i - 2] == '\n'))) {
			if (i + 1 > r->ready)
				r->ready = i + 1;
			return;
		}
	}
}

/* n more bytes of a stream: kept (less what hide_usage takes out), read
 * for usage and error events, and what ends whole events marked ready.
 * Returns 0 or -1 (out of memory). */
static int append_stream(struct ig_relay *r, const char *ptr, size_t n)
{
	size_t before = ig_buf_pending(&r->resp), skip = 0;
	if (r->skip_blank) { /* the end of a usage event taken out */
		skip = n >= 1 && ptr[0] == '\n' ? 1 : n >= 2 && ptr[0] == '\r' && ptr[1] == '\n' ? 2 : 0;
		r->skip_blank = false;
	}
	if (ig_buf_append(&r->resp, ptr + skip, n - skip) < 0)
		return -1;
	size_t changed = scan_sse(r, ptr, n);
	mark_ready(r, changed < before ? changed : before);
	return 0;
}

/* The whole events ready for the client, consumed unread. */
static void drop_ready(struct ig_relay *r)
{
	ig_buf_consume(&r->resp, r->ready);
	r->consumed += r->ready;
	r->ready = 0;
}

/* The bytes not teed yet up to `end` (counted as r->consumed is) go to
 * `tee`. */
static void tee_to(struct ig_relay *r, uint64_t end)
{
	if (end > r->teed) {
		r->ops->tee(r, ig_buf_head(&r->resp) + (r->teed - r->consumed), (size_t)(end - r->teed));
		r->teed = end;
	}
}

/* The bytes made whole since the last call go to `tee`; a detached
 * stream's are consumed (no client reads them). */
static void tee_ready(struct ig_relay *r)
{
	tee_to(r, r->consumed + r->ready);
	if (r->detached)
		drop_ready(r);
}

void ig_relay_detach(struct ig_relay *r)
{
	r->detached = true;
	drop_ready(r); /* teed, not read: no one will */
}

void ig_relay_tee_rest(struct ig_relay *r)
{
	if (r->tee)
		tee_to(r, r->consumed + ig_buf_pending(&r->resp));
}

bool ig_relay_streaming(const struct ig_relay *r)
{
	return r->stream && r->up_status >= 200 && r->up_status < 300;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct ig_relay *r = userdata;
	size_t n = size * nmemb;

	if (r->client_gone)
		return 0;
	r->last_io_ms = ig_now_ms();
	atomic_store(&r->backend->last_io_ms, r->last_io_ms);
	if (!r->first_seen && r->up_status >= 200 && r->up_status < 300) {
		r->first_seen = true;
		if (r->race && !r->ops->first_byte(r))
			return 0; /* the other of its race answered first: this transfer goes */
	}
	if (r->cont.broken || (r->committed && !ig_relay_streaming(r)))
		return n; /* a broken attempt's rest, a refused continuation's answer */
	if (!ig_relay_streaming(r)) {
		if (r->resp.len + n > MAX_BUFFERED_BODY || ig_buf_append(&r->resp, ptr, n) < 0)
			return 0;
		return n;
	}
	/* Back-pressure: a slow client holds the backend (unless nothing can
	 * be sent yet: one event bigger than the high mark must complete). */
	if (ig_buf_pending(&r->resp) >= STREAM_HIGH_WATER && r->ready > 0) {
		r->paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	if (r->resp.len + n > MAX_BUFFERED_BODY)
		return 0;
	if (!r->committed) {
		const char *ct = ig_relay_header(r, "Content-Type");
		r->sse = ct && strncasecmp(ct, "text/event-stream", 17) == 0;
	}
	if (append_stream(r, ptr, n) < 0)
		return 0;
	if (r->ready == 0)
		return n; /* half an event: nothing to relay yet */
	if (!r->committed) {
		r->committed = true;
		r->t_first_byte_us = ig_now_us();
		r->ops->committed(r);
	}
	if (r->tee)
		tee_ready(r);
	r->ops->wake(r);
	return n;
}

/* MHD's content reader: inside MHD_run, the lock let go, MHD's response
 * mutex held (relay.h). */
ssize_t ig_relay_read(void *cls, uint64_t pos IG_UNUSED, char *buf, size_t max)
{
	struct ig_relay *r = cls;
	size_t n = ig_buf_pending(&r->resp);

	if (r->client_gone || r->detached)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (r->upstream_done)
		r->ready = n; /* the end: whatever is left goes */
	if (n > r->ready)
		n = r->ready;
	if (n > 0) {
		if (n > max)
			n = max;
		memcpy(buf, ig_buf_head(&r->resp), n);
		ig_buf_consume(&r->resp, n);
		r->ready -= n;
		r->bytes_out += n;
		r->consumed += n;
		if (r->paused && r->xfer->running && ig_buf_pending(&r->resp) < STREAM_LOW_WATER) {
			r->paused = false;
			ig_upstream_unpause(r->xfer); /* by the reactor, outside MHD */
		}
		return (ssize_t)n;
	}
	if (r->upstream_done)
		return r->upstream_failed ? MHD_CONTENT_READER_END_WITH_ERROR
					    : MHD_CONTENT_READER_END_OF_STREAM;
	/* Nothing yet: suspend before returning 0, or MHD spins on us. */
	r->ops->idle(r);
	return 0;
}

void ig_relay_fail_stream(struct ig_relay *r, const char *why)
{
	bool named = r->responses || r->anthropic; /* events with a name line */
	char *err;
	if (r->responses) { /* the Responses API's error event */
		json_t *e = json_pack("{s:s, s:s, s:s, s:n, s:I}", "type", "error", "code", "backend_error", "message",
				      why, "param", "sequence_number", (json_int_t)r->sse_events);
		err = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
		json_decref(e);
	} else if (r->anthropic) { /* Anthropic's: event: error, {"type": "error", "error": {...}} */
		err = ig_anth_error_json(502, "api_error", why);
	} else {
		err = ig_oaerror_json(why, "server_error", NULL, "backend_error");
	}
	r->stream_error = 502;
	free(r->stream_error_msg);
	r->stream_error_msg = strdup(why);
	/* Drop the torn event the backend left: only whole events go out. */
	r->resp.len = r->resp.off + r->ready;
	ig_buf_printf(&r->resp, "%sdata: %s\n\n", named ? "event: error\n" : "", err ? err : "{}");
	r->ready = ig_buf_pending(&r->resp);
	free(err);
	r->upstream_failed = true;
}
