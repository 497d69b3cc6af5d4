/* Unit tests for the router (src/gateway/router.c): policies, limits, slot
 * counts learned from load reports. */
#include "config.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "affinity.h"
#include "router.h"
#include "../check_main.h"

static struct ig_pool make_pool(int n)
{
	struct ig_pool pool = {0};
	pool.v = calloc((size_t)n, sizeof(*pool.v));
	for (int i = 0; i < n; i++) {
		struct ig_backend *b = calloc(1, sizeof(*b));
		b->id = i;
		b->weight = 1;
		atomic_init(&b->state, IG_BACKEND_UP);
		pool.v[pool.n++] = b;
	}
	return pool;
}

static void free_pool(struct ig_pool *pool)
{
	for (size_t i = 0; i < pool->n; i++)
		free(pool->v[i]);
	free(pool->v);
}

START_TEST(least_loaded_rotates_ties)
{
	struct ig_pool pool = make_pool(4);
	int hits[4] = {0};
	for (int i = 0; i < 400; i++) {
		struct ig_backend *b;
		ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b), IG_PICK_OK);
		hits[b->id]++;
		ig_router_release(b); /* always idle: every pick is a 4-way tie */
	}
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(hits[i], 100);
	free_pool(&pool);
}
END_TEST

START_TEST(least_loaded_follows_load_and_weight)
{
	struct ig_pool pool = make_pool(3);
	struct ig_backend *b;
	pool.v[0]->weight = 2;
	atomic_store(&pool.v[0]->inflight, 3); /* 1.5 per unit */
	atomic_store(&pool.v[1]->inflight, 1);
	atomic_store(&pool.v[2]->inflight, 2);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ck_assert_int_eq(atomic_load(&b->inflight), 2);
	/* Excluding what was tried, and skipping down backends. */
	struct ig_backend *tried[1] = {pool.v[1]};
	atomic_store(&pool.v[2]->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){.tried = tried, .ntried = 1}, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 0);
	free_pool(&pool);
}
END_TEST

START_TEST(limits_give_busy_then_none)
{
	struct ig_pool pool = make_pool(2);
	struct ig_backend *b;
	pool.v[0]->max_inflight = 1;
	pool.v[1]->max_inflight = 1;
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_ROUND_ROBIN, &(struct ig_route_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_ROUND_ROBIN, &(struct ig_route_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_POWER_OF_TWO, &(struct ig_route_req){0}, &b), IG_PICK_BUSY);
	atomic_store(&pool.v[0]->state, IG_BACKEND_DOWN);
	atomic_store(&pool.v[1]->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_RANDOM, &(struct ig_route_req){0}, &b), IG_PICK_NONE);
	free_pool(&pool);
}
END_TEST

/* A Responses follow-up pinned to the backend that holds its response goes
 * there or nowhere: busy there is busy, whatever the others have free. */
START_TEST(a_pinned_request_goes_to_its_backend_only)
{
	struct ig_pool pool = make_pool(3);
	struct ig_backend *b = NULL;
	struct ig_route_req rq = {.pinned = pool.v[2]->id + 1};
	pool.v[2]->max_inflight = 2;
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &rq, &b), IG_PICK_OK);
		ck_assert_ptr_eq(b, pool.v[2]);
	}
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &rq, &b), IG_PICK_BUSY);
	atomic_store(&pool.v[2]->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &rq, &b), IG_PICK_NONE);
	/* {0}: no pin */
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b),
			 IG_PICK_OK);
	ck_assert_ptr_ne(b, pool.v[2]);
	free_pool(&pool);
}
END_TEST

/* A low request leaves a backend's reserve_slots free; others may take them. */
START_TEST(reserved_slots_are_not_for_low)
{
	struct ig_pool pool = make_pool(1);
	struct ig_backend *b;
	pool.v[0]->max_inflight = 4;
	pool.v[0]->reserve_slots = 1;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){.low = true}, &b),
				 IG_PICK_OK);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){.low = true}, &b),
			 IG_PICK_BUSY);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b),
			 IG_PICK_OK);
	ck_assert_int_eq(atomic_load(&pool.v[0]->inflight), 4);
	/* A reserve as large as the limit keeps low requests off it entirely. */
	atomic_store(&pool.v[0]->inflight, 0);
	pool.v[0]->reserve_slots = 4;
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){.low = true}, &b),
			 IG_PICK_BUSY);
	free_pool(&pool);
}
END_TEST

