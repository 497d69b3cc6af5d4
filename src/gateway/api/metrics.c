/* The gateway's Prometheus text (/metrics), built from the counters and
 * the modules' registered families (stats.c); the JSON self-reports
 * (/health, /health/backends, /v1/models, ...) are metrics_json.c. Nothing
 * here changes state but the status page's history. */
#include "config.h"
#include <jansson.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/metrics.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "net/servertls.h"
#include "obs/trace.h"
#include "sched/affinity.h"
#include "sched/policy.h"

/* The series of one histogram with one label (key="value"), cumulative as
 * Prometheus wants; the HELP and TYPE lines are the caller's. */
static void hist_series(struct ig_buf *b, const char *name, const char *key, const char *value,
			const struct ig_metrics_hist *h)
{
	uint64_t cum = 0;
	struct ig_buf lv;
	ig_buf_init(&lv);
	ig_buf_printf(&lv, "%s=\"", key);
	ig_buf_prom_label(&lv, value);
	ig_buf_append(&lv, "\"", 2); /* with its NUL */
	const char *l = ig_buf_head(&lv);
	for (int i = 0; i < IG_HIST_BUCKETS; i++) {
		cum += h->counts[i];
		ig_buf_printf(b, "%s_bucket{%s,le=\"%g\"} %lu\n", name, l, ig_stats_bounds[i], (unsigned long)cum);
	}
	cum += h->counts[IG_HIST_BUCKETS];
	ig_buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %lu\n", name, l, (unsigned long)cum);
	ig_buf_printf(b, "%s_sum{%s} %.6f\n%s_count{%s} %lu\n", name, l, h->sum, name, l, (unsigned long)h->n);
	ig_buf_free(&lv);
}

static void print_hist(struct ig_buf *b, const struct ig_conf *cfg, const char *name, const char *help,
		       const struct ig_metrics_hist *h)
{
	ig_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int r = 0; (size_t)r < cfg->routes.n; r++)
		if (r < IG_ROUTES_SHOWN || h[r].n > 0) /* the others once used */
			hist_series(b, name, "route", ig_route_path(cfg, r), &h[r]);
}

/* One per-backend series; `get` reads the value. */
static void per_backend(struct ig_buf *b, struct ig_gw *gw, const char *name, const char *type,
			const char *help, unsigned long (*get)(const struct ig_backend *))
{
	ig_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	for (size_t i = 0; i < gw->fleet.n; i++) {
		ig_buf_printf(b, "%s{backend=\"", name);
		ig_buf_prom_label(b, gw->fleet.v[i]->key);
		ig_buf_printf(b, "\"} %lu\n", get(gw->fleet.v[i]));
	}
}

static unsigned long get_up(const struct ig_backend *x) { return atomic_load(&x->state) == IG_BACKEND_UP; }
static unsigned long get_enabled(const struct ig_backend *x) { return atomic_load(&x->admin) == IG_ADMIN_ENABLED; }
static unsigned long get_inflight(const struct ig_backend *x) { return (unsigned long)atomic_load(&x->inflight); }
static unsigned long get_limit(const struct ig_backend *x) { return (unsigned long)ig_backend_limit(x); }
static unsigned long get_served(const struct ig_backend *x) { return atomic_load(&x->served); }
static unsigned long get_failures(const struct ig_backend *x) { return atomic_load(&x->failures); }
static unsigned long get_retried(const struct ig_backend *x) { return atomic_load(&x->retried); }
static unsigned long get_rests(const struct ig_backend *x) { return atomic_load(&x->rests); }
static unsigned long get_breaker(const struct ig_backend *x)
{
	const char *s = ig_backend_breaker_state(x);
	return s[0] == 'c' ? 0 : s[0] == 'o' ? 1 : 2;
}
static unsigned long get_breaker_opened(const struct ig_backend *x) { return atomic_load(&x->breaker_opened); }
static unsigned long get_aborted(const struct ig_backend *x) { return atomic_load(&x->aborted); }
static unsigned long get_ptok(const struct ig_backend *x) { return atomic_load(&x->prompt_tokens); }
static unsigned long get_ctok(const struct ig_backend *x) { return atomic_load(&x->completion_tokens); }

