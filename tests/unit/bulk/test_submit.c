/* Unit tests for src/bulk/submit.c: `infergate-bulk submit`'s
 * quoting and rate (its flags: test_submit_flags.c).
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

START_TEST(submit_quoting_and_rate)
{
	/* the resume command reads back as the same arguments in a shell */
	struct ig_buf b;
	ig_buf_init(&b);
	sb_shell_arg(&b, "out/r-1.jsonl");
	sb_shell_arg(&b, "my file's.jsonl");
	sb_shell_arg(&b, "");
	ck_assert_str_eq(b.data, " out/r-1.jsonl 'my file'\\''s.jsonl' ''");
	ig_buf_free(&b);

	/* lines per second over the samples kept, the oldest dropped */
	struct submit s;
	ig_submit_init(&s);
	ck_assert(sb_rate(&s) < 0);
	for (int i = 0; i < SB_RATE_SAMPLES + 8; i++)
		sb_sample(&s, (uint64_t)i * 2000000u, i < SB_RATE_SAMPLES ? i * 10 : SB_RATE_SAMPLES * 10 + (i - SB_RATE_SAMPLES) * 40);
	ck_assert(sb_rate(&s) > 5.0 && sb_rate(&s) < 20.0);
	ig_submit_free(&s);
}
END_TEST

IG_CHECK_MAIN("submit", submit_quoting_and_rate)
