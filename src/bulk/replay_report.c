/* What infergate-bulk replay measured (replay_report.h): the per-request line, the
 * summary (percentiles of TTFT, time per output token and end-to-end,
 * goodput under the SLOs, late sends, the cached share against the trace's
 * reuse bound), the per-second CSV, its plot through gnuplot, and the live
 * progress line. Every time is reported in simulated time: wall clock x
 * --time-scale (1 against real servers). Not for sending (replay_run.c). */
#include "config.h"
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "infergate/util.h"
#include "replay_report.h"

double ig_replay_tpot_ms(const struct ig_replay *r, const struct ig_replay_rec *x)
{
	if (!x->ok || !x->first_us || x->completion_tokens < 2 || x->end_us < x->first_us)
		return -1;
	return ig_replay_ms(r, x->end_us - x->first_us) / (double)(x->completion_tokens - 1);
}

bool ig_replay_slo_met(const struct ig_replay *r, const struct ig_replay_rec *x)
{
	if (!x->ok || !x->first_us)
		return false;
	double tpot = ig_replay_tpot_ms(r, x);
	return ig_replay_ms(r, x->first_us - x->sent_us) <= r->o->slo_ttft_ms && tpot <= r->o->slo_tpot_ms;
}

static json_t *ms_or_null(double v)
{
	return v < 0 ? json_null() : json_real(round(v * 1000.0) / 1000.0);
}

static json_t *count_or_null(long v)
{
	return v < 0 ? json_null() : json_integer(v);
}

