/* `infergate-bulk submit`: hands a corpus to a gateway through the OpenAI
 * Batch API, so the machine that submitted it may go away while it runs:
 * upload the file (POST /v1/files), create the batch (POST /v1/batches),
 * follow it (GET /v1/batches/ID), download its output and error files
 * (GET /v1/files/ID/content). The batch is the gateway's from the moment it
 * is created: stopping here stops the following, never the batch, and
 * `--batch ID` picks it up again from anywhere.
 *
 * Not for sending the requests (main.c and scheduler.c do that from here)
 * nor for running batches (the gateway's batches.c). One request at a time,
 * seconds apart: blocking libcurl easy calls on one handle (its connection
 * kept alive) are enough. Every local check runs before the first byte is
 * sent; the corpus itself is checked by the gateway, line by line, and its
 * findings come back as the batch's errors. */
#include "config.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "bulk.h"
#include "submit_state.h"

/* ---------------------------------------------------------------- signals */

static volatile sig_atomic_t sb_signals;

static void sb_on_signal(int signo IG_UNUSED)
{
	if (++sb_signals >= 2) {
		static const char msg[] = "\ninfergate-bulk submit: second signal, exiting now "
					  "(a batch already created keeps running on the gateway)\n";
		ssize_t IG_UNUSED w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(130);
	}
}

/* No SA_RESTART: a signal ends the sleep between two polls at once. */
static void sb_setup_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = sb_on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN); /* a file size limit is a write error we report */
}

/* Sleeps s seconds unless a signal comes first. */
static void sb_sleep(long s)
{
	struct timespec left = {s, 0};
	while (!sb_signals && nanosleep(&left, &left) < 0 && errno == EINTR)
		;
}

/* ------------------------------------------------------------------- HTTP */

static size_t sb_collect(char *p, size_t size, size_t n, void *ud)
{
	struct ig_buf *b = ud;
	if (ig_buf_pending(b) + size * n > (64u << 20))
		return 0;
	return ig_buf_append(b, p, size * n) < 0 ? 0 : size * n;
}

static void sb_mb(char *out, size_t n, double bytes)
{
	snprintf(out, n, "%.1f MB", bytes / 1e6);
}

/* Called by curl about once a second, and at each block: a signal stops
 * the transfer when it may be stopped; an upload shows its progress. */
static int sb_xferinfo(void *ud, curl_off_t dltotal IG_UNUSED, curl_off_t dlnow IG_UNUSED, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct submit *s = ud;
	if (sb_signals && s->abortable)
		return 1;
	if (!s->upload_name || ultotal <= 0)
		return 0;
	uint64_t now = ig_now_us();
	/* from a quarter second (a small file shows nothing), then on a
	 * terminal 4 times a second, else a plain line every
	 * --progress-interval-s while not done */
	if (now - s->upload_drawn_us < (s->tty ? 250000u : (uint64_t)s->progress_interval_s * 1000000u) ||
	    (ulnow >= ultotal && (!s->tty || s->upload_full)))
		return 0;
	s->upload_full = ulnow >= ultotal;
	char a[32], b[32];
	sb_mb(a, sizeof(a), (double)ulnow);
	sb_mb(b, sizeof(b), (double)ultotal);
	fprintf(stderr, "%suploading %s: %s of %s (%.0f%%)%s%s", s->tty ? "\r\033[K" : "", s->upload_name, a, b,
		100.0 * (double)ulnow / (double)ultotal, s->upload_full ? ", waiting for the gateway's answer" : "",
		s->tty ? "" : "\n");
	fflush(stderr);
	s->upload_drawn = s->tty;
	s->upload_drawn_us = now;
	return 0;
}

/* The options every request has, on the one handle. */
static void sb_prepare(struct submit *s, const char *method, const char *url)
{
	CURL *e = s->curl;
	curl_easy_reset(e); /* keeps the connection */
	s->errbuf[0] = '\0';
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, strcmp(method, "GET") == 0 ? NULL : method);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->auth);
	ig_bulk_tls_setopt(e, &s->tls);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, s->connect_timeout_s * 1000L);
	/* files are large and a gateway may be slow to start sending: an idle
	 * limit, never a total timeout */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)SB_IDLE_S);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->errbuf);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, sb_xferinfo);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, s);
}

