/* Unit tests for load reports (src/gateway/fleet/loadreport.c), on real servers'
 * payloads from tests/fixtures. */
#include "config.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fleet/loadreport.h"
#include "../../check_main.h"


/* Real servers' load reports (tests/fixtures, each naming its upstream
 * source): every series counts once, whatever its labels. */
static void load_of(const char *fixture, long want_running, long want_waiting, long want_capacity)
{
	size_t len;
	char *text = ig_fixture(fixture, &len);
	long running = -2, waiting = -2, capacity = -2;
	ig_loadreport_parse(text, len, &running, &waiting, &capacity);
	ck_assert_msg(running == want_running && waiting == want_waiting && capacity == want_capacity,
		      "%s: %ld running, %ld waiting, capacity %ld; want %ld, %ld, %ld", fixture, running, waiting,
		      capacity, want_running, want_waiting, want_capacity);
	free(text);
}

START_TEST(load_reports_as_real_servers_print_them)
{
	/* The gauges tell no capacity. */
	load_of("sglang-metrics-dp2.prom", 12, 5, -1);            /* one series per dp_rank */
	load_of("sglang-metrics-dp4-rank0-idle.prom", 9, 3, -1);  /* the first series is 0/0 */
	load_of("sglang-metrics-priority.prom", 8, 4, -1);        /* priority="" totals only */
	load_of("vllm-metrics-engines.prom", 12, 5, -1);          /* one series per engine */
	load_of("metrics-timestamps.prom", 4, 1, -1);             /* the value, not the timestamp */
	load_of("sglang-v1-loads.json", 12, 5, 96);               /* 48 per rank */
	load_of("sglang-get-load.json", 12, 5, -1);               /* num_reqs - num_waiting_reqs */
	/* Nothing in them tells a load. */
	load_of("sglang-error-flat.json", -1, -1, -1);
	load_of("fastapi-detail.json", -1, -1, -1);

	long r = -2, w = -2, c = -2;
	/* A capacity only when every rank states one. */
	const char *part = "{\"loads\": [{\"num_running_reqs\": 2, \"num_waiting_reqs\": 0, \"max_running_requests\": 8},"
			   " {\"num_running_reqs\": 1, \"num_waiting_reqs\": 0}]}";
	ig_loadreport_parse(part, strlen(part), &r, &w, &c);
	ck_assert_int_eq(r, 3);
	ck_assert_int_eq(c, -1);
	const char *two = "{\"loads\": [{\"num_running_reqs\": 2, \"num_waiting_reqs\": 0, \"max_running_requests\": 8},"
			  " {\"num_running_reqs\": 1, \"num_waiting_reqs\": 4, \"max_running_requests\": 6}]}";
	ig_loadreport_parse(two, strlen(two), &r, &w, &c);
	ck_assert_int_eq(c, 14);
	const char *bad = "{\"loads\": [{\"num_running_reqs\": 2, \"num_waiting_reqs\": 0, \"max_running_requests\": -8}]}";
	ig_loadreport_parse(bad, strlen(bad), &r, &w, &c);
	ck_assert_int_eq(r, 2);
	ck_assert_int_eq(c, -1);
	const char *cut = "sglang:num_running_reqs{model_name=\"a\",dp_rank=\"0\"";  /* torn labels */
	ig_loadreport_parse(cut, strlen(cut), &r, &w, &c);
	ck_assert_int_eq(r, -1);
	const char *odd = "sglang:num_running_reqs{a=\"x\\\"}\"} 3\nsglang:num_running_reqs 2 17\n"
			  "sglang:num_queue_reqs_total 9\nsglang:num_queue_reqs{} NaN\n"
			  "sglang:num_running_reqs{b=\"\"} 1e300\n";
	ig_loadreport_parse(odd, strlen(odd), &r, &w, &c);
	ck_assert_int_eq(r, IG_LOADREPORT_MAX); /* 3 + 2 + clamped 1e300 */
	ck_assert_int_eq(w, 0);           /* NaN is 0; _total is another metric */
	const char *few = "sglang:num_running_reqs 3\nsglang:num_running_reqs{x=\"1\"} 2 1733212800000";
	ig_loadreport_parse(few, strlen(few), &r, &w, &c);
	ck_assert_int_eq(r, 5);
	ck_assert_int_eq(w, 0);
}
END_TEST

/* One data-parallel rank's part of the same reports (a rank routed to as a
 * backend of its own): the series of its dp_rank (SGLang) or engine (vLLM)
 * label, the JSON object of its dp_rank. */
static void rank_load_of(const char *fixture, long rank, long want_running, long want_waiting, long want_capacity)
{
	size_t len;
	char *text = ig_fixture(fixture, &len);
	long running = -2, waiting = -2, capacity = -2;
	ig_loadreport_parse_rank(text, len, rank, &running, &waiting, &capacity);
	ck_assert_msg(running == want_running && waiting == want_waiting && capacity == want_capacity,
		      "%s rank %ld: %ld running, %ld waiting, capacity %ld; want %ld, %ld, %ld", fixture, rank, running,
		      waiting, capacity, want_running, want_waiting, want_capacity);
	free(text);
}

START_TEST(a_ranks_part_of_the_report)
{
	rank_load_of("sglang-metrics-dp2.prom", 0, 7, 3, -1);
	rank_load_of("sglang-metrics-dp2.prom", 1, 5, 2, -1);
	rank_load_of("sglang-metrics-dp2.prom", 2, -1, -1, -1);   /* no such rank */
	rank_load_of("vllm-metrics-engines.prom", 1, 5, 2, -1);   /* engine="1" */
	rank_load_of("sglang-metrics-priority.prom", 1, 2, 1, -1); /* priority="" only */
	rank_load_of("sglang-v1-loads.json", 0, 7, 3, 48);
	rank_load_of("sglang-v1-loads.json", 1, 5, 2, 48);
	rank_load_of("sglang-get-load.json", 1, 5, 2, -1);
	rank_load_of("sglang-metrics-dp2.prom", -1, 12, 5, -1);   /* -1: the whole server */

	long r = -2, w = -2, c = -2;
	/* a server without ranks prints no rank label: it is rank 0 */
	const char *plain = "vllm:num_requests_running{model_name=\"m\"} 4\nvllm:num_requests_waiting 1\n";
	ig_loadreport_parse_rank(plain, strlen(plain), 0, &r, &w, &c);
	ck_assert(r == 4 && w == 1);
	ig_loadreport_parse_rank(plain, strlen(plain), 1, &r, &w, &c);
	ck_assert(r == -1 && w == -1);
	/* a rank label that is not a number counts as none (rank 0 is the one without) */
	const char *odd = "sglang:num_running_reqs{dp_rank=\"x1\"} 4\nsglang:num_running_reqs{dp_rank=\"1\"} 2\n";
	ig_loadreport_parse_rank(odd, strlen(odd), 1, &r, &w, &c);
	ck_assert_int_eq(r, 2);
	/* JSON objects without dp_rank: their place in the list */
	const char *list = "[{\"num_reqs\": 3, \"num_waiting_reqs\": 1}, {\"num_reqs\": 9, \"num_waiting_reqs\": 4}]";
	ig_loadreport_parse_rank(list, strlen(list), 1, &r, &w, &c);
	ck_assert(r == 5 && w == 4);
}
END_TEST

IG_CHECK_MAIN("loadreport", load_reports_as_real_servers_print_them, a_ranks_part_of_the_report)
