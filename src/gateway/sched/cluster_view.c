/* The published view of the other gateways (cluster_view.h): its lookups
 * and its lifetime. Not here: what the numbers are (cluster_share.c). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/backend.h"
#include "infergate/util.h"
#include "keys/clients.h"
#include "sched/cluster_view.h"

static int by_id(const void *a, const void *b)
{
	int x = ((const struct ig_cluster_view_backend *)a)->id, y = ((const struct ig_cluster_view_backend *)b)->id;
	return (x > y) - (x < y);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const struct ig_cluster_view_model *)a)->name, ((const struct ig_cluster_view_model *)b)->name);
}

static int by_digest(const void *a, const void *b)
{
	return strcmp(((const struct ig_cluster_view_key *)a)->digest, ((const struct ig_cluster_view_key *)b)->digest);
}

const struct ig_cluster_view_backend *ig_cluster_view_backend(const struct ig_cluster_view *v, int id)
{
	struct ig_cluster_view_backend probe = {.id = id};
	return v && v->nbackends ? bsearch(&probe, v->backends, v->nbackends, sizeof(probe), by_id) : NULL;
}

const struct ig_cluster_view_model *ig_cluster_view_model(const struct ig_cluster_view *v, const char *name)
{
	struct ig_cluster_view_model probe = {.name = (char *)name};
	return v && v->nmodels ? bsearch(&probe, v->models, v->nmodels, sizeof(probe), by_name) : NULL;
}

const struct ig_cluster_view_key *ig_cluster_view_key(const struct ig_cluster_view *v, const char *digest)
{
	struct ig_cluster_view_key probe;
	if (!v || !v->nkeys)
		return NULL;
	snprintf(probe.digest, sizeof(probe.digest), "%s", digest);
	return bsearch(&probe, v->keys, v->nkeys, sizeof(probe), by_digest);
}

struct ig_cluster_view_key *ig_cluster_view_add_key(struct ig_cluster_view *v, const char *digest)
{
	struct ig_cluster_view_key *k = ig_grow(v->keys, &v->capkeys, v->nkeys, sizeof(*k), 16);
	if (!k)
		return NULL;
	v->keys = k;
	k = &v->keys[v->nkeys++];
	memset(k, 0, sizeof(*k));
	snprintf(k->digest, sizeof(k->digest), "%s", digest);
	return k;
}

void ig_cluster_view_seal(struct ig_cluster_view *v)
{
	if (v->nbackends)
		qsort(v->backends, v->nbackends, sizeof(*v->backends), by_id);
	if (v->nmodels)
		qsort(v->models, v->nmodels, sizeof(*v->models), by_name);
	if (v->nkeys)
		qsort(v->keys, v->nkeys, sizeof(*v->keys), by_digest);
}

void ig_cluster_view_free(struct ig_cluster_view *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->nmodels; i++)
		free(v->models[i].name);
	free(v->models);
	free(v->backends);
	free(v->keys);
	free(v);
}

long ig_cluster_others_inflight(const struct ig_cluster_view *v, const struct ig_backend *b)
{
	const struct ig_cluster_view_backend *e = ig_cluster_view_backend(v, b->id);
	return e ? e->others_inflight : 0;
}

long ig_cluster_claim_cap(const struct ig_cluster_view *v, const struct ig_backend *b)
{
	const struct ig_cluster_view_backend *e = ig_cluster_view_backend(v, b->id);
	return e ? e->claim_cap : 0;
}

long ig_cluster_others_waiting(const struct ig_cluster_view *v, const char *model)
{
	const struct ig_cluster_view_model *e = ig_cluster_view_model(v, model);
	return e ? e->others_waiting : 0;
}

long ig_cluster_others_headroom(const struct ig_cluster_view *v, const char *model)
{
	const struct ig_cluster_view_model *e = ig_cluster_view_model(v, model);
	return e ? e->others_headroom : 0;
}

uint64_t ig_cluster_waiting_run(const struct ig_cluster_view *v, const char *model)
{
	const struct ig_cluster_view_model *e = ig_cluster_view_model(v, model);
	return e && e->others_waiting > 0 ? e->waiting_since : 0;
}

long ig_cluster_key_cap(const struct ig_cluster_view *v, const struct ig_key *k)
{
	const struct ig_cluster_view_key *e = k->max_inflight > 0 ? ig_cluster_view_key(v, k->digest) : NULL;
	return e ? e->claim_cap : 0;
}

bool ig_cluster_key_capped(const struct ig_cluster_view *v, const struct ig_key *k)
{
	if (k->max_inflight <= 0)
		return false;
	long cc = ig_cluster_key_cap(v, k);
	long cap = cc == 0 ? k->max_inflight : cc < 0 ? 0 : cc;
	return k->inflight >= cap;
}

double ig_cluster_others_req(const struct ig_cluster_view *v, const struct ig_key *k)
{
	const struct ig_cluster_view_key *e = ig_cluster_view_key(v, k->digest);
	return e ? e->others_req : 0;
}

double ig_cluster_others_tok(const struct ig_cluster_view *v, const struct ig_key *k)
{
	const struct ig_cluster_view_key *e = ig_cluster_view_key(v, k->digest);
	return e ? e->others_tok : 0;
}

uint64_t ig_cluster_retry_floor(const struct ig_cluster_view *v, const struct ig_key *k)
{
	const struct ig_cluster_view_key *e = ig_cluster_view_key(v, k->digest);
	return e ? e->retry_floor_ms : 0;
}