static void per_model(struct ig_buf *b, struct ig_gw *gw)
{
	static const struct {
		const char *name, *type, *help;
	} series[] = {
		{"infergate_model_queue_depth", "gauge", "Requests waiting for a slot, per model."},
		{"infergate_model_inflight", "gauge", "Requests on a backend, per model."},
		{"infergate_model_backends_healthy", "gauge", "Healthy backends that serve the model."},
		{"infergate_model_requests_total", "counter", "Requests dispatched or queued, per model."},
		{"infergate_model_queued_total", "counter", "Requests that waited in the model's queue."},
		{"infergate_model_queue_rejected_total", "counter", "Requests refused with 429 (the model's queue full)."},
		{"infergate_model_queue_timeouts_total", "counter", "Requests that waited too long (503), per model."},
	};
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		ig_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help, series[k].name,
			      series[k].type);
		for (size_t i = 0; i < gw->sched.n; i++) {
			const struct ig_model *m = gw->sched.v[i];
			uint64_t v[] = {m->qlen, (uint64_t)m->inflight, ig_sched_healthy(m), m->requests, m->queued,
					m->rejected, m->timeouts};
			ig_buf_printf(b, "%s{model=\"", series[k].name);
			ig_buf_prom_label(b, m->name);
			ig_buf_printf(b, "\"} %llu\n", (unsigned long long)v[k]);
		}
	}
}

static void per_model_ttfb(struct ig_buf *b, struct ig_gw *gw)
{
	ig_buf_printf(b, "# HELP infergate_model_ttfb_p95_seconds The 95th percentile of its backends' time to "
		      "first byte over its last 256 answers (hedge.after_ms -1); 0 until 32.\n"
		      "# TYPE infergate_model_ttfb_p95_seconds gauge\n");
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		ig_buf_printf(b, "infergate_model_ttfb_p95_seconds{model=\"");
		ig_buf_prom_label(b, m->name);
		ig_buf_printf(b, "\"} %.3f\n", (double)m->ttfb_p95_ms / 1000.0);
	}
}

static void per_model_headroom(struct ig_buf *b, struct ig_gw *gw)
{
	static const struct {
		const char *name, *help;
	} series[] = {
		{"infergate_model_headroom_slots", "Slots for high and normal requests, learned from their traffic "
						   "(headroom.max_percent)."},
		{"infergate_model_headroom_kept_slots", "Of them, those kept free of new low work: the rest go over "
							"the slots of backends that preempt (headroom.overshoot)."},
		{"infergate_model_interactive_arrivals_per_second", "High and normal requests a second, over the "
								   "last 10 s (the headroom's rate)."},
		{"infergate_model_interactive_busy_seconds", "How long a high or normal request holds a slot (EWMA; "
							    "the headroom's time)."},
	};
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		ig_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", series[k].name, series[k].help, series[k].name);
		for (size_t i = 0; i < gw->sched.n; i++) {
			const struct ig_model *m = gw->sched.v[i];
			double v = k == 0 ? (double)m->headroom.slots : k == 1 ? (double)m->kept_slots
				   : k == 2 ? m->headroom.rate : m->headroom.busy_s;
			ig_buf_printf(b, "%s{model=\"", series[k].name);
			ig_buf_prom_label(b, m->name);
			ig_buf_printf(b, "\"} %.3f\n", v);
		}
	}
}

