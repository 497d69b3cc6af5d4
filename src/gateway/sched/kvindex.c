/* The exact prefix index (kvindex.h). Two kinds of hash table, both open
 * addressing with linear probing and deletion by backward shift (no
 * tombstones, so a table that churns for days probes as when new):
 *  - one table key -> holders: a slot of 24 bytes holds the key, the
 *    count and up to INLINE source ids sorted, or past that a pointer to a
 *    malloc'd sorted array (a system prompt held by every backend);
 *  - per source, engine hash -> key (the engine's REMOVED name blocks by
 *    its own hash), and key -> extra holds for the rare key a source holds
 *    under two engine hashes (vLLM's cache_salt or an image's hash change
 *    the engine's hash, not the token ids: kv_cache_utils.py
 *    generate_block_hash_extra_keys), so that removing one keeps the other.
 * Buckets are picked from the key mixed with a per-process secret: prompts
 * and engine hashes are chosen by clients, and unkeyed low bits could be
 * ground into one long probe run (affinity.c does the same).
 * Not here: which backend a match picks (the policies). */
#include "config.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/blockhash.h"
#include "infergate/util.h"
#include "sched/kvindex.h"

#define INLINE 6            /* holders in the slot itself */
#define MIN_CAP 64          /* a table's least capacity (power of two) */
#define AHEAD 16            /* keys of a prompt computed (and prefetched) ahead of the walk */
#define STACK_ALIVE 4096    /* sources a match keeps on the stack before it mallocs */

struct slot {
	uint64_t key;        /* 0: empty (ig_block_hash never gives 0) */
	uint16_t n;          /* holders */
	uint16_t cap;        /* 0: holders in `in`; else the capacity of the array whose pointer `in` holds */
	uint16_t in[INLINE];
};

struct table {
	struct slot *s;
	size_t cap, used;    /* cap a power of two, or 0 */
};

struct pair {
	uint64_t k, v;       /* v 0: empty (a key is never 0, nor an extra-hold count) */
};

struct map {
	struct pair *p;
	size_t cap, used;
};

struct counters {
	uint64_t stored, removed, cleared, orphans, unknown_removed, full, bad, other_medium;
};

struct source {
	uint32_t bs;         /* block size of its blocks; 0: none yet */
	struct map hkey;     /* engine hash -> key: its blocks, one pair each */
	struct map extra;    /* key -> holds beyond the first (see the top) */
	struct counters c;
};

struct bsize {
	uint32_t bs, nsrc;   /* a block size, and how many sources holding blocks have it */
};

struct ig_kvindex {
	pthread_rwlock_t lock;
	size_t nsrc, max_blocks;
	uint64_t secret;
	size_t blocks;       /* (source, block) pairs: the sum of the hkey maps' used */
	struct table t;
	size_t ovf_bytes, map_bytes;
	uint64_t bad_src;    /* events for a source past nsrc */
	struct source *src;
	struct bsize *sizes; /* nsizes of them, at most nsrc */
	size_t nsizes;
};

static inline uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline size_t home(const struct ig_kvindex *ix, uint64_t k, size_t cap)
{
	return (size_t)mix(k ^ ix->secret) & (cap - 1);
}

/* A block's key: its token ids as 4-byte little-endian integers. */
static inline uint64_t block_key(uint64_t parent, const uint32_t *tok, uint32_t bs)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return ig_block_hash(parent, (const char *)tok, (size_t)bs * 4);
#else
	unsigned char buf[IG_KVINDEX_MAX_BLOCK * 4];
	for (uint32_t i = 0; i < bs; i++)
		for (int b = 0; b < 4; b++)
			buf[i * 4 + b] = (unsigned char)(tok[i] >> (8 * b));
	return ig_block_hash(parent, (const char *)buf, (size_t)bs * 4);
#endif
}

/* The parent key of an adapter's first block: its own namespace. */
static uint64_t namespace_of(int64_t lora_id)
{
	if (lora_id < 0)
		return 0;
	unsigned char b[12] = {'l', 'o', 'r', 'a'};
	for (int i = 0; i < 8; i++)
		b[4 + i] = (unsigned char)((uint64_t)lora_id >> (8 * i));
	return ig_block_hash(0, (const char *)b, sizeof(b));
}

