/* The tokenizer's model (src/common/tokenizer_int.h): byte-level BPE as
 * huggingface/tokenizers does it (tokenizers/src/models/bpe/model.rs and
 * word.rs). A pre-token's bytes start as one symbol each (the byte's token
 * in GPT-2's alphabet); the adjacent pair of lowest merge rank merges
 * first, the leftmost of equal ranks, until no pair has a merge. Not for:
 * dropout, byte fallback, unknown tokens (refused at load).
 *
 * Merges are looked up by (left id, right id) in one open-addressed table;
 * short words take the pairs by a linear scan, long ones (a run of 5,000
 * letters is one pre-token) through a heap as word.rs's merge_all does, so
 * a long word costs n log n, not n squared. Words are cached (model.rs
 * keeps a cache of words too): 16 shards, each a direct-mapped table
 * behind its own mutex, so encoding threads rarely meet. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/blockhash.h"
#include "tokenizer_int.h"

/* Words longer than this are not cached (model.rs keeps words up to 256
 * chars; shorter here so that the cache stays small: 16 x 2,048 entries
 * of at most 64 bytes and 64 ids, under 11 MB whatever the text, about
 * 1.5 MB on prose). It halves the time of prose and CJK text. */
#define CACHE_MAX_BYTES 64
/* Words up to this many bytes take the linear scan. */
#define LINEAR_MAX 48

struct tok_cached {
	uint64_t hash;
	uint32_t len, nids;
	uint32_t data[];        /* nids ids, then len bytes */
};

static uint64_t mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static size_t pow2_at_least(size_t n)
{
	size_t p = 16;
	while (p < n)
		p <<= 1;
	return p;
}

/* ---- the model ------------------------------------------------------------ */

int tok_bpe_init(struct tok_bpe *b, size_t vocab_n, size_t merges_n)
{
	memset(b, 0, sizeof(*b));
	size_t slots = pow2_at_least(merges_n * 2 + 16);
	b->merges = malloc(slots * sizeof(*b->merges));
	if (!b->merges || tok_map_init(&b->vocab, vocab_n) < 0)
		return -1;
	for (size_t i = 0; i < slots; i++)
		b->merges[i].key = UINT64_MAX;
	b->merge_mask = slots - 1;
	b->cache_slots = 2048;
	for (int i = 0; i < TOK_CACHE_SHARDS; i++) {
		pthread_mutex_init(&b->cache[i].lock, NULL);
		b->cache[i].slot = calloc(b->cache_slots, sizeof(*b->cache[i].slot));
		if (!b->cache[i].slot)
			return -1;
	}
	return 0;
}

void tok_bpe_free(struct tok_bpe *b)
{
	tok_map_free(&b->vocab);
	tok_map_free(&b->raw);
	free(b->merges);
	for (int i = 0; i < TOK_CACHE_SHARDS; i++) {
		if (!b->cache[i].slot)
			continue;
		for (size_t j = 0; j < b->cache_slots; j++)
			free(b->cache[i].slot[j]);
		free(b->cache[i].slot);
		pthread_mutex_destroy(&b->cache[i].lock);
	}
	memset(b, 0, sizeof(*b));
}

