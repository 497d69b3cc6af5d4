/* Unit tests for the exact prefix index (src/gateway/sched/kvindex.c): a
 * stored chain matched to the token on its source only, cut where a prompt
 * diverges or a block was removed; orphans, clears, a block size that
 * changes, the bound, engine hashes shared by sources, adapters, hostile
 * events; a random run against a plain model of the semantics; a writer
 * and readers at once (run under TSan too). */
#include "config.h"
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../../../src/gateway/sched/kvindex.c" /* to look at the table */
#include "../../check_main.h"
#include "infergate/blockhash.h"

#define NSRC 8

/* Token i of prompt `who`: the same for every prompt before `from`. */
static void prompt(uint32_t *tok, size_t n, uint32_t who, size_t from)
{
	for (size_t i = 0; i < n; i++)
		tok[i] = i < from ? (uint32_t)(i * 7 + 1) : (uint32_t)(who * 100003 + i);
}

static struct ig_kv_event stored(uint64_t *hashes, size_t nh, const uint64_t *parent, uint32_t *tok, uint32_t bs)
{
	return (struct ig_kv_event){.kind = IG_KV_STORED, .hashes = hashes, .nhashes = nh,
				    .has_parent = parent != NULL, .parent = parent ? *parent : 0,
				    .tokens = tok, .ntokens = nh * bs, .block_size = bs, .lora_id = -1, .gpu = true};
}

static void put(struct ig_kvindex *ix, size_t src, uint64_t *hashes, size_t nh, const uint64_t *parent,
		  uint32_t *tok, uint32_t bs)
{
	struct ig_kv_event ev = stored(hashes, nh, parent, tok, bs);
	ig_kvindex_apply(ix, src, &ev);
}

static void removed(struct ig_kvindex *ix, size_t src, uint64_t *hashes, size_t nh)
{
	struct ig_kv_event ev = {.kind = IG_KV_REMOVED, .hashes = hashes, .nhashes = nh, .lora_id = -1, .gpu = true};
	ig_kvindex_apply(ix, src, &ev);
}

static struct ig_kvindex_stats stats(struct ig_kvindex *ix, size_t src)
{
	struct ig_kvindex_stats st;
	ig_kvindex_stats(ix, src, &st);
	return st;
}

/* matched[] of a prompt, checked to be 0 everywhere but at `src`. */
static uint32_t match_on(struct ig_kvindex *ix, size_t src, const uint32_t *tok, size_t n)
{
	uint32_t m[NSRC];
	ig_kvindex_match(ix, tok, n, m);
	for (size_t s = 0; s < NSRC; s++)
		if (s != src)
			ck_assert_msg(m[s] == 0, "source %zu matched %u", s, m[s]);
	return m[src];
}