/* --- maps: u64 -> nonzero u64 -------------------------------------------- */

static struct pair *map_find(const struct ig_kvindex *ix, const struct map *m, uint64_t k)
{
	if (!m->cap)
		return NULL;
	for (size_t i = home(ix, k, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (!m->p[i].v)
			return NULL;
		if (m->p[i].k == k)
			return &m->p[i];
	}
}

/* Rehashes m into ncap pairs. Returns 0, or -1 (out of memory, m unchanged). */
static int map_resize(struct ig_kvindex *ix, struct map *m, size_t ncap)
{
	struct pair *p = calloc(ncap, sizeof(*p));
	if (!p)
		return -1;
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->p[i].v)
			continue;
		size_t j = home(ix, m->p[i].k, ncap);
		while (p[j].v)
			j = (j + 1) & (ncap - 1);
		p[j] = m->p[i];
	}
	free(m->p);
	ix->map_bytes += ncap * sizeof(*p);
	ix->map_bytes -= m->cap * sizeof(*p);
	m->p = p;
	m->cap = ncap;
	return 0;
}

/* Sets k -> v (v != 0). Returns 0, or -1 (out of memory). */
static int map_put(struct ig_kvindex *ix, struct map *m, uint64_t k, uint64_t v)
{
	struct pair *e = map_find(ix, m, k);
	if (e) {
		e->v = v;
		return 0;
	}
	if ((m->used + 1) * 4 > m->cap * 3 && map_resize(ix, m, m->cap ? m->cap * 2 : MIN_CAP) < 0)
		return -1;
	size_t i = home(ix, k, m->cap);
	while (m->p[i].v)
		i = (i + 1) & (m->cap - 1);
	m->p[i] = (struct pair){k, v};
	m->used++;
	return 0;
}

static void map_del(struct ig_kvindex *ix, struct map *m, struct pair *e)
{
	size_t mask = m->cap - 1, i = (size_t)(e - m->p);
	for (size_t j = (i + 1) & mask; m->p[j].v; j = (j + 1) & mask) {
		size_t h = home(ix, m->p[j].k, m->cap);
		/* j's pair may fill the hole at i when its home is not in (i, j] */
		if (((j - h) & mask) >= ((j - i) & mask)) {
			m->p[i] = m->p[j];
			i = j;
		}
	}
	m->p[i].v = 0;
	m->used--;
	if (m->cap > MIN_CAP && m->used * 8 < m->cap)
		map_resize(ix, m, m->cap / 2); /* out of memory: stays big, still right */
}

static void map_free(struct ig_kvindex *ix, struct map *m)
{
	ix->map_bytes -= m->cap * sizeof(*m->p);
	free(m->p);
	memset(m, 0, sizeof(*m));
}

/* --- the holders' table ------------------------------------------------- */

static inline uint16_t *holders(struct slot *s)
{
	if (!s->cap)
		return s->in;
	uint16_t *p;
	memcpy(&p, s->in, sizeof(p));
	return p;
}

static inline struct slot *slot_find(const struct ig_kvindex *ix, uint64_t k)
{
	const struct table *t = &ix->t;
	if (!t->cap)
		return NULL;
	for (size_t i = home(ix, k, t->cap);; i = (i + 1) & (t->cap - 1)) {
		if (!t->s[i].key)
			return NULL;
		if (t->s[i].key == k)
			return &t->s[i];
	}
}

/* Rehashes the holders' table into ncap slots (the overflow arrays move
 * with their slots). Returns 0, or -1 (out of memory, table unchanged). */
static int table_resize(struct ig_kvindex *ix, size_t ncap)
{
	struct table *t = &ix->t;
	struct slot *s = calloc(ncap, sizeof(*s));
	if (!s)
		return -1;
	for (size_t i = 0; i < t->cap; i++) {
		if (!t->s[i].key)
			continue;
		size_t j = home(ix, t->s[i].key, ncap);
		while (s[j].key)
			j = (j + 1) & (ncap - 1);
		s[j] = t->s[i];
	}
	free(t->s);
	t->s = s;
	t->cap = ncap;
	return 0;
}

