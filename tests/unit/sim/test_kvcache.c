/* Unit tests for the simulator's KV memory and prefix cache
 * (src/sim/kvcache.c): what a run against a step profile shows as cache
 * hits and queueing: shared prefixes found, referenced blocks never
 * evicted, the least recently used unreferenced ones evicted first, a
 * request that does not fit changing nothing, a prompt cached only as far
 * as room allows. (The first test moved from test_engine.c unchanged.) */
#include "config.h"
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "kvcache.h"
#include "../check_main.h"

static void chain_of(uint64_t *chain, size_t n, uint64_t salt, size_t shared)
{
	for (size_t k = 0; k < n; k++)
		chain[k] = k < shared ? 1000 + k : (salt << 20) + k; /* any distinct values do */
}

START_TEST(kv_cache_matches_refs_and_evicts_lru)
{
	struct sim_kv kv;
	uint64_t a[8], b[8], c[8];
	ck_assert_int_eq(sim_kv_init(&kv, 10 * IG_BLOCK_TOKENS), 0);
	chain_of(a, 8, 1, 4);
	chain_of(b, 8, 2, 4); /* shares its first 4 blocks with a */
	chain_of(c, 8, 3, 0);
	ck_assert_uint_eq(sim_kv_match(&kv, a, 8), 0);
	/* a runs (8 blocks of own prompt, 0 reserve), ends: its 8 blocks cached */
	ck_assert_int_eq(sim_kv_admit(&kv, a, 0, 8 * IG_BLOCK_TOKENS, 0), 0);
	ck_assert_int_eq(sim_kv_used(&kv), 8 * IG_BLOCK_TOKENS);
	sim_kv_release(&kv, a, 0, 8, 8 * IG_BLOCK_TOKENS);
	ck_assert_uint_eq(kv.live, 8);
	ck_assert_int_eq(kv.own, 0);
	/* b finds the shared 4 blocks */
	ck_assert_uint_eq(sim_kv_match(&kv, b, 8), 4);
	/* b needs 4 blocks of its own + 1 reserve: 8 cached + 5 > 10, so the
	 * least recent unreferenced blocks go: a's deepest, never the 4 b holds */
	ck_assert_int_eq(sim_kv_admit(&kv, b, 4, 4 * IG_BLOCK_TOKENS, IG_BLOCK_TOKENS), 0);
	ck_assert_uint_eq(kv.evicted, 3);
	ck_assert_uint_eq(sim_kv_match(&kv, a, 8), 5); /* a's first 5 still there */
	/* c cannot fit while b holds its blocks: nothing changes */
	long used = sim_kv_used(&kv);
	ck_assert_int_eq(sim_kv_admit(&kv, c, 0, 9 * IG_BLOCK_TOKENS, 0), -1);
	ck_assert_int_eq(sim_kv_used(&kv), used);
	ck_assert_uint_eq(sim_kv_match(&kv, b, 8), 4);
	sim_kv_release(&kv, b, 4, 8, 4 * IG_BLOCK_TOKENS);
	ck_assert_uint_eq(sim_kv_match(&kv, b, 8), 8);
	ck_assert_int_le(sim_kv_used(&kv), kv.total);
	sim_kv_free(&kv);
}
END_TEST

/* Two running requests that began with the same blocks both hold them: the
 * blocks stay cached until the last one ends, whatever needs room. */
START_TEST(a_block_held_by_two_requests_stays_until_both_end)
{
	struct sim_kv kv;
	uint64_t a[4], b[4], big[8];
	ck_assert_int_eq(sim_kv_init(&kv, 12 * IG_BLOCK_TOKENS), 0);
	chain_of(a, 4, 1, 2);
	chain_of(b, 4, 2, 2); /* shares 2 blocks with a */
	chain_of(big, 8, 3, 0);
	ck_assert_int_eq(sim_kv_admit(&kv, a, 0, 4 * IG_BLOCK_TOKENS, 0), 0);
	sim_kv_release(&kv, a, 0, 4, 4 * IG_BLOCK_TOKENS); /* 4 cached */
	ck_assert_int_eq(sim_kv_admit(&kv, a, 4, 0, 0), 0);  /* a again: all 4 hit */
	ck_assert_int_eq(sim_kv_admit(&kv, b, 2, 2 * IG_BLOCK_TOKENS, 0), 0);
	/* 4 cached (held) + b's 2 own = 6; big needs 8: only 4 free, and nothing
	 * held may go */
	ck_assert_int_eq(sim_kv_admit(&kv, big, 0, 8 * IG_BLOCK_TOKENS, 0), -1);
	sim_kv_release(&kv, a, 4, 4, 0); /* a ends: the shared 2 still b's */
	ck_assert_uint_eq(sim_kv_match(&kv, b, 4), 2);
	/* now a's own 2 blocks are evictable: big fits after evicting them */
	ck_assert_int_eq(sim_kv_admit(&kv, big, 0, 8 * IG_BLOCK_TOKENS, 0), 0);
	ck_assert_uint_eq(kv.evicted, 2);
	ck_assert_uint_eq(sim_kv_match(&kv, b, 4), 2); /* the shared ones were held: kept */
	ck_assert_uint_eq(sim_kv_match(&kv, a, 4), 2);
	ck_assert_int_le(sim_kv_used(&kv), kv.total);
	sim_kv_release(&kv, b, 2, 4, 2 * IG_BLOCK_TOKENS);
	sim_kv_release(&kv, big, 0, 8, 8 * IG_BLOCK_TOKENS);
	ck_assert_int_le(sim_kv_used(&kv), kv.total);
	ck_assert_int_eq(kv.own, 0);
	sim_kv_free(&kv);
}
END_TEST

/* Many prompts through a small budget: the table grows, the budget is
 * never passed, and the most recent prompt is the one still cached. */
START_TEST(many_prompts_never_pass_the_budget)
{
	struct sim_kv kv;
	ck_assert_int_eq(sim_kv_init(&kv, 64 * IG_BLOCK_TOKENS), 0);
	uint64_t c[16];
	for (uint64_t p = 1; p <= 5000; p++) {
		chain_of(c, 16, p, 0);
		size_t m = sim_kv_match(&kv, c, 16);
		ck_assert_uint_eq(m, 0); /* every prompt is new */
		ck_assert_int_eq(sim_kv_admit(&kv, c, m, 16 * IG_BLOCK_TOKENS, 0), 0);
		sim_kv_release(&kv, c, m, 16, 16 * IG_BLOCK_TOKENS);
		ck_assert_int_le(sim_kv_used(&kv), kv.total);
	}
	ck_assert_uint_eq(kv.live, 64);
	ck_assert_uint_eq(kv.evicted, 5000 * 16 - 64);
	chain_of(c, 16, 5000, 0);
	ck_assert_uint_eq(sim_kv_match(&kv, c, 16), 16);
	chain_of(c, 16, 4996, 0);
	ck_assert_uint_eq(sim_kv_match(&kv, c, 16), 0); /* 5 prompts back: evicted */
	sim_kv_free(&kv);
}
END_TEST

IG_CHECK_MAIN("kvcache", kv_cache_matches_refs_and_evicts_lru, a_block_held_by_two_requests_stays_until_both_end,
	      many_prompts_never_pass_the_budget)