START_TEST(a_chain_matches_to_the_token_on_its_source_only)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t tok[100];
	uint64_t h[5] = {11, 12, 13, 14, 15};
	prompt(tok, 100, 0, 100);
	ck_assert_uint_eq(match_on(ix, 3, tok, 100), 0); /* empty: nothing */
	put(ix, 3, h, 5, NULL, tok, 16);
	ck_assert_uint_eq(match_on(ix, 3, tok, 100), 80); /* 5 blocks, the tail of 20 not held */
	ck_assert_uint_eq(match_on(ix, 3, tok, 80), 80);
	ck_assert_uint_eq(match_on(ix, 3, tok, 79), 64); /* a partial block never counts */
	ck_assert_uint_eq(match_on(ix, 3, tok, 15), 0);
	/* the same blocks told in two events, the second naming its parent */
	put(ix, 5, h, 2, NULL, tok, 16);
	put(ix, 5, h + 2, 3, &h[1], tok + 32, 16);
	uint32_t m[NSRC];
	ig_kvindex_match(ix, tok, 100, m);
	ck_assert_uint_eq(m[3], 80);
	ck_assert_uint_eq(m[5], 80);
	ck_assert_uint_eq(m[0] + m[1] + m[2] + m[4] + m[6] + m[7], 0);
	ck_assert_uint_eq(stats(ix, 3).blocks, 5);
	ck_assert_uint_eq(stats(ix, 3).stored, 5);
	ck_assert_uint_eq(stats(ix, 3).block_size, 16);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).blocks, 10);
	ck_assert_uint_eq(ix->t.used, 5); /* one key each, two holders */
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(infergate_sims_tokens_give_the_chain_of_its_text)
{
	/* the simulator's tokens are 4 bytes of text each: the keys are
	 * ig_block_chain's over the text (kvindex.h) */
	char text[IG_BLOCK_BYTES * 3];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (char)('a' + i % 23);
	uint32_t tok[IG_BLOCK_TOKENS * 3];
	for (size_t i = 0; i < IG_BLOCK_TOKENS * 3; i++)
		tok[i] = (uint32_t)(unsigned char)text[4 * i] | (uint32_t)(unsigned char)text[4 * i + 1] << 8 |
			 (uint32_t)(unsigned char)text[4 * i + 2] << 16 | (uint32_t)(unsigned char)text[4 * i + 3] << 24;
	uint64_t chain[3], h[3] = {1, 2, 3};
	ck_assert_uint_eq(ig_block_chain(text, sizeof(text), chain, 3), 3);
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 100);
	put(ix, 1, h, 3, NULL, tok, IG_BLOCK_TOKENS);
	for (int i = 0; i < 3; i++)
		ck_assert_ptr_nonnull(slot_find(ix, chain[i]));
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(a_prompt_diverging_mid_block_matches_the_whole_blocks_before)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t a[96], b[96];
	uint64_t h[6] = {1, 2, 3, 4, 5, 6};
	prompt(a, 96, 1, 40);
	prompt(b, 96, 2, 40); /* the same 40 tokens: 2.5 blocks */
	put(ix, 0, h, 6, NULL, a, 16);
	ck_assert_uint_eq(match_on(ix, 0, a, 96), 96);
	ck_assert_uint_eq(match_on(ix, 0, b, 96), 32);
	b[0] ^= 1; /* the first token differs: nothing */
	ck_assert_uint_eq(match_on(ix, 0, b, 96), 0);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(a_removal_in_the_middle_cuts_the_match_there)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t tok[96];
	uint64_t h[6] = {1, 2, 3, 4, 5, 6}, gone = 4, nobody = 99;
	prompt(tok, 96, 0, 96);
	put(ix, 2, h, 6, NULL, tok, 16);
	put(ix, 6, h, 6, NULL, tok, 16);
	removed(ix, 2, &gone, 1); /* the fourth block */
	uint32_t m[NSRC];
	ig_kvindex_match(ix, tok, 96, m);
	ck_assert_uint_eq(m[2], 48);
	ck_assert_uint_eq(m[6], 96); /* the other holder keeps it */
	removed(ix, 2, &nobody, 1);
	removed(ix, 2, &gone, 1); /* twice: unknown the second time */
	ck_assert_uint_eq(stats(ix, 2).removed, 1);
	ck_assert_uint_eq(stats(ix, 2).unknown_removed, 2);
	ck_assert_uint_eq(stats(ix, 2).blocks, 5);
	/* the engine stores it again: the whole chain matches again */
	put(ix, 2, &gone, 1, &h[2], tok + 48, 16);
	ig_kvindex_match(ix, tok, 96, m);
	ck_assert_uint_eq(m[2], 96);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(orphans_are_dropped_and_counted)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t tok[64];
	uint64_t h[4] = {1, 2, 3, 4}, unknown = 77;
	prompt(tok, 64, 0, 64);
	put(ix, 1, h + 1, 3, &unknown, tok + 16, 16);
	ck_assert_uint_eq(stats(ix, 1).orphans, 3);
	ck_assert_uint_eq(stats(ix, 1).blocks, 0);
	ck_assert_uint_eq(ix->t.used, 0);
	/* a parent another source holds is unknown here too */
	put(ix, 2, h, 1, NULL, tok, 16);
	put(ix, 1, h + 1, 3, &h[0], tok + 16, 16);
	ck_assert_uint_eq(stats(ix, 1).orphans, 6);
	ck_assert_uint_eq(match_on(ix, 2, tok, 64), 16);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(clear_forgets_one_source)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 100000);
	uint32_t tok[16 * 500];
	uint64_t h[500];
	for (int i = 0; i < 500; i++)
		h[i] = (uint64_t)i + 1;
	prompt(tok, 16 * 500, 0, 16 * 500);
	size_t empty = stats(ix, IG_KVINDEX_ALL).bytes;
	put(ix, 1, h, 500, NULL, tok, 16);
	size_t one = stats(ix, IG_KVINDEX_ALL).bytes;
	put(ix, 4, h, 500, NULL, tok, 16);
	ig_kvindex_clear(ix, 1);
	ck_assert_uint_eq(match_on(ix, 4, tok, 16 * 500), 16 * 500);
	ck_assert_uint_eq(stats(ix, 1).blocks, 0);
	ck_assert_uint_eq(stats(ix, 1).cleared, 1);
	ck_assert_uint_eq(stats(ix, 1).bytes, 0);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).bytes, one); /* its map gone, the keys kept for 4 */
	struct ig_kv_event ev = {.kind = IG_KV_CLEARED, .lora_id = -1, .gpu = true};
	ig_kvindex_apply(ix, 4, &ev);
	uint32_t m[NSRC];
	ig_kvindex_match(ix, tok, 16 * 500, m);
	for (int s = 0; s < NSRC; s++)
		ck_assert_uint_eq(m[s], 0);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).blocks, 0);
	ck_assert_uint_eq(ix->t.used, 0);
	ck_assert_uint_le(stats(ix, IG_KVINDEX_ALL).bytes, empty + MIN_CAP * sizeof(struct slot));
	ck_assert_uint_eq(ix->nsizes, 0);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(a_new_block_size_clears_the_source)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t tok[128];
	uint64_t h[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	prompt(tok, 128, 0, 128);
	put(ix, 0, h, 8, NULL, tok, 16);
	put(ix, 1, h, 3, NULL, tok, 16);
	put(ix, 0, h, 2, NULL, tok, 32); /* restarted with blocks of 32: the 16s are gone */
	ck_assert_uint_eq(stats(ix, 0).blocks, 2);
	ck_assert_uint_eq(stats(ix, 0).block_size, 32);
	ck_assert_uint_eq(stats(ix, 0).cleared, 1);
	uint32_t m[NSRC];
	ig_kvindex_match(ix, tok, 128, m);
	ck_assert_uint_eq(m[0], 64);  /* 2 blocks of 32 */
	ck_assert_uint_eq(m[1], 48);  /* 3 of 16, on its own */
	ck_assert_uint_eq(ix->nsizes, 2);
	/* a REMOVED of an old 16-block's hash after the change: unknown */
	uint64_t old = 5;
	removed(ix, 0, &old, 1);
	ck_assert_uint_eq(stats(ix, 0).unknown_removed, 1);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(the_bound_drops_stores_and_memory_stays)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 10);
	uint32_t tok[16 * 200];
	uint64_t h[200];
	for (int i = 0; i < 200; i++)
		h[i] = (uint64_t)i + 1;
	prompt(tok, 16 * 200, 0, 16 * 200);
	put(ix, 0, h, 8, NULL, tok, 16);
	put(ix, 1, h, 5, NULL, tok, 16); /* 2 fit */
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).blocks, 10);
	ck_assert_uint_eq(stats(ix, 1).full, 3);
	ck_assert_uint_eq(stats(ix, 1).stored, 2);
	uint32_t m[NSRC];
	ig_kvindex_match(ix, tok, 16 * 200, m);
	ck_assert_uint_eq(m[0], 128);
	ck_assert_uint_eq(m[1], 32);
	size_t bytes = stats(ix, IG_KVINDEX_ALL).bytes;
	for (int s = 0; s < NSRC; s++) /* a flood: nothing more held, no memory more */
		put(ix, (size_t)s, h, 200, NULL, tok, 16);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).blocks, 10);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).bytes, bytes);
	/* 0 held 8 and 1 held 2 of them (stored again: nothing new), the rest 200 */
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).full, 3 + 192 + 198 + 6 * 200);
	/* room again after a removal */
	removed(ix, 0, &h[7], 1);
	put(ix, 2, h, 1, NULL, tok, 16);
	ck_assert_uint_eq(stats(ix, 2).blocks, 1);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(engine_hashes_shared_by_sources_stay_apart)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t a[64], b[64];
	uint64_t h[4] = {1, 2, 3, 4}; /* both engines name their blocks alike */
	prompt(a, 64, 1, 0);
	prompt(b, 64, 2, 0);
	put(ix, 1, h, 4, NULL, a, 16);
	put(ix, 2, h, 4, NULL, b, 16);
	ck_assert_uint_eq(match_on(ix, 1, a, 64), 64);
	ck_assert_uint_eq(match_on(ix, 2, b, 64), 64);
	removed(ix, 1, &h[1], 1);
	ck_assert_uint_eq(match_on(ix, 1, a, 64), 16);
	ck_assert_uint_eq(match_on(ix, 2, b, 64), 64);
	/* a child of source 2's block 4 chains from source 2's key */
	uint32_t c[80];
	memcpy(c, b, sizeof(b));
	prompt(c + 64, 16, 3, 0);
	uint64_t five = 5;
	put(ix, 2, &five, 1, &h[3], c + 64, 16);
	ck_assert_uint_eq(match_on(ix, 2, c, 80), 80);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(a_key_held_twice_by_a_source_stays_until_both_go)
{
	/* vLLM's cache_salt: two engine hashes for the same token ids */
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t tok[48];
	uint64_t h[3] = {1, 2, 3}, salted[3] = {11, 12, 13};
	prompt(tok, 48, 0, 48);
	put(ix, 3, h, 3, NULL, tok, 16);
	put(ix, 3, salted, 3, NULL, tok, 16);
	ck_assert_uint_eq(stats(ix, 3).blocks, 6);
	removed(ix, 3, h, 3);
	ck_assert_uint_eq(match_on(ix, 3, tok, 48), 48);
	removed(ix, 3, &salted[2], 1);
	ck_assert_uint_eq(match_on(ix, 3, tok, 48), 32);
	ck_assert_uint_eq(stats(ix, 3).blocks, 2);
	/* an engine hash stored again for other tokens: the old block is gone */
	uint32_t other[16];
	prompt(other, 16, 9, 0);
	put(ix, 3, &salted[0], 1, NULL, other, 16);
	ck_assert_uint_eq(match_on(ix, 3, tok, 48), 0);
	ck_assert_uint_eq(match_on(ix, 3, other, 16), 16);
	ck_assert_uint_eq(stats(ix, 3).blocks, 2);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(an_adapters_blocks_are_its_own)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t tok[48], m[NSRC];
	uint64_t h[3] = {1, 2, 3};
	prompt(tok, 48, 0, 48);
	struct ig_kv_event ev = stored(h, 3, NULL, tok, 16);
	ev.lora_id = 7;
	ig_kvindex_apply(ix, 2, &ev);
	ck_assert_uint_eq(match_on(ix, 2, tok, 48), 0);
	ig_kvindex_match_lora(ix, 7, tok, 48, m);
	ck_assert_uint_eq(m[2], 48);
	ig_kvindex_match_lora(ix, 8, tok, 48, m);
	ck_assert_uint_eq(m[2], 0);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(many_holders_overflow_the_slot_and_come_back)
{
	struct ig_kvindex *ix = ig_kvindex_new(300, 100000);
	uint32_t tok[80], m[300];
	uint64_t h[5] = {1, 2, 3, 4, 5};
	prompt(tok, 80, 0, 80);
	for (size_t s = 0; s < 300; s++) /* every source the first 4 blocks; the odd ones a fifth */
		put(ix, 299 - s, h, s % 2 ? 5 : 4, NULL, tok, 16);
	ig_kvindex_match(ix, tok, 80, m);
	for (size_t s = 0; s < 300; s++)
		ck_assert_uint_eq(m[s], s % 2 ? 64 : 80); /* 299 - s: the parity flips */
	ck_assert_uint_gt(ix->ovf_bytes, 0);
	for (size_t s = 0; s < 297; s++)
		removed(ix, s, &h[0], 1);
	ig_kvindex_match(ix, tok, 80, m);
	for (size_t s = 0; s < 300; s++)
		ck_assert_uint_eq(m[s], s < 297 ? 0 : s % 2 ? 64 : 80);
	for (size_t s = 0; s < 297; s++)
		removed(ix, s, h + 1, 4);
	ck_assert_uint_eq(ix->ovf_bytes, 0);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).blocks, 3 * 4 + 1);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(thousands_of_sources)
{
	/* past the match's stack set (4096): 200 backends x 32 DP ranks */
	size_t n = 6400;
	struct ig_kvindex *ix = ig_kvindex_new(n, 100000);
	uint32_t tok[64], *m = malloc(n * sizeof(*m));
	uint64_t h[4] = {1, 2, 3, 4};
	prompt(tok, 64, 0, 64);
	for (size_t s = 0; s < n; s += 2)
		put(ix, s, h, s % 4 ? 2 : 4, NULL, tok, 16);
	ig_kvindex_match(ix, tok, 64, m);
	for (size_t s = 0; s < n; s++)
		ck_assert_uint_eq(m[s], s % 2 ? 0 : s % 4 ? 32 : 64);
	free(m);
	ig_kvindex_free(ix);
}
END_TEST