/* Adds src to k's holders. Returns 1 when it held k already, 0 when
 * added, -1 when out of memory. */
static int hold(struct ig_kvindex *ix, uint64_t k, uint16_t src)
{
	struct table *t = &ix->t;
	struct slot *s = slot_find(ix, k);
	if (!s) {
		if ((t->used + 1) * 4 > t->cap * 3 && table_resize(ix, t->cap ? t->cap * 2 : MIN_CAP) < 0)
			return -1;
		size_t i = home(ix, k, t->cap);
		while (t->s[i].key)
			i = (i + 1) & (t->cap - 1);
		s = &t->s[i];
		memset(s, 0, sizeof(*s));
		s->key = k;
		s->n = 1;
		s->in[0] = src;
		t->used++;
		return 0;
	}
	uint16_t *h = holders(s);
	size_t lo = 0, hi = s->n; /* the first holder >= src */
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (h[mid] < src)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < s->n && h[lo] == src)
		return 1;
	size_t room = s->cap ? s->cap : INLINE;
	if (s->n == room) { /* to the heap, or a bigger array there */
		size_t ncap = room * 2 > ix->nsrc ? ix->nsrc : room * 2;
		uint16_t *p = malloc(ncap * sizeof(*p));
		if (!p)
			return -1;
		memcpy(p, h, s->n * sizeof(*p));
		if (s->cap) {
			free(h);
			ix->ovf_bytes -= s->cap * sizeof(*p);
		}
		ix->ovf_bytes += ncap * sizeof(*p);
		s->cap = (uint16_t)ncap;
		memcpy(s->in, &p, sizeof(p));
		h = p;
	}
	memmove(h + lo + 1, h + lo, (s->n - lo) * sizeof(*h));
	h[lo] = src;
	s->n++;
	return 0;
}

static void slot_del(struct ig_kvindex *ix, struct slot *s)
{
	struct table *t = &ix->t;
	size_t mask = t->cap - 1, i = (size_t)(s - t->s);
	if (s->cap) {
		free(holders(s));
		ix->ovf_bytes -= s->cap * sizeof(uint16_t);
	}
	for (size_t j = (i + 1) & mask; t->s[j].key; j = (j + 1) & mask) {
		size_t h = home(ix, t->s[j].key, t->cap);
		if (((j - h) & mask) >= ((j - i) & mask)) {
			t->s[i] = t->s[j];
			i = j;
		}
	}
	t->s[i].key = 0;
	t->used--;
	if (t->cap > MIN_CAP && t->used * 8 < t->cap)
		table_resize(ix, t->cap / 2);
}

/* Takes src out of k's holders, if there. */
static void unhold(struct ig_kvindex *ix, uint64_t k, uint16_t src)
{
	struct slot *s = slot_find(ix, k);
	if (!s)
		return;
	uint16_t *h = holders(s);
	size_t i = 0;
	while (i < s->n && h[i] < src)
		i++;
	if (i == s->n || h[i] != src)
		return;
	if (s->n == 1) {
		slot_del(ix, s);
		return;
	}
	memmove(h + i, h + i + 1, (s->n - i - 1) * sizeof(*h));
	s->n--;
	if (s->cap && s->n <= INLINE) { /* back into the slot */
		uint16_t tmp[INLINE];
		memcpy(tmp, h, s->n * sizeof(*h));
		free(h);
		ix->ovf_bytes -= s->cap * sizeof(*h);
		s->cap = 0;
		memcpy(s->in, tmp, s->n * sizeof(*h));
	}
}

/* --- sources --------------------------------------------------------------- */

static void size_ref(struct ig_kvindex *ix, uint32_t bs, int d)
{
	for (size_t i = 0; i < ix->nsizes; i++) {
		if (ix->sizes[i].bs != bs)
			continue;
		if (d > 0)
			ix->sizes[i].nsrc++;
		else if (--ix->sizes[i].nsrc == 0)
			ix->sizes[i] = ix->sizes[--ix->nsizes];
		return;
	}
	if (d > 0)
		ix->sizes[ix->nsizes++] = (struct bsize){bs, 1};
}