json_t *ig_replay_line_json(const struct ig_replay *r, size_t i, const char *backend, const char *error)
{
	const struct ig_replay_rec *x = &r->rec[i];
	const struct ig_trace_req *q = &r->t->v[i];
	double ttft = x->first_us && x->ok ? ig_replay_ms(r, x->first_us - x->sent_us) : -1;
	double e2e = x->end_us && x->ok ? ig_replay_ms(r, x->end_us - x->sent_us) : -1;
	return json_pack("{s:I, s:I, s:f, s:f, s:f, s:I, s:s?, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:s?}",
			 "index", (json_int_t)i, "line", (json_int_t)q->line,
			 "scheduled_ms", ig_replay_ms(r, x->due_us), "sent_ms", ig_replay_ms(r, x->sent_us),
			 "late_ms", x->sent_us > x->due_us ? ig_replay_ms(r, x->sent_us - x->due_us) : 0.0,
			 "status", (json_int_t)x->status, "backend", backend,
			 "ttft_ms", ms_or_null(ttft), "tpot_ms", ms_or_null(ig_replay_tpot_ms(r, x)),
			 "e2e_ms", ms_or_null(e2e), "prompt_tokens", count_or_null(x->prompt_tokens),
			 "completion_tokens", count_or_null(x->completion_tokens),
			 "cached_tokens", count_or_null(x->cached_tokens),
			 "input_length", count_or_null(q->input_len), "output_length", count_or_null(q->output_len),
			 "slo_met", ig_replay_slo_met(r, x), "error", error);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest rank on a sorted array. */
static double pct(const double *v, size_t n, double p)
{
	if (n == 0)
		return 0;
	size_t k = (size_t)ceil(p / 100.0 * (double)n);
	return v[k ? k - 1 : 0];
}

static json_t *dist(double *v, size_t n)
{
	if (n == 0)
		return json_pack("{s:n, s:n, s:n, s:n}", "mean", "p50", "p90", "p99");
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += v[i];
	qsort(v, n, sizeof(*v), cmp_double);
	return json_pack("{s:o, s:o, s:o, s:o}", "mean", ms_or_null(sum / (double)n), "p50", ms_or_null(pct(v, n, 50)),
			 "p90", ms_or_null(pct(v, n, 90)), "p99", ms_or_null(pct(v, n, 99)));
}

json_t *ig_replay_summary_json(const struct ig_replay *r)
{
	size_t n = r->t->n, nt = 0, np = 0, ne = 0, nl = 0;
	double *ttft = calloc(n + 1, sizeof(double)), *tpot = calloc(n + 1, sizeof(double));
	double *e2e = calloc(n + 1, sizeof(double)), *late = calloc(n + 1, sizeof(double));
	if (!ttft || !tpot || !e2e || !late)
		abort();
	long completed = 0, met = 0;
	uint64_t prompt = 0, out = 0, cached = 0;
	for (size_t i = 0; i < n; i++) {
		const struct ig_replay_rec *x = &r->rec[i];
		if (i < (size_t)r->sent) /* sent in order */
			late[nl++] = x->sent_us > x->due_us ? ig_replay_ms(r, x->sent_us - x->due_us) : 0;
		if (!x->ok)
			continue;
		completed++;
		if (x->first_us)
			ttft[nt++] = ig_replay_ms(r, x->first_us - x->sent_us);
		double t = ig_replay_tpot_ms(r, x);
		if (t >= 0)
			tpot[np++] = t;
		e2e[ne++] = ig_replay_ms(r, x->end_us - x->sent_us);
		met += ig_replay_slo_met(r, x);
		prompt += (uint64_t)(x->prompt_tokens > 0 ? x->prompt_tokens : 0);
		out += (uint64_t)(x->completion_tokens > 0 ? x->completion_tokens : 0);
		cached += (uint64_t)(x->cached_tokens > 0 ? x->cached_tokens : 0);
	}
	double dur_s = ig_replay_ms(r, r->end_us) / 1000.0;
	double bound = ig_trace_reuse_bound(r->t);
	qsort(late, nl, sizeof(*late), cmp_double);
	json_t *j = json_pack(
		"{s:I, s:I, s:I, s:I, s:I, s:{s:f, s:f, s:f}, s:f, s:f, s:f, s:f, s:f, s:o, s:o, s:o,"
		" s:I, s:I, s:I, s:o, s:o, s:o, s:{s:f, s:f, s:I, s:f, s:f}}",
		"requests", (json_int_t)n, "sent", (json_int_t)r->sent, "completed", (json_int_t)completed,
		"errors", (json_int_t)r->errors, "late", (json_int_t)r->late,
		"late_ms", "p50", pct(late, nl, 50), "p99", pct(late, nl, 99), "max", nl ? late[nl - 1] : 0.0,
		"speed", r->o->speed, "time_scale", r->o->time_scale, "duration_s", dur_s,
		"requests_per_s", dur_s > 0 ? (double)completed / dur_s : 0.0,
		"output_tokens_per_s", dur_s > 0 ? (double)out / dur_s : 0.0,
		"ttft_ms", dist(ttft, nt), "tpot_ms", dist(tpot, np), "e2e_ms", dist(e2e, ne),
		"prompt_tokens", (json_int_t)prompt, "completion_tokens", (json_int_t)out, "cached_tokens", (json_int_t)cached,
		"cached_share", prompt ? json_real((double)cached / (double)prompt) : json_null(),
		"reuse_bound", bound < 0 ? json_null() : json_real(bound),
		"reuse_bound_blocks", bound < 0 || !r->t->blocks ? json_null()
					: json_real((double)r->t->blocks_seen / (double)r->t->blocks),
		"goodput", "slo_ttft_ms", r->o->slo_ttft_ms, "slo_tpot_ms", r->o->slo_tpot_ms, "met", (json_int_t)met,
		"share", n ? (double)met / (double)n : 0.0, "per_s", dur_s > 0 ? (double)met / dur_s : 0.0);
	free(ttft);
	free(tpot);
	free(e2e);
	free(late);
	if (!j)
		abort();
	return j;
}

static double num(const json_t *j, const char *a, const char *b)
{
	const json_t *v = b ? json_object_get(json_object_get(j, a), b) : json_object_get(j, a);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

void ig_replay_print_summary(const struct ig_replay *r, const json_t *s, FILE *f)
{
	char dur[32];
	ig_report_duration(dur, sizeof(dur), num(s, "duration_s", NULL));
	fprintf(f, "infergate-bulk replay: %s\n", r->o->input);
	fprintf(f, "  requests     %.0f in the window, %.0f sent, %.0f completed, %.0f errors\n", num(s, "requests", NULL),
		num(s, "sent", NULL), num(s, "completed", NULL), num(s, "errors", NULL));
	fprintf(f, "  time         %s%s (speed %gx); %.2f requests/s, %.0f output tokens/s\n", dur,
		r->o->time_scale != 1 ? " simulated" : "", r->o->speed, num(s, "requests_per_s", NULL),
		num(s, "output_tokens_per_s", NULL));
	if (r->stopping)
		fprintf(f, "  stopped      %s: %ld requests not sent, %ld in flight dropped (not in the output)\n",
			r->fatal ? "by a write failure" : "by a signal", (long)r->t->n - r->sent, r->sent - r->ended);
	fprintf(f, "  late sends   %.0f (p99 %.1f ms, max %.1f ms behind the schedule)\n", num(s, "late", NULL),
		num(s, "late_ms", "p99"), num(s, "late_ms", "max"));
	static const char *const m[] = {"ttft_ms", "tpot_ms", "e2e_ms"};
	static const char *const label[] = {"TTFT", "TPOT", "end-to-end"};
	for (int k = 0; k < 3; k++)
		fprintf(f, "  %-12s mean %.1f  p50 %.1f  p90 %.1f  p99 %.1f ms\n", label[k], num(s, m[k], "mean"),
			num(s, m[k], "p50"), num(s, m[k], "p90"), num(s, m[k], "p99"));
	fprintf(f, "  tokens       %.0f prompt (%.1f%% cached), %.0f output\n", num(s, "prompt_tokens", NULL),
		100.0 * num(s, "cached_share", NULL), num(s, "completion_tokens", NULL));
	if (json_is_number(json_object_get(s, "reuse_bound")))
		fprintf(f, "  reuse bound  %.1f%% of prompt tokens are in blocks seen before in the window (cached: "
			"%.0f%% of that)\n", 100.0 * num(s, "reuse_bound", NULL),
			100.0 * num(s, "cached_share", NULL) / num(s, "reuse_bound", NULL));
	fprintf(f, "  goodput      %.0f requests (%.1f%%, %.2f/s) met TTFT <= %g ms and TPOT <= %g ms\n",
		num(s, "goodput", "met"), 100.0 * num(s, "goodput", "share"), num(s, "goodput", "per_s"),
		r->o->slo_ttft_ms, r->o->slo_tpot_ms);
	fflush(f);
}

/* One row per second of reported time: arrivals (sends in it), in flight at
 * its end, the requests that ended in it (answered or failed), the TTFT p90 of the requests sent in it, and
 * output tokens per second (each answer's tokens spread evenly from its
 * first token to its end). */
int ig_replay_write_csv(const struct ig_replay *r, const char *path)
{
	double end_s = ig_replay_ms(r, r->end_us) / 1000.0;
	double last_sent = 0;
	for (size_t i = 0; i < r->t->n; i++)
		if (r->rec[i].sent_us && ig_replay_ms(r, r->rec[i].sent_us) / 1000.0 > last_sent)
			last_sent = ig_replay_ms(r, r->rec[i].sent_us) / 1000.0;
	size_t secs = (size_t)ceil(fmax(end_s, last_sent)) + 1;
	long *arr = calloc(secs, sizeof(long)), *done = calloc(secs, sizeof(long)), *delta = calloc(secs + 1, sizeof(long));
	double *tok = calloc(secs + 1, sizeof(double));
	size_t *nttft = calloc(secs, sizeof(size_t));
	if (!arr || !done || !delta || !tok || !nttft)
		abort();
	for (size_t i = 0; i < r->t->n; i++) {
		const struct ig_replay_rec *x = &r->rec[i];
		if (i >= (size_t)r->sent) /* sent in order: not sent */
			continue;
		size_t a = (size_t)(ig_replay_ms(r, x->sent_us) / 1000.0);
		arr[a < secs ? a : secs - 1]++;
		delta[a < secs ? a : secs - 1]++;
		if (x->end_us) {
			size_t b = (size_t)(ig_replay_ms(r, x->end_us) / 1000.0);
			b = b < secs ? b : secs - 1;
			done[b]++;
			delta[b]--; /* ended in second b: not in flight at its end */
		}
		if (x->ok && x->first_us && x->completion_tokens > 0) {
			double t0 = ig_replay_ms(r, x->first_us) / 1000.0, t1 = ig_replay_ms(r, x->end_us) / 1000.0;
			double per = (double)x->completion_tokens / fmax(t1 - t0, 1e-9);
			for (size_t s = (size_t)t0; s < secs && (double)s < t1; s++) {
				double lo = fmax(t0, (double)s), hi = fmin(t1, (double)s + 1);
				tok[s] += per * (hi - lo);
			}
			if (t1 - t0 < 1e-9)
				tok[(size_t)t0 < secs ? (size_t)t0 : secs - 1] += (double)x->completion_tokens;
			nttft[a < secs ? a : secs - 1]++;
		}
	}
	/* the TTFTs of each second's arrivals, for their p90 */
	size_t *at = calloc(secs + 1, sizeof(size_t));
	double *tt = calloc(r->t->n + 1, sizeof(double));
	if (!at || !tt)
		abort();
	for (size_t s = 0; s < secs; s++)
		at[s + 1] = at[s] + nttft[s];
	memset(nttft, 0, secs * sizeof(size_t));
	for (size_t i = 0; i < r->t->n; i++) {
		const struct ig_replay_rec *x = &r->rec[i];
		if (!(x->ok && x->first_us && x->completion_tokens > 0))
			continue;
		size_t a = (size_t)(ig_replay_ms(r, x->sent_us) / 1000.0);
		a = a < secs ? a : secs - 1;
		tt[at[a] + nttft[a]++] = ig_replay_ms(r, x->first_us - x->sent_us);
	}
	char *tmp = ig_strdupf("%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	int rc = -1;
	if (f) {
		fprintf(f, "second,arrivals,in_flight,ended,ttft_p90_ms,output_tokens_per_s\n");
		long inflight = 0;
		for (size_t s = 0; s < secs; s++) {
			inflight += delta[s];
			size_t k = at[s + 1] - at[s];
			qsort(tt + at[s], k, sizeof(double), cmp_double);
			if (k)
				fprintf(f, "%zu,%ld,%ld,%ld,%.1f,%.1f\n", s, arr[s], inflight, done[s], pct(tt + at[s], k, 90),
					tok[s]);
			else
				fprintf(f, "%zu,%ld,%ld,%ld,,%.1f\n", s, arr[s], inflight, done[s], tok[s]);
		}
		int bad = ferror(f);
		if (fclose(f) == 0 && !bad && rename(tmp, path) == 0)
			rc = 0;
		else
			unlink(tmp);
	}
	int saved = errno;
	free(tmp);
	free(arr);
	free(done);
	free(delta);
	free(tok);
	free(nttft);
	free(at);
	free(tt);
	errno = saved;
	return rc;
}

/* Single quotes for gnuplot's strings: a file name with one is refused by
 * the preflight, so none arrives here. */
int ig_replay_plot(const struct ig_replay *r, const char *csv, const char *path, char **err)
{
	char title[512];
	snprintf(title, sizeof(title), "%s, speed %gx%s", r->o->input, r->o->speed,
		 r->o->time_scale != 1 ? ", simulated time" : "");
	for (char *p = title; *p; p++)
		if (*p == '\'' || *p == '"' || *p == '\\')
			*p = '_';
	FILE *g = popen("gnuplot 2>&1", "w");
	if (!g) {
		*err = ig_strdupf("--plot: gnuplot: %s", strerror(errno));
		return -1;
	}
	fprintf(g,
		"set terminal pngcairo size 1100,800 font 'sans,10'\n"
		"set output '%s'\n"
		"set datafile separator ','\n"
		"set key autotitle columnhead outside right top\n"
		"set multiplot layout 3,1 title '%s'\n"
		"set grid\n"
		"set xlabel 'seconds'\n"
		"set ylabel 'requests'\n"
		"plot '%s' using 1:2 with steps title 'arrivals per second', '' using 1:3 with lines title 'in flight'\n"
		"set ylabel 'TTFT p90, ms'\n"
		"plot '%s' using 1:5 with linespoints pt 7 ps 0.3 title 'TTFT p90 of the arrivals of each second'\n"
		"set ylabel 'tokens/s'\n"
		"plot '%s' using 1:6 with lines title 'output tokens per second'\n"
		"unset multiplot\n",
		path, title, csv, csv, csv);
	int st = pclose(g);
	if (st != 0) {
		*err = ig_strdupf("--plot %s: gnuplot failed (exit %d)", path, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
		return -1;
	}
	return 0;
}

void ig_replay_progress(struct ig_replay *r, uint64_t now_us, int force)
{
	uint64_t every = r->tty ? 250000 : (uint64_t)r->o->progress_interval_s * 1000000;
	if (!force && now_us - r->last_draw_us < every)
		return;
	r->last_draw_us = now_us;
	unsigned k = r->n_recent < 256 ? r->n_recent : 256;
	double v[256];
	memcpy(v, r->recent_ttft, k * sizeof(double));
	qsort(v, k, sizeof(double), cmp_double);
	char at[32], of[32];
	ig_report_duration(at, sizeof(at), ig_replay_ms(r, now_us) / 1000.0 * r->o->speed);
	ig_report_duration(of, sizeof(of), (double)r->t->last_ms / 1000.0);
	char line[256];
	snprintf(line, sizeof(line), "replay %ld/%zu sent, %ld in flight, %ld done, %ld errors, %ld late, trace %s of %s, "
		 "TTFT p90 %.0f ms", r->sent, r->t->n, r->in_flight, r->ended - r->errors, r->errors, r->late, at, of,
		 k ? pct(v, k, 90) : 0.0);
	if (r->tty) {
		fprintf(stderr, "\r\033[K%s", line);
		r->drawn = 1;
	} else {
		fprintf(stderr, "infergate-bulk: %s\n", line);
	}
	fflush(stderr);
}
