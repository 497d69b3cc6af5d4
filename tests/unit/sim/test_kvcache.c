/* Unit tests for the simulator's KV memory and prefix cache
 * (src/sim/kvcache.c): what a run against a step profile shows as cache
 * hits and queueing: shared prefixes found, referenced blocks never
 * evicted, the least recently used unreferenced ones evicted first, a
 * request that does not fit changing nothing, a prompt cached only as far
 * as room allows; with --kv-events, the changes as an engine reports them
 * (stored blocks with their tokens and parent, evicted ones removed, a
 * flush cleared). (The first test moved from test_engine.c unchanged.) */
#include "config.h"
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
	sim_kv_release(&kv, a, NULL, 0, 8, 8 * IG_BLOCK_TOKENS);
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
	sim_kv_release(&kv, b, NULL, 4, 8, 4 * IG_BLOCK_TOKENS);
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
	sim_kv_release(&kv, a, NULL, 0, 4, 4 * IG_BLOCK_TOKENS); /* 4 cached */
	ck_assert_int_eq(sim_kv_admit(&kv, a, 4, 0, 0), 0);  /* a again: all 4 hit */
	ck_assert_int_eq(sim_kv_admit(&kv, b, 2, 2 * IG_BLOCK_TOKENS, 0), 0);
	/* 4 cached (held) + b's 2 own = 6; big needs 8: only 4 free, and nothing
	 * held may go */
	ck_assert_int_eq(sim_kv_admit(&kv, big, 0, 8 * IG_BLOCK_TOKENS, 0), -1);
	sim_kv_release(&kv, a, NULL, 4, 4, 0); /* a ends: the shared 2 still b's */
	ck_assert_uint_eq(sim_kv_match(&kv, b, 4), 2);
	/* now a's own 2 blocks are evictable: big fits after evicting them */
	ck_assert_int_eq(sim_kv_admit(&kv, big, 0, 8 * IG_BLOCK_TOKENS, 0), 0);
	ck_assert_uint_eq(kv.evicted, 2);
	ck_assert_uint_eq(sim_kv_match(&kv, b, 4), 2); /* the shared ones were held: kept */
	ck_assert_uint_eq(sim_kv_match(&kv, a, 4), 2);
	ck_assert_int_le(sim_kv_used(&kv), kv.total);
	sim_kv_release(&kv, b, NULL, 2, 4, 2 * IG_BLOCK_TOKENS);
	sim_kv_release(&kv, big, NULL, 0, 8, 8 * IG_BLOCK_TOKENS);
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
		sim_kv_release(&kv, c, NULL, m, 16, 16 * IG_BLOCK_TOKENS);
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

/* ---- --kv-events: what the cache reports ---- */

static void text_of(char *t, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		t[i] = (char)('a' + (seed * 7 + i * 13 + i / 64) % 26);
}

/* A prompt of nb blocks: its chain and token ids, as parse.c makes them. */
struct prompt {
	char text[16 * IG_BLOCK_BYTES];
	uint64_t chain[16];
	uint32_t tokens[16 * IG_BLOCK_TOKENS];
	size_t n;
};

static void prompt_of(struct prompt *p, size_t nb, unsigned seed)
{
	text_of(p->text, nb * IG_BLOCK_BYTES, seed);
	p->n = ig_block_chain(p->text, nb * IG_BLOCK_BYTES, p->chain, 16);
	sim_kv_text_tokens(p->text, p->n, p->tokens);
}

/* Runs p through the cache as the engine does: matched, admitted, ended. */
static size_t run(struct sim_kv *kv, struct prompt *p)
{
	size_t m = sim_kv_match(kv, p->chain, p->n);
	long own = (long)(p->n - m) * IG_BLOCK_TOKENS;
	ck_assert_int_eq(sim_kv_admit(kv, p->chain, m, own, 0), 0);
	sim_kv_release(kv, p->chain, p->tokens, m, p->n, own);
	return m;
}

static void free_events(struct ig_kv_event *ev, size_t n)
{
	struct ig_kv_batch b = {.ev = ev, .nev = n};
	ig_kv_batch_free(&b);
}

