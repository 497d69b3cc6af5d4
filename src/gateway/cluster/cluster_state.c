/* The view of the other gateways made from this gateway's tables
 * (cluster_state.h): what it reads of its backends, models and keys for
 * cluster_share.c, the view put in force, and the state it tells the
 * others. Reactor 0, under the gateway's lock.
 * Not here: Redis (cluster_sync.c), the arithmetic (cluster_share.c). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_share.h"
#include "cluster/cluster_state.h"
#include "fleet/backend.h"
#include "fleet/capacity.h"
#include "gateway.h"
#include "infergate/buf.h"
#include "infergate/util.h"
#include "keys/clients.h"
#include "sched/cluster_view.h"
#include "sched/scheduler.h"

/* What the last state claimed on a backend, and for a key. */
struct bclaim {
	int id;
	long n;
};
struct kclaim {
	char digest[65];
	long n;
};

bool ig_cluster_state_limited(const struct ig_key *k)
{
	return k->ent && (k->ent->rpm || k->ent->tpm);
}

/* A key as the states name it (the anonymous one's digest is ""). */
static const char *key_name(const struct ig_key *k)
{
	return k->digest[0] ? k->digest : "-";
}

static int kclaim_cmp(const void *a, const void *b)
{
	return strcmp(((const struct kclaim *)a)->digest, ((const struct kclaim *)b)->digest);
}

static long claimed_backend(const struct ig_cluster_state *c, int id)
{
	for (size_t i = 0; i < c->nbclaims; i++)
		if (c->bclaims[i].id == id)
			return c->bclaims[i].n;
	return 0;
}

static long claimed_key(const struct ig_cluster_state *c, const char *digest)
{
	struct kclaim probe, *at;
	snprintf(probe.digest, sizeof(probe.digest), "%s", digest);
	at = c->nkclaims ? bsearch(&probe, c->kclaims, c->nkclaims, sizeof(probe), kclaim_cmp) : NULL;
	return at ? at->n : 0;
}

/* The keys the view carries: those with rate limits or a max_inflight,
 * and those with requests waiting (their weights weigh in the split). *n:
 * how many; *kp (when not NULL): the keys themselves, in the same order.
 * NULL when there are none or out of memory. */
static struct ig_share_key *mine_keys(struct ig_cluster_state *c, size_t *n, struct ig_key ***kp)
{
	struct ig_clients *cl = &c->gw->clients;
	struct ig_share_key *v = calloc(cl->nkeys + 1, sizeof(*v));
	struct ig_key **p = kp ? calloc(cl->nkeys + 1, sizeof(*p)) : NULL;
	*n = 0;
	if (!v || (kp && !p)) {
		free(v);
		free(p);
		return NULL;
	}
	for (size_t i = 0; i < cl->nkeys; i++) {
		struct ig_key *k = cl->keys[i];
		if (!ig_cluster_state_limited(k) && k->max_inflight <= 0 && k->waiting == 0)
			continue;
		v[*n] = (struct ig_share_key){.digest = k->digest, .waiting = k->waiting, .inflight = k->inflight,
					      .weight = k->weight, .max_inflight = k->max_inflight,
					      .sent = claimed_key(c, k->digest), .completed = k->completed};
		if (p)
			p[*n] = k;
		(*n)++;
	}
	if (kp)
		*kp = p;
	return v;
}

/* Puts v in force: the readers see it from their next look (cluster_view.h:
 * they read under the lock, as this runs, and keep no pointer past it, so
 * the view it replaces is freed here). */
static void publish(struct ig_cluster_state *c, struct ig_cluster_view *v)
{
	struct ig_gw *gw = c->gw;
	struct ig_cluster_view *old = gw->cluster_view;
	ig_cluster_view_seal(v);
	gw->cluster_view = v;
	ig_cluster_view_free(old);
	c->hurry = v->hurry;
}

/* A view like the one in force, its limited keys' entries made again from
 * the key sync (fn, for each such key) or at an even split (fn NULL). */
void ig_cluster_state_rekey(struct ig_cluster_state *c,
			    void (*fn)(struct ig_key *k, struct ig_cluster_view_key *e, void *arg), void *arg)
{
	struct ig_key **kp = NULL;
	size_t n;
	struct ig_share_key *keys = mine_keys(c, &n, &kp);
	struct ig_cluster_view *v = keys ? ig_cluster_share_rekey(c->gw->cluster_view, keys, n) : NULL;
	uint64_t now = ig_now_ms();
	for (size_t i = 0; v && i < n; i++) {
		struct ig_key *k = kp[i];
		if (!ig_cluster_state_limited(k))
			continue;
		if (fn) {
			fn(k, &v->keys[i], arg);
		} else {
			double s = ig_cluster_share_key_even(&v->keys[i], k->ent->rpm, c->live_last);
			if (k->share_req != s || k->share_tok != s)
				ig_clients_share(k, s, s, now);
		}
	}
	if (v)
		publish(c, v);
	free(keys);
	free(kp);
}

/* Every limited key at an even split between the last count of live
 * gateways: alone, or before the first key sync. */
void ig_cluster_state_even(struct ig_cluster_state *c)
{
	ig_cluster_state_rekey(c, NULL, NULL);
}

/* The others' state (the sync's third part, as ig_redismsg_sync checked
 * it) and this gateway's, made into the view of them (cluster_share.c);
 * alone (sts NULL): the view of a gateway alone, that still leaves the
 * others it saw last their part of what it shares with them. */
