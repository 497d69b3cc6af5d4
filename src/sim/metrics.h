/* The bodies of the simulator's read-only reports (metrics.c): /metrics,
 * /v1/loads, /get_load and /sim/state. Each returns a malloc'd,
 * NUL-terminated body; server.c answers with it. */
#ifndef IG_SIM_METRICS_H
#define IG_SIM_METRICS_H

#include "sim.h"

/* GET /metrics: the imitated server's series (--flavor), then the
 * simulator's own; Prometheus text format 0.0.4. */
char *sim_metrics_text(struct sim *s);
/* GET /v1/loads (SGLang); dp_rank: the ?dp_rank= query's value, or NULL.
 * Returns NULL when it is not an integer (FastAPI's answer is a 400). */
char *sim_metrics_loads(struct sim *s, const char *dp_rank);
/* GET /get_load (SGLang, deprecated): one object per rank; the deprecation
 * is logged once. */
char *sim_metrics_get_load(struct sim *s);
/* GET /sim/state: the live totals and per-rank counts. */
/* GET /server_info: the server's settings (SGLang's names). */
char *sim_metrics_server_info(struct sim *s);
char *sim_metrics_state(struct sim *s);

#endif
