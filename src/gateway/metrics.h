/* The gateway's self-reports: bodies for /health, /health/backends,
 * /v1/models and /metrics, and the counting of finished requests. Reads
 * everything below it, changes nothing but the counters in gw->stats.
 * Modules above it (the Batch API) are not called: they register what
 * they report (struct ig_metrics_source) when they open and remove it
 * when they are freed. */
#ifndef IG_METRICS_H
#define IG_METRICS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cluster_view.h"
#include "gateway.h"
#include "infergate/buf.h"

/* What a module above metrics reports: an entry `name` in
 * /health/backends' JSON (json: a new reference) and its own series in
 * /metrics (prom: whole HELP/TYPE blocks). Either may be NULL. */
struct ig_metrics_source {
	const char *name;
	json_t *(*json)(void *arg);
	void (*prom)(void *arg, struct ig_buf *out);
	void *arg;
};
/* Adds src (copied; name must outlive it), shown after the gateway's own
 * in the order added. Returns 0, or -1 out of memory. */
int ig_metrics_register(struct ig_gw *gw, const struct ig_metrics_source *src);
/* Removes the sources registered with arg. */
void ig_metrics_unregister(struct ig_gw *gw, const void *arg);

/* Counts a finished proxied request: its route, the status it ended with,
 * whether a 200 stream carried an error event, the backend that answered
 * ("" none), its duration and, for streams, the time to the first byte
 * (-1: none). */
void ig_metrics_observe(struct ig_gw *gw, int route, unsigned status, bool stream_error, const char *backend,
			uint64_t duration_us, int64_t ttfb_us);
/* Counts an answered (2xx) request of `model` for the per-model series:
 * its duration, its time to first token (streams; -1 none), its tokens
 * (-1 unknown). */
void ig_metrics_observe_model(struct ig_gw *gw, const char *model, uint64_t duration_us, int64_t ttft_us,
			      long prompt_tokens, long completion_tokens);
void ig_metrics_free(struct ig_gw *gw);
/* Counts how long a request of class klass waited in a queue. */
void ig_metrics_observe_wait(struct ig_gw *gw, int klass, uint64_t waited_ms);

/* Bodies, malloc'd. */
char *ig_metrics_text(struct ig_gw *gw);
/* /health: *status is 200 with a healthy backend, else 503. */
char *ig_metrics_health_json(struct ig_gw *gw, unsigned *status);
char *ig_metrics_backends_json(struct ig_gw *gw);
/* Takes the second's sample of the headline figures for the status page,
 * once per wall-clock second (reactor 0's tick, under the lock). */
void ig_metrics_sample(struct ig_gw *gw);
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
