/* Choosing a backend for one request: the routing-policy interface, after
 * nginx's peer.init/get/free, HAProxy's lb_*.c under one lbprm and h2o's
 * balancer.h. policy.c does what every policy shares (which backends are
 * eligible: up, enabled, under their limit, not tried, the pinned one; a
 * rotating start so that equals share work; taking the slot); each policy
 * is one file, lb_NAME.c, that only chooses among the eligible ones and
 * keeps what it learns; policy_list.h is the table of them.
 *
 * Threads: pick, started, done, gone, report and free run under the
 * gateway's lock (or on the one reactor with workers 1); `progress` runs
 * in the relay (relay.c) with the lock let go, so it may touch only the
 * backend's atomics and its own request's ig_pick_req. Nothing here
 * blocks or allocates per request.
 * Not here: who runs next (scheduler.c), what happens when no backend is
 * eligible (dispatch.c queues or answers). */
#ifndef IG_POLICY_H
#define IG_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "fleet/backend.h"
#include "sched/cluster_view.h"

enum ig_pick {
	IG_PICK_OK,       /* *out is set; its slot is taken */
	IG_PICK_BUSY,     /* healthy backends exist but all are at their limit */
	IG_PICK_NONE,     /* no healthy backend that this request has not tried */
};

/* What a policy needs read from a request's body or headers (admission.c
 * reads only what the configured policy asks for). */
#define IG_POLICY_NEEDS_TOKENS 1u  /* its work in tokens (prompt estimate + output asked) */
#define IG_POLICY_NEEDS_PREFIX 2u  /* its prompt's block-hash chain */
#define IG_POLICY_NEEDS_SESSION 4u /* its session key's hash */

#define IG_MAX_TRIES 26 /* retries <= 20, continuations <= 5 (IG_CONT_MAX), plus the first attempt */

/* Which servers a pick is among, by their role in prefill/decode pairs
 * (backends[].role; path/try_pd.c makes the pairs). */
enum ig_pick_role {
	IG_PICK_SERVE,   /* any but a prefill server: a decode server's request
			  * gets a prefill half (the pair), the others run alone */
	IG_PICK_PREFILL, /* a pair's prefill half: prefill servers; when all are at
			  * their limit, the least loaded all the same (its
			  * engine queues it; the pair holds a decode slot already) */
	IG_PICK_ALONE,   /* a short prompt: a server that can prefill it alone (role
			  * both, or a vLLM decode server) */
};

/* What a policy is told of one request, for its whole life (embedded in
 * the request's struct ig_waiter). */
struct ig_pick_req {
	int role;                        /* enum ig_pick_role of its next pick; written by: admission, dispatch, try_pd */
	bool low;                        /* class low (a bulk run): may not take a
					  * backend's last reserve_slots slots */
	long overshoot;                  /* when no backend has a free slot, it may go this
					  * many over the slots of one that preempts lower
					  * priorities (dispatch.c: headroom.overshoot for
					  * high and normal) */
	bool no_overshoot;               /* a hedge: a free slot or nothing */
	bool over;                       /* its last pick went over the slots */
	long tokens;                     /* NEEDS_TOKENS: the work it brings */
	int pinned;                      /* 1 + the id of the only backend it may go to
					  * (it holds the response a follow-up names);
					  * 0: any */
	struct ig_backend *tried[IG_MAX_TRIES]; /* backends of its attempts, in order */
	int ntried;
	uint64_t *chain;                 /* NEEDS_PREFIX: its prompt's block hashes
					  * (malloc'd, the request's) */
	size_t nchain;
	uint64_t session;                /* NEEDS_SESSION: its session key's hash, 0 none */
	long charged;                    /* a policy's count of this request on its
					  * backend now (least-tokens: its work left;
					  * cache-aware: its KV); written by:
					  * lb_least_tokens, lb_cache_aware */
	long prefill_charged;            /* cache-aware: its uncached prompt tokens
					  * counted on its backend until its first event;
					  * written by: lb_cache_aware */
	const struct ig_cluster_view *view; /* the other gateways' (cluster_view.h), set by
					  * dispatch.c before each pick and read only in it */
};

