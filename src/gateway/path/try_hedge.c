/* Hedging (strategy.h): an exchange with no byte after hedge.after_ms is
 * sent to a second backend too; the first byte of either wins, the other
 * is cut, and its cost is counted as waste. An exchange whose first attempt
 * fails while its hedge runs takes the hedge's answer. Not for a stream
 * under way, a pinned follow-up, an Idempotency-Key's runner, or class low
 * unless hedge.low. The budget (dispatch.h's hedge budget) bounds it.
 * Not here: the race's bytes (relay.c asks `first_byte`). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "path/exchange.h"
#include "path/idem.h"
#include "path/strategy.h"
#include "path/watch.h"

/* An attempt that lost its race, stopped: its backend time and the prompt
 * it was sent (the prefill it may have cost) counted as hedge waste. Its
 * output is not known (a streamed loser had sent none). */
void ig_hedge_waste(struct ig_req *req)
{
	long prompt = req->adm.prompt_estimate;
	req->gw->stats.hedge_waste_us += ig_now_us() - req->wait.attempt_us;
	req->gw->stats.hedge_waste_prompt_tokens += (uint64_t)(prompt > 0 ? prompt : 0);
}

/* A hedge that lost, was refused or is not needed: its attempt stopped,
 * freed. Not from a curl callback. */
void ig_hedge_drop(struct ig_req *h)
{
	if (ig_xch_stop_attempt(h))
		ig_hedge_waste(h);
	ig_list_del(&h->post_link);
	if (h->hedge_of && h->hedge_of->hedge == h)
		h->hedge_of->hedge = NULL;
	h->hedge_of = NULL;
	h->hooks->free(h);
}

/* p has had no byte for hedge.after_ms: the same request goes to another
 * backend with a free slot, within the budget. On p's reactor, under the
 * lock, outside curl's callbacks. */
static void hedge_start(struct ig_req *p, long after_ms)
{
	struct ig_gw *gw = p->gw;
	if (p->wait.m && p->wait.m->qlen > 0)
		return; /* no free slot, and requests wait for the next: tried again when one frees */
	if (!ig_dispatch_hedge_budget(gw)) {
		p->hedged = true;
		gw->stats.hedges[3] += !p->hedge_missed;
		return;
	}
	struct ig_req *h = calloc(1, sizeof(*h));
	/* its answer's bytes, for p should it win: an entry of its own, in no store */
	struct ig_idem_entry *e = ig_idem_private();
	if (!h || !e) {
		free(h);
		free(e);
		return;
	}
	ig_xch_fork(h, p, "-hedge"); /* not retried, detached */
	ig_buf_append(&h->body, p->body.data ? p->body.data : "", p->body.len);
	h->relay.responses = p->relay.responses;
	h->relay.anthropic = p->relay.anthropic;
	h->relay.tee = p->relay.stream;
	h->relay.race = true;
	h->relay.cont.max = p->relay.cont.max;
	h->is_hedge = true;
	h->idem = e;
	h->idem_runner = true;
	memcpy(h->wait.pick.tried, p->wait.pick.tried, sizeof(h->wait.pick.tried)); /* not where p runs */
	h->wait.pick.ntried = p->wait.pick.ntried;
	h->wait.pick.no_overshoot = true; /* a free slot or no hedge */
	h->hedge_of = p;
	p->hedge = h;
	p->relay.race = true;
	enum ig_dispatch_result r = ig_dispatch_retry(gw, &h->wait, false, "hedge");
	if (r != IG_DISPATCH_STARTED || h->hedge_refused || !h->xfer.running) {
		/* no backend with a free slot: no hedge now; tried again in a
		 * while (at the end of a run, slots free up while stragglers
		 * still run), counted once as not sent */
		gw->stats.hedges[3] += !p->hedge_missed;
		p->hedge_missed = true;
		p->hedge_next_ms = ig_now_ms() + 100;
		p->relay.race = false;
		ig_hedge_drop(h);
		ig_dispatch_hedge_unspend(gw);
		return;
	}
	if (p->hedge_missed)
		gw->stats.hedges[3]--; /* it went after all */
	p->hedged = true;
	gw->stats.hedges[0]++;
	ig_log_debug("request %s: no byte from %s after %ld ms: hedged on %s", p->request_id, p->wait.backend->url,
		     after_ms, h->wait.backend->url);
}

