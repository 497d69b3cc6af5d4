/* Unit tests for src/common/buf.c: the byte buffer every program's I/O
 * goes through (appended, consumed, grown), and its Prometheus label
 * escaping. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/buf.h"
#include "../check_main.h"

START_TEST(buf_append_consume)
{
	struct ig_buf b;
	ig_buf_init(&b);
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(ig_buf_printf(&b, "%04d", i), 0);
	ck_assert_uint_eq(ig_buf_pending(&b), 4000);
	ck_assert(memcmp(ig_buf_head(&b), "0000000100020003", 16) == 0);
	ig_buf_consume(&b, 3996);
	ck_assert(memcmp(ig_buf_head(&b), "0999", 4) == 0);
	ig_buf_consume(&b, 10);
	ck_assert_uint_eq(ig_buf_pending(&b), 0);
	ck_assert_int_eq(ig_buf_append(&b, "xy", 2), 0);
	ck_assert(memcmp(ig_buf_head(&b), "xy", 2) == 0);
	ig_buf_free(&b);
}
END_TEST

/* Label values of the Prometheus text format: \, " and newline escaped,
 * everything else as it is. */
START_TEST(buf_prom_label_escapes)
{
	struct ig_buf b;
	ig_buf_init(&b);
	ck_assert_int_eq(ig_buf_prom_label(&b, "a\\b\"c\nd/é"), 0);
	ig_buf_append(&b, "", 1);
	ck_assert_str_eq(ig_buf_head(&b), "a\\\\b\\\"c\\nd/é");
	ig_buf_free(&b);
}
END_TEST

IG_CHECK_MAIN("buf", buf_append_consume, buf_prom_label_escapes)
