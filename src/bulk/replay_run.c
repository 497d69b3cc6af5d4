/* The open loop of infergate-bulk replay (replay_run.h): one thread, one curl
 * multi handle; each request goes out when its time comes, whatever the
 * answers do (a slow server does not delay the next send, as it does in a
 * closed loop: the difference between a replay and a load test). A request
 * that cannot go out on time (the loop was busy, or --max-in-flight was
 * reached) goes as soon as it can and is counted late, with how late.
 * Each answer is streamed, timed (first token, end) and written once to the
 * per-request file when it ends. Not for the trace (trace.c) or the figures
 * (replay_report.c). */
#include "config.h"
#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "replay_report.h"
#include "replay_run.h"

#define MAX_ERROR_BODY (64u << 10) /* of a refusal: its message is enough */
#define LATE_US 5000               /* the loop's resolution: later than this is late */
#define TICK_MS 100                /* the longest wait: signals and the progress line */
/* Bodies are built ahead of their time while the loop waits, so a burst of
 * arrivals (the Mooncake trace's come in whole seconds, a dozen at once)
 * only adds transfers: a 350 KB prompt takes milliseconds to write. */
#define AHEAD_US 300000
#define AHEAD_BYTES (128u << 20)

struct flight {
	size_t i;               /* the request */
	CURL *e;
	struct curl_slist *h;
	char *body;
	struct ig_buf resp;     /* a refusal's body */
	struct ig_stream sse;
	int checked, sse_mode;
	bool completions;       /* sent to /v1/completions: its stream rebuilds a text_completion */
	char backend[256];      /* X-Infergate-Backend */
	char errbuf[CURL_ERROR_SIZE];
	struct ig_replay *r;
	struct flight *prev, *next; /* in flight */
};

struct loop {
	struct ig_replay *r;
	CURLM *multi;
	struct curl_slist *base; /* the headers every request carries */
	char *urls[2];          /* chat, completions */
	struct ig_corpus_defaults d; /* Batch lines */
	FILE *in;               /* Batch lines are read again when sent */
	struct flight *head;    /* the transfers in flight */
	char **ready;           /* bodies built ahead, by request; NULL: not yet */
	const char **ready_url;
	size_t prep;            /* requests before this one have been prepared */
	size_t ready_bytes;
};

static void unlink_flight(struct loop *L, struct flight *f)
{
	if (f->prev)
		f->prev->next = f->next;
	else
		L->head = f->next;
	if (f->next)
		f->next->prev = f->prev;
	f->prev = f->next = NULL;
}

static uint64_t since_start(const struct ig_replay *r)
{
	return ig_now_us() - r->start_wall_us;
}

static void flight_free(struct flight *f)
{
	if (!f)
		return;
	curl_easy_cleanup(f->e);
	curl_slist_free_all(f->h);
	free(f->body);
	ig_buf_free(&f->resp);
	ig_stream_free(&f->sse);
	free(f);
}

static size_t answer_header(char *p, size_t size, size_t n, void *ud)
{
	struct flight *f = ud;
	size_t len = size * n;
	static const char name[] = "X-Infergate-Backend:";
	if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
		const char *v = p + sizeof(name) - 1;
		size_t vl = len - (sizeof(name) - 1);
		while (vl && (*v == ' ' || *v == '\t'))
			v++, vl--;
		while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
			vl--;
		if (vl >= sizeof(f->backend))
			vl = sizeof(f->backend) - 1;
		memcpy(f->backend, v, vl);
		f->backend[vl] = '\0';
	}
	return len;
}

static size_t answer_data(char *p, size_t size, size_t n, void *ud)
{
	struct flight *f = ud;
	size_t len = size * n;
	if (!f->checked) {
		long status = 0;
		const char *ct = NULL;
		curl_easy_getinfo(f->e, CURLINFO_RESPONSE_CODE, &status);
		curl_easy_getinfo(f->e, CURLINFO_CONTENT_TYPE, &ct);
		f->sse_mode = status == 200 && ct && strncasecmp(ct, "text/event-stream", 17) == 0;
		f->checked = 1;
	}
	if (!f->sse_mode) {
		if (ig_buf_pending(&f->resp) + len <= MAX_ERROR_BODY && ig_buf_append(&f->resp, p, len) < 0)
			return 0;
		return len;
	}
	int first = ig_stream_feed(&f->sse, p, len);
	if (first < 0)
		return 0;
	struct ig_replay_rec *x = &f->r->rec[f->i];
	if (first == 1 && !x->first_us)
		x->first_us = since_start(f->r);
	return len;
}

