/* The request object: it owns both halves of one proxied call, the client
 * connection (suspended while it waits) and the upstream transfer, and moves
 * one way: body read -> validated -> routed (or queued) -> transfer ->
 * response bytes -> client. Retries happen here, only while no byte has been
 * handed to the client.
 * Its MHD side is req->call (body, answer, completion), set up by
 * server.c's handler; its upstream side is req->xfer, whose end upstream.c
 * reports through xfer.done. Resuming a connection and draining the queue
 * set flags the reactor acts on once per loop turn.
 * Not here: routing paths and the gateway's own endpoints (server.c), curl's
 * socket plumbing (upstream.c), choosing a backend (router.c). */
#include "config.h"
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>

#include "affinity.h"
#include "health.h"
#include "infergate/blockhash.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/sse.h"
#include "infergate/util.h"
#include "keyset.h"
#include "metrics.h"
#include "batches.h"
#include "proxy.h"
#include "respstore.h"
#include "rx.h"
#include "router.h"
#include "scheduler.h"

/* A streaming response may hold this much for a slow client before the
 * upstream transfer is paused; it is resumed below the low mark. */
#define STREAM_HIGH_WATER (256 * 1024)
#define STREAM_LOW_WATER (64 * 1024)
/* A non-streamed upstream body larger than this is refused (502). */
#define MAX_BUFFERED_BODY (256L * 1024 * 1024)

static enum MHD_Result on_request(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
				  const char *url, const char *method, const char *upload_data,
				  size_t *upload_data_size, void **con_cls);
static void on_completed(struct ig_call *call, enum MHD_RequestTerminationCode toe);
static void on_upstream_done(struct ig_xfer *x, CURLcode result);

/* The route req came by. */
static const struct ig_route *rt(const struct ig_req *req)
{
	return ig_gw_route(req->gw->cfg, req->route_idx);
}

struct ig_req *ig_proxy_req_new(struct ig_gw *gw, struct MHD_Connection *conn, int route_idx, unsigned method,
				const char *id, size_t idn)
{
	struct ig_req *req = calloc(1, sizeof(*req));
	if (!req || (id && !(req->resp_id = strndup(id, idn)))) {
		free(req);
		return NULL;
	}
	req->method = method;
	req->call = (struct ig_call){on_request, on_completed};
	req->xfer.done = on_upstream_done;
	req->gw = gw;
	req->conn = conn;
	req->route_idx = route_idx;
	req->phase = IG_REQ_READING;
	req->max_tokens = -1;
	req->client_ev = (struct ig_event){-1, NULL, req};
	ig_list_init(&req->watch_link);
	req->t_start_us = ig_now_us();
	ig_buf_init(&req->body);
	ig_buf_init(&req->resp);
	ig_buf_init(&req->up_resp_headers);
	ig_sse_init(&req->sse_lines);
	ig_list_init(&req->wait.link);
	req->wait.klass = IG_CLASS_NORMAL;
	req->prompt_tokens = req->completion_tokens = -1;
	ig_httpd_client_addr(conn, req->client, sizeof(req->client));
	req->rx = ig_rx_self; /* the reactor whose daemon holds conn */
	req->rx->requests++;
	ig_list_init(&req->post_link);
	ig_list_append(&req->rx->reqs, &req->link);
	gw->nreqs++;
	return req;
}

/* Corrects the key's token charge by what the answer used: its usage when
 * known; without one, the whole estimate for an answer that went well (the
 * tokens were likely spent) and nothing for one that failed. */
static void settle_tokens(struct ig_req *req, bool ok)
{
	if (!req->tok_charge || req->tok_settled)
		return;
	req->tok_settled = true;
	long used = req->prompt_tokens >= 0 ? req->prompt_tokens + (req->completion_tokens > 0 ? req->completion_tokens : 0)
		    : ok ? req->tok_charge : 0;
	ig_bucket_refill(&req->key->tpm, ig_now_ms());
	ig_bucket_give(&req->key->tpm, (double)(req->tok_charge - used));
}

static void req_free(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	ig_list_del(&req->link);
	ig_list_del(&req->watch_link);
	ig_list_del(&req->post_link);
	gw->nreqs--;
	ig_buf_free(&req->body);
	ig_buf_free(&req->resp);
	ig_buf_free(&req->up_resp_headers);
	ig_sse_free(&req->sse_lines);
	json_decref(req->parsed); /* start() answered before inspect_body took it */
	curl_slist_free_all(req->up_headers);
	ig_upstream_easy_put(req->rx, req->xfer.easy);
	if (req->m)
		ig_sched_release(&gw->sched, req->m);
	settle_tokens(req, ig_proxy_req_status(req) / 100 == 2);
	if (req->wait.key)
		ig_sched_key_release(&gw->sched, req->wait.key);
	if (req->key)
		ig_sched_key_release(&gw->sched, req->key);
	free(req->chain);
	free(req->model);
	free(req->prev_id);
	free(req->resp_id);
	free(req->up_path);
	free(req->alias);
	free(req->prio_body);
	free(req->err_body);
	free(req->stream_error_msg);
	free(req);
}

/* ---- client side: hang-up watch, suspend/resume ---- */

/* The client's socket hung up while its connection was suspended. */
static void on_client_hangup(struct ig_event *ev, uint32_t events IG_UNUSED)
{
	ig_proxy_req_client_gone(ev->data);
}

static void watch_client(struct ig_req *req)
{
	if (req->watching || req->client_gone)
		return;
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return;
	/* Suspended connections do not notice a disconnect (MHD pitfall): watch
	 * the socket for a hang-up ourselves. */
	req->client_ev = (struct ig_event){ci->connect_fd, on_client_hangup, req};
	if (ig_event_add(req->rx, &req->client_ev, EPOLLRDHUP) == 0)
		req->watching = true;
}

static void unwatch_client(struct ig_req *req)
{
	if (req->watching) {
		ig_event_del(req->rx, &req->client_ev);
		req->watching = false;
	}
}

/* The hang-up watch costs two epoll_ctl calls, so it is set only on
 * requests that stay suspended a while (ig_proxy_tick): a quick answer
 * needs none, and a stream that keeps flowing sees its client leave at the
 * next write anyway. */
#define WATCH_AFTER_MS 100

static void suspend(struct ig_req *req)
{
	if (!req->suspended) {
		MHD_suspend_connection(req->conn);
		req->suspended = true;
		req->suspended_at_ms = ig_now_ms();
		/* scan_watch looks at these only, oldest first */
		if (!req->watching && !req->client_gone) {
			ig_list_del(&req->watch_link);
			ig_list_append(&req->rx->to_watch, &req->watch_link);
		}
	}
}

/* Hands req to its own reactor, which does `ops` (IG_POST_*) when it wakes
 * (ig_proxy_run_posted): another reactor's thread must not touch its
 * connection or its transfer. */
static void post(struct ig_req *req, unsigned ops)
{
	req->post_ops |= ops;
	if (!ig_list_linked(&req->post_link))
		ig_list_append(&req->rx->posted, &req->post_link);
	ig_rx_wake(req->rx);
}

/* Lets MHD see the connection again; the reactor runs MHD for it before
 * it next waits (ig_httpd_resumed). Resuming one that is not suspended is
 * undefined in MHD, hence the flag. */
static void resume(struct ig_req *req)
{
	if (req->rx != ig_rx_self) {
		post(req, IG_POST_RESUME);
		return;
	}
	if (req->suspended) {
		req->suspended = false;
		MHD_resume_connection(req->conn);
		ig_httpd_resumed(req->rx, req->conn);
	}
}

/* ---- errors decided by the gateway ---- */

/* The error answer decided here, in OpenAI's shape. */
static void error_answer(struct ig_req *req, unsigned status, const char *type, const char *param, const char *code,
			 const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));
static void error_answer(struct ig_req *req, unsigned status, const char *type, const char *param, const char *code,
			 const char *fmt, va_list ap)
{
	char msg[1024];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	free(req->err_body);
	req->err_status = status;
	req->err_body = ig_oaerror_json(msg, type, param, code);
	req->phase = IG_REQ_FINISHED;
}

