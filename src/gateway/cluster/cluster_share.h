/* The arithmetic of a cluster's shares: given the other gateways' states
 * (as redismsg.c checked them) and this gateway's, the view of them that
 * the scheduler reads (cluster_view.h): the others' slots on each backend,
 * this gateway's caps there and on each key's max_inflight, the others'
 * waiting and headroom per model, and each key's share of its rate limits.
 * Pure: no Redis, no clock (the times are arguments), no table of another
 * module touched; the same inputs give the same view.
 * Not here: Redis and the sync's timing (cluster.c). */
#ifndef IG_CLUSTER_SHARE_H
#define IG_CLUSTER_SHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/redismsg.h"
#include "sched/cluster_view.h"

/* This gateway's own, at a sync: what cluster.c reads of its tables. */
struct ig_share_backend {
	int id;
	const char *url;
	long inflight;           /* its requests there now */
	long sent;               /* what the last state sent claimed there */
	long cur;                /* the slots it states or was learned to run (capacity.h's cur) */
	bool stated;             /* no max_inflight, and it reports its capacity: a total
				  * that the gateways share */
};
struct ig_share_model {
	const char *name;
	size_t hn_waiting;       /* its high and normal requests waiting here */
	size_t qlen;             /* all its requests waiting here */
};
struct ig_share_key {
	const char *digest;      /* "" the anonymous key */
	size_t waiting;
	long inflight, weight, max_inflight;
	long sent;               /* what the last state sent claimed */
	uint64_t completed;      /* requests of it that left the queue, ever */
};
struct ig_share_mine {
	const char *name;
	const struct ig_share_backend *backends;
	size_t nbackends;
	const struct ig_share_model *models;
	size_t nmodels;
	const struct ig_share_key *keys; /* those with a max_inflight or rate limits; written by: cluster_state */
	size_t nkeys;
};

/* A sync's inputs besides this gateway's. */
struct ig_share_sync {
	bool joined;             /* a sync's reply was read (false: alone) */
	const struct ig_state *states; /* the others' */
	size_t nstates;
	long live_last;          /* gateways live at the last sync read (this one included) */
	uint64_t now_ms;         /* this gateway's monotonic clock */
	long long redis_now_ms;  /* Redis's clock at the sync (turns the remainders) */
	uint64_t sync_ms;        /* the sync's period */
	const struct ig_cluster_view *prev; /* the view in force, NULL at first */
};

/* What the new view changes for the scheduler. */
struct ig_share_news {
	bool drain;              /* slots freed or low work let go: start queued requests */
};

/* The view after a sync (or alone: sy->joined false). NULL when out of memory
 * (the view in force stays). */
struct ig_cluster_view *ig_cluster_share_view(const struct ig_share_sync *sy, const struct ig_share_mine *me,
					      struct ig_share_news *news);
/* The same view as prev with the keys' rate-limit part made again: `keys`
 * (their digests) keep prev's entries' other numbers. The caller then
 * sets each entry's figures (ig_cluster_share_key_figures or
 * ig_cluster_share_key_even). NULL when out of memory. */
struct ig_cluster_view *ig_cluster_share_rekey(const struct ig_cluster_view *prev, const struct ig_share_key *keys,
					       size_t nkeys);
/* A key's entry from the key sync's figures f, for a key limited to rpm
 * and tpm with `live` gateways: the others' buckets (no more than the
 * whole limit) and the retry floor; *req, *tok: this gateway's shares. */
void ig_cluster_share_key_figures(struct ig_cluster_view_key *e, const struct ig_key_figures *f, long rpm, long tpm,
				  long live, double *req, double *tok);
/* A key's entry at an even split between `live` gateways, nothing known
 * of the others' buckets; returns the share (1 / live). */
double ig_cluster_share_key_even(struct ig_cluster_view_key *e, long rpm, long live);

/* This gateway's share of a key's limit: its demand (per second) and the
 * other live gateways' together, `live` gateways in all (this one
 * included). Shares follow demand, and each live gateway keeps a small
 * one (a tenth of an even split, weighed in) so that its first requests
 * are not refused; with no demand anywhere, an even split. The shares of
 * gateways that see the same figures add up to 1. */
double ig_cluster_share(double mine, double others, long live);
/* The most this gateway (me, of n) may hold of `total` until its next
 * sync: claim[g] is what each holds (as its state says; this one's: its
 * requests there, or what it claimed before while it has weight), w[g] its
 * weight (0: it has nothing waiting while others have). What it holds, and
 * its part of the free rest, split in proportion to w among those under
 * their fair part (total x w / sum of w; all with a weight when none is),
 * the remainder one each in turn by index from `turn`; with requests
 * waiting here and more than its fair part while another waits under its
 * own (or the claims together above total), its fair part. -1: none more.
 * Gateways that compute from the same claims get caps that add up to no
 * more than total. */
long ig_cluster_claim(long total, const long *claim, const double *w, size_t n, size_t me, unsigned long long turn);

#endif
