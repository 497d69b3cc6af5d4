/* Unit tests for src/bulk/generate.c: the synthetic corpus is the same for
 * the same seed, and every line it writes parses.
 * Moved from tests/unit/bulk/test_bulk.c unchanged; the bulk client's .c
 * files are included, as there, so static functions can be tested. */
#include "config.h"
#include <check.h>
#include <fcntl.h>
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

START_TEST(generator_is_deterministic_and_parses)
{
	struct ig_buf a, b;
	struct ig_corpus_defaults d = {"m", -1, 0, 0, -1, 0, NULL};
	ig_buf_init(&a);
	ig_buf_init(&b);
	size_t min = (size_t)-1, max = 0;
	for (long i = 0; i < 500; i++) {
		ig_buf_reset(&a);
		ig_buf_reset(&b);
		ig_generate_line(&a, 42, i, i % 2 ? IG_EP_COMPLETIONS : IG_EP_CHAT, NULL, -1);
		ig_generate_line(&b, 42, i, i % 2 ? IG_EP_COMPLETIONS : IG_EP_CHAT, NULL, -1);
		ck_assert_uint_eq(a.len, b.len);
		ck_assert(memcmp(a.data, b.data, a.len) == 0);
		ck_assert_ptr_null(memchr(a.data, '\n', a.len));
		struct ig_corpus_line l;
		char *err = NULL;
		ck_assert_msg(ig_corpus_parse(a.data, a.len, i + 1, &d, &l, &err) == 0, "%s", err);
		char want[32];
		snprintf(want, sizeof(want), "req-%09ld", i + 1);
		ck_assert_str_eq(l.custom_id, want);
		ck_assert_int_eq(l.ep, i % 2 ? IG_EP_COMPLETIONS : IG_EP_CHAT);
		ig_corpus_line_clear(&l);
		if (a.len < min)
			min = a.len;
		if (a.len > max)
			max = a.len;
	}
	ck_assert_uint_gt(max, min * 5); /* varied lengths */
	ig_buf_reset(&b);
	ig_generate_line(&b, 43, 0, IG_EP_CHAT, NULL, -1);
	ig_buf_reset(&a);
	ig_generate_line(&a, 42, 0, IG_EP_CHAT, NULL, -1);
	ck_assert(a.len != b.len || memcmp(a.data, b.data, a.len) != 0);
	ig_buf_free(&a);
	ig_buf_free(&b);
}
END_TEST

IG_CHECK_MAIN("generate", generator_is_deterministic_and_parses)
