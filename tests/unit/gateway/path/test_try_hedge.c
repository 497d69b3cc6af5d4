/* Unit tests for hedging (src/gateway/path/try_hedge.c, included to reach its
 * static decisions): when a straggler is hedged, which of the race wins,
 * and that a first attempt failing while its hedge runs takes the hedge's
 * answer. Fake exchanges: a relay's and a transfer's state, a waiter, no
 * socket, no curl. */
#include "../../../../src/gateway/path/try_hedge.c"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../check_main.h"

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx;
	struct ig_backend b1, b2;
	struct ig_req p, h;      /* the exchange's attempt and its hedge */
	struct ig_idem_entry e;  /* the hedge's answer */
};

static struct fake *fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	f->gw.cfg = &f->cfg;
	f->rx.gw = &f->gw;
	ig_list_init(&f->rx.posted);
	ig_rx_self = &f->rx; /* the test's thread is the exchanges' reactor */
	f->b1.url = "http://b1";
	f->b2.url = "http://b2";
	struct ig_req *r[] = {&f->p, &f->h};
	for (int i = 0; i < 2; i++) {
		r[i]->gw = &f->gw;
		r[i]->rx = &f->rx;
		ig_list_init(&r[i]->post_link);
		ig_list_init(&r[i]->wait.q.link);
		r[i]->wait.q.klass = IG_CLASS_NORMAL;
	}
	f->p.wait.backend = &f->b1;
	f->h.wait.backend = &f->b2;
	/* a race under way: the hedge runs beside the first attempt */
	f->p.hedge = &f->h;
	f->h.hedge_of = &f->p;
	f->h.is_hedge = true;
	f->h.idem = &f->e;
	f->h.idem_runner = true;
	f->e.refs = 1;
	return f;
}

static void fake_free(struct fake *f)
{
	ig_rx_self = NULL;
	free(f);
}

/* A straggler that has run `after` ms on its backend with no byte. */
static void straggler(struct ig_req *r, uint64_t now_us, long ran_ms)
{
	r->xfer.running = true;
	r->wait.attempt_us = now_us - (uint64_t)ran_ms * 1000u;
}

/* Hedged once its first attempt has had no byte for hedge.after_ms, not
 * before; not once a byte came; not twice. */
START_TEST(a_straggler_is_hedged_after_the_delay_and_only_then)
{
	struct fake *f = fake_new();
	struct ig_req *p = &f->p;
	p->hedge = NULL;
	uint64_t now_us = 1000000000ull, now_ms = now_us / 1000;
	straggler(p, now_us, 199);
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	straggler(p, now_us, 200);
	ck_assert(hedge_due(p, 200, false, now_ms, now_us));
	ck_assert(!hedge_due(p, 0, false, now_ms, now_us)); /* hedging off */
	p->relay.first_seen = true; /* its first byte came: no race to run */
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	p->relay.first_seen = false;
	p->relay.committed = true; /* a stream under way (a continuation) */
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	p->relay.committed = false;
	p->hedged = true; /* once at most */
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	p->hedged = false;
	p->hedge_next_ms = now_ms + 100; /* no slot at the last try: later */
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	ck_assert(hedge_due(p, 200, false, now_ms + 100, now_us + 100000));
	p->xfer.running = false; /* queued, not running: nothing to hedge */
	ck_assert(!hedge_due(p, 200, false, now_ms + 100, now_us + 100000));
	fake_free(f);
}
END_TEST

/* Class low only with hedge.low; never a follow-up pinned to its backend,
 * an Idempotency-Key's runner, or a hedge itself. */
START_TEST(low_pinned_idempotent_and_hedges_are_not_hedged)
{
	struct fake *f = fake_new();
	struct ig_req *p = &f->p;
	uint64_t now_us = 1000000000ull, now_ms = now_us / 1000;
	p->hedge = NULL;
	straggler(p, now_us, 500);
	p->wait.q.klass = IG_CLASS_LOW;
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	ck_assert(hedge_due(p, 200, true, now_ms, now_us));
	p->wait.q.klass = IG_CLASS_HIGH;
	ck_assert(hedge_due(p, 200, false, now_ms, now_us));
	p->wait.pick.pinned = true;
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	p->wait.pick.pinned = false;
	p->idem = &f->e;
	ck_assert(!hedge_due(p, 200, false, now_ms, now_us));
	p->idem = NULL;
	straggler(&f->h, now_us, 500);
	ck_assert(!hedge_due(&f->h, 200, false, now_ms, now_us));
	fake_free(f);
}
END_TEST

