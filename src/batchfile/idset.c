/* The id set: an open-addressing hash set of 64-bit id hashes, with an
 * optional 64-bit value each (a done set, the merge's corpus index). Sized
 * for 902,087 ids in 16 bytes each at a load of at most 3/4. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/batchfile.h"
#include "infergate/util.h"

static uint64_t fmix64(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ull;
	k ^= k >> 33;
	return k;
}

uint64_t ig_idset_hash(const char *s, size_t n)
{
	uint64_t h = fmix64(ig_hash64(s, n, 0) ^ ((uint64_t)n << 56));
	return h ? h : 1;
}

int ig_idset_init(struct ig_idset *s, int with_vals)
{
	s->cap = 1024;
	s->len = 0;
	s->keys = calloc(s->cap, sizeof(*s->keys));
	s->vals = with_vals ? calloc(s->cap, sizeof(*s->vals)) : NULL;
	if (!s->keys || (with_vals && !s->vals)) {
		ig_idset_free(s);
		return -1;
	}
	return 0;
}

void ig_idset_free(struct ig_idset *s)
{
	free(s->keys);
	free(s->vals);
	memset(s, 0, sizeof(*s));
}

static size_t slot_of(const struct ig_idset *s, uint64_t h)
{
	size_t i = (size_t)h & (s->cap - 1);
	while (s->keys[i] && s->keys[i] != h)
		i = (i + 1) & (s->cap - 1);
	return i;
}

static int grow(struct ig_idset *s)
{
	struct ig_idset n = {0};
	n.cap = s->cap * 2;
	n.keys = calloc(n.cap, sizeof(*n.keys));
	if (s->vals)
		n.vals = calloc(n.cap, sizeof(*n.vals));
	if (!n.keys || (s->vals && !n.vals)) {
		free(n.keys);
		free(n.vals);
		return -1;
	}
	for (size_t i = 0; i < s->cap; i++) {
		if (!s->keys[i])
			continue;
		size_t j = slot_of(&n, s->keys[i]);
		n.keys[j] = s->keys[i];
		if (n.vals)
			n.vals[j] = s->vals[i];
	}
	n.len = s->len;
	free(s->keys);
	free(s->vals);
	*s = n;
	return 0;
}

int ig_idset_add(struct ig_idset *s, uint64_t h, uint64_t val, uint64_t *old)
{
	/* load factor 0.75 keeps probes short and the table at 11-21 bytes/id */
	if ((s->len + 1) * 4 > s->cap * 3 && grow(s) < 0)
		return -1;
	size_t i = slot_of(s, h);
	if (s->keys[i]) {
		if (old)
			*old = s->vals ? s->vals[i] : 0;
		return 0;
	}
	s->keys[i] = h;
	if (s->vals)
		s->vals[i] = val;
	s->len++;
	return 1;
}

uint64_t *ig_idset_val(struct ig_idset *s, uint64_t h)
{
	if (!s->vals || !s->keys)
		return NULL;
	size_t i = slot_of(s, h);
	return s->keys[i] ? &s->vals[i] : NULL;
}

int ig_idset_get(const struct ig_idset *s, uint64_t h, uint64_t *val)
{
	size_t i = slot_of(s, h);
	if (!s->keys[i])
		return 0;
	if (val)
		*val = s->vals ? s->vals[i] : 0;
	return 1;
}