/* What a failed exchange says, for people: the gateway's own message
 * (OpenAI's error shape, or any shape ig_oaerror_read knows) and the
 * status, or why there was no answer. */
static char *sb_failure(struct submit *s, const char *method, const char *url, CURLcode rc, long status,
			const struct ig_buf *body)
{
	if (rc != CURLE_OK)
		return ig_strdupf("%s %s: cannot reach the gateway: %s", method, url,
				  s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc));
	json_t *j = json_loadb(ig_buf_head(body), ig_buf_pending(body), 0, NULL);
	struct ig_oaerror oe;
	char *m;
	if (j && ig_oaerror_read(j, &oe) == 0 && json_is_string(oe.message))
		m = ig_strdupf("%s %s: HTTP %ld: %s", method, url, status, json_string_value(oe.message));
	else
		m = ig_strdupf("%s %s: HTTP %ld%s%.200s", method, url, status, ig_buf_pending(body) ? ": " : "",
			       ig_buf_head(body));
	if (j)
		ig_oaerror_clear(&oe);
	json_decref(j);
	return m;
}

static void sb_answer_clear(struct sb_answer *a)
{
	json_decref(a->json);
	free(a->err);
	memset(a, 0, sizeof(*a));
}

/* One request whose answer is a JSON object: body (JSON) or mime (a form)
 * or neither. Returns 0 on a 2xx with a->json an object, -1 otherwise with
 * a->err (and a->aborted when a signal stopped it). */
static int sb_call(struct submit *s, const char *method, const char *path, json_t *body, curl_mime *mime,
		   struct sb_answer *a)
{
	char *url = ig_strdupf("%s%s", s->url, path);
	char *text = NULL;
	struct ig_buf got;

	memset(a, 0, sizeof(*a));
	ig_buf_init(&got);
	sb_prepare(s, method, url);
	if (body) {
		text = json_dumps(body, JSON_COMPACT);
		curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, s->json_headers);
		curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, text);
	} else if (mime) {
		curl_easy_setopt(s->curl, CURLOPT_MIMEPOST, mime);
	} else if (strcmp(method, "POST") == 0) {
		curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, "");
	}
	curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, sb_collect);
	curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &got);
	CURLcode rc = curl_easy_perform(s->curl);
	if (rc == CURLE_ABORTED_BY_CALLBACK) {
		a->aborted = 1;
		a->err = ig_strdupf("%s %s: stopped by a signal", method, url);
		goto out;
	}
	if (rc == CURLE_OK)
		curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &a->status);
	if (rc != CURLE_OK || a->status / 100 != 2) {
		a->err = sb_failure(s, method, url, rc, a->status, &got);
		goto out;
	}
	a->json = json_loadb(ig_buf_head(&got), ig_buf_pending(&got), 0, NULL);
	if (!json_is_object(a->json))
		a->err = ig_strdupf("%s %s: HTTP %ld with an answer that is not a JSON object: %.200s", method, url,
				    a->status, ig_buf_head(&got));
out:
	ig_buf_free(&got);
	free(text);
	free(url);
	return a->err ? -1 : 0;
}

/* A string member of the batch, or NULL. */
static const char *sb_str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static long sb_count(json_t *batch, const char *key)
{
	json_t *v = json_object_get(json_object_get(batch, "request_counts"), key);
	return json_is_integer(v) ? (long)json_integer_value(v) : 0;
}

/* Keeps a new Batch object (takes the answer's reference). */
static void sb_keep_batch(struct submit *s, struct sb_answer *a)
{
	json_decref(s->batch);
	s->batch = a->json;
	a->json = NULL;
}

/* ------------------------------------------------------- upload and create */

static enum sb_end sb_upload(struct submit *s)
{
	struct sb_answer a;
	curl_mime *mime = curl_mime_init(s->curl);
	curl_mimepart *part = curl_mime_addpart(mime);
	enum sb_end end = SB_DONE;