/* The first byte of either wins for good; the other is told it lost (on
 * its reactor) and its later first byte is refused. */
START_TEST(the_first_byte_wins_and_the_other_is_cut)
{
	int winner = 0;
	ck_assert(race_first_byte(&winner, 2));
	ck_assert(!race_first_byte(&winner, 1));
	ck_assert(race_first_byte(&winner, 2));
	ck_assert_int_eq(winner, 2);

	struct fake *f = fake_new();
	ck_assert(ig_hedge_first_byte(&f->h)); /* the hedge's byte came first */
	ck_assert_int_eq(f->p.hedge_winner, 2);
	ck_assert(f->p.hedge_lost);
	ck_assert(!f->h.hedge_lost);
	ck_assert_uint_eq(f->gw.stats.hedges[1], 1); /* won by the hedge */
	ck_assert(f->p.post_ops & IG_HAND_HEDGE_LOST);
	ck_assert_ptr_eq(IG_LIST_FIRST(&f->rx.posted, struct ig_req, post_link), &f->p);
	ck_assert(!ig_hedge_first_byte(&f->p)); /* the loser's byte: dropped */
	ck_assert(ig_hedge_first_byte(&f->h));
	ck_assert_uint_eq(f->gw.stats.hedges[1], 1);
	ck_assert_uint_eq(f->gw.stats.hedges[2], 0);
	fake_free(f);

	f = fake_new();
	ck_assert(ig_hedge_first_byte(&f->p)); /* the first attempt's came first */
	ck_assert_int_eq(f->p.hedge_winner, 1);
	ck_assert(f->h.hedge_lost);
	ck_assert_uint_eq(f->gw.stats.hedges[2], 1);
	ck_assert(!ig_hedge_first_byte(&f->h));
	fake_free(f);
}
END_TEST

/* The first attempt fails before any byte while its hedge runs: no retry,
 * the hedge's answer is the client's (its backend named). Once the race is
 * decided, or with no hedge, or after a byte, it is not hedging's case. */
START_TEST(a_failed_first_attempt_takes_its_hedges_answer)
{
	struct fake *f = fake_new();
	struct ig_attempt_end ae = {IG_UPERR_RESET, "Connection reset", &f->b1};
	f->p.relay.committed = true;
	ck_assert_int_eq(hedge_attempt_end(&f->p, &ae), IG_TRY_PASS);
	f->p.relay.committed = false;
	f->p.hedge_winner = 1;
	ck_assert_int_eq(hedge_attempt_end(&f->p, &ae), IG_TRY_PASS);
	f->p.hedge_winner = 0;
	f->p.hedge = NULL;
	ck_assert_int_eq(hedge_attempt_end(&f->p, &ae), IG_TRY_PASS);
	f->p.hedge = &f->h;
	ck_assert_int_eq(hedge_attempt_end(&f->p, &ae), IG_TRY_AGAIN);
	ck_assert_int_eq(f->p.hedge_winner, 2);
	ck_assert(f->p.idem_reader);
	ck_assert_ptr_eq(f->p.idem, &f->e); /* it reads the hedge's answer */
	ck_assert_ptr_eq(f->p.answerer, &ig_watch_idem); /* read out by the idempotency observer */
	ck_assert_int_eq(f->e.refs, 2);
	ck_assert_ptr_eq(f->p.wait.backend, &f->b2);
	ck_assert_uint_eq(f->gw.stats.hedges[1], 1);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("try_hedge", a_straggler_is_hedged_after_the_delay_and_only_then,
	      low_pinned_idempotent_and_hedges_are_not_hedged, the_first_byte_wins_and_the_other_is_cut,
	      a_failed_first_attempt_takes_its_hedges_answer)
