/* The request object: it owns both halves of one proxied call, the client
 * connection (suspended while it waits) and the upstream transfer, and moves
 * one way: body read -> admitted (admission.c) -> dispatched: started, queued
 * or refused (dispatch.c) -> transfer -> bytes relayed (relay.c) -> client.
 * Retries happen here, only while no byte has been handed to the client.
 * Its MHD side is req->call (body, answer, completion), set up by server.c's
 * handler; its upstream side is req->xfer, whose end upstream.c reports
 * through xfer.done; dispatch reports through req->wait's ops. Work another
 * reactor decides for it (a start, an answer) is posted to its own.
 * Not here: URL routing and the gateway's own endpoints (server.c), the
 * checks of a body (admission.c), the queues and backend choice (dispatch.c),
 * the bytes of an answer (relay.c), curl's sockets (upstream.c). */
#include "config.h"
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <poll.h>
#include <sys/epoll.h>
#include <time.h>

#include <openssl/evp.h>

#include "health.h"
#include "idem.h"
#include "idem_share.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "keyset.h"
#include "metrics.h"
#include "exchange.h"
#include "strategy.h"
#include "ratelimit.h"
#include "cluster.h"
#include "peer.h"
#include "respstore.h"
#include "rx.h"

static enum MHD_Result on_request(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
				  const char *url, const char *method, const char *upload_data,
				  size_t *upload_data_size, void **con_cls);
static void on_completed(struct ig_call *call, enum MHD_RequestTerminationCode toe);
static void on_hangup(struct ig_call *call);
static void on_upstream_done(struct ig_xfer *x, CURLcode result);
static int on_dispatched(struct ig_waiter *w, struct ig_backend *b);
static void on_refused(struct ig_waiter *w, const struct ig_dispatch_error *e);
static void relay_wake(struct ig_relay *r);
static void relay_idle(struct ig_relay *r);
static void relay_committed(struct ig_relay *r);
static void relay_event(struct ig_relay *r);
static void relay_stored(struct ig_relay *r, json_t *response);
static void relay_tee(struct ig_relay *r, const char *p, size_t n);
static bool relay_first_byte(struct ig_relay *r);

/* The path it goes to upstream: its own (a by-id route's), else its route's. */
const char *ig_xch_req_path(const struct ig_req *req)
{
	return req->adm.up_path ? req->adm.up_path : ig_route_path(req->gw->cfg, req->adm.route_idx);
}

static const struct ig_waiter_ops waiter_ops = {on_dispatched, on_refused};
static const struct ig_relay_ops relay_ops = {relay_wake,  relay_idle,   relay_committed, relay_event,
					      relay_stored, relay_tee, relay_first_byte};

static struct ig_req *of_relay(struct ig_relay *r)
{
	return IG_CONTAINER_OF(r, struct ig_req, relay);
}

/* What every exchange (and a hedge) starts with: its lists, its
 * transfer's and relay's and waiter's callbacks, its reactor (this one). */
void ig_xch_init(struct ig_req *req, struct ig_gw *gw, int route_idx, unsigned method)
{
	ig_admission_init(&req->adm);
	req->adm.method = method;
	req->adm.route_idx = route_idx;
	req->xfer.done = on_upstream_done;
	ig_list_init(&req->xfer.unpause_link);
	req->gw = gw;
	ig_list_init(&req->idem_link);
	ig_list_init(&req->post_link);
	req->t_start_us = ig_now_us();
	ig_buf_init(&req->body);
	ig_buf_init(&req->orig_body);
	ig_relay_init(&req->relay, &relay_ops);
	ig_list_init(&req->wait.q.link);
	req->wait.q.klass = IG_CLASS_NORMAL;
	req->wait.ops = &waiter_ops;
	req->rx = ig_rx_self;
	ig_list_append(&req->rx->reqs, &req->link);
	gw->nreqs++;
}

struct ig_req *ig_proxy_req_new(struct ig_gw *gw, struct MHD_Connection *conn, int route_idx, unsigned method,
				const char *id, size_t idn)
{
	struct ig_req *req = calloc(1, sizeof(*req));
	char *rid = NULL;
	if (!req || (id && !(rid = strndup(id, idn)))) {
		free(req);
		return NULL;
	}
	ig_xch_init(req, gw, route_idx, method); /* the reactor whose daemon holds conn */
	req->adm.resp_id = rid;
	req->call = (struct ig_call){on_request, on_completed, on_hangup};
	req->conn = conn;
	req->relay.usage_where = ig_gw_route(gw->cfg, route_idx)->usage;
	req->relay.responses = ig_gw_route(gw->cfg, route_idx)->flags & IG_RT_RESPONSES;
	snprintf(req->client, sizeof(req->client), "%s", ig_peer_client(conn));
	snprintf(req->peer, sizeof(req->peer), "%s", ig_peer_sock(conn));
	req->rx->requests++;
	return req;
}

/* Its spans to the exporter: the queue wait, its attempts, and (but for a
 * hedge, whose spans are its primary's children) the server span with
 * what the GenAI conventions name (gen_ai.*) and ours (infergate.*). */
static void trace_finish(struct ig_req *req)
{
	struct ig_trace *t = &req->trace;
	if (!t->spans) { /* not sampled, or not recorded (the exporter is full): nothing to build */
		ig_trace_end(t, NULL, NULL);
		return;
	}
	if (req->t_submit_us && !req->is_hedge) {
		json_t *q = ig_trace_child(t, "queue", IG_SPAN_INTERNAL, req->t_submit_us,
					   req->t_first_attempt_us ? req->t_first_attempt_us : ig_now_us());
		ig_span_str(q, "infergate.class", ig_conf_class_name(req->wait.q.klass));
		ig_span_int(q, "infergate.queue_ms", (long long)req->wait.waited_ms);
		ig_span_bool(q, "infergate.queued", req->wait.was_queued);
	}
	json_t *s = NULL;
	if (!req->is_hedge) {
		const char *path = ig_xch_req_path(req);
		const char *method = ig_routes_method_name(req->adm.method);
		char name[300];
		snprintf(name, sizeof(name), "%s %s", method, path ? path : "");
		s = ig_trace_server_span(t, name);
		unsigned status = ig_proxy_req_status(req);
		const struct ig_relay *rl = &req->relay;
		ig_span_str(s, "http.request.method", method);
		ig_span_str(s, "url.path", path);
		ig_span_int(s, "http.response.status_code", status);
		ig_span_str(s, "gen_ai.operation.name", ig_xch_gen_ai_operation(req));
		ig_span_str(s, "gen_ai.request.model", req->adm.model);
		if (rl->prompt_tokens >= 0)
			ig_span_int(s, "gen_ai.usage.input_tokens", rl->prompt_tokens);
		if (rl->completion_tokens >= 0)
			ig_span_int(s, "gen_ai.usage.output_tokens", rl->completion_tokens);
		if (req->wait.backend)
			ig_span_str(s, "server.address", req->wait.backend->url);
		ig_span_str(s, "infergate.request_id", req->request_id);
		/* the believed client (X-Forwarded-For from trusted_proxies) and
		 * the socket's, as OpenTelemetry's HTTP server spans name them */
		if (*req->client)
			ig_span_str(s, "client.address", req->client);
		if (*req->peer)
			ig_span_str(s, "network.peer.address", req->peer);
		ig_span_str(s, "infergate.class", ig_conf_class_name(req->wait.q.klass));
		if (req->adm.key && req->adm.key->ent)
			ig_span_str(s, "infergate.key", req->adm.key->ent->name);
		ig_span_int(s, "infergate.queue_ms", (long long)req->wait.waited_ms);
		ig_span_int(s, "infergate.retries", req->retries_done);
		ig_span_int(s, "infergate.continuations", rl->cont.count);
		if (status >= 500 || status == 0)
			ig_span_error(s, rl->stream_error_msg ? rl->stream_error_msg : req->err_body ? "an error answer"
				      : "no answer");
	}
	ig_trace_end(t, req->gw->tracer, s);
}

void ig_xch_req_free(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	trace_finish(req);
	ig_list_del(&req->link);
	ig_list_del(&req->post_link);
	gw->nreqs--;
	ig_buf_free(&req->body);
	ig_buf_free(&req->orig_body);
	free(req->cont_refused);
	if (req->hedge_of && req->hedge_of->hedge == req)
		req->hedge_of->hedge = NULL;
	if (req->hedge) { /* its hedge: on if it won (it runs for itself), else dropped */
		struct ig_req *h = req->hedge;
		h->hedge_of = NULL;
		req->hedge = NULL;
		if (req->hedge_winner != 2)
			ig_hedge_drop(h);
	}
	if (req->idem) {
		ig_list_del(&req->idem_link);
		if (req->idem_runner && !req->idem_ended) { /* never told: not kept, its readers told */
			char *body = ig_oaerror_json("the first request with this Idempotency-Key ended before its "
						     "answer; send it again", "api_error", NULL, "idempotent_request_failed");
			ig_idem_fail(&gw->idem, req->idem, 502, body ? body : "{}", ig_now_ms());
			free(body);
			ig_idem_share_end(gw, req->idem);
		}
		ig_idem_put(&gw->idem, req->idem);
	}
	free(req->fallback);
	json_decref(req->parsed); /* answered before admission took it */
	curl_slist_free_all(req->up_headers);
	ig_upstream_easy_put(req->rx, req->xfer.easy);
	if (req->wait.m)
		ig_sched_release(&gw->sched, req->wait.m);
	ig_admission_settle(&req->adm, req->relay.prompt_tokens, req->relay.completion_tokens,
			    ig_proxy_req_status(req) / 100 == 2);
	ig_admission_free(gw, &req->adm, false);
	if (req->wait.q.key)
		ig_clients_release(&gw->clients, req->wait.q.key);
	free(req->wait.pick.chain);
	ig_relay_free(&req->relay);
	free(req->prio_body);
	free(req->err_body);
	free(req);
}

