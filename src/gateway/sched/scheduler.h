/* The scheduler's state: one entry per model with the backends that serve
 * it (the pool its requests are dispatched among) and its own wait queues, so a
 * request for an idle model never waits behind another model's queue.
 * The entries are rebuilt from the fleet (every backend) whenever a backend's
 * models, state or presence change (ig_sched_rebuild).
 *
 * Who runs next when a slot frees (ig_sched_next): within a model, strict
 * priority between the classes high > normal > low, except that `low` gets
 * one dispatch in every low_every while it waits (never starved); within a
 * class, fair shares between API keys by start-time fair queueing weighted
 * by each key's weight; FIFO within a key. A key at its max_inflight is
 * passed over (its requests wait). The queues hold struct ig_sched_entry,
 * which dispatch.c's waiter embeds; this module never looks past it.
 * Only dispatch.c calls the queue functions and writes the counters at the
 * end of struct ig_sched; everything here is under the gateway's lock. */
#ifndef IG_SCHEDULER_H
#define IG_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fleet/backend.h"
#include "infergate/list.h"
#include "keys/clients.h"
#include "sched/cluster_view.h"
#include "sched/headroom.h"

struct ig_flow;
struct ig_policy;

#define IG_RETRY_WINDOW_S 10
#define IG_HEDGE_WINDOW_S 60
#define IG_TTFB_SAMPLES 256
#define IG_TTFB_MIN 32

/* A request's place in the queues: its class and key, and where it waits. */
struct ig_sched_entry {
	int klass;                   /* enum ig_class, for the request's whole life */
	struct ig_key *key;          /* whose share it counts against (held) */
	struct ig_list link;         /* in its flow's FIFO, while waiting */
	struct ig_flow *flow;        /* NULL when not waiting */
	uint64_t deadline_ms;
};

/* One key's waiting requests in one class of one model. */
struct ig_flow {
	struct ig_list link;         /* in the class's list of flows */
	struct ig_list queue;        /* FIFO of struct ig_sched_entry */
	size_t qlen;
	struct ig_key *key;
	double tag;                  /* virtual start time of its next request */
};

struct ig_class_queue {
	struct ig_list flows;        /* flows with waiting requests */
	size_t qlen;
	double vtime;                /* tag of the last request dispatched */
};

struct ig_model {
	char *name;                  /* the served name (aliases resolved) */
	struct ig_backend **backends; /* those that serve it, up or not */
	size_t nbackends;
	bool named;                  /* one of them names it (not only takes any model) */
	bool pairs;                  /* some of them are prefill servers: its requests
				      * go to pairs (path/try_pd.c) */
	unsigned rotor;              /* the policies' rotating start among them */
	struct ig_class_queue q[IG_NCLASSES];
	size_t qlen;                 /* waiting, all classes */
	unsigned since_low;          /* higher-class dispatches while low waited */
	long inflight;               /* its requests on a backend now */
	unsigned ends_held;          /* its requests that ended here while others
				      * waited, since low's last turn (dispatch.c) */
	uint64_t ends_run;           /* the run of the others' waiting it counts in
				      * (cluster_view.h's ig_cluster_waiting_run;
				      * another run: counted from 0) */
	size_t refs;                 /* requests that hold this entry */
	uint64_t requests;           /* dispatched or queued, in total */
	uint64_t queued;             /* of which waited in the queue */
	uint64_t rejected;           /* 429: its queue was full */
	uint64_t timeouts;           /* 503: waited too long */
	/* Its backends' time to the first byte of their last IG_TTFB_SAMPLES
	 * answers (ms; an attempt's start to its first byte, a whole answer's
	 * end), and their 95th percentile (hedge.after_ms -1). */
	uint32_t ttfb_ms[IG_TTFB_SAMPLES];
	unsigned ttfb_n, ttfb_at;
	long ttfb_p95_ms;            /* 0 until IG_TTFB_MIN samples */
	/* The slots kept free of new low work for its high and normal
	 * requests, learned (headroom.h; dispatch.c updates and reads it). */
	struct ig_headroom headroom;
	long pool_slots;             /* its usable backends' slots at the last update (0: unknown) */
	long free_slots;             /* of them free then, -1 unknown */
	bool reserve_set;            /* some backend of it has reserve_slots: no learning */
	long overshoot_slots;        /* headroom.overshoot x its usable backends that preempt
				      * lower priorities: taken over their slots, not kept */
	long preempting;             /* those backends */
	long kept_slots;             /* what low work was kept from at the last update */
};

