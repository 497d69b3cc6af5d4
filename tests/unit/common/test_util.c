/* Unit tests for src/common/util.c: the flags' number and host:port
 * parsing with messages naming the flag, hashing and random numbers, and
 * the ids and secrets the programs make. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "../check_main.h"

START_TEST(parse_long_bounds)
{
	long v;
	char *err = NULL;
	ck_assert_int_eq(ig_parse_long("--retries", "3", 0, 10, &v, &err), 0);
	ck_assert_int_eq(v, 3);
	ck_assert_int_eq(ig_parse_long("--retries", "11", 0, 10, &v, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "--retries"));
	ck_assert_ptr_nonnull(strstr(err, "11"));
	free(err);
	ck_assert_int_eq(ig_parse_long("--retries", "3x", 0, 10, &v, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "'3x'"));
	free(err);
}
END_TEST

START_TEST(parse_hostport)
{
	char *host = NULL, *err = NULL;
	int port;
	ck_assert_int_eq(ig_parse_hostport("--listen", "127.0.0.1:8080", &host, &port, &err), 0);
	ck_assert_str_eq(host, "127.0.0.1");
	ck_assert_int_eq(port, 8080);
	free(host);
	ck_assert_int_eq(ig_parse_hostport("--listen", ":9", &host, &port, &err), 0);
	ck_assert_str_eq(host, "0.0.0.0");
	free(host);
	ck_assert_int_eq(ig_parse_hostport("--listen", "[::1]:7", &host, &port, &err), 0);
	ck_assert_str_eq(host, "::1");
	free(host);
	ck_assert_int_eq(ig_parse_hostport("--listen", "localhost", &host, &port, &err), -1);
	free(err);
	ck_assert_int_eq(ig_parse_hostport("--listen", "a:70000", &host, &port, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "70000"));
	free(err);
}
END_TEST

START_TEST(hash_and_rand)
{
	ck_assert_uint_eq(ig_hash64("abc", 3, 0), ig_hash64("abc", 3, 0));
	ck_assert_uint_ne(ig_hash64("abc", 3, 0), ig_hash64("abc", 3, 1));
	for (int i = 0; i < 1000; i++)
		ck_assert_uint_lt(ig_rand_below(7), 7);
	char id[33];
	ig_random_hex(id, 32);
	ck_assert_uint_eq(strlen(id), 32);
}
END_TEST

/* Ids and secrets: every length (odd ones and past the 128-digit chunk),
 * hex only, NUL-terminated, and not repeated; a page of ids is used up
 * and drawn again without a repeat. */
START_TEST(random_ids_and_secrets)
{
	char a[301], b[301];
	for (size_t n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
		memset(a, 'x', sizeof(a));
		ig_random_hex(a, n);
		ck_assert_uint_eq(strlen(a), n);
		ck_assert_uint_eq(strspn(a, "0123456789abcdef"), n);
		ck_assert_int_eq(ig_secret_hex(b, n), 0);
		ck_assert_uint_eq(strlen(b), n);
		ck_assert_uint_eq(strspn(b, "0123456789abcdef"), n);
		if (n >= 16)
			ck_assert_str_ne(a, b);
	}
	char prev[33] = "", id[33];
	for (int i = 0; i < 1000; i++) { /* 16,000 bytes: the page is drawn 15 times */
		ig_random_hex(id, 32);
		ck_assert_str_ne(id, prev);
		memcpy(prev, id, sizeof(id));
	}
	unsigned char z[64] = {0};
	ck_assert_int_eq(ig_secret_bytes(z, sizeof(z)), 0);
	unsigned char zero[64] = {0};
	ck_assert_int_ne(memcmp(z, zero, sizeof(z)), 0);
}
END_TEST

/* ig_grow makes room for index n, also past one doubling (a poll set
 * rebuilt whole: kvevents.c's nine backends once wrote past 16). */
START_TEST(grow_covers_the_index_asked)
{
	size_t cap = 0;
	int *v = ig_grow(NULL, &cap, 16, sizeof(*v), 16);
	ck_assert_ptr_nonnull(v);
	ck_assert_uint_gt(cap, 16);
	v[16] = 1;
	v = ig_grow(v, &cap, 100, sizeof(*v), 16);
	ck_assert_uint_gt(cap, 100);
	v[100] = 2;
	size_t had = cap;
	ck_assert_ptr_eq(ig_grow(v, &cap, 3, sizeof(*v), 16), v); /* room already: unchanged */
	ck_assert_uint_eq(cap, had);
	free(v);
}
END_TEST

IG_CHECK_MAIN("util", parse_long_bounds, parse_hostport, hash_and_rand, random_ids_and_secrets,
	      grow_covers_the_index_asked)
