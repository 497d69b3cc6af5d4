/* The gateway's self-reports: /health (for load balancers and curl -f),
 * /health/backends (per-backend detail), /v1/models (union of healthy
 * backends' models) and /metrics (Prometheus text). Each builds a body from
 * counters; none changes state. */
#include "config.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/buf.h"
#include "infergate/gateway.h"
#include "infergate/util.h"

static char *dump(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(j);
	return s;
}

char *ig_health_json(struct ig_gw *gw, unsigned *status)
{
	size_t k = ig_pool_healthy(&gw->pool);
	*status = k > 0 ? 200 : 503;
	return dump(json_pack("{s:s, s:I, s:I}", "status", k > 0 ? "ok" : "unavailable",
			      "healthy_backends", (json_int_t)k, "backends", (json_int_t)gw->pool.n));
}

json_t *ig_backend_to_json(const struct ig_backend *b, uint64_t now)
{
	json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			      "id", (json_int_t)b->id, "url", b->url,
			      "state", ig_backend_state_name(atomic_load(&b->state)),
			      "admin", ig_backend_admin_name(atomic_load(&b->admin)),
			      "weight", (json_int_t)b->weight, "max_inflight", (json_int_t)b->max_inflight,
			      "inflight", (json_int_t)atomic_load(&b->inflight),
			      "served", (json_int_t)atomic_load(&b->served),
			      "failures", (json_int_t)atomic_load(&b->failures),
			      "retried", (json_int_t)atomic_load(&b->retried),
			      "aborted", (json_int_t)atomic_load(&b->aborted),
			      "prompt_tokens", (json_int_t)atomic_load(&b->prompt_tokens),
			      "completion_tokens", (json_int_t)atomic_load(&b->completion_tokens));
	json_t *probe = json_object();
	if (b->last_probe_ms) {
		json_object_set_new(probe, "ok", json_boolean(b->last_probe_ok));
		json_object_set_new(probe, "status", json_integer(b->last_probe_status));
		json_object_set_new(probe, "latency_ms", json_real(b->last_probe_latency_ms));
		json_object_set_new(probe, "age_ms", json_integer((json_int_t)(now - b->last_probe_ms)));
		if (!b->last_probe_ok)
			json_object_set_new(probe, "error", json_string(b->last_probe_error));
	}
	json_object_set_new(o, "last_probe", probe);
	return o;
}

char *ig_backends_json(struct ig_gw *gw)
{
	json_t *arr = json_array();
	uint64_t now = ig_now_ms();
	for (size_t i = 0; i < gw->pool.n; i++)
		json_array_append_new(arr, ig_backend_to_json(gw->pool.v[i], now));
	json_t *g = json_pack("{s:s, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			      "version", PACKAGE_VERSION,
			      "uptime_s", (double)(now - gw->started_ms) / 1000.0,
			      "requests", (json_int_t)gw->stats.requests,
			      "inflight", (json_int_t)gw->nreqs,
			      "queue_depth", (json_int_t)gw->qlen,
			      "healthy_backends", (json_int_t)ig_pool_healthy(&gw->pool),
			      "backends", (json_int_t)gw->pool.n,
			      "prompt_tokens", (json_int_t)gw->stats.prompt_tokens,
			      "completion_tokens", (json_int_t)gw->stats.completion_tokens);
	return dump(json_pack("{s:o, s:o}", "gateway", g, "backends", arr));
}

char *ig_models_json(struct ig_gw *gw)
{
	json_t *data = json_array(), *seen = json_object();
	for (size_t i = 0; i < gw->pool.n; i++) {
		struct ig_backend *b = gw->pool.v[i];
		size_t j;
		json_t *m;
		if (atomic_load(&b->state) != IG_BACKEND_UP || !b->models)
			continue;
		json_array_foreach(b->models, j, m) {
			const char *id = json_string_value(json_object_get(m, "id"));
			if (!id || json_object_get(seen, id))
				continue;
			json_object_set_new(seen, id, json_true());
			json_array_append(data, m);
		}
	}
	json_decref(seen);
	return dump(json_pack("{s:s, s:o}", "object", "list", "data", data));
}

