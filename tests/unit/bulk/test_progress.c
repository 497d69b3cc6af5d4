/* Unit tests for src/bulk/progress.c: what a person or a script watching a
 * bulk run reads: the counts, the percentage, the rates over the last ten
 * seconds (so the ETA follows the server's current speed, not the run's
 * average), the plain line, and --progress-file rewritten whole with the
 * run's state. The client's .c files are included, as test_bulk.c does, so
 * static functions can be tested. */
#include "config.h"
#include <check.h>
#include <fcntl.h>
#include <math.h>
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


static struct bulk_stats stats_of(long selected, long resumed_ok, long ok, long failed, double elapsed_s)
{
	struct bulk_stats st;
	memset(&st, 0, sizeof(st));
	st.selected = selected;
	st.resumed_ok = resumed_ok;
	st.ok = ok;
	st.failed = failed;
	st.output_tokens = (uint64_t)(ok * 100);
	st.start_us = ig_now_us() - (uint64_t)(elapsed_s * 1e6);
	return st;
}

START_TEST(counts_percent_rate_and_eta)
{
	struct ig_progress p;
	ig_progress_init(&p, NULL, 0);
	ck_assert_int_eq(p.interval_s, 5); /* a plain line every 5 s by default */
	/* 100 lines, 10 done by an earlier run, 35 in this one's 7 seconds */
	struct bulk_stats st = stats_of(100, 10, 30, 5, 7.0);
	json_t *j = ig_progress_json(&p, &st, "running");
	ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "running");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "done")), 45);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "total")), 100);
	ck_assert(fabs(json_real_value(json_object_get(j, "percent")) - 45.0) < 1e-9);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "ok")), 40);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "errors")), 5);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "resumed")), 10);
	double rps = json_real_value(json_object_get(j, "requests_per_s"));
	ck_assert_msg(rps > 4.9 && rps < 5.01, "%f", rps); /* this run's 35 in 7 s */
	double eta = json_real_value(json_object_get(j, "eta_s"));
	ck_assert_msg(eta > 10.9 && eta < 11.3, "%f", eta); /* 55 left at 5 a second */
	ck_assert_ptr_null(json_object_get(j, "models")); /* one model: nothing to split */
	json_decref(j);

	/* nothing done yet: no ETA to tell; all done: 0 */
	st = stats_of(100, 0, 0, 0, 3.0);
	j = ig_progress_json(&p, &st, "running");
	ck_assert(json_is_null(json_object_get(j, "eta_s")));
	json_decref(j);
	st = stats_of(20, 5, 15, 0, 3.0);
	j = ig_progress_json(&p, &st, "finished");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "eta_s")), 0);
	json_decref(j);
}
END_TEST

/* A slow first 100 s, then 10 requests a second: the rate is the last ten
 * seconds', not the run's. */
START_TEST(the_rate_follows_the_current_speed)
{
	struct ig_progress p;
	ig_progress_init(&p, NULL, 0);
	struct bulk_stats st = stats_of(10000, 0, 0, 0, 0);
	uint64_t t0 = ig_now_us() - 120000000ull;
	st.start_us = t0;
	for (int s = 0; s <= 120; s++) {
		st.ok = s <= 100 ? s : 100 + (s - 100) * 10;
		sample(&p, &st, t0 + (uint64_t)s * 1000000u);
	}
	double rps, tps;
	rates(&p, &st, t0 + 120000000ull, &rps, &tps);
	ck_assert_msg(rps > 9.9 && rps < 10.1, "%f", rps); /* not the run's 300 / 120 = 2.5 */
	ck_assert_uint_eq(p.n_samples, IG_PROGRESS_WINDOW);
}
END_TEST

START_TEST(the_plain_line)
{
	struct ig_progress p;
	ig_progress_init(&p, NULL, 0);
	struct bulk_stats st = stats_of(100, 10, 30, 5, 7.0);
	st.in_flight = 8;
	st.waiting = 3;
	char line[384];
	format_line(&p, &st, line, sizeof(line));
	ck_assert_msg(strncmp(line, "45/100 45.0% | 5.0 req/s | ", 27) == 0, "%s", line);
	const char *tail = strstr(line, " | in flight 8 | errors 5 | retrying 3 | ETA ");
	ck_assert_msg(tail != NULL, "%s", line);
	double eta = 0;
	ck_assert_msg(sscanf(tail, " | in flight 8 | errors 5 | retrying 3 | ETA %lfs", &eta) == 1, "%s", line);
	ck_assert_msg(eta > 10.8 && eta < 11.2, "%s", line); /* 55 left at 5 a second */
	st.stopping = 1;
	format_line(&p, &st, line, sizeof(line));
	ck_assert_ptr_nonnull(strstr(line, " | stopping"));
}
END_TEST

START_TEST(the_progress_file_says_the_state)
{
	char dir[] = "/tmp/test_progress.XXXXXX", path[64];
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/progress.json", dir);
	struct ig_progress p;
	ig_progress_init(&p, path, 0);
	p.tty = 0;
	p.last_plain_us = 0;
	struct bulk_stats st = stats_of(50, 0, 20, 0, 2.0);
	int saved = dup(STDERR_FILENO), devnull = open("/dev/null", O_WRONLY);
	dup2(devnull, STDERR_FILENO); /* the plain line: not what this test reads */
	ig_progress_tick(&p, &st, 1);
	json_t *j = json_load_file(path, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "running");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "done")), 20);
	json_decref(j);
	st.stopping = 1;
	ig_progress_tick(&p, &st, 1);
	j = json_load_file(path, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "stopping");
	json_decref(j);
	ig_progress_finish(&p, &st); /* 20 of 50: stopped early */
	j = json_load_file(path, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "stopped");
	json_decref(j);
	st.ok = 50;
	ig_progress_finish(&p, &st);
	j = json_load_file(path, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "state")), "finished");
	ck_assert(fabs(json_real_value(json_object_get(j, "percent")) - 100.0) < 1e-9);
	json_decref(j);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(devnull);
	unlink(path);
	rmdir(dir);
}
END_TEST

IG_CHECK_MAIN("progress", counts_percent_rate_and_eta, the_rate_follows_the_current_speed, the_plain_line,
	      the_progress_file_says_the_state)
