/* Unit tests for src/bulk/report.c: latency quantiles from the histograms,
 * per-model counts only when a run has several models, and the summary
 * people read.
 * Moved from tests/unit/bulk/test_bulk.c unchanged; the bulk client's .c
 * files are included, as there, so static functions can be tested. */
#include "config.h"
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/batchfile/corpus.c"
#include "../../../src/batchfile/idset.c"
#include "../../../src/batchfile/journal.c"
#include "../../../src/bulk/stream.c"
#include "../../../src/bulk/report.c"
#include "../../../src/bulk/progress.c"
#include "../../../src/bulk/generate.c"
#include "../../../src/bulk/scheduler.c"
#include "../../../src/bulk/autoconc.c"
#include "../../../src/bulk/merge.c"
#include "../../../src/bulk/submit.c"
#include "../../../src/bulk/submit_flags.c"
#define main bulk_main
#include "../../../src/bulk/main.c"
#include "../check_main.h"
#undef main

START_TEST(hist_quantiles)
{
	struct ig_report_hist *h = calloc(1, sizeof(*h));
	ck_assert_uint_eq(ig_report_hist_quantile(h, 0.5), 0);
	for (uint64_t v = 1; v <= 100000; v++)
		ig_report_hist_add(h, v);
	double q[] = {0.5, 0.9, 0.99};
	for (int i = 0; i < 3; i++) {
		double want = q[i] * 100000, got = (double)ig_report_hist_quantile(h, q[i]);
		ck_assert_msg(got > want * 0.98 && got < want * 1.02, "q%.2f: %f vs %f", q[i], got, want);
	}
	ck_assert_uint_eq(ig_report_hist_quantile(h, 1.0), 100000);
	ig_report_hist_add(h, 1ull << 62); /* absurd values land in the last bucket */
	ck_assert_uint_eq(h->max, 1ull << 62);
	for (uint64_t v = 0; v < 5000000; v += 997)
		ck_assert_uint_le(bucket_of(v), bucket_of(v + 1));
	free(h);
}
END_TEST

/* Per-model counts: none with one model (the summary is unchanged), each
 * model's total, ok, errors and done with two, resumed lines included. */
START_TEST(models_are_counted_apart_only_when_there_are_several)
{
	struct bulk_model m[2] = {{"a", 10, 3, 1, 4, 2, 0, 0}, {"b", 5, 0, 0, 5, 0, 0, 0}};
	struct bulk_stats st = {.models = m, .n_models = 1};
	ck_assert_ptr_null(ig_report_models_json(&st));
	st.n_models = 2;
	ck_assert_int_eq(ig_report_model_index(&st, "b"), 1);
	ck_assert_int_eq(ig_report_model_index(&st, "c"), -1);
	json_t *j = ig_report_models_json(&st);
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	ck_assert_str_eq(s, "{\"a\":{\"done\":10,\"errors\":3,\"ok\":7,\"total\":10},"
			    "\"b\":{\"done\":5,\"errors\":0,\"ok\":5,\"total\":5}}");
	free(s);
	json_decref(j);
	/* The preflight's tally: done lines count for their model, not as to send. */
	struct preflight pf;
	memset(&pf, 0, sizeof(pf));
	note_model(&pf, "a", 1, 0);
	note_model(&pf, "b", 2, 1);
	note_model(&pf, "a", 3, 2);
	note_model(&pf, "a", 4, 0);
	ck_assert_uint_eq(pf.n_models, 2);
	ck_assert_int_eq(pf.models[0].lines, 2);
	ck_assert_int_eq(pf.models[0].first_line, 1);
	ck_assert_int_eq(pf.models[0].resumed_err, 1);
	ck_assert_int_eq(pf.models[1].lines, 0);
	ck_assert_int_eq(pf.models[1].resumed_ok, 1);
	for (size_t i = 0; i < pf.n_models; i++)
		free(pf.models[i].name);
	free(pf.models);
}
END_TEST

/* The summary for people: one "by model" line per model with several, the
 * same text as before with one. */
START_TEST(summary_shows_models_only_when_several)
{
	struct bulk_model m[2] = {{"a", 10, 3, 1, 4, 2, 0, 0}, {"b", 5, 0, 0, 5, 0, 0, 0}};
	struct ig_report_hist *h = calloc(2, sizeof(*h));
	struct bulk_stats st = {.requests = 15, .selected = 15, .resumed_ok = 3, .resumed_err = 1, .ok = 9,
				.failed = 2, .latency = &h[0], .ttft = &h[1], .models = m, .n_models = 1};
	struct bulk_opts o = {.output = "out.jsonl", .errors = "out.errors.jsonl", .shard_n = 1};
	char *text;
	size_t len;
	FILE *f = open_memstream(&text, &len);
	ig_report_summary(&o, &st, f, 1);
	fclose(f);
	ck_assert_msg(!strstr(text, "by model"), "%s", text);
	free(text);
	st.n_models = 2;
	f = open_memstream(&text, &len);
	ig_report_summary(&o, &st, f, 1);
	fclose(f);
	ck_assert_msg(strstr(text, "  by model   a: 7 ok, 3 errors (of 10)\n             b: 5 ok, 0 errors (of 5)\n"
				   "  output "), "%s", text);
	free(text);
	free(h);
}
END_TEST

IG_CHECK_MAIN("report", hist_quantiles, models_are_counted_apart_only_when_there_are_several, summary_shows_models_only_when_several)