	curl_mime_name(part, "purpose");
	curl_mime_data(part, "batch", CURL_ZERO_TERMINATED);
	part = curl_mime_addpart(mime);
	curl_mime_name(part, "file");
	/* read from disk as it is sent: the corpus is never in memory */
	if (curl_mime_filedata(part, s->input) != CURLE_OK) {
		fprintf(stderr, "infergate-bulk submit: --input %s: %s\n", s->input, strerror(errno));
		curl_mime_free(mime);
		return SB_GATEWAY;
	}
	curl_mime_type(part, "application/jsonl");
	char *copy = strdup(s->input);
	s->upload_name = basename(copy);
	s->upload_drawn_us = ig_now_us();
	s->upload_full = 0;
	s->abortable = 1;
	int rc = sb_call(s, "POST", "/v1/files", NULL, mime, &a);
	s->abortable = 0;
	s->upload_name = NULL;
	free(copy);
	curl_mime_free(mime);
	if (s->upload_drawn) {
		fprintf(stderr, "\n");
		s->upload_drawn = 0;
	}
	if (rc < 0) {
		if (a.aborted) {
			fprintf(stderr, "infergate-bulk submit: stopped while uploading %s; no batch was created\n",
				s->input);
			end = SB_STOPPED;
		} else {
			fprintf(stderr, "infergate-bulk submit: uploading %s: %s\n", s->input, a.err);
			end = SB_GATEWAY;
		}
	} else if (!ig_submit_id_ok(sb_str(a.json, "id") ? sb_str(a.json, "id") : "")) {
		fprintf(stderr, "infergate-bulk submit: uploading %s: the answer has no usable file \"id\"\n", s->input);
		end = SB_GATEWAY;
	} else {
		s->file_id = strdup(sb_str(a.json, "id"));
		json_t *bytes = json_object_get(a.json, "bytes");
		ig_log_info("uploaded %s as %s (%lld bytes)", s->input, s->file_id,
			    json_is_integer(bytes) ? (long long)json_integer_value(bytes) : -1LL);
	}
	sb_answer_clear(&a);
	return end;
}

static enum sb_end sb_create(struct submit *s)
{
	struct sb_answer a;
	json_t *body = json_pack("{s:s, s:s, s:s}", "input_file_id", s->file_id, "endpoint", s->ep_path,
				 "completion_window", "24h");
	if (s->metadata)
		json_object_set(body, "metadata", s->metadata);
	/* not abortable: a batch created while we stop must still be named */
	int rc = sb_call(s, "POST", "/v1/batches", body, NULL, &a);
	json_decref(body);
	if (rc < 0 || !ig_submit_id_ok(sb_str(a.json, "id") ? sb_str(a.json, "id") : "")) {
		fprintf(stderr, "infergate-bulk submit: creating the batch of %s: %s\n", s->file_id,
			a.err ? a.err : "the answer has no usable batch \"id\"");
		sb_answer_clear(&a);
		return SB_GATEWAY;
	}
	sb_keep_batch(s, &a);
	s->batch_id = strdup(sb_str(s->batch, "id"));
	return SB_DONE;
}

/* --------------------------------------------------------------- following */

