/* Unit tests for the routing policies (src/gateway/sched/policy.c and lb_*.c):
 * eligibility, limits, the reserve for low, pins, and each policy's choice,
 * session's rendezvous hashing with bounded load among them. */
#include "config.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/blockhash.h"
#include "sched/kvindex.h"
#include "sched/policy.h"
#include "../../check_main.h"

static struct ig_fleet make_pool(int n)
{
	struct ig_fleet pool = {0};
	pool.v = calloc((size_t)n, sizeof(*pool.v));
	for (int i = 0; i < n; i++) {
		struct ig_backend *b = calloc(1, sizeof(*b));
		b->id = i;
		b->weight = 1;
		char url[64];
		snprintf(url, sizeof(url), "http://10.0.0.%d:8000", i + 1);
		b->url = strdup(url);
		b->key = b->url; /* a server without ranks, as ig_backend_fleet_add makes it */
		b->dp_rank = -1;
		b->server = b;
		b->nranks = 1;
		atomic_init(&b->state, IG_BACKEND_UP);
		pool.v[pool.n++] = b;
	}
	return pool;
}

/* The policy of that name (policy_list.h). */
static const struct ig_policy *P(const char *name)
{
	for (size_t i = 0; i < ig_policy_count(); i++)
		if (strcmp(ig_policy_get((int)i)->name, name) == 0)
			return ig_policy_get((int)i);
	ck_abort_msg("no policy %s", name);
	return NULL;
}

static unsigned rotor;
static void *state; /* the policy's, when it has one */

static enum ig_pick pick(const struct ig_policy *p, struct ig_fleet *pool, struct ig_pick_req *rq,
			 struct ig_backend **b)
{
	return ig_policy_pick(p, state, pool->v, pool->n, &rotor, rq, b);
}

static void free_pool(struct ig_fleet *pool)
{
	for (size_t i = 0; i < pool->n; i++) {
		free(pool->v[i]->url);
		free(pool->v[i]);
	}
	free(pool->v);
}

START_TEST(least_loaded_rotates_ties)
{
	struct ig_fleet pool = make_pool(4);
	int hits[4] = {0};
	for (int i = 0; i < 400; i++) {
		struct ig_backend *b;
		ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
		hits[b->id]++;
		ig_policy_release(b); /* always idle: every pick is a 4-way tie */
	}
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(hits[i], 100);
	free_pool(&pool);
}
END_TEST

START_TEST(least_loaded_follows_load_and_weight)
{
	struct ig_fleet pool = make_pool(3);
	struct ig_backend *b;
	pool.v[0]->weight = 2;
	atomic_store(&pool.v[0]->inflight, 3); /* 1.5 per unit */
	atomic_store(&pool.v[1]->inflight, 1);
	atomic_store(&pool.v[2]->inflight, 2);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ck_assert_int_eq(atomic_load(&b->inflight), 2);
	/* Excluding what was tried, and skipping down backends. */
	struct ig_pick_req tried = {.tried = {pool.v[1]}, .ntried = 1};
	atomic_store(&pool.v[2]->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &tried, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 0);
	free_pool(&pool);
}
END_TEST