static void set_error(struct ig_req *req, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void set_error(struct ig_req *req, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_answer(req, status, ig_oaerror_type_for_status(status), NULL, code, fmt, ap);
	va_end(ap);
}

/* An invalid_request_error about one parameter (a 400 about a field of
 * the body, as OpenAI words it, or the model's 404). */
static void set_param_error(struct ig_req *req, unsigned status, const char *param, const char *code,
			    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void set_param_error(struct ig_req *req, unsigned status, const char *param, const char *code,
			    const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_answer(req, status, "invalid_request_error", param, code, fmt, ap);
	va_end(ap);
}

/* An error of a given type about one parameter (403 model_not_allowed,
 * the rate limits' 429 typed "requests" or "tokens" as OpenAI's are). */
static void set_typed_error(struct ig_req *req, unsigned status, const char *type, const char *param,
			    const char *code, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void set_typed_error(struct ig_req *req, unsigned status, const char *type, const char *param,
			    const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_answer(req, status, type, param, code, fmt, ap);
	va_end(ap);
}

/* ---- queue ---- */

/* Each model has its own queue (scheduler.h): a request for an idle model
 * never waits behind another's. queue_size and queue_timeout_ms apply to
 * each. */
static uint64_t queue_timeout_ms(const struct ig_conf *cfg, int klass)
{
	return (uint64_t)(klass == IG_CLASS_HIGH ? cfg->queue_timeout_high_ms
			  : klass == IG_CLASS_LOW ? cfg->queue_timeout_low_ms : cfg->queue_timeout_ms);
}

/* Returns 0, or -1 out of memory (then not queued). */
static int enqueue(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	req->queued_ms = ig_now_ms();
	req->wait.deadline_ms = req->queued_ms + queue_timeout_ms(gw->cfg, req->wait.klass);
	if (ig_sched_enqueue(&gw->sched, req->m, &req->wait) < 0)
		return -1;
	req->phase = IG_REQ_QUEUED;
	if (!req->was_queued)
		req->m->queued++;
	req->was_queued = true;
	gw->qlen++;
	return 0;
}

/* Out of the queue; how long it waited goes to the class's histogram. */
static void dequeue(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	uint64_t waited = ig_now_ms() - req->queued_ms;
	if (req->wait.flow)
		ig_sched_dequeue(&gw->sched, req->m, &req->wait);
	gw->qlen--;
	req->queue_wait_ms += waited;
	ig_metrics_observe_wait(gw, req->wait.klass, waited);
}

/* Gives back the backend slot of the current attempt. */
static void release_slot(struct ig_req *req)
{
	if (req->work_left > 0) /* least-tokens: its work leaves with it */
		atomic_fetch_sub(&req->backend->out_tokens, req->work_left);
	req->work_left = 0;
	ig_router_release(req->backend);
	req->m->inflight--;
	req->wait.key->inflight--;
	req->gw->class_inflight[req->wait.klass]--;
}

enum route_result { ROUTE_STARTED, ROUTE_QUEUED, ROUTE_FAILED };

/* ---- upstream transfer ---- */

static int is_hop_by_hop(const char *name, size_t n)
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

/* curl's callbacks (this and on_body) run while the gateway's lock is let
 * go (reactor.c), and do not take it: a request whose transfer runs is its
 * reactor's alone (another reactor touches a request only while it waits
 * in the queue or is posted to its reactor), and what else they touch is
 * the backend's atomics or their reactor's own state. What is shared
 * (remember_response) takes the lock itself. */
static size_t on_header(char *buf, size_t size, size_t nitems, void *userdata)
{
	struct ig_req *req = userdata;
	size_t n = size * nitems;

	req->last_io_ms = ig_now_ms();
	atomic_store(&req->backend->last_io_ms, req->last_io_ms);
	if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		const char *sp = memchr(buf, ' ', n);
		req->up_status = sp ? strtol(sp + 1, NULL, 10) : 0;
		ig_buf_reset(&req->up_resp_headers);
		req->headers_done = false;
		return n;
	}
	if (n <= 2 && (buf[0] == '\r' || buf[0] == '\n')) {
		if (req->up_status >= 200)
			req->headers_done = true;
		return n;
	}
	const char *colon = memchr(buf, ':', n);
	if (!colon || colon == buf)
		return n;
	size_t nlen = (size_t)(colon - buf);
	if (is_hop_by_hop(buf, nlen))
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
	ig_buf_append(&req->up_resp_headers, buf, nlen);
	ig_buf_append(&req->up_resp_headers, "", 1);
	ig_buf_append(&req->up_resp_headers, v, (size_t)(end - v));
	ig_buf_append(&req->up_resp_headers, "", 1);
	return n;
}

/* Takes prompt/completion tokens from a "usage" object, if it has them. */
static void take_usage(struct ig_req *req, json_t *usage)
{
	json_t *p = json_object_get(usage, "prompt_tokens"), *c = json_object_get(usage, "completion_tokens");
	if (!p && !c) { /* the Responses API's names */
		p = json_object_get(usage, "input_tokens");
		c = json_object_get(usage, "output_tokens");
	}
	if (json_is_integer(p))
		req->prompt_tokens = (long)json_integer_value(p);
	if (json_is_integer(c))
		req->completion_tokens = (long)json_integer_value(c);
}

/* Parses only the value of the last "usage" key (or the route's: SGLang's
 * native "meta_info"), not the whole answer: it
 * was a tenth of the gateway's CPU on short completions and grows with the
 * text. "usage" comes last at the top level in OpenAI, SGLang and vLLM
 * answers. The quoted key followed by ':' cannot occur inside a JSON
 * string, where quotes are escaped; jansson parses the value. */
static void usage_from_json(struct ig_req *req, const char *text, size_t len)
{
	int where = rt(req)->usage;
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
		take_usage(req, usage);
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
static char *stream_error(struct ig_req *req, const char *payload, size_t len)
{
	json_t *o = json_loadb(payload, len, 0, NULL);
	struct ig_oaerror e;
	char *rewritten = NULL;

	if (ig_oaerror_read(o, &e) == 0) {
		unsigned st = ig_oaerror_status(&e);
		req->stream_error = st ? st : 500;
		free(req->stream_error_msg);
		req->stream_error_msg = strdup(json_string_value(e.message));
		/* a Responses API error event keeps its own shape */
		if (!e.nested && !(rt(req)->flags & IG_RT_RESPONSES))
			rewritten = ig_oaerror_to_json(&e, req->stream_error);
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
	struct ig_req *req;
	size_t changed; /* lowest pending position a rewrite changed, or SIZE_MAX */
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

/* What include_usage added, taken out again for a client that did not ask
 * for it: the usage event (the line, its LF and the blank line after it,
 * now or when it arrives: skip_blank), or the "usage": null member that
 * OpenAI puts on every other chunk (SGLang and vLLM omit it). The line ends
 * `rest` bytes before the end of req->resp; returns the lowest position
 * changed, or SIZE_MAX. */
static size_t hide_usage(struct ig_req *req, const char *d, size_t dn, size_t line_len, size_t rest)
{
	struct ig_buf *b = &req->resp;
	size_t nul = sizeof(USAGE_NULL) - 1;
	if (is_usage_event(d, dn)) {
		const char *after = b->data + b->len - rest;
		size_t blank = rest >= 1 && after[0] == '\n' ? 1 : rest >= 2 && after[0] == '\r' && after[1] == '\n' ? 2 : 0;
		if (!blank)
			req->skip_blank = true;
		if (buf_replace_back(b, rest - blank, line_len + 1 + blank, "", 0) < 0)
			return SIZE_MAX;
		return ig_buf_pending(b) - (rest - blank);
	}
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

/* Whose stored responses req may name: its key's, with keys on; anyone's
 * (0) without. */
static uint32_t owner(const struct ig_req *req)
{
	return req->gw->api_keys.enabled ? ig_respstore_owner(req->key_id) : 0;
}

/* A stored Responses API answer (its object, from the body or from the
 * stream's response.created event): which backend has it. */
static void remember_response(struct ig_req *req, json_t *response)
{
	json_t *id = json_object_get(response, "id");
	if (!json_is_string(id) || !req->backend)
		return;
	if (!req->gw->responses && !(req->gw->responses = ig_respstore_new()))
		return;
	ig_respstore_put(req->gw->responses, json_string_value(id), json_string_length(id), req->backend->id,
			 owner(req), ig_now_ms());
	req->stored = true;
}

static void on_sse_data(void *arg, const char *d, size_t dn, size_t line_len, size_t rest)
{
	struct scan *sc = arg;
	struct ig_req *req = sc->req;
	req->sse_events++;
	if (!d)
		return; /* longer than IG_SSE_MAX_LINE: relayed, not read */
	usage_from_json(req, d, dn); /* finds "usage" or returns */
	if (req->store && !req->stored && memmem(d, dn, "\"response.created\"", 18)) {
		json_t *o = json_loadb(d, dn, 0, NULL);
		ig_gw_lock(req->gw); /* the store is shared (on_body takes no lock) */
		remember_response(req, json_object_get(o, "response"));
		ig_gw_unlock(req->gw);
		json_decref(o);
	}
	if (req->work_left > 0) { /* least-tokens: an event is about a token done */
		req->work_left--;
		atomic_fetch_sub(&req->backend->out_tokens, 1);
	}
	if (req->usage_added && req->sse) {
		size_t at = hide_usage(req, d, dn, line_len, rest);
		if (at < sc->changed)
			sc->changed = at;
		if (at != SIZE_MAX)
			return;
	}
	char *fixed = memmem(d, dn, "\"error\"", 7) ? stream_error(req, d, dn) : NULL;
	if (fixed && req->sse) {
		/* The line ends at its LF, rest + 1 bytes before the end of resp. */
		size_t tail = rest + 1;
		char *w = ig_strdupf("data: %s", fixed);
		if (buf_replace_back(&req->resp, tail, line_len, w, strlen(w)) == 0) {
			size_t at = ig_buf_pending(&req->resp) - tail - strlen(w);
			if (at < sc->changed)
				sc->changed = at;
		}
		free(w);
	}
	free(fixed);
}

/* p..n were just appended to req->resp. Returns the lowest position (in
 * req->resp's pending bytes) that a rewritten event changed, or SIZE_MAX. */
static size_t scan_sse(struct ig_req *req, const char *p, size_t n)
{
	struct scan sc = {req, SIZE_MAX};
	ig_sse_feed(&req->sse_lines, p, n, on_sse_data, &sc);
	return sc.changed;
}

/* The value of a header relayed from the backend, or NULL. */
static const char *header_value(const struct ig_req *req, const char *name)
{
	const char *p = req->up_resp_headers.data, *end = p + req->up_resp_headers.len;
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
static void mark_ready(struct ig_req *req, size_t scanned_before)
{
	size_t pending = ig_buf_pending(&req->resp);
	if (!req->sse) {
		req->ready = pending;
		return;
	}
	const char *h = ig_buf_head(&req->resp);
	size_t from = scanned_before > 2 ? scanned_before - 2 : 0;
	for (size_t i = pending; i-- > from + 1;) {
		if (h[i] == '\n' && (h[i - 1] == '\n' || (h[i - 1] == '\r' && i >= 2 && h[i - 2] == '\n'))) {
			if (i + 1 > req->ready)
				req->ready = i + 1;
			return;
		}
	}
}

/* n more bytes of a stream: kept (less what hide_usage takes out), read
 * for usage and error events, and what ends whole events marked ready.
 * Returns 0 or -1 (out of memory). */
static int append_stream(struct ig_req *req, const char *ptr, size_t n)
{
	size_t before = ig_buf_pending(&req->resp), skip = 0;
	if (req->skip_blank) { /* the end of a usage event taken out */
		skip = n >= 1 && ptr[0] == '\n' ? 1 : n >= 2 && ptr[0] == '\r' && ptr[1] == '\n' ? 2 : 0;
		req->skip_blank = false;
	}
	if (ig_buf_append(&req->resp, ptr + skip, n - skip) < 0)
		return -1;
	size_t changed = scan_sse(req, ptr, n);
	mark_ready(req, changed < before ? changed : before);
	return 0;
}

/* A stream's first event is going out: no retry can send the request body
 * again, so a held stream stops keeping it (a prompt of many kB, 10,000
 * streams). Only once curl has sent all of it, which a backend that
 * answers has always read. */
static void drop_request_body(struct ig_req *req)
{
	curl_off_t sent = 0;
	size_t len = req->prio_body ? strlen(req->prio_body) : req->body.len;
	if (curl_easy_getinfo(req->xfer.easy, CURLINFO_SIZE_UPLOAD_T, &sent) != CURLE_OK || sent < (curl_off_t)len)
		return;
	ig_buf_free(&req->body);
	free(req->prio_body);
	req->prio_body = NULL;
}

static bool streaming_ok(const struct ig_req *req)
{
	return req->stream && req->up_status >= 200 && req->up_status < 300;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct ig_req *req = userdata;
	size_t n = size * nmemb;

	if (req->client_gone)
		return 0;
	req->last_io_ms = ig_now_ms();
	atomic_store(&req->backend->last_io_ms, req->last_io_ms);
	if (!streaming_ok(req)) {
		if (req->resp.len + n > MAX_BUFFERED_BODY || ig_buf_append(&req->resp, ptr, n) < 0)
			return 0;
		return n;
	}
	/* Back-pressure: a slow client holds the backend (unless nothing can
	 * be sent yet: one event bigger than the high mark must complete). */
	if (ig_buf_pending(&req->resp) >= STREAM_HIGH_WATER && req->ready > 0) {
		req->paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	if (req->resp.len + n > MAX_BUFFERED_BODY)
		return 0;
	if (!req->committed) {
		const char *ct = header_value(req, "Content-Type");
		req->sse = ct && strncasecmp(ct, "text/event-stream", 17) == 0;
	}
	if (append_stream(req, ptr, n) < 0)
		return 0;
	if (req->ready == 0)
		return n; /* half an event: nothing to relay yet */
	if (!req->committed) {
		req->committed = true;
		req->t_first_byte_us = ig_now_us();
		drop_request_body(req);
	}
	resume(req);
	return n;
}

/* The body with "priority" first among its members, for a backend that
 * schedules by it. SGLang runs larger values first unless started with
 * --schedule-low-priority-values-first (python/sglang/srt/managers/
 * schedule_policy.py: priority_sign); vLLM's priority policy runs smaller
 * values first (vllm/v1/core/sched/request_queue.py). A "priority" the
 * client sent comes later in the object and wins (the last of a repeated
 * key is what Python's json keeps). The body is a JSON object (checked).
 * malloc'd, or NULL to send the body as it is. */
static char *body_with_priority(const struct ig_req *req, int field)
{
	static const int sglang[IG_NCLASSES] = {10, 0, -10}, vllm[IG_NCLASSES] = {-10, 0, 10};
	const char *p = req->body.data, *end = p + req->body.len;
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	if (p >= end || *p != '{')
		return NULL;
	const char *q = p + 1;
	while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
		q++;
	int v = (field == 1 ? sglang : vllm)[req->wait.klass];
	return ig_strdupf("{\"priority\":%d%s%.*s", v, q < end && *q == '}' ? "" : ",", (int)(end - (p + 1)), p + 1);
}

/* The transfer start_transfer set up goes into the multi of req's
 * reactor (on its thread). */
static void begin_transfer(struct ig_req *req)
{
	CURLMcode mc = ig_upstream_start(req->rx, &req->xfer);
	if (mc != CURLM_OK) {
		release_slot(req);
		set_error(req, 500, "internal_error", "cannot start the upstream transfer: %s",
			  curl_multi_strerror(mc));
	}
}

static void start_transfer(struct ig_req *req, struct ig_backend *b)
{
	struct ig_gw *gw = req->gw;
	const struct ig_conf *cfg = gw->cfg;
	char url[2048];

	req->backend = b;
	if (req->ntried == 0)
		req->dispatch_seq = ++gw->dispatched;
	req->tried[req->ntried++] = b;
	if (req->nchain) /* cache-aware: this backend now holds the prefix */
		ig_affinity_insert(gw->affinity, b->id, req->chain, req->nchain);
	req->work_left = req->tok_estimate;
	req->t_attempt_us = ig_now_us();
	if (req->work_left > 0)
		atomic_fetch_add(&b->out_tokens, req->work_left);
	req->m->inflight++;
	req->wait.key->inflight++;
	gw->class_inflight[req->wait.klass]++;
	req->phase = IG_REQ_UPSTREAM;
	req->up_status = 0;
	req->headers_done = false;
	req->paused = false;
	ig_buf_reset(&req->up_resp_headers);
	ig_buf_reset(&req->resp);
	ig_sse_reset(&req->sse_lines);
	req->ready = 0;
	req->stream_error = 0;
	if (req->xfer.easy)
		curl_easy_reset(req->xfer.easy);
	else
		req->xfer.easy = ig_upstream_easy_get(req->rx);
	CURL *e = req->xfer.easy;
	snprintf(url, sizeof(url), "%s%s", b->url, req->up_path ? req->up_path : ig_route_path(cfg, req->route_idx));
	curl_easy_setopt(e, CURLOPT_URL, url);
	if (req->method == IG_RT_GET || req->method == IG_RT_DELETE) {
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
		if (req->method == IG_RT_DELETE)
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
		goto options;
	}
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	if (req->method == IG_RT_PUT)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
	free(req->prio_body);
	req->prio_body = b->priority_field ? body_with_priority(req, b->priority_field) : NULL;
	if (req->prio_body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->prio_body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(req->prio_body));
	} else {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body.data ? req->body.data : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body.len);
	}
options:
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->up_headers);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, req);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, req);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_ms);
	/* No total timeout: a generation may run for many minutes. The idle
	 * limit is ours (ig_proxy_tick): curl's LOW_SPEED averages over several
	 * seconds and would count the upload as activity. */
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	if (req->stream) /* SSE chunks are small; 10,000 streams x 16 KiB is not */
		curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 1024L); /* curl's minimum */
	req->last_io_ms = ig_now_ms();
	if (req->rx != ig_rx_self) { /* dispatched by another reactor's drain */
		req->start_posted = true;
		post(req, IG_POST_START);
		return;
	}
	begin_transfer(req);
}


static const char *uperr_name(enum ig_upstream_error e)
{
	static const char *n[] = {"none", "connect", "reset", "timeout", "status", "other"};
	return n[e];
}

/* The answer for a model no known backend serves: 404 when every
 * backend's list is known, else 503 (the others' may name it once up). */
static void not_served(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	const struct ig_sched *s = &gw->sched;
	char served[300] = "", shown[300];
	size_t k = 0;

	if (s->unknown_down > 0) {
		set_error(req, 503, "no_healthy_backend",
			  "no healthy backend serves the model '%s': %zu backend(s) are down and their models are not "
			  "known yet",
			  req->model, s->unknown_down);
		return;
	}
	for (size_t i = 0; i < s->n; i++) {
		const struct ig_model *m = s->v[i];
		if (m->nbackends == 0)
			continue;
		size_t at = strlen(served);
		snprintf(served + at, sizeof(served) - at, "%s%s", k++ ? ", " : "", m->name);
	}
	for (size_t i = 0; i < gw->cfg->n_aliases; i++) {
		size_t at = strlen(served);
		snprintf(served + at, sizeof(served) - at, "%s%s (alias)", k++ ? ", " : "", gw->cfg->aliases[i].alias);
	}
	if (req->alias)
		snprintf(shown, sizeof(shown), "%s' (an alias of '%s')", req->alias, req->model);
	else
		snprintf(shown, sizeof(shown), "%s'", req->model);
	set_param_error(req, 404, "model", "model_not_found",
			"The model '%s does not exist or is not served here; served: %s", shown, k ? served : "none yet");
}

/* What the router is told of req. */
static struct ig_route_req route_req(const struct ig_req *req)
{
	const struct ig_conf *cfg = req->gw->cfg;
	return (struct ig_route_req){.low = req->wait.klass == IG_CLASS_LOW, .tokens = req->tok_estimate,
				     .pinned = req->pinned,
				     .tried = req->tried, .ntried = req->ntried, .affinity = req->gw->affinity,
				     .chain = req->chain, .nchain = req->nchain,
				     .threshold_percent = cfg->cache_threshold_percent,
				     .balance_abs = cfg->cache_balance_abs, .balance_rel = cfg->cache_balance_rel};
}

/* The backend a pinned request must go to is down or gone: its stored
 * response is out of reach, OpenAI's 404. */
static void pin_lost(struct ig_req *req)
{
	const struct ig_backend *held = ig_backend_pool_find_id(&req->gw->pool, req->pinned - 1);
	const char *why = held ? "is down" : "has left the gateway";
	if (req->resp_id)
		set_param_error(req, 404, "response_id", "response_not_found",
				"Response with id '%s' not found (its backend %s).", req->resp_id, why);
	else
		set_param_error(req, 404, "previous_response_id", "previous_response_not_found",
				"Previous response with id '%s' not found (its backend %s).", req->prev_id, why);
}

/* Queues req in its model's queue, or sets 429 when that is full. */
static enum route_result wait_or_refuse(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	if ((long)req->m->qlen >= gw->cfg->queue_size) {
		gw->stats.queue_rejected++;
		req->m->rejected++;
		set_error(req, 429, "queue_full",
			  "every backend of the model '%s' is at its in-flight limit and its queue is full (%ld "
			  "waiting); retry later",
			  req->model, gw->cfg->queue_size);
		return ROUTE_FAILED;
	}
	if (enqueue(req) < 0) {
		set_error(req, 500, "internal_error", "out of memory");
		return ROUTE_FAILED;
	}
	return ROUTE_QUEUED;
}

/* Finds a backend among those that serve req's model and starts it, queues
 * it, or sets an error. */
static enum route_result route(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct ig_model *m = req->m;
	struct ig_backend *b = NULL;

	/* A key at its cap waits for one of its own requests to end. */
	if (ig_sched_key_capped(req->wait.key) && m->nbackends > 0)
		return wait_or_refuse(req);
	if (req->pinned) {
		/* A follow-up goes where its previous response is, or nowhere. */
		const struct ig_backend *held = ig_backend_pool_find_id(&gw->pool, req->pinned - 1);
		if (!held || (!ig_backend_routable(held) && req->ntried == 0)) {
			pin_lost(req);
			return ROUTE_FAILED;
		}
	}
	struct ig_route_req rq = route_req(req);
	switch (ig_router_pick(m->backends, m->nbackends, &m->rotor, gw->cfg->policy, &rq, &b)) {
	case IG_PICK_OK:
		start_transfer(req, b);
		return req->xfer.running ? ROUTE_STARTED : ROUTE_FAILED;
	case IG_PICK_BUSY:
		return wait_or_refuse(req);
	case IG_PICK_NONE:
		break;
	}
	if (req->ntried == 0 && m->nbackends == 0) {
		/* Some backend's list is not learned yet: it may serve it. */
		if (gw->sched.unknown_up > 0)
			return wait_or_refuse(req);
		not_served(req);
	} else if (req->ntried == 0) {
		set_error(req, 503, "no_healthy_backend", "no healthy backend serves the model '%s' (%zu of them, 0 up)",
			  req->model, m->nbackends);
	} else if (req->last_err == IG_UPERR_TIMEOUT) {
		set_error(req, 504, "backend_timeout", "backend %s sent nothing for %lds",
			  req->backend->url, gw->cfg->idle_s);
	} else {
		set_error(req, 502, "backend_error", "backend failed after %d attempt(s), last %s: %s error",
			  req->ntried, req->backend->url, uperr_name(req->last_err));
	}
	return ROUTE_FAILED;
}

/* ---- the request's life ---- */

struct collect {
	struct ig_req *req;
	const char *connection; /* the request's Connection header, or NULL */
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind IG_UNUSED, const char *key,
				      const char *value)
{
	const struct collect *c = cls;
	struct ig_req *req = c->req;
	struct ig_gw *gw = req->gw;
	if (!key || !value || is_hop_by_hop(key, strlen(key)))
		return MHD_YES;
	/* Headers named in Connection are hop-by-hop too (RFC 9110 7.6.1). */
	const char *conn = c->connection;
	if (conn) {
		size_t kl = strlen(key);
		for (const char *p = conn; *p;) {
			while (*p == ' ' || *p == ',' || *p == '\t')
				p++;
			size_t n = strcspn(p, " ,\t");
			if (n == kl && strncasecmp(p, key, n) == 0)
				return MHD_YES;
			p += n;
		}
	}
	/* A batch's mark (batches.h) is the gateway's own. */
	if (strcasecmp(key, IG_BATCH_HEADER) == 0)
		return MHD_YES;
	/* The gateway's own key stays here; a backend key replaces it. */
	if (strcasecmp(key, "Authorization") == 0 && (gw->api_keys.enabled || *gw->cfg->backend_api_key))
		return MHD_YES;
	char *line = ig_strdupf("%s: %s", key, value);
	req->up_headers = curl_slist_append(req->up_headers, line);
	free(line);
	return MHD_YES;
}

static void pick_request_id(struct ig_req *req)
{
	const char *id = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Request-Id");
	if (id) {
		size_t n = strlen(id);
		bool ok = n > 0 && n < sizeof(req->request_id);
		for (size_t i = 0; ok && i < n; i++)
			ok = isalnum((unsigned char)id[i]) || strchr("-_.:", id[i]);
		if (ok) {
			memcpy(req->request_id, id, n + 1);
			return;
		}
	}
	ig_random_hex(req->request_id, 32);
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
static int check_fields(struct ig_req *req, json_t *root)
{
	json_t *v = json_object_get(root, "model");
	if (!v && !(rt(req)->flags & IG_RT_MODEL_OPTIONAL)) {
		set_param_error(req, 400, "model", "missing_required_parameter", "you must provide a model parameter");
		return -1;
	}
	if (v && !json_is_string(v)) {
		set_param_error(req, 400, "model", "invalid_type",
				"Invalid type for 'model': expected a string, but got %s instead.", json_kind(v));
		return -1;
	}
	if (v && json_string_length(v) == 0) {
		set_param_error(req, 400, "model", "empty_string",
				"Invalid 'model': empty string. Expected a non-empty model name.");
		return -1;
	}
	v = json_object_get(root, "stream");
	if (v && !json_is_boolean(v) && !json_is_null(v)) {
		set_param_error(req, 400, "stream", "invalid_type",
				"Invalid type for 'stream': expected a boolean, but got %s instead.", json_kind(v));
		return -1;
	}
	static const char *const counts[] = {"max_tokens", "max_completion_tokens", "max_output_tokens"};
	for (size_t i = 0; i < 3; i++) {
		v = json_object_get(root, counts[i]);
		if (!v || json_is_null(v))
			continue;
		if (!json_is_integer(v)) {
			set_param_error(req, 400, counts[i], "invalid_type",
					"Invalid type for '%s': expected an integer, but got %s instead.", counts[i],
					json_kind(v));
			return -1;
		}
		if (json_integer_value(v) < 1) {
			set_param_error(req, 400, counts[i], "integer_below_min_value",
					"Invalid '%s': integer below minimum value. Expected a value >= 1, but got %lld "
					"instead.",
					counts[i], (long long)json_integer_value(v));
			return -1;
		}
	}
	v = json_object_get(root, "previous_response_id");
	if (v && !json_is_string(v) && !json_is_null(v)) {
		set_param_error(req, 400, "previous_response_id", "invalid_type",
				"Invalid type for 'previous_response_id': expected a string, but got %s instead.",
				json_kind(v));
		return -1;
	}
	v = json_object_get(root, "stream_options");
	if (v && !json_is_object(v) && !json_is_null(v)) {
		set_param_error(req, 400, "stream_options", "invalid_type",
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
	if (json_is_object(v))
		return text_bytes(json_object_get(v, "text"));
	json_array_foreach(v, i, x)
		n += text_bytes(x);
	return n;
}

/* The tokens a request may use, charged to its key's tpm at admission:
 * its prompt at 4 bytes a token (a chat message's role and two separators
 * counted with its text, as infergate-sim counts it) plus the output it
 * may ask for (max_tokens times n, else default_max_tokens). */
static long token_estimate(const struct ig_req *req, json_t *root)
{
	json_t *msgs = json_object_get(root, "messages"), *m;
	size_t bytes = 0, i;
	if (json_is_array(msgs)) {
		json_array_foreach(msgs, i, m)
			bytes += text_bytes(json_object_get(m, "role")) + text_bytes(json_object_get(m, "content")) + 2;
	} else {
		bytes = text_bytes(json_object_get(root, "prompt")) + text_bytes(json_object_get(root, "input")) +
			text_bytes(json_object_get(root, "text"));
	}
	long prompt = (long)((bytes + 3) / 4);
	if (!(rt(req)->flags & IG_RT_OUTPUT))
		return prompt > 0 ? prompt : 1;
	json_t *n = json_object_get(root, "n");
	long choices = json_is_integer(n) && json_integer_value(n) > 1 && json_integer_value(n) < 1000
			       ? (long)json_integer_value(n) : 1;
	return prompt + choices * (req->max_tokens > 0 ? req->max_tokens : req->gw->cfg->default_max_tokens);
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

/* Blocks considered of one prompt (256 KiB of text). */
#define MAX_CHAIN 4096

/* cache-aware: the prompt as a chain of block hashes (blockhash.h): for
 * chat the messages in order, "role\ncontent\n" each (as infergate-sim
 * builds its prompt), for completions the prompt. Returns 0 or -1. */
static int prefix_chain(struct ig_req *req, json_t *root)
{
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
		if (!(req->chain = malloc(n * sizeof(*req->chain)))) {
			ig_buf_free(&t);
			return -1;
		}
		req->nchain = ig_block_chain(t.data, t.len, req->chain, n);
	}
	ig_buf_free(&t);
	return 0;
}

/* Whether the gateway should ask for the stream's usage itself: a stream
 * whose client did not set stream_options.include_usage. */
static bool wants_usage(const struct ig_req *req, json_t *root)
{
	if (!req->stream || !req->gw->cfg->stream_usage || !(rt(req)->flags & IG_RT_USAGE_OPTION))
		return false;
	return !json_is_true(json_object_get(json_object_get(root, "stream_options"), "include_usage"));
}

/* Inserts `"stream_options":{"include_usage":true},` as the body's first
 * member, the rest byte for byte. Returns 0 or -1 (out of memory). */
static int splice_usage_option(struct ig_buf *body)
{
	static const char member[] = "\"stream_options\":{\"include_usage\":true},";
	const char *p = memchr(body->data, '{', body->len);
	size_t at = (size_t)(p - body->data) + 1, tail = body->len - at;
	return buf_replace_back(body, tail, 0, member, sizeof(member) - 1);
}

/* A request that names no model (a route where it is optional) goes to
 * the one model the gateway serves; with several, the client must choose.
 * NULL with the error set. */
static const char *only_model(struct ig_req *req)
{
	const struct ig_sched *s = &req->gw->sched;
	const char *one = NULL;
	size_t n = 0;
	struct ig_buf names;
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i]->named && n++ == 0)
			one = s->v[i]->name;
	if (n == 1)
		return one;
	if (n == 0) {
		set_error(req, 503, "no_backend", "no backend has named the model it serves yet: name one in 'model'");
		return NULL;
	}
	ig_buf_init(&names);
	for (size_t i = 0, k = 0; i < s->n; i++)
		if (s->v[i]->named)
			ig_buf_printf(&names, "%s'%s'", k++ ? ", " : "", s->v[i]->name);
	set_param_error(req, 400, "model", "missing_required_parameter",
			"this gateway serves several models (%s): name one in 'model'", names.data);
	ig_buf_free(&names);
	return NULL;
}

/* Reads and checks what routing needs. The body is forwarded byte for
 * byte, unless its model is an alias, or stream_options had to be changed
 * (set but without include_usage): then it is re-serialised. An absent
 * stream_options is added in front, the rest untouched. Returns 0 or -1
 * (error set). */
static int inspect_body(struct ig_req *req)
{
	json_error_t jerr = req->parse_error;
	json_t *root = req->parse_done ? req->parsed
				       : json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, &jerr);

	req->parsed = NULL; /* root is this function's now */
	if (!root) {
		set_error(req, 400, "invalid_json",
			  "We could not parse the JSON body of your request: %s (line %d, column %d)",
			  jerr.text, jerr.line, jerr.column);
		return -1;
	}
	if (!json_is_object(root)) {
		set_error(req, 400, "invalid_body", "the request body must be a JSON object");
		json_decref(root);
		return -1;
	}
	if (check_fields(req, root) < 0) {
		json_decref(root);
		return -1;
	}
	/* a route that never streams answers one body, whatever was asked */
	req->stream = json_is_true(json_object_get(root, "stream")) && !(rt(req)->flags & IG_RT_NO_STREAM);
	const char *model = json_string_value(json_object_get(root, "model"));
	if (!model && !(model = only_model(req))) {
		json_decref(root);
		return -1;
	}
	const char *served = ig_conf_alias_target(req->gw->cfg, model);
	req->model = strdup(served ? served : model);
	json_t *mt = json_object_get(root, "max_tokens");
	if (!json_is_integer(mt))
		mt = json_object_get(root, "max_completion_tokens");
	if (!json_is_integer(mt))
		mt = json_object_get(root, "max_output_tokens");
	if (!json_is_integer(mt)) /* SGLang's native /generate */
		mt = json_object_get(json_object_get(root, "sampling_params"), "max_new_tokens");
	if (json_is_integer(mt))
		req->max_tokens = (long)json_integer_value(mt);
	if (req->key->tpm.limit > 0 || req->gw->cfg->policy == IG_POLICY_LEAST_TOKENS)
		req->tok_estimate = token_estimate(req, root);
	if (rt(req)->flags & IG_RT_RESPONSES) {
		json_t *prev = json_object_get(root, "previous_response_id");
		if (json_is_string(prev)) {
			req->prev_id = strdup(json_string_value(prev));
			if (req->gw->responses)
				req->pinned = 1 + ig_respstore_get(req->gw->responses, json_string_value(prev),
								   json_string_length(prev), owner(req), ig_now_ms());
		}
		req->store = !json_is_false(json_object_get(root, "store")); /* stored unless told not to */
	}
	if (req->gw->cfg->policy == IG_POLICY_CACHE_AWARE && prefix_chain(req, root) < 0) {
		json_decref(root);
		set_error(req, 500, "internal_error", "out of memory");
		return -1;
	}
	bool rewrite = served != NULL, splice = false;
	if (served) {
		req->alias = strdup(model);
		json_object_set_new(root, "model", json_string(served));
	}
	if (wants_usage(req, root)) {
		req->usage_added = true;
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
		ig_buf_reset(&req->body);
		if (!text || ig_buf_append(&req->body, text, strlen(text)) < 0)
			rc = -1;
		free(text);
	} else if (splice) {
		rc = splice_usage_option(&req->body);
	}
	json_decref(root);
	if (rc < 0)
		set_error(req, 500, "internal_error", "out of memory");
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
static int by_id(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	const char *tmpl = rt(req)->path, *hole = strstr(tmpl, "{id}");
	struct ig_buf path;
	ig_buf_init(&path);
	ig_buf_printf(&path, "%.*s%s%s", (int)(hole - tmpl), tmpl, req->resp_id, hole + 4);
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, add_argument, &path);
	req->up_path = path.data; /* taken over */
	const char *stream = MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, "stream");
	req->stream = stream && strcmp(stream, "true") == 0; /* vLLM: a background response's events again */
	int b = gw->responses ? ig_respstore_get(gw->responses, req->resp_id, strlen(req->resp_id), owner(req),
						 ig_now_ms())
			      : -1;
	const struct ig_backend *held = b >= 0 ? ig_backend_pool_find_id(&gw->pool, b) : NULL;
	json_t *names = held ? ig_backend_model_names(held) : NULL;
	const char *model = json_string_value(json_array_get(names, 0));
	if (model) {
		req->model = strdup(model);
		req->pinned = 1 + b;
	} else {
		set_param_error(req, 404, "response_id", "response_not_found", "Response with id '%s' not found%s.",
				req->resp_id, b < 0 ? "" : held ? " (its backend names no model yet)"
							: " (its backend has left the gateway)");
	}
	json_decref(names);
	return model ? 0 : -1;
}