/* The request body of trace request i (malloc'd, *path set), or NULL with
 * *err (a Batch line that cannot be sent: its record says why). */
static char *request_body(struct loop *L, size_t i, const char **path, char **err)
{
	const struct ig_replay *r = L->r;
	const struct replay_opts *o = r->o;
	const struct ig_trace_req *q = &r->t->v[i];
	json_t *body = NULL;

	if (r->t->kind == IG_TRACE_MOONCAKE) {
		struct ig_buf text;
		ig_buf_init(&text);
		ig_trace_prompt(&text, r->t, q, o->block_tokens, o->bytes_per_token);
		json_t *prompt = json_stringn(ig_buf_head(&text), ig_buf_pending(&text));
		ig_buf_free(&text);
		if (!prompt)
			abort();
		if (o->endpoint == 1)
			body = json_pack("{s:s, s:o}", "model", o->model, "prompt", prompt);
		else
			body = json_pack("{s:s, s:[{s:s, s:o}]}", "model", o->model, "messages", "role", "user", "content",
					 prompt);
		/* the trace's answer length, exactly: the benchmark clients'
		 * ignore_eos (vllm bench serve --ignore-eos, aiperf) */
		json_object_set_new(body, "max_tokens", json_integer(q->output_len > 0 ? q->output_len : 1));
		json_object_set_new(body, "ignore_eos", json_true());
		*path = o->endpoint == 1 ? L->urls[1] : L->urls[0];
	} else {
		char *line = malloc(q->len + 1);
		if (!line)
			abort();
		if (pread(fileno(L->in), line, q->len, q->offset) != (ssize_t)q->len) {
			*err = ig_strdupf("line %ld: read again from --input: %s", q->line,
					  errno ? strerror(errno) : "the file changed");
			free(line);
			return NULL;
		}
		json_t *obj = json_loadb(line, q->len, 0, NULL);
		free(line);
		json_object_del(obj, "timestamp");
		char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
		json_decref(obj);
		struct ig_corpus_line l;
		if (!text || ig_corpus_parse(text, strlen(text), q->line, &L->d, &l, err) < 0) {
			if (!text)
				*err = ig_strdupf("line %ld changed since the preflight", q->line);
			free(text);
			return NULL;
		}
		free(text);
		body = json_incref(l.body);
		*path = l.ep == IG_EP_COMPLETIONS ? L->urls[1] : L->urls[0];
		ig_corpus_line_clear(&l);
	}
	json_object_set_new(body, "stream", json_true());
	json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
	char *s = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!s)
		abort();
	return s;
}

/* Writes request i's line; a write failure stops the run. */
static void write_line(struct ig_replay *r, size_t i, const char *backend, const char *error)
{
	json_t *j = ig_replay_line_json(r, i, backend, error);
	char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(10));
	json_decref(j);
	if (!s)
		abort();
	/* a line out at once: the file can be followed, and a kill loses no
	 * line that ended */
	if (!r->fatal && (fputs(s, r->out) == EOF || fputc('\n', r->out) == EOF || fflush(r->out) == EOF)) {
		r->fatal = ig_strdupf("--output %s: %s", r->out_path, strerror(errno));
		r->stopping = 1;
	}
	free(s);
}