/* Forgets what was recorded so far. */
static void drain(struct sim_kv *kv)
{
	struct ig_kv_event *ev;
	size_t n = sim_kv_log_take(kv, &ev);
	free_events(ev, n);
}

START_TEST(stored_blocks_carry_their_tokens_and_parent)
{
	struct sim_kv kv;
	struct ig_kv_event *ev;
	static struct prompt a, b;
	ck_assert_int_eq(sim_kv_init(&kv, 100 * IG_BLOCK_TOKENS), 0);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 0); /* off: nothing recorded */
	ck_assert_int_eq(sim_kv_log_start(&kv), 0);
	prompt_of(&a, 8, 1);
	prompt_of(&b, 8, 1);
	text_of(b.text + 4 * IG_BLOCK_BYTES, 4 * IG_BLOCK_BYTES, 2); /* b shares a's first 4 blocks */
	b.n = ig_block_chain(b.text, 8 * IG_BLOCK_BYTES, b.chain, 16);
	sim_kv_text_tokens(b.text, b.n, b.tokens);

	ck_assert_uint_eq(run(&kv, &a), 0);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 1);
	ck_assert_int_eq(ev[0].kind, IG_KV_STORED);
	ck_assert_uint_eq(ev[0].nhashes, 8);
	ck_assert(memcmp(ev[0].hashes, a.chain, 8 * 8) == 0);
	ck_assert(!ev[0].has_parent);
	ck_assert_uint_eq(ev[0].block_size, IG_BLOCK_TOKENS);
	ck_assert_uint_eq(ev[0].ntokens, 8 * IG_BLOCK_TOKENS);
	/* the token ids are the text's 4-byte groups, little-endian: the
	 * gateway's key of each block (ig_block_hash over them) is the chain */
	uint32_t t0 = (uint32_t)(unsigned char)a.text[0] | (uint32_t)(unsigned char)a.text[1] << 8 |
		      (uint32_t)(unsigned char)a.text[2] << 16 | (uint32_t)(unsigned char)a.text[3] << 24;
	ck_assert_uint_eq(ev[0].tokens[0], t0);
	uint64_t key = 0;
	for (size_t k = 0; k < 8; k++) {
		unsigned char bytes[IG_BLOCK_BYTES];
		for (size_t i = 0; i < IG_BLOCK_TOKENS; i++)
			for (int j = 0; j < 4; j++)
				bytes[4 * i + (size_t)j] = (unsigned char)(ev[0].tokens[k * IG_BLOCK_TOKENS + i] >> (8 * j));
		key = ig_block_hash(key, (const char *)bytes, IG_BLOCK_BYTES);
		ck_assert(key == ev[0].hashes[k]);
	}
	free_events(ev, 1);

	/* b: its 4 shared blocks found; its other 4 stored after a's 4th */
	ck_assert_uint_eq(run(&kv, &b), 4);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 1);
	ck_assert_int_eq(ev[0].kind, IG_KV_STORED);
	ck_assert_uint_eq(ev[0].nhashes, 4);
	ck_assert(memcmp(ev[0].hashes, b.chain + 4, 4 * 8) == 0);
	ck_assert(ev[0].has_parent && ev[0].parent == a.chain[3]);
	ck_assert(memcmp(ev[0].tokens, b.tokens + 4 * IG_BLOCK_TOKENS, 4 * IG_BLOCK_TOKENS * 4) == 0);
	free_events(ev, 1);

	/* a again: all cached, nothing changes, nothing reported */
	ck_assert_uint_eq(run(&kv, &a), 8);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 0);
	ck_assert_ptr_null(ev);
	sim_kv_free(&kv);
}
END_TEST

