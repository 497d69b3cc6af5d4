/* Tracing (trace.h): a request's W3C trace context and its spans, and the
 * OTLP/HTTP JSON exporter's queue and thread. */
#include "config.h"
#include <curl/curl.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "obs/trace.h"

#define QUEUE_MAX 4096  /* spans waiting; beyond: dropped (counted) */
#define BATCH_MAX 512   /* spans per export request (the SDKs' maxExportBatchSize) */
#define EXPORT_TIMEOUT_MS 10000 /* OTEL_EXPORTER_OTLP_TIMEOUT's default */
#define STOP_WAIT_MS 3000       /* at stop, what is queued gets this long */

/* ---- ids and the context ---- */

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* n bytes from 2n lower-case hex digits; -1 on anything else. */
static int unhex(const char *s, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static void tohex(const uint8_t *v, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[v[i] >> 4];
		out[2 * i + 1] = d[v[i] & 15];
	}
	out[2 * n] = '\0';
}

static bool all_zero(const uint8_t *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (v[i])
			return false;
	return true;
}

int ig_trace_parse(const char *v, uint8_t trace_id[16], uint8_t parent[8], uint8_t *flags)
{
	/* version "-" trace-id "-" parent-id "-" trace-flags: 2+1+32+1+16+1+2 */
	if (!v)
		return -1;
	size_t n = strlen(v);
	uint8_t ver;
	if (n < 55 || unhex(v, &ver, 1) < 0 || ver == 0xff || v[2] != '-' || v[35] != '-' || v[52] != '-')
		return -1;
	/* version 00 is exactly this long; a later one may add fields after a '-' */
	if ((ver == 0 && n != 55) || (ver > 0 && n > 55 && v[55] != '-'))
		return -1;
	if (unhex(v + 3, trace_id, 16) < 0 || unhex(v + 36, parent, 8) < 0 || unhex(v + 53, flags, 1) < 0)
		return -1;
	return all_zero(trace_id, 16) || all_zero(parent, 8) ? -1 : 0;
}

/* Ids: the kernel's random bytes through ig_random_bytes's per-thread page
 * (one getrandom call per 64 spans): a trace id tells nothing of another
 * tenant's ids. Not OpenSSL's RAND_bytes, whose locks and fork checks cost
 * more than the span itself at 15,000 requests/s. */
static void random_bytes(uint8_t *out, size_t n)
{
	do
		ig_random_bytes(out, n);
	while (all_zero(out, n));
}

static uint64_t wall_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct ig_tracer {
	/* settings, fixed at start */
	char *url;
	struct curl_slist *headers;
	char *service;
	double ratio;
	long delay_ms;
	/* the queue, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Requests' spans waiting, each as its JSON text ("{...},{...}"):
	 * built and freed on the request's thread, so no JSON object crosses
	 * threads (a span of a few dozen small allocations freed on another
	 * thread made malloc's arena locks the cost of a request). */
	struct pending {
		char *text;
		size_t len;
		long n;
	} *queue;
	size_t qlen, qcap;
	long nqueued;           /* the spans in them */
	atomic_bool full;       /* nqueued reached QUEUE_MAX: new requests are not recorded */
	atomic_ullong unrecorded; /* sampled requests not recorded for it */
	char *prefix, *suffix;  /* the export body around the spans */
	bool stopping;
	unsigned long long exported, dropped, failed, batches;
	pthread_t thread;
	bool running;           /* the thread was started */
};

void ig_trace_begin(struct ig_trace *t, struct ig_tracer *tr, const char *traceparent, const char *tracestate)
{
	memset(t, 0, sizeof(*t));
	if (!tr)
		return;
	t->on = true;
	t->base_us = ig_now_us();
	t->start_ns = wall_ns();
	uint8_t flags = 0;
	if (ig_trace_parse(traceparent, t->trace_id, t->parent, &flags) == 0) {
		t->remote = true;
		t->sampled = flags & 1; /* parent-based: the caller decided */
		if (tracestate && *tracestate && strlen(tracestate) <= 512)
			t->state = strdup(tracestate);
	} else {
		memset(t->parent, 0, sizeof(t->parent));
		random_bytes(t->trace_id, 16);
		/* TraceIdRatioBased: the id's last 8 bytes against the ratio */
		uint64_t x = 0;
		for (int i = 8; i < 16; i++)
			x = x << 8 | t->trace_id[i];
		t->sampled = tr->ratio >= 1 || (double)x < tr->ratio * 18446744073709551616.0;
	}
	random_bytes(t->span, 8);
	/* Recorded when sampled, unless the exporter is full (its collector
	 * slow or gone): then nothing is built, and the trace still goes on
	 * upstream as sampled. */
	if (t->sampled && !atomic_load_explicit(&tr->full, memory_order_relaxed))
		t->spans = json_array();
	else if (t->sampled)
		atomic_fetch_add_explicit(&tr->unrecorded, 1, memory_order_relaxed);
}

