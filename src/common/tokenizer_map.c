/* The tokenizer's tables of strings (src/common/tokenizer_int.h): GPT-2's
 * byte alphabet, and byte strings to ids in one open-addressed table whose
 * strings live in one arena (a vocab of 151,643 entries is two
 * allocations, not 151,643). Not for: the merges (tokenizer_bpe.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/blockhash.h"
#include "tokenizer_int.h"

static size_t pow2_at_least(size_t n)
{
	size_t p = 16;
	while (p < n)
		p <<= 1;
	return p;
}

/* ---- GPT-2's byte alphabet ------------------------------------------------ */

/* Printable Latin-1 bytes stand for themselves; the others (controls, space,
 * DEL, NBSP, soft hyphen) take 256, 257, ... in byte order. */
static bool printable(unsigned b)
{
	return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t tok_byte_char(uint8_t b)
{
	if (printable(b))
		return b;
	uint32_t n = 0;
	for (unsigned i = 0; i < b; i++)
		n += !printable(i);
	return 256 + n;
}

int tok_char_byte(uint32_t cp)
{
	if (cp < 256)
		return printable(cp) ? (int)cp : -1;
	uint32_t n = 0;
	for (unsigned i = 0; i < 256; i++)
		if (!printable(i) && 256 + n++ == cp)
			return (int)i;
	return -1;
}

/* ---- byte strings to ids -------------------------------------------------- */

int tok_map_init(struct tok_map *m, size_t expect)
{
	memset(m, 0, sizeof(*m));
	size_t slots = pow2_at_least(expect * 2 + 16);
	m->slots = calloc(slots, sizeof(*m->slots));
	if (!m->slots)
		return -1;
	m->mask = slots - 1;
	return 0;
}

void tok_map_free(struct tok_map *m)
{
	free(m->slots);
	free(m->ent);
	free(m->arena);
	memset(m, 0, sizeof(*m));
}

static int map_grow(struct tok_map *m)
{
	size_t slots = (m->mask + 1) * 2;
	uint32_t *s = calloc(slots, sizeof(*s));
	if (!s)
		return -1;
	for (size_t i = 0; i < m->n; i++) {
		size_t j = m->ent[i].hash & (slots - 1);
		while (s[j])
			j = (j + 1) & (slots - 1);
		s[j] = (uint32_t)i + 1;
	}
	free(m->slots);
	m->slots = s;
	m->mask = slots - 1;
	return 0;
}

static uint32_t map_hash(const char *s, size_t len)
{
	return (uint32_t)ig_block_hash(0, s, len);
}

long tok_map_get(const struct tok_map *m, const char *s, size_t len)
{
	if (!m->slots)
		return -1;
	uint32_t h = map_hash(s, len);
	for (size_t j = h & m->mask; m->slots[j]; j = (j + 1) & m->mask) {
		const struct tok_entry *e = &m->ent[m->slots[j] - 1];
		if (e->hash == h && e->len == len && memcmp(m->arena + e->off, s, len) == 0)
			return e->id;
	}
	return -1;
}

int tok_map_put(struct tok_map *m, const char *s, size_t len, uint32_t id)
{
	uint32_t h = map_hash(s, len);
	size_t j = h & m->mask;
	for (; m->slots[j]; j = (j + 1) & m->mask) {
		struct tok_entry *e = &m->ent[m->slots[j] - 1];
		if (e->hash == h && e->len == len && memcmp(m->arena + e->off, s, len) == 0) {
			e->id = id;
			return 0;
		}
	}
	if (len > UINT32_MAX || m->alen + len > UINT32_MAX || m->n >= UINT32_MAX - 1)
		return -1;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		struct tok_entry *e = realloc(m->ent, cap * sizeof(*e));
		if (!e)
			return -1;
		m->ent = e;
		m->cap = cap;
	}
	if (m->alen + len > m->acap) {
		size_t cap = m->acap ? m->acap : 65536;
		while (cap < m->alen + len)
			cap *= 2;
		char *a = realloc(m->arena, cap);
		if (!a)
			return -1;
		m->arena = a;
		m->acap = cap;
	}
	memcpy(m->arena + m->alen, s, len);
	m->ent[m->n] = (struct tok_entry){(uint32_t)m->alen, (uint32_t)len, id, h};
	m->alen += len;
	m->slots[j] = (uint32_t)++m->n;
	if (m->n * 2 > m->mask + 1)
		return map_grow(m);
	return 0;
}
