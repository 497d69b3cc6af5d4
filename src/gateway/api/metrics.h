/* The gateway's self-reports: bodies for /health, /health/backends,
 * /v1/models and /metrics (the JSON ones: metrics_json.c), built from what
 * the modules count and register (stats.h). Reads everything below it and
 * changes nothing but the status page's history. */
#ifndef IG_METRICS_H
#define IG_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "infergate/buf.h"
#include "sched/cluster_view.h"

#include "obs/stats.h"

/* Bodies, malloc'd (the JSON ones: metrics_json.c). */
char *ig_metrics_text(struct ig_gw *gw);
/* /health: *status is 200 with a healthy backend, else 503. */
char *ig_metrics_health_json(struct ig_gw *gw, unsigned *status);
char *ig_metrics_backends_json(struct ig_gw *gw);
/* Takes the second's sample of the headline figures for the status page,
 * once per wall-clock second (reactor 0's tick, under the lock). */
void ig_metrics_sample(struct ig_gw *gw);
/* Registers that sample as reactor 0's timer (boot.c). Returns 0 or -1. */
int ig_metrics_start(struct ig_gw *gw);
/* GET /status/history: {"interval_s": 1, "fields": [...], "samples":
 * [[t_ms, requests, completion_tokens, inflight, queued, healthy], ...]},
 * oldest first, the last 30 minutes. */
char *ig_metrics_history_json(struct ig_gw *gw);
/* GET /health/capacity: per model, the requests its pool takes at once. */
char *ig_metrics_capacity_json(struct ig_gw *gw);
json_t *ig_metrics_backend_json(const struct ig_cluster_view *v, const struct ig_backend *b, uint64_t now);
/* /v1/models; key: only the models it may use (NULL: all). */
char *ig_metrics_models_json(struct ig_gw *gw, const struct ig_keyent *key);
/* /admin/keys: every key of the keys file with its settings, the state of
 * its limits and its usage. */
json_t *ig_metrics_keys_json(struct ig_gw *gw);

#endif
