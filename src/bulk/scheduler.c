/* The run: one thread, one curl multi handle, exactly --concurrency
 * transfers in flight while there is work (with auto, the number autoconc.c
 * decides, fed from here: completions, and the gateway's capacity polled
 * each second on the same multi handle). Each finished transfer frees a
 * slot that the next request takes at once (no waves). A request that failed
 * in a way worth retrying waits out its backoff outside the slots, in a pool
 * bounded by --concurrency (when it is full, no new lines are read: a failing
 * server slows the run down instead of draining the corpus into errors).
 * Not for choosing lines (main.c) or formatting result lines (journal.c). */
#include "config.h"
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "bulk.h"

#define MAX_RESPONSE_BYTES (256u << 20) /* a response bigger than this is a bug somewhere */
#define MAX_BACKOFF_US (30u * 1000000u)
#define MAX_RETRY_AFTER_S 300

struct job {
	char *custom_id;
	char *body;             /* the request, serialised once */
	size_t body_len;
	enum ig_endpoint ep;
	int stream;
	long lineno;
	long model;             /* index in stats->models, -1 none */
	int attempt;            /* retries done so far */
	uint64_t due_us;        /* while waiting: not before */
	uint64_t start_us;      /* of the current attempt */
	uint64_t last_io_us;    /* last response byte (or the start) */
	size_t slot;            /* index in sched.active while in flight */
	CURL *easy;
	/* per attempt */
	struct ig_buf resp;
	int checked_type;
	int sse_mode;
	struct ig_stream sse;
	uint64_t ttft_us;
	int too_large;
	char request_id[128];
	char trace_id[33];      /* --trace: its W3C trace id, kept over its retries; "" none */
	struct curl_slist *headers; /* --trace: the run's headers and its traceparent */
	long retry_after_s;     /* -1: none */
	char errbuf[CURL_ERROR_SIZE];
};

struct sched {
	struct bulk_run *run;
	const struct bulk_opts *o;
	struct bulk_stats *st;
	CURLM *multi;
	struct curl_slist *headers;
	char *urls[IG_EP_COUNT];
	CURL **idle;            /* easy handles ready for reuse */
	size_t n_idle;
	struct job **active;    /* in flight, unordered */
	struct job **waiting;   /* waiting for a retry, unordered */
	int reader_done;
	double tokens;          /* --rate bucket */
	uint64_t tokens_at;
	/* --concurrency auto: GET /health/capacity */
	CURL *poll;             /* in the multi handle while a poll runs */
	struct ig_buf poll_body;
	char *poll_url;
	uint64_t poll_at;
	uint64_t started_us;    /* the loop's start */
	int poll_off;           /* not a gateway (or not ours to ask) */
};

static void job_free(struct job *j)
{
	if (!j)
		return;
	free(j->custom_id);
	free(j->body);
	curl_slist_free_all(j->headers);
	ig_buf_free(&j->resp);
	ig_stream_free(&j->sse);
	free(j);
}

static void reset_attempt(struct job *j)
{
	ig_buf_free(&j->resp);
	ig_stream_free(&j->sse);
	ig_stream_init(&j->sse);
	j->checked_type = j->sse_mode = j->too_large = 0;
	j->ttft_us = 0;
	j->request_id[0] = '\0';
	j->retry_after_s = -1;
	j->errbuf[0] = '\0';
}

/* --trace: a trace of its own for the line (a random id, sampled), sent
 * as traceparent with each of its attempts and written in its result line,
 * so that a bad answer leads to its trace in the gateway's and the
 * engines' spans. The parent span is the line's (the client records none). */
static void trace_job(struct sched *s, struct job *j)
{
	char span[17];
	ig_random_hex(j->trace_id, 32);
	ig_random_hex(span, 16);
	for (const struct curl_slist *l = s->headers; l; l = l->next)
		j->headers = curl_slist_append(j->headers, l->data);
	char *h = ig_strdupf("traceparent: 00-%s-%s-01", j->trace_id, span);
	j->headers = curl_slist_append(j->headers, h);
	free(h);
}