START_TEST(slots_learned_from_load_reports)
{
	struct ig_slots s = {0};
	/* Nothing reported, or no queue and no limit yet: nothing learned. */
	ck_assert_int_eq(ig_router_slots_learn(&s, -1, -1, 5), 0);
	ck_assert_int_eq(ig_router_slots_learn(&s, 12, 0, 12), 0);
	/* It queues, with others' requests too: our share of what it runs
	 * (rounded up); alone there, all it runs. */
	struct ig_slots shared = {0};
	ck_assert_int_eq(ig_router_slots_learn(&shared, 16, 16, 16), 8);
	ck_assert_int_eq(ig_router_slots_learn(&shared, 16, 14, 10), 6);
	ck_assert_int_eq(ig_router_slots_learn(&s, 16, 40, 56), 16);
	ck_assert_int_eq(ig_router_slots_learn(&s, 16, 40, 60), 16); /* counts drift: at most all */
	/* A queue seen in passing undercounts; no queue at the limit climbs
	 * back by an eighth, to the peak and no further at once. */
	ck_assert_int_eq(ig_router_slots_learn(&s, 9, 1, 10), 9);   /* alone: 9 x 10/10 */
	ck_assert_int_eq(ig_router_slots_learn(&s, 9, 0, 9), 10);
	ck_assert_int_eq(ig_router_slots_learn(&s, 10, 0, 10), 11);
	for (int i = 0; i < 6; i++)
		ig_router_slots_learn(&s, s.cur, 0, s.cur);
	ck_assert_int_eq(s.cur, 16);
	/* Below the limit without a queue: nothing changes. */
	ck_assert_int_eq(ig_router_slots_learn(&s, 10, 0, 10), 16);
	/* Past the peak only after IG_SLOTS_PROBE_AFTER calm reports at it. */
	for (int i = 1; i < IG_SLOTS_PROBE_AFTER; i++)
		ck_assert_int_eq(ig_router_slots_learn(&s, 16, 0, 16), 16);
	ck_assert_int_eq(ig_router_slots_learn(&s, 16, 0, 16), 18);
	/* ...and back when that made it queue; the peak stays. */
	ck_assert_int_eq(ig_router_slots_learn(&s, 16, 2, 18), 16);
	ck_assert_int_eq(s.peak, 16);
	ck_assert_int_eq(ig_router_slots_learn(&s, 0, 3, 3), 1);    /* never below one */

	/* The learned count limits like max_inflight; max_inflight wins. */
	struct ig_pool pool = make_pool(1);
	struct ig_backend *b;
	atomic_store(&pool.v[0]->slots, 2);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b), IG_PICK_BUSY);
	pool.v[0]->max_inflight = 3;
	ck_assert_int_eq(ig_backend_limit(pool.v[0]), 3);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_LOADED, &(struct ig_route_req){0}, &b), IG_PICK_OK);
	free_pool(&pool);
}
END_TEST

START_TEST(stale_load_reports_teach_nothing)
{
	struct ig_slots s;
	bool stale;
	ig_backend_slots_reset(&s);
	/* A burst: 16 of ours there, it runs 4 and queues 12. */
	ck_assert_int_eq(ig_router_slots_report(&s, 4, 12, 16, 16, 0, &stale), 4);
	ck_assert(!stale);
	/* The burst ends between two reports; the report shows the queue as it
	 * was (SGLang's gauges) while we have 0 left: weighed against the 16 we
	 * had since the last report, not the 0 now (the old rule gave 1). */
	ck_assert_int_eq(ig_router_slots_report(&s, 4, 10, 0, 16, 16, &stale), 4);
	ck_assert(!stale);
	/* The same counts again while our traffic moved: stale, set aside. */
	ck_assert_int_eq(ig_router_slots_report(&s, 4, 10, 3, 3, 18, &stale), 4);
	ck_assert(stale);
	ck_assert_uint_eq(s.stale, 1);
	/* ...and while they repeat, even when our traffic holds still (weighed
	 * against our 3 they would give 1). */
	ck_assert_int_eq(ig_router_slots_report(&s, 4, 10, 3, 3, 18, &stale), 4);
	ck_assert(stale);
	/* A queue while we had nothing there: says nothing of our share. */
	ck_assert_int_eq(ig_router_slots_report(&s, 4, 9, 0, 0, 21, &stale), 4);
	ck_assert(!stale);
	/* The same counts while our traffic did not move: a steady server,
	 * not stale (and still nothing of ours there). */
	ck_assert_int_eq(ig_router_slots_report(&s, 4, 9, 0, 0, 21, &stale), 4);
	ck_assert(!stale);
	/* Fresh counts with ours in them: learned as before. Other clients
	 * hold half of it: our share is 2. */
	ck_assert_int_eq(ig_router_slots_report(&s, 4, 4, 4, 4, 21, &stale), 2);
	ck_assert(!stale);
	/* An idle server repeating 0/0 is never stale. */
	ig_router_slots_report(&s, 0, 0, 0, 0, 30, &stale);
	ig_router_slots_report(&s, 0, 0, 1, 1, 31, &stale);
	ck_assert(!stale);
}
END_TEST

