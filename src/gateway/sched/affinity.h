/* Cache-aware routing's memory: for each backend, the prompt prefixes it
 * was sent recently, as chained block hashes (include/infergate/blockhash.h:
 * one hash names a whole prefix, as vLLM's router and its prefix caching
 * hash blocks). Chosen over a radix tree of text (SGLang's gateway) because
 * a record is then a set of 8-byte hashes: bounded memory per backend
 * (max_blocks entries of 24 bytes), no text kept, O(1) insert, and a match
 * is a binary search over the request's chain. Each record is least
 * recently used first, a prefix's deepest blocks before its first ones.
 * Not here: which backend is picked (router.c). */
#ifndef IG_AFFINITY_H
#define IG_AFFINITY_H

#include <stddef.h>
#include <stdint.h>

struct ig_affinity;

/* Records of at most max_blocks blocks per backend. NULL: out of memory. */
struct ig_affinity *ig_affinity_new(size_t max_blocks);
void ig_affinity_free(struct ig_affinity *a);
/* The longest k such that chain[k-1] is in the backend's record (0 for an
 * unknown backend). Presence is taken as monotone (a prefix's first blocks
 * are kept longer than its last), so this is a binary search. */
size_t ig_affinity_match(const struct ig_affinity *a, int backend, const uint64_t *chain, size_t n);
/* The backend was sent this prefix: every block recorded or made recent. */
void ig_affinity_insert(struct ig_affinity *a, int backend, const uint64_t *chain, size_t n);
/* The backend is gone or restarted: its cache, and its record, are empty. */
void ig_affinity_forget(struct ig_affinity *a, int backend);
size_t ig_affinity_blocks(const struct ig_affinity *a, int backend);
/* Memory held by every record, bytes. */
size_t ig_affinity_bytes(const struct ig_affinity *a);

#endif
