/* What a run did, for people and for scripts: latency histograms with
 * percentiles in constant memory, error counts by code, and the final
 * summary (terminal text and --summary-json). Not the live progress. */
#include "config.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "bulk.h"

/* Values below 128 us have their own bucket; above, 64 buckets per power of
 * two (the top 7 significant bits), so the error is under 1/64. */
static size_t bucket_of(uint64_t v)
{
	if (v < 2 * IG_HIST_SUB)
		return (size_t)v;
	unsigned msb = 63u - (unsigned)__builtin_clzll(v);
	unsigned shift = msb - 6;
	size_t i = 2 * IG_HIST_SUB + (size_t)(shift - 1) * IG_HIST_SUB + (size_t)((v >> shift) - IG_HIST_SUB);
	const size_t last = IG_HIST_EXP * IG_HIST_SUB - 1;
	return i > last ? last : i;
}

static uint64_t bucket_mid(size_t i)
{
	if (i < 2 * IG_HIST_SUB)
		return i;
	unsigned shift = (unsigned)((i - 2 * IG_HIST_SUB) / IG_HIST_SUB) + 1;
	uint64_t sub = (i - 2 * IG_HIST_SUB) % IG_HIST_SUB + IG_HIST_SUB;
	return (sub << shift) + ((1ull << shift) >> 1);
}

void ig_report_hist_add(struct ig_report_hist *h, uint64_t us)
{
	h->bucket[bucket_of(us)]++;
	h->n++;
	h->sum += (double)us;
	if (us > h->max)
		h->max = us;
}

uint64_t ig_report_hist_quantile(const struct ig_report_hist *h, double q)
{
	if (!h->n)
		return 0;
	if (q >= 1.0)
		return h->max;
	uint64_t rank = (uint64_t)(q * (double)h->n + 0.999999);
	if (rank < 1)
		rank = 1;
	uint64_t seen = 0;
	for (size_t i = 0; i < IG_HIST_EXP * IG_HIST_SUB; i++) {
		seen += h->bucket[i];
		if (seen >= rank) {
			uint64_t v = bucket_mid(i);
			return v > h->max ? h->max : v;
		}
	}
	return h->max;
}

void ig_report_count_error(struct bulk_stats *st, const char *code)
{
	for (size_t i = 0; i < st->n_errs; i++) {
		if (strcmp(st->errs[i].code, code) == 0) {
			st->errs[i].n++;
			return;
		}
	}
	struct ig_errcount *e = realloc(st->errs, (st->n_errs + 1) * sizeof(*e));
	if (!e)
		return;
	st->errs = e;
	snprintf(e[st->n_errs].code, sizeof(e[st->n_errs].code), "%s", code);
	e[st->n_errs++].n = 1;
}