/* A race's verdict at the first byte of attempt `who` (1: the exchange's
 * own, 2: its hedge): the first to get there wins, for good. */
static bool race_first_byte(int *winner, int who)
{
	if (*winner == 0) {
		*winner = who;
		return true;
	}
	return *winner == who;
}

/* The first byte of either of a race (the relay's hook, the lock let go):
 * the first wins; the other's transfer is dropped (hedge_lose, posted). */
bool ig_hedge_first_byte(struct ig_req *req)
{
	struct ig_gw *gw = req->gw;
	bool won = true;
	ig_gw_lock(gw);
	struct ig_req *p = req->hedge_of ? req->hedge_of : req, *h = req->hedge_of ? req : req->hedge;
	if (p && h && !req->hedge_lost) {
		bool first = p->hedge_winner == 0;
		won = race_first_byte(&p->hedge_winner, req == p ? 1 : 2);
		if (first) {
			struct ig_req *loser = req == p ? h : p;
			loser->hedge_lost = true;
			gw->stats.hedges[req == p ? 2 : 1]++;
			ig_xch_hand_over(loser, IG_HAND_HEDGE_LOST);
		}
	}
	if (req->hedge_lost)
		won = false;
	ig_gw_unlock(gw);
	return won;
}

/* It lost its race (or its primary failed while it ran: the hedge won):
 * its transfer stopped; a hedge goes, a primary reads its hedge's answer.
 * On its reactor, outside curl's callbacks. */
void ig_hedge_lose(struct ig_req *req)
{
	if (req->is_hedge) {
		ig_hedge_drop(req);
		return;
	}
	if (ig_xch_stop_attempt(req))
		ig_hedge_waste(req);
	struct ig_req *h = req->hedge;
	if (!h || req->idem_reader)
		return;
	req->idem = h->idem;
	req->idem->refs++;
	req->idem_reader = true;
	req->answerer = &ig_watch_idem; /* the idempotency observer reads it out */
	req->wait.backend = h->wait.backend; /* what answers it (headers, log) */
	ig_xch_resume(req);
}

/* Whether exchange req is a straggler to hedge now: it has had no byte
 * for `after` ms (hedge.after_ms, else its model's p95 time to first byte)
 * on its first backend; it is not a hedge, not hedged yet, no runner of an
 * Idempotency-Key, not translated (xlate.h: a hedge is made of the body
 * and path as they came), not pinned to its backend, of class high or normal (low
 * too with hedge.low), and its last try found a slot (hedge_next_ms). */
static bool hedge_due(const struct ig_req *req, long after, bool low_too, uint64_t now_ms, uint64_t now_us)
{
	return after > 0 && !req->hedged && !req->is_hedge && !req->idem && !req->relay.xlate && req->xfer.running &&
	       !req->relay.first_seen && !req->relay.committed && (req->wait.q.klass != IG_CLASS_LOW || low_too) &&
	       !req->wait.pick.pinned && now_ms >= req->hedge_next_ms &&
	       (now_us - req->wait.attempt_us) / 1000 >= (uint64_t)after;
}

static void hedge_tick(struct ig_req *req, uint64_t now_ms)
{
	const struct ig_conf *cfg = req->gw->cfg;
	long after = cfg->hedge_after_ms >= 0 ? cfg->hedge_after_ms : req->wait.m ? req->wait.m->ttfb_p95_ms : 0;
	if (hedge_due(req, after, cfg->hedge_low, now_ms, ig_now_us()))
		hedge_start(req, after);
}

/* Its attempt failed before any byte while its hedge runs: the hedge's
 * answer is the exchange's (it reads it when it comes). */
static enum ig_try_verdict hedge_attempt_end(struct ig_req *req, const struct ig_attempt_end *ae IG_UNUSED)
{
	if (req->relay.committed || !req->hedge || req->hedge_winner != 0)
		return IG_TRY_PASS;
	req->hedge_winner = 2;
	req->hedge_lost = true;
	req->gw->stats.hedges[1]++;
	ig_hedge_lose(req);
	return IG_TRY_AGAIN;
}

const struct ig_strategy ig_try_hedge = {"hedge", hedge_attempt_end, hedge_tick};
