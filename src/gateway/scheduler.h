/* The scheduler's state: one entry per model with the backends that serve
 * it (the pool its requests are routed among) and its own wait queue, so a
 * request for an idle model never waits behind another model's queue.
 * The entries are rebuilt from the backend table whenever a backend's
 * models, state or presence change (ig_sched_rebuild); the queues hold
 * links of the requests (proxy.c), which this module never looks into. */
#ifndef IG_SCHEDULER_H
#define IG_SCHEDULER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "infergate/list.h"

struct ig_model {
	char *name;                  /* the served name (aliases resolved) */
	struct ig_backend **backends; /* those that serve it, up or not */
	size_t nbackends;
	atomic_uint rotor;           /* the router's rotating start among them */
	struct ig_list queue;        /* FIFO of requests waiting for a slot */
	size_t qlen;
	long inflight;               /* its requests on a backend now */
	size_t refs;                 /* requests that hold this entry */
	uint64_t requests;           /* routed or queued, in total */
	uint64_t queued;             /* of which waited in the queue */
	uint64_t rejected;           /* 429: its queue was full */
	uint64_t timeouts;           /* 503: waited too long */
};

struct ig_sched {
	struct ig_model **v;         /* served models first seen first; entries
				      * for names no backend serves are made only
				      * while some backend's list is unknown */
	size_t n, cap;
	size_t next;                 /* where the next drain pass starts */
	size_t unknown_up;           /* backends whose models are not known yet that
				      * are up or not probed yet: requests for a
				      * model no one else serves wait for their lists */
	size_t unknown_down;         /* down ones (probed): such requests get 503 */
};

void ig_sched_init(struct ig_sched *s);
void ig_sched_free(struct ig_sched *s);
/* Recomputes every entry's backends from the table, adds entries for newly
 * served names and drops unserved entries no request holds. Returns 0 or -1
 * (out of memory: entries kept as they were). */
int ig_sched_rebuild(struct ig_sched *s, const struct ig_pool *pool);
/* The entry for a served name, or NULL. */
struct ig_model *ig_sched_find(const struct ig_sched *s, const char *name);
/* The entry for `name`, made when missing (with the backends that serve any
 * model, if some do). NULL when out of memory. */
struct ig_model *ig_sched_get(struct ig_sched *s, const struct ig_pool *pool, const char *name);
/* A request takes / lets go of its entry (an unserved one goes with its
 * last request). */
static inline void ig_sched_hold(struct ig_model *m)
{
	m->refs++;
}
void ig_sched_release(struct ig_sched *s, struct ig_model *m);
/* Healthy backends among m's. */
size_t ig_sched_healthy(const struct ig_model *m);
/* Waiting requests of every model. */
size_t ig_sched_waiting(const struct ig_sched *s);

#endif
