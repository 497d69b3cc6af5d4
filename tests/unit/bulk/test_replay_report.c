/* Unit tests for src/bulk/replay_report.c: what a replay measured, from
 * records made by hand: the per-request line, the summary's counts,
 * percentiles, cached share and goodput (in simulated time), and the
 * per-second CSV. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/bulk/stream.c"
#include "../../../src/bulk/report.c"
#include "../../../src/bulk/autoconc.c"
#include "../../../src/bulk/replay_report.c"
#include "../check_main.h"

/* Three requests of a Mooncake trace at 0, 1 and 2 s (wall clock: the time
 * scale is 10, so 0, 0.1 and 0.2 s): two answered, one refused. */
static struct ig_trace_req reqs[3] = {
	{.line = 1, .at_ms = 0, .input_len = 1000, .output_len = 11},
	{.line = 2, .at_ms = 1000, .input_len = 1000, .output_len = 3},
	{.line = 4, .at_ms = 2000, .input_len = 600, .output_len = 5},
};
static struct replay_opts opts = {.input = "t.jsonl", .speed = 1, .time_scale = 10, .slo_ttft_ms = 500,
				  .slo_tpot_ms = 100};

static void setup(struct ig_replay *r, struct ig_trace *t, struct ig_replay_rec *rec)
{
	memset(t, 0, sizeof(*t));
	t->kind = IG_TRACE_MOONCAKE;
	t->v = reqs;
	t->n = 3;
	t->last_ms = 2000;
	t->tokens = 2600;
	t->tokens_seen = 1000;
	t->blocks = 5;
	t->blocks_seen = 2;
	memset(r, 0, sizeof(*r));
	r->o = &opts;
	r->t = t;
	r->rec = rec;
	/* 1: sent on time, first token 30 ms (wall) later = 300 ms, 11 tokens
	 * over 100 ms more = 1,000 ms simulated: 100 ms a token after the first */
	rec[0] = (struct ig_replay_rec){.due_us = 0, .sent_us = 0, .first_us = 30000, .end_us = 130000, .status = 200,
					.prompt_tokens = 1000, .completion_tokens = 11, .cached_tokens = 0, .ok = true};
	/* 2: sent 20 ms late (200 ms simulated), first token after 80 ms = 800 ms: misses the TTFT SLO */
	rec[1] = (struct ig_replay_rec){.due_us = 100000, .sent_us = 120000, .first_us = 200000, .end_us = 210000,
					.status = 200, .prompt_tokens = 1000, .completion_tokens = 3, .cached_tokens = 960,
					.ok = true};
	rec[2] = (struct ig_replay_rec){.due_us = 200000, .sent_us = 200000, .end_us = 201000, .status = 429,
					.prompt_tokens = -1, .completion_tokens = -1, .cached_tokens = -1};
	r->sent = 3;
	r->ended = 3;
	r->errors = 1;
	r->late = 1;
	r->end_us = 210000;
}

START_TEST(a_line_tells_one_request_in_simulated_time)
{
	struct ig_replay r;
	struct ig_trace t;
	struct ig_replay_rec rec[3];
	setup(&r, &t, rec);
	json_t *j = ig_replay_line_json(&r, 1, "http://b:1", NULL);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "line")), 2);
	ck_assert_double_eq_tol(json_real_value(json_object_get(j, "scheduled_ms")), 1000, 1e-6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(j, "late_ms")), 200, 1e-6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(j, "ttft_ms")), 800, 1e-6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(j, "tpot_ms")), 50, 1e-6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(j, "e2e_ms")), 900, 1e-6);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "cached_tokens")), 960);
	ck_assert_str_eq(json_string_value(json_object_get(j, "backend")), "http://b:1");
	ck_assert(json_is_false(json_object_get(j, "slo_met")));
	ck_assert(json_is_null(json_object_get(j, "error")));
	json_decref(j);

	j = ig_replay_line_json(&r, 0, NULL, NULL);
	ck_assert(json_is_true(json_object_get(j, "slo_met"))); /* 300 ms, then 100 ms a token: both met */
	ck_assert(json_is_null(json_object_get(j, "backend")));
	json_decref(j);

	j = ig_replay_line_json(&r, 2, NULL, "HTTP 429: busy");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "status")), 429);
	ck_assert(json_is_null(json_object_get(j, "ttft_ms")));
	ck_assert(json_is_null(json_object_get(j, "prompt_tokens")));
	ck_assert_str_eq(json_string_value(json_object_get(j, "error")), "HTTP 429: busy");
	json_decref(j);
}
END_TEST

START_TEST(the_summary_counts_what_the_lines_say)
{
	struct ig_replay r;
	struct ig_trace t;
	struct ig_replay_rec rec[3];
	setup(&r, &t, rec);
	json_t *s = ig_replay_summary_json(&r);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "requests")), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "completed")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "errors")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "late")), 1);
	ck_assert_double_eq_tol(json_real_value(json_object_get(json_object_get(s, "late_ms"), "max")), 200, 1e-6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(s, "duration_s")), 2.1, 1e-9);
	json_t *ttft = json_object_get(s, "ttft_ms");
	ck_assert_double_eq_tol(json_real_value(json_object_get(ttft, "mean")), 550, 1e-6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(ttft, "p50")), 300, 1e-6);
	ck_assert_double_eq_tol(json_real_value(json_object_get(ttft, "p99")), 800, 1e-6);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "prompt_tokens")), 2000);
	ck_assert_int_eq(json_integer_value(json_object_get(s, "cached_tokens")), 960);
	ck_assert_double_eq_tol(json_real_value(json_object_get(s, "cached_share")), 0.48, 1e-9);
	ck_assert_double_eq_tol(json_real_value(json_object_get(s, "reuse_bound")), 1000.0 / 2600.0, 1e-9);
	json_t *g = json_object_get(s, "goodput");
	ck_assert_int_eq(json_integer_value(json_object_get(g, "met")), 1);
	ck_assert_double_eq_tol(json_real_value(json_object_get(g, "share")), 1.0 / 3.0, 1e-9);
	ck_assert_double_eq_tol(json_real_value(json_object_get(g, "per_s")), 1 / 2.1, 1e-9);
	json_decref(s);
}
END_TEST

START_TEST(the_csv_has_a_row_per_simulated_second)
{
	struct ig_replay r;
	struct ig_trace t;
	struct ig_replay_rec rec[3];
	setup(&r, &t, rec);
	char path[] = "/tmp/ig-replay-csv-XXXXXX";
	int fd = mkstemp(path);
	close(fd);
	ck_assert_int_eq(ig_replay_write_csv(&r, path), 0);
	FILE *f = fopen(path, "r");
	char text[1024] = "";
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	unlink(path);
	/* second 0: one arrival, in flight at its end; second 1: one arrival
	 * (at 1.2 s), the first ended at 1.3 s; second 2: the third
	 * arrives and ends, the second ends at 2.1 s. The first's 11 tokens
	 * from 0.3 s to 1.3 s: 7.7 in second 0, 3.3 in second 1. */
	ck_assert_str_eq(text, "second,arrivals,in_flight,ended,ttft_p90_ms,output_tokens_per_s\n"
			       "0,1,1,0,300.0,7.7\n"
			       "1,1,1,1,800.0,3.3\n"
			       "2,1,0,2,,3.0\n"
			       "3,0,0,0,,0.0\n");
}
END_TEST

IG_CHECK_MAIN("replay_report", a_line_tells_one_request_in_simulated_time, the_summary_counts_what_the_lines_say,
	      the_csv_has_a_row_per_simulated_second)