START_TEST(evicted_blocks_are_removed_and_a_flush_clears)
{
	struct sim_kv kv;
	struct ig_kv_event *ev;
	static struct prompt a, c, d;
	ck_assert_int_eq(sim_kv_init(&kv, 8 * IG_BLOCK_TOKENS), 0);
	ck_assert_int_eq(sim_kv_log_start(&kv), 0);
	prompt_of(&a, 8, 1);
	prompt_of(&c, 4, 5);
	run(&kv, &a);
	drain(&kv);

	/* c needs 4 blocks of room: a's 4 deepest go, deepest first */
	ck_assert_int_eq(sim_kv_admit(&kv, c.chain, 0, 4 * IG_BLOCK_TOKENS, 0), 0);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 1);
	ck_assert_int_eq(ev[0].kind, IG_KV_REMOVED);
	ck_assert_uint_eq(ev[0].nhashes, 4);
	for (int i = 0; i < 4; i++)
		ck_assert(ev[0].hashes[i] == a.chain[7 - i]);
	free_events(ev, 1);
	ck_assert_uint_eq(sim_kv_match(&kv, a.chain, 8), 4);
	sim_kv_release(&kv, c.chain, c.tokens, 0, 4, 4 * IG_BLOCK_TOKENS);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 1);
	ck_assert_int_eq(ev[0].kind, IG_KV_STORED);
	ck_assert_uint_eq(ev[0].nhashes, 4);
	free_events(ev, 1);

	/* d, 6 new blocks: 6 evicted (a's 4, deepest first, then c's 2
	 * deepest), reported in that order before d's store */
	prompt_of(&d, 6, 9);
	run(&kv, &d);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 2);
	ck_assert_int_eq(ev[0].kind, IG_KV_REMOVED);
	ck_assert_uint_eq(ev[0].nhashes, 6);
	ck_assert(ev[0].hashes[0] == a.chain[3] && ev[0].hashes[3] == a.chain[0]);
	ck_assert(ev[0].hashes[4] == c.chain[3] && ev[0].hashes[5] == c.chain[2]);
	ck_assert_int_eq(ev[1].kind, IG_KV_STORED);
	ck_assert_uint_eq(ev[1].nhashes, 6);
	ck_assert(!ev[1].has_parent);
	free_events(ev, 2);

	/* a flush: everything goes, one AllBlocksCleared */
	ck_assert_uint_eq(sim_kv_flush(&kv), 8);
	ck_assert_uint_eq(kv.live, 0);
	ck_assert_uint_eq(sim_kv_match(&kv, d.chain, 6), 0);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 1);
	ck_assert_int_eq(ev[0].kind, IG_KV_CLEARED);
	free_events(ev, 1);
	sim_kv_free(&kv);
}
END_TEST

/* Blocks another request cached meanwhile split what a release stores:
 * each run of new blocks is one BlockStored naming the block before it. */
START_TEST(blocks_cached_meanwhile_split_the_stores)
{
	struct sim_kv kv;
	struct ig_kv_event *ev;
	static struct prompt x, y;
	ck_assert_int_eq(sim_kv_init(&kv, 100 * IG_BLOCK_TOKENS), 0);
	ck_assert_int_eq(sim_kv_log_start(&kv), 0);
	prompt_of(&x, 6, 3);
	y = x;
	y.n = 3; /* y is x's first 3 blocks */
	ck_assert_int_eq(sim_kv_admit(&kv, x.chain, 0, 6 * IG_BLOCK_TOKENS, 0), 0); /* x runs */
	run(&kv, &y);                                                                 /* y ends first */
	drain(&kv);
	sim_kv_release(&kv, x.chain, x.tokens, 0, 6, 6 * IG_BLOCK_TOKENS);
	ck_assert_uint_eq(sim_kv_log_take(&kv, &ev), 1);
	ck_assert_uint_eq(ev[0].nhashes, 3);
	ck_assert(ev[0].hashes[0] == x.chain[3]);
	ck_assert(ev[0].has_parent && ev[0].parent == x.chain[2]);
	free_events(ev, 1);
	ck_assert_uint_eq(kv.live, 6);
	sim_kv_free(&kv);
}
END_TEST

IG_CHECK_MAIN("kvcache", kv_cache_matches_refs_and_evicts_lru, a_block_held_by_two_requests_stays_until_both_end,
	      many_prompts_never_pass_the_budget, stored_blocks_carry_their_tokens_and_parent,
	      evicted_blocks_are_removed_and_a_flush_clears, blocks_cached_meanwhile_split_the_stores)