/* Per model: the GenAI latency histograms and tokens by kind. */
static void per_model_genai(struct ig_buf *b, struct ig_gw *gw)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} h[] = {
		{"infergate_model_time_to_first_token_seconds", "Streams: time from the request to its first token, "
								"per model (answered requests).",
		 offsetof(struct ig_model_stats, ttft)},
		{"infergate_model_time_per_output_token_seconds", "Streams: (duration - time to first token) / "
								  "(output tokens - 1), per model.",
		 offsetof(struct ig_model_stats, tpot)},
		{"infergate_model_request_duration_seconds", "Time from the request to the end of its answer, per "
							     "model (answered requests).",
		 offsetof(struct ig_model_stats, duration)},
	};
	const struct ig_metrics_stats *s = &gw->metrics;
	for (size_t k = 0; k < sizeof(h) / sizeof(h[0]); k++) {
		ig_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", h[k].name, h[k].help, h[k].name);
		for (size_t i = 0; i < s->nmodels; i++)
			hist_series(b, h[k].name, "model", s->models[i].model,
				    (const struct ig_metrics_hist *)((const char *)&s->models[i] + h[k].off));
	}
	ig_buf_printf(b, "# HELP infergate_model_tokens_total Tokens of answered requests per model, by kind "
		      "(from their usage).\n# TYPE infergate_model_tokens_total counter\n");
	for (size_t i = 0; i < s->nmodels; i++)
		for (int k = 0; k < 2; k++) {
			ig_buf_printf(b, "infergate_model_tokens_total{model=\"");
			ig_buf_prom_label(b, s->models[i].model);
			ig_buf_printf(b, "\",kind=\"%s\"} %llu\n", k ? "completion" : "prompt",
				      (unsigned long long)(k ? s->models[i].completion_tokens : s->models[i].prompt_tokens));
		}
}

/* The trace exporter's counts (trace.h), with tracing on. */
static void tracing(struct ig_buf *b, struct ig_gw *gw)
{
	if (!gw->tracer)
		return;
	struct ig_tracer_stats st;
	ig_tracer_stats(gw->tracer, &st);
	ig_buf_printf(b, "# HELP infergate_trace_spans_exported_total Spans the collector took.\n"
		      "# TYPE infergate_trace_spans_exported_total counter\ninfergate_trace_spans_exported_total %llu\n"
		      "# HELP infergate_trace_spans_dropped_total Spans dropped: the export queue was full (a slow or "
		      "absent collector).\n"
		      "# TYPE infergate_trace_spans_dropped_total counter\ninfergate_trace_spans_dropped_total %llu\n"
		      "# HELP infergate_trace_spans_failed_total Spans of export requests the collector refused or "
		      "never answered.\n"
		      "# TYPE infergate_trace_spans_failed_total counter\ninfergate_trace_spans_failed_total %llu\n"
		      "# HELP infergate_trace_exports_total Export requests sent.\n"
		      "# TYPE infergate_trace_exports_total counter\ninfergate_trace_exports_total %llu\n"
		      "# HELP infergate_trace_queue_spans Spans waiting to be sent.\n"
		      "# TYPE infergate_trace_queue_spans gauge\ninfergate_trace_queue_spans %ld\n"
		      "# HELP infergate_trace_requests_unrecorded_total Sampled requests whose spans were not even "
		      "built: the export queue was full.\n"
		      "# TYPE infergate_trace_requests_unrecorded_total counter\n"
		      "infergate_trace_requests_unrecorded_total %llu\n",
		      st.exported, st.dropped, st.failed, st.batches, st.queued, st.unrecorded);
}

/* HTTPS for clients (servertls.h), with server_tls set. */
static void server_tls(struct ig_buf *b, struct ig_gw *gw)
{
	if (!gw->tls)
		return;
	struct ig_servertls_stats st;
	ig_servertls_stats(gw->tls, &st);
	ig_buf_printf(b, "# HELP infergate_tls_handshakes_total Client connections to the HTTPS listeners by how "
		      "their handshake ended: ok; failed (a ClientHello, then no finished handshake: a version or "
		      "suite refused, no or a refused client certificate, stalled and timed out); not_tls (closed "
		      "before a ClientHello: plain HTTP, garbage, a TCP check).\n"
		      "# TYPE infergate_tls_handshakes_total counter\n"
		      "infergate_tls_handshakes_total{result=\"ok\"} %llu\n"
		      "infergate_tls_handshakes_total{result=\"failed\"} %llu\n"
		      "infergate_tls_handshakes_total{result=\"not_tls\"} %llu\n"
		      "# HELP infergate_tls_certificate_reloads_total Certificates read again on SIGHUP, by result "
		      "(failed: the running one kept).\n"
		      "# TYPE infergate_tls_certificate_reloads_total counter\n"
		      "infergate_tls_certificate_reloads_total{result=\"ok\"} %llu\n"
		      "infergate_tls_certificate_reloads_total{result=\"failed\"} %llu\n"
		      "# HELP infergate_tls_certificate_expiry_timestamp_seconds When the certificate new connections "
		      "get expires (Unix time).\n"
		      "# TYPE infergate_tls_certificate_expiry_timestamp_seconds gauge\n"
		      "infergate_tls_certificate_expiry_timestamp_seconds{serial=\"%s\"} %lld\n",
		      (unsigned long long)st.handshakes_ok, (unsigned long long)st.handshakes_failed,
		      (unsigned long long)st.not_tls,
		      (unsigned long long)st.reloads_ok, (unsigned long long)st.reloads_failed, st.serial,
		      (long long)st.not_after);
}