/* The candidates a policy chooses among. */
struct ig_pick_set {
	struct ig_backend *const *pool;  /* the model's backends, up or not */
	size_t npool;
	struct ig_backend **cand;        /* of them, the eligible ones, in rotated order */
	size_t k;                        /* >= 1 */
};

/* How an attempt ended, for `done`. */
struct ig_pick_outcome {
	bool ok;                         /* the backend answered (any status it chose) */
	long completion_tokens;          /* from its usage, -1 unknown */
	uint64_t duration_us;            /* from the attempt's start to its end */
};

/* One routing policy. Only `name` and `pick` are required. */
struct ig_policy {
	const char *name;
	unsigned needs;                  /* IG_POLICY_NEEDS_* */
	/* Its state for the gateway's life, made at start and again when a
	 * reload changes the configuration. Returns 0 (*state set, may be
	 * NULL) or -1 (out of memory). */
	int (*init)(void **state, const struct ig_conf *cfg);
	void (*free)(void *state);
	/* A reload changed the configuration, the policy stayed: take its
	 * settings, keep what was learned where it can. Returns 0 or -1. */
	int (*reconfigure)(void *state, const struct ig_conf *cfg);
	/* The index in set->cand of the backend to use. */
	size_t (*pick)(void *state, const struct ig_pick_set *set, const struct ig_pick_req *rq);
	/* An attempt of rq started on b / one SSE event of it was relayed
	 * (without the lock) / it ended (the slot given back). */
	void (*started)(void *state, struct ig_backend *b, struct ig_pick_req *rq);
	void (*progress)(struct ig_backend *b, struct ig_pick_req *rq);
	void (*done)(void *state, struct ig_backend *b, struct ig_pick_req *rq, const struct ig_pick_outcome *o);
	/* b went down or left the table: what was learned of it is void. */
	void (*gone)(void *state, const struct ig_backend *b);
	/* Its fields in b's entry of /health/backends, and the gateway's. */
	void (*report)(const void *state, const struct ig_backend *b, json_t *entry);
	void (*report_gateway)(const void *state, json_t *obj);
};

/* The policy of an index taken from the configuration (policy_list.h order). */
const struct ig_policy *ig_policy_get(int index);
/* Its name (for logs). */
const char *ig_policy_name(int index);
size_t ig_policy_count(void);

/* Picks one of the n backends in v (a model's pool) for rq with policy p
 * and takes an in-flight slot on it. `rotor` is the pool's rotating start
 * for ties; rq->over says whether it went over the backend's slots
 * (rq->overshoot). Under the gateway's lock. */
enum ig_pick ig_policy_pick(const struct ig_policy *p, void *state, struct ig_backend *const *v, size_t n,
			    unsigned *rotor, struct ig_pick_req *rq, struct ig_backend **out);
/* Gives back the slot ig_policy_pick took. */
void ig_policy_release(struct ig_backend *b);
/* The in-flight limit that applies to a request: what the backend takes
 * less the other gateways' requests on it (v: several gateways), and for a
 * low one less its reserve_slots (0 = no limit, -1 = none now). */
long ig_policy_limit(const struct ig_cluster_view *v, const struct ig_backend *b, bool low);

/* Load relative to weight, for the policies that compare it: requests in
 * flight from here plus what the backend reports from elsewhere. */
static inline long ig_policy_load(const struct ig_backend *b)
{
	return atomic_load(&b->inflight) + atomic_load(&b->external_load);
}
/* a is strictly less loaded than b, relative to their weights (compared
 * without division). */
static inline bool ig_policy_less_loaded(const struct ig_backend *a, const struct ig_backend *b)
{
	return ig_policy_load(a) * b->weight < ig_policy_load(b) * a->weight;
}
/* The least loaded of set->cand (the first among equals: the candidates
 * are in rotated order, so equals take turns). */
size_t ig_policy_least_loaded(const struct ig_pick_set *set);
/* cache-aware reads the exact prefix index (kvindex.h, nsrc sources)
 * for the backends whose KV events flow; boot gives it once, before any
 * pick (NULL: none). */
struct ig_kvindex;
void ig_cache_aware_use_index(struct ig_kvindex *ix, size_t nsrc);

#endif
