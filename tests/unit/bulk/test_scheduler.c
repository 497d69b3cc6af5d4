/* Unit tests for src/bulk/scheduler.c's decisions (the static functions;
 * the whole run against servers is tests/integration/test_bulk.py's): a
 * response's headers read (its request id, Retry-After in seconds or as a
 * date, both reset by an interim 1xx), an error inside a 200 (a stream's
 * error event) told with its status and whether it is worth a retry, the
 * retry's wait (backoff doubling, capped at 30 s, a Retry-After taking
 * precedence up to 300 s), the --rate bucket, and the capacity of the pools
 * serving the run's models from the gateway's /health/capacity (aliases,
 * slots_low at low priority, an unknown model counted as one unknown
 * backend). The client's .c files are included, as test_bulk.c does. */
#include "config.h"
#include <check.h>
#include <fcntl.h>
#include <time.h>
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


static size_t header(struct job *j, const char *line)
{
	return on_header((char *)line, 1, strlen(line), j);
}

START_TEST(response_headers)
{
	struct job j;
	memset(&j, 0, sizeof(j));
	j.retry_after_s = -1;
	header(&j, "HTTP/1.1 429 Too Many Requests\r\n");
	header(&j, "X-Request-Id:   req-7 \r\n");
	header(&j, "retry-after: 12\r\n");
	ck_assert_str_eq(j.request_id, "req-7");
	ck_assert_int_eq(j.retry_after_s, 12);
	/* an interim answer's headers do not carry over to the final one */
	header(&j, "HTTP/1.1 200 OK\r\n");
	ck_assert_str_eq(j.request_id, "");
	ck_assert_int_eq(j.retry_after_s, -1);
	/* a date (RFC 9110): the seconds until then */
	char date[96];
	time_t at = time(NULL) + 30;
	struct tm tm;
	gmtime_r(&at, &tm);
	strftime(date, sizeof(date), "Retry-After: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
	header(&j, date);
	ck_assert_int_ge(j.retry_after_s, 28);
	ck_assert_int_le(j.retry_after_s, 30);
	/* a date in the past: now; nonsense: ignored */
	j.retry_after_s = -1;
	header(&j, "Retry-After: Mon, 01 Jan 2001 00:00:00 GMT\r\n");
	ck_assert_int_eq(j.retry_after_s, 0);
	j.retry_after_s = -1;
	header(&j, "Retry-After: soon\r\n");
	ck_assert_int_eq(j.retry_after_s, -1);
	/* a header whose name only starts the same is another one */
	header(&j, "X-Request-Identity: no\r\n");
	ck_assert_str_eq(j.request_id, "");
}
END_TEST

START_TEST(an_error_inside_a_200)
{
	char code[32], *msg = NULL;
	int retry = -1;
	json_t *b = json_loads("{\"error\": {\"message\": \"the engine died\", \"code\": 503}}", 0, NULL);
	ck_assert_int_eq(error_in_200(b, code, sizeof(code), &msg, &retry), 1);
	ck_assert_str_eq(code, "http_503");
	ck_assert_str_eq(msg, "the engine died");
	ck_assert_int_eq(retry, 1);
	free(msg);
	json_decref(b);
	b = json_loads("{\"object\": \"error\", \"message\": \"too long\", \"type\": \"BadRequestError\","
		       " \"code\": 400}", 0, NULL);
	ck_assert_int_eq(error_in_200(b, code, sizeof(code), &msg, &retry), 1);
	ck_assert_str_eq(code, "http_400");
	ck_assert_int_eq(retry, 0); /* the request's own fault: written as an error, not retried */
	free(msg);
	json_decref(b);
	b = json_loads("{\"error\": {\"message\": \"cut\"}}", 0, NULL);
	ck_assert_int_eq(error_in_200(b, code, sizeof(code), &msg, &retry), 1);
	ck_assert_str_eq(code, "stream_error");
	ck_assert_int_eq(retry, 1); /* no status said: tried again */
	free(msg);
	json_decref(b);
	b = json_loads("{\"id\": \"c\", \"choices\": []}", 0, NULL);
	ck_assert_int_eq(error_in_200(b, code, sizeof(code), &msg, &retry), 0);
	json_decref(b);
}
END_TEST

START_TEST(the_wait_before_a_retry)
{
	struct bulk_opts o;
	memset(&o, 0, sizeof(o));
	o.backoff_ms = 500;
	struct bulk_stats st;
	memset(&st, 0, sizeof(st));
	struct job *waiting[4];
	struct sched s;
	memset(&s, 0, sizeof(s));
	s.o = &o;
	s.st = &st;
	s.waiting = waiting;
	struct job j;
	memset(&j, 0, sizeof(j));
	j.custom_id = "a";
	j.retry_after_s = -1;
	uint64_t now = ig_now_us();
	retry_later(&s, &j, "http_503", NULL); /* first retry: 0.25..0.5 s */
	ck_assert_uint_ge(j.due_us - now, 250000);
	ck_assert_uint_le(j.due_us - now, 500000 + 50000);
	ck_assert_int_eq(j.attempt, 1);
	ck_assert_int_eq(st.retries, 1);
	ck_assert_int_eq(st.waiting, 1);
	ck_assert_ptr_eq(take_due(&s, j.due_us - 1), NULL); /* not before its time */
	ck_assert_ptr_eq(take_due(&s, j.due_us), &j);
	ck_assert_int_eq(st.waiting, 0);
	j.attempt = 10; /* 500 ms << 10 is past the cap: 15..30 s */
	now = ig_now_us();
	retry_later(&s, &j, "http_503", NULL);
	ck_assert_uint_ge(j.due_us - now, 15000000);
	ck_assert_uint_le(j.due_us - now, 30000000 + 50000);
	take_due(&s, j.due_us);
	/* the server said when: that, up to 300 s */
	j.attempt = 0;
	j.retry_after_s = 20;
	now = ig_now_us();
	retry_later(&s, &j, "http_429", NULL);
	ck_assert_uint_ge(j.due_us - now, 20000000);
	ck_assert_uint_le(j.due_us - now, 20000000 + 50000);
	take_due(&s, j.due_us);
	j.retry_after_s = 3600;
	now = ig_now_us();
	retry_later(&s, &j, "http_429", NULL);
	ck_assert_uint_ge(j.due_us - now, 300000000);
	ck_assert_uint_le(j.due_us - now, 300000000 + 50000);
}
END_TEST

START_TEST(the_rate_bucket)
{
	struct bulk_opts o;
	memset(&o, 0, sizeof(o));
	struct sched s;
	memset(&s, 0, sizeof(s));
	s.o = &o;
	ck_assert(rate_ok(&s, 1)); /* no --rate: always */
	o.rate = 4; /* 4 a second, a burst of 4 */
	s.tokens_at = 1000000;
	ck_assert(!rate_ok(&s, 1000000));
	ck_assert(rate_ok(&s, 1250000)); /* a quarter second: one token */
	s.tokens -= 1;
	ck_assert(!rate_ok(&s, 1250000));
	ck_assert(rate_ok(&s, 101250000)); /* a long pause fills only the burst */
	ck_assert(s.tokens <= 4.0);
	o.rate = 0.5; /* below 1 a second: a burst of 1 */
	s.tokens = 0;
	s.tokens_at = 0;
	ck_assert(!rate_ok(&s, 1000000));
	ck_assert(rate_ok(&s, 2000000));
}
END_TEST

START_TEST(the_pools_capacity)
{
	struct bulk_opts o;
	memset(&o, 0, sizeof(o));
	struct bulk_model models[3];
	memset(models, 0, sizeof(models));
	models[0].name = "llama";
	models[1].name = "fast"; /* an alias of qwen */
	models[2].name = "gone";
	struct bulk_stats st;
	memset(&st, 0, sizeof(st));
	st.models = models;
	st.n_models = 3;
	struct sched s;
	memset(&s, 0, sizeof(s));
	s.o = &o;
	s.st = &st;
	json_t *m = json_loads("{\"llama\": {\"slots\": 32, \"slots_low\": 24, \"backends_healthy\": 2, \"inflight\": 5,"
			       " \"queue_depth\": 1},"
			       " \"qwen\": {\"slots\": 8, \"slots_low\": 6, \"unknown\": 1, \"backends_healthy\": 1,"
			       " \"aliases\": [\"fast\"]},"
			       " \"phi\": {\"slots\": 100}}", 0, NULL);
	struct ig_capacity c;
	memset(&c, 0, sizeof(c));
	capacity_of(&s, m, &c);
	ck_assert_int_eq(c.slots, 40);   /* llama and qwen (by its alias); phi is not the run's */
	ck_assert_int_eq(c.unknown, 2);  /* qwen's one, and "gone": a backend of unknown size */
	ck_assert_int_eq(c.healthy, 3);
	ck_assert_int_eq(c.inflight, 5);
	ck_assert_int_eq(c.queued, 1);
	o.priority = 2; /* low: the slots low may take */
	memset(&c, 0, sizeof(c));
	capacity_of(&s, m, &c);
	ck_assert_int_eq(c.slots, 30);
	/* no line names a model: whatever the gateway serves */
	st.n_models = 0;
	memset(&c, 0, sizeof(c));
	o.priority = 0;
	capacity_of(&s, m, &c);
	ck_assert_int_eq(c.slots, 140);
	json_decref(m);
}
END_TEST

IG_CHECK_MAIN("scheduler", response_headers, an_error_inside_a_200, the_wait_before_a_retry, the_rate_bucket,
	      the_pools_capacity)
