/* The exchange's primitives (exchange.h): what its strategies, observers
 * and its own life (proxy.c) do to it alike: its connection suspended and
 * resumed, work handed to its own reactor, an error decided, its attempt
 * stopped. Nothing here decides what happens next (proxy.c, strategies). */
#include "config.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/httpd.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "path/exchange.h"

/* The path it goes to upstream: its own (a by-id route's), else its route's. */
const char *ig_xch_req_path(const struct ig_req *req)
{
	return req->adm.up_path ? req->adm.up_path : ig_route_path(req->gw->cfg, req->adm.route_idx);
}

/* What every exchange (and a hedge) starts with: its lists, its
 * transfer's and relay's and waiter's callbacks, its reactor (this one). */
void ig_xch_init(struct ig_req *req, struct ig_gw *gw, int route_idx, unsigned method,
		 const struct ig_xch_hooks *hooks)
{
	req->hooks = hooks;
	ig_admission_init(&req->adm);
	req->adm.method = method;
	req->adm.route_idx = route_idx;
	req->xfer.done = hooks->xfer_done;
	ig_list_init(&req->xfer.unpause_link);
	req->gw = gw;
	ig_list_init(&req->idem_link);
	ig_list_init(&req->post_link);
	req->t_start_us = ig_now_us();
	ig_buf_init(&req->body);
	ig_buf_init(&req->orig_body);
	ig_relay_init(&req->relay, hooks->relay);
	ig_list_init(&req->wait.q.link);
	req->wait.q.klass = IG_CLASS_NORMAL;
	req->wait.ops = hooks->waiter;
	req->rx = ig_rx_self;
	ig_list_append(&req->rx->reqs, &req->link);
	gw->nreqs++;
}

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

/* The error answer decided here, in OpenAI's shape: its message printf'd
 * by the one formatter of the errors the gateway decides (oaerror.h: at
 * most IG_OAERROR_MESSAGE_MAX bytes, never cut inside a character), its
 * type the status's. */
void ig_xch_set_error(struct ig_req *req, unsigned status, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *body = ig_oaerror_vjsonf(status, NULL, NULL, code, fmt, ap);
	va_end(ap);
	free(req->err_body);
	req->err_status = status;
	req->err_body = body;
}

/* The gateway's own answer, not an error: a JSON body (taken over) sent
 * the way errors are (respond: err_status, err_body). */
void ig_xch_set_answer(struct ig_req *req, unsigned status, char *body)
{
	free(req->err_body);
	req->err_status = status;
	req->err_body = body;
}

/* An error decided by admission or dispatch. */
void ig_xch_set_decided_error(struct ig_req *req, unsigned status, const char *type, const char *param,
			      const char *code, const char *message)
{
	free(req->err_body);
	req->err_status = status;
	req->err_body = ig_oaerror_json(message, type ? type : ig_oaerror_type_for_status(status), param, code);
}

void ig_xch_fork(struct ig_req *h, struct ig_req *p, const char *suffix)
{
	ig_xch_init(h, p->gw, p->adm.route_idx, p->adm.method, p->hooks); /* on p's reactor */
	h->adm.model = strdup(p->adm.model ? p->adm.model : "");
	h->adm.stream = p->adm.stream;
	h->adm.usage_added = p->adm.usage_added;
	h->adm.prompt_estimate = p->adm.prompt_estimate;
	if (p->adm.up_path && !(h->adm.up_path = strdup(p->adm.up_path))) /* a translated body's (xlate.h) */
		abort();
	snprintf(h->request_id, sizeof(h->request_id), "%.60s%s", p->request_id, suffix);
	snprintf(h->client, sizeof(h->client), "%s", p->client);
	snprintf(h->peer, sizeof(h->peer), "%s", p->peer);
	for (struct curl_slist *l = p->up_headers; l; l = l->next)
		if (l != p->tp_node && l != p->rank_node) /* its own, per attempt */
			h->up_headers = curl_slist_append(h->up_headers, l->data);
	ig_trace_fork(&h->trace, &p->trace);
	h->relay.usage_where = p->relay.usage_where;
	h->relay.stream = p->relay.stream;
	h->relay.usage_added = p->relay.usage_added;
	h->detached = true;
	ig_relay_detach(&h->relay);
	h->retries_done = (int)p->gw->cfg->retries;
	h->wait.q.klass = p->wait.q.klass;
	h->wait.q.key = p->wait.q.key; /* its slot counts against the key's max_inflight */
	h->wait.q.key->refs++;
	h->wait.m = p->wait.m;
	ig_sched_hold(h->wait.m);
	h->wait.model = h->adm.model;
	h->wait.pick.tokens = p->wait.pick.tokens;
}

/* Its attempt stopped where it is: a transfer running (or about to start
 * on its reactor) cut, its slot given back and counted as aborted at its
 * backend; a place in the queue left. Returns whether a transfer was cut.
 * Not from a curl callback. */
bool ig_xch_stop_attempt(struct ig_req *req)
{
	bool cut = req->xfer.running || req->start_posted || req->pd_waiting;
	if (cut) {
		req->start_posted = false; /* its reactor will not start it */
		req->pd_waiting = false;   /* a pair's decode that waited for its prefill */
		ig_upstream_stop(&req->xfer);
		ig_dispatch_end(req->gw, &req->wait, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
		atomic_fetch_add(&req->wait.backend->aborted, 1);
	}
	if (req->wait.queued)
		ig_dispatch_cancel(req->gw, &req->wait);
	return cut;
}

const char *ig_xch_uperr_name(enum ig_upstream_error e)
{
	static const char *n[] = {"none", "connect", "reset", "timeout", "status", "other"};
	return n[e];
}