START_TEST(hostile_events_are_ignored_and_counted)
{
	struct ig_kvindex *ix = ig_kvindex_new(NSRC, 1000);
	uint32_t tok[64];
	uint64_t h[4] = {1, 2, 3, 4};
	prompt(tok, 64, 0, 64);
	struct ig_kv_event ev[] = {
		stored(h, 0, NULL, tok, 16),      /* no hashes */
		stored(h, 4, NULL, tok, 16),      /* ntokens set wrong below */
		stored(h, 4, NULL, tok, 0),       /* block size 0 */
		stored(h, 1, NULL, tok, 1u << 31), /* huge */
		stored(NULL, 4, NULL, tok, 16),   /* no hashes given */
		stored(h, 4, NULL, NULL, 16),     /* no tokens */
		stored(h, SIZE_MAX / 2, NULL, tok, 16), /* nhashes x block_size wraps */
		{.kind = IG_KV_REMOVED, .hashes = NULL, .nhashes = 3, .gpu = true},
		{.kind = (enum ig_kv_kind)42, .gpu = true},
	};
	ev[1].ntokens = 63;
	ev[6].ntokens = (SIZE_MAX / 2) * 16; /* as the product wraps */
	for (size_t i = 0; i < sizeof(ev) / sizeof(ev[0]); i++)
		ig_kvindex_apply(ix, 1, &ev[i]);
	ig_kvindex_apply(ix, NSRC, &ev[1]); /* no such source */
	ig_kvindex_apply(ix, (size_t)-5, &ev[1]);
	struct ig_kv_batch b = {.ev = ev, .nev = sizeof(ev) / sizeof(ev[0])};
	ig_kvindex_apply_batch(ix, 1, &b);
	ck_assert_uint_eq(stats(ix, 1).bad, 2 * 9);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).bad, 2 * 9 + 2);
	ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).blocks, 0);
	ck_assert_uint_eq(stats(ix, 1).block_size, 0);
	/* another medium: ignored */
	struct ig_kv_event cpu = stored(h, 4, NULL, tok, 16);
	cpu.gpu = false;
	ig_kvindex_apply(ix, 1, &cpu);
	ck_assert_uint_eq(stats(ix, 1).other_medium, 1);
	ck_assert_uint_eq(match_on(ix, 1, tok, 64), 0);
	/* and the source works after all that */
	put(ix, 1, h, 4, NULL, tok, 16);
	ck_assert_uint_eq(match_on(ix, 1, tok, 64), 64);
	ig_kvindex_match(ix, NULL, 0, (uint32_t[NSRC]){0});
	ck_assert_ptr_null(ig_kvindex_new(0, 10));
	ck_assert_ptr_null(ig_kvindex_new(IG_KVINDEX_MAX_SOURCES + 1, 10));
	ig_kvindex_free(NULL);
	ig_kvindex_free(ix);
}
END_TEST