/* ------------------------------------------------------------ callbacks */

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct job *j = ud;
	size_t len = size * n;

	j->last_io_us = ig_now_us();
	if (!j->checked_type) {
		long code = 0;
		char *ct = NULL;
		j->checked_type = 1;
		curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &code);
		curl_easy_getinfo(j->easy, CURLINFO_CONTENT_TYPE, &ct);
		j->sse_mode = code / 100 == 2 && ct && strncasecmp(ct, "text/event-stream", 17) == 0;
	}
	if (j->sse_mode) {
		int r = ig_stream_feed(&j->sse, p, len);
		if (r < 0)
			return 0;
		if (r == 1)
			j->ttft_us = ig_now_us() - j->start_us;
		return len;
	}
	if (ig_buf_pending(&j->resp) + len > MAX_RESPONSE_BYTES) {
		j->too_large = 1;
		return 0;
	}
	return ig_buf_append(&j->resp, p, len) < 0 ? 0 : len;
}

static void header_value(const char *p, size_t n, const char *name, char *out, size_t cap)
{
	size_t k = strlen(name);
	if (n <= k || strncasecmp(p, name, k) != 0 || p[k] != ':')
		return;
	p += k + 1;
	n -= k + 1;
	while (n && (*p == ' ' || *p == '\t')) {
		p++;
		n--;
	}
	while (n && (p[n - 1] == '\r' || p[n - 1] == '\n' || p[n - 1] == ' '))
		n--;
	if (n >= cap)
		n = cap - 1;
	memcpy(out, p, n);
	out[n] = '\0';
}

static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct job *j = ud;
	size_t len = size * n;
	char ra[64] = "";

	j->last_io_us = ig_now_us();
	if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) { /* a new response (after 1xx) */
		j->request_id[0] = '\0';
		j->retry_after_s = -1;
	}
	header_value(p, len, "x-request-id", j->request_id, sizeof(j->request_id));
	header_value(p, len, "retry-after", ra, sizeof(ra));
	if (ra[0]) {
		char *end;
		long s = strtol(ra, &end, 10);
		if (*end == '\0' && s >= 0) {
			j->retry_after_s = s;
		} else {
			time_t t = curl_getdate(ra, NULL);
			if (t > 0)
				j->retry_after_s = t > time(NULL) ? (long)(t - time(NULL)) : 0;
		}
	}
	return len;
}

/* ------------------------------------------------------------ the slots */

static CURL *easy_get(struct sched *s)
{
	if (s->n_idle)
		return s->idle[--s->n_idle];
	CURL *e = curl_easy_init();
	if (!e)
		return NULL;
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->headers);
	ig_bulk_tls_setopt(e, &s->o->tls);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, s->o->connect_timeout_s * 1000L);
	/* no byte for idle_timeout_s: abandon and retry; never a total timeout,
	 * long generations are normal */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, s->o->idle_timeout_s);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	return e;
}

static void easy_put(struct sched *s, CURL *e)
{
	/* at most `concurrency` (or --max-concurrency) handles exist, and idle
	 * has that room */
	s->idle[s->n_idle++] = e;
}

static int start(struct sched *s, struct job *j)
{
	CURL *e = easy_get(s);
	if (!e)
		return -1;
	reset_attempt(j);
	j->easy = e;
	curl_easy_setopt(e, CURLOPT_URL, s->urls[j->ep]);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->headers ? j->headers : s->headers);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, j->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)j->body_len);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, j);
	curl_easy_setopt(e, CURLOPT_PRIVATE, j);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, j->errbuf);
	if (curl_multi_add_handle(s->multi, e) != CURLM_OK) {
		j->easy = NULL;
		easy_put(s, e);
		return -1;
	}
	j->start_us = j->last_io_us = ig_now_us();
	j->slot = (size_t)s->st->in_flight;
	s->active[s->st->in_flight++] = j;
	s->st->attempts++;
	return 0;
}

/* Takes j out of the multi handle and the active slots. */
static void detach(struct sched *s, struct job *j)
{
	curl_multi_remove_handle(s->multi, j->easy);
	easy_put(s, j->easy);
	j->easy = NULL;
	struct job *last = s->active[--s->st->in_flight];
	s->active[j->slot] = last;
	last->slot = j->slot;
}