static enum MHD_Result respond(struct ig_req *req);

/* Whose request it is (req->key: the SHA-256 of its bearer token, ""
 * without one; server.c checked it against the keys file), whose share it
 * counts against (the same, or one shared key with scheduling fifo) and its
 * class: X-Infergate-Priority, else the key's default, else normal (fifo:
 * one class). Returns 0, or -1 with an error set. */
static int classify_request(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	const char *prio = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "X-Infergate-Priority");
	bool fifo = gw->cfg->scheduling != 0;

	if ((req->key = ig_sched_key(&gw->sched, req->key_id)))
		req->key->refs++;
	if (req->key && (req->wait.key = fifo ? ig_sched_key(&gw->sched, "") : req->key))
		req->wait.key->refs++;
	if (!req->wait.key) {
		set_error(req, 500, "internal_error", "out of memory");
		return -1;
	}
	if (prio) {
		int c = ig_conf_class_parse(prio);
		if (c < 0) {
			set_param_error(req, 400, "X-Infergate-Priority", "invalid_priority",
					"Invalid 'X-Infergate-Priority' header: '%.64s' (expected high, normal or low)", prio);
			return -1;
		}
		req->wait.klass = c;
	} else if (req->key->klass >= 0) {
		req->wait.klass = req->key->klass;
	}
	if (fifo)
		req->wait.klass = IG_CLASS_NORMAL;
	return 0;
}

