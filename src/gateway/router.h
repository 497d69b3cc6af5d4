/* Picking a backend for one request: the load-balancing policies. Each
 * policy only chooses among eligible backends (up, under their limit, not
 * already tried by this request); it never blocks and never allocates. */
#ifndef IG_ROUTER_H
#define IG_ROUTER_H

#include <stdbool.h>

#include "affinity.h"
#include "backend.h"

enum ig_pick {
	IG_PICK_OK,       /* *out is set; its inflight was incremented */
	IG_PICK_BUSY,     /* healthy backends exist but all are at max_inflight */
	IG_PICK_NONE,     /* no healthy backend that this request has not tried */
};

/* What the router needs to know of the request it places. */
struct ig_route_req {
	bool low;                        /* class low (a bulk run): may not take a
					  * backend's last reserve_slots slots */
	long tokens;                     /* least-tokens: the work it brings (its
					  * prompt estimate and its max output) */
	int pinned;                      /* 1 + the id of the only backend it may go to
					  * (it holds the response a follow-up names);
					  * 0: any (so that {0} means no pin) */
	struct ig_backend *const *tried; /* backends it failed on: skipped */
	int ntried;
	/* cache-aware: its prompt's block chain, what each backend was sent,
	 * and when a match wins (cache_aware.* in conf.h) */
	const struct ig_affinity *affinity;
	const uint64_t *chain;
	size_t nchain;
	long threshold_percent, balance_abs;
	double balance_rel;
};

/* Picks one of the n backends in v (a model's pool, scheduler.h) for rq and
 * reserves an in-flight slot on it. `rotor` is the pool's rotating start
 * for ties. */
enum ig_pick ig_router_pick(struct ig_backend *const *v, size_t n, atomic_uint *rotor, enum ig_policy policy,
			    const struct ig_route_req *rq, struct ig_backend **out);
/* Releases the slot taken by ig_router_pick. */
void ig_router_release(struct ig_backend *b);
/* The in-flight limit that applies to a request: a low one leaves the
 * backend's reserve_slots free (0 = no limit, -1 = none for low). */
long ig_router_limit(const struct ig_backend *b, bool low);
/* Reports between probes above the peak: a backend that queues cannot run
 * more, so going past what it ran costs a request waiting there. */
#define IG_SLOTS_PROBE_AFTER 5

/* Learns from one load report of a backend: `running` and `waiting` in its
 * own queue (-1 unknown), `ours` of them in flight from this gateway.
 * A backend that queues is full: the limit becomes our share of what it
 * runs, running x ours / (running + waiting) rounded up (all of it when we
 * are its only client; gateways sharing it so do not overfill it together).
 * Without a queue while we are at the limit, the limit climbs back towards
 * the peak (a queue seen in passing can undercount), and past it only after
 * IG_SLOTS_PROBE_AFTER calm reports, by an eighth. Returns the new limit. */
long ig_router_slots_learn(struct ig_slots *s, long running, long waiting, long ours);

/* Takes one load report, guarded against stale ones, and learns from it.
 * A report tells the backend's state at some moment since the previous
 * one, not now (SGLang's /metrics gauges are refreshed only when its
 * scheduler logs: each prefill batch, every 40 decode steps, every 30 s
 * when idle, so a queue can show long after it is gone):
 * - it is weighed against `peak`, the most requests this gateway had in
 *   flight there since the previous report, not `ours` now;
 * - a queue while we had nothing there says nothing of our share;
 * - counts that repeat the previous report's exactly while our own traffic
 *   there moved (`ours` or `done`, our finished requests, changed) are stale:
 *   a live server's counts would have moved too; and they stay stale while
 *   they repeat.
 * What is not learned from leaves the limit as it was. Returns the limit;
 * *stale tells whether the report was set aside as stale. */
long ig_router_slots_report(struct ig_slots *s, long running, long waiting, long ours, long peak, unsigned long done,
		     bool *stale);

#endif