void ig_cluster_state_take(struct ig_cluster_state *c, const struct ig_sync *sts)
{
	struct ig_gw *gw = c->gw;
	struct ig_share_news news;
	struct ig_share_backend *bv = calloc(gw->fleet.n + 1, sizeof(*bv));
	struct ig_share_model *mv = calloc(gw->sched.n + 1, sizeof(*mv));
	struct ig_share_mine me = {.name = c->name, .backends = bv, .nbackends = gw->fleet.n, .models = mv,
				   .nmodels = gw->sched.n};
	struct ig_share_key *kv = mine_keys(c, &me.nkeys, NULL);
	me.keys = kv;
	if (!bv || !mv || !kv)
		goto out;
	for (size_t i = 0; i < gw->fleet.n; i++) {
		const struct ig_backend *b = gw->fleet.v[i];
		bv[i] = (struct ig_share_backend){.id = b->id, .url = b->key, .inflight = atomic_load(&b->inflight),
						  .sent = claimed_backend(c, b->id), .cur = b->learn.cur,
						  .stated = b->max_inflight == 0 && b->learn.reported > 0};
	}
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		mv[i] = (struct ig_share_model){.name = m->name, .qlen = m->qlen,
						.hn_waiting = m->q[IG_CLASS_HIGH].qlen + m->q[IG_CLASS_NORMAL].qlen};
	}
	struct ig_share_sync sy = {.joined = sts != NULL, .states = sts ? sts->states : NULL,
				   .nstates = sts ? sts->nstates : 0, .live_last = c->live_last,
				   .now_ms = ig_now_ms(), .redis_now_ms = c->redis_now_ms, .sync_ms = c->sync_ms,
				   .prev = gw->cluster_view};
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	if (!v)
		goto out;
	publish(c, v);
	/* what capacity.c learns of a backend whose slots are a total shared
	 * with the others (its module's setter: cluster.c writes none of it) */
	for (size_t i = 0; i < gw->fleet.n; i++) {
		const struct ig_cluster_view_backend *e = ig_cluster_view_backend(v, gw->fleet.v[i]->id);
		ig_capacity_set_shared(&gw->fleet.v[i]->learn, e && e->shared);
	}
	if (news.drain)
		gw->drain_pending = true; /* slots the others let go, or low work they no longer hold back */
out:
	free(bv);
	free(mv);
	free(kv);
}

/* This gateway's state for the others (see cluster_sync.c's sync_script): its name, then
 * per backend what it may run there until its next sync, per model its
 * high and normal requests waiting, per key its requests waiting, weight
 * and in flight (or claimed, with a max_inflight). */
char *ig_cluster_state_text(struct ig_cluster_state *c)
{
	struct ig_gw *gw = c->gw;
	struct ig_clients *cl = &gw->clients;
	const struct ig_cluster_view *v = gw->cluster_view;
	struct bclaim *bc = calloc(gw->fleet.n + 1, sizeof(*bc));
	struct kclaim *kc = calloc(cl->nkeys + 1, sizeof(*kc));
	size_t nkc = 0;
	struct ig_buf b;
	if (!bc || !kc) {
		free(bc);
		free(kc);
		return NULL;
	}
	ig_buf_init(&b);
	ig_buf_printf(&b, "g %s\n", c->name);
	for (size_t i = 0; i < gw->fleet.n; i++) {
		/* what it may run there until its next sync: its requests, or its
		 * cap when higher (it refills the slots its own requests free:
		 * they are not free for the others to claim) */
		const struct ig_backend *be = gw->fleet.v[i];
		const struct ig_cluster_view_backend *e = ig_cluster_view_backend(v, be->id);
		long n = atomic_load(&be->inflight), cap = e ? e->claim_next : 0;
		if (cap > n)
			n = cap;
		bc[i] = (struct bclaim){be->id, n}; /* in force once the reply says who counted it */
		if (n > 0)
			ig_buf_printf(&b, "b %s %ld\n", gw->fleet.v[i]->key, n);
	}
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		size_t w = m->q[IG_CLASS_HIGH].qlen + m->q[IG_CLASS_NORMAL].qlen;
		if (w > 0 && !strpbrk(m->name, " \n"))
			ig_buf_printf(&b, "m %s %zu\n", m->name, w);
		if (m->headroom.slots > 0 && !strpbrk(m->name, " \n")) /* its learned headroom (headroom.h) */
			ig_buf_printf(&b, "h %s %ld\n", m->name, m->headroom.slots);
	}
	for (size_t i = 0; i < cl->nkeys; i++) {
		const struct ig_key *k = cl->keys[i];
		long claim = k->inflight;
		if (k->max_inflight > 0) {
			const struct ig_cluster_view_key *e = ig_cluster_view_key(v, k->digest);
			if (e && e->claim_next > claim)
				claim = e->claim_next;
			snprintf(kc[nkc].digest, sizeof(kc->digest), "%s", k->digest);
			kc[nkc++].n = claim;
		}
		if (k->waiting > 0 || (k->max_inflight > 0 && claim > 0))
			ig_buf_printf(&b, "k %s %zu %ld %ld\n", key_name(k), k->waiting, k->weight,
				      claim);
	}
	if (nkc)
		qsort(kc, nkc, sizeof(*kc), kclaim_cmp);
	free(c->bclaims);
	free(c->kclaims);
	c->bclaims = bc;
	c->nbclaims = gw->fleet.n;
	c->kclaims = kc;
	c->nkclaims = nkc;
	ig_buf_append(&b, "", 1);
	char *s = strdup(ig_buf_head(&b));
	ig_buf_free(&b);
	return s;
}

void ig_cluster_state_free(struct ig_cluster_state *c)
{
	ig_cluster_view_free(c->gw->cluster_view); /* the loops are over: nobody reads it */
	c->gw->cluster_view = NULL;
	free(c->bclaims);
	free(c->kclaims);
	c->bclaims = NULL;
	c->kclaims = NULL;
	c->nbclaims = c->nkclaims = 0;
}