/* The UTF-8 of one code point (< 0x800 is all this alphabet needs). */
static size_t put_char(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	o[0] = (char)(0xc0 | (cp >> 6));
	o[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

/* s in the byte-level alphabet as raw bytes into o (room for len); its
 * length, or -1 when a character is outside the alphabet. */
static long to_raw(const char *s, size_t len, char *o)
{
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		uint8_t c = (uint8_t)s[i];
		uint32_t cp;
		if (c < 0x80) {
			cp = c;
			i++;
		} else if ((c & 0xe0) == 0xc0 && i + 1 < len) {
			cp = ((uint32_t)(c & 0x1f) << 6) | ((uint8_t)s[i + 1] & 0x3f);
			i += 2;
		} else {
			return -1;
		}
		int byte = tok_char_byte(cp);
		if (byte < 0)
			return -1;
		o[n++] = (char)byte;
	}
	return (long)n;
}

int tok_bpe_finish_vocab(struct tok_bpe *b, char *err, size_t errlen)
{
	for (int i = 0; i < 256; i++) {
		char s[2];
		size_t n = put_char(s, tok_byte_char((uint8_t)i));
		long id = tok_map_get(&b->vocab, s, n);
		if (id < 0) {
			snprintf(err, errlen, "model: the vocab has no token for byte 0x%02x ('%.*s'): not a byte-level BPE",
				 i, (int)n, s);
			return -1;
		}
		b->byte_id[i] = (uint32_t)id;
	}
	if (!b->ignore_merges)
		return 0;
	/* A vocab entry outside the alphabet can never be a pre-token's bytes:
	 * left out of the raw map. */
	if (tok_map_init(&b->raw, b->vocab.n) < 0)
		goto oom;
	char *buf = NULL;
	size_t bufcap = 0;
	for (size_t i = 0; i < b->vocab.n; i++) {
		const struct tok_entry *e = &b->vocab.ent[i];
		if (e->len > bufcap) {
			char *nb = realloc(buf, e->len);
			if (!nb) {
				free(buf);
				goto oom;
			}
			buf = nb;
			bufcap = e->len;
		}
		long n = to_raw(b->vocab.arena + e->off, e->len, buf);
		if (n >= 0 && tok_map_put(&b->raw, buf, (size_t)n, e->id) < 0) {
			free(buf);
			goto oom;
		}
	}
	free(buf);
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

static const struct tok_merge *merge_get(const struct tok_bpe *b, uint32_t l, uint32_t r)
{
	uint64_t key = (uint64_t)l << 32 | r;
	for (size_t j = mix(key) & b->merge_mask;; j = (j + 1) & b->merge_mask) {
		const struct tok_merge *m = &b->merges[j];
		if (m->key == key)
			return m;
		if (m->key == UINT64_MAX)
			return NULL;
	}
}

int tok_bpe_add_merge(struct tok_bpe *b, uint32_t rank, const char *l, size_t ll, const char *r, size_t rl,
		      char *err, size_t errlen)
{
	long li = tok_map_get(&b->vocab, l, ll), ri = tok_map_get(&b->vocab, r, rl);
	if (li < 0 || ri < 0) {
		snprintf(err, errlen, "model: merge %u: '%.*s' is not in the vocab", rank + 1,
			 li < 0 ? (int)ll : (int)rl, li < 0 ? l : r);
		return -1;
	}
	char small[256], *both = ll + rl <= sizeof(small) ? small : malloc(ll + rl);
	if (!both) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	memcpy(both, l, ll);
	memcpy(both + ll, r, rl);
	long id = tok_map_get(&b->vocab, both, ll + rl);
	if (id < 0) {
		snprintf(err, errlen, "model: merge %u: its result '%.*s' is not in the vocab", rank + 1,
			 (int)(ll + rl), both);
		if (both != small)
			free(both);
		return -1;
	}
	if (both != small)
		free(both);
	uint64_t key = (uint64_t)li << 32 | (uint64_t)ri;
	size_t j = mix(key) & b->merge_mask;
	while (b->merges[j].key != UINT64_MAX && b->merges[j].key != key)
		j = (j + 1) & b->merge_mask;
	/* A pair listed twice takes its last rank, as the HashMap model.rs
	 * collects the merges into. */
	b->merges[j] = (struct tok_merge){key, rank, (uint32_t)id};
	return 0;
}

int tok_ids_push(struct tok_ids *o, uint32_t id)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 64;
		uint32_t *v = realloc(o->v, cap * sizeof(*v));
		if (!v)
			return -1;
		o->v = v;
		o->cap = cap;
	}
	o->v[o->n++] = id;
	return 0;
}

/* Short words: the pair of lowest rank found by a scan, merged, again. */
static size_t merge_linear(const struct tok_bpe *b, uint32_t *sym, size_t n)
{
	while (n > 1) {
		uint32_t best = UINT32_MAX, id = 0;
		size_t at = 0;
		for (size_t i = 0; i + 1 < n; i++) {
			const struct tok_merge *m = merge_get(b, sym[i], sym[i + 1]);
			if (m && m->rank < best) {
				best = m->rank;
				id = m->id;
				at = i;
			}
		}
		if (best == UINT32_MAX)
			break;
		sym[at] = id;
		memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof(*sym));
		n--;
	}
	return n;
}

/* Long words: word.rs's merge_all. A heap of candidate merges by (rank,
 * position); a popped one whose pair has changed since is dropped. */
struct cand {
	uint32_t rank, pos, id;
};

static bool before(const struct cand *a, const struct cand *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct cand *h, size_t *n, struct cand c)
{
	size_t i = (*n)++;
	while (i > 0 && before(&c, &h[(i - 1) / 2])) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n)
{
	struct cand top = h[0], last = h[--*n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && before(&h[c + 1], &h[c]))
			c++;
		if (!before(&h[c], &last))
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = last;
	return top;
}