/* Takes its key's buckets' state for the x-ratelimit-* headers. */
static void snapshot_limits(struct ig_req *req, uint64_t now_ms)
{
	struct ig_key *k = req->key;
	ig_bucket_refill(&k->rpm, now_ms);
	ig_bucket_refill(&k->tpm, now_ms);
	req->rl_req_left = ig_bucket_remaining(&k->rpm);
	req->rl_tok_left = ig_bucket_remaining(&k->tpm);
	req->rl_req_reset_ms = ig_bucket_reset_ms(&k->rpm);
	req->rl_tok_reset_ms = ig_bucket_reset_ms(&k->tpm);
	req->rl_shown = true;
}

/* What the key's entry allows: the model (403 model_not_allowed) and its
 * rates (429 rate_limit_exceeded, typed "requests" or "tokens" as OpenAI
 * types them, with when to retry). Returns 0 admitted (its token charge
 * taken), or -1 with the error set. */
static int admit(struct ig_req *req)
{
	struct ig_key *k = req->key;
	const struct ig_keyent *e = k->ent;
	char wait[32];
	uint64_t retry_ms, now = ig_now_ms();

	if (!e)
		return 0;
	if (!ig_keyset_model_allowed(e, req->model, req->alias)) {
		set_typed_error(req, 403, "permission_error", "model", "model_not_allowed",
				"The API key '%s' is not allowed to use the model '%s'", e->name,
				req->alias ? req->alias : req->model);
		return -1;
	}
	if (!e->rpm && !e->tpm)
		return 0;
	enum ig_limit l = ig_ratelimit_admit(&k->rpm, &k->tpm, req->tok_estimate, now, &retry_ms);
	snapshot_limits(req, now);
	if (l == IG_LIMIT_NONE) {
		req->tok_charge = req->tok_estimate;
		return 0;
	}
	ig_ratelimit_duration(wait, sizeof(wait), retry_ms);
	if (l == IG_LIMIT_REQUESTS) {
		k->limited_requests++;
		req->retry_after_ms = retry_ms;
		set_typed_error(req, 429, "requests", NULL, "rate_limit_exceeded",
				"Rate limit reached for the API key '%s' on requests per min (RPM): Limit %ld, Remaining "
				"%ld, Requested 1. Please try again in %s.", e->name, e->rpm, req->rl_req_left, wait);
	} else if (l == IG_LIMIT_TOKENS) {
		k->limited_tokens++;
		req->retry_after_ms = retry_ms;
		set_typed_error(req, 429, "tokens", NULL, "rate_limit_exceeded",
				"Rate limit reached for the API key '%s' on tokens per min (TPM): Limit %ld, Remaining "
				"%ld, Requested %ld (the prompt's estimate and max_tokens). Please try again in %s.",
				e->name, e->tpm, req->rl_tok_left, req->tok_estimate, wait);
	} else {
		k->limited_tokens++;
		req->retry_after_ms = UINT64_MAX; /* waiting would not help */
		set_typed_error(req, 429, "tokens", NULL, "rate_limit_exceeded",
				"Request too large for the API key '%s' on tokens per min (TPM): Limit %ld, Requested %ld "
				"(the prompt's estimate and max_tokens). Lower max_tokens or send less.",
				e->name, e->tpm, req->tok_estimate);
	}
	return -1;
}