static void per_class(struct ig_buf *b, struct ig_gw *gw)
{
	ig_buf_printf(b, "# HELP infergate_class_queue_depth Requests waiting, per priority class.\n"
		      "# TYPE infergate_class_queue_depth gauge\n");
	for (int c = 0; c < IG_NCLASSES; c++)
		ig_buf_printf(b, "infergate_class_queue_depth{class=\"%s\"} %zu\n", ig_conf_class_name(c),
			      ig_sched_waiting(&gw->sched, c));
	ig_buf_printf(b, "# HELP infergate_class_inflight Requests on a backend, per priority class.\n"
		      "# TYPE infergate_class_inflight gauge\n");
	for (int c = 0; c < IG_NCLASSES; c++)
		ig_buf_printf(b, "infergate_class_inflight{class=\"%s\"} %ld\n", ig_conf_class_name(c),
			      gw->sched.class_inflight[c]);
	const char *name = "infergate_queue_wait_seconds";
	ig_buf_printf(b, "# HELP %s Time requests waited in a queue for a slot, per priority class.\n"
		      "# TYPE %s histogram\n", name, name);
	for (int c = 0; c < IG_NCLASSES; c++)
		hist_series(b, name, "class", ig_conf_class_name(c), &gw->metrics.queue_wait[c]);
}

/* A key's label: its name in the keys file (never the key, nor its digest). */
static void key_series(struct ig_buf *b, const char *name, const struct ig_key *k, const char *more, uint64_t v)
{
	ig_buf_printf(b, "%s{key=\"", name);
	ig_buf_prom_label(b, k->ent->name);
	ig_buf_printf(b, "\"%s} %llu\n", more, (unsigned long long)v);
}

/* Usage of the keys of the keys file that have been used. */
static void per_key(struct ig_buf *b, struct ig_gw *gw)
{
	const struct ig_clients *s = &gw->clients;
	char more[64];
	ig_buf_printf(b, "# HELP infergate_key_requests_total Requests answered, by API key (its name in the keys "
		      "file) and status.\n# TYPE infergate_key_requests_total counter\n");
	for (size_t i = 0; i < s->nkeys; i++) {
		const struct ig_key *k = s->keys[i];
		for (size_t j = 0; k->ent && j < k->nstatus; j++) {
			snprintf(more, sizeof(more), ",code=\"%u\"", k->status[j].status);
			key_series(b, "infergate_key_requests_total", k, more, k->status[j].n);
		}
	}
	ig_buf_printf(b, "# HELP infergate_key_tokens_total Tokens reported in answers' usage, by API key.\n"
		      "# TYPE infergate_key_tokens_total counter\n");
	for (size_t i = 0; i < s->nkeys; i++) {
		const struct ig_key *k = s->keys[i];
		if (k->ent && k->nstatus) {
			key_series(b, "infergate_key_tokens_total", k, ",kind=\"prompt\"", k->prompt_tokens);
			key_series(b, "infergate_key_tokens_total", k, ",kind=\"completion\"", k->completion_tokens);
		}
	}
	ig_buf_printf(b, "# HELP infergate_key_rate_limited_total Requests refused with 429 by the key's rate "
		      "limit (rpm: requests, tpm: tokens).\n# TYPE infergate_key_rate_limited_total counter\n");
	for (size_t i = 0; i < s->nkeys; i++) {
		const struct ig_key *k = s->keys[i];
		if (k->ent && (k->ent->rpm || k->ent->tpm) && k->nstatus) {
			key_series(b, "infergate_key_rate_limited_total", k, ",limit=\"requests\"", k->limited_requests);
			key_series(b, "infergate_key_rate_limited_total", k, ",limit=\"tokens\"", k->limited_tokens);
		}
	}
}


