/* Unit tests for the rate limits' token buckets (src/gateway/keys/ratelimit.c):
 * refill, both-or-neither charges, corrections, OpenAI's durations. */
#include "config.h"
#include <check.h>
#include <math.h>

#include "../../check_main.h"
#include "keys/ratelimit.h"

START_TEST(a_bucket_refills_continuously_up_to_its_limit)
{
	struct ig_bucket b = {0};
	ig_bucket_set(&b, 60, 1000);
	ck_assert_int_eq(ig_bucket_remaining(&b), 60); /* starts full */
	b.level = 0;
	ck_assert_double_eq_tol(ig_bucket_level(&b, 1500), 0.5, 1e-9); /* read, not changed */
	ck_assert_double_eq(b.level, 0);
	ck_assert_double_eq_tol(ig_bucket_level(&b, 1000000), 60, 1e-9); /* never above the limit */
	ig_bucket_refill(&b, 1500); /* 60 a minute: one a second */
	ck_assert_int_eq(ig_bucket_remaining(&b), 0);
	ck_assert_uint_eq(ig_bucket_wait_ms(&b, 1), 500);
	ig_bucket_refill(&b, 2000);
	ck_assert_int_eq(ig_bucket_remaining(&b), 1);
	ig_bucket_refill(&b, 1000000);
	ck_assert_int_eq(ig_bucket_remaining(&b), 60);
	ck_assert_uint_eq(ig_bucket_reset_ms(&b), 0);
	/* A lower limit cuts the level; a higher one keeps it. */
	ig_bucket_set(&b, 10, 1000000);
	ck_assert_int_eq(ig_bucket_remaining(&b), 10);
	ig_bucket_set(&b, 100, 1000000);
	ck_assert_int_eq(ig_bucket_remaining(&b), 10);
	ig_bucket_set(&b, 0, 1000000);
	ck_assert(b.limit == 0);
}
END_TEST

/* A limit computed from what Redis said (cluster.c's share) may be NaN or
 * infinite: refused, the bucket as it was, its limit still in force. */
START_TEST(a_limit_that_is_not_a_number_is_refused)
{
	struct ig_bucket b = {0};
	const double odd[] = {NAN, -NAN, INFINITY, -INFINITY};
	ck_assert_int_eq(ig_bucket_set(&b, 60, 1000), 0);
	b.level = 2;
	for (size_t i = 0; i < sizeof(odd) / sizeof(*odd); i++) {
		ck_assert_int_eq(ig_bucket_set(&b, odd[i], 2000), -1);
		ck_assert(b.limit == 60 && b.level == 2 && b.t_ms == 1000);
	}
	uint64_t retry = 0;
	struct ig_bucket t = {0};
	b.level = 0;
	ck_assert_int_eq(ig_ratelimit_admit(&b, &t, 1, 0, 1000, &retry), IG_LIMIT_REQUESTS); /* still limited */
}
END_TEST

START_TEST(admission_charges_both_buckets_or_neither)
{
	struct ig_bucket r = {0}, t = {0};
	uint64_t retry;
	ig_bucket_set(&r, 2, 0);
	ig_bucket_set(&t, 1000, 0);
	ck_assert_int_eq(ig_ratelimit_admit(&r, &t, 600, 0, 0, &retry), IG_LIMIT_NONE);
	ck_assert_int_eq(ig_bucket_remaining(&r), 1);
	ck_assert_int_eq(ig_bucket_remaining(&t), 400);
	/* tokens short: neither is charged, retry when 600 are there */
	ck_assert_int_eq(ig_ratelimit_admit(&r, &t, 600, 0, 0, &retry), IG_LIMIT_TOKENS);
	ck_assert_int_eq(ig_bucket_remaining(&r), 1);
	ck_assert_uint_eq(retry, 12000); /* 200 tokens at 1000 a minute */
	/* the answer used 100 of its 600: 500 back */
	ig_bucket_give(&t, 500);
	ck_assert_int_eq(ig_bucket_remaining(&t), 900);
	ck_assert_int_eq(ig_ratelimit_admit(&r, &t, 600, 0, 0, &retry), IG_LIMIT_NONE);
	ck_assert_int_eq(ig_ratelimit_admit(&r, &t, 1, 0, 0, &retry), IG_LIMIT_REQUESTS);
	ck_assert_uint_eq(retry, 30000); /* one request at 2 a minute */
	ck_assert_int_eq(ig_ratelimit_admit(&r, &t, 1001, 0, 60000, &retry), IG_LIMIT_TOO_BIG);
	/* more used than charged: the bucket owes, and refuses until refilled */
	ig_bucket_give(&t, -2000);
	ck_assert_int_eq(ig_bucket_remaining(&t), 0);
	ck_assert(t.level < 0);
	/* A share of a fleet's limit (cluster.c): 250 of 1,000 here. A charge
	 * of 600 is over the share but not the fleet's limit: it waits for a
	 * full bucket and leaves it owing; over the fleet's, never. */
	struct ig_bucket rs = {0}, ts = {0};
	ig_bucket_set(&rs, 10, 0);
	ig_bucket_set(&ts, 250, 0);
	ck_assert_int_eq(ig_ratelimit_admit(&rs, &ts, 1001, 1000, 0, &retry), IG_LIMIT_TOO_BIG);
	ck_assert_int_eq(ig_ratelimit_admit(&rs, &ts, 600, 1000, 0, &retry), IG_LIMIT_NONE);
	ck_assert(ts.level < -349 && ts.level > -351);
	ck_assert_int_eq(ig_ratelimit_admit(&rs, &ts, 600, 1000, 0, &retry), IG_LIMIT_TOKENS);
	ck_assert_uint_eq(retry, 144000); /* 600 owed at 250 a minute: 350 + 250 */
	/* a share that shrinks cuts the level to it */
	ig_bucket_set(&rs, 2.5, 0);
	ck_assert(rs.level <= 2.5);
	/* no limits: always admitted, nothing counted */
	struct ig_bucket r0 = {0}, t0 = {0};
	ck_assert_int_eq(ig_ratelimit_admit(&r0, &t0, 1000000, 0, 5, &retry), IG_LIMIT_NONE);
	ck_assert_uint_eq(retry, 0);
}
END_TEST

START_TEST(durations_are_written_as_openai_writes_them)
{
	char s[32];
	const struct {
		uint64_t ms;
		const char *want;
	} cases[] = {{0, "0ms"}, {20, "20ms"}, {999, "999ms"}, {1000, "1s"}, {8640, "8.64s"}, {1500, "1.5s"},
		     {59999, "1m0s"}, {60000, "1m0s"}, {360000, "6m0s"}, {90500, "1m30.5s"},
		     {3723000, "1h2m3s"}, {3599999, "1h0m0s"}};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ig_ratelimit_duration(s, sizeof(s), cases[i].ms);
		ck_assert_msg(strcmp(s, cases[i].want) == 0, "%llu ms: got %s, want %s",
			      (unsigned long long)cases[i].ms, s, cases[i].want);
	}
}
END_TEST

IG_CHECK_MAIN("ratelimit", a_bucket_refills_continuously_up_to_its_limit, a_limit_that_is_not_a_number_is_refused,
	      admission_charges_both_buckets_or_neither, durations_are_written_as_openai_writes_them)
