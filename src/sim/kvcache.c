/* The simulator's KV memory and prefix cache (kvcache.h): blocks in one
 * array, found by hash through a chained table of indexes, the
 * unreferenced ones in an LRU list; no allocation per block. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"

int sim_kv_init(struct sim_kv *kv, long total)
{
	memset(kv, 0, sizeof(*kv));
	kv->total = total;
	kv->free_head = kv->lru_head = kv->lru_tail = -1;
	kv->tabcap = 1024;
	while (kv->tabcap < (size_t)(total / IG_BLOCK_TOKENS) && kv->tabcap < (1u << 24))
		kv->tabcap *= 2;
	kv->tab = malloc(kv->tabcap * sizeof(*kv->tab));
	if (!kv->tab)
		return -1;
	memset(kv->tab, 0xff, kv->tabcap * sizeof(*kv->tab)); /* -1 */
	return 0;
}

void sim_kv_free(struct sim_kv *kv)
{
	free(kv->b);
	free(kv->tab);
	memset(kv, 0, sizeof(*kv));
}

static int32_t find(const struct sim_kv *kv, uint64_t h)
{
	for (int32_t i = kv->tab[h & (kv->tabcap - 1)]; i >= 0; i = kv->b[i].hnext)
		if (kv->b[i].hash == h)
			return i;
	return -1;
}

static void lru_unlink(struct sim_kv *kv, int32_t i)
{
	struct sim_kv_block *x = &kv->b[i];
	if (x->prev >= 0)
		kv->b[x->prev].next = x->next;
	else
		kv->lru_head = x->next;
	if (x->next >= 0)
		kv->b[x->next].prev = x->prev;
	else
		kv->lru_tail = x->prev;
	x->prev = x->next = -1;
	kv->unref--;
}

static void lru_append(struct sim_kv *kv, int32_t i)
{
	struct sim_kv_block *x = &kv->b[i];
	x->prev = kv->lru_tail;
	x->next = -1;
	if (kv->lru_tail >= 0)
		kv->b[kv->lru_tail].next = i;
	else
		kv->lru_head = i;
	kv->lru_tail = i;
	kv->unref++;
}

/* Drops the least recently used unreferenced block. Returns 0, or -1 when
 * every block is referenced. */
static int evict_one(struct sim_kv *kv)
{
	int32_t i = kv->lru_head;
	if (i < 0)
		return -1;
	lru_unlink(kv, i);
	int32_t *pp = &kv->tab[kv->b[i].hash & (kv->tabcap - 1)];
	while (*pp != i)
		pp = &kv->b[*pp].hnext;
	*pp = kv->b[i].hnext;
	kv->b[i].next = kv->free_head; /* the free list reuses `next` */
	kv->free_head = i;
	kv->live--;
	kv->evicted++;
	return 0;
}

/* Room for `tokens` more. Returns 0 or -1. */
static int make_room(struct sim_kv *kv, long tokens)
{
	while (sim_kv_used(kv) + tokens > kv->total)
		if (evict_one(kv) < 0)
			return -1;
	return 0;
}

size_t sim_kv_match(const struct sim_kv *kv, const uint64_t *chain, size_t n)
{
	size_t m = 0;
	while (m < n && find(kv, chain[m]) >= 0)
		m++;
	return m;
}

static void ref(struct sim_kv *kv, int32_t i)
{
	if (kv->b[i].refs++ == 0)
		lru_unlink(kv, i);
}

int sim_kv_admit(struct sim_kv *kv, const uint64_t *chain, size_t m, long own, long reserve)
{
	/* Referenced first, so that making room cannot evict them. */
	for (size_t k = 0; k < m; k++)
		ref(kv, find(kv, chain[k]));
	/* Decided before evicting anything: a refusal changes nothing. */
	if (sim_kv_used(kv) - (long)kv->unref * IG_BLOCK_TOKENS + own + reserve > kv->total ||
	    make_room(kv, own + reserve) < 0) {
		sim_kv_release(kv, chain, m, m, 0);
		return -1;
	}
	kv->own += own;
	return 0;
}

/* A new cached block (unreferenced, most recent). Returns 0 or -1. */
static int insert(struct sim_kv *kv, uint64_t h)
{
	int32_t i;
	if (kv->free_head >= 0) {
		i = kv->free_head;
		kv->free_head = kv->b[i].next;
	} else {
		if (kv->nb == kv->capb) {
			size_t cap = kv->capb ? kv->capb * 2 : 1024;
			struct sim_kv_block *v = realloc(kv->b, cap * sizeof(*v));
			if (!v)
				return -1;
			kv->b = v;
			kv->capb = cap;
		}
		i = (int32_t)kv->nb++;
	}
	kv->b[i] = (struct sim_kv_block){.hash = h, .refs = 0, .prev = -1, .next = -1};
	kv->b[i].hnext = kv->tab[h & (kv->tabcap - 1)];
	kv->tab[h & (kv->tabcap - 1)] = i;
	kv->live++;
	lru_append(kv, i);
	return 0;
}

/* The order blocks become recent in decides what goes first: a chain's
 * deepest block must be the least recent, its first block the most, so
 * that eviction eats prefixes from their ends (SGLang's radix cache evicts
 * leaves only) and never leaves a deep block whose prefix is gone, which
 * no prompt could match. So the new blocks go in deepest first, then the
 * referenced ones, shallowest last. */
void sim_kv_release(struct sim_kv *kv, const uint64_t *chain, size_t m, size_t n, long own)
{
	kv->own -= own;
	for (size_t k = n; k-- > m;) {
		int32_t i = find(kv, chain[k]);
		if (i >= 0) {
			if (kv->b[i].refs == 0) { /* cached meanwhile by another: touched */
				lru_unlink(kv, i);
				lru_append(kv, i);
			}
			continue;
		}
		if (make_room(kv, IG_BLOCK_TOKENS) < 0 || insert(kv, chain[k]) < 0)
			break;
	}
	for (size_t k = m; k-- > 0;) {
		int32_t i = find(kv, chain[k]);
		if (i >= 0 && --kv->b[i].refs == 0)
			lru_append(kv, i);
	}
}