/* The gateway: build, uptime, requests and answers, durations, connections per reactor. */
static void gateway_head(struct ig_buf *b, struct ig_gw *gw)
{
	const struct ig_proxy_stats *s = &gw->stats;
	const struct ig_metrics_stats *m = &gw->metrics;
	ig_buf_printf(b, "# HELP infergate_build_info Build information.\n# TYPE infergate_build_info gauge\n"
		      "infergate_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	ig_buf_printf(b, "# HELP infergate_uptime_seconds Seconds since start.\n# TYPE infergate_uptime_seconds gauge\n"
		      "infergate_uptime_seconds %.3f\n", (double)(ig_now_ms() - gw->started_ms) / 1000.0);
	ig_buf_printf(b, "# HELP infergate_requests_received_total Proxied requests received.\n"
		      "# TYPE infergate_requests_received_total counter\ninfergate_requests_received_total %lu\n",
		      (unsigned long)ig_stats_requests_received(gw));
	ig_buf_printf(b, "# HELP infergate_requests_total Proxied requests answered, by route, status and backend "
		      "(a 200 stream that carried an error event counts as the error's status).\n"
		      "# TYPE infergate_requests_total counter\n");
	for (size_t i = 0; i < m->ncounts; i++) {
		ig_buf_printf(b, "infergate_requests_total{route=\"");
		ig_buf_prom_label(b, ig_route_path(gw->cfg, m->counts[i].route));
		ig_buf_printf(b, "\",code=\"%u\",backend=\"", m->counts[i].status);
		ig_buf_prom_label(b, m->counts[i].backend);
		ig_buf_printf(b, "\"} %lu\n", (unsigned long)m->counts[i].n);
	}
	ig_buf_printf(b, "# HELP infergate_responses_total Responses sent (all routes), by status class.\n"
		      "# TYPE infergate_responses_total counter\n");
	for (int c = 1; c <= 5; c++)
		ig_buf_printf(b, "infergate_responses_total{code=\"%dxx\"} %lu\n", c, (unsigned long)s->responses[c]);
	print_hist(b, gw->cfg, "infergate_request_duration_seconds", "Time from request to the end of the answer.",
		   m->duration);
	print_hist(b, gw->cfg, "infergate_stream_first_byte_seconds", "Streams: time from request to the first byte relayed.",
		   m->ttfb);
	ig_buf_printf(b, "# HELP infergate_inflight_requests Proxied requests being handled.\n"
		      "# TYPE infergate_inflight_requests gauge\ninfergate_inflight_requests %zu\n", gw->nreqs);
	ig_buf_printf(b, "# HELP infergate_reactor_connections Client connections each reactor (thread) holds.\n"
		      "# TYPE infergate_reactor_connections gauge\n");
	for (size_t i = 0; i < gw->nrx; i++)
		ig_buf_printf(b, "infergate_reactor_connections{reactor=\"%zu\"} %ld\n", i, gw->rx[i].conns);
	ig_buf_printf(b, "# HELP infergate_reactor_connections_total Client connections each reactor was given.\n"
		      "# TYPE infergate_reactor_connections_total counter\n");
	for (size_t i = 0; i < gw->nrx; i++)
		ig_buf_printf(b, "infergate_reactor_connections_total{reactor=\"%zu\"} %lu\n", i,
			      (unsigned long)gw->rx[i].accepted);
}