/* ---- client side: suspend/resume ---- */

void ig_xch_suspend(struct ig_req *req)
{
	if (!req->suspended && !req->detached) {
		MHD_suspend_connection(req->conn);
		req->suspended = true;
	}
}

/* Hands req to its own reactor, which does `ops` (IG_HAND_*) when it wakes
 * (ig_proxy_run_posted): another reactor's thread must not touch its
 * connection or its transfer. */
void ig_xch_hand_over(struct ig_req *req, unsigned ops)
{
	req->post_ops |= ops;
	if (!ig_list_linked(&req->post_link))
		ig_list_append(&req->rx->posted, &req->post_link);
	ig_rx_wake(req->rx);
}

/* Lets MHD see the connection again; the reactor runs MHD for it before
 * it next waits (ig_httpd_resumed). Resuming one that is not suspended is
 * undefined in MHD, hence the flag. */
void ig_xch_resume(struct ig_req *req)
{
	if (req->rx != ig_rx_self) {
		ig_xch_hand_over(req, IG_HAND_RESUME);
		return;
	}
	if (req->detached) {
		/* no client to wake: once its answer is decided, it ends (later in
		 * this turn: its callers may still hold it) */
		if (req->err_status || req->relay.upstream_done)
			ig_xch_hand_over(req, IG_HAND_DETACHED_END);
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
}

void ig_xch_set_error(struct ig_req *req, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	error_answer(req, status, ig_oaerror_type_for_status(status), NULL, code, fmt, ap);
	va_end(ap);
}

/* An error decided by admission or dispatch. */
void ig_xch_set_decided_error(struct ig_req *req, unsigned status, const char *type, const char *param,
			      const char *code, const char *message)
{
	free(req->err_body);
	req->err_status = status;
	req->err_body = ig_oaerror_json(message, type ? type : ig_oaerror_type_for_status(status), param, code);
}

/* ---- Idempotency-Key (idem.h): the runner's answer told, its readers woken ---- */

/* Readers waiting for more of e's answer: resumed. Under the lock. */
static void idem_wake(struct ig_idem_entry *e)
{
	struct ig_req *r;
	while ((r = IG_LIST_FIRST(&e->waiting, struct ig_req, idem_link))) {
		ig_list_del(&r->idem_link);
		ig_xch_resume(r);
	}
}

/* The answer's status and Content-Type, once. Under the lock. */
static void idem_status(struct ig_idem_entry *e, unsigned status, const char *ctype)
{
	if (!e || e->status)
		return;
	e->status = status;
	free(e->content_type);
	e->content_type = ctype ? strdup(ctype) : NULL;
	idem_wake(e);
}

/* A runner's stream bytes (the relay's tee, the lock let go). */
static void relay_tee(struct ig_relay *r, const char *p, size_t n)
{
	struct ig_req *req = of_relay(r);
	ig_gw_lock(req->gw);
	if (req->idem) {
		ig_idem_append(req->idem, p, n);
		idem_wake(req->idem);
	}
	ig_gw_unlock(req->gw);
}

/* A runner's answer is decided: its entry told (a whole answer's bytes, or
 * what a stream had not teed), kept or not. A refusal or failure of the
 * gateway's, a 5xx, a stream cut or ended by an error event are not kept:
 * a retry runs again. Under the lock; once. */
static void idem_finish(struct ig_req *req)
{
	struct ig_idem_entry *e = req->idem;
	struct ig_relay *rl = &req->relay;
	bool failed;
	if (!req->idem_runner || req->idem_ended)
		return;
	if (req->err_status && !rl->committed) {
		idem_status(e, req->err_status, "application/json");
		ig_idem_append(e, req->err_body, strlen(req->err_body));
		failed = true;
	} else if (rl->committed && rl->stream) {
		if (!rl->upstream_done)
			return;
		ig_relay_tee_rest(rl);
		failed = rl->upstream_failed || rl->stream_error || rl->client_gone;
	} else if (rl->upstream_done) {
		char *oa = rl->up_status >= 400 ? ig_oaerror_normalize((unsigned)rl->up_status, ig_buf_head(&rl->resp),
									ig_buf_pending(&rl->resp)) : NULL;
		idem_status(e, (unsigned)rl->up_status, oa ? "application/json" : ig_relay_header(rl, "Content-Type"));
		if (oa)
			ig_idem_append(e, oa, strlen(oa));
		else
			ig_idem_append(e, ig_buf_head(&rl->resp), ig_buf_pending(&rl->resp));
		free(oa);
		failed = rl->up_status >= 500;
	} else {
		return;
	}
	req->idem_ended = true;
	ig_idem_end(&req->gw->idem, e, failed, ig_now_ms());
	ig_idem_share_end(req->gw, e);
	idem_wake(e);
}

void ig_proxy_idem_wake(struct ig_idem_entry *e)
{
	idem_wake(e);
}

/* The Idempotency-Key of a POST, if it has one: 0 it runs (the first with
 * its key, or none), 1 it reads another's answer (joined or replayed), -1
 * refused (a malformed key: 400; another body under the same key: 422), 2
 * the other gateways are asked first (idem_share.h; idem_asked decides). */
static int idem_begin(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	if (!gw->cfg->idem_ttl_s || req->adm.method != IG_RT_POST || req->adm.resp_id)
		return 0;
	const char *v = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Idempotency-Key");
	if (!v)
		return 0;
	size_t n = strlen(v);
	bool ok = n > 0 && n <= IG_IDEM_KEY_MAX;
	for (size_t i = 0; ok && i < n; i++)
		ok = v[i] >= 0x20 && v[i] < 0x7f;
	if (!ok) {
		ig_xch_set_decided_error(req, 400, NULL, "Idempotency-Key", "invalid_idempotency_key",
				  "the Idempotency-Key header must be 1 to 255 printable ASCII characters");
		return -1;
	}
	/* what the value names: the route and the body; the same value sent to
	 * another route is a conflict, never that route's answer */
	unsigned char digest[32];
	const char *route = ig_gw_route(gw->cfg, req->adm.route_idx)->path;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL) || !EVP_DigestUpdate(md, route, strlen(route) + 1) ||
	    !EVP_DigestUpdate(md, req->body.data ? req->body.data : "", req->body.len) ||
	    !EVP_DigestFinal_ex(md, digest, NULL)) {
		EVP_MD_CTX_free(md);
		return 0; /* out of memory: it runs, not kept */
	}
	EVP_MD_CTX_free(md);
	/* keys are scoped to the API key: another's same value is another key */
	char *scope = ig_strdupf("%s\n%s", req->adm.key ? req->adm.key->digest : "", v);
	ig_idem_expire(&gw->idem, ig_now_ms());
	struct ig_idem_entry *e = ig_idem_find(&gw->idem, scope);
	if (!e) {
		e = ig_idem_add(&gw->idem, scope, digest);
		free(scope);
		if (!e)
			return 0; /* out of memory: it runs, not kept */
		req->idem = e;
		req->idem_runner = true;
		if (ig_idem_share_claim(gw, e) == 0) {
			req->idem_asking = true;
			return 2;
		}
		gw->stats.idem[0]++;
		return 0;
	}
	free(scope);
	if (memcmp(e->digest, digest, sizeof(digest)) != 0) {
		gw->stats.idem[3]++;
		ig_xch_set_decided_error(req, 422, "invalid_request_error", "Idempotency-Key", "idempotency_key_conflict",
				  IG_IDEM_CONFLICT_MESSAGE);
		return -1;
	}
	e->refs++;
	req->idem = e;
	req->idem_reader = true;
	gw->stats.idem[e->done ? 2 : 1]++;
	ig_log_debug("request %s: Idempotency-Key '%s' %s", req->request_id, v,
		     e->done ? "was answered: the answer is replayed" : "runs: its answer is followed");
	return 1;
}

/* ---- hedging: a straggler sent to a second backend, the first byte wins ---- */

/* Its attempt stopped where it is: a transfer running (or about to start
 * on its reactor) cut, its slot given back and counted as aborted at its
 * backend; a place in the queue left. Returns whether a transfer was cut.
 * Not from a curl callback. */
bool ig_xch_stop_attempt(struct ig_req *req)
{
	bool cut = req->xfer.running || req->start_posted;
	if (cut) {
		req->start_posted = false; /* its reactor will not start it */
		ig_upstream_stop(&req->xfer);
		ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		atomic_fetch_add(&req->wait.backend->aborted, 1);
	}
	if (req->wait.queued)
		ig_dispatch_cancel(req->gw, &req->wait);
	return cut;
}

/* ---- dispatch's callbacks ---- */

