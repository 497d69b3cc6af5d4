/* A proxied call's life: an exchange (exchange.h: the client's side and
 * its current attempt) that moves one way: body read -> admitted
 * (admission.c) -> dispatched: started, queued or refused (dispatch.c) ->
 * attempt (attempt.c, upstream.c) -> bytes relayed (relay.c) -> client.
 * At an attempt's end the strategies (strategy.h: hedge, continuation,
 * retry) decide whether another goes; the observers (watch.h: tracing,
 * Idempotency-Key) are told of its events. Its MHD side is req->call, set
 * up by server.c's handler; upstream.c, relay.c and dispatch.c report back
 * through the callbacks it hands them (req->hooks). Work another reactor
 * decides for it (a start, a refusal, an answer) is posted to its own.
 * Not here: URL routing and the gateway's endpoints (server.c), the checks
 * of a body (admission.c), the queues and backend choice (dispatch.c). */
#include "config.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "conf/peer.h"
#include "infergate/anthropic.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "path/proxy.h"
#include "path/strategy.h"
#include "path/watch.h"
#include "path/xlate.h"

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
static bool relay_first_byte(struct ig_relay *r);
static void relay_tee(struct ig_relay *r, const char *p, size_t n);

static void req_free(struct ig_req *req);
static void decided(struct ig_req *req);
static enum MHD_Result admit(struct ig_req *req);
static enum MHD_Result respond(struct ig_req *req);
static void end_attempt(struct ig_req *req, enum ig_upstream_error e, const char *detail);

static const struct ig_waiter_ops waiter_ops = {on_dispatched, on_refused};
static const struct ig_relay_ops relay_ops = {relay_wake,  relay_idle,   relay_committed, relay_event,
					      relay_stored, relay_tee, relay_first_byte};
static void watch_attempt_start(struct ig_req *req, struct ig_backend *b);
static const struct ig_xch_hooks hooks = {on_upstream_done, &relay_ops, &waiter_ops, req_free, decided, admit,
					  watch_attempt_start, end_attempt, ig_pd_launch};

/* The observers, told in this order (watch.h). */
const struct ig_watch *const ig_watches[] = {
	&ig_watch_trace, /* spans; the traceparent sent upstream */
	&ig_watch_idem,  /* Idempotency-Key: the answer kept, a duplicate's read */
	NULL,
};

/* The strategies, asked in this order at an attempt's end (strategy.h). */
const struct ig_strategy *const ig_strategies[] = {
	&ig_try_pd,       /* a prefill half's end is the pair's (try_pd.c) */
	&ig_try_hedge,    /* it failed while its hedge runs: the hedge's answer */
	&ig_try_continue, /* a stream broken after its first byte goes on elsewhere */
	&ig_try_retry,    /* before any byte: another backend, within the budget */
	NULL,
};

/* Each observer with op told: WATCH(on_done, req). */
#define WATCH(op, ...)                                                                  \
	for (const struct ig_watch *const *o_ = ig_watches; *o_; o_++)                \
		if ((*o_)->op)                                                          \
			(*o_)->op(__VA_ARGS__)

static void watch_attempt_start(struct ig_req *req, struct ig_backend *b)
{
	WATCH(on_attempt_start, req, b);
}

static void decided(struct ig_req *req)
{
	WATCH(on_decided, req);
}

static struct ig_req *of_relay(struct ig_relay *r)
{
	return IG_CONTAINER_OF(r, struct ig_req, relay);
}

static void relay_stored(struct ig_relay *r, json_t *response)
{
	ig_attempt_stored(of_relay(r), response);
}

static void relay_tee(struct ig_relay *r, const char *p, size_t n)
{
	ig_watch_idem_tee(of_relay(r), p, n);
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
	ig_xch_init(req, gw, route_idx, method, &hooks); /* the reactor whose daemon holds conn */
	req->adm.resp_id = rid;
	req->call = (struct ig_call){on_request, on_completed, on_hangup};
	req->conn = conn;
	req->relay.usage_where = ig_gw_route(gw->cfg, route_idx)->usage;
	req->relay.responses = ig_gw_route(gw->cfg, route_idx)->flags & IG_RT_RESPONSES;
	req->relay.anthropic = ig_gw_route(gw->cfg, route_idx)->flags & IG_RT_ANTHROPIC;
	snprintf(req->client, sizeof(req->client), "%s", ig_peer_client(conn));
	snprintf(req->peer, sizeof(req->peer), "%s", ig_peer_sock(conn));
	req->rx->requests++;
	return req;
}

