/* Unit tests for the learned headroom (src/gateway/sched/headroom.c) on scripted
 * arrivals: Little's law and its margin, the cap, nothing kept with no
 * interactive traffic, one slot kept the moment it starts, the rate read
 * over a young window and back to 0 after a quiet one. */
#include "../../../../src/gateway/sched/headroom.c"

#include <check.h>

#include "../../check_main.h"

START_TEST(the_rule_is_littles_law_plus_a_margin_within_the_cap)
{
	bool capped;
	/* 5 requests/s each holding a slot 0.37 s: L = 1.85, + sqrt = 3.21: 4 slots */
	ck_assert_int_eq(ig_headroom_rule(5, 0.37, 88, 25, &capped), 4);
	ck_assert(!capped);
	/* 20/s x 2 s: L = 40 + 6.3: 47, capped at 25% of 88 = 22 */
	ck_assert_int_eq(ig_headroom_rule(20, 2, 88, 25, &capped), 22);
	ck_assert(capped);
	/* a trickle keeps one slot */
	ck_assert_int_eq(ig_headroom_rule(0.1, 0.05, 88, 25, &capped), 1);
	/* none arriving, or learning off: none kept */
	ck_assert_int_eq(ig_headroom_rule(0, 1, 88, 25, &capped), 0);
	ck_assert_int_eq(ig_headroom_rule(5, 1, 88, 0, &capped), 0);
	/* a pool of unknown size: no cap */
	ck_assert_int_eq(ig_headroom_rule(20, 2, 0, 25, &capped), 47);
	/* a small pool keeps at least one */
	ck_assert_int_eq(ig_headroom_rule(1, 1, 2, 25, &capped), 1);
	ck_assert(capped);
}
END_TEST

/* n arrivals a second, evenly, from t0 for `secs` seconds, each busy `busy` s. */
static uint64_t script(struct ig_headroom *h, uint64_t t0, int n, int secs, double busy)
{
	uint64_t t = t0;
	for (int s = 0; s < secs; s++)
		for (int i = 0; i < n; i++) {
			t = t0 + (uint64_t)s * 1000 + (uint64_t)(i * 1000 / n);
			ig_headroom_arrival(h, t);
			ig_headroom_busy(h, busy);
		}
	return t;
}

START_TEST(headroom_follows_the_interactive_traffic)
{
	struct ig_headroom h;
	ig_headroom_init(&h);
	/* nothing yet: nothing kept */
	ck_assert_int_eq(ig_headroom_update(&h, 5000, 88, 25), 0);
	/* the first arrival keeps one slot at once, before any update */
	ig_headroom_arrival(&h, 10000);
	ck_assert_int_eq(h.slots, 1);
	/* 5/s for 20 s, 0.37 s each: the rate over the window is 5, the headroom 4 */
	uint64_t t = script(&h, 10000, 5, 20, 0.37);
	ck_assert_int_eq(ig_headroom_update(&h, t + 1, 88, 25), 4);
	ck_assert(h.rate > 4.8 && h.rate < 5.3);
	ck_assert(h.busy_s > 0.36 && h.busy_s < 0.38);
	/* stepped to 20/s: 20 x 0.37 = 7.4 + 2.7: 11 once the window holds only the
	 * new rate (10 at its edge, where a second of the old one is still in it) */
	t = script(&h, t + 1, 20, 10, 0.37);
	long slots = ig_headroom_update(&h, t + 1, 88, 25);
	ck_assert(slots == 10 || slots == 11);
	t = script(&h, t + 1, 20, 5, 0.37);
	ck_assert_int_eq(ig_headroom_update(&h, t + 1, 88, 25), 11);
	/* it stops: at 20/s, 2 s of quiet (more than five gaps) is enough: nothing kept */
	ck_assert_int_gt(ig_headroom_update(&h, t + 1500, 88, 25), 0);
	ck_assert_int_eq(ig_headroom_update(&h, t + 2100, 88, 25), 0);
	/* at 0.2/s (a gap of 5 s) quiet means 25 s, and the window's 10 s end it first */
	ig_headroom_init(&h);
	for (int i = 0; i < 3; i++)
		ig_headroom_arrival(&h, 500000 + (uint64_t)i * 5000);
	ck_assert_int_eq(ig_headroom_update(&h, 510000 + 4000, 88, 25), 1);
	ck_assert_int_eq(ig_headroom_update(&h, 510000 + 10001, 88, 25), 0);
}
END_TEST

START_TEST(a_young_window_reads_the_rate_since_the_first_arrival)
{
	struct ig_headroom h;
	ig_headroom_init(&h);
	/* 10 arrivals in the first 2 s: 5/s, not 10 arrivals over a 10 s window (1/s) */
	script(&h, 100000, 5, 2, 1.0);
	ig_headroom_update(&h, 102000, 88, 25);
	ck_assert(h.rate > 4.9 && h.rate < 5.1);
	/* a burst within the first second is read over a second at least */
	ig_headroom_init(&h);
	for (int i = 0; i < 3; i++)
		ig_headroom_arrival(&h, 200000 + (uint64_t)i);
	ig_headroom_update(&h, 200010, 88, 25);
	ck_assert(h.rate > 2.9 && h.rate < 3.1);
}
END_TEST

IG_CHECK_MAIN("headroom", the_rule_is_littles_law_plus_a_margin_within_the_cap, headroom_follows_the_interactive_traffic,
	      a_young_window_reads_the_rate_since_the_first_arrival)