/* Dispatch will not run it (any reactor, under the lock): its answer. */
static void on_refused(struct ig_waiter *w, const struct ig_dispatch_error *e)
{
	struct ig_req *req = IG_CONTAINER_OF(w, struct ig_req, wait);
	if (req->hedge_of && !req->xfer.running && !req->relay.first_seen) {
		req->hedge_refused = true; /* hedge_start drops it */
		return;
	}
	if (req->relay.committed) { /* a continuation: its stream is under way */
		free(req->cont_refused);
		req->cont_refused = strdup(e->message);
		if (req->rx != ig_rx_self)
			ig_xch_hand_over(req, IG_HAND_END_STREAM);
		else
			ig_xch_end_refused_stream(req);
		return;
	}
	ig_xch_set_decided_error(req, e->status, e->type, e->param, e->code, e->message);
	req->refused_code = e->code;
	ig_xch_resume(req);
}

/* The transfer configure_transfer set up goes into the multi of req's reactor (on
 * its thread). */
static void add_transfer(struct ig_req *req)
{
	CURLMcode mc = ig_upstream_start(req->rx, &req->xfer);
	if (mc != CURLM_OK) {
		ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		ig_xch_set_error(req, 500, "internal_error", "cannot start the upstream transfer: %s", curl_multi_strerror(mc));
	}
}

/* The body with "priority" first among its members, for a backend that
 * schedules by it. SGLang runs larger values first unless started with
 * --schedule-low-priority-values-first (python/sglang/srt/managers/
 * schedule_policy.py: priority_sign); vLLM's priority policy runs smaller
 * values first (vllm/v1/core/sched/request_queue.py). A "priority" the
 * client sent comes later in the object and wins (the last of a repeated
 * key is what Python's json keeps). The body is a JSON object (checked).
 * The values: high `step`, normal 0, low -`step` (negated for smaller
 * first), `step` one more than the server's preemption threshold when it
 * told it, so that SGLang preempts a low request for a normal one
 * (priority_diff > threshold: schedule_policy.py preempt_to_schedule).
 * malloc'd, or NULL to send the body as it is. */
static char *body_with_priority(const struct ig_req *req, int field, long step)
{
	const char *p = req->body.data, *end = p + req->body.len;
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
		p++;
	if (p >= end || *p != '{')
		return NULL;
	const char *q = p + 1;
	while (q < end && (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n'))
		q++;
	long k = req->wait.q.klass;
	long v = (k == IG_CLASS_HIGH ? step : k == IG_CLASS_LOW ? -step : 0) * (field == 1 ? 1 : -1);
	return ig_strdupf("{\"priority\":%ld%s%.*s", v, q < end && *q == '}' ? "" : ",", (int)(end - (p + 1)), p + 1);
}

/* What a request asks of a model, in the GenAI conventions' words
 * (gen_ai.operation.name), or NULL. */
const char *ig_xch_gen_ai_operation(const struct ig_req *req)
{
	const char *path = ig_xch_req_path(req);
	return !path ? NULL : strstr(path, "chat/completions") ? "chat" : strstr(path, "/completions") ? "text_completion"
	       : strstr(path, "/embeddings") ? "embeddings" : strstr(path, "/responses") ? "chat" : NULL;
}

/* A new attempt of a traced request on b: its span (CLIENT, the GenAI
 * conventions' inference span) and the traceparent naming it, the line of
 * up_headers rewritten (curl copies nothing: the list is read at send). */
static void trace_attempt(struct ig_req *req, struct ig_backend *b)
{
	struct ig_trace *t = &req->trace;
	const char *op = ig_xch_gen_ai_operation(req);
	char name[200];
	snprintf(name, sizeof(name), "%s %s", op ? op : "request", req->adm.model ? req->adm.model : "");
	if (!req->t_first_attempt_us)
		req->t_first_attempt_us = ig_now_us();
	ig_trace_attempt_begin(t, name);
	json_t *s = t->attempt;
	if (s) {
		ig_span_str(s, "gen_ai.operation.name", op);
		ig_span_str(s, "gen_ai.request.model", req->adm.model);
		ig_span_str(s, "server.address", b->url);
		ig_span_int(s, "infergate.attempt", req->wait.pick.ntried);
		ig_span_str(s, "infergate.attempt.kind", req->is_hedge ? "hedge" : req->relay.cont.count ? "continuation"
			    : req->wait.pick.ntried > 1 ? "retry" : "first");
		ig_span_bool(s, "infergate.over_slots", req->wait.pick.over);
	}
	char tp[56], line[80];
	ig_trace_format(t, t->attempt_id, tp);
	snprintf(line, sizeof(line), "traceparent: %s", tp);
	if (req->tp_node) {
		free(req->tp_node->data);
		req->tp_node->data = strdup(line);
	} else {
		req->up_headers = curl_slist_append(req->up_headers, line);
		for (req->tp_node = req->up_headers; req->tp_node->next;)
			req->tp_node = req->tp_node->next;
	}
}

/* The easy handle of req's attempt on b, configured (on req's reactor:
 * a handle is configured only by its own). */
static void configure_transfer(struct ig_req *req, struct ig_backend *b)
{
	const struct ig_conf *cfg = req->gw->cfg;
	char url[2048];

	if (req->xfer.easy)
		curl_easy_reset(req->xfer.easy);
	else
		req->xfer.easy = ig_upstream_easy_get(req->rx);
	CURL *e = req->xfer.easy;
	snprintf(url, sizeof(url), "%s%s", b->url, ig_xch_req_path(req));
	curl_easy_setopt(e, CURLOPT_URL, url);
	if (req->adm.method == IG_RT_GET || req->adm.method == IG_RT_DELETE) {
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
		if (req->adm.method == IG_RT_DELETE)
			curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
		goto options;
	}
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	if (req->adm.method == IG_RT_PUT)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
	free(req->prio_body);
	long step;
	int field = ig_backend_priority_field(b, &step);
	req->prio_body = field ? body_with_priority(req, field, step) : NULL;
	if (req->prio_body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->prio_body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(req->prio_body));
	} else {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body.data ? req->body.data : "");
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body.len);
	}
options:
	if (req->trace.on)
		trace_attempt(req, b);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, req->up_headers);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_CONTENT_DECODING, 0L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, cfg->connect_ms);
	/* No total timeout: a generation may run for many minutes. The idle
	 * limit is ours (ig_proxy_tick_rx): curl's LOW_SPEED averages over
	 * several seconds and would count the upload as activity. */
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	if (req->relay.stream) /* SSE chunks are small; 10,000 streams x 16 KiB is not */
		curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 1024L); /* curl's minimum */
	ig_relay_attempt(&req->relay, &req->xfer, b);
}

/* Its attempt, on its own reactor: configured and started. */
/* Whether the client of a request that waited in the queue has hung up:
 * its hang-up may not have been read yet (the watch's event, server.c's,
 * comes later in the loop, or on a slot freed on another reactor before
 * this one read it). A batch cancelled here closes its requests to this
 * gateway at once, and those queued behind the ones it aborted were sent
 * to a backend before their hang-ups were read. */