/* An argument as a shell reads it back. */
static void sb_shell_arg(struct ig_buf *b, const char *a)
{
	if (*a && strspn(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=@%+,") == strlen(a)) {
		ig_buf_printf(b, " %s", a);
		return;
	}
	ig_buf_printf(b, " '");
	for (const char *p = a; *p; p++)
		ig_buf_printf(b, *p == '\'' ? "'\\''" : "%c", *p);
	ig_buf_printf(b, "'");
}

/* The command that follows this batch again and downloads its results. */
static void sb_print_resume(struct submit *s, FILE *f)
{
	struct ig_buf b;
	ig_buf_init(&b);
	ig_buf_printf(&b, "infergate-bulk submit --batch");
	sb_shell_arg(&b, s->batch_id);
	ig_buf_printf(&b, " --url");
	sb_shell_arg(&b, s->url);
	ig_buf_printf(&b, " --output");
	sb_shell_arg(&b, s->output ? s->output : "FILE");
	if (s->errors_flag) {
		ig_buf_printf(&b, " --errors");
		sb_shell_arg(&b, s->errors_flag);
	}
	if (s->api_key_env) {
		ig_buf_printf(&b, " --api-key-env");
		sb_shell_arg(&b, s->api_key_env);
	}
	if (s->force)
		ig_buf_printf(&b, " --force");
	fprintf(f, "  %s\n", b.data);
	ig_buf_free(&b);
}

static int sb_final(const char *status)
{
	return strcmp(status, "completed") == 0 || strcmp(status, "failed") == 0 ||
	       strcmp(status, "cancelled") == 0 || strcmp(status, "expired") == 0;
}

static void sb_sample(struct submit *s, uint64_t now, long done)
{
	s->sample_us[s->next_sample] = now;
	s->sample_done[s->next_sample] = done;
	s->next_sample = (s->next_sample + 1) % SB_RATE_SAMPLES;
	if (s->n_samples < SB_RATE_SAMPLES)
		s->n_samples++;
}

/* Lines finished per second over the samples kept (about the last minute):
 * the ETA follows the gateway's current speed. -1: not known yet. */
static double sb_rate(const struct submit *s)
{
	if (s->n_samples < 2)
		return -1;
	unsigned newest = (s->next_sample + SB_RATE_SAMPLES - 1) % SB_RATE_SAMPLES;
	unsigned oldest = s->n_samples == SB_RATE_SAMPLES ? s->next_sample : 0;
	double dt = (double)(s->sample_us[newest] - s->sample_us[oldest]) / 1e6;
	if (dt < 0.5)
		return -1;
	return (double)(s->sample_done[newest] - s->sample_done[oldest]) / dt;
}

/* One line: "in_progress 120/1000 12.0% (118 ok, 2 failed) | 45.1 lines/s | ETA 19.5s". */
static void sb_progress_line(struct submit *s, char *out, size_t n)
{
	const char *status = sb_str(s->batch, "status");
	long total = sb_count(s->batch, "total"), ok = sb_count(s->batch, "completed"),
	     failed = sb_count(s->batch, "failed"), done = ok + failed;
	double rate = sb_rate(s);
	char rate_s[32], eta[32];

	if (rate < 0)
		snprintf(rate_s, sizeof(rate_s), "? lines/s");
	else
		snprintf(rate_s, sizeof(rate_s), "%.1f lines/s", rate);
	if (total > 0 && done >= total)
		snprintf(eta, sizeof(eta), "0s");
	else if (rate > 0 && total > 0)
		ig_report_duration(eta, sizeof(eta), (double)(total - done) / rate);
	else
		snprintf(eta, sizeof(eta), "?");
	if (total > 0 && status && sb_final(status))
		snprintf(out, n, "%s %s: %ld/%ld (%ld ok, %ld failed)", s->batch_id, status, done, total, ok, failed);
	else if (total > 0)
		snprintf(out, n, "%s %s: %ld/%ld %.1f%% (%ld ok, %ld failed) | %s | ETA %s", s->batch_id,
			 status ? status : "?", done, total, 100.0 * (double)done / (double)total, ok, failed, rate_s,
			 eta);
	else /* validating: the lines are not counted yet */
		snprintf(out, n, "%s %s", s->batch_id, status ? status : "?");
}

/* After each poll: the live line on a terminal, else a plain line when the
 * status changes and every --progress-interval-s. */
static void sb_progress(struct submit *s, int last)
{
	char line[384];
	uint64_t now = ig_now_us();
	const char *status = sb_str(s->batch, "status");
	int changed = strcmp(status ? status : "?", s->last_status) != 0;

	sb_sample(s, now, sb_count(s->batch, "completed") + sb_count(s->batch, "failed"));
	snprintf(s->last_status, sizeof(s->last_status), "%s", status ? status : "?");
	sb_progress_line(s, line, sizeof(line));
	if (s->tty) {
		fprintf(stderr, "\r\033[K%s%s", line, last ? "\n" : "");
		s->drawn = !last;
	} else if (changed || last || now - s->last_plain_us >= (uint64_t)s->progress_interval_s * 1000000u) {
		fprintf(stderr, "progress: %s\n", line);
		s->last_plain_us = now;
	}
	fflush(stderr);
}

static void sb_end_live_line(struct submit *s)
{
	if (s->drawn) {
		fprintf(stderr, "\n");
		s->drawn = 0;
	}
}

/* Polls the batch until it ends. A gateway that does not answer (or answers
 * 429/5xx: restarting, overloaded) is asked again for SB_OUTAGE_S: a laptop
 * that slept, a gateway restarted. */
static enum sb_end sb_follow(struct submit *s)
{
	char *path = ig_strdupf("/v1/batches/%s", s->batch_id);
	uint64_t failing_since = 0;
	enum sb_end end = SB_DONE;

	for (;;) {
		struct sb_answer a;
		s->abortable = 1;
		int rc = sb_call(s, "GET", path, NULL, NULL, &a);
		s->abortable = 0;
		if (rc == 0 && !json_is_string(json_object_get(a.json, "status"))) {
			free(a.err);
			a.err = ig_strdupf("GET %s%s: the answer is not a Batch object (no \"status\")", s->url, path);
			rc = -1;
			a.status = 500; /* not final: a gateway in the middle of something */
		}
		if (rc < 0) {
			if (a.aborted || sb_signals) {
				sb_answer_clear(&a);
				end = SB_STOPPED;
				break;
			}
			int transient = a.status == 0 || a.status == 429 || a.status >= 500;
			uint64_t now = ig_now_us();
			if (transient && !failing_since) {
				failing_since = now;
				sb_end_live_line(s);
				ig_log_warn("%s; asking again every %ld s for %d s", a.err, s->poll_s, SB_OUTAGE_S);
			}
			if (!transient || now - failing_since >= (uint64_t)SB_OUTAGE_S * 1000000u) {
				sb_end_live_line(s);
				fprintf(stderr, "infergate-bulk submit: following %s: %s\n", s->batch_id, a.err);
				sb_answer_clear(&a);
				end = SB_GATEWAY;
				break;
			}
			sb_answer_clear(&a);
		} else {
			if (failing_since)
				ig_log_info("the gateway answers again");
			failing_since = 0;
			sb_keep_batch(s, &a);
			int last = sb_final(sb_str(s->batch, "status"));
			sb_progress(s, last);
			if (last)
				break;
		}
		sb_sleep(s->poll_s);
		if (sb_signals) {
			end = SB_STOPPED;
			break;
		}
	}
	sb_end_live_line(s);
	free(path);
	return end;
}

static enum sb_end sb_cancel(struct submit *s)
{
	struct sb_answer a;
	char *path = ig_strdupf("/v1/batches/%s/cancel", s->batch_id);
	int rc = sb_call(s, "POST", path, NULL, NULL, &a);
	free(path);
	if (rc < 0) {
		fprintf(stderr, "infergate-bulk submit: cancelling %s: %s\n", s->batch_id, a.err);
		sb_answer_clear(&a);
		return SB_GATEWAY;
	}
	fprintf(stderr, "infergate-bulk submit: %s is %s; following it until it ends\n", s->batch_id,
		sb_str(a.json, "status") ? sb_str(a.json, "status") : "being cancelled");
	sb_answer_clear(&a);
	return SB_DONE;
}

/* ---------------------------------------------------------------- download */

struct sb_sink {
	struct submit *s;
	int fd;
	long status;
	long lines;
	int last;               /* the last byte written */
	int werr;               /* errno of a failed write */
	struct ig_buf errbody;  /* the body of an answer that is not 2xx */
};

static size_t sb_to_file(char *p, size_t size, size_t n, void *ud)
{
	struct sb_sink *k = ud;
	size_t len = size * n;

	if (!k->status)
		curl_easy_getinfo(k->s->curl, CURLINFO_RESPONSE_CODE, &k->status);
	if (k->status / 100 != 2)
		return sb_collect(p, 1, len, &k->errbody);
	if (ig_write_all(k->fd, p, len) < 0) {
		k->werr = errno;
		return 0;
	}
	for (const char *q = p, *end = p + len; (q = memchr(q, '\n', (size_t)(end - q))); q++)
		k->lines++;
	if (len)
		k->last = (unsigned char)p[len - 1];
	return len;
}

/* Puts the finished temp file in place: never over an existing file
 * without --force (a hard link fails when the name is taken; a file system
 * without hard links gets a check and a rename). Returns 0, or -1 with errno. */
static int sb_place(struct submit *s, const char *tmp, const char *dest)
{
	if (s->force)
		return rename(tmp, dest);
	if (link(tmp, dest) == 0)
		return unlink(tmp) < 0 && errno != ENOENT ? -1 : 0;
	if (errno == EEXIST)
		return -1;
	struct stat st;
	if (stat(dest, &st) == 0) {
		errno = EEXIST;
		return -1;
	}
	return rename(tmp, dest);
}

/* Downloads file_id (NULL: the batch has none, an empty file is written)
 * to dest through dest.tmp-PID. *lines gets its line count. */
static enum sb_end sb_download(struct submit *s, const char *file_id, const char *dest, const char *what,
			       long *lines)
{
	char *tmp = ig_strdupf("%s.tmp-%ld", dest, (long)getpid());
	char *path = NULL, *url = NULL, *esc = NULL;
	struct sb_sink k = {.s = s, .fd = -1};
	enum sb_end end = SB_GATEWAY;

	ig_buf_init(&k.errbody);
	k.fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (k.fd < 0) {
		fprintf(stderr, "infergate-bulk submit: %s %s: %s\n", what, tmp, strerror(errno));
		goto fail;
	}
	if (file_id) {
		esc = curl_easy_escape(s->curl, file_id, 0);
		path = ig_strdupf("/v1/files/%s/content", esc);
		url = ig_strdupf("%s%s", s->url, path);
		sb_prepare(s, "GET", url);
		curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, sb_to_file);
		curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &k);
		s->abortable = 1;
		CURLcode rc = curl_easy_perform(s->curl);
		s->abortable = 0;
		if (rc == CURLE_ABORTED_BY_CALLBACK) {
			fprintf(stderr, "infergate-bulk submit: stopped while downloading %s\n", dest);
			end = SB_STOPPED;
			goto fail;
		}
		if (k.werr) {
			fprintf(stderr, "infergate-bulk submit: %s %s: %s\n", what, tmp, strerror(k.werr));
			end = SB_STOPPED;
			goto fail;
		}
		if (rc == CURLE_OK && !k.status)
			curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &k.status);
		if (rc != CURLE_OK || k.status / 100 != 2) {
			char *m = sb_failure(s, "GET", url, rc, k.status, &k.errbody);
			fprintf(stderr, "infergate-bulk submit: downloading %s of %s: %s\n", file_id, s->batch_id, m);
			free(m);
			goto fail;
		}
	}
	k.lines += k.last && k.last != '\n'; /* a last line without its newline */
	if (fsync(k.fd) < 0) {
		fprintf(stderr, "infergate-bulk submit: %s %s: %s\n", what, tmp, strerror(errno));
		end = SB_STOPPED;
		goto fail;
	}
	int fd = k.fd;
	k.fd = -1;
	if (close(fd) < 0 || sb_place(s, tmp, dest) < 0) {
		fprintf(stderr, "infergate-bulk submit: %s %s: %s (the results are in %s)\n", what, dest,
			errno == EEXIST ? "it appeared while downloading; give --force to replace it" : strerror(errno),
			tmp);
		free(tmp); /* left for the user */
		tmp = NULL;
		end = SB_STOPPED;
		goto fail;
	}
	*lines = k.lines;
	end = SB_DONE;
