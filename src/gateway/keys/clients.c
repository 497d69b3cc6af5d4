/* The clients' state by API key (clients.h): a hash table of keys by
 * digest, their settings from the configuration and the keys file, their
 * usage. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "keys/clients.h"

void ig_clients_init(struct ig_clients *c)
{
	memset(c, 0, sizeof(*c));
}

void ig_clients_free(struct ig_clients *c)
{
	for (size_t i = 0; i < c->nkeys; i++) {
		free(c->keys[i]->status);
		free(c->keys[i]);
	}
	free(c->keys);
	free(c->ktab);
	memset(c, 0, sizeof(*c));
}


/* FNV-1a: the ids are hex digests (already uniform) or short test names. */
static size_t key_hash(const char *id)
{
	uint64_t h = 1469598103934665603ull;
	for (; *id; id++)
		h = (h ^ (unsigned char)*id) * 1099511628211ull;
	return (size_t)h;
}

void ig_clients_share(struct ig_key *k, double share_req, double share_tok, uint64_t now_ms)
{
	k->share_req = share_req;
	k->share_tok = share_tok;
	ig_bucket_set(&k->rpm, k->ent && k->ent->rpm ? (double)k->ent->rpm * share_req : 0, now_ms);
	ig_bucket_set(&k->tpm, k->ent && k->ent->tpm ? (double)k->ent->tpm * share_tok : 0, now_ms);
}

void ig_clients_demand(struct ig_key *k, double dt_s)
{
	double rr = dt_s > 0 ? k->dem_req / dt_s : 0, rt = dt_s > 0 ? k->dem_tok / dt_s : 0;
	k->rate_req = 0.5 * k->rate_req + 0.5 * rr;
	k->rate_tok = 0.5 * k->rate_tok + 0.5 * rt;
	if (k->rate_req < 0.001)
		k->rate_req = 0;
	if (k->rate_tok < 0.001)
		k->rate_tok = 0;
	k->dem_req = k->dem_tok = 0;
}

struct ig_key *ig_clients_find(const struct ig_clients *c, const char *digest)
{
	if (!c->ktabcap)
		return NULL;
	for (struct ig_key *k = c->ktab[key_hash(digest) & (c->ktabcap - 1)]; k; k = k->hnext)
		if (strcmp(k->digest, digest) == 0)
			return k;
	return NULL;
}

/* Room for one more key in the table. Returns 0 or -1. */
static int ktab_grow(struct ig_clients *c)
{
	if (c->nkeys + 1 <= c->ktabcap)
		return 0;
	size_t cap = c->ktabcap ? c->ktabcap * 2 : 64;
	struct ig_key **t = calloc(cap, sizeof(*t));
	if (!t)
		return -1;
	for (size_t i = 0; i < c->nkeys; i++) {
		struct ig_key *k = c->keys[i];
		size_t h = key_hash(k->digest) & (cap - 1);
		k->hnext = t[h];
		t[h] = k;
	}
	free(c->ktab);
	c->ktab = t;
	c->ktabcap = cap;
	return 0;
}

struct ig_key *ig_clients_get(struct ig_clients *c, const char *digest)
{
	struct ig_key *k = ig_clients_find(c, digest);
	if (k)
		return k;
	struct ig_key **v = ig_grow(c->keys, &c->capkeys, c->nkeys, sizeof(*v), 64);
	if (!v)
		return NULL;
	c->keys = v;
	if (ktab_grow(c) < 0 || !(k = calloc(1, sizeof(*k))))
		return NULL;
	snprintf(k->digest, sizeof(k->digest), "%s", digest);
	k->weight = 1;
	k->share_req = k->share_tok = 1;
	k->klass = -1;
	size_t h = key_hash(digest) & (c->ktabcap - 1);
	k->hnext = c->ktab[h];
	c->ktab[h] = k;
	k->at = c->nkeys;
	c->keys[c->nkeys++] = k;
	return k;
}

static void key_drop_unused(struct ig_clients *c, struct ig_key *k)
{
	/* The anonymous key ("") stays: most requests have no key, and its
	 * counters are what /health/backends shows for them. */
	if (k->refs > 0 || k->configured || !k->digest[0])
		return;
	struct ig_key **pp = &c->ktab[key_hash(k->digest) & (c->ktabcap - 1)];
	while (*pp != k)
		pp = &(*pp)->hnext;
	*pp = k->hnext;
	c->keys[k->at] = c->keys[--c->nkeys];
	c->keys[k->at]->at = k->at;
	free(k->status);
	free(k);
}

void ig_clients_release(struct ig_clients *c, struct ig_key *k)
{
	k->refs--;
	key_drop_unused(c, k);
}

static void unconfigure(struct ig_clients *c, bool drop)
{
	for (size_t i = c->nkeys; i-- > 0;) {
		struct ig_key *k = c->keys[i];
		k->configured = false;
		k->ent = NULL;
		k->weight = 1;
		k->max_inflight = 0;
		k->klass = -1;
		if (drop)
			key_drop_unused(c, k);
	}
}

void ig_clients_unconfigure(struct ig_clients *c)
{
	unconfigure(c, true);
}

void ig_clients_count(struct ig_key *k, unsigned status)
{
	for (size_t i = 0; i < k->nstatus; i++) {
		if (k->status[i].status == status) {
			k->status[i].n++;
			return;
		}
	}
	struct ig_statcount *v = ig_grow(k->status, &k->capstatus, k->nstatus, sizeof(*v), 4);
	if (!v)
		return;
	k->status = v;
	k->status[k->nstatus++] = (struct ig_statcount){status, 1};
}

int ig_clients_configure(struct ig_clients *c, const struct ig_conf *cfg, const struct ig_keyset *ks, uint64_t now_ms)
{
	/* Keys are dropped only at the end: one still configured keeps its
	 * buckets' levels and its usage. */
	unconfigure(c, false);
	for (size_t i = 0; ks && i < ks->n; i++) {
		const struct ig_keyent *e = &ks->v[i];
		char hex[2 * IG_DIGEST_LEN + 1];
		ig_keyset_hex(e->digest, hex);
		struct ig_key *k = ig_clients_get(c, hex);
		if (!k)
			return -1;
		k->configured = true;
		k->ent = e;
		k->weight = e->weight;
		k->max_inflight = e->max_inflight;
		k->klass = e->priority;
	}
	for (size_t i = 0; i < cfg->n_keys; i++) {
		struct ig_key *k = ig_clients_get(c, cfg->keys[i].digest);
		if (!k)
			return -1;
		k->configured = true;
		k->weight = cfg->keys[i].weight;
		k->max_inflight = cfg->keys[i].max_inflight;
		k->klass = cfg->keys[i].priority;
	}
	for (size_t i = c->nkeys; i-- > 0;) {
		struct ig_key *k = c->keys[i];
		ig_clients_share(k, k->share_req, k->share_tok, now_ms);
	}
	for (size_t i = c->nkeys; i-- > 0;)
		key_drop_unused(c, c->keys[i]);
	return 0;
}

