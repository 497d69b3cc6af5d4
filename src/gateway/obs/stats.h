/* What the gateway counts of its requests and who reports what (stats.h):
 * the histograms and counters of finished requests (gw->metrics), the
 * registry of the modules' /metrics families and /health/backends entries,
 * and the calls that count. Below the request path and the scheduler, which
 * count through it; metrics.c and metrics_json.c read it to build the
 * self-reports. */
#ifndef IG_STATS_H
#define IG_STATS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"
#include "conf/routes.h"
#include "infergate/buf.h"

/* Latency histogram (Prometheus style: cumulative when printed). */
#define IG_HIST_BUCKETS 16
struct ig_metrics_hist {
	uint64_t counts[IG_HIST_BUCKETS + 1]; /* last one: above every bound */
	double sum;
	uint64_t n;
};

/* Requests by route, status and backend: a short list (a few dozen
 * combinations in practice), searched linearly. */
struct ig_reqcount {
	int route;          /* index for ig_route_path */
	unsigned status;
	char *backend;      /* URL, or "" when no backend answered */
	uint64_t n;
};

/* Per model, what people chart (the OpenTelemetry GenAI server metrics:
 * time to first token, time per output token, request duration; tokens
 * by kind), of its answered (2xx) requests. A short list, searched
 * linearly. */
struct ig_model_stats {
	char *model;
	struct ig_metrics_hist ttft;      /* streams: request to first token */
	struct ig_metrics_hist tpot;      /* (duration - ttft) / (output tokens - 1) */
	struct ig_metrics_hist duration;  /* request to the end of the answer */
	uint64_t prompt_tokens, completion_tokens;
};

#define IG_HISTORY_S 1800

/* What the finished requests add up to (ig_stats_observe*): metrics.c's
 * own counters (gw->metrics), and the status page's history. Before
 * gateway.h, which embeds it in struct ig_gw. */
struct ig_metrics_stats {
	struct ig_metrics_hist duration[IG_MAX_ROUTES];   /* whole request */
	struct ig_metrics_hist ttfb[IG_MAX_ROUTES];       /* streams: first byte */
	struct ig_metrics_hist queue_wait[IG_NCLASSES]; /* time waited, per class */
	struct ig_reqcount *counts;
	size_t ncounts;
	uint64_t stream_errors;     /* 200 streams that carried an error event */
	struct ig_model_stats *models;
	size_t nmodels;
	/* The status page's history: the headline figures once a second for
	 * the last IG_HISTORY_S seconds, a ring. */
	struct ig_history_sample {
		int64_t t_ms;           /* wall clock */
		uint64_t requests, ctokens;
		long inflight, queued, healthy;
	} *history;                 /* written by: metrics (its sample, once a second) */
	size_t history_n, history_at; /* samples held, the next one's slot; written by: metrics */
};

#include "gateway.h"

/* Where a module's families go in /metrics among the gateway's own (lower
 * first): the order /metrics has always had, which dashboards and the
 * tests read. */
enum ig_metrics_order {
	IG_METRICS_ORDER_LAST = 0,        /* after all the others, in the order registered */
	IG_METRICS_ORDER_GATEWAY = 100,   /* build, uptime, requests, durations, reactors (metrics.c) */
	IG_METRICS_ORDER_SERVER = 150,    /* client hang-ups, header timeouts, per-IP refusals (server.c) */
	IG_METRICS_ORDER_LOCK = 200,      /* the lock, requests per reactor (metrics.c) */
	IG_METRICS_ORDER_PROXY = 300,     /* retries, continuations, hedges, Idempotency-Keys (path/proxy_metrics.c, gw->stats) */
	IG_METRICS_ORDER_RETRY_BUDGET = 350, /* retries denied (dispatch.c) */
	IG_METRICS_ORDER_ABORTS = 400,    /* clients that left first (metrics.c) */
	IG_METRICS_ORDER_QUEUE = 450,     /* queue depth, 429s, timeouts (dispatch.c) */
	IG_METRICS_ORDER_ANSWERS = 500,   /* error events, upstream errors, tokens (metrics.c) */
	IG_METRICS_ORDER_MODELS = 600,    /* per model, tracing, HTTPS, class, key, backend (metrics.c) */
	IG_METRICS_ORDER_PROBES = 700,    /* health probes per backend (metrics.c) */
};

/* What a module reports: an entry `name` in /health/backends' JSON (json:
 * a new reference) and its own families in /metrics (prom: whole HELP/TYPE
 * blocks: name, help, type, then the samples). Either may be NULL. */
struct ig_metrics_source {
	const char *name;
	json_t *(*json)(void *arg);
	void (*prom)(void *arg, struct ig_buf *out);
	void *arg;
};
/* The registered sources, in the order added, each with its order. */
struct ig_metrics_sources {
	struct ig_metrics_entry {
		struct ig_metrics_source src;
		int order;              /* enum ig_metrics_order */
	} *v;
	size_t n, cap;
};
/* Adds src (copied; name must outlive it): its JSON after the gateway's
 * own in the order added, its families after the gateway's own in the
 * order added. Returns 0, or -1 out of memory. */
int ig_stats_register(struct ig_gw *gw, const struct ig_metrics_source *src);
/* The same, its families at `order` among the gateway's (enum
 * ig_metrics_order; those of one order in the order added): a module
 * registers its families when it starts (its init, which boot.c calls). */
int ig_stats_register_at(struct ig_gw *gw, const struct ig_metrics_source *src, int order);
/* Removes the sources registered with arg. */
void ig_stats_unregister(struct ig_gw *gw, const void *arg);

/* Counts a finished proxied request: its route, the status it ended with,
 * whether a 200 stream carried an error event, the backend that answered
 * ("" none), its duration and, for streams, the time to the first byte
 * (-1: none). */
void ig_stats_observe(struct ig_gw *gw, int route, unsigned status, bool stream_error, const char *backend,
			uint64_t duration_us, int64_t ttfb_us);
/* Counts an answered (2xx) request of `model` for the per-model series:
 * its duration, its time to first token (streams; -1 none), its tokens
 * (-1 unknown). */
void ig_stats_observe_model(struct ig_gw *gw, const char *model, uint64_t duration_us, int64_t ttft_us,
			      long prompt_tokens, long completion_tokens);
void ig_stats_free(struct ig_gw *gw);
/* Counts how long a request of class klass waited in a queue. */
void ig_stats_observe_wait(struct ig_gw *gw, int klass, uint64_t waited_ms);

/* The histograms' bucket bounds, in seconds (Prometheus's le). */
extern const double ig_stats_bounds[IG_HIST_BUCKETS];
/* A model's entry of the per-model series, or NULL before its first answer. */
struct ig_model_stats *ig_stats_model_stats(const struct ig_metrics_stats *s, const char *name);
/* Proxied requests received: the reactors' counts together. */
uint64_t ig_stats_requests_received(const struct ig_gw *gw);

#endif