static bool client_left(struct ig_req *req)
{
	if (req->detached)
		return false;
	if (!req->wait.was_queued || req->relay.client_gone)
		return req->relay.client_gone;
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct pollfd p = {ci ? ci->connect_fd : -1, POLLRDHUP, 0};
	return ci && poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static void launch(struct ig_req *req)
{
	if (client_left(req)) { /* nothing sent for nobody: the slot back */
		ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		if (!req->relay.client_gone)
			req->gw->stats.client_aborts++;
		req->relay.client_gone = true;
		return;
	}
	configure_transfer(req, req->wait.backend);
	add_transfer(req);
}

/* Dispatch gave it backend b, its slot taken (any reactor, under the
 * lock). Another reactor's drain hands it to its own, which configures
 * and starts the transfer (ig_proxy_run_posted). */
static int on_dispatched(struct ig_waiter *w, struct ig_backend *b IG_UNUSED)
{
	struct ig_req *req = IG_CONTAINER_OF(w, struct ig_req, wait);
	if (req->rx != ig_rx_self) {
		req->start_posted = true;
		ig_xch_hand_over(req, IG_HAND_START);
		return 0;
	}
	launch(req);
	if (req->xfer.running)
		return 0;
	ig_xch_resume(req); /* it failed: the error is the answer */
	return -1;
}

/* The strategies asked at an attempt's end, in this order (strategy.h). */
const struct ig_strategy *const ig_strategies[] = {&ig_try_hedge, NULL};

/* ---- the relay's callbacks (its reactor, the lock let go) ---- */

static void relay_wake(struct ig_relay *r)
{
	ig_xch_resume(of_relay(r));
}

static void relay_idle(struct ig_relay *r)
{
	ig_xch_suspend(of_relay(r));
}

/* A stream's first event is going out: no retry can send the request body
 * again, so a held stream stops keeping it (a prompt of many kB, 10,000
 * streams). Only once curl has sent all of it, which a backend that
 * answers has always read. */
static void relay_committed(struct ig_relay *r)
{
	struct ig_req *req = of_relay(r);
	curl_off_t sent = 0;
	if (r->tee) { /* its answer's status and type, for the readers */
		ig_gw_lock(req->gw);
		idem_status(req->idem, (unsigned)r->up_status, ig_relay_header(r, "Content-Type"));
		ig_gw_unlock(req->gw);
	}
	if (r->cont.max > 0)
		return; /* a continuation is made from it */
	size_t len = req->prio_body ? strlen(req->prio_body) : req->body.len;
	if (curl_easy_getinfo(req->xfer.easy, CURLINFO_SIZE_UPLOAD_T, &sent) != CURLE_OK || sent < (curl_off_t)len)
		return;
	ig_buf_free(&req->body);
	free(req->prio_body);
	req->prio_body = NULL;
}

static bool relay_first_byte(struct ig_relay *r)
{
	return ig_hedge_first_byte(of_relay(r));
}

static void relay_event(struct ig_relay *r)
{
	struct ig_req *req = of_relay(r);
	ig_dispatch_progress(req->gw, &req->wait);
}

/* A stored Responses API answer: which backend has it. The store is shared:
 * the lock is taken (nested when the caller holds it already). */
static void relay_stored(struct ig_relay *r, json_t *response)
{
	struct ig_req *req = of_relay(r);
	struct ig_gw *gw = req->gw;
	json_t *id = json_object_get(response, "id");
	if (!json_is_string(id) || !req->wait.backend)
		return;
	ig_gw_lock(gw);
	uint32_t owner = ig_admission_owner(gw, &req->adm);
	if (gw->responses || (gw->responses = ig_respstore_new()))
		ig_respstore_put(gw->responses, json_string_value(id), json_string_length(id), req->wait.backend->id,
				 owner, ig_now_ms());
	ig_cluster_response_stored(gw, json_string_value(id), json_string_length(id), req->wait.backend, owner);
	ig_gw_unlock(gw);
}

/* ---- admission and dispatch ---- */

struct collect {
	struct ig_req *req;
	const char *connection; /* the request's Connection header, or NULL */
	struct ig_buf xff;      /* the client's X-Forwarded-For values, joined */
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
				      const char *value)
{
	struct collect *c = cls;
	struct ig_req *req = c->req;
	struct ig_gw *gw = req->gw;
	if (!key || !value || ig_relay_hop_by_hop(key, strlen(key)))
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
	/* A batch's mark (IG_BATCH_HEADER) is the gateway's own; the chain
	 * of X-Forwarded-For goes on as one header (upstream_headers). */
	if (strcasecmp(key, IG_BATCH_HEADER) == 0)
		return MHD_YES;
	if (strcasecmp(key, "X-Forwarded-For") == 0)
		return ig_peer_collect_xff(&c->xff, kind, key, value);
	/* Traced, the trace goes on from each attempt's span (configure_transfer). */
	if (req->trace.on && (strcasecmp(key, "traceparent") == 0 || strcasecmp(key, "tracestate") == 0))
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


/* The upstream headers: the client's, less hop-by-hop ones and the
 * gateway's own, with its request id and the backend key. */
static void upstream_headers(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct collect c = {req, MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Connection"), {0}};
	ig_buf_init(&c.xff);
	MHD_get_connection_values(req->conn, MHD_HEADER_KIND, collect_header, &c);
	char *line = ig_strdupf("X-Request-Id: %s", req->request_id);
	req->up_headers = curl_slist_append(req->up_headers, line);
	free(line);
	/* X-Forwarded-For: the client's chain (believed or not, it is passed
	 * on) with the address that connected here added, as nginx's
	 * $proxy_add_x_forwarded_for and HAProxy's option forwardfor do. */
	if (c.xff.len || *req->peer) {
		line = ig_strdupf("X-Forwarded-For: %.*s%s%s", (int)c.xff.len, c.xff.data ? c.xff.data : "",
				  c.xff.len && *req->peer ? ", " : "", req->peer);
		req->up_headers = curl_slist_append(req->up_headers, line);
		free(line);
	}
	ig_buf_free(&c.xff);
	if ((req->adm.method == IG_RT_POST || req->adm.method == IG_RT_PUT) &&
	    !MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Content-Type"))
		req->up_headers = curl_slist_append(req->up_headers, "Content-Type: application/json");
	req->up_headers = curl_slist_append(req->up_headers, "Expect:");
	if (req->trace.state) {
		line = ig_strdupf("tracestate: %s", req->trace.state);
		req->up_headers = curl_slist_append(req->up_headers, line);
		free(line);
	}
	if (*gw->cfg->backend_api_key) {
		line = ig_strdupf("Authorization: Bearer %s", gw->cfg->backend_api_key);
		req->up_headers = curl_slist_append(req->up_headers, line);
		free(line);
	}
}

/* Admission's refusal is the answer. */
static enum MHD_Result refused(struct ig_req *req)
{
	const struct ig_admission_error *e = &req->adm.err;
	ig_xch_set_decided_error(req, e->status ? e->status : 500, e->type, e->param, e->code ? e->code : "internal_error",
			  e->status && e->message ? e->message : "out of memory");
	return ig_xch_respond(req);
}

/* model_fallbacks: a request refused because no backend of its model is up
 * (503 no_healthy_backend) or its model's queue is full (429 queue_full)
 * runs on the model's next fallback that its key may use, its body naming
 * that model; X-Infergate-Fallback says so. Returns true when it was
 * placed there (started or queued); false leaves the last refusal. */
static bool fall_back(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct ig_waiter *w = &req->wait;
	const char *model = req->adm.model;
	for (size_t i = 0; req->refused_code && (strcmp(req->refused_code, "no_healthy_backend") == 0 ||
						 strcmp(req->refused_code, "queue_full") == 0); i++) {
		const char *fb = ig_conf_fallback(gw->cfg, model, i);
		if (!fb)
			return false;
		if (req->adm.key && req->adm.key->ent && !ig_keyset_model_allowed(req->adm.key->ent, fb, NULL))
			continue; /* its key may not use that model */
		json_t *root = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, NULL);
		char *text = NULL;
		struct ig_model *m = ig_sched_get(&gw->sched, &gw->fleet, fb);
		if (!json_is_object(root) || json_object_set_new(root, "model", json_string(fb)) < 0 || !m ||
		    !(text = json_dumps(root, JSON_COMPACT))) {
			json_decref(root);
			return false;
		}
		json_decref(root);
		ig_buf_reset(&req->body);
		ig_buf_append(&req->body, text, strlen(text));
		free(text);
		free(req->fallback);
		req->fallback = strdup(fb);
		ig_sched_hold(m);
		ig_sched_release(&gw->sched, w->m);
		w->m = m;
		w->model = req->fallback ? req->fallback : fb;
		ig_log_info("request %s: model '%s' has no backend free (%s); it runs on '%s' (model_fallbacks)",
			    req->request_id, model, req->refused_code, fb);
		free(req->err_body);
		req->err_body = NULL;
		req->err_status = 0;
		req->refused_code = NULL;
		if (ig_dispatch_submit(gw, w) != IG_DISPATCH_FAILED)
			return true;
	}
	return false;
}


/* The body is complete: admit, dispatch, and answer or suspend. */
static enum MHD_Result body_done(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct ig_admission *a = &req->adm;
	struct ig_waiter *w = &req->wait;

	pick_request_id(req);
	ig_trace_begin(&req->trace, gw->tracer, MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "traceparent"),
		       MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "tracestate"));
	if (req->too_large) {
		ig_xch_set_error(req, 413, "request_too_large", "the request body is larger than %ld bytes",
			  gw->cfg->max_body_bytes);
		return ig_xch_respond(req);
	}
	req->bytes_in = req->body.len; /* as sent: the forwarded body may differ */
	if (ig_admission_classify(gw, a, req->conn, w) < 0)
		return refused(req);
	/* refused, another's answer is its own, or the other gateways are
	 * asked first (ig_xch_respond() waits for them: idem_asked) */
	if (idem_begin(req) != 0)
		return ig_xch_respond(req);
	return ig_xch_admit(req);
}

/* Whether the other gateways hold its Idempotency-Key (idem_share.h):
 * 0 not, it runs (admit); 1 it reads the answer (run through another
 * gateway and kept, or the conflict's 422); 2 not known yet, or another
 * gateway runs it: it waits (and runs if that run fails). */
static int idem_asked(struct ig_req *req)
{
	struct ig_idem_entry *e = req->idem;
	if ((e->share == IG_IDEM_ASKING || e->share == IG_IDEM_THEIRS) && !e->done) {
		req->idem_followed |= e->share == IG_IDEM_THEIRS;
		if (!ig_list_linked(&req->idem_link))
			ig_list_append(&e->waiting, &req->idem_link);
		ig_xch_suspend(req);
		return 2;
	}
	req->idem_asking = false;
	if (!e->done) {
		req->gw->stats.idem[0]++;
		return 0;
	}
	req->idem_runner = false;
	req->idem_reader = true;
	req->gw->stats.idem[e->conflict ? 3 : req->idem_followed ? 1 : 2]++;
	ig_log_debug("request %s: its Idempotency-Key is held through another gateway%s", req->request_id,
		     e->conflict ? " with another body" : "");
	return 1;
}

/* Admitted (body, limits), then dispatched: answered, or suspended. */
enum MHD_Result ig_xch_admit(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct ig_admission *a = &req->adm;
	struct ig_waiter *w = &req->wait;
	if (a->resp_id) {
		if (ig_admission_by_id(gw, a, req->conn, w) < 0)
			return refused(req);
	} else {
		json_t *parsed = req->parse_done ? req->parsed
						 : json_loadb(req->body.data ? req->body.data : "", req->body.len, 0,
							      &req->parse_error);
		req->parsed = NULL; /* admission's now */
		if (ig_admission_body(gw, a, req->conn, &req->body, parsed, &req->parse_error, w) < 0)
			return refused(req);
	}
	if (ig_admission_limits(gw, a) < 0)
		return refused(req);
	req->relay.stream = a->stream;
	req->relay.usage_added = a->usage_added;
	req->relay.store = a->store;
	req->relay.tee = req->idem_runner && a->stream;
	const struct ig_route *rt = ig_gw_route(gw->cfg, a->route_idx);
	if (a->stream && (rt->flags & IG_RT_OUTPUT) && (rt->flags & IG_RT_USAGE_OPTION) && !(rt->flags & IG_RT_RESPONSES))
		req->relay.cont.max = (int)gw->cfg->continue_max;
	if (!(w->m = ig_sched_get(&gw->sched, &gw->fleet, a->model))) {
		ig_xch_set_error(req, 500, "internal_error", "out of memory");
		return ig_xch_respond(req);
	}
	ig_sched_hold(w->m);
	w->model = a->model;
	w->alias = a->alias;
	if (a->resp_id) {
		w->pin_param = "response_id";
		w->pin_id = a->resp_id;
	} else if (a->prev_id) {
		w->pin_param = "previous_response_id";
		w->pin_id = a->prev_id;
	}
	upstream_headers(req);
	req->t_submit_us = ig_now_us();
	if (ig_dispatch_submit(gw, w) == IG_DISPATCH_FAILED && !fall_back(req))
		return ig_xch_respond(req);
	ig_xch_suspend(req);
	return MHD_YES;
}

/* ---- the answer ---- */

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
	const struct ig_admission *a = &req->adm;
	const struct ig_keyent *e = a->key ? a->key->ent : NULL;
	if (!e || (!e->rpm && !e->tpm))
		return;
	if (!a->rl_shown) {
		struct ig_key *k = a->key;
		uint64_t now = ig_now_ms();
		ig_bucket_refill(&k->rpm, now);
		ig_bucket_refill(&k->tpm, now);
		req->adm.rl_req_left = ig_bucket_remaining(&k->rpm);
		req->adm.rl_tok_left = ig_bucket_remaining(&k->tpm);
		req->adm.rl_req_reset_ms = ig_bucket_reset_ms(&k->rpm);
		req->adm.rl_tok_reset_ms = ig_bucket_reset_ms(&k->tpm);
		req->adm.rl_shown = true;
	}
	if (e->rpm)
		limit_trio(r, "requests", e->rpm, a->rl_req_left, a->rl_req_reset_ms);
	if (e->tpm)
		limit_trio(r, "tokens", e->tpm, a->rl_tok_left, a->rl_tok_reset_ms);
}

