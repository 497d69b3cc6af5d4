/* Unit tests for src/bulk/submit_flags.c: `infergate-bulk submit`'s flags,
 * each mistake named.
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

/* submit's flags: parsed as `infergate-bulk submit ...` parses them. */
static int submit_flags_of(const char *line, char **err)
{
	char *argv[32], *copy = strdup(line);
	int argc = 0;
	struct submit s;
	for (char *t = strtok(copy, " "); t && argc < 31; t = strtok(NULL, " "))
		argv[argc++] = t;
	argv[argc] = NULL;
	*err = NULL;
	ig_submit_init(&s);
	int rc = ig_submit_flags(&s, argc, argv, err);
	ig_submit_free(&s);
	free(copy);
	return rc;
}

START_TEST(submit_flags_checked)
{
	char *err;
	ck_assert_int_eq(submit_flags_of("submit --input i --url http://h/v1 --output o --metadata a=1 --metadata b=", &err), 0);
	ck_assert_int_eq(submit_flags_of("submit --batch batch_1 --url http://h --output o --cancel", &err), 0);
	ck_assert_int_eq(submit_flags_of("submit --input i --url http://h --no-wait", &err), 0);
	static const char *bad[][2] = {
		{"submit --input i --output o", "--url is required"},
		{"submit --url http://h --output o", "--input FILE is required"},
		{"submit --input i --batch b --url http://h --output o", "give one"},
		{"submit --input i --url http://h", "--output FILE is required"},
		{"submit --input i --url http://h --no-wait --output o", "--output: --no-wait downloads nothing"},
		{"submit --input i --url http://h --output o --cancel", "--cancel needs --batch"},
		{"submit --batch b --url http://h --output o --endpoint chat", "--endpoint is for creating"},
		{"submit --batch a/b --url http://h --output o", "--batch: 'a/b' is not a batch id"},
		{"submit --input i --url ftp://h --output o", "--url: 'ftp://h'"},
		{"submit --input i --url http://h --output o --metadata x", "--metadata: 'x' is not KEY=VALUE"},
		{"submit --input i --url http://h --output o --metadata x=1 --metadata x=2", "given twice"},
		{"submit --input i --url http://h --output o --endpoint images", "'images' is not chat, completions"},
		{"submit --input i --url http://h --output o --api-key-env IG_TEST_NOT_SET_ANYWHERE", "not set"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(submit_flags_of(bad[i][0], &err), -1);
		ck_assert_msg(strstr(err, bad[i][1]), "%s -> %s", bad[i][0], err);
		free(err);
	}
	/* 17 pairs: one too many */
	char line[1024] = "submit --input i --url http://h --output o";
	for (int i = 0; i < 17; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), " --metadata=k%d=v", i);
	ck_assert_int_eq(submit_flags_of(line, &err), -1);
	ck_assert_msg(strstr(err, "at most 16"), "%s", err);
	free(err);

}
END_TEST

IG_CHECK_MAIN("submit_flags", submit_flags_checked)