/* The lock (with more than one reactor), requests per reactor. */
static void lock_and_reactors(struct ig_buf *b, struct ig_gw *gw)
{
	if (gw->nrx > 1) {
		/* read under the lock: the holder's current stretch is not in it yet */
		ig_buf_printf(b, "# HELP infergate_lock_acquisitions_total Times a reactor took the gateway's lock.\n"
			      "# TYPE infergate_lock_acquisitions_total counter\ninfergate_lock_acquisitions_total %lu\n"
			      "# HELP infergate_lock_contended_total Of them, times another reactor held it.\n"
			      "# TYPE infergate_lock_contended_total counter\ninfergate_lock_contended_total %lu\n"
			      "# HELP infergate_lock_held_seconds_total Time the lock was held, all reactors.\n"
			      "# TYPE infergate_lock_held_seconds_total counter\ninfergate_lock_held_seconds_total %.6f\n",
			      (unsigned long)gw->lock_taken, (unsigned long)gw->lock_contended, (double)gw->lock_held_ns / 1e9);
	}
	ig_buf_printf(b, "# HELP infergate_reactor_requests_total Proxied requests each reactor received.\n"
		      "# TYPE infergate_reactor_requests_total counter\n");
	for (size_t i = 0; i < gw->nrx; i++)
		ig_buf_printf(b, "infergate_reactor_requests_total{reactor=\"%zu\"} %lu\n", i,
			      (unsigned long)gw->rx[i].requests);
}

/* Clients that left first. */
static void aborts(struct ig_buf *b, struct ig_gw *gw)
{
	const struct ig_proxy_stats *s = &gw->stats;
	ig_buf_printf(b, "# HELP infergate_client_aborts_total Requests whose client left first.\n"
		      "# TYPE infergate_client_aborts_total counter\ninfergate_client_aborts_total %lu\n",
		      (unsigned long)s->client_aborts);
}

/* What the answers carried: error events, upstream failures, tokens. */
static void answers(struct ig_buf *b, struct ig_gw *gw)
{
	const struct ig_proxy_stats *s = &gw->stats;
	const struct ig_metrics_stats *m = &gw->metrics;
	static const char *uperr[] = {"none", "connect", "reset", "timeout", "status", "other"};
	ig_buf_printf(b, "# HELP infergate_stream_errors_total Streams answered 200 that carried an error event "
		      "(the backend's, or the gateway's when a backend failed mid-stream).\n"
		      "# TYPE infergate_stream_errors_total counter\ninfergate_stream_errors_total %lu\n",
		      (unsigned long)m->stream_errors);
	ig_buf_printf(b, "# HELP infergate_upstream_errors_total Upstream failures by type.\n"
		      "# TYPE infergate_upstream_errors_total counter\n");
	for (int e = IG_UPERR_CONNECT; e <= IG_UPERR_OTHER; e++)
		ig_buf_printf(b, "infergate_upstream_errors_total{type=\"%s\"} %lu\n", uperr[e],
			      (unsigned long)s->upstream_errors[e]);
	ig_buf_printf(b, "# HELP infergate_tokens_total Tokens reported in responses' usage.\n"
		      "# TYPE infergate_tokens_total counter\n"
		      "infergate_tokens_total{kind=\"prompt\"} %lu\ninfergate_tokens_total{kind=\"completion\"} %lu\n",
		      (unsigned long)s->prompt_tokens, (unsigned long)s->completion_tokens);
}

/* Per model, tracing, HTTPS, per class, per key, per backend. */
static void models_and_more(struct ig_buf *b, struct ig_gw *gw)
{
	per_model(b, gw);
	per_model_ttfb(b, gw);
	per_model_headroom(b, gw);
	per_model_genai(b, gw);
	tracing(b, gw);
	server_tls(b, gw);
	per_class(b, gw);
	per_key(b, gw);
	per_backend(b, gw, "infergate_backend_up", "gauge", "Backend health (1 up, 0 down).", get_up);
	per_backend(b, gw, "infergate_backend_enabled", "gauge", "1 unless drained or being removed.", get_enabled);
	per_backend(b, gw, "infergate_backend_inflight", "gauge", "Requests in flight per backend.", get_inflight);
	per_backend(b, gw, "infergate_backend_limit", "gauge",
		    "Requests allowed in flight per backend: max_inflight, or the slot count learned from the "
		    "backend's own load report (0 = no limit).", get_limit);
	per_backend(b, gw, "infergate_backend_served_total", "counter", "Responses relayed per backend.", get_served);
	per_backend(b, gw, "infergate_backend_failures_total", "counter",
		    "Failed transfers per backend (connect, reset, timeout, 502/503/504).", get_failures);
	per_backend(b, gw, "infergate_backend_retried_total", "counter",
		    "Requests moved from this backend to another.", get_retried);
	per_backend(b, gw, "infergate_backend_breaker_state", "gauge",
		    "Its circuit breaker: 0 closed, 1 open (no request), 2 half-open (one trial at a time).", get_breaker);
	per_backend(b, gw, "infergate_backend_breaker_opened_total", "counter",
		    "Times its circuit breaker opened (breaker.failures request failures in a row, or a failed trial).",
		    get_breaker_opened);
	per_backend(b, gw, "infergate_backend_retry_after_total", "counter",
		    "429 or 503 answers with Retry-After: the backend was sent nothing new for that long.", get_rests);
	per_backend(b, gw, "infergate_backend_aborted_total", "counter",
		    "Transfers cut because the client left.", get_aborted);
	per_backend(b, gw, "infergate_backend_prompt_tokens_total", "counter", "Prompt tokens per backend.", get_ptok);
	per_backend(b, gw, "infergate_backend_completion_tokens_total", "counter", "Completion tokens per backend.",
		    get_ctok);
}