void ig_trace_format(const struct ig_trace *t, const uint8_t span[8], char out[56])
{
	char tid[33], sid[17];
	tohex(t->trace_id, 16, tid);
	tohex(span, 8, sid);
	snprintf(out, 56, "00-%s-%s-%s", tid, sid, t->sampled ? "01" : "00");
}

/* ---- spans (OTLP JSON: ids hex, times and integers as strings) ---- */

static json_t *nanos(uint64_t ns)
{
	char b[24];
	snprintf(b, sizeof(b), "%llu", (unsigned long long)ns);
	return json_string(b);
}

static uint64_t ns_of(const struct ig_trace *t, uint64_t us)
{
	return t->start_ns + (us > t->base_us ? (us - t->base_us) * 1000u : 0);
}

static json_t *span_new(const struct ig_trace *t, const char *name, int kind, const uint8_t span[8],
			const uint8_t parent[8], uint64_t start_ns)
{
	char tid[33], sid[17], pid[17];
	tohex(t->trace_id, 16, tid);
	tohex(span, 8, sid);
	json_t *s = json_pack("{s:s, s:s, s:s, s:i, s:o, s:[], s:{s:i}}", "traceId", tid, "spanId", sid, "name", name,
			      "kind", kind, "startTimeUnixNano", nanos(start_ns), "attributes", "status", "code", 0);
	if (parent && !all_zero(parent, 8)) {
		tohex(parent, 8, pid);
		json_object_set_new(s, "parentSpanId", json_string(pid));
	}
	if (t->state)
		json_object_set_new(s, "traceState", json_string(t->state));
	return s;
}

static void span_close(json_t *s, uint64_t end_ns)
{
	json_object_set_new(s, "endTimeUnixNano", nanos(end_ns));
	json_t *st = json_object_get(s, "status");
	if (json_integer_value(json_object_get(st, "code")) == 0)
		json_object_set_new(st, "code", json_integer(1)); /* STATUS_CODE_OK */
}

static void attr(json_t *span, const char *key, const char *type, json_t *v)
{
	if (!span) {
		json_decref(v);
		return;
	}
	json_array_append_new(json_object_get(span, "attributes"),
			      json_pack("{s:s, s:{s:o}}", "key", key, "value", type, v));
}

void ig_span_str(json_t *span, const char *key, const char *v)
{
	if (v)
		attr(span, key, "stringValue", json_string(v));
}

void ig_span_int(json_t *span, const char *key, long long v)
{
	char b[24];
	snprintf(b, sizeof(b), "%lld", v);
	attr(span, key, "intValue", json_string(b));
}

void ig_span_dbl(json_t *span, const char *key, double v)
{
	attr(span, key, "doubleValue", json_real(v));
}

void ig_span_bool(json_t *span, const char *key, bool v)
{
	attr(span, key, "boolValue", json_boolean(v));
}

void ig_span_strs(json_t *span, const char *key, const char *const *v, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:s}", "stringValue", v[i]));
	attr(span, key, "arrayValue", json_pack("{s:o}", "values", a));
}

void ig_span_error(json_t *span, const char *msg)
{
	if (span)
		json_object_set_new(span, "status", json_pack("{s:i, s:s}", "code", 2, "message", msg ? msg : ""));
}

void ig_trace_attempt_begin(struct ig_trace *t, const char *name)
{
	if (!t->on)
		return;
	if (t->attempt)
		ig_trace_attempt_end(t, 0, NULL);
	random_bytes(t->attempt_id, 8);
	if (t->spans)
		t->attempt = span_new(t, name, IG_SPAN_CLIENT, t->attempt_id, t->span, wall_ns());
}