/* --- against a model: each source a list of (engine hash, chain id,
 * depth); a prompt is chain c's first d blocks ------------------------- */

#define CHAINS 40
#define DEPTH 24
#define MSRC 5
#define BS 4

struct held {
	int chain, depth;   /* -1: none */
};

static uint32_t chain_tok(int c, int d, int i)
{
	/* chains share their first blocks in pairs (0 and 1, ...) up to depth 3 */
	return d < 3 ? (uint32_t)((c / 2) * 1000 + d * 10 + i) : (uint32_t)(c * 100000 + d * 10 + i);
}

START_TEST(random_events_agree_with_a_model)
{
	static struct held model[MSRC][CHAINS * DEPTH]; /* by engine hash - 1 */
	struct ig_kvindex *ix = ig_kvindex_new(MSRC, 1u << 20);
	uint64_t seed = 12345;
	memset(model, 0xff, sizeof(model));
	uint32_t tok[DEPTH * BS];
	for (int round = 0; round < 20000; round++) {
		size_t s = ig_rand_next(&seed) % MSRC;
		int c = (int)(ig_rand_next(&seed) % CHAINS);
		/* engine hashes: per source, chain c's block d is hash c*DEPTH+d+1 */
		uint64_t r = ig_rand_next(&seed) % 10;
		if (r < 6) { /* store blocks from..to of chain c, the parent known or not */
			int from = (int)(ig_rand_next(&seed) % DEPTH), n = 1 + (int)(ig_rand_next(&seed) % 6);
			if (from + n > DEPTH)
				n = DEPTH - from;
			uint64_t h[DEPTH], parent = (uint64_t)(c * DEPTH + from);
			for (int d = from; d < from + n; d++) {
				h[d - from] = (uint64_t)(c * DEPTH + d + 1);
				for (int i = 0; i < BS; i++)
					tok[(d - from) * BS + i] = chain_tok(c, d, i);
			}
			int known = from == 0 || model[s][parent - 1].chain == c;
			put(ix, s, h, (size_t)n, from ? &parent : NULL, tok, BS);
			if (known)
				for (int d = from; d < from + n; d++)
					model[s][c * DEPTH + d] = (struct held){c, d};
		} else if (r < 9) {
			uint64_t h = (uint64_t)(c * DEPTH + (int)(ig_rand_next(&seed) % DEPTH) + 1);
			removed(ix, s, &h, 1);
			model[s][h - 1].chain = -1;
		} else if (ig_rand_next(&seed) % 20 == 0) {
			ig_kvindex_clear(ix, s);
			memset(model[s], 0xff, sizeof(model[s]));
		}
		if (round % 50)
			continue;
		/* every chain's prompt against the model */
		for (int q = 0; q < CHAINS; q++) {
			for (int d = 0; d < DEPTH; d++)
				for (int i = 0; i < BS; i++)
					tok[d * BS + i] = chain_tok(q, d, i);
			uint32_t m[MSRC];
			ig_kvindex_match(ix, tok, DEPTH * BS + 3, m);
			for (size_t t = 0; t < MSRC; t++) {
				int d = 0;
				/* block d of q's prompt is held when any chain with the
				 * same tokens up to d (q, or its pair below depth 3) is */
				for (; d < DEPTH; d++) {
					int pair = q ^ 1, ok = model[t][q * DEPTH + d].chain == q;
					if (d < 3 && model[t][pair * DEPTH + d].chain == pair)
						ok = 1;
					if (!ok)
						break;
				}
				ck_assert_msg(m[t] == (uint32_t)(d * BS), "round %d chain %d source %zu: %u, model %d",
					      round, q, t, m[t], d * BS);
			}
		}
		size_t total = 0;
		for (size_t t = 0; t < MSRC; t++)
			for (int k = 0; k < CHAINS * DEPTH; k++)
				total += model[t][k].chain >= 0;
		ck_assert_uint_eq(stats(ix, IG_KVINDEX_ALL).blocks, total);
	}
	ig_kvindex_free(ix);
}
END_TEST