static int skip_bit(const uint8_t *bits, long n, long i)
{
	return bits && i < n && (bits[i >> 3] >> (i & 7)) & 1;
}

/* The next selected, not yet done line as a job; NULL at the end or on a
 * problem (which stops the run). */
static struct job *next_line(struct sched *s)
{
	struct bulk_run *run = s->run;
	struct ig_corpus_reader *r = &run->reader;
	const struct bulk_opts *o = s->o;

	for (;;) {
		int got = ig_corpus_next(r);
		if (got <= 0) {
			if (got < 0) {
				s->st->fatal = ig_strdupf("reading %s: %s", o->input, strerror(errno));
				s->st->stopping = 1;
			}
			s->reader_done = 1;
			return NULL;
		}
		if (r->index % o->shard_n != o->shard_k || skip_bit(run->skip, run->skip_bits, r->index))
			continue;
		struct ig_corpus_line l;
		char *err = NULL;
		if (ig_corpus_parse(r->line, r->len, r->lineno, &run->defaults, &l, &err) < 0) {
			s->st->fatal = ig_strdupf("%s changed since the preflight check: %s", o->input, err);
			free(err);
			s->st->stopping = 1;
			s->reader_done = 1;
			return NULL;
		}
		struct job *j = calloc(1, sizeof(*j));
		if (j)
			j->body = json_dumps(l.body, JSON_COMPACT);
		if (!j || !j->body) {
			free(j);
			ig_corpus_line_clear(&l);
			s->st->fatal = ig_strdupf("out of memory");
			s->st->stopping = 1;
			return NULL;
		}
		j->body_len = strlen(j->body);
		j->custom_id = l.custom_id;
		l.custom_id = NULL;
		j->ep = l.ep;
		j->stream = l.stream;
		j->lineno = r->lineno;
		j->model = l.model ? ig_report_model_index(s->st, l.model) : -1;
		if (s->o->trace)
			trace_job(s, j);
		ig_stream_init(&j->sse);
		ig_buf_init(&j->resp);
		ig_corpus_line_clear(&l);
		return j;
	}
}

/* A waiting job whose backoff is over, the earliest first; or NULL. */
static struct job *take_due(struct sched *s, uint64_t now)
{
	long best = -1;
	for (long i = 0; i < s->st->waiting; i++)
		if (s->waiting[i]->due_us <= now && (best < 0 || s->waiting[i]->due_us < s->waiting[best]->due_us))
			best = i;
	if (best < 0)
		return NULL;
	struct job *j = s->waiting[best];
	s->waiting[best] = s->waiting[--s->st->waiting];
	return j;
}

static int rate_ok(struct sched *s, uint64_t now)
{
	if (s->o->rate <= 0)
		return 1;
	double burst = s->o->rate < 1 ? 1 : s->o->rate;
	s->tokens += (double)(now - s->tokens_at) / 1e6 * s->o->rate;
	s->tokens_at = now;
	if (s->tokens > burst)
		s->tokens = burst;
	return s->tokens >= 1.0;
}

/* The first capacity report is waited for (2 s at most): the run starts
 * at the fleet's size, not at 16 and a ramp. */
#define FIRST_POLL_WAIT_US 2000000u

static void fill(struct sched *s)
{
	uint64_t now = ig_now_us();
	if (!s->poll_off && s->st->conc.gw_unknown < 0 && now - s->started_us < FIRST_POLL_WAIT_US)
		return;
	while (!s->st->stopping && s->st->in_flight < s->st->conc.limit && rate_ok(s, now)) {
		struct job *j = take_due(s, now);
		if (!j) {
			if (s->reader_done || s->st->waiting >= s->st->conc.limit)
				return;
			j = next_line(s);
			if (!j)
				return;
		}
		if (start(s, j) < 0) {
			s->st->fatal = ig_strdupf("cannot start a transfer (out of memory?)");
			s->st->stopping = 1;
			job_free(j);
			return;
		}
		if (s->o->rate > 0)
			s->tokens -= 1.0;
	}
}