static int merge_heap(const struct tok_bpe *b, uint32_t *sym, size_t n, size_t *out_n)
{
	int32_t *next = malloc(n * sizeof(*next)), *prev = malloc(n * sizeof(*prev));
	bool *gone = calloc(n, sizeof(*gone));
	/* at most n - 1 at the start and two more per merge */
	struct cand *h = malloc(3 * n * sizeof(*h));
	size_t hn = 0;
	if (!next || !prev || !gone || !h) {
		free(next);
		free(prev);
		free(gone);
		free(h);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
		prev[i] = (int32_t)i - 1;
	}
	for (size_t i = 0; i + 1 < n; i++) {
		const struct tok_merge *m = merge_get(b, sym[i], sym[i + 1]);
		if (m)
			heap_push(h, &hn, (struct cand){m->rank, (uint32_t)i, m->id});
	}
	while (hn) {
		struct cand c = heap_pop(h, &hn);
		if (gone[c.pos] || next[c.pos] < 0)
			continue;
		int32_t r = next[c.pos];
		const struct tok_merge *m = merge_get(b, sym[c.pos], sym[r]);
		if (!m || m->id != c.id)
			continue;
		sym[c.pos] = c.id;
		gone[r] = true;
		next[c.pos] = next[r];
		if (next[r] >= 0)
			prev[next[r]] = (int32_t)c.pos;
		if (prev[c.pos] >= 0) {
			int32_t p = prev[c.pos];
			if ((m = merge_get(b, sym[p], sym[c.pos])))
				heap_push(h, &hn, (struct cand){m->rank, (uint32_t)p, m->id});
		}
		if (next[c.pos] >= 0 && (m = merge_get(b, sym[c.pos], sym[next[c.pos]])))
			heap_push(h, &hn, (struct cand){m->rank, c.pos, m->id});
	}
	size_t k = 0;
	for (int32_t i = 0; i >= 0; i = next[i])
		sym[k++] = sym[i];
	*out_n = k;
	free(next);
	free(prev);
	free(gone);
	free(h);
	return 0;
}

static bool cache_get(const struct tok_bpe *b, uint64_t h, const uint8_t *w, size_t n, struct tok_ids *o,
		      int *rc)
{
	struct tok_cache_shard *s = (struct tok_cache_shard *)&b->cache[h % TOK_CACHE_SHARDS];
	size_t j = (h / TOK_CACHE_SHARDS) % b->cache_slots;
	bool hit = false;
	*rc = 0;
	pthread_mutex_lock(&s->lock);
	const struct tok_cached *c = s->slot[j];
	if (c && c->hash == h && c->len == n && memcmp(c->data + c->nids, w, n) == 0) {
		hit = true;
		for (uint32_t i = 0; i < c->nids && *rc == 0; i++)
			*rc = tok_ids_push(o, c->data[i]);
	}
	pthread_mutex_unlock(&s->lock);
	return hit;
}

static void cache_put(const struct tok_bpe *b, uint64_t h, const uint8_t *w, size_t n, const uint32_t *ids,
		      size_t k)
{
	struct tok_cached *c = malloc(sizeof(*c) + k * sizeof(uint32_t) + n);
	if (!c)
		return; /* a cache that cannot grow is only slower */
	c->hash = h;
	c->len = (uint32_t)n;
	c->nids = (uint32_t)k;
	memcpy(c->data, ids, k * sizeof(uint32_t));
	memcpy(c->data + k, w, n);
	struct tok_cache_shard *s = (struct tok_cache_shard *)&b->cache[h % TOK_CACHE_SHARDS];
	size_t j = (h / TOK_CACHE_SHARDS) % b->cache_slots;
	pthread_mutex_lock(&s->lock);
	struct tok_cached *old = s->slot[j];
	s->slot[j] = c;
	pthread_mutex_unlock(&s->lock);
	free(old);
}

int tok_bpe_word(const struct tok_bpe *b, const uint8_t *w, size_t n, struct tok_ids *o)
{
	if (n == 0)
		return 0;
	if (n == 1)
		return tok_ids_push(o, b->byte_id[w[0]]);
	/* model.rs: with ignore_merges, a whole word in the vocab is its token */
	if (b->ignore_merges) {
		long id = tok_map_get(&b->raw, (const char *)w, n);
		if (id >= 0)
			return tok_ids_push(o, (uint32_t)id);
	}
	bool cached = b->cache_slots && n <= CACHE_MAX_BYTES;
	uint64_t h = 0;
	int rc;
	if (cached) {
		h = ig_block_hash(0, (const char *)w, n);
		if (cache_get(b, h, w, n, o, &rc))
			return rc;
	}
	uint32_t small[LINEAR_MAX], *sym = n <= LINEAR_MAX ? small : malloc(n * sizeof(*sym));
	if (!sym)
		return -1;
	for (size_t i = 0; i < n; i++)
		sym[i] = b->byte_id[w[i]];
	size_t k;
	if (n <= LINEAR_MAX)
		k = merge_linear(b, sym, n);
	else if (merge_heap(b, sym, n, &k) < 0) {
		free(sym);
		return -1;
	}
	rc = 0;
	for (size_t i = 0; i < k && rc == 0; i++)
		rc = tok_ids_push(o, sym[i]);
	if (cached && rc == 0)
		cache_put(b, h, w, n, sym, k);
	if (sym != small)
		free(sym);
	return rc;
}
