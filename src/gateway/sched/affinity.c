/* Per-backend records of prefixes sent (affinity.h). A record is an array
 * of entries (hash, LRU links, hash chain: 24 bytes), grown by doubling up
 * to max_blocks, and its buckets, made on the backend's first insert;
 * entries link by index, never by pointer, so the array can move. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "sched/affinity.h"

struct entry {
	uint64_t hash;
	int32_t prev, next;   /* LRU: least recent at head; free list via next */
	int32_t hnext;        /* bucket chain */
	int32_t pad;
};

struct record {
	struct entry *e;
	size_t cap;           /* entries allocated: grows to max_blocks as used */
	int32_t *bucket;      /* max_blocks rounded up to a power of two */
	size_t nbucket, used;
	int32_t head, tail, free_head;
	size_t top;           /* entries handed out so far */
};

struct ig_affinity {
	size_t max_blocks;
	uint64_t key;         /* secret mixed into bucket choice (below) */
	struct record *r;     /* by backend id */
	size_t nr;
};

struct ig_affinity *ig_affinity_new(size_t max_blocks)
{
	struct ig_affinity *a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	a->max_blocks = max_blocks ? max_blocks : 1;
	/* Block hashes are not keyed (the simulator computes the same ones),
	 * and clients choose the text: a bucket picked by a hash's low bits
	 * could be flooded by crafted prompts into one long chain. A secret
	 * per process, mixed in before the bits are taken, prevents that. */
	a->key = ig_secret64();
	return a;
}

/* The bucket of hash h: h keyed, then mixed by the tree's splitmix64 step. */
static size_t bucket_of(uint64_t key, uint64_t h, size_t nbucket)
{
	uint64_t z = h ^ key;
	return (size_t)ig_rand_next(&z) & (nbucket - 1);
}

static void record_free(struct record *r)
{
	free(r->e);
	free(r->bucket);
	memset(r, 0, sizeof(*r));
}

void ig_affinity_free(struct ig_affinity *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->nr; i++)
		record_free(&a->r[i]);
	free(a->r);
	free(a);
}

static const struct record *record_of(const struct ig_affinity *a, int backend)
{
	return backend >= 0 && (size_t)backend < a->nr && a->r[backend].e ? &a->r[backend] : NULL;
}

static int32_t find(const struct ig_affinity *a, const struct record *r, uint64_t h)
{
	for (int32_t i = r->bucket[bucket_of(a->key, h, r->nbucket)]; i >= 0; i = r->e[i].hnext)
		if (r->e[i].hash == h)
			return i;
	return -1;
}

size_t ig_affinity_match(const struct ig_affinity *a, int backend, const uint64_t *chain, size_t n)
{
	const struct record *r = record_of(a, backend);
	size_t lo = 0, hi = n; /* chain[lo-1] present (lo 0: nothing), chain[hi] absent or past the end */
	if (!r)
		return 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo + 1) / 2;
		if (find(a, r, chain[mid - 1]) >= 0)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

/* A record for the backend, made on first use. NULL: out of memory. */
static struct record *record_get(struct ig_affinity *a, int backend)
{
	if (backend < 0)
		return NULL;
	if ((size_t)backend >= a->nr) {
		size_t nr = (size_t)backend + 8;
		struct record *v = realloc(a->r, nr * sizeof(*v));
		if (!v)
			return NULL;
		memset(v + a->nr, 0, (nr - a->nr) * sizeof(*v));
		a->r = v;
		a->nr = nr;
	}
	struct record *r = &a->r[backend];
	if (!r->e) {
		size_t nb = 16;
		while (nb < a->max_blocks)
			nb *= 2;
		r->cap = a->max_blocks < 256 ? a->max_blocks : 256;
		r->e = malloc(r->cap * sizeof(*r->e));
		r->bucket = malloc(nb * sizeof(*r->bucket));
		if (!r->e || !r->bucket) {
			record_free(r);
			return NULL;
		}
		memset(r->bucket, 0xff, nb * sizeof(*r->bucket));
		r->nbucket = nb;
		r->head = r->tail = r->free_head = -1;
	}
	return r;
}

static void unlink_lru(struct record *r, int32_t i)
{
	struct entry *x = &r->e[i];
	if (x->prev >= 0)
		r->e[x->prev].next = x->next;
	else
		r->head = x->next;
	if (x->next >= 0)
		r->e[x->next].prev = x->prev;
	else
		r->tail = x->prev;
}

static void append_lru(struct record *r, int32_t i)
{
	r->e[i].prev = r->tail;
	r->e[i].next = -1;
	if (r->tail >= 0)
		r->e[r->tail].next = i;
	else
		r->head = i;
	r->tail = i;
}

static void evict_head(const struct ig_affinity *a, struct record *r)
{
	int32_t i = r->head;
	unlink_lru(r, i);
	int32_t *pp = &r->bucket[bucket_of(a->key, r->e[i].hash, r->nbucket)];
	while (*pp != i)
		pp = &r->e[*pp].hnext;
	*pp = r->e[i].hnext;
	r->e[i].next = r->free_head;
	r->free_head = i;
	r->used--;
}

void ig_affinity_insert(struct ig_affinity *a, int backend, const uint64_t *chain, size_t n)
{
	struct record *r = record_get(a, backend);
	if (!r)
		return;
	/* Deepest first, so a prefix's first blocks end up the most recent
	 * and are evicted last (a deep block without its prefix matches
	 * nothing, and the binary search assumes they go in that order). */
	for (size_t k = n; k-- > 0;) {
		int32_t i = find(a, r, chain[k]);
		if (i >= 0) {
			unlink_lru(r, i);
			append_lru(r, i);
			continue;
		}
		if (r->used == a->max_blocks)
			evict_head(a, r);
		if (r->free_head >= 0) {
			i = r->free_head;
			r->free_head = r->e[i].next;
		} else {
			if (r->top == r->cap) {
				size_t cap = r->cap * 2 < a->max_blocks ? r->cap * 2 : a->max_blocks;
				struct entry *v = realloc(r->e, cap * sizeof(*v));
				if (!v)
					return; /* records less */
				r->e = v;
				r->cap = cap;
			}
			i = (int32_t)r->top++;
		}
		size_t bk = bucket_of(a->key, chain[k], r->nbucket);
		r->e[i].hash = chain[k];
		r->e[i].hnext = r->bucket[bk];
		r->bucket[bk] = i;
		append_lru(r, i);
		r->used++;
	}
}

void ig_affinity_forget(struct ig_affinity *a, int backend)
{
	if (backend >= 0 && (size_t)backend < a->nr)
		record_free(&a->r[backend]);
}

size_t ig_affinity_blocks(const struct ig_affinity *a, int backend)
{
	const struct record *r = record_of(a, backend);
	return r ? r->used : 0;
}

size_t ig_affinity_bytes(const struct ig_affinity *a)
{
	size_t b = sizeof(*a) + a->nr * sizeof(*a->r);
	for (size_t i = 0; i < a->nr; i++)
		if (a->r[i].e)
			b += a->r[i].cap * sizeof(struct entry) + a->r[i].nbucket * sizeof(int32_t);
	return b;
}