/* --- a writer and readers at once ---------------------------------------- */

struct race {
	struct ig_kvindex *ix;
	uint32_t pinned[16 * 64]; /* source 0 holds it all along */
	int stop;
	pthread_mutex_t mu;
	long bad;
};

static void *writer(void *arg)
{
	struct race *r = arg;
	uint64_t seed = 7;
	uint32_t tok[16 * 8];
	for (int round = 0; round < 20000; round++) {
		size_t s = 1 + ig_rand_next(&seed) % (NSRC - 1);
		uint64_t base = (ig_rand_next(&seed) % 64) * 8 + 1, h[8];
		for (int i = 0; i < 8; i++)
			h[i] = base + (uint64_t)i;
		if (round % 3 == 2) {
			removed(r->ix, s, h, 8);
			continue;
		}
		for (size_t i = 0; i < 16 * 8; i++)
			tok[i] = i < 64 ? r->pinned[i] : (uint32_t)(base * 131 + i);
		struct ig_kv_event ev[2] = {stored(h, 8, NULL, tok, 16), {.kind = IG_KV_CLEARED, .gpu = true}};
		struct ig_kv_batch b = {.ev = ev, .nev = round % 101 == 0 ? 2 : 1};
		ig_kvindex_apply_batch(r->ix, s, &b);
	}
	__atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *reader(void *arg)
{
	struct race *r = arg;
	uint32_t m[NSRC];
	long bad = 0;
	while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
		ig_kvindex_match(r->ix, r->pinned, 16 * 64, m);
		bad += m[0] != 16 * 64;
		for (int s = 1; s < NSRC; s++)
			bad += m[s] % 16 != 0 || m[s] > 64; /* the others share the first 4 blocks at most */
	}
	pthread_mutex_lock(&r->mu);
	r->bad += bad;
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

START_TEST(a_writer_and_readers_at_once)
{
	static struct race r;
	memset(&r, 0, sizeof(r));
	pthread_mutex_init(&r.mu, NULL);
	r.ix = ig_kvindex_new(NSRC, 1u << 16);
	uint64_t h[64];
	for (int i = 0; i < 16 * 64; i++)
		r.pinned[i] = (uint32_t)(i * 3 + 5);
	for (int i = 0; i < 64; i++)
		h[i] = 1000000 + (uint64_t)i;
	put(r.ix, 0, h, 64, NULL, r.pinned, 16);
	pthread_t w, rd[3];
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&rd[i], NULL, reader, &r), 0);
	ck_assert_int_eq(pthread_create(&w, NULL, writer, &r), 0);
	pthread_join(w, NULL);
	for (int i = 0; i < 3; i++)
		pthread_join(rd[i], NULL);
	ck_assert_int_eq(r.bad, 0);
	ig_kvindex_free(r.ix);
	pthread_mutex_destroy(&r.mu);
}
END_TEST

IG_CHECK_MAIN("kvindex", a_chain_matches_to_the_token_on_its_source_only,
	      infergate_sims_tokens_give_the_chain_of_its_text,
	      a_prompt_diverging_mid_block_matches_the_whole_blocks_before,
	      a_removal_in_the_middle_cuts_the_match_there, orphans_are_dropped_and_counted,
	      clear_forgets_one_source, a_new_block_size_clears_the_source, the_bound_drops_stores_and_memory_stays,
	      engine_hashes_shared_by_sources_stay_apart, a_key_held_twice_by_a_source_stays_until_both_go,
	      an_adapters_blocks_are_its_own, many_holders_overflow_the_slot_and_come_back, thousands_of_sources,
	      hostile_events_are_ignored_and_counted, random_events_agree_with_a_model, a_writer_and_readers_at_once)
