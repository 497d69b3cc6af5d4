/* Backend health: active probes (health, models, load reports) and passive
 * accounting of requests, as a rise/fall state machine per backend; and the
 * lifecycle of a backend's probe state (added, removed). */
#ifndef IG_HEALTH_H
#define IG_HEALTH_H

#include <stdint.h>

#include "gateway.h"
#include "net/upstream.h"

/* Probe state for every backend of the fleet. Returns 0 or -1. */
int ig_health_init(struct ig_gw *gw);
void ig_health_free(struct ig_gw *gw);
/* Probe state for a backend added at run time (probed at once) / about to
 * be removed (its probe aborted). Returns 0 or -1 (out of memory). */
int ig_health_add(struct ig_gw *gw, struct ig_backend *b);
void ig_health_remove(struct ig_gw *gw, struct ig_backend *b);
/* Housekeeping tick: starts the probes that are due. */
void ig_health_tick(struct ig_gw *gw, uint64_t now_ms);
/* Removes the backends marked for removal (admin API, reload, discovery)
 * whose in-flight requests are done. */
void ig_health_reap(struct ig_gw *gw);
/* A request to b succeeded / failed (passive checks): a refused connection
 * ejects at once, other failures after `fall` in a row. */
void ig_health_passive_ok(struct ig_gw *gw, struct ig_backend *b);
void ig_health_passive_fail(struct ig_gw *gw, struct ig_backend *b, enum ig_upstream_error e,
			    const char *detail);

#endif
