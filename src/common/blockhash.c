/* Chained block hashes (include/infergate/blockhash.h). Eight bytes at a
 * time through a multiply-xorshift mix (splitmix64's finaliser): fast, well
 * spread, not cryptographic; a collision costs a wrong routing guess or a
 * simulated cache hit, never correctness. */
#include "config.h"
#include <string.h>

#include "infergate/blockhash.h"

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

uint64_t ig_block_hash(uint64_t parent, const char *block, size_t n)
{
	uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ull ^ (uint64_t)n);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, block + i, 8);
		h = mix(h ^ w) + 0x9e3779b97f4a7c15ull;
	}
	if (i < n) {
		uint64_t w = 0;
		memcpy(&w, block + i, n - i);
		h = mix(h ^ w ^ 0xff);
	}
	return h ? h : 1;
}

size_t ig_block_chain(const char *text, size_t len, uint64_t *out, size_t max)
{
	size_t n = len / IG_BLOCK_BYTES;
	if (n > max)
		n = max;
	uint64_t h = 0;
	for (size_t i = 0; i < n; i++)
		out[i] = h = ig_block_hash(h, text + i * IG_BLOCK_BYTES, IG_BLOCK_BYTES);
	return n;
}

uint64_t ig_block_hash_ids(uint64_t parent, const uint32_t *ids)
{
	unsigned char block[IG_BLOCK_BYTES];
	for (size_t t = 0; t < IG_BLOCK_TOKENS; t++)
		for (size_t k = 0; k < 4; k++)
			block[t * 4 + k] = (unsigned char)(ids[t] >> (8 * k));
	return ig_block_hash(parent, (const char *)block, sizeof(block));
}

size_t ig_block_chain_ids(const uint32_t *ids, size_t n, uint64_t *out, size_t max)
{
	size_t nb = n / IG_BLOCK_TOKENS < max ? n / IG_BLOCK_TOKENS : max;
	uint64_t h = 0;
	for (size_t b = 0; b < nb; b++)
		out[b] = h = ig_block_hash_ids(h, ids + b * IG_BLOCK_TOKENS);
	return nb;
}