/* ------------------------------------------------------------- results */

static void write_result(struct sched *s, struct job *j, struct ig_journal *jr, char *line, size_t len)
{
	if (s->st->fatal) { /* after a failed write nothing more is written */
		free(line);
		return;
	}
	if (!line) {
		s->st->fatal = ig_strdupf("out of memory formatting the result of '%s'", j->custom_id);
		s->st->stopping = 1;
		return;
	}
	if (ig_journal_append(jr, line, len) < 0) {
		int e = errno;
		s->st->fatal = ig_strdupf("cannot write %s: %s%s; the run stopped and can be resumed "
					  "with --resume once that is fixed", jr->path, strerror(e),
					  e == ENOSPC ? " (the disk is full)" : "");
		s->st->stopping = 1;
	}
	free(line);
}

static void retry_later(struct sched *s, struct job *j, const char *code, const char *message)
{
	uint64_t base = (uint64_t)s->o->backoff_ms * 1000u << (j->attempt < 20 ? j->attempt : 20);
	if (base > MAX_BACKOFF_US)
		base = MAX_BACKOFF_US;
	/* full jitter over the upper half: spread out, never much shorter */
	uint64_t delay = base / 2 + ig_rand_below(base / 2 + 1);
	if (j->retry_after_s >= 0) {
		uint64_t ra = (uint64_t)(j->retry_after_s > MAX_RETRY_AFTER_S ? MAX_RETRY_AFTER_S : j->retry_after_s) * 1000000u;
		if (ra > delay)
			delay = ra;
	}
	j->attempt++;
	j->due_us = ig_now_us() + delay;
	s->st->retries++;
	s->waiting[s->st->waiting++] = j;
	ig_log_debug("%s (line %ld): %s (%s), retry %d in %.2fs", j->custom_id, j->lineno, code,
		     message ? message : "", j->attempt, (double)delay / 1e6);
}

/* A body that is not JSON, as a JSON string (bytes that are not ASCII
 * become '?' when they are not valid UTF-8). */
static json_t *text_body(struct ig_buf *b)
{
	size_t n = ig_buf_pending(b);
	if (!n)
		return json_string("");
	json_t *t = json_stringn(b->data + b->off, n);
	if (t)
		return t;
	char *c = b->data + b->off;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)c[i] >= 0x80 || c[i] == '\0')
			c[i] = '?';
	t = json_stringn(c, n);
	return t ? t : json_string("");
}

/* The server's error message, in whatever shape it came (OpenAI's, SGLang's
 * flat one, FastAPI's detail), as a malloc'd string; NULL when none. */
static char *error_message(json_t *body)
{
	struct ig_oaerror e;
	char *m = ig_oaerror_read(body, &e) == 0 ? strdup(json_string_value(e.message)) : NULL;
	ig_oaerror_clear(&e);
	return m;
}

/* A body that says 200 but carries an error: an error event in a stream
 * (SGLang and vLLM send `data: {"error": {...}}` then [DONE] when a request
 * fails after its headers went out), or an error object as the whole body.
 * Sets code, message and retryable from the error's own status (its
 * integer code), as if the server had answered with it. Returns 1 when the
 * body is such an error, else 0. */
static int error_in_200(json_t *body, char *code, size_t ncode, char **message, int *retryable)
{
	struct ig_oaerror e;
	if (ig_oaerror_read(body, &e) < 0)
		return 0;
	unsigned st = ig_oaerror_status(&e);
	if (st)
		snprintf(code, ncode, "http_%u", st);
	else
		snprintf(code, ncode, "stream_error");
	*message = strdup(json_string_value(e.message));
	*retryable = st ? st == 408 || st == 429 || st >= 500 : 1;
	ig_oaerror_clear(&e);
	return 1;
}