fail:
	if (k.fd >= 0)
		close(k.fd);
	if (end != SB_DONE && tmp)
		unlink(tmp);
	ig_buf_free(&k.errbody);
	curl_free(esc);
	free(path);
	free(url);
	free(tmp);
	return end;
}

/* ----------------------------------------------------------------- the end */

static void sb_summary(struct submit *s, FILE *f, int downloaded)
{
	const char *status = sb_str(s->batch, "status");
	char dur[32];

	ig_report_duration(dur, sizeof(dur), (double)(ig_now_us() - s->start_us) / 1e6);
	fprintf(f, "infergate-bulk submit: batch %s %s\n", s->batch_id, status ? status : "?");
	if (s->file_id)
		fprintf(f, "  input      %s (uploaded as %s)\n", s->input, s->file_id);
	if (sb_str(s->batch, "endpoint"))
		fprintf(f, "  endpoint   %s\n", sb_str(s->batch, "endpoint"));
	fprintf(f, "  requests   %ld total, %ld completed, %ld failed\n", sb_count(s->batch, "total"),
		sb_count(s->batch, "completed"), sb_count(s->batch, "failed"));
	if (downloaded) {
		fprintf(f, "  output     %s (%ld lines)\n", s->output, s->out_lines);
		fprintf(f, "  errors     %s (%ld lines)\n", s->errors, s->err_lines);
	} else {
		fprintf(f, "  output     - (nothing to download)\n");
	}
	json_t *t0 = json_object_get(s->batch, "created_at");
	json_t *t1 = NULL;
	const char *ends[] = {"completed_at", "failed_at", "cancelled_at", "expired_at"};
	for (size_t i = 0; i < 4 && !json_is_integer(t1); i++)
		t1 = json_object_get(s->batch, ends[i]);
	fprintf(f, "  elapsed    %s", dur);
	if (json_is_integer(t0) && json_is_integer(t1) && json_integer_value(t1) >= json_integer_value(t0)) {
		char ran[32];
		ig_report_duration(ran, sizeof(ran), (double)(json_integer_value(t1) - json_integer_value(t0)));
		fprintf(f, " (on the gateway: %s from created to %s)", ran, status ? status : "the end");
	}
	fprintf(f, "\n");
	fflush(f);
}

