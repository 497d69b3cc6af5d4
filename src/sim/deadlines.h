/* The engine's running requests by their next deadline (struct sim_req's
 * deadline_us): a binary min-heap, each request knowing its place
 * (heap_idx, -1 when out), so that one timer serves thousands of streams
 * and a request leaves in O(log n). The engine's alone (engine.c). */
#ifndef IG_SIM_DEADLINES_H
#define IG_SIM_DEADLINES_H

#include <stddef.h>

#include "request.h"

struct sim_deadlines {
	struct sim_req **v;         /* v[0]: the earliest */
	size_t len, cap;
};

/* r in (aborts when out of memory: a few KB, nothing sensible to do). */
void sim_deadlines_push(struct sim_deadlines *h, struct sim_req *r);
/* r out, when it is in. */
void sim_deadlines_remove(struct sim_deadlines *h, struct sim_req *r);
/* r's deadline moved later: the order restored. */
void sim_deadlines_later(struct sim_deadlines *h, struct sim_req *r);
/* Several deadlines moved earlier: the whole heap ordered again. */
void sim_deadlines_reorder(struct sim_deadlines *h);
void sim_deadlines_free(struct sim_deadlines *h);

#endif
