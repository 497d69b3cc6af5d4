/* The simulator's KV memory and prefix cache (kvcache.h): blocks in one
 * array, found by hash through a chained table of indexes, the
 * unreferenced ones in an LRU list; no allocation per block (the event
 * log, when on, allocates per event). */
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
	if (kv->log) {
		struct ig_kv_batch b = {.ev = kv->log->ev, .nev = kv->log->nev};
		ig_kv_batch_free(&b);
		free(kv->log);
	}
	free(kv->b);
	free(kv->tab);
	memset(kv, 0, sizeof(*kv));
}

/* ---- the event log (--kv-events) ---------------------------------------- */

int sim_kv_log_start(struct sim_kv *kv)
{
	if (!kv->log)
		kv->log = calloc(1, sizeof(*kv->log));
	return kv->log ? 0 : -1;
}

size_t sim_kv_log_take(struct sim_kv *kv, struct ig_kv_event **ev)
{
	*ev = NULL;
	if (!kv->log || kv->log->nev == 0)
		return 0;
	size_t n = kv->log->nev;
	*ev = kv->log->ev;
	memset(kv->log, 0, sizeof(*kv->log));
	return n;
}

void sim_kv_text_tokens(const char *text, size_t nblocks, uint32_t *out)
{
	const unsigned char *p = (const unsigned char *)text;
	for (size_t i = 0; i < nblocks * IG_BLOCK_TOKENS; i++, p += 4)
		out[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		abort(); /* a simulator out of memory: nothing sensible to go on with */
	return p;
}

static struct ig_kv_event *log_add(struct sim_kv_log *l, enum ig_kv_kind kind)
{
	if (l->nev == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->ev = realloc(l->ev, l->cap * sizeof(*l->ev));
		if (!l->ev)
			abort();
	}
	struct ig_kv_event *e = &l->ev[l->nev++];
	*e = (struct ig_kv_event){.kind = kind, .lora_id = -1, .gpu = true};
	return e;
}

/* Blocks first..first+n-1 of a chain joined the cache: one BlockStored,
 * its parent the block before (cached: referenced or just stored). */
static void log_stored(struct sim_kv *kv, const uint64_t *chain, const uint32_t *tokens, size_t first, size_t n)
{
	if (!tokens || n == 0 || !kv->log) /* ids without events: --tokenizer alone */
		return;
	struct ig_kv_event *e = log_add(kv->log, IG_KV_STORED);
	e->hashes = xmalloc(n * sizeof(*e->hashes));
	memcpy(e->hashes, chain + first, n * sizeof(*e->hashes));
	e->nhashes = n;
	e->has_parent = first > 0;
	e->parent = first > 0 ? chain[first - 1] : 0;
	e->ntokens = n * IG_BLOCK_TOKENS;
	e->tokens = xmalloc(e->ntokens * sizeof(*e->tokens));
	memcpy(e->tokens, tokens + first * IG_BLOCK_TOKENS, e->ntokens * sizeof(*e->tokens));
	e->block_size = IG_BLOCK_TOKENS;
}

/* An eviction: joins the BlockRemoved just before, if the last event is
 * one (evictions for one admission come as one event, as vLLM's do). */
static void log_removed(struct sim_kv *kv, uint64_t h)
{
	struct sim_kv_log *l = kv->log;
	struct ig_kv_event *e = l->nev && l->ev[l->nev - 1].kind == IG_KV_REMOVED ? &l->ev[l->nev - 1]
										   : log_add(l, IG_KV_REMOVED);
	size_t n = e->nhashes;
	if ((n & (n - 1)) == 0) { /* grown at every power of two */
		e->hashes = realloc(e->hashes, (n ? 2 * n : 1) * sizeof(*e->hashes));
		if (!e->hashes)
			abort();
	}
	e->hashes[e->nhashes++] = h;
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

/* Takes unreferenced block i out of the cache. */
static void drop(struct sim_kv *kv, int32_t i)
{
	lru_unlink(kv, i);
	int32_t *pp = &kv->tab[kv->b[i].hash & (kv->tabcap - 1)];
	while (*pp != i)
		pp = &kv->b[*pp].hnext;
	*pp = kv->b[i].hnext;
	kv->b[i].next = kv->free_head; /* the free list reuses `next` */
	kv->free_head = i;
	kv->live--;
}

/* Drops the least recently used unreferenced block. Returns 0, or -1 when
 * every block is referenced. */
static int evict_one(struct sim_kv *kv)
{
	int32_t i = kv->lru_head;
	if (i < 0)
		return -1;
	if (kv->log)
		log_removed(kv, kv->b[i].hash);
	drop(kv, i);
	kv->evicted++;
	return 0;
}

size_t sim_kv_flush(struct sim_kv *kv)
{
	size_t n = 0;
	while (kv->lru_head >= 0) {
		drop(kv, kv->lru_head);
		n++;
	}
	if (kv->log)
		log_add(kv->log, IG_KV_CLEARED);
	return n;
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
		sim_kv_release(kv, chain, NULL, m, m, 0);
		return -1;
	}
	kv->own += own;
	return 0;
}

/* A new cached block (unreferenced, most recent). Returns its index, or
 * -1 (out of memory). */
static int32_t insert(struct sim_kv *kv, uint64_t h)
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
	return i;
}

/* The order blocks become recent in decides what goes first: a chain's
 * deepest block must be the least recent, its first block the most, so
 * that eviction eats prefixes from their ends (SGLang's radix cache evicts
 * leaves only) and never leaves a deep block whose prefix is gone, which
 * no prompt could match. So the blocks go in shallowest first, each held
 * (referenced) until all are in, so that making room for one never evicts
 * another of the chain, and a block that finds no room ends the chain
 * there; then all are let go deepest first, shallowest last. Going in in
 * chain order also lets the BlockStored events name parents already
 * stored, as the engines' do. */
void sim_kv_release(struct sim_kv *kv, const uint64_t *chain, const uint32_t *tokens, size_t m, size_t n,
		    long own)
{
	kv->own -= own;
	size_t k = m, run = m; /* run: the first of the blocks stored since the last cached one */
	for (; k < n; k++) {
		int32_t i = find(kv, chain[k]);
		if (i >= 0) { /* cached meanwhile by another: touched */
			if (kv->log && k > run)
				log_stored(kv, chain, tokens, run, k - run);
			run = k + 1;
			ref(kv, i);
			continue;
		}
		if (make_room(kv, IG_BLOCK_TOKENS) < 0 || (i = insert(kv, chain[k])) < 0)
			break;
		ref(kv, i);
	}
	if (kv->log && k > run)
		log_stored(kv, chain, tokens, run, k - run);
	for (size_t j = k; j-- > 0;) {
		int32_t i = find(kv, chain[j]);
		if (i >= 0 && --kv->b[i].refs == 0)
			lru_append(kv, i);
	}
}
