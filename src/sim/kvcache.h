/* A simulated server's KV memory, in tokens, and its prefix cache over
 * blocks of IG_BLOCK_TOKENS (include/infergate/blockhash.h). What a real
 * engine does, reduced to counts: a running request holds the cached
 * blocks its prompt began with (referenced, so they stay) and its own
 * tokens (the rest of its prompt, and what it generated); when it ends, its
 * prompt's blocks join the cache, unreferenced; unreferenced blocks are
 * evicted least recently used when a request needs room. SGLang's radix
 * cache (python/sglang/srt/mem_cache/radix_cache.py: evict() takes leaves
 * with lock_ref 0 by last access) and vLLM's prefix caching
 * (vllm/v1/core/block_pool.py: a free queue of blocks with ref_cnt 0, least
 * recently used first) both work this way.
 * With --kv-events it also records what changed, as the engines report it
 * (BlockStored, BlockRemoved, AllBlocksCleared: include/infergate/kvwire.h),
 * for the engine to publish once per step; without, nothing is recorded.
 * Not here: when requests run (engine.c), the sockets (common/kvpub.c). */
#ifndef IG_SIM_KVCACHE_H
#define IG_SIM_KVCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "infergate/blockhash.h"
#include "infergate/kvwire.h"

/* The changes recorded since the engine last took them, oldest first. */
struct sim_kv_log {
	struct ig_kv_event *ev;
	size_t nev, cap;
};

struct sim_kv_block {
	uint64_t hash;
	uint32_t refs;               /* running requests that began with it */
	int32_t prev, next;          /* LRU of unreferenced blocks; free list */
	int32_t hnext;               /* hash chain */
};

struct sim_kv {
	long total;                  /* the budget in tokens */
	long own;                    /* tokens of running requests outside cached blocks */
	struct sim_kv_block *b;
	size_t nb, capb;             /* slots used of b (live + free list) */
	size_t live;                 /* cached blocks */
	int32_t free_head;           /* reusable slots of b, -1 none */
	int32_t *tab;                /* hash -> first block, -1 empty */
	size_t tabcap;               /* a power of two */
	int32_t lru_head, lru_tail;  /* unreferenced blocks, least recent first */
	size_t unref;                /* how many (evictable) */
	uint64_t evicted;            /* blocks evicted so far */
	struct sim_kv_log *log;      /* NULL: changes not recorded (no --kv-events) */
};

/* Returns 0 or -1 (out of memory). total: the budget in tokens. */
int sim_kv_init(struct sim_kv *kv, long total);
void sim_kv_free(struct sim_kv *kv);
/* Tokens in use: cached blocks and running requests' own tokens. */
static inline long sim_kv_used(const struct sim_kv *kv)
{
	return (long)kv->live * IG_BLOCK_TOKENS + kv->own;
}
/* How many leading blocks of chain are cached. */
size_t sim_kv_match(const struct sim_kv *kv, const uint64_t *chain, size_t n);
/* Admits a request whose first m chain blocks are cached (m from
 * sim_kv_match) and that brings `own` more tokens, with room for `reserve`
 * more (its output): references the m blocks and evicts unreferenced ones
 * as needed. Returns 0, or -1 when it does not fit (nothing changed). */
int sim_kv_admit(struct sim_kv *kv, const uint64_t *chain, size_t m, long own, long reserve);
/* A request that ends: lets go of its m referenced blocks and its own
 * tokens, and caches the rest of its chain (blocks m..n), as far as room
 * allows. tokens: the chain's token ids, IG_BLOCK_TOKENS a block, for the
 * BlockStored events (NULL when changes are not recorded). */
void sim_kv_release(struct sim_kv *kv, const uint64_t *chain, const uint32_t *tokens, size_t m, size_t n,
		    long own);
/* Drops every unreferenced block (SGLang's /flush_cache, vLLM's
 * reset_prefix_cache: both only when nothing runs); one AllBlocksCleared.
 * Returns how many blocks were dropped. */
size_t sim_kv_flush(struct sim_kv *kv);

/* Starts recording changes. Returns 0 or -1 (out of memory). */
int sim_kv_log_start(struct sim_kv *kv);
/* The changes recorded since the last call, oldest first, into *ev
 * (malloc'd with each event's arrays; NULL when none): returns how many.
 * The caller frees them (ig_kv_batch_free on a batch holding them). */
size_t sim_kv_log_take(struct sim_kv *kv, struct ig_kv_event **ev);
/* The simulator's own token ids of nblocks whole blocks of text: each 4
 * bytes read as a little-endian integer, 16 a block, so that the gateway's
 * key of a block (ig_block_hash over its token ids as 4-byte little-endian
 * integers, src/gateway/sched/kvindex.h) is ig_block_chain's over the text.
 * A request's token ids may come from elsewhere (a real tokenizer): the
 * cache only carries what it is given. */
void sim_kv_text_tokens(const char *text, size_t nblocks, uint32_t *out);

#endif