/* The body is complete: validate, route, and answer or suspend. */
static enum MHD_Result start(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;

	pick_request_id(req);
	if (req->too_large) {
		set_error(req, 413, "request_too_large", "the request body is larger than %ld bytes",
			  gw->cfg->max_body_bytes);
		return respond(req);
	}
	req->bytes_in = req->body.len; /* as sent: the forwarded body may differ */
	if (classify_request(req) < 0 || (req->resp_id ? by_id(req) : inspect_body(req)) < 0 || admit(req) < 0)
		return respond(req);
	if (!(req->m = ig_sched_get(&gw->sched, &gw->pool, req->model))) {
		set_error(req, 500, "internal_error", "out of memory");
		return respond(req);
	}
	ig_sched_hold(req->m);
	req->m->requests++;
	struct collect c = {req, MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Connection")};
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, collect_header, &c);
	char *line = ig_strdupf("X-Request-Id: %s", req->request_id);
	req->up_headers = curl_slist_append(req->up_headers, line);
	free(line);
	if ((req->method == IG_RT_POST || req->method == IG_RT_PUT) &&
	    !MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Type"))
		req->up_headers = curl_slist_append(req->up_headers, "Content-Type: application/json");
	req->up_headers = curl_slist_append(req->up_headers, "Expect:");
	if (*gw->cfg->backend_api_key) {
		line = ig_strdupf("Authorization: Bearer %s", gw->cfg->backend_api_key);
		req->up_headers = curl_slist_append(req->up_headers, line);
		free(line);
	}
	if (route(req) == ROUTE_FAILED)
		return respond(req);
	suspend(req);
	return MHD_YES;
}

/* x-ratelimit-limit-WHAT, -remaining-WHAT and -reset-WHAT. */
static void limit_trio(struct MHD_Response *r, const char *what, long limit, long left, uint64_t reset_ms)
{
	char name[48], v[32];
	snprintf(name, sizeof(name), "x-ratelimit-limit-%s", what);
	snprintf(v, sizeof(v), "%ld", limit);
	MHD_add_response_header(r, name, v);
	snprintf(name, sizeof(name), "x-ratelimit-remaining-%s", what);
	snprintf(v, sizeof(v), "%ld", left);
	MHD_add_response_header(r, name, v);
	snprintf(name, sizeof(name), "x-ratelimit-reset-%s", what);
	ig_ratelimit_duration(v, sizeof(v), reset_ms);
	MHD_add_response_header(r, name, v);
}

/* OpenAI's rate-limit headers, for a key with limits: its buckets when the
 * request was admitted (or refused, or when answered if it never got so
 * far). */
static void add_limit_headers(struct ig_req *req, struct MHD_Response *r)
{
	const struct ig_keyent *e = req->key ? req->key->ent : NULL;
	if (!e || (!e->rpm && !e->tpm))
		return;
	if (!req->rl_shown)
		snapshot_limits(req, ig_now_ms());
	if (e->rpm)
		limit_trio(r, "requests", e->rpm, req->rl_req_left, req->rl_req_reset_ms);
	if (e->tpm)
		limit_trio(r, "tokens", e->tpm, req->rl_tok_left, req->rl_tok_reset_ms);
}

static void add_common_headers(struct ig_req *req, struct MHD_Response *r)
{
	MHD_add_response_header(r, "X-Request-Id", req->request_id);
	add_limit_headers(req, r);
	if (req->backend && !req->err_status)
		MHD_add_response_header(r, "X-Infergate-Backend", req->backend->url);
	if (req->was_queued) {
		char ms[24];
		snprintf(ms, sizeof(ms), "%llu", (unsigned long long)req->queue_wait_ms);
		MHD_add_response_header(r, "X-Infergate-Queued-Ms", ms);
	}
}

/* Relays the backend's response headers, but `skip` (NULL: none). */
static void add_relayed_headers(struct ig_req *req, struct MHD_Response *r, const char *skip)
{
	const char *p = req->up_resp_headers.data, *end = p + req->up_resp_headers.len;
	while (p && p < end) {
		const char *name = p, *value = name + strlen(name) + 1;
		p = value + strlen(value) + 1;
		if (!skip || strcasecmp(name, skip) != 0)
			MHD_add_response_header(r, name, value);
	}
}

/* Counts the answer in the metrics and its key's usage, once: as soon as
 * all of it is decided (a whole body queued; a stream queued whose
 * backend is done, or done once queued), before its last bytes reach the
 * client, so that a client that has it and then reads /metrics (on any
 * reactor) finds it counted; else when the connection is done with it. */
static void count_answer(struct ig_req *req)
{
	if (req->counted || !req->status_sent)
		return;
	req->counted = true;
	if (req->key)
		ig_sched_key_count(req->key, ig_proxy_req_status(req));
	ig_metrics_observe(req->gw, req->route_idx, ig_proxy_req_status(req), req->stream_error != 0,
			   req->backend ? req->backend->url : "", ig_now_us() - req->t_start_us,
			   req->stream && req->t_first_byte_us ? (int64_t)(req->t_first_byte_us - req->t_start_us) : -1);
}

/* MHD's content reader, called while the lock is let go (server.c): the
 * request is its reactor's alone once it streams, so no lock (see
 * on_header). */
static ssize_t read_stream(void *cls, uint64_t pos IG_UNUSED, char *buf, size_t max)
{
	struct ig_req *req = cls;
	size_t n = ig_buf_pending(&req->resp);

	if (req->client_gone)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	if (req->upstream_done)
		req->ready = n; /* the end: whatever is left goes */
	if (n > req->ready)
		n = req->ready;
	if (n > 0) {
		if (n > max)
			n = max;
		memcpy(buf, ig_buf_head(&req->resp), n);
		ig_buf_consume(&req->resp, n);
		req->ready -= n;
		req->bytes_out += n;
		if (req->paused && req->xfer.running && ig_buf_pending(&req->resp) < STREAM_LOW_WATER) {
			req->paused = false;
			curl_easy_pause(req->xfer.easy, CURLPAUSE_CONT);
		}
		return (ssize_t)n;
	}
	if (req->upstream_done)
		return req->upstream_failed ? MHD_CONTENT_READER_END_WITH_ERROR
					    : MHD_CONTENT_READER_END_OF_STREAM;
	/* Nothing yet: suspend before returning 0, or MHD spins on us. */
	suspend(req);
	return 0;
}

/* Queues r; body_len counts bytes sent at once (a stream counts its own, as
 * read_stream hands them out). */
static enum MHD_Result queue(struct ig_req *req, unsigned status, struct MHD_Response *r, size_t body_len)
{
	struct ig_gw *gw = req->gw;
	req->bytes_out += body_len;
	enum MHD_Result ret = MHD_queue_response(req->conn, status, r);
	MHD_destroy_response(r);
	if (status >= 100 && status < 600)
		gw->stats.responses[status / 100]++;
	req->status_sent = status;
	req->t_answer_us = ig_now_us();
	return ret;
}

/* Queues whatever is decided (called again after each resume). */
static enum MHD_Result respond(struct ig_req *req)
{
	struct MHD_Response *r;

	if (req->client_gone)
		return MHD_NO;
	if (req->err_status) {
		unwatch_client(req);
		r = MHD_create_response_from_buffer(strlen(req->err_body), req->err_body, MHD_RESPMEM_MUST_COPY);
		MHD_add_response_header(r, "Content-Type", "application/json");
		if (req->retry_after_ms && req->retry_after_ms != UINT64_MAX) {
			/* whole seconds rounded up; the official SDKs read the
			 * milliseconds first (openai-node, openai-python) */
			char v[24];
			snprintf(v, sizeof(v), "%llu", (unsigned long long)((req->retry_after_ms + 999) / 1000));
			MHD_add_response_header(r, "Retry-After", v);
			snprintf(v, sizeof(v), "%llu", (unsigned long long)req->retry_after_ms);
			MHD_add_response_header(r, "retry-after-ms", v);
		} else if (!req->retry_after_ms && (req->err_status == 429 || req->err_status == 503)) {
			MHD_add_response_header(r, "Retry-After", "1");
		}
		add_common_headers(req, r);
		enum MHD_Result ret = queue(req, req->err_status, r, strlen(req->err_body));
		count_answer(req);
		return ret;
	}
	if (req->committed && streaming_ok(req)) {
		/* MHD sends a chunked body (HTTP/1.1) from the connection's own
		 * buffer and uses this block only for HTTP/1.0 clients; a held
		 * stream should not pay 2 KiB for it (10,000 streams). */
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256, read_stream, req, NULL);
		add_relayed_headers(req, r, NULL);
		if (!MHD_get_response_header(r, "Content-Type"))
			MHD_add_response_header(r, "Content-Type", "text/event-stream");
		const char *cc = MHD_get_response_header(r, "Cache-Control");
		if (cc) {
			char *copy = strdup(cc);
			MHD_del_response_header(r, "Cache-Control", copy);
			free(copy);
		}
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		MHD_add_response_header(r, "X-Accel-Buffering", "no");
		add_common_headers(req, r);
		enum MHD_Result ret = queue(req, (unsigned)req->up_status, r, 0);
		if (req->upstream_done)
			count_answer(req);
		return ret;
	}
	if (req->upstream_done) {
		unwatch_client(req);
		/* The client gets OpenAI's error shape whatever the backend used
		 * (SGLang answers flat, FastAPI {"detail"}), message kept. */
		char *oa = req->up_status >= 400 ? ig_oaerror_normalize((unsigned)req->up_status,
			ig_buf_head(&req->resp), ig_buf_pending(&req->resp)) : NULL;
		if (oa) {
			size_t n = strlen(oa);
			r = MHD_create_response_from_buffer(n, oa, MHD_RESPMEM_MUST_FREE);
			add_relayed_headers(req, r, "Content-Type");
			MHD_add_response_header(r, "Content-Type", "application/json");
			add_common_headers(req, r);
			enum MHD_Result ret = queue(req, (unsigned)req->up_status, r, n);
			count_answer(req);
			return ret;
		}
		r = MHD_create_response_from_buffer(ig_buf_pending(&req->resp), (void *)ig_buf_head(&req->resp),
						    MHD_RESPMEM_MUST_COPY);
		add_relayed_headers(req, r, NULL);
		add_common_headers(req, r);
		enum MHD_Result ret = queue(req, (unsigned)req->up_status, r, ig_buf_pending(&req->resp));
		count_answer(req);
		return ret;
	}
	/* Resumed with nothing to say yet (a spurious wake-up): wait again. */
	suspend(req);
	return MHD_YES;
}

