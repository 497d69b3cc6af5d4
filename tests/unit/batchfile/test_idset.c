/* Unit tests for src/batchfile/idset.c: the id sets that find a done line
 * among millions. Moved from tests/unit/bulk/test_bulk.c. */
#include "config.h"
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/batchfile.h"
#include "infergate/util.h"
#include "../check_main.h"

START_TEST(idset_grows_and_finds)
{
	struct ig_idset s;
	ck_assert_int_eq(ig_idset_init(&s, 1), 0);
	for (uint64_t i = 1; i <= 200000; i++)
		ck_assert_int_eq(ig_idset_add(&s, i * 0x9E3779B97F4A7C15ull | 1, i, NULL), 1);
	ck_assert_uint_eq(s.len, 200000);
	uint64_t v;
	ck_assert_int_eq(ig_idset_add(&s, 5 * 0x9E3779B97F4A7C15ull | 1, 99, &v), 0);
	ck_assert_uint_eq(v, 5);
	ck_assert_int_eq(ig_idset_get(&s, 77 * 0x9E3779B97F4A7C15ull | 1, &v), 1);
	ck_assert_uint_eq(v, 77);
	ck_assert_int_eq(ig_idset_get(&s, 2, NULL), 0);
	ck_assert_uint_ne(ig_idset_hash("", 0), 0);
	ck_assert_uint_ne(ig_idset_hash("ab", 2), ig_idset_hash("ba", 2));
	ig_idset_free(&s);
}
END_TEST

IG_CHECK_MAIN("idset", idset_grows_and_finds)