static void finished(struct sched *s, struct job *j, CURLcode rc)
{
	struct bulk_stats *st = s->st;
	long status = 0;
	json_t *body = NULL;
	char code[48] = "";
	char *message = NULL;
	int retryable = 0;
	uint64_t took = ig_now_us() - j->start_us;

	curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status);
	detach(s, j);

	if (rc != CURLE_OK) {
		status = 0;
		if (j->too_large) {
			snprintf(code, sizeof(code), "response_too_large");
			message = ig_strdupf("the response is bigger than %u MB", MAX_RESPONSE_BYTES >> 20);
		} else {
			snprintf(code, sizeof(code), "%s", rc == CURLE_OPERATION_TIMEDOUT ? "timeout" : "connection_error");
			message = ig_strdupf("%s", j->errbuf[0] ? j->errbuf : curl_easy_strerror(rc));
			retryable = 1;
		}
	} else if (status / 100 == 2) {
		const char *why = NULL;
		if (j->sse_mode && j->sse.error) {
			body = json_incref(j->sse.error);
			error_in_200(body, code, sizeof(code), &message, &retryable);
		} else if (j->sse_mode) {
			body = ig_stream_body(&j->sse, j->ep, &why);
		} else {
			body = json_loadb(ig_buf_head(&j->resp), ig_buf_pending(&j->resp), 0, NULL);
			if (!json_is_object(body)) {
				json_decref(body);
				body = NULL;
				why = "the body is not a JSON object";
			} else {
				error_in_200(body, code, sizeof(code), &message, &retryable);
			}
		}
		if (!body && !code[0]) {
			snprintf(code, sizeof(code), "invalid_response");
			message = ig_strdupf("HTTP %ld but %s", status, why);
			retryable = 1;
			status = 0;
		}
	} else {
		body = json_loadb(ig_buf_head(&j->resp), ig_buf_pending(&j->resp), 0, NULL);
		if (!body)
			body = text_body(&j->resp);
		snprintf(code, sizeof(code), "http_%ld", status);
		message = error_message(body);
		if (!message)
			message = ig_strdupf("HTTP %ld", status);
		retryable = status == 408 || status == 429 || status >= 500;
	}
	if (!code[0] && !j->request_id[0]) {
		json_t *id = json_object_get(body, "id");
		if (json_is_string(id))
			snprintf(j->request_id, sizeof(j->request_id), "%s", json_string_value(id));
	}

	if (!code[0]) { /* success */
		size_t len;
		char *line = ig_journal_ok_line(j->custom_id, status, j->request_id, j->trace_id[0] ? j->trace_id : NULL, body, &len);
		write_result(s, j, &s->run->out, line, len);
		if (!st->fatal) {
			json_t *u = json_object_get(body, "usage");
			json_t *pt = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
			if (json_is_integer(pt) && json_integer_value(pt) > 0)
				st->input_tokens += (uint64_t)json_integer_value(pt);
			if (json_is_integer(ct) && json_integer_value(ct) > 0)
				st->output_tokens += (uint64_t)json_integer_value(ct);
			ig_report_hist_add(st->latency, took);
			ig_auto_done(&st->conc, json_is_integer(ct) && json_integer_value(ct) > 0
					 ? (uint64_t)json_integer_value(ct) : 0, j->start_us, took);
			if (j->sse_mode && j->ttft_us)
				ig_report_hist_add(st->ttft, j->ttft_us);
			st->ok++;
			if (j->model >= 0)
				st->models[j->model].ok++;
		}
		job_free(j);
	} else if (retryable && !st->stopping && j->attempt < s->o->retries) {
		retry_later(s, j, code, message);
	} else if (retryable && st->stopping) {
		/* cut short, not failed for good: left for --resume */
		job_free(j);
	} else {
		size_t len;
		char *m = retryable ? ig_strdupf("%s (after %d attempts)", message, j->attempt + 1) : NULL;
		char *line = ig_journal_error_line(j->custom_id, status, j->request_id, j->trace_id[0] ? j->trace_id : NULL,
						   status ? body : NULL,
						   code, m ? m : message, &len);
		free(m);
		write_result(s, j, &s->run->err, line, len);
		if (!st->fatal) {
			st->failed++;
			if (j->model >= 0)
				st->models[j->model].failed++;
			ig_report_count_error(st, code);
		}
		ig_log_debug("%s (line %ld): %s for good: %s", j->custom_id, j->lineno, code, message);
		job_free(j);
	}
	json_decref(body);
	free(message);
}