void ig_trace_attempt_end(struct ig_trace *t, long status, const char *error)
{
	if (!t->attempt)
		return;
	if (status > 0)
		ig_span_int(t->attempt, "http.response.status_code", status);
	if (error)
		ig_span_error(t->attempt, error);
	span_close(t->attempt, wall_ns());
	json_array_append_new(t->spans, t->attempt);
	t->attempt = NULL;
}

json_t *ig_trace_child(struct ig_trace *t, const char *name, int kind, uint64_t start_us, uint64_t end_us)
{
	if (!t->spans)
		return NULL;
	uint8_t id[8];
	random_bytes(id, 8);
	json_t *s = span_new(t, name, kind, id, t->span, ns_of(t, start_us));
	span_close(s, ns_of(t, end_us));
	json_array_append_new(t->spans, s);
	return s;
}

json_t *ig_trace_server_span(struct ig_trace *t, const char *name)
{
	if (!t->spans)
		return NULL;
	json_t *s = span_new(t, name, IG_SPAN_SERVER, t->span, t->remote ? t->parent : NULL, t->start_ns);
	span_close(s, wall_ns());
	return s;
}

void ig_trace_fork(struct ig_trace *t2, const struct ig_trace *t)
{
	memset(t2, 0, sizeof(*t2));
	if (!t->on)
		return;
	*t2 = *t;
	t2->state = t->state ? strdup(t->state) : NULL;
	t2->spans = t->spans ? json_array() : NULL;
	t2->attempt = NULL;
	t2->base_us = ig_now_us();
	t2->start_ns = wall_ns();
}

static void submit(struct ig_tracer *tr, json_t *spans);

void ig_trace_end(struct ig_trace *t, struct ig_tracer *tr, json_t *server)
{
	if (t->attempt)
		ig_trace_attempt_end(t, 0, NULL);
	if (t->spans && server)
		json_array_append_new(t->spans, server);
	else
		json_decref(server);
	if (tr && t->spans && json_array_size(t->spans) > 0)
		submit(tr, t->spans);
	else
		json_decref(t->spans);
	free(t->state);
	memset(t, 0, sizeof(*t));
}

/* ---- the exporter ---- */

/* Takes spans (a request's array), as text. A request's spans go whole
 * or not at all: a trace with holes is worse than one missing. */
static void submit(struct ig_tracer *tr, json_t *spans)
{
	long n = (long)json_array_size(spans);
	char *text = json_dumps(spans, JSON_COMPACT);
	json_decref(spans);
	size_t len = text ? strlen(text) : 0;
	if (len < 2) {
		free(text);
		return;
	}
	memmove(text, text + 1, len - 2); /* "[a,b]" -> "a,b" */
	len -= 2;
	text[len] = '\0';
	pthread_mutex_lock(&tr->mu);
	struct pending *q = tr->nqueued + n > QUEUE_MAX ? NULL
			    : ig_grow(tr->queue, &tr->qcap, tr->qlen, sizeof(*tr->queue), 64);
	if (q)
		tr->queue = q;
	if (!q) {
		atomic_store(&tr->full, true); /* no room: the next requests build nothing */
		tr->dropped += (unsigned long long)n;
		pthread_mutex_unlock(&tr->mu);
		free(text);
		return;
	}
	tr->queue[tr->qlen++] = (struct pending){text, len, n};
	tr->nqueued += n;
	if (tr->nqueued >= QUEUE_MAX)
		atomic_store(&tr->full, true);
	if (tr->nqueued >= BATCH_MAX)
		pthread_cond_signal(&tr->cv);
	pthread_mutex_unlock(&tr->mu);
}

static size_t discard(char *p IG_UNUSED, size_t size, size_t nmemb, void *u IG_UNUSED)
{
	return size * nmemb;
}

/* One export request of the texts p[0..k): true when the collector took
 * it (2xx). */
