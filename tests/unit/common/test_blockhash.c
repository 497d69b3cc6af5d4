/* Unit tests for src/common/blockhash.c: a prompt's prefix as a chain of
 * block hashes, the one definition the simulator's cache and the gateway's
 * cache-aware routing share: two prompts share the hashes of the blocks
 * they share from the start, and no more; a partial block is not hashed. */
#include "config.h"
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "infergate/blockhash.h"
#include "../check_main.h"

static void prompt(char *out, size_t n, char seed)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (char)('a' + (seed + i * 7) % 26);
}

START_TEST(a_shared_prefix_shares_its_hashes)
{
	char a[10 * IG_BLOCK_BYTES], b[10 * IG_BLOCK_BYTES];
	prompt(a, sizeof(a), 1);
	memcpy(b, a, sizeof(b));
	b[4 * IG_BLOCK_BYTES + 5] ^= 1; /* they differ in block 5 (index 4) */
	uint64_t ha[10], hb[10];
	ck_assert_uint_eq(ig_block_chain(a, sizeof(a), ha, 10), 10);
	ck_assert_uint_eq(ig_block_chain(b, sizeof(b), hb, 10), 10);
	for (int i = 0; i < 4; i++)
		ck_assert(ha[i] == hb[i]);
	for (int i = 4; i < 10; i++)
		ck_assert(ha[i] != hb[i]); /* each hash names the whole prefix up to it */

	/* the same block after another prefix is another hash */
	ck_assert(ig_block_hash(0, a, IG_BLOCK_BYTES) == ha[0]);
	ck_assert(ig_block_hash(ha[0], a + IG_BLOCK_BYTES, IG_BLOCK_BYTES) == ha[1]);
	ck_assert(ig_block_hash(hb[4], a + 5 * IG_BLOCK_BYTES, IG_BLOCK_BYTES) != ha[5]);
	/* the same, every time (the gateway and the simulator agree) */
	uint64_t again[10];
	ig_block_chain(a, sizeof(a), again, 10);
	ck_assert(memcmp(ha, again, sizeof(ha)) == 0);
}
END_TEST

START_TEST(only_whole_blocks_up_to_max)
{
	char a[3 * IG_BLOCK_BYTES + 10];
	prompt(a, sizeof(a), 3);
	uint64_t h[8];
	ck_assert_uint_eq(ig_block_chain(a, sizeof(a), h, 8), 3); /* the 10 bytes after: no block */
	ck_assert_uint_eq(ig_block_chain(a, IG_BLOCK_BYTES - 1, h, 8), 0);
	ck_assert_uint_eq(ig_block_chain(a, sizeof(a), h, 2), 2);
	/* a byte past the blocks changes nothing */
	uint64_t h2[8];
	a[3 * IG_BLOCK_BYTES + 2] ^= 1;
	ig_block_chain(a, sizeof(a), h2, 8);
	ck_assert(memcmp(h, h2, 2 * sizeof(h[0])) == 0);
}
END_TEST

START_TEST(hashes_are_never_zero_and_see_every_byte)
{
	/* 0 means "no parent": a hash never is */
	char zeros[IG_BLOCK_BYTES] = {0};
	for (uint64_t p = 0; p < 5000; p++)
		ck_assert(ig_block_hash(p, zeros, (size_t)(p % IG_BLOCK_BYTES)) != 0);
	/* a block of odd length: its tail counts */
	char t1[13] = "abcdefghijklm", t2[13] = "abcdefghijklX";
	ck_assert(ig_block_hash(0, t1, 13) != ig_block_hash(0, t2, 13));
	ck_assert(ig_block_hash(0, t1, 12) != ig_block_hash(0, t1, 13));
}
END_TEST

START_TEST(the_chain_of_ids_is_the_chain_of_their_bytes)
{
	uint32_t ids[40];
	unsigned char bytes[sizeof(ids)];
	for (size_t i = 0; i < 40; i++) {
		ids[i] = (uint32_t)(i * 2654435761u);
		for (size_t k = 0; k < 4; k++)
			bytes[i * 4 + k] = (unsigned char)(ids[i] >> (8 * k));
	}
	uint64_t a[4], b[4];
	ck_assert_uint_eq(ig_block_chain_ids(ids, 40, a, 4), 2); /* two whole blocks of 16 */
	ck_assert_uint_eq(ig_block_chain((const char *)bytes, sizeof(bytes), b, 4), 2);
	ck_assert(a[0] == b[0] && a[1] == b[1]);
	ck_assert_uint_eq(ig_block_chain_ids(ids, 40, a, 1), 1);
	ck_assert_uint_eq(ig_block_chain_ids(ids, 15, a, 4), 0);
}
END_TEST

IG_CHECK_MAIN("blockhash", a_shared_prefix_shares_its_hashes, only_whole_blocks_up_to_max,
	      hashes_are_never_zero_and_see_every_byte, the_chain_of_ids_is_the_chain_of_their_bytes)