/* The source's holds of k drop by one. */
static void release(struct ig_kvindex *ix, struct source *s, uint16_t id, uint64_t k)
{
	struct pair *x = map_find(ix, &s->extra, k);
	if (!x)
		unhold(ix, k, id);
	else if (--x->v == 0)
		map_del(ix, &s->extra, x);
}

static void forget(struct ig_kvindex *ix, size_t id)
{
	struct source *s = &ix->src[id];
	for (size_t i = 0; i < s->hkey.cap; i++)
		if (s->hkey.p[i].v)
			unhold(ix, s->hkey.p[i].v, (uint16_t)id); /* twice for a key held twice: a no-op then */
	ix->blocks -= s->hkey.used;
	map_free(ix, &s->hkey);
	map_free(ix, &s->extra);
}

/* One block of src: engine hash eh, key k. Returns 0, or -1 when dropped
 * at the bound (or out of memory). */
static int store(struct ig_kvindex *ix, size_t id, uint64_t eh, uint64_t k)
{
	struct source *s = &ix->src[id];
	struct pair *e = map_find(ix, &s->hkey, eh);
	if (e && e->v == k)
		return 0; /* stored again: nothing new */
	if (e) { /* the engine reuses a hash for other tokens: the old block is gone */
		release(ix, s, (uint16_t)id, e->v);
		map_del(ix, &s->hkey, e);
		ix->blocks--;
	}
	if (ix->blocks >= ix->max_blocks)
		return -1;
	int r = hold(ix, k, (uint16_t)id);
	if (r < 0)
		return -1;
	if (map_put(ix, &s->hkey, eh, k) < 0)
		goto undo;
	if (r == 1) {
		struct pair *x = map_find(ix, &s->extra, k);
		if (map_put(ix, &s->extra, k, x ? x->v + 1 : 1) < 0) {
			map_del(ix, &s->hkey, map_find(ix, &s->hkey, eh));
			return -1;
		}
	}
	ix->blocks++;
	return 0;
undo:
	if (r == 0)
		unhold(ix, k, (uint16_t)id);
	return -1;
}

static int stored_ok(const struct ig_kv_event *ev)
{
	if (!ev->nhashes || !ev->hashes || !ev->tokens || !ev->block_size ||
	    ev->block_size > IG_KVINDEX_MAX_BLOCK)
		return 0;
	return ev->nhashes <= SIZE_MAX / ev->block_size && ev->ntokens == ev->nhashes * ev->block_size;
}

static void apply_stored(struct ig_kvindex *ix, size_t id, const struct ig_kv_event *ev)
{
	struct source *s = &ix->src[id];
	if (!stored_ok(ev)) {
		s->c.bad++;
		return;
	}
	if (s->bs != ev->block_size) { /* the engine restarted with other blocks */
		if (s->hkey.used)
			s->c.cleared++;
		forget(ix, id);
		s->bs = ev->block_size;
	}
	uint64_t parent = namespace_of(ev->lora_id);
	if (ev->has_parent) {
		struct pair *p = map_find(ix, &s->hkey, ev->parent);
		if (!p) {
			s->c.orphans += ev->nhashes;
			return;
		}
		parent = p->v;
	}
	for (size_t i = 0; i < ev->nhashes; i++) {
		parent = block_key(parent, ev->tokens + i * ev->block_size, ev->block_size);
		if (store(ix, id, ev->hashes[i], parent) < 0) {
			/* the rest chain from this one: a match would stop here anyway */
			s->c.full += ev->nhashes - i;
			return;
		}
		s->c.stored++;
	}
}

static void apply_removed(struct ig_kvindex *ix, size_t id, const struct ig_kv_event *ev)
{
	struct source *s = &ix->src[id];
	if (ev->nhashes && !ev->hashes) {
		s->c.bad++;
		return;
	}
	for (size_t i = 0; i < ev->nhashes; i++) {
		struct pair *e = map_find(ix, &s->hkey, ev->hashes[i]);
		if (!e) {
			s->c.unknown_removed++;
			continue;
		}
		uint64_t k = e->v;
		map_del(ix, &s->hkey, e);
		release(ix, s, (uint16_t)id, k);
		ix->blocks--;
		s->c.removed++;
	}
}

