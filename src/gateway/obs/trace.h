/* Tracing: W3C Trace Context (https://www.w3.org/TR/trace-context/)
 * continued from the client, and OpenTelemetry spans sent to a collector
 * over OTLP/HTTP in its JSON encoding (the spec's http/json: POST
 * <endpoint> {"resourceSpans": [...]}, ids as hex).
 *
 * A request's context (struct ig_trace, in its struct ig_req): the
 * client's traceparent continued when it is valid (a malformed one is
 * ignored and a new trace starts, as the spec says), the sampling decision
 * parent-based (a sampled parent is always continued, an unsampled one
 * never; a new root by the ratio, from its trace id), the gateway's server
 * span, and, while sampled, the child spans it has finished (its queue
 * wait, each attempt). Each attempt gets a span id of its own, sent to the
 * backend as the traceparent's parent, so the engine's spans join the
 * trace. The spans go to the exporter when the request ends.
 *
 * The exporter (struct ig_tracer): a bounded queue (spans beyond it are
 * dropped and counted: a slow or absent collector never slows a request)
 * and one thread that sends batches with a blocking libcurl handle, every
 * schedule delay or when a batch is full. Never a reactor's I/O.
 *
 * Threads: a request's context is its reactor's (or under gw->lock, as the
 * request is); the exporter's queue is under its own mutex, the innermost
 * lock (taken briefly to hand over spans, with or without gw->lock).
 * Not here: which attributes a span carries (proxy.c), the settings
 * (conf.c: tracing.*, OTEL_* variables). */
#ifndef IG_TRACE_H
#define IG_TRACE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"

/* OTLP span kinds */
enum { IG_SPAN_INTERNAL = 1, IG_SPAN_SERVER = 2, IG_SPAN_CLIENT = 3 };

struct ig_tracer;

/* One request's trace. Zeroed: no tracing. */
struct ig_trace {
	uint8_t trace_id[16];
	uint8_t parent[8];      /* the client's span; zeros when it sent none (a root) */
	uint8_t span[8];        /* the gateway's server span */
	bool on;                /* tracing configured: a traceparent of ours goes upstream */
	bool sampled;           /* its spans are recorded and exported */
	bool remote;            /* continued from the client's traceparent */
	char *state;            /* the client's tracestate, passed on (malloc'd), or NULL */
	uint64_t start_ns;      /* wall clock at base_us */
	uint64_t base_us;       /* monotonic (ig_now_us) when it began */
	json_t *spans;          /* sampled: its finished child spans */
	json_t *attempt;        /* the attempt span under way, or NULL */
	uint8_t attempt_id[8];  /* its id (sent upstream), sampled or not */
};

/* Parses a traceparent value. Returns 0 and fills the ids and flags, or
 * -1 when it is not a valid one (version ff, a wrong length, upper-case
 * or non-hex digits, an all-zero id). */
int ig_trace_parse(const char *v, uint8_t trace_id[16], uint8_t parent[8], uint8_t *flags);
/* Starts t for a request that sent these headers (either may be NULL). */
void ig_trace_begin(struct ig_trace *t, struct ig_tracer *tr, const char *traceparent, const char *tracestate);
/* "00-<trace>-<span>-<flags>" for t with `span` as the parent: 56 bytes with its NUL. */
void ig_trace_format(const struct ig_trace *t, const uint8_t span[8], char out[56]);
/* A new attempt: its span id (t->attempt_id) and, when sampled, its span
 * (CLIENT) begun now. An attempt not ended is ended first. */
void ig_trace_attempt_begin(struct ig_trace *t, const char *name);
/* The attempt under way ended (status: the backend's HTTP status, 0 none;
 * error: why it failed, or NULL). */
void ig_trace_attempt_end(struct ig_trace *t, long status, const char *error);
/* A finished child span of the server span, from monotonic times. Returns
 * the span (to add attributes to: it stays t's), or NULL when not sampled. */
json_t *ig_trace_child(struct ig_trace *t, const char *name, int kind, uint64_t start_us, uint64_t end_us);
/* The server span, from t's start to now, to fill in; then ig_trace_end
 * sends it with t's children. NULL when not sampled. */
json_t *ig_trace_server_span(struct ig_trace *t, const char *name);
/* Hands t's spans (and `server`, taken, may be NULL) to the exporter and
 * frees t's state. Safe on a zeroed t. */
void ig_trace_end(struct ig_trace *t, struct ig_tracer *tr, json_t *server);
/* Copies what a hedge of t needs: the same trace, its spans' parent t's
 * server span (t2->span = t->span, and t2 has no server span of its own). */
void ig_trace_fork(struct ig_trace *t2, const struct ig_trace *t);

/* Attributes (OTLP KeyValue) on a span; a NULL span is ignored. */
void ig_span_str(json_t *span, const char *key, const char *v);
void ig_span_int(json_t *span, const char *key, long long v);
void ig_span_dbl(json_t *span, const char *key, double v);
void ig_span_bool(json_t *span, const char *key, bool v);
void ig_span_strs(json_t *span, const char *key, const char *const *v, size_t n);
/* Status: error with a message, or ok. */
void ig_span_error(json_t *span, const char *msg);

/* The exporter. ig_tracer_start: NULL and *err when the settings are bad,
 * NULL and no error when tracing is off (no endpoint). */
struct ig_tracer *ig_tracer_start(const struct ig_conf *cfg, char **err);
/* Sends what is queued (waiting at most a few seconds), stops the thread. */
void ig_tracer_stop(struct ig_tracer *tr);
struct ig_tracer_stats {
	unsigned long long exported;  /* spans the collector took (2xx) */
	unsigned long long dropped;   /* spans dropped: the queue was full */
	unsigned long long failed;    /* spans of batches the collector refused or never got */
	unsigned long long batches;   /* export requests sent */
	long queued;                  /* spans waiting now */
	unsigned long long unrecorded; /* sampled requests not recorded: the queue was full */
};
void ig_tracer_stats(struct ig_tracer *tr, struct ig_tracer_stats *out);
const char *ig_tracer_endpoint(const struct ig_tracer *tr);

#endif
