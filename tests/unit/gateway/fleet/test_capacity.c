/* Unit tests for the slot counts learned from load reports
 * (src/gateway/fleet/capacity.c). */
#include "config.h"
#include <check.h>

#include "fleet/capacity.h"
#include "../../check_main.h"

START_TEST(slots_learned_from_load_reports)
{
	struct ig_slots s = {0};
	/* Nothing reported, or no queue and no limit yet: nothing learned. */
	ck_assert_int_eq(ig_capacity_learn(&s, -1, -1, 5), 0);
	ck_assert_int_eq(ig_capacity_learn(&s, 12, 0, 12), 0);
	/* It queues, with others' requests too: our share of what it runs
	 * (rounded up); alone there, all it runs. */
	struct ig_slots shared = {0};
	ck_assert_int_eq(ig_capacity_learn(&shared, 16, 16, 16), 8);
	ck_assert_int_eq(ig_capacity_learn(&shared, 16, 14, 10), 6);
	ck_assert_int_eq(ig_capacity_learn(&s, 16, 40, 56), 16);
	ck_assert_int_eq(ig_capacity_learn(&s, 16, 40, 60), 16); /* counts drift: at most all */
	/* A queue seen in passing undercounts; no queue at the limit climbs
	 * back by an eighth, to the peak and no further at once. */
	ck_assert_int_eq(ig_capacity_learn(&s, 9, 1, 10), 9);   /* alone: 9 x 10/10 */
	ck_assert_int_eq(ig_capacity_learn(&s, 9, 0, 9), 10);
	ck_assert_int_eq(ig_capacity_learn(&s, 10, 0, 10), 11);
	for (int i = 0; i < 6; i++)
		ig_capacity_learn(&s, s.cur, 0, s.cur);
	ck_assert_int_eq(s.cur, 16);
	/* Below the limit without a queue: nothing changes. */
	ck_assert_int_eq(ig_capacity_learn(&s, 10, 0, 10), 16);
	/* Past the peak only after IG_SLOTS_PROBE_AFTER calm reports at it. */
	for (int i = 1; i < IG_SLOTS_PROBE_AFTER; i++)
		ck_assert_int_eq(ig_capacity_learn(&s, 16, 0, 16), 16);
	ck_assert_int_eq(ig_capacity_learn(&s, 16, 0, 16), 18);
	/* ...and back when that made it queue; the peak stays. */
	ck_assert_int_eq(ig_capacity_learn(&s, 16, 2, 18), 16);
	ck_assert_int_eq(s.peak, 16);
	ck_assert_int_eq(ig_capacity_learn(&s, 0, 3, 3), 1);    /* never below one */

}
END_TEST

START_TEST(stale_load_reports_teach_nothing)
{
	struct ig_slots s;
	bool stale;
	ig_capacity_reset(&s, false);
	/* A burst: 16 of ours there, it runs 4 and queues 12. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 12, -1, 16, 16, 0, &stale), 4);
	ck_assert(!stale);
	/* The burst ends between two reports; the report shows the queue as it
	 * was (SGLang's gauges) while we have 0 left: weighed against the 16 we
	 * had since the last report, not the 0 now (the old rule gave 1). */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 10, -1, 0, 16, 16, &stale), 4);
	ck_assert(!stale);
	/* The same counts again while our traffic moved: stale, set aside. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 10, -1, 3, 3, 18, &stale), 4);
	ck_assert(stale);
	ck_assert_uint_eq(s.stale, 1);
	/* ...and while they repeat, even when our traffic holds still (weighed
	 * against our 3 they would give 1). */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 10, -1, 3, 3, 18, &stale), 4);
	ck_assert(stale);
	/* A queue while we had nothing there: says nothing of our share. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 9, -1, 0, 0, 21, &stale), 4);
	ck_assert(!stale);
	/* The same counts while our traffic did not move: a steady server,
	 * not stale (and still nothing of ours there). */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 9, -1, 0, 0, 21, &stale), 4);
	ck_assert(!stale);
	/* Fresh counts with ours in them: learned as before. Other clients
	 * hold half of it: our share is 2. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 4, -1, 4, 4, 21, &stale), 2);
	ck_assert(!stale);
	/* An idle server repeating 0/0 is never stale. */
	ig_capacity_report(&s, 0, 0, -1, 0, 0, 30, &stale);
	ig_capacity_report(&s, 0, 0, -1, 1, 1, 31, &stale);
	ck_assert(!stale);
}
END_TEST