/* Health probes per backend (the backends' counters, which health.c
 * writes). */
static void probes(struct ig_buf *b, struct ig_gw *gw)
{
	ig_buf_printf(b, "# HELP infergate_backend_probes_total Health probes by result (slow: timed out while "
		      "requests were answered, not counted as a failure).\n"
		      "# TYPE infergate_backend_probes_total counter\n");
	static const char *results[] = {"ok", "failed", "slow"};
	for (size_t i = 0; i < gw->fleet.n; i++) {
		const struct ig_backend *x = gw->fleet.v[i];
		unsigned long v[] = {atomic_load(&x->probes_ok), atomic_load(&x->probes_failed),
				     atomic_load(&x->probes_slow)};
		for (int k = 0; k < 3; k++) {
			ig_buf_printf(b, "infergate_backend_probes_total{backend=\"");
			ig_buf_prom_label(b, x->key);
			ig_buf_printf(b, "\",result=\"%s\"} %lu\n", results[k], v[k]);
		}
	}
}

/* The gateway's own families, in /metrics's order; the modules' (struct
 * ig_metrics_source with an order) go between them by their order. */
static const struct {
	int order;
	void (*prom)(struct ig_buf *b, struct ig_gw *gw);
} own[] = {
	{IG_METRICS_ORDER_GATEWAY, gateway_head},
	{IG_METRICS_ORDER_LOCK, lock_and_reactors},
	{IG_METRICS_ORDER_ABORTS, aborts},
	{IG_METRICS_ORDER_ANSWERS, answers},
	{IG_METRICS_ORDER_MODELS, models_and_more},
	{IG_METRICS_ORDER_PROBES, probes},
};

char *ig_metrics_text(struct ig_gw *gw)
{
	struct ig_buf b;
	const struct ig_metrics_sources *r = gw->reports;
	size_t nr = r ? r->n : 0;
	bool *done = nr ? calloc(nr, sizeof(*done)) : NULL;

	ig_buf_init(&b);
	/* the gateway's, and before each the modules' of a lower order (in
	 * the order registered); then those of no order (0), as registered */
	for (size_t k = 0; k <= sizeof(own) / sizeof(own[0]); k++) {
		int upto = k < sizeof(own) / sizeof(own[0]) ? own[k].order : INT_MAX;
		for (int more = 1; more;) {
			size_t best = nr;
			for (size_t i = 0; i < nr; i++)
				if (!done[i] && r->v[i].order > 0 && r->v[i].order < upto &&
				    (best == nr || r->v[i].order < r->v[best].order))
					best = i;
			more = best < nr;
			if (more) {
				done[best] = true;
				if (r->v[best].src.prom)
					r->v[best].src.prom(r->v[best].src.arg, &b);
			}
		}
		if (k < sizeof(own) / sizeof(own[0]))
			own[k].prom(&b, gw);
	}
	for (size_t i = 0; i < nr; i++)
		if (!done[i] && r->v[i].src.prom)
			r->v[i].src.prom(r->v[i].src.arg, &b);
	free(done);
	ig_buf_append(&b, "", 1);
	char *out = strdup(ig_buf_head(&b));
	ig_buf_free(&b);
	return out;
}