static enum ig_upstream_error classify(struct ig_req *req, CURLcode result)
{
	curl_off_t connect_us = 0;
	if (result == CURLE_OK)
		return (req->up_status == 502 || req->up_status == 503 || req->up_status == 504)
			       ? IG_UPERR_STATUS : IG_UPERR_NONE;
	curl_easy_getinfo(req->xfer.easy, CURLINFO_CONNECT_TIME_T, &connect_us);
	switch (result) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
		return IG_UPERR_CONNECT;
	case CURLE_OPERATION_TIMEDOUT:
		return connect_us == 0 ? IG_UPERR_CONNECT : IG_UPERR_TIMEOUT;
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return IG_UPERR_RESET;
	default:
		return IG_UPERR_OTHER;
	}
}

static void end_stream_with_error(struct ig_req *req, const char *why)
{
	bool responses = rt(req)->flags & IG_RT_RESPONSES;
	char *err;
	if (responses) { /* the Responses API's error event */
		json_t *e = json_pack("{s:s, s:s, s:s, s:n, s:I}", "type", "error", "code", "backend_error", "message",
				      why, "param", "sequence_number", (json_int_t)req->sse_events);
		err = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
		json_decref(e);
	} else {
		err = ig_oaerror_json(why, "server_error", NULL, "backend_error");
	}
	req->stream_error = 502;
	free(req->stream_error_msg);
	req->stream_error_msg = strdup(why);
	/* Drop the torn event the backend left: only whole events go out. */
	req->resp.len = req->resp.off + req->ready;
	ig_buf_printf(&req->resp, "%sdata: %s\n\n", responses ? "event: error\n" : "", err ? err : "{}");
	req->ready = ig_buf_pending(&req->resp);
	free(err);
	req->upstream_failed = true;
}