/* The validation errors of a failed batch, one "line N: message" each. */
static void sb_print_validation(struct submit *s, FILE *f)
{
	json_t *data = json_object_get(json_object_get(s->batch, "errors"), "data");
	size_t i;
	json_t *e;

	fprintf(f, "infergate-bulk submit: batch %s failed validation; none of its lines ran:\n", s->batch_id);
	if (!json_is_array(data) || json_array_size(data) == 0)
		fprintf(f, "  (the gateway gave no reason)\n");
	json_array_foreach(data, i, e) {
		const char *m = sb_str(e, "message"), *code = sb_str(e, "code");
		json_t *line = json_object_get(e, "line");
		if (json_is_integer(line))
			fprintf(f, "  line %lld: %s\n", (long long)json_integer_value(line), m ? m : code ? code : "?");
		else
			fprintf(f, "  %s%s%s\n", code ? code : "", code && m ? ": " : "", m ? m : code ? "" : "?");
	}
}

/* The batch has ended: download what it has, print the summary, and return
 * the exit code. */
static int sb_finish(struct submit *s)
{
	const char *status = sb_str(s->batch, "status");
	int rc;

	if (strcmp(status, "failed") == 0) {
		sb_summary(s, stdout, 0);
		sb_print_validation(s, stderr);
		return BULK_EXIT_USAGE;
	}
	/* completed, or cancelled/expired with the lines that finished; the
	 * errors file first: OUTPUT appearing means both are there */
	enum sb_end end = sb_download(s, sb_str(s->batch, "error_file_id"), s->errors, "--errors", &s->err_lines);
	if (end == SB_DONE)
		end = sb_download(s, sb_str(s->batch, "output_file_id"), s->output, "--output", &s->out_lines);
	if (end != SB_DONE) {
		fprintf(stderr, "infergate-bulk submit: the batch %s is %s on the gateway; to download its results:\n",
			s->batch_id, status);
		sb_print_resume(s, stderr);
		return end == SB_STOPPED ? BULK_EXIT_STOPPED : BULK_EXIT_GATEWAY;
	}
	if (strcmp(status, "completed") == 0 && sb_count(s->batch, "completed") != s->out_lines)
		ig_log_warn("the batch counts %ld completed lines, %s has %ld", sb_count(s->batch, "completed"),
			    s->output, s->out_lines);
	sb_summary(s, stdout, 1);
	if (strcmp(status, "completed") != 0)
		rc = BULK_EXIT_STOPPED;
	else if (s->err_lines > 0 || sb_count(s->batch, "failed") > 0)
		rc = BULK_EXIT_ERRORS;
	else
		rc = BULK_EXIT_OK;
	return rc;
}

