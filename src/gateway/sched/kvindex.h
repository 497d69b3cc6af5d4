/* The exact prefix index: per source (a backend, or one DP rank of it) the
 * blocks its engine says it holds, from its KV events
 * (src/gateway/fleet/kvevents.c). Keyed by the gateway's own hash of
 * token-id blocks, as llm-d's precise prefix scorer does, so the engine's
 * hash function and seed need not be known: a block's key is
 * ig_block_hash(parent's key, its token ids as 4-byte little-endian
 * integers, block_size x 4 bytes), the first block's parent key 0. A prompt
 * of n token ids is looked up the same way. With infergate-sim's own
 * tokens (4 bytes of text each, no tokenizer) and blocks of 16 tokens the
 * key of a prompt's block equals ig_block_chain's over its text.
 *
 * A LoRA adapter's blocks are another namespace: the first block's parent
 * key is a hash of the adapter id instead of 0 (vLLM puts the adapter in
 * its block hash: vllm/v1/core/kv_cache_utils.py, extra keys), so a
 * prompt matches them only when looked up with that id. What the engine
 * mixes in beyond the token ids (vLLM's cache_salt, images' hashes) the
 * gateway does not see: two requests with the same token ids there match
 * the same blocks, a guess that may be wrong for images.
 *
 * Each source has one block size, its STORED events': a STORED of another
 * size clears the source first (the engine restarted with other blocks).
 * Blocks of another medium than the GPU (an offload tier) are ignored.
 * Hostile events (no hashes, ntokens not nhashes x block_size, block size
 * 0 or past IG_KVINDEX_MAX_BLOCK) are ignored and counted, never trusted.
 *
 * Writers (one events thread) and readers (the reactors, at each pick)
 * share it under its own read-write lock, writers preferred (every
 * function may be called from any thread); bounded at
 * max_blocks (source, block) pairs, a store past that dropped and counted.
 * Memory (tests/tools/kvindex_bench.c): a block held by one source costs
 * a 24-byte slot and a 16-byte pair, in tables doubled at 3/4 full: 53 to
 * 84 bytes, 84 MB measured for a million blocks on 8 sources (RSS 87 MB);
 * a key held by several sources costs its slot once (47 MB per million
 * pairs with 200 sources sharing a 100k-token prompt). */
#ifndef IG_SCHED_KVINDEX_H
#define IG_SCHED_KVINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "infergate/kvwire.h"

struct ig_kvindex;

#define IG_KVINDEX_MAX_SOURCES 65535 /* ids kept in 16 bits */
#define IG_KVINDEX_MAX_BLOCK 4096    /* tokens a block: engines use 1 to a few hundred */
#define IG_KVINDEX_ALL ((size_t)-1)  /* ig_kvindex_stats: the whole index */

struct ig_kvindex_stats {
	uint64_t blocks;            /* (source, block) pairs held now */
	uint64_t stored, removed, cleared;
	uint64_t orphans;           /* stored blocks whose parent was unknown: dropped */
	uint64_t unknown_removed;   /* removals of hashes not held */
	uint64_t full;              /* stores dropped at max_blocks (or out of memory) */
	uint64_t bad;               /* hostile events ignored (and events for a source past nsrc) */
	uint64_t other_medium;      /* events of another medium than the GPU, ignored */
	uint32_t block_size;        /* a source's: 0 before its first STORED (0 for the whole index) */
	size_t bytes;               /* memory the index (or the source's own maps) holds */
};

/* nsrc at most IG_KVINDEX_MAX_SOURCES. NULL: out of memory, or nsrc 0 or
 * too many. */
struct ig_kvindex *ig_kvindex_new(size_t nsrc, size_t max_blocks);
void ig_kvindex_free(struct ig_kvindex *ix);
/* An event of source src (< nsrc); STORED, REMOVED or CLEARED. */
void ig_kvindex_apply(struct ig_kvindex *ix, size_t src, const struct ig_kv_event *ev);
/* Every event of a batch, in order, under one write lock. The caller has
 * chosen src from the backend and the batch's dp_rank. */
void ig_kvindex_apply_batch(struct ig_kvindex *ix, size_t src, const struct ig_kv_batch *b);
/* Forgets all of src's blocks (a restart, events that stopped). */
void ig_kvindex_clear(struct ig_kvindex *ix, size_t src);
/* matched[s] = how many leading tokens of the prompt source s holds (whole
 * blocks of its block size), for every s < nsrc. */
void ig_kvindex_match(struct ig_kvindex *ix, const uint32_t *tokens, size_t n, uint32_t *matched);
/* The same for a request on LoRA adapter lora_id (-1: the base model, as
 * ig_kvindex_match). Allocates nothing unless nsrc is past 4096. */
void ig_kvindex_match_lora(struct ig_kvindex *ix, int64_t lora_id, const uint32_t *tokens, size_t n,
			   uint32_t *matched);
/* The same for a prompt whose block keys the caller has already (the
 * request's chain, blockhash.h ig_block_chain_ids: blocks of IG_BLOCK_TOKENS,
 * the base model): only sources of that block size can match; the keys are
 * not hashed again. matched[s] in tokens. */
void ig_kvindex_match_chain(struct ig_kvindex *ix, const uint64_t *chain, size_t nb, uint32_t *matched);
/* Source src's counters and blocks, or with IG_KVINDEX_ALL the whole
 * index's (bytes: all the index's memory). */
void ig_kvindex_stats(struct ig_kvindex *ix, size_t src, struct ig_kvindex_stats *out);

#endif