/* least-tokens: the soonest expected finish, from outstanding work over
 * measured speed; an unmeasured backend counts at the mean speed. */
START_TEST(least_tokens_weighs_work_by_speed)
{
	struct ig_pool pool = make_pool(3);
	struct ig_backend *b;
	struct ig_route_req rq = {.tokens = 100};
	/* equal speed: the least outstanding work wins, not the fewest requests */
	for (int i = 0; i < 3; i++)
		atomic_store(&pool.v[i]->speed_milli, 50000);
	atomic_store(&pool.v[0]->inflight, 1);
	atomic_store(&pool.v[0]->out_tokens, 5000);
	atomic_store(&pool.v[1]->inflight, 3);
	atomic_store(&pool.v[1]->out_tokens, 600);
	atomic_store(&pool.v[2]->inflight, 2);
	atomic_store(&pool.v[2]->out_tokens, 900);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_TOKENS, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_router_release(b);
	/* backend 1 slowed ten times: its 600 tokens now take longer than 2's 900 */
	atomic_store(&pool.v[1]->speed_milli, 5000);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_TOKENS, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	ig_router_release(b);
	/* not measured yet: the mean of the others (27,500), so 2 still wins */
	atomic_store(&pool.v[2]->speed_milli, 0);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_LEAST_TOKENS, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	free_pool(&pool);
}
END_TEST

/* cache-aware: the longest recorded prefix wins when it covers the
 * threshold and the load guard lets it; a tie on the match goes to the less
 * loaded; a weak match or a guarded one to the least loaded. */
START_TEST(cache_aware_follows_the_longest_prefix_within_the_guard)
{
	struct ig_pool pool = make_pool(3);
	struct ig_affinity *a = ig_affinity_new(1024);
	struct ig_backend *b;
	uint64_t chain[10] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
	ig_affinity_insert(a, 1, chain, 4); /* backend 1 was sent 4 blocks, backend 2 the first 2 */
	ig_affinity_insert(a, 2, chain, 2);
	struct ig_route_req rq = {.affinity = a, .chain = chain, .nchain = 4, .threshold_percent = 50,
				  .balance_abs = 4, .balance_rel = 1.5};
	atomic_store(&pool.v[1]->inflight, 1); /* not the least loaded: the prefix decides */
	atomic_store(&pool.v[2]->inflight, 1); /* backend 0 is the one least loaded */
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_CACHE_AWARE, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_router_release(b);
	/* 4 of 10 blocks: under the 50% threshold, the least loaded */
	rq.nchain = 10;
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_CACHE_AWARE, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 0);
	ig_router_release(b);
	/* the guard: 10 in flight against 0 is more than 4 beyond and 1.5 times; 4 is not */
	rq.nchain = 4;
	atomic_store(&pool.v[1]->inflight, 10);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_CACHE_AWARE, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 0);
	ig_router_release(b);
	atomic_store(&pool.v[1]->inflight, 4);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_CACHE_AWARE, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_router_release(b);
	/* a prefix both hold (2 blocks): the less loaded of the two, not backend 0 */
	rq.nchain = 2;
	atomic_store(&pool.v[2]->inflight, 2);
	atomic_store(&pool.v[1]->inflight, 3);
	ck_assert_int_eq(ig_router_pick(pool.v, pool.n, &pool.rotor, IG_POLICY_CACHE_AWARE, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	ig_router_release(b);
	ig_affinity_free(a);
	free_pool(&pool);
}
END_TEST

IG_CHECK_MAIN("router", cache_aware_follows_the_longest_prefix_within_the_guard, least_tokens_weighs_work_by_speed, least_loaded_rotates_ties, least_loaded_follows_load_and_weight,
	      limits_give_busy_then_none, a_pinned_request_goes_to_its_backend_only, reserved_slots_are_not_for_low,
	      slots_learned_from_load_reports,
	      stale_load_reports_teach_nothing)