static void add_common_headers(struct ig_req *req, struct MHD_Response *r)
{
	MHD_add_response_header(r, "X-Request-Id", req->request_id);
	if (req->trace.on) { /* where its trace is: the gateway's span */
		char tp[56];
		ig_trace_format(&req->trace, req->trace.span, tp);
		MHD_add_response_header(r, "traceparent", tp);
	}
	if (req->fallback)
		MHD_add_response_header(r, "X-Infergate-Fallback", req->fallback);
	add_limit_headers(req, r);
	if (req->wait.backend && !req->err_status)
		MHD_add_response_header(r, "X-Infergate-Backend", req->wait.backend->url);
	if (req->wait.was_queued) {
		char ms[24];
		snprintf(ms, sizeof(ms), "%llu", (unsigned long long)req->wait.waited_ms);
		MHD_add_response_header(r, "X-Infergate-Queued-Ms", ms);
	}
}

/* Relays the backend's response headers, but `skip` (NULL: none). */
static void add_relayed_headers(struct ig_req *req, struct MHD_Response *r, const char *skip)
{
	const char *p = req->relay.up_headers.data, *end = p + req->relay.up_headers.len;
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
void ig_xch_count_answer(struct ig_req *req)
{
	if (req->counted || !req->status_sent)
		return;
	req->counted = true;
	if (req->adm.key)
		ig_clients_count(req->adm.key, ig_proxy_req_status(req));
	unsigned status = ig_proxy_req_status(req);
	uint64_t duration_us = ig_now_us() - req->t_start_us;
	int64_t ttfb_us = req->adm.stream && req->relay.t_first_byte_us
				  ? (int64_t)(req->relay.t_first_byte_us - req->t_start_us) : -1;
	ig_metrics_observe(req->gw, req->adm.route_idx, status, req->relay.stream_error != 0,
			   req->wait.backend ? req->wait.backend->url : "", duration_us, ttfb_us);
	if (status / 100 == 2 && !req->relay.stream_error)
		ig_metrics_observe_model(req->gw, req->adm.model, duration_us, ttfb_us, req->relay.prompt_tokens,
					 req->relay.completion_tokens);
}

/* Queues r; body_len counts bytes sent at once (a stream counts its own, as
 * read_stream hands them out). */
static enum MHD_Result queue_answer(struct ig_req *req, unsigned status, struct MHD_Response *r, size_t body_len)
{
	struct ig_gw *gw = req->gw;
	req->relay.bytes_out += body_len;
	/* A duplicate following a running answer: its reader (idem_read) takes
	 * the lock inside MHD's response mutex, so its response is queued and
	 * let go with the lock let go (never the two the other way round). */
	int depth = req->idem_reader && !req->idem->done ? ig_gw_release(gw) : -1;
	enum MHD_Result ret = MHD_queue_response(req->conn, status, r);
	MHD_destroy_response(r);
	if (depth >= 0)
		ig_gw_reacquire(gw, depth);
	if (status >= 100 && status < 600)
		gw->stats.responses[status / 100]++;
	req->status_sent = status;
	req->t_answer_us = ig_now_us();
	return ret;
}

/* A duplicate's answer: the runner's, as it was relayed (whole when it
 * ended, else followed: idem_read), with Idempotent-Replayed. It waits
 * for the runner's status. */
static ssize_t idem_read(void *cls, uint64_t pos IG_UNUSED, char *buf, size_t max);
static enum MHD_Result respond_read(struct ig_req *req)
{
	struct ig_idem_entry *e = req->idem;
	struct MHD_Response *r;
	size_t len = 0;
	if (!e->status) {
		if (!ig_list_linked(&req->idem_link))
			ig_list_append(&e->waiting, &req->idem_link);
		ig_xch_suspend(req);
		return MHD_YES;
	}
	if (e->done) {
		len = e->bytes.len;
		r = MHD_create_response_from_buffer(len, e->bytes.data, MHD_RESPMEM_MUST_COPY);
		req->idem_off = len;
	} else {
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, idem_read, req, NULL);
	}
	if (e->content_type)
		MHD_add_response_header(r, "Content-Type", e->content_type);
	if (e->content_type && strncasecmp(e->content_type, "text/event-stream", 17) == 0) {
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		MHD_add_response_header(r, "X-Accel-Buffering", "no");
	}
	if (req->hedge_winner == 2)
		MHD_add_response_header(r, "X-Infergate-Hedged", "true");
	else if (!e->conflict)
		MHD_add_response_header(r, "Idempotent-Replayed", "true");
	add_common_headers(req, r);
	enum MHD_Result ret = queue_answer(req, e->status, r, len);
	if (e->done)
		ig_xch_count_answer(req);
	return ret;
}

/* The content reader of a duplicate following a running answer: inside
 * MHD_run, the lock let go (it is taken here, as the entry is shared). */
static ssize_t idem_read(void *cls, uint64_t pos IG_UNUSED, char *buf, size_t max)
{
	struct ig_req *req = cls;
	struct ig_gw *gw = req->gw;
	ssize_t ret = 0;
	if (req->relay.client_gone)
		return MHD_CONTENT_READER_END_WITH_ERROR;
	ig_gw_lock(gw);
	struct ig_idem_entry *e = req->idem;
	size_t n = e->bytes.len - req->idem_off;
	if (n > max)
		n = max;
	if (n > 0) {
		memcpy(buf, e->bytes.data + req->idem_off, n);
		req->idem_off += n;
		req->relay.bytes_out += n;
		ret = (ssize_t)n;
	} else if (e->done) {
		ig_xch_count_answer(req);
		ret = MHD_CONTENT_READER_END_OF_STREAM;
	} else { /* more to come: wait for the runner's tee */
		if (!ig_list_linked(&req->idem_link))
			ig_list_append(&e->waiting, &req->idem_link);
		ig_xch_suspend(req);
	}
	ig_gw_unlock(gw);
	return ret;
}

/* Queues whatever is decided (called again after each resume). */
enum MHD_Result ig_xch_respond(struct ig_req *req)
{
	struct ig_relay *rl = &req->relay;
	struct MHD_Response *r;