/* least-tokens: the backend's speed, output tokens per second of one
 * request from the start of its attempt to its end, as a moving average (a
 * fifth of each new answer). From the start, not from the first byte: a
 * server that queues requests of its own delivers less per second of a
 * request's life, however fast it decodes once it runs them. */
static void note_speed(struct ig_req *req, struct ig_backend *b)
{
	uint64_t now = ig_now_us(), from = req->t_attempt_us;
	if (req->completion_tokens < 2 || now <= from)
		return;
	double milli = (double)req->completion_tokens * 1e9 / (double)(now - from);
	long old = atomic_load(&b->speed_milli);
	atomic_store(&b->speed_milli, old > 0 ? (long)(0.8 * (double)old + 0.2 * milli) : (long)milli);
}

/* One attempt ended (e says how): account for it, then retry, relay or
 * answer. */
static void end_attempt(struct ig_req *req, enum ig_upstream_error e, const char *detail)
{
	struct ig_gw *gw = req->gw;
	struct ig_backend *b = req->backend;

	ig_upstream_stop(&req->xfer); /* when it ends early: idle timeout */
	release_slot(req);
	if (e != IG_UPERR_NONE) {
		req->last_err = e;
		gw->stats.upstream_errors[e]++;
		atomic_fetch_add(&b->failures, 1);
		ig_health_passive_fail(gw, b, e, detail);
		if (req->committed) {
			ig_log_warn("request %s: backend %s failed mid-stream (%s)", req->request_id, b->url, detail);
			end_stream_with_error(req, "the backend failed while streaming; the response is incomplete");
		} else if (req->retries_done < gw->cfg->retries) {
			req->retries_done++;
			gw->stats.retries++;
			atomic_fetch_add(&b->retried, 1);
			ig_log_debug("request %s: retrying after %s from %s", req->request_id, detail, b->url);
			if (route(req) != ROUTE_FAILED) {
				ig_proxy_drain_queue(gw);
				return;
			}
			/* Nowhere else to go: a backend's own 5xx answer says more
			 * than ours. */
			if (e == IG_UPERR_STATUS) {
				req->err_status = 0;
				req->backend = b;
			}
		} else if (e != IG_UPERR_STATUS) {
			set_error(req, e == IG_UPERR_TIMEOUT ? 504 : 502,
				  e == IG_UPERR_TIMEOUT ? "backend_timeout" : "backend_error",
				  "backend %s failed: %s", b->url, detail);
		}
	} else {
		atomic_fetch_add(&b->served, 1);
		ig_health_passive_ok(gw, b);
		if (!streaming_ok(req) && req->up_status >= 200 && req->up_status < 300 && req->resp.len) {
			usage_from_json(req, req->resp.data, req->resp.len);
			if (req->store && !req->stored) {
				json_t *o = json_loadb(req->resp.data, req->resp.len, 0, NULL);
				remember_response(req, o);
				json_decref(o);
			}
		}
		if (req->prompt_tokens > 0) {
			atomic_fetch_add(&b->prompt_tokens, (unsigned long)req->prompt_tokens);
			gw->stats.prompt_tokens += (uint64_t)req->prompt_tokens;
			req->key->prompt_tokens += (uint64_t)req->prompt_tokens;
		}
		if (req->completion_tokens > 0) {
			atomic_fetch_add(&b->completion_tokens, (unsigned long)req->completion_tokens);
			gw->stats.completion_tokens += (uint64_t)req->completion_tokens;
			req->key->completion_tokens += (uint64_t)req->completion_tokens;
			note_speed(req, b);
		}
	}
	settle_tokens(req, e == IG_UPERR_NONE && req->up_status / 100 == 2 && !req->stream_error);
	req->upstream_done = true;
	req->phase = IG_REQ_FINISHED;
	if (req->committed)
		count_answer(req); /* a stream already queued: its end is decided */
	resume(req);
	ig_proxy_drain_queue(gw);
}

static void on_upstream_done(struct ig_xfer *x, CURLcode result)
{
	struct ig_req *req = IG_CONTAINER_OF(x, struct ig_req, xfer);
	enum ig_upstream_error e = classify(req, result);
	char detail[256];

	if (e == IG_UPERR_STATUS)
		snprintf(detail, sizeof(detail), "HTTP %ld", req->up_status);
	else
		snprintf(detail, sizeof(detail), "%s", curl_easy_strerror(result));
	end_attempt(req, e, detail);
}

void ig_proxy_req_client_gone(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;

	if (req->client_gone)
		return;
	req->client_gone = true;
	unwatch_client(req);
	if (req->xfer.running || req->start_posted) {
		req->start_posted = false; /* its reactor will not start it */
		ig_upstream_stop(&req->xfer);
		release_slot(req);
		atomic_fetch_add(&req->backend->aborted, 1);
		gw->stats.client_aborts++;
		ig_log_debug("request %s: client left, upstream transfer to %s aborted", req->request_id,
			     req->backend->url);
	}
	if (req->phase == IG_REQ_QUEUED) {
		dequeue(req);
		gw->stats.client_aborts++;
	}
	req->phase = IG_REQ_FINISHED;
	resume(req); /* MHD must see the connection to close it */
	ig_proxy_drain_queue(gw);
}

/* A waiter taken out of its queue while the drain looks past it. */
struct parked {
	struct ig_waiter *w;
	struct ig_model *m;
	double tag;                  /* its flow's, should the flow go with it */
};

/* Starts waiting requests while their models' backends have slots, one
 * model after another (one request each per round), so that a model whose
 * backends are busy never holds up another's; within a model, a request
 * pinned to a full backend is looked past (parked). */