/* ------------------------------------------------ the gateway's capacity */

static size_t on_poll_body(char *p, size_t size, size_t n, void *ud)
{
	struct ig_buf *b = ud;
	size_t len = size * n;
	if (b->len + len > (1u << 20)) /* a capacity report is small */
		return 0;
	return ig_buf_append(b, p, len) < 0 ? 0 : len;
}

static void poll_start(struct sched *s, uint64_t now)
{
	s->poll_at = now;
	s->poll = curl_easy_init();
	if (!s->poll)
		return;
	ig_buf_reset(&s->poll_body);
	curl_easy_setopt(s->poll, CURLOPT_URL, s->poll_url);
	curl_easy_setopt(s->poll, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->poll, CURLOPT_HTTPHEADER, s->headers);
	ig_bulk_tls_setopt(s->poll, &s->o->tls);
	curl_easy_setopt(s->poll, CURLOPT_WRITEFUNCTION, on_poll_body);
	curl_easy_setopt(s->poll, CURLOPT_WRITEDATA, &s->poll_body);
	curl_easy_setopt(s->poll, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(s->poll, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	if (curl_multi_add_handle(s->multi, s->poll) != CURLM_OK) {
		curl_easy_cleanup(s->poll);
		s->poll = NULL;
	}
}

static void add_pool(struct ig_capacity *c, json_t *m, const char *field)
{
	c->slots += (long)json_integer_value(json_object_get(m, field));
	c->unknown += (long)json_integer_value(json_object_get(m, "unknown"));
	c->learning += (long)json_integer_value(json_object_get(m, "learning"));
	c->ramp += (long)json_integer_value(json_object_get(m, "ramp"));
	c->healthy += (long)json_integer_value(json_object_get(m, "backends_healthy"));
	c->inflight += (long)json_integer_value(json_object_get(m, "inflight"));
	c->queued += (long)json_integer_value(json_object_get(m, "queue_depth"));
}

/* The capacity of the pools serving the run's models, from the gateway's
 * {"models": {name: {"slots", "slots_low", "unknown", "learning", ...,
 * "aliases"}}}; a model the gateway does not list counts as one backend of
 * unknown capacity. */
static void capacity_of(struct sched *s, json_t *models, struct ig_capacity *c)
{
	const char *field = s->o->priority == 2 ? "slots_low" : "slots";
	const char *name;
	json_t *m;
	size_t named = 0;
	for (size_t i = 0; i < s->st->n_models; i++) {
		const char *want = s->st->models[i].name;
		json_t *hit = json_object_get(models, want);
		if (!hit) {
			json_object_foreach (models, name, m) {
				size_t k;
				json_t *al;
				json_array_foreach (json_object_get(m, "aliases"), k, al)
					if (json_is_string(al) && strcmp(json_string_value(al), want) == 0)
						hit = m;
			}
		}
		named++;
		if (hit)
			add_pool(c, hit, field);
		else
			c->unknown++;
	}
	if (!named) /* no line names a model: whatever the gateway serves */
		json_object_foreach (models, name, m)
			add_pool(c, m, field);
}

static void poll_done(struct sched *s, CURLcode rc)
{
	long status = 0;
	curl_off_t total_us = 0;
	curl_easy_getinfo(s->poll, CURLINFO_RESPONSE_CODE, &status);
	curl_easy_getinfo(s->poll, CURLINFO_TOTAL_TIME_T, &total_us);
	curl_multi_remove_handle(s->multi, s->poll);
	curl_easy_cleanup(s->poll);
	s->poll = NULL;
	if (rc != CURLE_OK)
		return; /* asked again in a second */
	json_t *body = status == 200 ? json_loadb(ig_buf_head(&s->poll_body), ig_buf_pending(&s->poll_body), 0, NULL)
				     : NULL;
	json_t *models = json_object_get(body, "models");
	if (!json_is_object(models)) { /* a gateway of an older version, or one that wants a key */
		s->poll_off = 1;
		ig_log_info("concurrency auto: %s answers HTTP %ld, not a capacity report: searching for the most "
			    "throughput", s->poll_url, status);
	} else {
		struct ig_capacity c = {.rtt_s = (double)total_us / 1e6};
		int first = s->st->conc.gw_unknown < 0;
		capacity_of(s, models, &c);
		ig_auto_capacity(&s->st->conc, &c, s->st->in_flight, ig_now_us());
		if (first)
			ig_log_info("concurrency auto: an infergate gateway; its pools hold %ld%s", c.slots,
				    c.unknown ? " (some backends' slots not learned yet)" : "");
	}
	json_decref(body);
}

/* ------------------------------------------------------------- the loop */

static long poll_timeout_ms(struct sched *s)
{
	uint64_t now = ig_now_us();
	long t = s->run->progress->tty ? 250 : 1000;
	if (s->st->in_flight < s->st->conc.limit && !s->st->stopping) {
		for (long i = 0; i < s->st->waiting; i++) {
			uint64_t due = s->waiting[i]->due_us;
			long ms = due <= now ? 0 : (long)((due - now) / 1000 + 1);
			if (ms < t)
				t = ms;
		}
		if (s->o->rate > 0 && s->tokens < 1.0) {
			long ms = (long)((1.0 - s->tokens) / s->o->rate * 1000.0) + 1;
			if (ms < t)
				t = ms;
		}
	}
	return t;
}

/* curl's low-speed check averages over several seconds; this one fires
 * within a second of --idle-timeout-s without a byte. */
static void expire_idle(struct sched *s, uint64_t now)
{
	uint64_t idle = (uint64_t)s->o->idle_timeout_s * 1000000u;
	for (long i = s->st->in_flight - 1; i >= 0; i--) {
		struct job *j = s->active[i];
		if (now - j->last_io_us < idle)
			continue;
		snprintf(j->errbuf, sizeof(j->errbuf), "no byte from the server for %ld s", s->o->idle_timeout_s);
		finished(s, j, CURLE_OPERATION_TIMEDOUT);
	}
}

static void abort_all(struct sched *s)
{
	while (s->st->in_flight > 0) {
		struct job *j = s->active[0];
		detach(s, j);
		job_free(j);
	}
}

static void drain_pipe(int fd)
{
	char b[64];
	while (read(fd, b, sizeof(b)) > 0)
		;
}

static int sched_init(struct sched *s, struct bulk_run *run)
{
	const struct bulk_opts *o = run->opts;
	size_t n = (size_t)run->stats->conc.max; /* the most in flight, fixed or auto */

	memset(s, 0, sizeof(*s));
	ig_buf_init(&s->poll_body);
	s->poll_off = o->concurrency > 0 || !run->gateway; /* another server has no capacity report */
	s->poll_url = ig_strdupf("%s/health/capacity", o->url);
	s->run = run;
	s->o = o;
	s->st = run->stats;
	s->multi = curl_multi_init();
	s->idle = calloc(n, sizeof(*s->idle));
	s->active = calloc(n, sizeof(*s->active));
	/* New lines are read only while fewer than n wait, and at most n are in
	 * flight, so up to 2n - 1 can end up waiting at once (all of them
	 * failing together, as when the server is down). */
	s->waiting = calloc(2 * n, sizeof(*s->waiting));
	if (!s->multi || !s->idle || !s->active || !s->waiting)
		return -1;
	curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)n + 8);
	for (int i = 0; i < IG_EP_COUNT; i++)
		s->urls[i] = ig_strdupf("%s%s", o->url, ig_corpus_endpoint_path((enum ig_endpoint)i));
	s->headers = curl_slist_append(NULL, "Content-Type: application/json");
	s->headers = curl_slist_append(s->headers, "Expect:"); /* no 100-continue round trip */
	s->headers = curl_slist_append(s->headers, "User-Agent: infergate-bulk/" PACKAGE_VERSION);
	if (o->priority >= 0 && o->priority < 3) {
		static const char *const classes[] = {"high", "normal", "low"};
		char *h = ig_strdupf("X-Infergate-Priority: %s", classes[o->priority]);
		s->headers = curl_slist_append(s->headers, h);
		free(h);
	}
	if (o->api_key) {
		char *h = ig_strdupf("Authorization: Bearer %s", o->api_key);
		s->headers = curl_slist_append(s->headers, h);
		free(h);
	}
	s->tokens = 1.0;
	s->tokens_at = s->started_us = ig_now_us();
	return s->headers ? 0 : -1;
}