/* Request i ended (or could not start: error set, f NULL). */
static void ended(struct ig_replay *r, size_t i, struct flight *f, const char *error)
{
	struct ig_replay_rec *x = &r->rec[i];
	char *why = NULL;
	x->end_us = since_start(r);
	if (x->end_us > r->end_us)
		r->end_us = x->end_us;
	if (f && !error) {
		const char *serr = NULL;
		json_t *body = f->sse_mode ? ig_stream_body(&f->sse, f->completions ? IG_EP_COMPLETIONS : IG_EP_CHAT, &serr)
					   : NULL;
		json_t *usage = json_object_get(body, "usage");
		json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
		x->prompt_tokens = json_is_integer(json_object_get(usage, "prompt_tokens"))
					   ? (long)json_integer_value(json_object_get(usage, "prompt_tokens")) : -1;
		x->completion_tokens = json_is_integer(json_object_get(usage, "completion_tokens"))
					       ? (long)json_integer_value(json_object_get(usage, "completion_tokens")) : -1;
		x->cached_tokens = json_is_integer(cached) ? (long)json_integer_value(cached) : json_is_null(cached) ||
					   !cached ? (usage ? 0 : -1) : -1;
		if (x->status != 200) {
			json_t *e = json_loadb(ig_buf_head(&f->resp), ig_buf_pending(&f->resp), 0, NULL);
			json_t *m = json_object_get(json_object_get(e, "error"), "message");
			why = ig_strdupf("HTTP %ld%s%.300s", x->status, json_is_string(m) ? ": " : "",
					 json_is_string(m) ? json_string_value(m) : "");
			json_decref(e);
		} else if (!f->sse_mode) {
			why = strdup("the answer is not a stream (text/event-stream)");
		} else if (!body) {
			why = ig_strdupf("the stream: %s", serr ? serr : "no answer");
		} else if (x->completion_tokens < 0) {
			why = strdup("the stream carried no usage (stream_options.include_usage)");
		} else {
			x->ok = true;
		}
		json_decref(body);
		error = why;
	}
	r->ended++;
	if (!x->ok)
		r->errors++;
	else if (x->first_us && r->n_recent < 1u << 30)
		r->recent_ttft[r->n_recent++ % 256] = ig_replay_ms(r, x->first_us - x->sent_us);
	write_line(r, i, f && f->backend[0] ? f->backend : NULL, error);
	free(why);
}

static int start_one(struct loop *L, size_t i, uint64_t now)
{
	struct ig_replay *r = L->r;
	struct ig_replay_rec *x = &r->rec[i];
	char *err = NULL;
	const char *url = NULL;

	x->sent_us = now;
	if (now > x->due_us + LATE_US)
		r->late++;
	r->sent++;
	char *body = L->ready[i];
	url = L->ready_url[i];
	if (body) {
		L->ready[i] = NULL;
		L->ready_bytes -= strlen(body);
	} else {
		body = request_body(L, i, &url, &err);
	}
	if (!body) {
		ended(r, i, NULL, err);
		free(err);
		return 0;
	}
	struct flight *f = calloc(1, sizeof(*f));
	if (!f)
		abort();
	f->i = i;
	f->r = r;
	f->body = body;
	f->completions = url == L->urls[1];
	ig_buf_init(&f->resp);
	ig_stream_init(&f->sse);
	f->e = curl_easy_init();
	if (!f->e)
		abort();
	for (struct curl_slist *h = L->base; h; h = h->next)
		f->h = curl_slist_append(f->h, h->data);
	CURL *e = f->e;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, f->h);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, f->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(f->body));
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, answer_data);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, answer_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, f);
	curl_easy_setopt(e, CURLOPT_PRIVATE, f);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, f->errbuf);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, r->o->connect_timeout_s * 1000L);
	/* an answer with no byte for this long is an error, not a hang */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, r->o->idle_timeout_s);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	ig_bulk_tls_setopt(e, &r->o->tls);
	if (curl_multi_add_handle(L->multi, e) != CURLM_OK) {
		ended(r, i, NULL, "curl could not add the transfer");
		flight_free(f);
		return 0;
	}
	f->next = L->head;
	if (L->head)
		L->head->prev = f;
	L->head = f;
	r->in_flight++;
	return 0;
}

static void done_transfers(struct loop *L)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(L->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		struct flight *f = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&f);
		CURLcode rc = m->data.result;
		struct ig_replay_rec *x = &L->r->rec[f->i];
		curl_easy_getinfo(f->e, CURLINFO_RESPONSE_CODE, &x->status);
		curl_multi_remove_handle(L->multi, f->e);
		unlink_flight(L, f);
		L->r->in_flight--;
		if (rc != CURLE_OK) {
			char *why = ig_strdupf("%s", f->errbuf[0] ? f->errbuf : curl_easy_strerror(rc));
			ended(L->r, f->i, f, why);
			free(why);
		} else {
			ended(L->r, f->i, f, NULL);
		}
		flight_free(f);
	}
}

/* On a signal: the transfers in flight are dropped (their lines are not
 * written: they did not end). */
static void drop_all(struct loop *L)
{
	while (L->head) {
		struct flight *f = L->head;
		curl_multi_remove_handle(L->multi, f->e);
		unlink_flight(L, f);
		flight_free(f);
		L->r->in_flight--;
	}
}

