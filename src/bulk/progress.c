/* Live progress: one redrawn line on a terminal (stderr), a plain line every
 * few seconds otherwise, and --progress-file rewritten atomically each
 * second. Rates are over the last ten seconds, so the ETA follows the
 * server's current speed rather than the run's average. */
#include "config.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "bulk.h"

void ig_progress_init(struct ig_progress *p, const char *file, long interval_s)
{
	memset(p, 0, sizeof(*p));
	p->tty = isatty(STDERR_FILENO);
	p->file = file;
	p->interval_s = interval_s > 0 ? interval_s : 5;
}

static long done_of(const struct bulk_stats *st)
{
	return st->resumed_ok + st->resumed_err + st->ok + st->failed;
}

static void sample(struct ig_progress *p, const struct bulk_stats *st, uint64_t now)
{
	if (p->n_samples && now - p->last_sample_us < 1000000)
		return;
	p->sample_us[p->next_sample] = now;
	p->sample_done[p->next_sample] = st->ok + st->failed;
	p->sample_tok[p->next_sample] = st->output_tokens;
	p->next_sample = (p->next_sample + 1) % IG_PROGRESS_WINDOW;
	if (p->n_samples < IG_PROGRESS_WINDOW)
		p->n_samples++;
	p->last_sample_us = now;
}

/* Requests and output tokens per second over the window (or the run). */
static void rates(const struct ig_progress *p, const struct bulk_stats *st, uint64_t now,
		  double *rps, double *tps)
{
	uint64_t t0 = st->start_us;
	long d0 = 0;
	uint64_t k0 = 0;
	if (p->n_samples == IG_PROGRESS_WINDOW) {
		unsigned oldest = p->next_sample; /* the ring is full: next is oldest */
		t0 = p->sample_us[oldest];
		d0 = p->sample_done[oldest];
		k0 = p->sample_tok[oldest];
	}
	double dt = now > t0 ? (double)(now - t0) / 1e6 : 0;
	*rps = dt > 0.01 ? (double)(st->ok + st->failed - d0) / dt : 0;
	*tps = dt > 0.01 ? (double)(st->output_tokens - k0) / dt : 0;
}

json_t *ig_progress_json(struct ig_progress *p, const struct bulk_stats *st, const char *state)
{
	uint64_t now = ig_now_us();
	double rps, tps;
	long done = done_of(st);
	rates(p, st, now, &rps, &tps);
	long left = st->selected - done;
	json_t *eta = left <= 0 ? json_integer(0) : rps > 0 ? json_real(left / rps) : json_null();
	json_t *j = json_pack("{s:s, s:I, s:I, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:o, s:I}",
			 "state", state,
			 "done", (json_int_t)done,
			 "total", (json_int_t)st->selected,
			 "percent", st->selected ? 100.0 * (double)done / (double)st->selected : 100.0,
			 "ok", (json_int_t)(st->resumed_ok + st->ok),
			 "errors", (json_int_t)(st->resumed_err + st->failed),
			 "resumed", (json_int_t)(st->resumed_ok + st->resumed_err),
			 "in_flight", (json_int_t)st->in_flight,
			 "waiting_retry", (json_int_t)st->waiting,
			 "retries", (json_int_t)st->retries,
			 "requests_per_s", rps,
			 "output_tokens_per_s", tps,
			 "elapsed_s", (double)(now - st->start_us) / 1e6,
			 "eta_s", eta,
			 "updated_at", (json_int_t)ig_wall_s());
	json_object_set_new(j, "output_tokens", json_integer((json_int_t)st->output_tokens));
	json_object_set_new(j, "concurrency", json_integer(st->conc.limit));
	json_object_set_new(j, "concurrency_state", json_string(ig_auto_state_name(st->conc.state)));
	json_object_set_new(j, "concurrency_why", json_string(st->conc.why));
	json_t *models = ig_report_models_json(st);
	if (models)
		json_object_set_new(j, "models", models);
	return j;
}

static void format_line(struct ig_progress *p, const struct bulk_stats *st, char *out, size_t n)
{
	uint64_t now = ig_now_us();
	double rps, tps;
	long done = done_of(st);
	char eta[32];
	rates(p, st, now, &rps, &tps);
	long left = st->selected - done;
	if (left <= 0)
		snprintf(eta, sizeof(eta), "0s");
	else if (rps > 0)
		ig_report_duration(eta, sizeof(eta), left / rps);
	else
		snprintf(eta, sizeof(eta), "?");
	int k = snprintf(out, n, "%ld/%ld %.1f%% | %.1f req/s | %.0f tok/s | in flight %ld", done, st->selected,
			 st->selected ? 100.0 * done / st->selected : 100.0, rps, tps, st->in_flight);
	if (k > 0 && (size_t)k < n && st->conc.on)
		k += snprintf(out + k, n - (size_t)k, " of %ld (%s)", st->conc.limit, st->conc.why);
	if (k > 0 && (size_t)k < n)
		k += snprintf(out + k, n - (size_t)k, " | errors %ld", st->resumed_err + st->failed);
	if (k > 0 && (size_t)k < n && st->waiting)
		k += snprintf(out + k, n - (size_t)k, " | retrying %ld", st->waiting);
	if (k > 0 && (size_t)k < n)
		snprintf(out + k, n - (size_t)k, " | ETA %s%s", eta, st->stopping ? " | stopping" : "");
}

static void write_file(struct ig_progress *p, const struct bulk_stats *st, const char *state)
{
	json_t *j = ig_progress_json(p, st, state);
	char *s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	char *text = ig_strdupf("%s\n", s ? s : "{}");
	free(s);
	if (ig_report_write_atomic(p->file, text) < 0)
		ig_log_warn("--progress-file %s: %s", p->file, strerror(errno));
	free(text);
}

void ig_progress_tick(struct ig_progress *p, const struct bulk_stats *st, int force)
{
	uint64_t now = ig_now_us();
	char line[384];

	sample(p, st, now);
	if (p->tty && (force || now - p->last_draw_us >= 250000)) {
		format_line(p, st, line, sizeof(line));
		fprintf(stderr, "\r\033[K%s", line);
		fflush(stderr);
		p->drawn = 1;
		p->last_draw_us = now;
	} else if (!p->tty && (force || now - p->last_plain_us >= (uint64_t)p->interval_s * 1000000u)) {
		if (p->last_plain_us || force) {
			format_line(p, st, line, sizeof(line));
			fprintf(stderr, "progress: %s\n", line);
			fflush(stderr);
		}
		p->last_plain_us = now;
	}
	if (p->file && (force || now - p->last_file_us >= 1000000)) {
		write_file(p, st, st->stopping ? "stopping" : "running");
		p->last_file_us = now;
	}
}

void ig_progress_finish(struct ig_progress *p, const struct bulk_stats *st)
{
	char line[384];
	long done = done_of(st);
	if (p->tty) {
		format_line(p, st, line, sizeof(line));
		fprintf(stderr, "\r\033[K%s\n", line);
		fflush(stderr);
	}
	if (p->file)
		write_file(p, st, done >= st->selected ? "finished" : "stopped");
}