char *ig_metrics_text(struct ig_gw *gw)
{
	struct ig_buf b;
	const struct ig_stats *s = &gw->stats;
	static const char *uperr[] = {"none", "connect", "reset", "timeout", "status", "other"};

	ig_buf_init(&b);
	ig_buf_printf(&b, "# HELP infergate_build_info Build information.\n# TYPE infergate_build_info gauge\n"
		      "infergate_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	ig_buf_printf(&b, "# HELP infergate_uptime_seconds Seconds since start.\n# TYPE infergate_uptime_seconds gauge\n"
		      "infergate_uptime_seconds %.3f\n", (double)(ig_now_ms() - gw->started_ms) / 1000.0);
	ig_buf_printf(&b, "# HELP infergate_requests_total Proxied requests received.\n"
		      "# TYPE infergate_requests_total counter\ninfergate_requests_total %lu\n",
		      (unsigned long)s->requests);
	ig_buf_printf(&b, "# HELP infergate_responses_total Responses sent, by status class.\n"
		      "# TYPE infergate_responses_total counter\n");
	for (int c = 1; c <= 5; c++)
		ig_buf_printf(&b, "infergate_responses_total{code=\"%dxx\"} %lu\n", c, (unsigned long)s->responses[c]);
	ig_buf_printf(&b, "# HELP infergate_retries_total Requests moved to another backend.\n"
		      "# TYPE infergate_retries_total counter\ninfergate_retries_total %lu\n", (unsigned long)s->retries);
	ig_buf_printf(&b, "# HELP infergate_client_aborts_total Requests whose client left first.\n"
		      "# TYPE infergate_client_aborts_total counter\ninfergate_client_aborts_total %lu\n",
		      (unsigned long)s->client_aborts);
	ig_buf_printf(&b, "# HELP infergate_queue_depth Requests waiting for a backend slot.\n"
		      "# TYPE infergate_queue_depth gauge\ninfergate_queue_depth %zu\n", gw->qlen);
	ig_buf_printf(&b, "# HELP infergate_queue_rejected_total Requests refused with 429 (queue full).\n"
		      "# TYPE infergate_queue_rejected_total counter\ninfergate_queue_rejected_total %lu\n",
		      (unsigned long)s->queue_rejected);
	ig_buf_printf(&b, "# HELP infergate_queue_timeouts_total Requests that waited too long (503).\n"
		      "# TYPE infergate_queue_timeouts_total counter\ninfergate_queue_timeouts_total %lu\n",
		      (unsigned long)s->queue_timeouts);
	ig_buf_printf(&b, "# HELP infergate_upstream_errors_total Upstream failures by type.\n"
		      "# TYPE infergate_upstream_errors_total counter\n");
	for (int e = IG_UPERR_CONNECT; e <= IG_UPERR_OTHER; e++)
		ig_buf_printf(&b, "infergate_upstream_errors_total{type=\"%s\"} %lu\n", uperr[e],
			      (unsigned long)s->upstream_errors[e]);
	ig_buf_printf(&b, "# HELP infergate_backend_up Backend health (1 up, 0 down).\n# TYPE infergate_backend_up gauge\n");
	for (size_t i = 0; i < gw->pool.n; i++)
		ig_buf_printf(&b, "infergate_backend_up{backend=\"%s\"} %d\n", gw->pool.v[i]->url,
			      atomic_load(&gw->pool.v[i]->state) == IG_BACKEND_UP);
	ig_buf_printf(&b, "# HELP infergate_backend_inflight Requests in flight per backend.\n"
		      "# TYPE infergate_backend_inflight gauge\n");
	for (size_t i = 0; i < gw->pool.n; i++)
		ig_buf_printf(&b, "infergate_backend_inflight{backend=\"%s\"} %ld\n", gw->pool.v[i]->url,
			      atomic_load(&gw->pool.v[i]->inflight));
	ig_buf_printf(&b, "# HELP infergate_backend_served_total Responses relayed per backend.\n"
		      "# TYPE infergate_backend_served_total counter\n");
	for (size_t i = 0; i < gw->pool.n; i++)
		ig_buf_printf(&b, "infergate_backend_served_total{backend=\"%s\"} %lu\n", gw->pool.v[i]->url,
			      atomic_load(&gw->pool.v[i]->served));
	ig_buf_printf(&b, "# HELP infergate_backend_failures_total Failed transfers per backend.\n"
		      "# TYPE infergate_backend_failures_total counter\n");
	for (size_t i = 0; i < gw->pool.n; i++)
		ig_buf_printf(&b, "infergate_backend_failures_total{backend=\"%s\"} %lu\n", gw->pool.v[i]->url,
			      atomic_load(&gw->pool.v[i]->failures));
	ig_buf_append(&b, "", 1);
	char *out = strdup(ig_buf_head(&b));
	ig_buf_free(&b);
	return out;
}