/* A capacity the server states (SGLang's max_running_requests) is the limit
 * from its first report, before any request; a queue lowers it only when it
 * shows twice; nothing climbs past it. */
START_TEST(stated_capacity_is_the_limit_until_a_queue_lasts)
{
	struct ig_slots s;
	bool stale;
	ig_capacity_reset(&s, true);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_RAMP);
	/* Idle, 0 of ours there: 4 at once, as it says. */
	ck_assert_int_eq(ig_capacity_report(&s, 0, 0, 4, 0, 0, 0, &stale), 4);
	ck_assert_int_eq(ig_capacity_limit(&s), 4);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_REPORTED);
	ck_assert_str_eq(ig_capacity_from_name(ig_capacity_from(&s)), "reported");
	/* A request caught waiting for the next step: one report, nothing. */
	ck_assert_int_eq(ig_capacity_report(&s, 3, 1, 4, 4, 4, 10, &stale), 4);
	ck_assert_int_eq(ig_capacity_report(&s, 4, 0, 4, 4, 4, 20, &stale), 4);
	/* Never past what it states, however calm. */
	for (int i = 0; i < 3 * IG_SLOTS_PROBE_AFTER; i++)
		ig_capacity_report(&s, 4 - i % 2, 0, 4, 4, 4, 30 + (unsigned long)i, &stale);
	ck_assert_int_eq(s.cur, 4);

	/* A server whose KV budget holds fewer than it states: 64 stated, 25
	 * run, the rest wait, in two reports: the learned 25 wins. */
	ig_capacity_reset(&s, true);
	ck_assert_int_eq(ig_capacity_report(&s, 0, 0, 64, 0, 0, 0, &stale), 64);
	ck_assert_int_eq(ig_capacity_report(&s, 25, 39, 64, 64, 64, 5, &stale), 64);
	ck_assert_int_eq(ig_capacity_report(&s, 25, 38, 64, 63, 64, 9, &stale), 25);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_LEARNED);
	ck_assert_int_eq(s.reported, 64);
	/* It climbs from there as a learned count does (by an eighth after
	 * IG_SLOTS_PROBE_AFTER calm reports), and never past 64. */
	for (int i = 0; i < 200; i++) /* (counts that move: not stale) */
		ig_capacity_report(&s, s.cur - i % 2, 0, 64, s.cur, s.cur, 100 + (unsigned long)i, &stale);
	ck_assert_int_eq(s.cur, 64);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_REPORTED);
	/* A server restarted with fewer: the limit follows at once. */
	ck_assert_int_eq(ig_capacity_report(&s, 0, 0, 16, 0, 0, 400, &stale), 16);
}
END_TEST

/* Capacity not known: a ramp, one more per request finished at its cap,
 * twice as many per report without a queue at it; a queue ends it. */