static bool post(struct ig_tracer *tr, CURL *c, const struct pending *p, size_t k, long timeout_ms)
{
	struct ig_buf b;
	ig_buf_init(&b);
	ig_buf_append(&b, tr->prefix, strlen(tr->prefix));
	for (size_t i = 0; i < k; i++) {
		if (i)
			ig_buf_append(&b, ",", 1);
		ig_buf_append(&b, p[i].text, p[i].len);
	}
	ig_buf_append(&b, tr->suffix, strlen(tr->suffix) + 1); /* with its NUL */
	char *text = b.data;
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, tr->url);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)(b.len - 1));
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, tr->headers);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 2000 ? timeout_ms : 2000L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	CURLcode rc = curl_easy_perform(c);
	long status = 0;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	ig_buf_free(&b);
	if (rc != CURLE_OK || status / 100 != 2) {
		ig_log_debug("tracing: export to %s failed: %s", tr->url,
			     rc != CURLE_OK ? curl_easy_strerror(rc) : "an HTTP error status");
		return false;
	}
	return true;
}

/* Waits until `ms` from now, or (unless `whole`) a signal: a full batch.
 * The stop ends either. */
static void wait_for(struct ig_tracer *tr, long ms, bool whole)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	until.tv_nsec += (ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (!tr->stopping && pthread_cond_timedwait(&tr->cv, &tr->mu, &until) == 0)
		if (!whole && tr->nqueued >= BATCH_MAX)
			return;
}

static void *exporter(void *arg)
{
	struct ig_tracer *tr = arg;
	CURL *c = curl_easy_init();
	bool warned = false, failing = false;
	pthread_mutex_lock(&tr->mu);
	for (;;) {
		/* a batch's worth, or the delay; after a failed export the
		 * delay in any case (the batch is dropped, as the SDKs do:
		 * no busy loop on a collector that is gone) */
		if (!tr->stopping && (failing || tr->nqueued < BATCH_MAX))
			wait_for(tr, tr->delay_ms, failing);
		bool stopping = tr->stopping;
		if (tr->qlen == 0) {
			if (stopping)
				break;
			continue;
		}
		/* whole requests' spans, up to a batch (at least one request's) */
		size_t n = 0, k = 0;
		for (; k < tr->qlen; k++) {
			if (n > 0 && n + (size_t)tr->queue[k].n > BATCH_MAX)
				break;
			n += (size_t)tr->queue[k].n;
		}
		struct pending *taken = malloc(k * sizeof(*taken));
		if (!taken)
			k = n = 0;
		else
			memcpy(taken, tr->queue, k * sizeof(*taken));
		memmove(tr->queue, tr->queue + k, (tr->qlen - k) * sizeof(*tr->queue));
		tr->qlen -= k;
		tr->nqueued -= (long)n;
		if (tr->nqueued < QUEUE_MAX - BATCH_MAX)
			atomic_store(&tr->full, false);
		pthread_mutex_unlock(&tr->mu);
		bool ok = c && k && post(tr, c, taken, k, stopping ? STOP_WAIT_MS : EXPORT_TIMEOUT_MS);
		for (size_t i = 0; i < k; i++)
			free(taken[i].text);
		free(taken);
		if (!ok && !warned) {
			ig_log_warn("tracing: the collector at %s did not take a batch of %zu spans (counted in "
				    "infergate_trace_spans_failed_total; told once)", tr->url, n);
			warned = true;
		}
		failing = !ok;
		pthread_mutex_lock(&tr->mu);
		tr->batches++;
		if (ok)
			tr->exported += n;
		else
			tr->failed += n;
		if (stopping && !ok) { /* no second wait at stop: the rest goes */
			tr->failed += (unsigned long long)tr->nqueued;
			for (size_t i = 0; i < tr->qlen; i++)
				free(tr->queue[i].text);
			tr->qlen = 0;
			tr->nqueued = 0;
		}
	}
	pthread_mutex_unlock(&tr->mu);
	if (c)
		curl_easy_cleanup(c);
	return NULL;
}

/* OTEL_EXPORTER_OTLP_HEADERS' syntax: "k1=v1,k2=v2", values URL-encoded. */
static int parse_headers(const char *s, struct curl_slist **out, char **err)
{
	char *copy = strdup(s), *save = NULL;
	int rc = 0;
	for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		while (*kv == ' ')
			kv++;
		if (!eq || eq == kv) {
			*err = ig_strdupf("'%s' is not key=value", kv);
			rc = -1;
			break;
		}
		*eq = '\0';
		char *k = kv, *v = eq + 1, *end = eq;
		while (end > k && end[-1] == ' ')
			*--end = '\0';
		int vlen = 0;
		char *dec = curl_easy_unescape(NULL, v, 0, &vlen);
		char *line = ig_strdupf("%s: %s", k, dec ? dec : v);
		curl_free(dec);
		*out = curl_slist_append(*out, line);
		free(line);
	}
	free(copy);
	return rc;
}

