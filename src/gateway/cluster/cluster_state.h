/* The view of the other gateways (cluster_view.h) made from this
 * gateway's own tables at each sync: what it reads of its backends,
 * models and keys for cluster_share.c (which does the arithmetic), the
 * view put in force in gw->cluster_view (swapped whole; the old one freed
 * at once: every reader reads under the lock and keeps no pointer past
 * it), and the state it tells the others (what it claims, remembered
 * until the reply says who counted it). cluster.c and cluster_sync.c's;
 * reactor 0, under the gateway's lock.
 * Not here: Redis (cluster_sync.c), the arithmetic (cluster_share.c). */
#ifndef IG_CLUSTER_STATE_H
#define IG_CLUSTER_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ig_gw;
struct ig_key;
struct ig_sync;
struct ig_cluster_view_key;
struct bclaim;
struct kclaim;

struct ig_cluster_state {
	struct ig_gw *gw;
	const char *name;            /* this gateway's */
	uint64_t sync_ms;            /* the sync's period */
	long live_last;              /* gateways at the last sync (this one included); written by: cluster_sync */
	long long redis_now_ms;      /* Redis's clock at the last sync; written by: cluster_sync */
	bool hurry;                  /* some gateway holds high or normal requests waiting */
	/* what the last state claimed (ig_cluster_state_text), in force once
	 * the sync's reply says who counted it (cluster_share.c's in_force) */
	struct bclaim *bclaims;      /* by backend id */
	size_t nbclaims;
	struct kclaim *kclaims;      /* by digest */
	size_t nkclaims;
};

/* Whether k has rate limits (its share of them is the key sync's). */
bool ig_cluster_state_limited(const struct ig_key *k);
/* The others' states (sts, as ig_redismsg_sync checked them; NULL: alone)
 * and this gateway's, made into the view and put in force; the scheduler
 * is told to drain when slots were freed. */
void ig_cluster_state_take(struct ig_cluster_state *st, const struct ig_sync *sts);
/* The view in force made again with every limited key's rate-limit entry
 * set by fn (which may leave it as it was), or at an even split between
 * the last count of gateways (fn NULL), and put in force. */
void ig_cluster_state_rekey(struct ig_cluster_state *st,
			    void (*fn)(struct ig_key *k, struct ig_cluster_view_key *e, void *arg), void *arg);
/* Every limited key at an even split: alone, or before a key sync. */
void ig_cluster_state_even(struct ig_cluster_state *st);
/* This gateway's state for the others (malloc'd; NULL: out of memory). */
char *ig_cluster_state_text(struct ig_cluster_state *st);
/* At the stop: the view and the claims freed. */
void ig_cluster_state_free(struct ig_cluster_state *st);

#endif