START_TEST(unknown_capacity_ramps_until_a_queue_shows_it)
{
	struct ig_slots s;
	bool stale;
	ig_capacity_reset(&s, true);
	ck_assert_int_eq(ig_capacity_limit(&s), IG_SLOTS_RAMP_START);
	/* Below the cap, a finished request changes nothing; at it, one more. */
	ck_assert(!ig_capacity_done(&s, 3));
	ck_assert(ig_capacity_done(&s, 8));
	ck_assert_int_eq(ig_capacity_limit(&s), 9);
	/* A report without a queue (no capacity stated: vLLM) while we
	 * filled the cap: doubled. One while we did not: unchanged. */
	ck_assert_int_eq(ig_capacity_report(&s, 9, 0, -1, 9, 9, 1, &stale), 0);
	ck_assert_int_eq(ig_capacity_limit(&s), 18);
	ig_capacity_report(&s, 5, 0, -1, 5, 5, 2, &stale);
	ck_assert_int_eq(ig_capacity_limit(&s), 18);
	ig_capacity_report(&s, 18, 0, -1, 18, 18, 3, &stale);
	ck_assert_int_eq(ig_capacity_limit(&s), 36);
	/* It queues at 36: it runs 30, that is its capacity; the ramp is over. */
	ck_assert_int_eq(ig_capacity_report(&s, 30, 6, -1, 36, 36, 4, &stale), 30);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_LEARNED);
	ck_assert(!ig_capacity_done(&s, 30));
	ck_assert_int_eq(ig_capacity_limit(&s), 30);

	/* No load report on any path: no cap (as without load reports at
	 * all); reports again later: a ramp from what is in flight there. */
	ig_capacity_reset(&s, true);
	ig_capacity_no_reports(&s);
	ck_assert_int_eq(ig_capacity_limit(&s), 0);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_NONE);
	ck_assert(!ig_capacity_done(&s, 100));
	ig_capacity_report(&s, 40, 0, -1, 40, 40, 7, &stale);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_RAMP);
	ck_assert_int_eq(ig_capacity_limit(&s), 80); /* from 40, and calm at it */
	/* load_source gateway: no reports expected, no cap. */
	ig_capacity_reset(&s, false);
	ck_assert_int_eq(ig_capacity_limit(&s), 0);
}
END_TEST

START_TEST(shared_by_gateways_a_stated_capacity_is_a_total)
{
	/* Several gateways subtract each other's requests from what it states
	 * (cluster.c): a queue while it runs all it states is their requests
	 * sent a moment apart, and lowers nothing; one while it runs fewer
	 * (a KV budget) makes that many the total, not this gateway's share. */
	struct ig_slots s = {0};
	bool stale = false;
	s.shared = true;
	ig_capacity_report(&s, 0, 0, 32, 0, 0, 0, &stale);
	ck_assert_int_eq(ig_capacity_limit(&s), 32);
	ig_capacity_report(&s, 32, 2, 32, 16, 16, 1, &stale);
	ig_capacity_report(&s, 32, 1, 32, 16, 16, 2, &stale);
	ig_capacity_report(&s, 32, 3, 32, 17, 17, 3, &stale);
	ck_assert_int_eq(ig_capacity_limit(&s), 32);
	ck_assert_int_eq(ig_capacity_from(&s), IG_SLOTS_REPORTED);
	ig_capacity_report(&s, 20, 5, 32, 10, 10, 4, &stale);
	ig_capacity_report(&s, 20, 6, 32, 10, 10, 5, &stale);
	ck_assert_int_eq(ig_capacity_limit(&s), 20);   /* all of them, not 20 x 10/25 */
	/* alone, the same reports teach this gateway's share */
	struct ig_slots a = {0};
	ig_capacity_report(&a, 0, 0, 32, 0, 0, 0, &stale);
	ig_capacity_report(&a, 32, 2, 32, 16, 16, 1, &stale);
	ig_capacity_report(&a, 32, 1, 32, 16, 16, 2, &stale);
	ck_assert_int_lt(ig_capacity_limit(&a), 32);
}
END_TEST

IG_CHECK_MAIN("capacity", slots_learned_from_load_reports, stale_load_reports_teach_nothing,
	      stated_capacity_is_the_limit_until_a_queue_lasts, unknown_capacity_ramps_until_a_queue_shows_it,
	      shared_by_gateways_a_stated_capacity_is_a_total)