void ig_report_duration(char *out, size_t n, double s)
{
	if (s < 0 || s != s) {
		snprintf(out, n, "?");
		return;
	}
	long t = (long)(s + 0.5);
	if (s < 60)
		snprintf(out, n, "%.1fs", s);
	else if (t < 3600)
		snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(out, n, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
}

static double wall_s(const struct bulk_stats *st)
{
	uint64_t end = st->end_us ? st->end_us : ig_now_us();
	return end > st->start_us ? (double)(end - st->start_us) / 1e6 : 0.0;
}

static json_t *ms(uint64_t us) { return json_real((double)us / 1000.0); }

long ig_report_model_index(const struct bulk_stats *st, const char *name)
{
	for (size_t i = 0; i < st->n_models; i++)
		if (strcmp(st->models[i].name, name) == 0)
			return (long)i;
	return -1;
}

json_t *ig_report_models_json(const struct bulk_stats *st)
{
	if (st->n_models < 2)
		return NULL;
	json_t *o = json_object();
	for (size_t i = 0; i < st->n_models; i++) {
		const struct bulk_model *m = &st->models[i];
		long ok = m->resumed_ok + m->ok, err = m->resumed_err + m->failed;
		json_object_set_new(o, m->name, json_pack("{s:I, s:I, s:I, s:I}", "total", (json_int_t)m->total, "ok",
							  (json_int_t)ok, "errors", (json_int_t)err, "done",
							  (json_int_t)(ok + err)));
	}
	return o;
}

json_t *ig_report_json(const struct bulk_opts *o, const struct bulk_stats *st, int exit_code)
{
	double wall = wall_s(st);
	long done = st->resumed_ok + st->resumed_err + st->ok + st->failed;
	json_t *j = json_object();

	json_object_set_new(j, "complete", json_boolean(done >= st->selected));
	json_object_set_new(j, "exit_code", json_integer(exit_code));
	json_object_set_new(j, "interrupted", json_boolean(st->interrupted));
	json_object_set_new(j, "stopped_reason", st->fatal ? json_string(st->fatal) : json_null());
	json_object_set_new(j, "input", json_string(o->input));
	json_object_set_new(j, "output", json_string(o->output));
	json_object_set_new(j, "errors_file", json_string(o->errors));
	json_object_set_new(j, "url", json_string(o->url));
	json_object_set_new(j, "shard", json_sprintf("%ld/%ld", o->shard_k, o->shard_n));
	json_object_set_new(j, "requests", json_integer(st->requests));
	json_object_set_new(j, "selected", json_integer(st->selected));
	json_object_set_new(j, "resumed_ok", json_integer(st->resumed_ok));
	json_object_set_new(j, "resumed_errors", json_integer(st->resumed_err));
	json_object_set_new(j, "ok", json_integer(st->ok));
	json_object_set_new(j, "errors", json_integer(st->failed));
	json_object_set_new(j, "done", json_integer(done));
	json_object_set_new(j, "remaining", json_integer(st->selected - done));
	json_object_set_new(j, "output_lines", json_integer(st->resumed_ok + st->ok));
	json_object_set_new(j, "error_lines", json_integer(st->resumed_err + st->failed));
	json_object_set_new(j, "attempts", json_integer(st->attempts));
	json_object_set_new(j, "retries", json_integer(st->retries));
	json_object_set_new(j, "wall_time_s", json_real(wall));
	json_object_set_new(j, "concurrency", ig_auto_json(&st->conc));
	json_object_set_new(j, "requests_per_s", json_real(wall > 0 ? (double)(st->ok + st->failed) / wall : 0));
	json_object_set_new(j, "input_tokens", json_integer((json_int_t)st->input_tokens));
	json_object_set_new(j, "output_tokens", json_integer((json_int_t)st->output_tokens));
	json_object_set_new(j, "output_tokens_per_s", json_real(wall > 0 ? (double)st->output_tokens / wall : 0));
	const struct ig_report_hist *l = st->latency;
	json_object_set_new(j, "latency_ms", json_pack("{s:o, s:o, s:o, s:o, s:o, s:I}",
		"p50", ms(ig_report_hist_quantile(l, 0.5)), "p90", ms(ig_report_hist_quantile(l, 0.9)),
		"p99", ms(ig_report_hist_quantile(l, 0.99)), "max", ms(l->max),
		"mean", json_real(l->n ? l->sum / (double)l->n / 1000.0 : 0), "count", (json_int_t)l->n));
	const struct ig_report_hist *t = st->ttft;
	if (o->stream || t->n)
		json_object_set_new(j, "ttft_ms", json_pack("{s:o, s:o, s:o, s:I}",
			"p50", ms(ig_report_hist_quantile(t, 0.5)), "p90", ms(ig_report_hist_quantile(t, 0.9)),
			"p99", ms(ig_report_hist_quantile(t, 0.99)), "count", (json_int_t)t->n));
	else
		json_object_set_new(j, "ttft_ms", json_null());
	json_t *e = json_object();
	for (size_t i = 0; i < st->n_errs; i++)
		json_object_set_new(e, st->errs[i].code, json_integer(st->errs[i].n));
	json_object_set_new(j, "errors_by_code", e);
	json_t *models = ig_report_models_json(st);
	if (models)
		json_object_set_new(j, "models", models);
	return j;
}

/* Writes text to path through a temp file and rename, so a reader never
 * sees half a file. Returns 0 or -1 (errno). */
int ig_report_write_atomic(const char *path, const char *text)
{
	char *tmp = ig_strdupf("%s.tmp.%ld", path, (long)getpid());
	FILE *f = fopen(tmp, "we");
	int ok = f && fputs(text, f) >= 0;
	if (f && fclose(f) != 0)
		ok = 0;
	if (ok && rename(tmp, path) == 0) {
		free(tmp);
		return 0;
	}
	int e = errno;
	unlink(tmp);
	free(tmp);
	errno = e;
	return -1;
}

static void lat_line(FILE *f, const char *what, const struct ig_report_hist *h, int p90)
{
	if (!h->n) {
		fprintf(f, "  %-10s -\n", what);
		return;
	}
	fprintf(f, "  %-10s p50 %.1f ms", what, ig_report_hist_quantile(h, 0.5) / 1000.0);
	if (p90)
		fprintf(f, ", p90 %.1f ms", ig_report_hist_quantile(h, 0.9) / 1000.0);
	fprintf(f, ", p99 %.1f ms, max %.1f ms\n", ig_report_hist_quantile(h, 0.99) / 1000.0, h->max / 1000.0);
}

int ig_report_summary(const struct bulk_opts *o, const struct bulk_stats *st, FILE *f, int exit_code)
{
	double wall = wall_s(st);
	long done = st->resumed_ok + st->resumed_err + st->ok + st->failed;
	char dur[32];
	int rc = 0;

	ig_report_duration(dur, sizeof(dur), wall);
	fprintf(f, "infergate-bulk: %s\n", done >= st->selected ? "complete"
			: st->interrupted ? "stopped by a signal (resume with --resume)"
			: "stopped early (resume with --resume)");
	if (st->fatal)
		fprintf(f, "  reason     %s\n", st->fatal);
	fprintf(f, "  lines      %ld selected (shard %ld/%ld of %ld), %ld done, %ld remaining\n",
		st->selected, o->shard_k, o->shard_n, st->requests, done, st->selected - done);
	fprintf(f, "  this run   %ld ok, %ld errors, %ld attempts, %ld retries",
		st->ok, st->failed, st->attempts, st->retries);
	if (st->resumed_ok || st->resumed_err)
		fprintf(f, " (resumed: %ld ok, %ld errors)", st->resumed_ok, st->resumed_err);
	fprintf(f, "\n  wall time  %s, %.1f req/s\n", dur, wall > 0 ? (st->ok + st->failed) / wall : 0.0);
	fprintf(f, "  tokens     %llu in, %llu out, %.1f out tok/s\n",
		(unsigned long long)st->input_tokens, (unsigned long long)st->output_tokens,
		wall > 0 ? (double)st->output_tokens / wall : 0.0);
	if (st->conc.on)
		fprintf(f, "  in flight  auto: %ld at the end (%s), %ld..%ld, mean %.0f\n", st->conc.limit, st->conc.why,
			st->conc.min_seen, st->conc.max_seen, ig_auto_mean(&st->conc));
	lat_line(f, "latency", st->latency, 1);
	if (o->stream)
		lat_line(f, "ttft", st->ttft, 0);
	if (st->n_errs) {
		fprintf(f, "  errors    ");
		for (size_t i = 0; i < st->n_errs; i++)
			fprintf(f, " %s %ld%s", st->errs[i].code, st->errs[i].n, i + 1 < st->n_errs ? "," : "");
		fprintf(f, "\n");
	}
	for (size_t i = 0; i < st->n_models && st->n_models > 1; i++) {
		const struct bulk_model *m = &st->models[i];
		fprintf(f, "  %-10s %s: %ld ok, %ld errors (of %ld)\n", i ? "" : "by model", m->name,
			m->resumed_ok + m->ok, m->resumed_err + m->failed, m->total);
	}
	fprintf(f, "  output     %s (%ld lines)\n", o->output, st->resumed_ok + st->ok);
	fprintf(f, "  errors to  %s (%ld lines)\n", o->errors, st->resumed_err + st->failed);
	fflush(f);

	if (o->summary_json) {
		json_t *j = ig_report_json(o, st, exit_code);
		char *s = json_dumps(j, JSON_INDENT(2));
		json_decref(j);
		char *text = ig_strdupf("%s\n", s ? s : "{}");
		free(s);
		if (ig_report_write_atomic(o->summary_json, text) < 0) {
			ig_log_error("--summary-json %s: %s", o->summary_json, strerror(errno));
			rc = -1;
		}
		free(text);
	}
	return rc;
}