	if (rl->client_gone)
		return MHD_NO;
	if (req->idem_asking) {
		int asked = idem_asked(req);
		if (asked == 2)
			return MHD_YES;
		if (asked == 0)
			return ig_xch_admit(req);
	}
	if (req->idem_reader && !req->err_status)
		return respond_read(req);
	if (req->err_status || rl->upstream_done)
		idem_finish(req);
	if (req->err_status) {
		r = MHD_create_response_from_buffer(strlen(req->err_body), req->err_body, MHD_RESPMEM_MUST_COPY);
		MHD_add_response_header(r, "Content-Type", "application/json");
		uint64_t retry_ms = req->adm.err.retry_after_ms;
		if (retry_ms && retry_ms != UINT64_MAX) {
			/* whole seconds rounded up; the official SDKs read the
			 * milliseconds first (openai-node, openai-python) */
			char v[24];
			snprintf(v, sizeof(v), "%llu", (unsigned long long)((retry_ms + 999) / 1000));
			MHD_add_response_header(r, "Retry-After", v);
			snprintf(v, sizeof(v), "%llu", (unsigned long long)retry_ms);
			MHD_add_response_header(r, "retry-after-ms", v);
		} else if (!retry_ms && (req->err_status == 429 || req->err_status == 503)) {
			MHD_add_response_header(r, "Retry-After", "1");
		}
		add_common_headers(req, r);
		enum MHD_Result ret = queue_answer(req, req->err_status, r, strlen(req->err_body));
		ig_xch_count_answer(req);
		return ret;
	}
	if (rl->committed && ig_relay_streaming(rl)) {
		/* MHD sends a chunked body (HTTP/1.1) from the connection's own
		 * buffer and uses this block only for HTTP/1.0 clients; a held
		 * stream should not pay 2 KiB for it (10,000 streams). */
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256, ig_relay_read, rl, NULL);
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
		enum MHD_Result ret = queue_answer(req, (unsigned)rl->up_status, r, 0);
		if (rl->upstream_done)
			ig_xch_count_answer(req);
		return ret;
	}
	if (rl->upstream_done) {
		/* The client gets OpenAI's error shape whatever the backend used
		 * (SGLang answers flat, FastAPI {"detail"}), message kept. */
		char *oa = rl->up_status >= 400 ? ig_oaerror_normalize((unsigned)rl->up_status,
			ig_buf_head(&rl->resp), ig_buf_pending(&rl->resp)) : NULL;
		if (oa) {
			size_t n = strlen(oa);
			r = MHD_create_response_from_buffer(n, oa, MHD_RESPMEM_MUST_FREE);
			add_relayed_headers(req, r, "Content-Type");
			MHD_add_response_header(r, "Content-Type", "application/json");
			add_common_headers(req, r);
			enum MHD_Result ret = queue_answer(req, (unsigned)rl->up_status, r, n);
			ig_xch_count_answer(req);
			return ret;
		}
		r = MHD_create_response_from_buffer(ig_buf_pending(&rl->resp), (void *)ig_buf_head(&rl->resp),
						    MHD_RESPMEM_MUST_COPY);
		add_relayed_headers(req, r, NULL);
		add_common_headers(req, r);
		enum MHD_Result ret = queue_answer(req, (unsigned)rl->up_status, r, ig_buf_pending(&rl->resp));
		ig_xch_count_answer(req);
		return ret;
	}
	/* Resumed with nothing to say yet (a spurious wake-up): wait again. */
	ig_xch_suspend(req);
	return MHD_YES;
}

/* ---- an attempt's end ---- */