struct ig_tracer *ig_tracer_start(const struct ig_conf *cfg, char **err)
{
	*err = NULL;
	if (!cfg->trace_endpoint || !*cfg->trace_endpoint)
		return NULL;
	struct ig_tracer *tr = calloc(1, sizeof(*tr));
	tr->url = strdup(cfg->trace_endpoint);
	tr->service = strdup(*cfg->trace_service ? cfg->trace_service : "infergate");
	tr->ratio = cfg->trace_ratio;
	tr->delay_ms = cfg->trace_delay_ms > 0 ? cfg->trace_delay_ms : 5000;
	tr->headers = curl_slist_append(NULL, "Content-Type: application/json");
	tr->headers = curl_slist_append(tr->headers, "Expect:");
	if (*cfg->trace_headers && parse_headers(cfg->trace_headers, &tr->headers, err) < 0) {
		char *e = ig_strdupf("tracing.headers: %s", *err);
		free(*err);
		*err = e;
		ig_tracer_stop(tr);
		return NULL;
	}
	/* the body around the spans: {"resourceSpans": [{"resource": ...,
	 * "scopeSpans": [{"scope": ..., "spans": [ SPANS ]}]}]} */
	json_t *body = json_pack("{s:[{s:{s:[{s:s, s:{s:s}}]}, s:[{s:{s:s, s:s}, s:[]}]}]}", "resourceSpans", "resource",
				 "attributes", "key", "service.name", "value", "stringValue", tr->service, "scopeSpans",
				 "scope", "name", "infergate", "version", PACKAGE_VERSION, "spans");
	char *whole = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	char *at = whole ? strstr(whole, "\"spans\":[]") : NULL;
	if (!at) {
		free(whole);
		*err = ig_strdupf("tracing: out of memory");
		ig_tracer_stop(tr);
		return NULL;
	}
	at += strlen("\"spans\":[");
	tr->suffix = strdup(at);
	*at = '\0';
	tr->prefix = whole;
	pthread_mutex_init(&tr->mu, NULL);
	pthread_cond_init(&tr->cv, NULL);
	if (ig_thread_start(&tr->thread, exporter, tr) != 0) {
		*err = ig_strdupf("tracing: cannot start the exporter's thread");
		pthread_mutex_destroy(&tr->mu);
		pthread_cond_destroy(&tr->cv);
		ig_tracer_stop(tr);
		return NULL;
	}
	tr->running = true;
	ig_log_info("tracing: spans to %s (OTLP/HTTP JSON), service %s, sampling %g of new traces (a client's "
		    "traceparent decides for its own), a batch every %ld ms", tr->url, tr->service, tr->ratio, tr->delay_ms);
	return tr;
}

void ig_tracer_stop(struct ig_tracer *tr)
{
	if (!tr)
		return;
	if (tr->running) {
		pthread_mutex_lock(&tr->mu);
		tr->stopping = true;
		pthread_cond_signal(&tr->cv);
		pthread_mutex_unlock(&tr->mu);
		pthread_join(tr->thread, NULL);
		pthread_mutex_destroy(&tr->mu);
		pthread_cond_destroy(&tr->cv);
	}
	for (size_t i = 0; i < tr->qlen; i++)
		free(tr->queue[i].text);
	free(tr->queue);
	free(tr->prefix);
	free(tr->suffix);
	curl_slist_free_all(tr->headers);
	free(tr->url);
	free(tr->service);
	free(tr);
}

void ig_tracer_stats(struct ig_tracer *tr, struct ig_tracer_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!tr)
		return;
	pthread_mutex_lock(&tr->mu);
	out->exported = tr->exported;
	out->dropped = tr->dropped;
	out->failed = tr->failed;
	out->batches = tr->batches;
	out->queued = tr->nqueued;
	out->unrecorded = atomic_load(&tr->unrecorded);
	pthread_mutex_unlock(&tr->mu);
}

const char *ig_tracer_endpoint(const struct ig_tracer *tr)
{
	return tr ? tr->url : NULL;
}
