/* Unit tests for Redis URLs (src/gateway/redis.c): what cluster.redis_url
 * accepts, what it refuses and why, and how it is shown (no password). */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

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

IG_CHECK_MAIN("redis", redis_urls)
