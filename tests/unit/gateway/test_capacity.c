/* Unit tests for the slot counts learned from load reports
 * (src/gateway/capacity.c). */
#include "config.h"
#include <check.h>

#include "capacity.h"
#include "../check_main.h"

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
	ig_capacity_reset(&s);
	/* A burst: 16 of ours there, it runs 4 and queues 12. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 12, 16, 16, 0, &stale), 4);
	ck_assert(!stale);
	/* The burst ends between two reports; the report shows the queue as it
	 * was (SGLang's gauges) while we have 0 left: weighed against the 16 we
	 * had since the last report, not the 0 now (the old rule gave 1). */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 10, 0, 16, 16, &stale), 4);
	ck_assert(!stale);
	/* The same counts again while our traffic moved: stale, set aside. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 10, 3, 3, 18, &stale), 4);
	ck_assert(stale);
	ck_assert_uint_eq(s.stale, 1);
	/* ...and while they repeat, even when our traffic holds still (weighed
	 * against our 3 they would give 1). */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 10, 3, 3, 18, &stale), 4);
	ck_assert(stale);
	/* A queue while we had nothing there: says nothing of our share. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 9, 0, 0, 21, &stale), 4);
	ck_assert(!stale);
	/* The same counts while our traffic did not move: a steady server,
	 * not stale (and still nothing of ours there). */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 9, 0, 0, 21, &stale), 4);
	ck_assert(!stale);
	/* Fresh counts with ours in them: learned as before. Other clients
	 * hold half of it: our share is 2. */
	ck_assert_int_eq(ig_capacity_report(&s, 4, 4, 4, 4, 21, &stale), 2);
	ck_assert(!stale);
	/* An idle server repeating 0/0 is never stale. */
	ig_capacity_report(&s, 0, 0, 0, 0, 30, &stale);
	ig_capacity_report(&s, 0, 0, 1, 1, 31, &stale);
	ck_assert(!stale);
}
END_TEST


IG_CHECK_MAIN("capacity", slots_learned_from_load_reports, stale_load_reports_teach_nothing)