/* Under the write lock. */
static void apply(struct ig_kvindex *ix, size_t id, const struct ig_kv_event *ev)
{
	if (id >= ix->nsrc || !ev) {
		ix->bad_src++;
		return;
	}
	struct source *s = &ix->src[id];
	uint32_t bs = s->bs;
	int had = s->hkey.used > 0;
	if (!ev->gpu) /* an offload tier's blocks (vLLM's medium "CPU"): not where prefill reads */
		s->c.other_medium++;
	else if (ev->kind == IG_KV_STORED)
		apply_stored(ix, id, ev);
	else if (ev->kind == IG_KV_REMOVED)
		apply_removed(ix, id, ev);
	else if (ev->kind == IG_KV_CLEARED) {
		forget(ix, id);
		s->c.cleared++;
	} else
		s->c.bad++;
	int has = s->hkey.used > 0;
	if (had && (!has || bs != s->bs))
		size_ref(ix, bs, -1);
	if (has && (!had || bs != s->bs))
		size_ref(ix, s->bs, +1);
}

/* --- the interface ---------------------------------------------------------- */

struct ig_kvindex *ig_kvindex_new(size_t nsrc, size_t max_blocks)
{
	if (!nsrc || nsrc > IG_KVINDEX_MAX_SOURCES)
		return NULL;
	struct ig_kvindex *ix = calloc(1, sizeof(*ix));
	if (!ix)
		return NULL;
	pthread_rwlockattr_t attr;
	pthread_rwlockattr_init(&attr);
#ifdef __GLIBC__
	/* glibc prefers readers by default: reactors picking all the time
	 * would starve the events thread, and the index would lag the engines */
	pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
#endif
	int rc = pthread_rwlock_init(&ix->lock, &attr);
	pthread_rwlockattr_destroy(&attr);
	if (rc) {
		free(ix);
		return NULL;
	}
	ix->nsrc = nsrc;
	ix->max_blocks = max_blocks;
	ix->secret = ig_secret64();
	ix->src = calloc(nsrc, sizeof(*ix->src));
	ix->sizes = calloc(nsrc, sizeof(*ix->sizes));
	if (!ix->src || !ix->sizes) {
		ig_kvindex_free(ix);
		return NULL;
	}
	return ix;
}

void ig_kvindex_free(struct ig_kvindex *ix)
{
	if (!ix)
		return;
	for (size_t i = 0; ix->src && i < ix->nsrc; i++) {
		free(ix->src[i].hkey.p);
		free(ix->src[i].extra.p);
	}
	for (size_t i = 0; i < ix->t.cap; i++)
		if (ix->t.s[i].key && ix->t.s[i].cap)
			free(holders(&ix->t.s[i]));
	free(ix->t.s);
	free(ix->src);
	free(ix->sizes);
	pthread_rwlock_destroy(&ix->lock);
	free(ix);
}

void ig_kvindex_apply(struct ig_kvindex *ix, size_t src, const struct ig_kv_event *ev)
{
	pthread_rwlock_wrlock(&ix->lock);
	apply(ix, src, ev);
	pthread_rwlock_unlock(&ix->lock);
}

void ig_kvindex_apply_batch(struct ig_kvindex *ix, size_t src, const struct ig_kv_batch *b)
{
	pthread_rwlock_wrlock(&ix->lock);
	for (size_t i = 0; b && b->ev && i < b->nev; i++)
		apply(ix, src, &b->ev[i]);
	pthread_rwlock_unlock(&ix->lock);
}

void ig_kvindex_clear(struct ig_kvindex *ix, size_t src)
{
	pthread_rwlock_wrlock(&ix->lock);
	if (src < ix->nsrc && ix->src[src].hkey.used) {
		size_ref(ix, ix->src[src].bs, -1);
		forget(ix, src);
		ix->src[src].c.cleared++;
	}
	pthread_rwlock_unlock(&ix->lock);
}

/* The walk of one block size: alive holds the sources (sorted) that hold
 * every block so far; each block's holders (sorted too) cut it by a merge. */