static void req_free(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	WATCH(on_done, req);
	ig_list_del(&req->link);
	ig_list_del(&req->post_link);
	gw->nreqs--;
	ig_buf_free(&req->body);
	ig_buf_free(&req->orig_body);
	free(req->cont_refused);
	free(req->refusal);
	if (req->hedge_of && req->hedge_of->hedge == req)
		req->hedge_of->hedge = NULL;
	if (req->pd_of && req->pd_of->pd_leg == req)
		req->pd_of->pd_leg = NULL;
	ig_pd_drop_leg(req);
	if (req->hedge) { /* its hedge: on if it won (it runs for itself), else dropped */
		struct ig_req *h = req->hedge;
		h->hedge_of = NULL;
		req->hedge = NULL;
		if (req->hedge_winner != 2)
			ig_hedge_drop(h);
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



/* ---- hedging: a straggler sent to a second backend, the first byte wins ---- */

/* ---- dispatch's callbacks ---- */

/* Dispatch's refusal, on req's own reactor (its relay and transfer are
 * read): a hedge not placed is dropped by hedge_start; a continuation's
 * ends its stream; else it is the answer. */
static void refused_here(struct ig_req *req, const struct ig_dispatch_error *e)
{
	if ((req->hedge_of || req->is_pd_leg) && !req->xfer.running && !req->relay.first_seen) {
		req->hedge_refused = true; /* a companion not placed: its maker (hedge_start, try_pd.c) drops it */
		return;
	}
	if (req->relay.committed) { /* a continuation: its stream is under way */
		free(req->cont_refused);
		req->cont_refused = strdup(e->message);
		ig_xch_end_refused_stream(req);
		return;
	}
	ig_xch_set_decided_error(req, e->status, e->type, e->param, e->code, e->message);
	req->refused_code = e->code;
	ig_xch_resume(req);
}

/* Dispatch will not run it (any reactor, under the lock: a drain or the
 * queue's expiry where a slot freed). Another reactor does not read req's
 * reactor's fields: the refusal is kept (the lock's) and posted to its own. */
static void on_refused(struct ig_waiter *w, const struct ig_dispatch_error *e)
{
	struct ig_req *req = IG_CONTAINER_OF(w, struct ig_req, wait);
	if (req->rx == ig_rx_self) {
		refused_here(req, e);
		return;
	}
	size_t n = strlen(e->message ? e->message : "") + 1;
	free(req->refusal);
	if ((req->refusal = malloc(sizeof(*req->refusal) + n))) {
		req->refusal->e = *e;
		memcpy(req->refusal->message, e->message ? e->message : "", n);
		req->refusal->e.message = req->refusal->message;
	}
	ig_xch_hand_over(req, IG_HAND_REFUSED);
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
	ig_attempt_launch(req);
	if (req->xfer.running || req->pd_waiting)
		return 0;
	ig_xch_resume(req); /* it failed: the error is the answer */
	return -1;
}

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
	if (r->tee) /* its answer's status and type, for the readers */
		ig_watch_idem_committed(req);
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

/* ---- admission and dispatch ---- */


/* Admission's refusal is the answer. */
static enum MHD_Result refused(struct ig_req *req)
{
	const struct ig_admission_error *e = &req->adm.err;
	ig_xch_set_decided_error(req, e->status ? e->status : 500, e->type, e->param, e->code ? e->code : "internal_error",
			  e->status && e->message ? e->message : "out of memory");
	return respond(req);
}


/* The body is complete: admit, dispatch, and answer or suspend. */
static enum MHD_Result body_done(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	struct ig_admission *a = &req->adm;
	struct ig_waiter *w = &req->wait;

	ig_attempt_request_id(req);
	WATCH(on_begin, req);
	if (req->too_large) {
		ig_xch_set_error(req, 413, "request_too_large", "the request body is larger than %ld bytes",
			  gw->cfg->max_body_bytes);
		return respond(req);
	}
	req->bytes_in = req->body.len; /* as sent: the forwarded body may differ */
	if (ig_admission_classify(gw, a, req->conn, w) < 0)
		return refused(req);
	/* refused, another's answer is its own, or the other gateways are
	 * asked first (respond() waits for them: watch_idem.c) */
	for (const struct ig_watch *const *o = ig_watches; *o; o++)
		if ((*o)->on_admit && (*o)->on_admit(req) != 0)
			return respond(req);
	return admit(req);
}

/* Admitted (body, limits), then dispatched: answered, or suspended. */
static enum MHD_Result admit(struct ig_req *req)
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
	if (a->answer) { /* the gateway's own (/tokenize with the model's tokenizer) */
		ig_xch_set_answer(req, 200, a->answer);
		a->answer = NULL;
		return respond(req);
	}
	req->relay.stream = a->stream;
	if (ig_xlate_wanted(req) && ig_xlate_request(req) < 0) /* Anthropic's to a chat backend */
		return respond(req);
	req->relay.usage_added = a->usage_added;
	req->relay.store = a->store;
	req->relay.tee = req->idem_runner && a->stream;
	const struct ig_route *rt = ig_gw_route(gw->cfg, a->route_idx);
	if (a->stream && (rt->flags & IG_RT_OUTPUT) && (rt->flags & IG_RT_USAGE_OPTION) && !(rt->flags & IG_RT_RESPONSES))
		req->relay.cont.max = (int)gw->cfg->continue_max;
	if (!(w->m = ig_sched_get(&gw->sched, &gw->fleet, a->model))) {
		ig_xch_set_error(req, 500, "internal_error", "out of memory");
		return respond(req);
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
	ig_attempt_headers(req);
	req->t_submit_us = ig_now_us();
	if (ig_dispatch_submit(gw, w) == IG_DISPATCH_FAILED && !ig_try_fallback(req))
		return respond(req);
	ig_xch_suspend(req);
	return MHD_YES;
}

/* ---- the answer ---- */

/* A duplicate's answer: the runner's, as it was relayed (whole when it
 * ended, else followed: idem_read), with Idempotent-Replayed. It waits
 * for the runner's status. */
/* A backend's error on an Anthropic route in Anthropic's shape: as it came
 * when it is already ({"type": "error", "error": {"type", "message"}}:
 * SGLang's and vLLM's Anthropic handlers), else made so (a FastAPI
 * {"detail"} 404 of a server without the route, an OpenAI-shaped error).
 * NULL: relay it as it is. */
static char *anthropic_answer(unsigned status, const char *body, size_t len)
{
	json_t *o = json_loadb(body ? body : "", len, 0, NULL), *e = json_object_get(o, "error");
	bool theirs = json_is_string(json_object_get(o, "type")) &&
		      strcmp(json_string_value(json_object_get(o, "type")), "error") == 0 &&
		      json_is_string(json_object_get(e, "type")) && json_is_string(json_object_get(e, "message"));
	json_decref(o);
	return theirs ? NULL : ig_anth_error_from_backend(status, body, len);
}

/* Queues whatever is decided (called again after each resume). */
static enum MHD_Result respond(struct ig_req *req)
{
	struct ig_relay *rl = &req->relay;
	struct MHD_Response *r;

	if (rl->client_gone)
		return MHD_NO;
	enum MHD_Result theirs;
	if (req->answerer && req->answerer->answer(req, &theirs))
		return theirs;
	if (req->err_status || rl->upstream_done)
		decided(req);
	if (req->err_status) {
		if (req->err_status >= 400 && (ig_gw_route(req->gw->cfg, req->adm.route_idx)->flags & IG_RT_ANTHROPIC)) {
			/* Anthropic's clients read its shape (anthropic.h) */
			char *a = ig_anth_error_from_backend(req->err_status, req->err_body, strlen(req->err_body));
			if (a)
				ig_xch_set_answer(req, req->err_status, a);
		}
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
		ig_xch_add_common_headers(req, r);
		enum MHD_Result ret = ig_xch_queue_answer(req, req->err_status, r, strlen(req->err_body));
		ig_xch_count_answer(req);
		return ret;
	}
	if (rl->committed && ig_relay_streaming(rl)) {
		/* MHD sends a chunked body (HTTP/1.1) from the connection's own
		 * buffer and uses this block only for HTTP/1.0 clients; a held
		 * stream should not pay 2 KiB for it (10,000 streams). */
		r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 256, ig_relay_read, rl, NULL);
		ig_xch_add_relayed_headers(req, r, NULL);
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
		ig_xch_add_common_headers(req, r);
		enum MHD_Result ret = ig_xch_queue_answer(req, (unsigned)rl->up_status, r, 0);
		if (rl->upstream_done)
			ig_xch_count_answer(req);
		return ret;
	}
	if (rl->upstream_done) {
		/* The client gets OpenAI's error shape whatever the backend used
		 * (SGLang answers flat, FastAPI {"detail"}), message kept; on
		 * Anthropic's routes Anthropic's (anthropic_answer); a translated
		 * request's answer is a Message (xlate.h). */
		char *oa = rl->xlate ? ig_xlate_answer(rl, (unsigned)rl->up_status, ig_buf_head(&rl->resp),
						       ig_buf_pending(&rl->resp))
			   : rl->up_status < 400 ? NULL
			   : rl->anthropic ? anthropic_answer((unsigned)rl->up_status, ig_buf_head(&rl->resp),
							      ig_buf_pending(&rl->resp))
			   : ig_oaerror_normalize((unsigned)rl->up_status, ig_buf_head(&rl->resp),
						  ig_buf_pending(&rl->resp));
		if (oa) {
			size_t n = strlen(oa);
			r = MHD_create_response_from_buffer(n, oa, MHD_RESPMEM_MUST_FREE);
			ig_xch_add_relayed_headers(req, r, "Content-Type");
			MHD_add_response_header(r, "Content-Type", "application/json");
			ig_xch_add_common_headers(req, r);
			enum MHD_Result ret = ig_xch_queue_answer(req, (unsigned)rl->up_status, r, n);
			ig_xch_count_answer(req);
			return ret;
		}
		r = MHD_create_response_from_buffer(ig_buf_pending(&rl->resp), (void *)ig_buf_head(&rl->resp),
						    MHD_RESPMEM_MUST_COPY);
		ig_xch_add_relayed_headers(req, r, NULL);
		ig_xch_add_common_headers(req, r);
		enum MHD_Result ret = ig_xch_queue_answer(req, (unsigned)rl->up_status, r, ig_buf_pending(&rl->resp));
		ig_xch_count_answer(req);
		return ret;
	}
	/* Resumed with nothing to say yet (a spurious wake-up): wait again. */
	ig_xch_suspend(req);
	return MHD_YES;
}

/* ---- an attempt's end ---- */

/* A failed attempt: accounted, then the strategies asked in their order
 * (strategy.h). Returns true when another attempt goes on; false when the
 * answer is decided: what a strategy set, else a stream's error event or
 * the gateway's 502/504 (a backend's own 5xx answer is relayed). */
static bool failed(struct ig_req *req, enum ig_upstream_error e, const char *detail, struct ig_backend *b)
{
	ig_attempt_failed(req, e, detail, b);
	const struct ig_attempt_end ae = {e, detail, b};
	for (const struct ig_strategy *const *s = ig_strategies; *s; s++) {
		enum ig_try_verdict v = (*s)->on_attempt_end ? (*s)->on_attempt_end(req, &ae) : IG_TRY_PASS;
		if (v != IG_TRY_PASS)
			return v == IG_TRY_AGAIN;
	}
	if (req->relay.committed) {
		ig_log_warn("request %s: backend %s failed mid-stream (%s)", req->request_id, b->url, detail);
		ig_relay_fail_stream(&req->relay, "the backend failed while streaming; the response is incomplete");
	} else if (e != IG_UPERR_STATUS) {
		ig_xch_set_error(req, e == IG_UPERR_TIMEOUT ? 504 : 502,
				 e == IG_UPERR_TIMEOUT ? "backend_timeout" : "backend_error", "backend %s failed: %s",
				 b->url, detail);
	}
	return false;
}

/* One attempt ended (e says how): its slot given back, observers told,
 * then answered, past its deadline, or failed (the strategies decide what
 * follows); the exchange's answer settled unless another attempt goes on. */
static void end_attempt(struct ig_req *req, enum ig_upstream_error e, const char *detail)
{
	struct ig_relay *rl = &req->relay;
	struct ig_backend *b = req->wait.backend;
	char event_detail[320];

	WATCH(on_attempt_end, req, e, detail);
	ig_upstream_stop(&req->xfer); /* when it ends early: idle timeout, a lost race */
	if (req->hedge_lost) { /* dropped at its first byte: hedge_lose (posted) does the rest */
		ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		ig_hedge_waste(req);
		return;
	}
	if (e == IG_UPERR_NONE && rl->cont.broken) {
		/* a 5xx error event, taken out of the stream (relay.c) */
		snprintf(event_detail, sizeof(event_detail), "an error event: %s",
			 rl->stream_error_msg ? rl->stream_error_msg : "");
		detail = event_detail;
		e = IG_UPERR_STATUS;
	}
	if (e == IG_UPERR_NONE)
		ig_relay_whole_body(rl); /* a whole body's usage, a stored response */
	ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = e == IG_UPERR_NONE,
									.completion_tokens = rl->completion_tokens});
	if (e == IG_UPERR_NONE)
		ig_attempt_answered(req, b);
	else if (req->deadline_hit)
		ig_attempt_deadline(req, b);
	else if (failed(req, e, detail, b))
		return;
	ig_admission_settle(&req->adm, rl->prompt_tokens, rl->completion_tokens,
			    e == IG_UPERR_NONE && rl->up_status / 100 == 2 && !rl->stream_error);
	rl->upstream_done = true;
	decided(req);
	if (rl->committed)
		ig_xch_count_answer(req); /* a stream already queued: its end is decided */
	ig_xch_resume(req);
}