static void sched_free(struct sched *s)
{
	abort_all(s);
	for (long i = 0; i < s->st->waiting; i++)
		job_free(s->waiting[i]);
	s->st->waiting = 0;
	for (size_t i = 0; i < s->n_idle; i++)
		curl_easy_cleanup(s->idle[i]);
	if (s->multi)
		curl_multi_cleanup(s->multi);
	if (s->poll) {
		curl_multi_remove_handle(s->multi, s->poll);
		curl_easy_cleanup(s->poll);
	}
	ig_buf_free(&s->poll_body);
	free(s->poll_url);
	curl_slist_free_all(s->headers);
	for (int i = 0; i < IG_EP_COUNT; i++)
		free(s->urls[i]);
	free(s->idle);
	free(s->active);
	free(s->waiting);
}

int ig_scheduler_run(struct bulk_run *run)
{
	struct sched s;
	struct bulk_stats *st = run->stats;
	int announced = 0;
	uint64_t last_sync = ig_now_us(), last_idle_check = last_sync;

	if (sched_init(&s, run) < 0) {
		ig_log_error("%s: out of memory", __func__);
		sched_free(&s);
		return -1;
	}
	for (;;) {
		if (*run->signals && !st->stopping) {
			st->stopping = st->interrupted = 1;
		}
		if (st->stopping && !announced && st->interrupted) {
			announced = 1;
			if (run->progress->drawn)
				fputs("\n", stderr);
			ig_log_info("stopping: no new requests, waiting for %ld in flight "
				    "(a second signal exits at once; the run stays resumable)", st->in_flight);
		}
		if (st->stopping) {
			for (long i = 0; i < st->waiting; i++)
				job_free(s.waiting[i]);
			st->waiting = 0;
			if (st->fatal)
				abort_all(&s); /* a result that cannot be written must not be waited for */
		}
		uint64_t now = ig_now_us();
		ig_auto_tick(&st->conc, now, s.reader_done && st->waiting == 0);
		if (!s.poll_off && !s.poll && now - s.poll_at >= 1000000 && !s.reader_done)
			poll_start(&s, now);
		fill(&s);
		ig_auto_inflight(&st->conc, ig_now_us(), st->in_flight);
		if (st->in_flight == 0 && st->waiting == 0 && (s.reader_done || st->stopping))
			break;
		/* after fill: the figures show the slots refilled, as they are */
		ig_progress_tick(run->progress, st, 0);

		struct curl_waitfd sig = {.fd = run->sigfd, .events = CURL_WAIT_POLLIN};
		curl_multi_poll(s.multi, &sig, 1, (int)poll_timeout_ms(&s), NULL);
		if (sig.revents)
			drain_pipe(run->sigfd);
		int running;
		curl_multi_perform(s.multi, &running);
		CURLMsg *msg;
		int left;
		while ((msg = curl_multi_info_read(s.multi, &left))) {
			if (msg->msg != CURLMSG_DONE)
				continue;
			if (msg->easy_handle == s.poll) {
				poll_done(&s, msg->data.result);
				continue;
			}
			struct job *j = NULL;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&j);
			finished(&s, j, msg->data.result);
		}
		now = ig_now_us();
		if (now - last_idle_check >= 200000) {
			expire_idle(&s, now);
			last_idle_check = now;
		}
		if (now - last_sync >= 1000000) {
			/* results survive a kill -9 as soon as write(2) returns; this
			 * is for a power cut */
			ig_journal_sync(&run->out);
			ig_journal_sync(&run->err);
			last_sync = now;
		}
	}
	ig_journal_sync(&run->out);
	ig_journal_sync(&run->err);
	sched_free(&s);
	return 0;
}