int ig_replay_run(struct ig_replay *r)
{
	const struct replay_opts *o = r->o;
	struct loop L = {.r = r};
	int rc = -1;

	L.multi = curl_multi_init();
	if (!L.multi)
		return -1;
	L.urls[0] = ig_strdupf("%s/v1/chat/completions", o->url);
	L.urls[1] = ig_strdupf("%s/v1/completions", o->url);
	L.base = curl_slist_append(NULL, "Content-Type: application/json");
	L.base = curl_slist_append(L.base, "Expect:"); /* a 48 KB prompt goes at once */
	if (o->api_key) {
		char *a = ig_strdupf("Authorization: Bearer %s", o->api_key);
		L.base = curl_slist_append(L.base, a);
		free(a);
	}
	static const char *const prio[] = {"high", "normal", "low"};
	if (o->priority >= 0 && o->priority < 3) {
		char *a = ig_strdupf("X-Infergate-Priority: %s", prio[o->priority]);
		L.base = curl_slist_append(L.base, a);
		free(a);
	}
	L.d = (struct ig_corpus_defaults){o->model, -1, 0, 0, -1, 1, "--model"};
	if (r->t->kind == IG_TRACE_BATCH && !(L.in = fopen(o->input, "r"))) {
		r->fatal = ig_strdupf("--input %s: %s", o->input, strerror(errno));
		goto out;
	}
	/* due times: trace ms / speed / time scale, in wall-clock us */
	double per_ms = 1000.0 / (o->speed * o->time_scale);
	for (size_t i = 0; i < r->t->n; i++)
		r->rec[i].due_us = (uint64_t)((double)r->t->v[i].at_ms * per_ms);
	L.ready = calloc(r->t->n + 1, sizeof(*L.ready));
	L.ready_url = calloc(r->t->n + 1, sizeof(*L.ready_url));
	if (!L.ready || !L.ready_url)
		abort();
	size_t next = 0;
	r->start_wall_us = ig_now_us();
	for (;;) {
		uint64_t now = since_start(r);
		if (*r->signals && !r->stopping) {
			r->stopping = 1;
			ig_log_warn("stopping: no more sends; %ld requests in flight are dropped", r->in_flight);
		}
		if (r->stopping)
			drop_all(&L);
		while (!r->stopping && next < r->t->n && r->rec[next].due_us <= now && r->in_flight < o->max_in_flight) {
			start_one(&L, next++, now);
			now = since_start(r);
		}
		if ((next == r->t->n || r->stopping) && r->in_flight == 0)
			break;
		long wait_ms = TICK_MS;
		if (!r->stopping && next < r->t->n && r->in_flight < o->max_in_flight) {
			uint64_t due = r->rec[next].due_us;
			long ms = due > now ? (long)((due - now) / 1000) : 0;
			if (ms < wait_ms)
				wait_ms = ms;
		}
		/* build what falls due soon, one a turn (the transfers in flight
		 * are read between two), while there is time */
		if (!r->stopping && wait_ms > 0 && L.prep < r->t->n && L.ready_bytes < AHEAD_BYTES &&
		    r->rec[L.prep].due_us <= now + AHEAD_US) {
			size_t k = L.prep++;
			if (k >= next) {
				char *err = NULL;
				L.ready[k] = request_body(&L, k, &L.ready_url[k], &err);
				free(err); /* said again when it is sent */
				if (L.ready[k])
					L.ready_bytes += strlen(L.ready[k]);
			}
			now = since_start(r);
			if (next < r->t->n) {
				uint64_t due = r->rec[next].due_us;
				long ms = due > now ? (long)((due - now) / 1000) : 0;
				if (ms < wait_ms)
					wait_ms = ms;
			}
		}
		int running;
		curl_multi_poll(L.multi, NULL, 0, (int)wait_ms, NULL);
		curl_multi_perform(L.multi, &running);
		done_transfers(&L);
		ig_replay_progress(r, since_start(r), 0);
	}
	rc = 0;
out:
	for (size_t i = 0; L.ready && i < r->t->n; i++)
		free(L.ready[i]);
	free(L.ready);
	free(L.ready_url);
	if (L.in)
		fclose(L.in);
	curl_slist_free_all(L.base);
	free(L.urls[0]);
	free(L.urls[1]);
	curl_multi_cleanup(L.multi);
	return rc;
}
