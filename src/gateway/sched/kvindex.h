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
 * Writers (one events thread) and readers (the reactors, at each pick)
 * share it under its own read-write lock; bounded at max_blocks (source,
 * block) pairs, a store past that dropped and counted. */
#ifndef IG_SCHED_KVINDEX_H
#define IG_SCHED_KVINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "infergate/kvwire.h"

struct ig_kvindex;

struct ig_kvindex_stats {
	uint64_t blocks;            /* (source, block) pairs held now */
	uint64_t stored, removed, cleared;
	uint64_t orphans;           /* stored blocks whose parent was unknown: dropped */
	uint64_t unknown_removed;   /* removals of hashes not held */
	uint64_t full;              /* stores dropped at max_blocks */
	size_t bytes;               /* memory the index holds */
};

struct ig_kvindex *ig_kvindex_new(size_t nsrc, size_t max_blocks);
void ig_kvindex_free(struct ig_kvindex *ix);
/* An event of source src (< nsrc); STORED, REMOVED or CLEARED. */
void ig_kvindex_apply(struct ig_kvindex *ix, size_t src, const struct ig_kv_event *ev);
/* Forgets all of src's blocks (a restart, events that stopped). */
void ig_kvindex_clear(struct ig_kvindex *ix, size_t src);
/* matched[s] = how many leading tokens of the prompt source s holds (whole
 * blocks of its block size), for every s < nsrc. */
void ig_kvindex_match(struct ig_kvindex *ix, const uint32_t *tokens, size_t n, uint32_t *matched);
void ig_kvindex_stats(struct ig_kvindex *ix, size_t src, struct ig_kvindex_stats *out);

#endif