static void sb_stopped(struct submit *s)
{
	fprintf(stderr, "infergate-bulk submit: stopped following %s; the batch keeps running on the gateway. "
			"To follow it again and download its results:\n", s->batch_id);
	sb_print_resume(s, stderr);
}

static int sb_run(struct submit *s)
{
	enum sb_end end;

	s->curl = curl_easy_init();
	if (!s->curl)
		abort();
	if (s->api_key) {
		char *h = ig_strdupf("Authorization: Bearer %s", s->api_key);
		s->auth = curl_slist_append(s->auth, h);
		s->json_headers = curl_slist_append(s->json_headers, h);
		free(h);
	}
	s->json_headers = curl_slist_append(s->json_headers, "Content-Type: application/json");
	s->tty = isatty(STDERR_FILENO);
	sb_setup_signals();

	if (s->input) {
		end = sb_upload(s);
		if (end != SB_DONE)
			return end == SB_STOPPED ? BULK_EXIT_STOPPED : BULK_EXIT_GATEWAY;
		if (sb_create(s) != SB_DONE) {
			fprintf(stderr, "infergate-bulk submit: no batch was created (%s is uploaded as %s)\n", s->input,
				s->file_id);
			return BULK_EXIT_GATEWAY;
		}
		if (s->no_wait) {
			printf("%s\n", s->batch_id);
			fflush(stdout);
			fprintf(stderr, "infergate-bulk submit: created %s (%s, %s as %s); to follow it and download its "
					"results:\n", s->batch_id, sb_str(s->batch, "status") ? sb_str(s->batch, "status")
					: "?", s->input, s->file_id);
			sb_print_resume(s, stderr);
			return sb_signals ? BULK_EXIT_STOPPED : BULK_EXIT_OK;
		}
		fprintf(stderr, "infergate-bulk submit: created %s (%s); Ctrl-C stops following, not the batch\n",
			s->batch_id, s->ep_path);
	} else {
		s->batch_id = strdup(s->batch_flag);
		if (s->cancel && sb_cancel(s) != SB_DONE)
			return BULK_EXIT_GATEWAY;
	}
	if (sb_signals) {
		sb_stopped(s);
		return BULK_EXIT_STOPPED;
	}
	end = sb_follow(s);
	if (end == SB_STOPPED) {
		sb_stopped(s);
		return BULK_EXIT_STOPPED;
	}
	if (end == SB_GATEWAY) {
		fprintf(stderr, "infergate-bulk submit: the batch %s may still be running; to follow it again:\n",
			s->batch_id);
		sb_print_resume(s, stderr);
		return BULK_EXIT_GATEWAY;
	}
	return sb_finish(s);
}

int ig_submit_main(int argc, char **argv)
{
	struct submit s;
	char *err = NULL;
	int rc;

	ig_log_set_ident("infergate-bulk submit");
	ig_submit_init(&s);
	s.start_us = ig_now_us();
	rc = ig_submit_flags(&s, argc, argv, &err);
	if (rc != 0) {
		if (rc < 0) {
			fprintf(stderr, "infergate-bulk submit: %s\n", err);
			free(err);
		}
		rc = rc < 0 ? BULK_EXIT_USAGE : 0;
		goto out;
	}
	ig_submit_preflight(&s);
	if (s.n_problems > 0) {
		fprintf(stderr, "infergate-bulk submit: preflight failed, nothing was sent:\n%s", s.problems.data);
		if (s.n_problems > 20)
			fprintf(stderr, "  ... and %ld more problems\n", s.n_problems - 20);
		rc = BULK_EXIT_USAGE;
		goto out;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = sb_run(&s);
	ig_submit_free(&s); /* the handle goes before the global cleanup */
	curl_global_cleanup();
	return rc;
out:
	ig_submit_free(&s);
	return rc;
}