static enum ig_upstream_error classify(struct ig_req *req, CURLcode result)
{
	curl_off_t connect_us = 0;
	if (result == CURLE_OK)
		return (req->relay.up_status == 502 || req->relay.up_status == 503 || req->relay.up_status == 504)
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

const char *ig_xch_uperr_name(enum ig_upstream_error e)
{
	static const char *n[] = {"none", "connect", "reset", "timeout", "status", "other"};
	return n[e];
}

/* A stream whose continuation was refused (no backend left, the queue, its
 * deadline) ends with an error event. On req's reactor. */
void ig_xch_end_refused_stream(struct ig_req *req)
{
	struct ig_relay *rl = &req->relay;
	char msg[640];
	snprintf(msg, sizeof(msg), "the backend failed while streaming and no other could continue the stream (%s); "
		 "the response is incomplete", req->cont_refused ? req->cont_refused : "refused");
	ig_log_warn("request %s: %s", req->request_id, msg);
	ig_relay_fail_stream(rl, msg);
	ig_admission_settle(&req->adm, rl->prompt_tokens, rl->completion_tokens, false);
	rl->upstream_done = true;
	idem_finish(req);
	ig_xch_count_answer(req);
	ig_xch_resume(req);
}

/* A stream that broke after its first event goes on on another backend
 * with what was relayed (cont.h), when it may: true then (a refusal ends
 * it through on_refused); false: it ends with an error event. */
static bool continue_stream(struct ig_req *req, enum ig_upstream_error e, const char *detail)
{
	struct ig_gw *gw = req->gw;
	struct ig_relay *rl = &req->relay;
	struct ig_cont *c = &rl->cont;
	struct ig_backend *b = req->wait.backend;
	enum ig_cont_reason reason = c->broken ? IG_CONT_ERROR_EVENT : e == IG_UPERR_TIMEOUT ? IG_CONT_STALL : IG_CONT_RESET;
	const char *why = NULL;
	char *body = NULL;

	if (c->max == 0 || rl->client_gone)
		return false;
	if (!ig_cont_possible(c))
		why = c->dead ? c->dead_why : "continue.max continuations were made";
	const struct ig_buf *orig = req->orig_body.data ? &req->orig_body : &req->body;
	if (!why)
		body = ig_cont_body(c, orig->data, orig->len, &why);
	if (body && !ig_dispatch_retry_budget(gw))
		why = "the retry budget is spent";
	if (why) {
		free(body);
		ig_log_info("request %s: the stream is not continued after %s from %s: %s", req->request_id, detail,
			    b->url, why);
		return false;
	}
	if (!req->orig_body.data) {
		req->orig_body = req->body;
		ig_buf_init(&req->body);
	} else {
		ig_buf_reset(&req->body);
	}
	int rc = ig_buf_append(&req->body, body, strlen(body));
	free(body);
	if (rc < 0)
		return false;
	ig_cont_begin(c);
	gw->stats.continued[reason]++;
	atomic_fetch_add(&b->retried, 1);
	ig_log_info("request %s: backend %s failed mid-stream (%s) after %ld tokens; continuing elsewhere (%d of %d)",
		    req->request_id, b->url, detail, c->tokens, c->count, c->max);
	ig_dispatch_retry(gw, &req->wait, e == IG_UPERR_TIMEOUT, detail);
	return true;
}

/* One attempt ended (e says how): account for it, then retry, continue,
 * relay or answer. On req's reactor. */
void ig_xch_end_attempt(struct ig_req *req, enum ig_upstream_error e, const char *detail)
{
	struct ig_gw *gw = req->gw;
	struct ig_relay *rl = &req->relay;
	struct ig_backend *b = req->wait.backend;
	char event_detail[320];

	ig_trace_attempt_end(&req->trace, rl->up_status,
			     req->hedge_lost ? "lost the race to the other attempt" : e != IG_UPERR_NONE ? detail
			     : rl->cont.broken ? "an error event in the stream" : NULL);
	if (req->hedge_lost) { /* dropped at its first byte: hedge_lose (posted) does the rest */
		ig_upstream_stop(&req->xfer);
		ig_dispatch_end(gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		ig_hedge_waste(req);
		return;
	}
	ig_upstream_stop(&req->xfer); /* when it ends early: idle timeout */
	if (e == IG_UPERR_NONE && rl->cont.broken) {
		/* a 5xx error event, taken out of the stream (relay.c) */
		snprintf(event_detail, sizeof(event_detail), "an error event: %s",
			 rl->stream_error_msg ? rl->stream_error_msg : "");
		detail = event_detail;
		e = IG_UPERR_STATUS;
	}
	if (e == IG_UPERR_NONE)
		ig_relay_whole_body(rl); /* a whole body's usage, a stored response */
	ig_dispatch_end(gw, &req->wait, &(struct ig_pick_outcome){.ok = e == IG_UPERR_NONE,
								   .completion_tokens = rl->completion_tokens});
	if (e != IG_UPERR_NONE && req->deadline_hit) {
		/* the client's deadline, not the backend's fault: no retry, no
		 * health failure */
		atomic_fetch_add(&b->aborted, 1);
		if (rl->committed)
			ig_relay_fail_stream(rl, "the request's deadline (X-Infergate-Timeout-Ms) passed; the response is "
						 "incomplete");
		else
			ig_xch_set_error(req, 504, "deadline_exceeded",
				  "the request's deadline (X-Infergate-Timeout-Ms: %ld) passed before %s answered",
				  req->adm.timeout_ms, b->url);
	} else if (e != IG_UPERR_NONE) {
		req->last_err = e;
		gw->stats.upstream_errors[e]++;
		/* one that asked for time is alive; one slow to its first byte
		 * is busy (its own queue), not failing; one that sent an error
		 * event answers (the request failed there) */
		if (atomic_load(&b->rest_until_ms) <= ig_now_ms() && !req->ttft_cut && !rl->cont.broken) {
			atomic_fetch_add(&b->failures, 1);
			ig_health_passive_fail(gw, b, e, detail);
		}
		req->ttft_cut = false;
		const struct ig_attempt_end ae = {e, detail, b};
		for (const struct ig_strategy *const *s = ig_strategies; *s; s++) {
			enum ig_try_verdict v = (*s)->on_attempt_end ? (*s)->on_attempt_end(req, &ae) : IG_TRY_PASS;
			if (v == IG_TRY_AGAIN)
				return;
			if (v == IG_TRY_END)
				goto ended;
		}
		if (rl->committed) {
			if (continue_stream(req, e, detail))
				return;
			ig_log_warn("request %s: backend %s failed mid-stream (%s)", req->request_id, b->url, detail);
			ig_relay_fail_stream(rl, "the backend failed while streaming; the response is incomplete");
		} else if (req->retries_done < gw->cfg->retries && !ig_dispatch_retry_budget(gw)) {
			ig_log_debug("request %s: not retried after %s from %s: the retry budget is spent", req->request_id,
				     detail, b->url);
			if (e != IG_UPERR_STATUS)
				ig_xch_set_error(req, e == IG_UPERR_TIMEOUT ? 504 : 502,
					  e == IG_UPERR_TIMEOUT ? "backend_timeout" : "backend_error",
					  "backend %s failed: %s (not retried: the retry budget is spent)", b->url, detail);
		} else if (req->retries_done < gw->cfg->retries) {
			req->retries_done++;
			gw->stats.retries++;
			atomic_fetch_add(&b->retried, 1);
			ig_log_debug("request %s: retrying after %s from %s", req->request_id, detail, b->url);
			if (ig_dispatch_retry(gw, &req->wait, e == IG_UPERR_TIMEOUT,
					      e == IG_UPERR_TIMEOUT ? detail : ig_xch_uperr_name(e)) != IG_DISPATCH_FAILED)
				return;
			/* Nowhere else to go: a backend's own 5xx answer says more
			 * than ours. */
			if (e == IG_UPERR_STATUS) {
				req->err_status = 0;
				req->wait.backend = b;
			}
		} else if (e != IG_UPERR_STATUS) {
			ig_xch_set_error(req, e == IG_UPERR_TIMEOUT ? 504 : 502,
				  e == IG_UPERR_TIMEOUT ? "backend_timeout" : "backend_error",
				  "backend %s failed: %s", b->url, detail);
		}
	} else if (rl->committed && !ig_relay_streaming(rl)) {
		/* a continuation the next backend would not take (its 4xx) */
		char msg[160];
		snprintf(msg, sizeof(msg), "the backend failed while streaming and %s refused to continue the stream "
			 "(HTTP %ld); the response is incomplete", b->url, rl->up_status);
		ig_log_warn("request %s: %s", req->request_id, msg);
		ig_relay_fail_stream(rl, msg);
	} else {
		atomic_fetch_add(&b->served, 1);
		ig_health_passive_ok(gw, b);
		if (req->wait.m && !rl->cont.count && rl->up_status / 100 == 2) { /* its time to first byte */
			uint64_t first = rl->t_first_byte_us ? rl->t_first_byte_us : ig_now_us();
			ig_sched_ttfb(req->wait.m, first > req->wait.attempt_us ? (first - req->wait.attempt_us) / 1000 : 0);
		}
		gw->stats.cont_prompt_tokens += (uint64_t)rl->cont.reprefilled;
		if (rl->prompt_tokens > 0) {
			atomic_fetch_add(&b->prompt_tokens, (unsigned long)rl->prompt_tokens);
			gw->stats.prompt_tokens += (uint64_t)rl->prompt_tokens;
			if (req->adm.key)
				req->adm.key->prompt_tokens += (uint64_t)rl->prompt_tokens;
		}
		if (rl->completion_tokens > 0) {
			atomic_fetch_add(&b->completion_tokens, (unsigned long)rl->completion_tokens);
			gw->stats.completion_tokens += (uint64_t)rl->completion_tokens;
			if (req->adm.key)
				req->adm.key->completion_tokens += (uint64_t)rl->completion_tokens;
		}
	}
ended:
	ig_admission_settle(&req->adm, rl->prompt_tokens, rl->completion_tokens,
			    e == IG_UPERR_NONE && rl->up_status / 100 == 2 && !rl->stream_error);
	rl->upstream_done = true;
	idem_finish(req);
	if (rl->committed)
		ig_xch_count_answer(req); /* a stream already queued: its end is decided */
	ig_xch_resume(req);
}

/* Seconds of a Retry-After value (delta-seconds or an HTTP-date), at most
 * RETRY_AFTER_MAX_S; 0 when there is none or it is not one. */
#define RETRY_AFTER_MAX_S 300
static long retry_after_s(const char *v)
{
	if (!v || !*v)
		return 0;
	char *end;
	long s;
	if (*v >= '0' && *v <= '9') {
		s = strtol(v, &end, 10);
		if (*end)
			return 0;
	} else {
		time_t at = curl_getdate(v, NULL);
		s = at < 0 ? 0 : (long)(at - time(NULL));
	}
	return s < 0 ? 0 : s > RETRY_AFTER_MAX_S ? RETRY_AFTER_MAX_S : s;
}

static void on_upstream_done(struct ig_xfer *x, CURLcode result)
{
	struct ig_req *req = IG_CONTAINER_OF(x, struct ig_req, xfer);
	enum ig_upstream_error e = classify(req, result);
	char detail[256];
	long status = req->relay.up_status, rest;

	/* A 429 or 503 that says when to come back: the backend is alive and
	 * busy. It is sent nothing new for that long, the request goes
	 * elsewhere (or waits for it), and it is no health failure. */
	if (result == CURLE_OK && (status == 429 || status == 503) &&
	    (rest = retry_after_s(ig_relay_header(&req->relay, "Retry-After"))) > 0) {
		struct ig_backend *b = req->wait.backend;
		atomic_store(&b->rest_until_ms, ig_now_ms() + (uint64_t)rest * 1000u);
		atomic_fetch_add(&b->rests, 1);
		ig_log_info("request %s: backend %s answered HTTP %ld with Retry-After: %ld s: nothing new sent there "
			    "for that long", req->request_id, b->url, status, rest);
		e = IG_UPERR_STATUS;
	}
	if (e == IG_UPERR_STATUS)
		snprintf(detail, sizeof(detail), "HTTP %ld", req->relay.up_status);
	else
		snprintf(detail, sizeof(detail), "%s", curl_easy_strerror(result));
	ig_xch_end_attempt(req, e, detail);
}

/* A detached runner's end: its answer told to its entry (what is not
 * decided is a failure: the gateway stops), counted, logged, freed. */
static void detached_end(struct ig_req *req)
{
	if (!req->err_status && !req->relay.upstream_done) {
		req->relay.upstream_done = true;
		req->relay.upstream_failed = true;
	}
	idem_finish(req);
	req->status_sent = req->err_status ? req->err_status : (unsigned)req->relay.up_status;
	if (req->is_hedge) { /* its primary counts the request; the tokens are its */
		struct ig_req *p = req->hedge_of;
		if (p && p->hedge_winner == 2) {
			p->relay.prompt_tokens = req->relay.prompt_tokens;
			p->relay.completion_tokens = req->relay.completion_tokens;
		}
		ig_list_del(&req->post_link);
		ig_hedge_drop(req);
		return;
	}
	ig_xch_count_answer(req);
	ig_xch_req_log(req, false);
	ig_xch_req_free(req);
}

/* Its client left while it ran: with an Idempotency-Key it runs on, its
 * answer going to the entry alone, so that the client's retry gets it
 * rather than running it twice. */
static void detach(struct ig_req *req)
{
	struct ig_relay *rl = &req->relay;
	req->suspended = false;
	req->conn = NULL;
	req->detached = true;
	ig_relay_detach(rl);
	if (rl->paused && req->xfer.running) {
		rl->paused = false;
		ig_upstream_unpause(&req->xfer);
	}
	ig_log_info("request %s: its client left; it runs on for its Idempotency-Key", req->request_id);
}

void ig_proxy_req_client_gone(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;

	if (req->detached) { /* the gateway stops */
		ig_list_del(&req->post_link);
		ig_xch_stop_attempt(req);
		detached_end(req);
		return;
	}
	if (req->relay.client_gone)
		return;
	if (req->idem_runner && !req->idem_ended && !gw->stopping &&
	    (req->xfer.running || req->wait.queued || req->start_posted)) {
		/* it runs on for its Idempotency-Key; MHD closes the connection
		 * (on_completed leaves the request be) */
		struct MHD_Connection *conn = req->conn;
		bool was_suspended = req->suspended;
		detach(req);
		if (was_suspended) {
			MHD_resume_connection(conn);
			ig_httpd_resumed(req->rx, conn);
		}
		return;
	}
	req->relay.client_gone = true;
	bool queued = req->wait.queued;
	if (ig_xch_stop_attempt(req)) {
		gw->stats.client_aborts++;
		ig_log_debug("request %s: client left, upstream transfer to %s aborted", req->request_id,
			     req->wait.backend->url);
	}
	if (queued)
		gw->stats.client_aborts++;
	ig_xch_resume(req); /* MHD must see the connection to close it */
}

/* ---- housekeeping ---- */

/* A timeout for class klass: the class's own (high, low: -1 none), else
 * the common one (the route's own, else the configuration's). */
static long by_class(int klass, long common, long high, long low)
{
	long v = klass == IG_CLASS_HIGH ? high : klass == IG_CLASS_LOW ? low : -1;
	return v >= 0 ? v : common;
}

/* Transfers with no byte from their backend for timeouts.idle_s. A paused
 * transfer is waiting for a slow client, not for the backend. */
static void scan_idle(struct ig_rx *rx, uint64_t now_ms)
{
	struct ig_gw *gw = rx->gw;
	const struct ig_conf *cfg = gw->cfg;
	uint64_t limit = (uint64_t)cfg->idle_s * 1000u;
	struct ig_req *req, *next;
	IG_LIST_FOREACH_SAFE(req, next, &rx->reqs, struct ig_req, link) {
		int klass = req->wait.q.klass;
		const struct ig_route *rt = ig_gw_route(cfg, req->adm.route_idx);
		long ttft_ms = by_class(klass, rt->ttft_ms >= 0 ? rt->ttft_ms : cfg->ttft_ms, cfg->ttft_high_ms,
					cfg->ttft_low_ms);
		long gap_ms = by_class(klass, rt->token_gap_ms >= 0 ? rt->token_gap_ms : cfg->token_gap_ms,
				       cfg->token_gap_high_ms, cfg->token_gap_low_ms);
		if (req->adm.deadline_ms && now_ms >= req->adm.deadline_ms && !req->deadline_hit &&
		    (req->wait.queued || req->xfer.running)) {
			/* The client's deadline: a 504 (or, streaming, the stream's
			 * end with an error event), and the upstream aborted. */
			req->deadline_hit = true;
			if (req->wait.queued && req->relay.committed) { /* a continuation waiting */
				ig_dispatch_cancel(gw, &req->wait);
				free(req->cont_refused);
				req->cont_refused = strdup("the request's deadline (X-Infergate-Timeout-Ms) passed");
				ig_xch_end_refused_stream(req);
			} else if (req->wait.queued) {
				ig_dispatch_cancel(gw, &req->wait);
				ig_xch_set_error(req, 504, "deadline_exceeded",
					  "the request's deadline (X-Infergate-Timeout-Ms: %ld) passed while it waited for "
					  "a backend", req->adm.timeout_ms);
				ig_xch_resume(req);
			} else {
				ig_xch_end_attempt(req, IG_UPERR_TIMEOUT, "the client's deadline passed");
			}
			continue;
		}
		/* The strategies may start another attempt (a hedge). */
		for (const struct ig_strategy *const *s = ig_strategies; *s; s++)
			if ((*s)->on_tick)
				(*s)->on_tick(req, now_ms);
		/* A stream with no first event within timeouts.ttft_ms: a straggler
		 * (a server's own queue, a stuck prefill): tried elsewhere. */
		if (ttft_ms && req->xfer.running && req->adm.stream && !req->relay.committed &&
		    (ig_now_us() - req->wait.attempt_us) / 1000 >= (uint64_t)ttft_ms) {
			char detail[96];
			snprintf(detail, sizeof(detail), "no first byte in %ld ms", ttft_ms);
			req->ttft_cut = true;
			ig_xch_end_attempt(req, IG_UPERR_TIMEOUT, detail);
			continue;
		}
		/* A stream silent timeouts.token_gap_ms after its first event: a
		 * stalled backend; the stream goes on elsewhere (continue_stream).
		 * Its last byte may be newer than the scan's clock (a hedge this
		 * scan started, a byte read meanwhile): not a huge silence. */
		uint64_t quiet = now_ms > req->relay.last_io_ms ? now_ms - req->relay.last_io_ms : 0;
		if (gap_ms && req->xfer.running && req->relay.committed && !req->relay.paused && quiet >= (uint64_t)gap_ms) {
			char detail[96];
			snprintf(detail, sizeof(detail), "no event for %ld ms", gap_ms);
			ig_xch_end_attempt(req, IG_UPERR_TIMEOUT, detail);
			continue;
		}
		if (req->xfer.running && !req->relay.paused && quiet >= limit) {
			char detail[96];
			snprintf(detail, sizeof(detail), "no byte for %lds", gw->cfg->idle_s);
			ig_xch_end_attempt(req, IG_UPERR_TIMEOUT, detail);
		}
	}
}

void ig_proxy_tick_rx(struct ig_rx *rx, uint64_t now_ms)
{
	if (now_ms >= rx->next_idle_scan_ms) {
		rx->next_idle_scan_ms = now_ms + (rx->gw->cfg->hedge_after_ms ? 25 : 250);
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
		if (ops & IG_HAND_DETACHED_END) {
			detached_end(req);
			continue;
		}
		if (ops & IG_HAND_HEDGE_LOST) {
			bool hedge = req->is_hedge;
			ig_hedge_lose(req);
			if (hedge)
				continue; /* freed */
		}
		if (ops & IG_HAND_END_STREAM)
			ig_xch_end_refused_stream(req);
		if ((ops & IG_HAND_START) && req->start_posted) {
			req->start_posted = false;
			launch(req);
			if (!req->xfer.running)
				ops |= IG_HAND_RESUME; /* it failed: the error is the answer */
		}
		if (ops & IG_HAND_RESUME)
			ig_xch_resume(req);
	}
}

void ig_xch_req_log(struct ig_req *req, bool completed)
{
	struct ig_gw *gw = req->gw;
	char ts[40];
	uint64_t now = ig_now_us();

	if (gw->alog.fd < 0)
		return;
	ig_iso_time(ts, sizeof(ts));
	/* Time to first byte: the first streamed chunk, or the whole answer. */
	uint64_t first = req->relay.t_first_byte_us ? req->relay.t_first_byte_us : req->t_answer_us;
	/* A stream that carried an error event is logged as the error's status
	 * (status_sent says what went on the wire) with its message. */
	json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:s, s:I, s:o, s:b, s:b, s:I, s:I, s:o, "
			      "s:f, s:I, s:I, s:o, s:o, s:b}",
			      "time", ts, "request_id", req->request_id, "client", req->client,
			      "method", ig_routes_method_name(req->adm.method), "path",
			      ig_xch_req_path(req),
			      "status", (json_int_t)ig_proxy_req_status(req),
			      "status_sent", (json_int_t)req->status_sent,
			      "error", req->relay.stream_error_msg ? json_string(req->relay.stream_error_msg) : json_null(),
			      "backend", req->wait.backend ? json_string(req->wait.backend->url) : json_null(),
			      "model", req->adm.model ? json_string(req->adm.model) : json_null(),
			      "alias", req->adm.alias ? json_string(req->adm.alias) : json_null(),
			      "key", req->adm.key && req->adm.key->ent ? json_string(req->adm.key->ent->name) : json_null(),
			      "priority", ig_conf_class_name(req->wait.q.klass),
			      "queue_ms", (json_int_t)req->wait.waited_ms,
			      "dispatch", req->wait.dispatch_seq ? json_integer((json_int_t)req->wait.dispatch_seq) : json_null(),
			      "over_slots", req->wait.pick.over,
			      "stream", req->adm.stream,
			      "bytes_in", (json_int_t)req->bytes_in,
			      "bytes_out", (json_int_t)req->relay.bytes_out,
			      "ttfb_ms", first ? json_real((double)(first - req->t_start_us) / 1000.0) : json_null(),
			      "duration_ms", (double)(now - req->t_start_us) / 1000.0,
			      "retries", (json_int_t)req->retries_done,
			      "continuations", (json_int_t)req->relay.cont.count,
			      "prompt_tokens", req->relay.prompt_tokens >= 0 ? json_integer(req->relay.prompt_tokens) : json_null(),
			      "completion_tokens",
			      req->relay.completion_tokens >= 0 ? json_integer(req->relay.completion_tokens) : json_null(),
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
	if (req->detached)
		return MHD_NO; /* its client left: the connection closes */
	if (req->relay.client_gone && !req->body_done)
		return MHD_NO; /* it hung up while sending: what MHD still had is not run */
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
	if (!req->body_done) {
		req->body_done = true;
		if (!req->too_large && !req->adm.resp_id && gw->threaded) {
			/* The body is parsed with the lock let go (it is the largest
			 * part of a request's own work): the request is this
			 * reactor's alone until body_done() admits it. */
			int depth = ig_gw_release(gw);
			req->parsed = json_loadb(req->body.data ? req->body.data : "", req->body.len, 0, &req->parse_error);
			ig_gw_reacquire(gw, depth);
			req->parse_done = true;
		}
		return body_done(req);
	}
	return ig_xch_respond(req);
}

/* server.c's watch saw its client close its side: as any client that
 * leaves (an HTTP/1.1 client half-closes only to go, and nginx takes it
 * so too: proxy_ignore_client_abort off). */
static void on_hangup(struct ig_call *call)
{
	ig_proxy_req_client_gone(IG_CONTAINER_OF(call, struct ig_req, call));
}

/* The connection is done with the request: count it, log it, free it. */
static void on_completed(struct ig_call *call, enum MHD_RequestTerminationCode toe)
{
	struct ig_req *req = IG_CONTAINER_OF(call, struct ig_req, call);
	if (req->detached)
		return; /* detached at its hang-up: it runs on, MHD is done with it */
	if (req->idem_runner && !req->idem_ended && !req->relay.client_gone &&
	    (req->xfer.running || req->wait.queued || req->start_posted)) {
		detach(req);
		return;
	}
	if (!req->relay.client_gone) {
		if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
			ig_log_debug("request %s: connection ended early (%d)", req->request_id, (int)toe);
		/* The connection is finishing: it must not be resumed again. */
		req->suspended = false;
		ig_proxy_req_client_gone(req);
	}
	ig_xch_count_answer(req); /* one that never reached its end: a stream the client left */
	ig_xch_req_log(req, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
	ig_xch_req_free(req);
}