static void walk(struct ig_kvindex *ix, uint32_t bs, uint64_t seed, const uint32_t *tokens, size_t nb,
		 uint32_t *matched, uint16_t *alive)
{
	uint64_t keys[AHEAD], parent = seed;
	size_t na = 0, have = 0, at = 0, i;
	for (i = 0; i < nb; i++) {
		if (at == have) { /* the next keys, their slots fetched while we merge */
			have = nb - i < AHEAD ? nb - i : AHEAD;
			for (size_t j = 0; j < have; j++) {
				keys[j] = parent = block_key(parent, tokens + (i + j) * bs, bs);
				__builtin_prefetch(&ix->t.s[home(ix, parent, ix->t.cap)]);
			}
			at = 0;
		}
		struct slot *s = slot_find(ix, keys[at++]);
		if (!s)
			break;
		const uint16_t *h = holders(s);
		if (i == 0) {
			for (size_t j = 0; j < s->n; j++)
				if (ix->src[h[j]].bs == bs) /* another size's key, by a collision */
					alive[na++] = h[j];
		} else if (s->n == na && !memcmp(h, alive, na * sizeof(*h))) {
			continue; /* a prefix shared by all that still match: the usual case */
		} else {
			size_t w = 0, j = 0;
			for (size_t r = 0; r < na; r++) {
				while (j < s->n && h[j] < alive[r])
					j++;
				if (j < s->n && h[j] == alive[r])
					alive[w++] = alive[r];
				else
					matched[alive[r]] = (uint32_t)(i * bs);
			}
			na = w;
		}
		if (!na)
			return;
	}
	for (size_t r = 0; r < na; r++)
		matched[alive[r]] = (uint32_t)(i * bs);
}

void ig_kvindex_match_lora(struct ig_kvindex *ix, int64_t lora_id, const uint32_t *tokens, size_t n,
			   uint32_t *matched)
{
	uint16_t stack[STACK_ALIVE], *alive = stack;
	memset(matched, 0, ix->nsrc * sizeof(*matched));
	if (!tokens || !n)
		return;
	if (n > UINT32_MAX)
		n = UINT32_MAX; /* matched[] counts in 32 bits */
	if (ix->nsrc > STACK_ALIVE && !(alive = malloc(ix->nsrc * sizeof(*alive))))
		return; /* out of memory: nothing matched, a pick still happens */
	uint64_t seed = namespace_of(lora_id);
	pthread_rwlock_rdlock(&ix->lock);
	for (size_t i = 0; i < ix->nsizes && ix->t.used; i++)
		walk(ix, ix->sizes[i].bs, seed, tokens, n / ix->sizes[i].bs, matched, alive);
	pthread_rwlock_unlock(&ix->lock);
	if (alive != stack)
		free(alive);
}

void ig_kvindex_match(struct ig_kvindex *ix, const uint32_t *tokens, size_t n, uint32_t *matched)
{
	ig_kvindex_match_lora(ix, -1, tokens, n, matched);
}

static void add(struct ig_kvindex_stats *o, const struct counters *c)
{
	o->stored += c->stored;
	o->removed += c->removed;
	o->cleared += c->cleared;
	o->orphans += c->orphans;
	o->unknown_removed += c->unknown_removed;
	o->full += c->full;
	o->bad += c->bad;
	o->other_medium += c->other_medium;
}

void ig_kvindex_stats(struct ig_kvindex *ix, size_t src, struct ig_kvindex_stats *out)
{
	memset(out, 0, sizeof(*out));
	pthread_rwlock_rdlock(&ix->lock);
	if (src < ix->nsrc) {
		const struct source *s = &ix->src[src];
		add(out, &s->c);
		out->blocks = s->hkey.used;
		out->block_size = s->bs;
		out->bytes = (s->hkey.cap + s->extra.cap) * sizeof(struct pair);
	} else {
		for (size_t i = 0; i < ix->nsrc; i++)
			add(out, &ix->src[i].c);
		out->bad += ix->bad_src;
		out->blocks = ix->blocks;
		out->bytes = sizeof(*ix) + ix->nsrc * (sizeof(*ix->src) + sizeof(*ix->sizes)) +
			     ix->t.cap * sizeof(struct slot) + ix->ovf_bytes + ix->map_bytes;
	}
	pthread_rwlock_unlock(&ix->lock);
}