static void on_upstream_done(struct ig_xfer *x, CURLcode result)
{
	struct ig_req *req = IG_CONTAINER_OF(x, struct ig_req, xfer);
	enum ig_upstream_error e = ig_attempt_classify(req, result);
	char detail[256];
	long status = req->relay.up_status, rest;

	/* A 429 or 503 that says when to come back: the backend is alive and
	 * busy. It is sent nothing new for that long, the request goes
	 * elsewhere (or waits for it), and it is no health failure. */
	if (result == CURLE_OK && (status == 429 || status == 503) &&
	    (rest = ig_attempt_retry_after_s(ig_relay_header(&req->relay, "Retry-After"))) > 0) {
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
	end_attempt(req, e, detail);
}

/* A detached runner's end: its answer told to its entry (what is not
 * decided is a failure: the gateway stops), counted, logged, freed. */
static void detached_end(struct ig_req *req)
{
	if (!req->err_status && !req->relay.upstream_done) {
		req->relay.upstream_done = true;
		req->relay.upstream_failed = true;
	}
	decided(req);
	req->status_sent = req->err_status ? req->err_status : (unsigned)req->relay.up_status;
	if (req->is_pd_leg) { /* a prefill half: the pair's (try_pd.c), not a request */
		ig_list_del(&req->post_link);
		ig_pd_leg_end(req);
		return;
	}
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
	req_free(req);
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
	if (ig_watch_idem_runs_on(req) && !gw->stopping &&
	    (req->xfer.running || req->wait.queued || req->start_posted)) {
		/* it runs on for its Idempotency-Key; MHD closes the connection
		 * (on_completed leaves the request be) */
		struct MHD_Connection *conn = req->conn;
		bool was_suspended = req->suspended;
		ig_watch_idem_detach(req);
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
		    (req->wait.queued || req->xfer.running || req->pd_waiting)) {
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
				ig_pd_drop_leg(req); /* a pair's prefill half goes with it */
				end_attempt(req, IG_UPERR_TIMEOUT, "the client's deadline passed");
				req->pd_waiting = false;
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
			end_attempt(req, IG_UPERR_TIMEOUT, detail);
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
			end_attempt(req, IG_UPERR_TIMEOUT, detail);
			continue;
		}
		if (req->xfer.running && !req->relay.paused && quiet >= limit) {
			char detail[96];
			snprintf(detail, sizeof(detail), "no byte for %lds", gw->cfg->idle_s);
			end_attempt(req, IG_UPERR_TIMEOUT, detail);
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
		if (ops & IG_HAND_REFUSED) {
			static const struct ig_dispatch_error oom = {503, NULL, NULL, "internal_error", "out of memory"};
			refused_here(req, req->refusal ? &req->refusal->e : &oom);
			free(req->refusal);
			req->refusal = NULL;
		}
		if ((ops & IG_HAND_START) && req->start_posted) {
			req->start_posted = false;
			ig_attempt_launch(req);
			if (!req->xfer.running && !req->pd_waiting)
				ops |= IG_HAND_RESUME; /* it failed: the error is the answer */
		}
		if (ops & IG_HAND_RESUME)
			ig_xch_resume(req);
	}
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
	return respond(req);
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
	if (ig_watch_idem_runs_on(req) && !req->relay.client_gone &&
	    (req->xfer.running || req->wait.queued || req->start_posted)) {
		ig_watch_idem_detach(req);
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
	req_free(req);
}