void ig_proxy_drain_queue(struct ig_gw *gw)
{
	struct ig_sched *s = &gw->sched;
	bool progress = gw->qlen > 0;
	struct parked *parked = NULL;
	size_t nparked = 0, capparked = 0;

	while (progress) {
		progress = false;
		for (size_t k = 0; k < s->n; k++) {
			struct ig_model *m = s->v[(s->next + k) % s->n];
			struct ig_waiter *w;
			struct ig_backend *b = NULL;
			struct ig_req *req = NULL;
			enum ig_pick p = IG_PICK_NONE;
			while ((w = m->qlen ? ig_sched_next(s, m) : NULL)) {
				req = IG_CONTAINER_OF(w, struct ig_req, wait);
				struct ig_route_req rq = route_req(req);
				p = ig_router_pick(m->backends, m->nbackends, &m->rotor, gw->cfg->policy, &rq, &b);
				if (p != IG_PICK_BUSY || !req->pinned)
					break;
				/* Pinned to a backend that is full: the requests behind it
				 * need not wait for that one (no head-of-line blocking);
				 * it goes back where it was after the drain. */
				if (nparked == capparked) {
					struct parked *v = realloc(parked, (capparked = capparked ? 2 * capparked : 8) * sizeof(*v));
					if (!v)
						break;
					parked = v;
				}
				parked[nparked++] = (struct parked){w, m, w->flow->tag};
				ig_sched_dequeue(s, m, w);
			}
			if (!w || p == IG_PICK_BUSY || (p == IG_PICK_NONE && m->nbackends == 0 && s->unknown_up > 0))
				continue;
			ig_sched_dispatch(s, m, w);
			dequeue(req);
			progress = true;
			if (p == IG_PICK_OK)
				start_transfer(req, b);
			else if (req->pinned)
				pin_lost(req);
			else if (m->nbackends == 0)
				not_served(req);
			else
				set_error(req, 503, "no_healthy_backend",
					  "no healthy backend serves the model '%s' any more while the request waited", req->model);
			if (!req->xfer.running && !req->start_posted)
				resume(req);
		}
		s->next++;
	}
	/* Back in front of their queues, in their order. */
	while (nparked > 0) {
		struct parked *pk = &parked[--nparked];
		if (ig_sched_requeue_front(s, pk->m, pk->w, pk->tag) < 0) {
			struct ig_req *req = IG_CONTAINER_OF(pk->w, struct ig_req, wait);
			dequeue(req);
			set_error(req, 500, "internal_error", "out of memory");
			resume(req);
		}
	}
	free(parked);
}

/* Transfers with no byte from their backend for timeouts.idle_s. A paused
 * transfer is waiting for a slow client, not for the backend. */
static void scan_idle(struct ig_rx *rx, uint64_t now_ms)
{
	struct ig_gw *gw = rx->gw;
	uint64_t limit = (uint64_t)gw->cfg->idle_s * 1000u;
	struct ig_req *req, *next;
	IG_LIST_FOREACH_SAFE(req, next, &rx->reqs, struct ig_req, link) {
		if (req->xfer.running && !req->paused && now_ms - req->last_io_ms >= limit) {
			char detail[96];
			snprintf(detail, sizeof(detail), "no byte for %lds", gw->cfg->idle_s);
			end_attempt(req, IG_UPERR_TIMEOUT, detail);
		}
	}
}

/* Requests suspended WATCH_AFTER_MS get their hang-up watch. Only the
 * queue of those suspended unwatched is read, oldest first, not every
 * request: 10,000 held streams are watched once each. */
static void scan_watch(struct ig_rx *rx, uint64_t now_ms)
{
	struct ig_req *req;
	while ((req = IG_LIST_FIRST(&rx->to_watch, struct ig_req, watch_link))) {
		if (req->suspended && !req->watching && now_ms - req->suspended_at_ms < WATCH_AFTER_MS)
			break;
		ig_list_del(&req->watch_link);
		if (req->suspended && !req->watching)
			watch_client(req);
	}
}

/* A request that waited its class's queue_timeout: 503. */
static void expire_one(struct ig_waiter *w, void *arg IG_UNUSED)
{
	struct ig_req *req = IG_CONTAINER_OF(w, struct ig_req, wait);
	struct ig_gw *gw = req->gw;
	dequeue(req);
	gw->stats.queue_timeouts++;
	req->m->timeouts++;
	set_error(req, 503, "queue_timeout", "waited %llu ms for a free backend (class %s); retry later",
		  (unsigned long long)queue_timeout_ms(gw->cfg, req->wait.klass), ig_conf_class_name(req->wait.klass));
	resume(req);
}

void ig_proxy_tick_rx(struct ig_rx *rx, uint64_t now_ms)
{
	if (now_ms >= rx->next_watch_scan_ms) {
		rx->next_watch_scan_ms = now_ms + WATCH_AFTER_MS / 2;
		scan_watch(rx, now_ms);
	}
	if (now_ms >= rx->next_idle_scan_ms) {
		rx->next_idle_scan_ms = now_ms + 250;
		scan_idle(rx, now_ms);
	}
}

void ig_proxy_run_posted(struct ig_rx *rx)
{
	struct ig_req *req;
	while ((req = IG_LIST_FIRST(&rx->posted, struct ig_req, post_link))) {
		unsigned ops = req->post_ops;
		ig_list_del(&req->post_link);
		req->post_ops = 0;
		if ((ops & IG_POST_START) && req->start_posted) {
			req->start_posted = false;
			begin_transfer(req);
			if (!req->xfer.running)
				ops |= IG_POST_RESUME; /* it failed: the error is the answer */
		}
		if (ops & IG_POST_RESUME)
			resume(req);
	}
}

void ig_proxy_tick(struct ig_gw *gw, uint64_t now_ms)
{
	ig_proxy_drain_queue(gw);
	/* Each flow is FIFO within one timeout: its head expires first. */
	for (size_t i = 0; i < gw->sched.n && gw->qlen; i++)
		ig_sched_expire(&gw->sched, gw->sched.v[i], now_ms, expire_one, NULL);
}

static void req_log(struct ig_req *req, bool completed)
{
	struct ig_gw *gw = req->gw;
	char ts[40];
	uint64_t now = ig_now_us();

	if (gw->alog.fd < 0)
		return;
	ig_iso_time(ts, sizeof(ts));
	/* Time to first byte: the first streamed chunk, or the whole answer. */
	uint64_t first = req->t_first_byte_us ? req->t_first_byte_us : req->t_answer_us;
	/* A stream that carried an error event is logged as the error's status
	 * (status_sent says what went on the wire) with its message. */
	json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:s, s:I, s:o, s:b, s:I, s:I, s:o, "
			      "s:f, s:I, s:o, s:o, s:b}",
			      "time", ts, "request_id", req->request_id, "client", req->client,
			      "method", ig_routes_method_name(req->method), "path",
			      req->up_path ? req->up_path : ig_route_path(req->gw->cfg, req->route_idx),
			      "status", (json_int_t)ig_proxy_req_status(req),
			      "status_sent", (json_int_t)req->status_sent,
			      "error", req->stream_error_msg ? json_string(req->stream_error_msg) : json_null(),
			      "backend", req->backend ? json_string(req->backend->url) : json_null(),
			      "model", req->model ? json_string(req->model) : json_null(),
			      "alias", req->alias ? json_string(req->alias) : json_null(),
			      "key", req->key && req->key->ent ? json_string(req->key->ent->name) : json_null(),
			      "priority", ig_conf_class_name(req->wait.klass),
			      "queue_ms", (json_int_t)req->queue_wait_ms,
			      "dispatch", req->dispatch_seq ? json_integer((json_int_t)req->dispatch_seq) : json_null(),
			      "stream", req->stream,
			      "bytes_in", (json_int_t)req->bytes_in,
			      "bytes_out", (json_int_t)req->bytes_out,
			      "ttfb_ms", first ? json_real((double)(first - req->t_start_us) / 1000.0) : json_null(),
			      "duration_ms", (double)(now - req->t_start_us) / 1000.0,
			      "retries", (json_int_t)req->retries_done,
			      "prompt_tokens", req->prompt_tokens >= 0 ? json_integer(req->prompt_tokens) : json_null(),
			      "completion_tokens",
			      req->completion_tokens >= 0 ? json_integer(req->completion_tokens) : json_null(),
			      "completed", completed);
	ig_accesslog_write(&gw->alog, e);
}

/* ---- the MHD side: req->call ---- */

/* MHD's access handler for this request: body bytes, then the end of the
 * body (start), then a call after every resume (respond). */
static enum MHD_Result on_request(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn IG_UNUSED,
				  const char *url IG_UNUSED, const char *method IG_UNUSED,
				  const char *upload_data, size_t *upload_data_size, void **con_cls IG_UNUSED)
{
	struct ig_req *req = IG_CONTAINER_OF(call, struct ig_req, call);
	if (*upload_data_size) {
		if (!req->too_large) {
			if (req->body.len + *upload_data_size > (size_t)gw->cfg->max_body_bytes) {
				req->too_large = true;
				ig_buf_free(&req->body);
			} else if (ig_buf_append(&req->body, upload_data, *upload_data_size) < 0) {
				return MHD_NO;
			}
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (req->phase == IG_REQ_READING) {
		if (!req->too_large && !req->resp_id && gw->threaded) {
			/* The body is parsed with the lock let go (it is the largest
			 * part of a request's own work): the request is this
			 * reactor's alone until start() admits it. */
			int depth = ig_gw_release(gw);
			req->parsed = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, &req->parse_error);
			ig_gw_reacquire(gw, depth);
			req->parse_done = true;
		}
		return start(req);
	}
	return respond(req);
}

/* The connection is done with the request: count it, log it, free it. */
static void on_completed(struct ig_call *call, enum MHD_RequestTerminationCode toe)
{
	struct ig_req *req = IG_CONTAINER_OF(call, struct ig_req, call);
	if (!req->client_gone) {
		if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
			ig_log_debug("request %s: connection ended early (%d)", req->request_id, (int)toe);
		/* The connection is finishing: it must not be resumed again. */
		req->suspended = false;
		ig_proxy_req_client_gone(req);
	}
	count_answer(req); /* one that never reached its end: a stream the client left */
	req_log(req, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
	req_free(req);
}
