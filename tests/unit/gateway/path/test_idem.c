/* Unit tests for Idempotency-Key's store (src/gateway/path/idem.c): finding an
 * entry by scope, a failed run dropped once its readers are done, kept
 * answers expiring by age and by bytes, the oldest first. */
#include "../../../../src/gateway/path/idem.c"

#include <check.h>

#include "../../check_main.h"

static const unsigned char D[32] = {1};

START_TEST(entries_are_found_by_scope_and_grow_past_their_table)
{
	struct ig_idem s;
	ig_idem_init(&s, 1u << 30, 1000);
	char scope[32];
	for (int i = 0; i < 500; i++) {
		snprintf(scope, sizeof(scope), "k\n%d", i);
		ck_assert_ptr_nonnull(ig_idem_add(&s, scope, D));
	}
	ck_assert_uint_eq(s.n, 500);
	for (int i = 0; i < 500; i++) {
		snprintf(scope, sizeof(scope), "k\n%d", i);
		struct ig_idem_entry *e = ig_idem_find(&s, scope);
		ck_assert_ptr_nonnull(e);
		ck_assert_str_eq(e->scope, scope);
	}
	ck_assert_ptr_null(ig_idem_find(&s, "k\n500"));
	ck_assert_ptr_null(ig_idem_find(&s, "other\n1"));
	ig_idem_free(&s);
}
END_TEST

START_TEST(a_failed_run_goes_when_its_last_reader_does)
{
	struct ig_idem s;
	ig_idem_init(&s, 1u << 30, 1000);
	struct ig_idem_entry *e = ig_idem_add(&s, "a\nx", D);
	e->refs++; /* a reader joined */
	ig_idem_append(e, "boom", 4);
	ig_idem_end(&s, e, true, 10);
	/* out of the store at once: a retry runs again */
	ck_assert_ptr_null(ig_idem_find(&s, "a\nx"));
	ck_assert_uint_eq(s.n, 0);
	ck_assert_uint_eq(s.bytes, 0);
	/* the reader still reads it */
	ck_assert_uint_eq(e->bytes.len, 4);
	ig_idem_put(&s, e); /* the runner */
	ig_idem_put(&s, e); /* the reader: freed (ASan and valgrind would see a leak or a double free) */
	ig_idem_free(&s);
}
END_TEST

START_TEST(kept_answers_expire_by_age_and_by_bytes_oldest_first)
{
	struct ig_idem s;
	ig_idem_init(&s, 3 * (ENTRY_OVERHEAD + 3 + 100), 1000);
	char body[100];
	memset(body, 'x', sizeof(body));
	const char *names[] = {"k\n1", "k\n2", "k\n3", "k\n4"};
	for (int i = 0; i < 4; i++) {
		struct ig_idem_entry *e = ig_idem_add(&s, names[i], D);
		ig_idem_append(e, body, sizeof(body));
		ig_idem_end(&s, e, false, (uint64_t)(100 * i));
		ig_idem_put(&s, e);
	}
	/* the fourth pushed the bytes over: the oldest went */
	ck_assert_ptr_null(ig_idem_find(&s, "k\n1"));
	ck_assert_ptr_nonnull(ig_idem_find(&s, "k\n2"));
	ck_assert_uint_eq(s.n, 3);
	ck_assert_uint_eq(s.bytes, 3 * (ENTRY_OVERHEAD + 3 + 100));
	/* age: at 1150 the one that ended at 100 is over 1000 ms old */
	ig_idem_expire(&s, 1150);
	ck_assert_ptr_null(ig_idem_find(&s, "k\n2"));
	ck_assert_ptr_nonnull(ig_idem_find(&s, "k\n3"));
	/* a running entry is never expired */
	struct ig_idem_entry *run = ig_idem_add(&s, "k\nrun", D);
	ig_idem_expire(&s, 100000);
	ck_assert_ptr_eq(ig_idem_find(&s, "k\nrun"), run);
	ck_assert_uint_eq(s.n, 1);
	ig_idem_free(&s);
}
END_TEST

IG_CHECK_MAIN("idem", entries_are_found_by_scope_and_grow_past_their_table, a_failed_run_goes_when_its_last_reader_does,
	      kept_answers_expire_by_age_and_by_bytes_oldest_first)
