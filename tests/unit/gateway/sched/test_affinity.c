/* Unit tests for cache-aware routing's records (src/gateway/sched/affinity.c):
 * the longest prefix found, per backend, bounded, least recently used
 * first with a prefix's deepest blocks before its first ones, buckets that
 * crafted hashes cannot pile into one chain. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../../src/gateway/sched/affinity.c" /* to look at the buckets */
#include "../../check_main.h"
#include "infergate/blockhash.h"

/* The chain of a text made of `shared` blocks common to all and `own`
 * blocks of its own. */
static size_t chain_of(uint64_t *out, int who, size_t shared, size_t own)
{
	char text[IG_BLOCK_BYTES * 64];
	size_t n = shared + own;
	ck_assert_uint_le(n, 64);
	for (size_t i = 0; i < n; i++)
		memset(text + i * IG_BLOCK_BYTES, i < shared ? 'a' + (int)(i % 26) : 'A' + who % 26, IG_BLOCK_BYTES);
	for (size_t i = shared; i < n; i++) { /* own blocks: unique to `who` and their place */
		char tag[32];
		int k = snprintf(tag, sizeof(tag), "%d.%zu", who, i);
		memcpy(text + i * IG_BLOCK_BYTES, tag, (size_t)k);
	}
	return ig_block_chain(text, n * IG_BLOCK_BYTES + 10, out, 64); /* a partial tail is not hashed */
}

START_TEST(the_chain_names_whole_prefixes)
{
	uint64_t a[64], b[64];
	ck_assert_uint_eq(chain_of(a, 1, 3, 2), 5);
	ck_assert_uint_eq(chain_of(b, 2, 3, 2), 5);
	for (int i = 0; i < 3; i++)
		ck_assert(a[i] == b[i]);
	ck_assert(a[3] != b[3] && a[4] != b[4]);
	ck_assert(a[0] != 0);
}
END_TEST

START_TEST(the_longest_prefix_per_backend)
{
	struct ig_affinity *af = ig_affinity_new(1000);
	uint64_t a[64], b[64];
	size_t na = chain_of(a, 1, 10, 6), nb = chain_of(b, 2, 10, 6);
	ck_assert_uint_eq(ig_affinity_match(af, 3, a, na), 0);
	ig_affinity_insert(af, 3, a, na);
	ck_assert_uint_eq(ig_affinity_match(af, 3, a, na), 16);
	ck_assert_uint_eq(ig_affinity_match(af, 3, b, nb), 10); /* the shared part */
	ck_assert_uint_eq(ig_affinity_match(af, 4, a, na), 0);  /* another backend */
	ck_assert_uint_eq(ig_affinity_match(af, 99, a, na), 0); /* unknown */
	ck_assert_uint_eq(ig_affinity_blocks(af, 3), 16);
	/* the backend died: its record is gone, and it can be sent again */
	ig_affinity_forget(af, 3);
	ck_assert_uint_eq(ig_affinity_blocks(af, 3), 0);
	ck_assert_uint_eq(ig_affinity_match(af, 3, a, na), 0);
	ig_affinity_insert(af, 3, b, nb);
	ck_assert_uint_eq(ig_affinity_match(af, 3, b, nb), 16);
	ig_affinity_free(af);
}
END_TEST

/* A shared system prompt is touched by every request: it stays while
 * distinct tails flood a record far past its cap. */
START_TEST(a_shared_prefix_survives_a_flood_of_tails)
{
	struct ig_affinity *af = ig_affinity_new(64);
	uint64_t c[64];
	for (int who = 0; who < 200; who++) {
		size_t n = chain_of(c, who, 8, 4);
		ig_affinity_insert(af, 0, c, n);
		ck_assert_uint_le(ig_affinity_blocks(af, 0), 64);
	}
	ck_assert_uint_eq(ig_affinity_blocks(af, 0), 64);
	size_t n = chain_of(c, 1000, 8, 4);
	ck_assert_uint_eq(ig_affinity_match(af, 0, c, n), 8);
	/* the last conversations are whole; the oldest are gone */
	n = chain_of(c, 199, 8, 4);
	ck_assert_uint_eq(ig_affinity_match(af, 0, c, n), 12);
	n = chain_of(c, 3, 8, 4);
	ck_assert_uint_eq(ig_affinity_match(af, 0, c, n), 8);
	/* 64 entries of 24 bytes and 64 buckets, and the table */
	ck_assert_uint_lt(ig_affinity_bytes(af), 64 * 32 + 512);
	ig_affinity_free(af);
}
END_TEST

/* Hashes that share their low bits (what a client choosing prompts could
 * aim for, the block hash being unkeyed) still spread over the buckets. */
START_TEST(crafted_hashes_do_not_share_a_bucket)
{
	struct ig_affinity *af = ig_affinity_new(4096);
	uint64_t chain[1];
	for (uint64_t k = 1; k <= 4096; k++) {
		chain[0] = k << 32; /* the low 32 bits all zero */
		ig_affinity_insert(af, 0, chain, 1);
	}
	const struct record *r = record_of(af, 0);
	ck_assert_ptr_nonnull(r);
	size_t longest = 0;
	for (size_t b = 0; b < r->nbucket; b++) {
		size_t len = 0;
		for (int32_t i = r->bucket[b]; i >= 0; i = r->e[i].hnext)
			len++;
		if (len > longest)
			longest = len;
	}
	ck_assert_uint_le(longest, 16); /* unkeyed low bits would give one chain of 4096 */
	chain[0] = 77ull << 32;
	ck_assert_uint_eq(ig_affinity_match(af, 0, chain, 1), 1);
	ig_affinity_free(af);
}
END_TEST

IG_CHECK_MAIN("affinity", the_chain_names_whole_prefixes, the_longest_prefix_per_backend,
	      a_shared_prefix_survives_a_flood_of_tails, crafted_hashes_do_not_share_a_bucket)
