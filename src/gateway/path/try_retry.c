/* Retry (strategy.h): an attempt that failed before any byte went to the
 * client (a connection refused or reset, a timeout, a 502/503/504) is sent
 * to another backend, up to `retries` times and within the retry budget
 * (dispatch.h). Never once the client has a byte of the answer: a stream
 * under way is continuation's (try_continue.c) or ends. Not here: which
 * backend (dispatch.c skips those tried), the health of the one that
 * failed (proxy.c accounts for it before asking). */
#include "config.h"

#include "infergate/log.h"
#include "path/exchange.h"
#include "path/strategy.h"

/* What the retry strategy makes of a failed attempt. */
enum retry_step {
	RETRY_PASS,      /* not its case: a byte was sent, or no retry is left */
	RETRY_NO_BUDGET, /* one is left, but the budget is spent */
	RETRY_GO,        /* another attempt (the budget counted it) */
};

/* `budget` is asked only when a retry would go: it counts what it allows. */
static enum retry_step retry_decide(const struct ig_req *req, long max, bool (*budget)(struct ig_gw *))
{
	if (req->relay.committed || req->retries_done >= max)
		return RETRY_PASS;
	return budget(req->gw) ? RETRY_GO : RETRY_NO_BUDGET;
}

static enum ig_try_verdict retry_attempt_end_with(struct ig_req *req, const struct ig_attempt_end *ae,
						  bool (*budget)(struct ig_gw *))
{
	struct ig_gw *gw = req->gw;
	enum ig_upstream_error e = ae->e;
	switch (retry_decide(req, gw->cfg->retries, budget)) {
	case RETRY_PASS:
		return IG_TRY_PASS;
	case RETRY_NO_BUDGET:
		ig_log_debug("request %s: not retried after %s from %s: the retry budget is spent", req->request_id,
			     ae->detail, ae->b->url);
		if (e != IG_UPERR_STATUS)
			ig_xch_set_error(req, e == IG_UPERR_TIMEOUT ? 504 : 502,
					 e == IG_UPERR_TIMEOUT ? "backend_timeout" : "backend_error",
					 "backend %s failed: %s (not retried: the retry budget is spent)", ae->b->url,
					 ae->detail);
		return IG_TRY_END;
	case RETRY_GO:
		break;
	}
	req->retries_done++;
	gw->stats.retries++;
	atomic_fetch_add(&ae->b->retried, 1);
	ig_log_debug("request %s: retrying after %s from %s", req->request_id, ae->detail, ae->b->url);
	if (ig_dispatch_retry(gw, &req->wait, e == IG_UPERR_TIMEOUT,
			      e == IG_UPERR_TIMEOUT ? ae->detail : ig_xch_uperr_name(e)) != IG_DISPATCH_FAILED)
		return IG_TRY_AGAIN;
	/* Nowhere else to go: a backend's own 5xx answer says more than ours. */
	if (e == IG_UPERR_STATUS) {
		req->err_status = 0;
		req->wait.backend = ae->b;
	}
	return IG_TRY_END;
}

static enum ig_try_verdict retry_attempt_end(struct ig_req *req, const struct ig_attempt_end *ae)
{
	return retry_attempt_end_with(req, ae, ig_dispatch_retry_budget);
}

const struct ig_strategy ig_try_retry = {"retry", retry_attempt_end, NULL};