START_TEST(limits_give_busy_then_none)
{
	struct ig_fleet pool = make_pool(2);
	struct ig_backend *b;
	pool.v[0]->max_inflight = 1;
	pool.v[1]->max_inflight = 1;
	ck_assert_int_eq(pick(P("round-robin"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(pick(P("round-robin"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(pick(P("power-of-two"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_BUSY);
	atomic_store(&pool.v[0]->state, IG_BACKEND_DOWN);
	atomic_store(&pool.v[1]->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(pick(P("random"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_NONE);
	free_pool(&pool);
}
END_TEST

/* A Responses follow-up pinned to the backend that holds its response goes
 * there or nowhere: busy there is busy, whatever the others have free. */
START_TEST(a_pinned_request_goes_to_its_backend_only)
{
	struct ig_fleet pool = make_pool(3);
	struct ig_backend *b = NULL;
	struct ig_pick_req rq = {.pinned = pool.v[2]->id + 1};
	pool.v[2]->max_inflight = 2;
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pick(P("least-loaded"), &pool, &rq, &b), IG_PICK_OK);
		ck_assert_ptr_eq(b, pool.v[2]);
	}
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &rq, &b), IG_PICK_BUSY);
	atomic_store(&pool.v[2]->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &rq, &b), IG_PICK_NONE);
	/* {0}: no pin */
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b),
			 IG_PICK_OK);
	ck_assert_ptr_ne(b, pool.v[2]);
	free_pool(&pool);
}
END_TEST

/* A low request leaves a backend's reserve_slots free; others may take them. */
START_TEST(reserved_slots_are_not_for_low)
{
	struct ig_fleet pool = make_pool(1);
	struct ig_backend *b;
	pool.v[0]->max_inflight = 4;
	pool.v[0]->reserve_slots = 1;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){.low = true}, &b),
				 IG_PICK_OK);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){.low = true}, &b),
			 IG_PICK_BUSY);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b),
			 IG_PICK_OK);
	ck_assert_int_eq(atomic_load(&pool.v[0]->inflight), 4);
	/* A reserve as large as the limit keeps low requests off it entirely. */
	atomic_store(&pool.v[0]->inflight, 0);
	pool.v[0]->reserve_slots = 4;
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){.low = true}, &b),
			 IG_PICK_BUSY);
	free_pool(&pool);
}
END_TEST

/* least-tokens: the soonest expected finish, from outstanding work over
 * measured speed; an unmeasured backend counts at the mean speed. */