struct ig_sched {
	unsigned low_every;          /* low's guaranteed turn: 1 dispatch in this many */
	struct ig_model **v;         /* served models first seen first; entries
				      * for names no backend serves are made only
				      * while some backend's list is unknown */
	size_t n, cap;
	size_t next;                 /* where the next drain pass starts */
	size_t unknown_up;           /* backends whose models are not known yet that
				      * are up or not probed yet: requests for a
				      * model no one else serves wait for their lists */
	size_t unknown_down;         /* down ones (probed): such requests get 503 */
	/* dispatch.c's: the routing policy and its state, and the counts */
	const struct ig_policy *policy;
	void *policy_state;
	/* a pair's halves' own (pd.prefill_policy, pd.decode_policy): [0]
	 * prefill, [1] decode and a short prompt's server in a pool with pairs */
	const struct ig_policy *pd_policy[2]; /* written by: dispatch */
	void *pd_state[2];                    /* written by: dispatch */
	size_t qlen;                 /* requests waiting, all models */
	uint64_t dispatched;         /* requests sent to a backend (first attempts) */
	/* the retry budget: requests and retries per second of the last
	 * IG_RETRY_WINDOW_S (a ring by second), and the retries it refused */
	uint64_t budget_sec[IG_RETRY_WINDOW_S];
	uint64_t budget_req[IG_RETRY_WINDOW_S], budget_retry[IG_RETRY_WINDOW_S];
	/* Hedges (proxy.c) and requests over the last IG_HEDGE_WINDOW_S, by second */
	uint64_t hedge_sec[IG_HEDGE_WINDOW_S];
	uint64_t hedge_req[IG_HEDGE_WINDOW_S], hedge_n[IG_HEDGE_WINDOW_S];
	uint64_t retries_denied;
	long class_inflight[IG_NCLASSES];
};

void ig_sched_init(struct ig_sched *s);
/* Takes low's share from the configuration (at start and on reload). */
void ig_sched_configure(struct ig_sched *s, const struct ig_conf *cfg);
void ig_sched_free(struct ig_sched *s);
/* Recomputes every entry's backends from the table, adds entries for newly
 * served names and drops unserved entries no request holds. Returns 0 or -1
 * (out of memory: entries kept as they were). */
int ig_sched_rebuild(struct ig_sched *s, const struct ig_fleet *fleet);
/* The entry for a served name, or NULL. */
struct ig_model *ig_sched_find(const struct ig_sched *s, const char *name);
/* The entry for `name`, made when missing (with the backends that serve any
 * model, if some do). NULL when out of memory. */
struct ig_model *ig_sched_get(struct ig_sched *s, const struct ig_fleet *fleet, const char *name);
/* A request takes / lets go of its entry (an unserved one goes with its
 * last request). */
static inline void ig_sched_hold(struct ig_model *m)
{
	m->refs++;
}
void ig_sched_release(struct ig_sched *s, struct ig_model *m);

/* Queues e (its klass, key and deadline set) at the end of its key's FIFO
 * in its class of m. Returns 0 or -1 (out of memory). */
int ig_sched_enqueue(struct ig_sched *s, struct ig_model *m, struct ig_sched_entry *e);
/* Puts e, just taken out (ig_sched_dequeue), back at the head of its key's
 * FIFO; its flow, if it went with it, is made again with `tag`, the one it
 * had. Returns 0 or -1 (out of memory). */
int ig_sched_requeue_front(struct ig_sched *s, struct ig_model *m, struct ig_sched_entry *e, double tag);
/* Takes e out of its queue (it left, timed out or is dispatched). */
void ig_sched_dequeue(struct ig_sched *s, struct ig_model *m, struct ig_sched_entry *e);
/* The request that should run next in m (see the top of this file), or
 * NULL when none may (nothing waits, or every waiting key is at its cap:
 * its part of it with other gateways, as v says). */
struct ig_sched_entry *ig_sched_next(struct ig_sched *s, struct ig_model *m, const struct ig_cluster_view *v);
/* e, returned by ig_sched_next, leaves for a backend: dequeued, and the
 * class's virtual time and low's turn are advanced. */
void ig_sched_dispatch(struct ig_sched *s, struct ig_model *m, struct ig_sched_entry *e);
/* Calls fn for every entry of m whose deadline is <= now (each flow's
 * head first: a flow is FIFO within one timeout). fn must dequeue it. */
void ig_sched_expire(struct ig_sched *s, struct ig_model *m, uint64_t now_ms,
		     void (*fn)(struct ig_sched_entry *e, void *arg), void *arg);

/* One answer's time to its first byte (ms), for m's learned p95. */
void ig_sched_ttfb(struct ig_model *m, uint64_t ms);
/* The retry budget's window (dispatch.c's): requests and retries of the
 * IG_RETRY_WINDOW_S seconds up to `sec`. */
void ig_sched_budget_window(const struct ig_sched *s, uint64_t sec, uint64_t *requests, uint64_t *retries);
/* Healthy backends among m's. */
size_t ig_sched_healthy(const struct ig_model *m);
/* Waiting requests of one class, every model. */
size_t ig_sched_waiting(const struct ig_sched *s, int klass);

#endif
