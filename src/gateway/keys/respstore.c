/* The responses store (respstore.h): an open-addressed table of 64-bit
 * fingerprints of response ids (FNV-1a seeded with a per-process secret:
 * clients choose only the ids they look up, and a false match sends a
 * follow-up to a backend that answers it 404), probed over a window
 * of 8 slots; a new entry takes a free or expired slot of its window, else
 * the oldest one. An entry names the key that stored it (a fingerprint of
 * its digest): another key's lookup finds nothing, as OpenAI answers
 * another project's id. 24 bytes a slot, 1.5 MiB for the table. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "keys/respstore.h"

#define WINDOW 8

struct slot {
	uint64_t fp;            /* 0: empty */
	uint32_t at_s;          /* when it was put, seconds since the store began */
	int32_t backend;
	uint32_t owner;
};

struct ig_respstore {
	struct slot *v;
	uint64_t key;
	uint64_t t0_ms;
};

struct ig_respstore *ig_respstore_new(void)
{
	struct ig_respstore *r = calloc(1, sizeof(*r));
	if (!r || !(r->v = calloc(IG_RESPSTORE_SLOTS, sizeof(*r->v)))) {
		free(r);
		return NULL;
	}
	r->key = ig_secret64();
	r->t0_ms = ig_now_ms();
	return r;
}

void ig_respstore_free(struct ig_respstore *r)
{
	if (!r)
		return;
	free(r->v);
	free(r);
}

static uint64_t fingerprint(const struct ig_respstore *r, const char *id, size_t n)
{
	uint64_t h = ig_hash64(id, n, r->key);
	return h ? h : 1;
}

static uint32_t secs(const struct ig_respstore *r, uint64_t now_ms)
{
	return now_ms > r->t0_ms ? (uint32_t)((now_ms - r->t0_ms) / 1000) : 0;
}

static int fresh(const struct slot *s, uint32_t now_s)
{
	return s->fp && (uint64_t)(now_s - s->at_s) * 1000 < IG_RESPSTORE_TTL_MS;
}

void ig_respstore_put(struct ig_respstore *r, const char *id, size_t n, int backend, uint32_t owner,
		      uint64_t now_ms)
{
	uint64_t fp = fingerprint(r, id, n);
	uint32_t now_s = secs(r, now_ms);
	size_t base = (size_t)fp & (IG_RESPSTORE_SLOTS - 1), pick = base;
	for (size_t i = 0; i < WINDOW; i++) {
		struct slot *s = &r->v[(base + i) & (IG_RESPSTORE_SLOTS - 1)];
		if (s->fp == fp || !fresh(s, now_s)) {
			pick = (base + i) & (IG_RESPSTORE_SLOTS - 1);
			break;
		}
		if (s->at_s < r->v[pick].at_s)
			pick = (base + i) & (IG_RESPSTORE_SLOTS - 1);
	}
	r->v[pick] = (struct slot){fp, now_s, backend, owner};
}

int ig_respstore_get(const struct ig_respstore *r, const char *id, size_t n, uint32_t owner, uint64_t now_ms)
{
	uint64_t fp = fingerprint(r, id, n);
	uint32_t now_s = secs(r, now_ms);
	size_t base = (size_t)fp & (IG_RESPSTORE_SLOTS - 1);
	for (size_t i = 0; i < WINDOW; i++) {
		const struct slot *s = &r->v[(base + i) & (IG_RESPSTORE_SLOTS - 1)];
		if (s->fp == fp)
			return fresh(s, now_s) && s->owner == owner ? s->backend : -1;
	}
	return -1;
}

size_t ig_respstore_bytes(const struct ig_respstore *r)
{
	return r ? sizeof(*r) + IG_RESPSTORE_SLOTS * sizeof(*r->v) : 0;
}

uint32_t ig_respstore_owner(const char *key_hex)
{
	return *key_hex ? (uint32_t)ig_hash64(key_hex, strlen(key_hex), 0) | 1u : 0;
}
