/* Unit tests for Redis URLs (src/gateway/redis.c): what cluster.redis_url
 * accepts, what it refuses and why, and how it is shown (no password); and
 * the cluster's share of a key's limits and of a backend's slots or a
 * key's max_inflight (src/gateway/cluster.c). */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "redis.h"
#include "../check_main.h"

static void refused(const char *url, const char *why)
{
	struct ig_redis_url u;
	char *err = NULL;
	ck_assert_int_eq(ig_redis_url_parse(url, &u, &err), -1);
	ck_assert_msg(err && strstr(err, why), "%s: %s", url, err ? err : "(no message)");
	free(err);
}

START_TEST(redis_urls)
{
	struct ig_redis_url u;
	char *err = NULL, *shown;
	ck_assert_int_eq(ig_redis_url_parse("redis://10.0.0.5", &u, &err), 0);
	ck_assert_str_eq(u.host, "10.0.0.5");
	ck_assert_int_eq(u.port, 6379);
	ck_assert_int_eq(u.db, 0);
	ck_assert_ptr_null(u.password);
	ig_redis_url_free(&u);

	ck_assert_int_eq(ig_redis_url_parse("redis://:s3cret@redis.internal:6380/2", &u, &err), 0);
	ck_assert_str_eq(u.host, "redis.internal");
	ck_assert_int_eq(u.port, 6380);
	ck_assert_int_eq(u.db, 2);
	ck_assert_str_eq(u.password, "s3cret");
	shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "redis://***@redis.internal:6380/2"); /* never the password */
	free(shown);
	ig_redis_url_free(&u);

	/* an ACL user: AUTH USER PASSWORD (kept as "USER\nPASSWORD") */
	ck_assert_int_eq(ig_redis_url_parse("redis://gw:p@ss@[::1]:7000/", &u, &err), 0);
	ck_assert_str_eq(u.host, "::1");
	ck_assert_int_eq(u.port, 7000);
	ck_assert_str_eq(u.password, "gw\np@ss");
	shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "redis://***@[::1]:7000/0");
	free(shown);
	ig_redis_url_free(&u);

	refused("http://127.0.0.1:6379", "is not a redis:// URL");
	refused("rediss://127.0.0.1:6379", "TLS (rediss://) is not supported");
	refused("redis://", "no host");
	refused("redis://h:0", "the port must be 1..65535");
	refused("redis://h:70000", "the port must be 1..65535");
	refused("redis://h:12x", "the port must be 1..65535");
	refused("redis://h/db1", "the database after '/' must be a number");
	refused("redis://secret@h", "the part before '@' must be [USER]:PASSWORD");
}
END_TEST

/* A gateway's share of a key's limit (cluster.c): even with no demand,
 * following demand otherwise, a small part kept by the idle; shares add up
 * to 1 over gateways that see the same figures. */
START_TEST(limit_shares_follow_demand)
{
	ck_assert_double_eq_tol(ig_cluster_share(0, 0, 4), 0.25, 1e-9);
	ck_assert_double_eq_tol(ig_cluster_share(0, 0, 1), 1.0, 1e-9);
	ck_assert_double_eq_tol(ig_cluster_share(5, 15, 4), 0.25, 1e-9); /* spread evenly: a quarter */
	double busy = ig_cluster_share(10, 0, 4), idle = ig_cluster_share(0, 10, 4);
	ck_assert(busy > 0.93 && busy < 0.94);                          /* (10 + 0.25) / 11 */
	ck_assert_double_eq_tol(busy + 3 * idle, 1.0, 1e-9);
	double a = ig_cluster_share(3, 7, 2), b = ig_cluster_share(7, 3, 2);
	ck_assert_double_eq_tol(a + b, 1.0, 1e-9);
	ck_assert(a < b);
	ck_assert_double_eq_tol(ig_cluster_share(-1, -1, 0), 1.0, 1e-9); /* nonsense in: alone */
}
END_TEST

static long claim(long total, const long *held, const double *w, size_t n, size_t me, unsigned long long turn)
{
	return ig_cluster_claim(total, held, w, n, me, turn);
}

START_TEST(slots_split_by_weight_and_never_beyond_the_total)
{
	long none[3] = {0, 0, 0};
	double even[3] = {1, 1, 1}, w13[2] = {1, 3};
	/* nothing held, equal weights: 8 slots as 4 and 4; 7 as 3 and 4 in
	 * some order, the odd one turning with `turn` */
	ck_assert_int_eq(claim(8, none, even, 2, 0, 0), 4);
	ck_assert_int_eq(claim(8, none, even, 2, 1, 0), 4);
	for (unsigned long long t = 0; t < 4; t++) {
		long a = claim(7, none, even, 2, 0, t), b = claim(7, none, even, 2, 1, t);
		ck_assert_int_eq(a + b, 7);
		ck_assert(a == 3 || a == 4);
	}
	/* weights 1 and 3 (a key of weight 1 waits at one, of 3 at the other) */
	ck_assert_int_eq(claim(8, none, w13, 2, 0, 0), 2);
	ck_assert_int_eq(claim(8, none, w13, 2, 1, 0), 6);
	/* one holds all 8 while the other, of weight 3, waits: cut to its 2 */
	long all[2] = {8, 0};
	ck_assert_int_eq(claim(8, all, w13, 2, 0, 0), 2);
	ck_assert_int_eq(claim(8, all, w13, 2, 1, 0), -1); /* none free yet */
	/* both hold 8 of 8 (each ran alone while Redis was away): each cut to
	 * its fair part, not both holding on for good */
	long both[2] = {8, 8};
	ck_assert_int_eq(claim(8, both, w13, 2, 0, 0), 2);
	ck_assert_int_eq(claim(8, both, w13, 2, 1, 0), 6);
	/* with nothing waiting (weight 0) while the other waits: it keeps what
	 * it holds (take_states decides when it lets go) and gets no part */
	long some[2] = {3, 1};
	double idle[2] = {0, 1};
	ck_assert_int_eq(claim(8, some, idle, 2, 0, 0), 3);
	ck_assert_int_eq(claim(8, some, idle, 2, 1, 0), 5);
	/* any claims and weights: together no more than the total */
	srand(7);
	for (int round = 0; round < 20000; round++) {
		size_t n = 1 + (size_t)(rand() % 5);
		long total = 1 + rand() % 40, held[5], left = total, sum = 0;
		double w[5];
		for (size_t g = 0; g < n; g++) {
			held[g] = left > 0 ? rand() % (left + 1) : 0;
			left -= held[g];
			w[g] = rand() % 3 == 0 ? 0 : (double)(1 + rand() % 4);
		}
		unsigned long long turn = (unsigned long long)rand();
		for (size_t g = 0; g < n; g++) {
			long c = claim(total, held, w, n, g, turn);
			sum += c > 0 ? c : 0;
		}
		ck_assert_msg(sum <= total, "round %d: %ld of %ld", round, sum, total);
	}
}
END_TEST

IG_CHECK_MAIN("redis", redis_urls, limit_shares_follow_demand, slots_split_by_weight_and_never_beyond_the_total)