START_TEST(least_tokens_weighs_work_by_speed)
{
	struct ig_fleet pool = make_pool(3);
	struct ig_backend *b;
	struct ig_pick_req rq = {.tokens = 100};
	/* equal speed: the least outstanding work wins, not the fewest requests */
	for (int i = 0; i < 3; i++)
		atomic_store(&pool.v[i]->speed_milli, 50000);
	atomic_store(&pool.v[0]->inflight, 1);
	atomic_store(&pool.v[0]->out_tokens, 5000);
	atomic_store(&pool.v[1]->inflight, 3);
	atomic_store(&pool.v[1]->out_tokens, 600);
	atomic_store(&pool.v[2]->inflight, 2);
	atomic_store(&pool.v[2]->out_tokens, 900);
	ck_assert_int_eq(pick(P("least-tokens"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_policy_release(b);
	/* backend 1 slowed ten times: its 600 tokens now take longer than 2's 900 */
	atomic_store(&pool.v[1]->speed_milli, 5000);
	ck_assert_int_eq(pick(P("least-tokens"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	ig_policy_release(b);
	/* not measured yet: the mean of the others (27,500), so 2 still wins */
	atomic_store(&pool.v[2]->speed_milli, 0);
	ck_assert_int_eq(pick(P("least-tokens"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	free_pool(&pool);
}
END_TEST

/* cache-aware, mode threshold: the longest recorded prefix wins when it
 * covers the threshold and the load guard lets it; a tie on the match goes
 * to the less loaded; a weak match or a guarded one to the least loaded. */
START_TEST(cache_aware_follows_the_longest_prefix_within_the_guard)
{
	struct ig_fleet pool = make_pool(3);
	const struct ig_policy *ca = P("cache-aware");
	struct ig_conf cfg = {.cache_max_blocks = 1024, .cache_threshold_percent = 50, .cache_balance_abs = 4,
			      .cache_balance_rel = 1.5, .cache_mode = IG_CACHE_THRESHOLD};
	struct ig_backend *b;
	uint64_t chain[10] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
	ck_assert_int_eq(ca->init(&state, &cfg), 0);
	/* backend 1 was sent 4 blocks, backend 2 the first 2 */
	ca->started(state, pool.v[1], &(struct ig_pick_req){.chain = chain, .nchain = 4});
	ca->started(state, pool.v[2], &(struct ig_pick_req){.chain = chain, .nchain = 2});
	struct ig_pick_req rq = {.chain = chain, .nchain = 4};
	atomic_store(&pool.v[1]->inflight, 1); /* not the least loaded: the prefix decides */
	atomic_store(&pool.v[2]->inflight, 1); /* backend 0 is the one least loaded */
	ck_assert_int_eq(pick(P("cache-aware"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_policy_release(b);
	/* 4 of 10 blocks: under the 50% threshold, the least loaded */
	rq.nchain = 10;
	ck_assert_int_eq(pick(P("cache-aware"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 0);
	ig_policy_release(b);
	/* the guard: 10 in flight against 0 is more than 4 beyond and 1.5 times; 4 is not */
	rq.nchain = 4;
	atomic_store(&pool.v[1]->inflight, 10);
	ck_assert_int_eq(pick(P("cache-aware"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 0);
	ig_policy_release(b);
	atomic_store(&pool.v[1]->inflight, 4);
	ck_assert_int_eq(pick(P("cache-aware"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_policy_release(b);
	/* a prefix both hold (2 blocks): the less loaded of the two, not backend 0 */
	rq.nchain = 2;
	atomic_store(&pool.v[2]->inflight, 2);
	atomic_store(&pool.v[1]->inflight, 3);
	ck_assert_int_eq(pick(P("cache-aware"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	ig_policy_release(b);
	/* A backend that goes down loses its record: the least loaded again. */
	ca->gone(state, pool.v[2]);
	json_t *o = json_object();
	ca->report(state, pool.v[2], o);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "cache_blocks")), 0);
	json_decref(o);
	ca->free(state);
	state = NULL;
	free_pool(&pool);
}
END_TEST

/* cache-aware, mode cost (the default): the backend where the least work
 * waits, in tokens: the prompt less the prefix it was sent, the prefills
 * routed there and not started (until their first event), the KV its
 * requests hold, the first weighted by prefill_weight. */
START_TEST(cache_aware_cost_weighs_the_prefix_against_the_work_waiting)
{
	struct ig_fleet pool = make_pool(3);
	const struct ig_policy *ca = P("cache-aware");
	struct ig_conf cfg = {.cache_max_blocks = 1024, .cache_mode = IG_CACHE_COST, .cache_prefill_weight = 1};
	struct ig_backend *b;
	uint64_t conv[10] = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, other[20];
	for (int i = 0; i < 20; i++)
		other[i] = 100 + (uint64_t)i;
	ck_assert_int_eq(ca->init(&state, &cfg), 0);
	/* backend 1 was sent the conversation's first 8 blocks; it ended */
	struct ig_pick_req old = {.chain = conv, .nchain = 8};
	ca->started(state, pool.v[1], &old);
	ck_assert_int_eq(atomic_load(&pool.v[1]->prefill_tokens), 8 * 16);
	ck_assert_int_eq(atomic_load(&pool.v[1]->kv_tokens), 8 * 16);
	ca->done(state, pool.v[1], &old, &(struct ig_pick_outcome){.ok = true});
	ck_assert_int_eq(atomic_load(&pool.v[1]->prefill_tokens), 0);
	ck_assert_int_eq(atomic_load(&pool.v[1]->kv_tokens), 0);
	/* its next turn: 2 blocks to prefill there against 10 elsewhere */
	struct ig_pick_req rq = {.chain = conv, .nchain = 10};
	ck_assert_int_eq(pick(ca, &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_policy_release(b);
	/* a long prompt routed to backend 1 and not started: 320 tokens of
	 * prefill and 320 of KV wait there; 352 + 320 against 160: backend 0 or 2 */
	struct ig_pick_req big = {.chain = other, .nchain = 20};
	ca->started(state, pool.v[1], &big);
	ck_assert_int_eq(pick(ca, &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_ne(b->id, 1);
	ig_policy_release(b);
	/* its first event: its prefill is done, its KV grows by a token; 32 +
	 * 321 against 160 still sends the turn elsewhere, unless a prompt token
	 * weighs 10 of KV: 641 against 1,600 */
	ca->progress(pool.v[1], &big);
	ck_assert_int_eq(atomic_load(&pool.v[1]->prefill_tokens), 0);
	ck_assert_int_eq(atomic_load(&pool.v[1]->kv_tokens), 321);
	ck_assert_int_eq(pick(ca, &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_ne(b->id, 1);
	ig_policy_release(b);
	cfg.cache_prefill_weight = 10;
	ck_assert_int_eq(ca->reconfigure(state, &cfg), 0);
	ck_assert_int_eq(pick(ca, &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ig_policy_release(b);
	json_t *o = json_object();
	ca->report(state, pool.v[1], o);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "kv_tokens")), 321);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "prefill_tokens")), 0);
	json_decref(o);
	/* it ends: its work leaves with it */
	ca->done(state, pool.v[1], &big, &(struct ig_pick_outcome){.ok = true});
	ck_assert_int_eq(atomic_load(&pool.v[1]->kv_tokens), 0);
	ck_assert_int_eq(big.charged, 0);
	ca->free(state);
	state = NULL;
	free_pool(&pool);
}
END_TEST

/* cache-aware on the engines' events: for a backend whose events flow
 * (kv_exact), the prefix its engine holds by the exact index, not the
 * record of what was sent; a backend whose events stopped goes back to the
 * record. Its best rank counts. */
START_TEST(cache_aware_believes_the_engines_while_their_events_flow)
{
	struct ig_fleet pool = make_pool(3);
	const struct ig_policy *ca = P("cache-aware");
	struct ig_conf cfg = {.cache_max_blocks = 1024, .cache_mode = IG_CACHE_COST, .cache_prefill_weight = 16};
	struct ig_backend *b;
	/* a prompt of 10 blocks of 16 token ids, its chain as admission makes it */
	uint32_t ids[160];
	for (size_t i = 0; i < 160; i++)
		ids[i] = (uint32_t)(7 * i + 3);
	uint64_t chain[10], engine[10];
	ck_assert_uint_eq(ig_block_chain_ids(ids, 160, chain, 10), 10);
	struct ig_kvindex *ix = ig_kvindex_new(6, 1000);
	ig_cache_aware_use_index(ix, 6);
	for (int i = 0; i < 3; i++) { /* two ranks each: sources 2i and 2i+1 */
		atomic_store(&pool.v[i]->kv_src, 2 * i + 1);
		atomic_store(&pool.v[i]->kv_ranks, 2);
		atomic_store(&pool.v[i]->kv_exact, 1);
	}
	ck_assert_int_eq(ca->init(&state, &cfg), 0);
	/* the gateway sent the first 8 blocks to backend 0 */
	struct ig_pick_req old = {.chain = chain, .nchain = 8};
	ca->started(state, pool.v[0], &old);
	ca->done(state, pool.v[0], &old, &(struct ig_pick_outcome){.ok = true});
	/* but backend 2's second rank holds 9 of them (a client that went to
	 * it straight), backend 0's engine nothing (evicted) */
	for (size_t i = 0; i < 10; i++)
		engine[i] = 1000 + i;
	struct ig_kv_event ev = {.kind = IG_KV_STORED, .hashes = engine, .nhashes = 9, .tokens = ids,
				 .ntokens = 9 * 16, .block_size = 16, .lora_id = -1, .gpu = true};
	ig_kvindex_apply(ix, 5, &ev);
	struct ig_pick_req rq = {.chain = chain, .nchain = 10};
	ck_assert_int_eq(pick(ca, &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	ig_policy_release(b);
	/* the events of all three stop: the record again, backend 0 */
	for (int i = 0; i < 3; i++)
		atomic_store(&pool.v[i]->kv_exact, 0);
	ck_assert_int_eq(pick(ca, &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 0);
	ig_policy_release(b);
	/* they flow again: backend 2, one block to prefill there */
	for (int i = 0; i < 3; i++)
		atomic_store(&pool.v[i]->kv_exact, 1);
	ck_assert_int_eq(pick(ca, &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 2);
	ca->started(state, b, &rq);
	ck_assert_int_eq(rq.prefill_charged, 16);
	ca->done(state, b, &rq, &(struct ig_pick_outcome){.ok = true});
	ig_policy_release(b);
	json_t *o = json_object();
	ca->report_gateway(state, o);
	json_t *ex = json_object_get(o, "cache_aware_exact");
	/* both requests started counted: 128 + 160 tokens; the engines held 144 of the second */
	ck_assert_int_eq(json_integer_value(json_object_get(ex, "prompt_tokens")), 128 + 160);
	ck_assert_int_eq(json_integer_value(json_object_get(ex, "best_tokens")), 144);
	ck_assert_int_eq(json_integer_value(json_object_get(ex, "chosen_tokens")), 144);
	json_decref(o);
	ig_cache_aware_use_index(NULL, 0);
	ig_kvindex_free(ix);
	ca->free(state);
	state = NULL;
	free_pool(&pool);
}
END_TEST

/* least-tokens' bookkeeping: a request's work is counted on its backend
 * when it starts, less one per event relayed, the rest when it ends; its
 * speed is measured from its answer. */
/* The learned count limits like max_inflight; max_inflight wins. */
START_TEST(learned_slots_limit_like_max_inflight)
{
	struct ig_fleet pool = make_pool(1);
	struct ig_backend *b;
	atomic_store(&pool.v[0]->slots, 2);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_BUSY);
	pool.v[0]->max_inflight = 3;
	ck_assert_int_eq(ig_backend_limit(pool.v[0]), 3);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
	free_pool(&pool);
}
END_TEST

START_TEST(least_tokens_counts_work_and_measures_speed)
{
	const struct ig_policy *lt = P("least-tokens");
	struct ig_fleet pool = make_pool(1);
	struct ig_backend *b = pool.v[0];
	struct ig_pick_req rq = {.tokens = 50};
	lt->started(NULL, b, &rq);
	ck_assert_int_eq(atomic_load(&b->out_tokens), 50);
	for (int i = 0; i < 20; i++)
		lt->progress(b, &rq);
	ck_assert_int_eq(atomic_load(&b->out_tokens), 30);
	/* 40 tokens in 2 s: 20 tokens/s per request */
	lt->done(NULL, b, &rq, &(struct ig_pick_outcome){.ok = true, .completion_tokens = 40, .duration_us = 2000000});
	ck_assert_int_eq(atomic_load(&b->out_tokens), 0);
	ck_assert_int_eq(atomic_load(&b->speed_milli), 20000);
	/* a failed attempt gives its work back and teaches no speed */
	lt->started(NULL, b, &rq);
	lt->done(NULL, b, &rq, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1, .duration_us = 1});
	ck_assert_int_eq(atomic_load(&b->out_tokens), 0);
	ck_assert_int_eq(atomic_load(&b->speed_milli), 20000);
	json_t *o = json_object();
	lt->report(NULL, b, o);
	ck_assert(json_real_value(json_object_get(o, "speed_tokens_per_s")) == 20.0);
	json_decref(o);
	free_pool(&pool);
}
END_TEST

/* The backend session sends a session to now (the slot taken is given back). */
static struct ig_backend *session_pick(struct ig_fleet *pool, uint64_t session)
{
	struct ig_backend *b = NULL;
	ck_assert_int_eq(pick(P("session"), pool, &(struct ig_pick_req){.session = session}, &b), IG_PICK_OK);
	ig_policy_release(b);
	return b;
}

/* session: each session stays on one backend, the sessions spread over
 * them, and the choice does not depend on the pool's order (rendezvous on
 * the URLs: gateways that list the backends in another order agree). A
 * backend past 1.25x the mean load hands its sessions to the next in hash
 * order, and gets them back when it is under the bound again. No session:
 * the least loaded. */
START_TEST(session_sticks_to_a_backend_within_the_bound)
{
	struct ig_fleet pool = make_pool(7);
	struct ig_backend *home[20];
	size_t used[7] = {0}, distinct = 0;
	for (uint64_t k = 0; k < 20; k++) {
		home[k] = session_pick(&pool, 1000 + k * 7919);
		for (int i = 0; i < 5; i++)
			ck_assert_ptr_eq(session_pick(&pool, 1000 + k * 7919), home[k]);
		distinct += used[home[k]->id]++ == 0;
	}
	ck_assert_uint_ge(distinct, 4);
	/* the pool in reverse order: the same homes */
	for (size_t i = 0; i < pool.n / 2; i++) {
		struct ig_backend *t = pool.v[i];
		pool.v[i] = pool.v[pool.n - 1 - i];
		pool.v[pool.n - 1 - i] = t;
	}
	for (uint64_t k = 0; k < 20; k++)
		ck_assert_ptr_eq(session_pick(&pool, 1000 + k * 7919), home[k]);
	/* session 0's home holds 10 in flight, the others none: 11 with this
	 * one, a cap of ceil(1.25 x 11 / 7) = 2. It moves, always to the same
	 * next backend; when that one is loaded too, to a third. */
	struct ig_backend *h = home[0];
	atomic_store(&h->inflight, 10);
	struct ig_backend *second = session_pick(&pool, 1000);
	ck_assert_ptr_ne(second, h);
	ck_assert_ptr_eq(session_pick(&pool, 1000), second);
	atomic_store(&second->inflight, 10);
	struct ig_backend *third = session_pick(&pool, 1000);
	ck_assert(third != h && third != second);
	/* under the bound again: back home (2 in flight everywhere: 15 with
	 * this one, a cap of 3) */
	for (size_t i = 0; i < pool.n; i++)
		atomic_store(&pool.v[i]->inflight, 2);
	ck_assert_ptr_eq(session_pick(&pool, 1000), h);
	atomic_store(&h->inflight, 3); /* 3 + 1 > ceil(1.25 x 16 / 7) = 3 */
	ck_assert_ptr_ne(session_pick(&pool, 1000), h);
	for (size_t i = 0; i < pool.n; i++)
		atomic_store(&pool.v[i]->inflight, 0);
	/* sessions of other backends are not moved by h's load */
	for (uint64_t k = 1; k < 20; k++)
		if (home[k] != h)
			ck_assert_ptr_eq(session_pick(&pool, 1000 + k * 7919), home[k]);
	/* no session: the least loaded */
	for (size_t i = 0; i < pool.n; i++)
		atomic_store(&pool.v[i]->inflight, pool.v[i]->id == 4 ? 0 : 3);
	ck_assert_int_eq(session_pick(&pool, 0)->id, 4);
	free_pool(&pool);
}
END_TEST

/* With no free slot anywhere, a high or normal request may go up to its
 * overshoot over the slots of a backend that preempts lower priorities,
 * one for each low request of ours running there; a low one may not, nor
 * one on a backend that does not preempt. */
START_TEST(over_the_slots_of_a_backend_that_preempts)
{
	struct ig_fleet pool = make_pool(2);
	struct ig_backend *b;
	for (int i = 0; i < 2; i++) {
		pool.v[i]->max_inflight = 2;
		atomic_store(&pool.v[i]->inflight, 2);
		atomic_store(&pool.v[i]->low_inflight, 2);
	}
	atomic_store(&pool.v[0]->prio_sched, (int)(IG_PRIO_LARGER_FIRST | IG_PRIO_PREEMPTS));
	atomic_store(&pool.v[0]->prio_threshold, 10);
	atomic_store(&pool.v[1]->prio_sched, (int)IG_PRIO_LARGER_FIRST); /* --disable-priority-preemption */
	struct ig_pick_req low = {.low = true, .overshoot = 2}, rq = {.overshoot = 2}, none = {0};
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &low, &b), IG_PICK_BUSY);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &none, &b), IG_PICK_BUSY);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(pick(P("least-loaded"), &pool, &rq, &b), IG_PICK_OK);
		ck_assert_int_eq(b->id, 0);
		ck_assert(rq.over);
	}
	ck_assert_int_eq(atomic_load(&pool.v[0]->inflight), 4);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &rq, &b), IG_PICK_BUSY); /* 2 over: its overshoot */
	ig_policy_release(pool.v[0]);
	atomic_store(&pool.v[0]->low_inflight, 1); /* one over already, on the one low request there */
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &rq, &b), IG_PICK_BUSY);
	/* a free slot anywhere comes first, and is not over */
	atomic_store(&pool.v[1]->inflight, 1);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &rq, &b), IG_PICK_OK);
	ck_assert_int_eq(b->id, 1);
	ck_assert(!rq.over);
	free_pool(&pool);
}
END_TEST

/* Prefill/decode pairs' roles (path/try_pd.c): a request's own pick never
 * lands on a prefill server; a pair's prefill half only on one, and past
 * every limit rather than waiting; a short prompt's on a server that
 * prefills alone (role both, a vLLM decode server), or nothing. */
START_TEST(a_pick_goes_to_the_servers_of_its_role)
{
	struct ig_fleet pool = make_pool(4);
	struct ig_backend *b;
	pool.v[0]->role = IG_ROLE_PREFILL;
	pool.v[1]->role = IG_ROLE_DECODE;
	pool.v[1]->engine = IG_ENGINE_SGLANG;
	pool.v[2]->role = IG_ROLE_DECODE;
	pool.v[2]->engine = IG_ENGINE_VLLM;
	for (int i = 0; i < 40; i++) { /* the others rotate; the prefill server never comes */
		ck_assert_int_eq(pick(P("round-robin"), &pool, &(struct ig_pick_req){0}, &b), IG_PICK_OK);
		ck_assert_ptr_ne(b, pool.v[0]);
		atomic_fetch_sub(&b->inflight, 1);
	}
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){.role = IG_PICK_PREFILL}, &b), IG_PICK_OK);
	ck_assert_ptr_eq(b, pool.v[0]);
	/* at its limit: taken all the same (the pair holds its decode slot) */
	pool.v[0]->max_inflight = 1;
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){.role = IG_PICK_PREFILL}, &b), IG_PICK_OK);
	ck_assert_ptr_eq(b, pool.v[0]);
	ck_assert_int_eq(atomic_load(&pool.v[0]->inflight), 2);
	/* a short prompt: the co-located server or the vLLM decode server, never SGLang's decode */
	for (int i = 0; i < 20; i++) {
		ck_assert_int_eq(pick(P("round-robin"), &pool, &(struct ig_pick_req){.role = IG_PICK_ALONE}, &b), IG_PICK_OK);
		ck_assert(b == pool.v[2] || b == pool.v[3]);
		atomic_fetch_sub(&b->inflight, 1);
	}
	/* no prefill server up: a prefill half has nowhere to go */
	atomic_store(&pool.v[0]->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(pick(P("least-loaded"), &pool, &(struct ig_pick_req){.role = IG_PICK_PREFILL}, &b), IG_PICK_NONE);
	free_pool(&pool);
}
END_TEST

IG_CHECK_MAIN("policy", a_pick_goes_to_the_servers_of_its_role, over_the_slots_of_a_backend_that_preempts, cache_aware_follows_the_longest_prefix_within_the_guard,
	      cache_aware_believes_the_engines_while_their_events_flow,
	      cache_aware_cost_weighs_the_prefix_against_the_work_waiting, least_tokens_weighs_work_by_speed,
	      least_tokens_counts_work_and_measures_speed, learned_slots_limit_like_max_inflight, session_sticks_to_a_backend_within_the_bound,
	      least_loaded_rotates_ties, least_loaded_follows_load_and_weight,
	      limits_give_busy_then_none, a_pinned_request_goes_to_its_backend_only, reserved_slots_are_not_for_low)
