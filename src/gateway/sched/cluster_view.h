/* What the other gateways of a cluster hold, as this one last learned it:
 * one immutable view per sync (cluster_share.c computes it,
 * cluster_state.c publishes it in gw->cluster_view), read by the
 * scheduler, the policies, admission, dispatch and metrics through the
 * functions below, written by none of them. NULL (no cluster) reads as a
 * gateway alone: nobody else on any backend, no cap, nobody waiting.
 *
 * Lifetime: cluster_state.c swaps gw->cluster_view whole, on reactor 0
 * and under the gateway's lock, and frees the old view right then (its
 * `publish`). That is safe because every reader holds the lock while it
 * reads and never keeps the pointer past letting go of it: each reader
 * takes gw->cluster_view afresh (dispatch hands it down to a pick, a
 * scheduler pass, an admission check, and the callee drops it when it
 * returns; struct ig_pick_req's `view` is set before each pick and read
 * only in it). So no reader can be inside the old view when it is freed:
 * no reference counts, no grace period. A reader that ran without the
 * lock (the relay, a libcurl callback) would break this: it must take a
 * copy of the numbers it needs under the lock instead.
 *
 * A key sync makes a new view too (the old one's numbers, the keys' rate
 * limits made again): views change whole, never in place.
 * Not here: how the numbers are computed (cluster_share.c), Redis
 * (cluster_sync.c). */
#ifndef IG_CLUSTER_VIEW_H
#define IG_CLUSTER_VIEW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ig_backend;
struct ig_key;

/* One backend of this gateway's fleet, as the others use it. */
struct ig_cluster_view_backend {
	int id;                  /* struct ig_backend's id; written by: cluster_share */
	long others_inflight;    /* written by: cluster_share; other gateways' requests on it (0: alone, or its limit
				  * is not a capacity it states) */
	long claim_cap;          /* written by: cluster_share; the most this gateway runs there until the next sync
				  * (its requests and its part of the free slots); 0 = no
				  * such cap, -1 = none more */
	long claim_next;         /* written by: cluster_share; the cap computed at this sync, in force once the next
				  * sync has told the others (claim_cap: a smaller one at once) */
	bool shared;             /* written by: cluster_share; its learned limit is a total shared with the others
				  * (capacity.h's shared) */
};

/* One model, as the others wait for it. */
struct ig_cluster_view_model {
	char *name; /* written by: cluster_share */
	long others_waiting;     /* high and normal requests other gateways hold waiting; written by: cluster_share */
	long others_headroom;    /* the headroom they learned for it (headroom.h); written by: cluster_share */
	uint64_t waiting_since;  /* written by: cluster_share; the view's seq at which they began to wait without a
				  * break (0: they do not): a run of low's turns (dispatch.c) */
};

/* One key, as the others use it. */
struct ig_cluster_view_key {
	char digest[65];         /* "" the anonymous key */
	/* its max_inflight split (as a backend's slots) */
	long claim_cap;          /* in force: 0 all of max_inflight, -1 none more; written by: cluster_share */
	long claim_next;         /* computed at this sync; written by: cluster_share */
	uint64_t others_wait_ms; /* written by: cluster_share; since when another gateway has held it waiting at
				  * every sync (0: none at the last one) */
	uint64_t active_until_ms;/* it ran here lately: it keeps a part; written by: cluster_share */
	uint64_t seen_completed; /* its `completed` at this sync; written by: cluster_share */
	/* its rate limits (the key sync) */
	double others_req, others_tok; /* what the other gateways' buckets held; written by: cluster_share */
	uint64_t retry_floor_ms; /* written by: cluster_share; a refused request waits at least this long: its retry
				  * may reach another gateway (0 alone) */
};

struct ig_cluster_view {
	uint64_t seq;            /* 1, 2, ...: one per view made; written by: cluster_share */
	long live;               /* gateways live at its sync, this one included (1 alone); written by: cluster_share */
	bool joined;             /* made from a sync's reply (false: alone); written by: cluster_share */
	uint64_t others_wait_ms; /* written by: cluster_share; since when another gateway has held keys waiting at
				  * every sync (0: none) */
	bool hurry;              /* some gateway holds high or normal requests waiting; written by: cluster_share */
	struct ig_cluster_view_backend *backends; /* by id; written by: cluster_share */
	size_t nbackends; /* written by: cluster_share */
	struct ig_cluster_view_model *models;     /* by name; written by: cluster_share */
	size_t nmodels; /* written by: cluster_share */
	struct ig_cluster_view_key *keys;         /* by digest */
	size_t nkeys, capkeys;
};

/* ---- the readers (under the gateway's lock; v may be NULL) ---- */

/* Other gateways' requests on b. */
long ig_cluster_others_inflight(const struct ig_cluster_view *v, const struct ig_backend *b);
/* This gateway's cap on b until the next sync: 0 none, -1 none more. */
long ig_cluster_claim_cap(const struct ig_cluster_view *v, const struct ig_backend *b);
/* High and normal requests the others hold waiting for the model. */
long ig_cluster_others_waiting(const struct ig_cluster_view *v, const char *model);
/* The headroom the others learned for the model. */
long ig_cluster_others_headroom(const struct ig_cluster_view *v, const char *model);
/* Which run of the others' waiting for the model this is (0: they do not
 * wait): a count kept per run restarts when this changes. */
uint64_t ig_cluster_waiting_run(const struct ig_cluster_view *v, const char *model);
/* This gateway's part of k's max_inflight: 0 all of it, -1 none more. */
long ig_cluster_key_cap(const struct ig_cluster_view *v, const struct ig_key *k);
/* A key at its max_inflight (its part of it, with others): its requests
 * wait for one of its own to end. */
bool ig_cluster_key_capped(const struct ig_cluster_view *v, const struct ig_key *k);
/* What the others' buckets of k held at the last key sync. */
double ig_cluster_others_req(const struct ig_cluster_view *v, const struct ig_key *k);
double ig_cluster_others_tok(const struct ig_cluster_view *v, const struct ig_key *k);
/* The least a refused request of k is told to wait (0 alone). */
uint64_t ig_cluster_retry_floor(const struct ig_cluster_view *v, const struct ig_key *k);

/* ---- making one (cluster_share.c, cluster.c) ---- */

const struct ig_cluster_view_backend *ig_cluster_view_backend(const struct ig_cluster_view *v, int id);
const struct ig_cluster_view_model *ig_cluster_view_model(const struct ig_cluster_view *v, const char *name);
const struct ig_cluster_view_key *ig_cluster_view_key(const struct ig_cluster_view *v, const char *digest);
/* A new key entry at the end of v's (its digest set, the rest 0), NULL
 * when out of memory; ig_cluster_view_seal puts them in order. */
struct ig_cluster_view_key *ig_cluster_view_add_key(struct ig_cluster_view *v, const char *digest);
/* Sorts what the lookups search; after it, v is not changed again. */
void ig_cluster_view_seal(struct ig_cluster_view *v);
void ig_cluster_view_free(struct ig_cluster_view *v);

#endif
