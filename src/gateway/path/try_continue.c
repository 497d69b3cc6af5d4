/* Stream continuation (strategy.h): a stream that broke after its first
 * event (the connection lost, a stall, a 5xx error event) goes on on
 * another backend from what was relayed (cont.h makes the body and
 * rewrites the events), within continue.max and the retry budget. A
 * continuation that cannot be made, or that dispatch refuses, ends the
 * stream with an error event. Not here: whether a body may be continued
 * at all (cont.c), the bytes (relay.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "path/exchange.h"
#include "path/strategy.h"

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
	req->hooks->decided(req);
	ig_xch_count_answer(req);
	ig_xch_resume(req);
}

/* Why req's broken stream is not continued now (static text; "" when
 * nothing asks it: continue.max 0, or its client left), or NULL: then
 * *body is the continuation's body (malloc'd). `budget` (the retry
 * budget's) is asked last, as it counts what it allows. */
static const char *refusal(const struct ig_req *req, char **body, bool (*budget)(struct ig_gw *))
{
	const struct ig_cont *c = &req->relay.cont;
	const char *why = NULL;
	*body = NULL;
	if (c->max == 0 || req->relay.client_gone)
		return "";
	if (!ig_cont_possible(c))
		return c->dead ? c->dead_why : "continue.max continuations were made";
	const struct ig_buf *orig = req->orig_body.data ? &req->orig_body : &req->body;
	if (!(*body = ig_cont_body(c, orig->data, orig->len, &why)))
		return why;
	if (!budget(req->gw)) {
		free(*body);
		*body = NULL;
		return "the retry budget is spent";
	}
	return NULL;
}

/* A stream that broke after its first event goes on on another backend
 * with what was relayed (cont.h), when it may: true then (a refusal ends
 * it through on_refused); false: it ends with an error event. */
static bool continue_stream(struct ig_req *req, enum ig_upstream_error e, const char *detail,
			    bool (*budget)(struct ig_gw *))
{
	struct ig_gw *gw = req->gw;
	struct ig_cont *c = &req->relay.cont;
	struct ig_backend *b = req->wait.backend;
	enum ig_cont_reason reason = c->broken ? IG_CONT_ERROR_EVENT : e == IG_UPERR_TIMEOUT ? IG_CONT_STALL : IG_CONT_RESET;
	char *body;
	const char *why = refusal(req, &body, budget);
	if (why) {
		if (*why)
			ig_log_info("request %s: the stream is not continued after %s from %s: %s", req->request_id,
				    detail, b->url, why);
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
	/* Started here, or queued: a drain or the queue's expiry on another
	 * reactor posts its start or its refusal to req's own (proxy.c). */
	ig_dispatch_retry(gw, &req->wait, e == IG_UPERR_TIMEOUT, detail);
	return true;
}

/* A failure after the first byte went to the client: continued, or left
 * to the exchange's end (an error event). Nothing before the first byte. */
static enum ig_try_verdict cont_attempt_end(struct ig_req *req, const struct ig_attempt_end *ae)
{
	if (!req->relay.committed)
		return IG_TRY_PASS;
	return continue_stream(req, ae->e, ae->detail, ig_dispatch_retry_budget) ? IG_TRY_AGAIN : IG_TRY_PASS;
}

const struct ig_strategy ig_try_continue = {"continue", cont_attempt_end, NULL};
