/* Prompt prefixes as chains of block hashes, the one definition shared by
 * the simulator's prefix cache (src/sim/kvcache.c) and the gateway's
 * cache-aware routing: a prompt's text is cut into blocks of
 * IG_BLOCK_BYTES (about 16 tokens at 4 bytes a token, SGLang's and vLLM's
 * usual page of 16 tokens), and block i's hash covers blocks 1..i, so one
 * hash names a whole prefix (vLLM's prefix caching hashes its blocks the
 * same way: vllm/v1/core/kv_cache_utils.py hash_block_tokens takes the
 * parent block's hash). */
#ifndef IG_BLOCKHASH_H
#define IG_BLOCKHASH_H

#include <stddef.h>
#include <stdint.h>

#define IG_BLOCK_BYTES 64
#define IG_BLOCK_TOKENS 16

/* The hash of one more block after the prefix whose hash is `parent` (0
 * for the first block). Never 0. */
uint64_t ig_block_hash(uint64_t parent, const char *block, size_t n);
/* The chain of the first min(len / IG_BLOCK_BYTES, max) whole blocks of
 * text into out; returns how many. A partial last block is not hashed. */
size_t ig_block_chain(const char *text, size_t len, uint64_t *out, size_t max);

/* The chain of token ids (a tokenizer's) in blocks of IG_BLOCK_TOKENS, each
 * block hashed as its ids' 4-byte little-endian bytes: the key the
 * gateway's exact prefix index gives a block (src/gateway/sched/kvindex.h)
 * and the simulator's prefix cache with a tokenizer. Of text cut into ids
 * of 4 bytes each, the same chain as ig_block_chain's. Returns how many,
 * at most max. */
size_t ig_block_chain_ids(const uint32_t *ids, size_t n, uint64_t *out, size_t max);
/* One more block of IG_BLOCK_TOKENS ids after the prefix whose hash is
 * parent (0 for the first), as ig_block_chain_ids hashes it. */
uint64_t ig_block_hash_ids(uint64_t parent, const uint32_t *ids);

#endif
