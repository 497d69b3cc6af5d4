/* Unit tests for infergate-bulk's main.c: its flags checked, and the
 * preflight's decisions (duplicate ids found exactly, the model list read).
 * Its other parts have their own tests beside this one (test_stream.c,
 * test_report.c, test_generate.c, test_submit.c, test_autoconc.c,
 * test_merge.c). The .c files are included so static functions can be
 * tested. */
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

static char *tmp_path(const char *name)
{
	static char dir[64];
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/test_bulk.XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(dir));
	}
	return ig_strdupf("%s/%s", dir, name);
}

static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static int flags_of(const char *line, struct bulk_opts *o, char **err)
{
	char *argv[32], *copy = strdup(line);
	int argc = 0;
	for (char *t = strtok(copy, " "); t && argc < 31; t = strtok(NULL, " "))
		argv[argc++] = t;
	argv[argc] = NULL;
	*err = NULL;
	int rc = parse_flags(argc, argv, o, err);
	opts_free(o); /* the strings; the numbers stay for the checks */
	free(copy);
	return rc;
}

START_TEST(flags_validate)
{
	struct bulk_opts o;
	char *err;
	ck_assert_int_eq(flags_of("b --input i --output out.jsonl", &o, &err), 0);
	ck_assert_int_eq(o.concurrency, 0); /* auto */
	ck_assert_int_eq(o.retries, 5);
	ck_assert_int_eq(o.shard_n, 1);
	ck_assert_int_eq(flags_of("b --input i --output o --shard 2/3 --url http://h:1/v1/ --concurrency 5", &o, &err), 0);
	ck_assert_int_eq(o.shard_k, 2);
	ck_assert_int_eq(o.shard_n, 3);
	static const char *bad[][2] = {
		{"b --input i", "--output is required"},
		{"b --input i --output o --shard 3/3", "--shard"},
		{"b --input i --output o --shard x", "--shard"},
		{"b --input i --output o --concurrency 0", "--concurrency"},
		{"b --input i --output o --bogus", "unknown flag '--bogus'"},
		{"b --input i --output o --url ftp://x", "--url"},
		{"b --input i --output o --endpoint images", "--endpoint"},
		{"b --input i --output o --api-key-env IG_TEST_NOT_SET_ANYWHERE", "not set"},
		{"b --input i --output o extra", "unexpected argument"},
		{"b --input i --output o --temperature 3", "--temperature"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(flags_of(bad[i][0], &o, &err), -1);
		ck_assert_msg(strstr(err, bad[i][1]), "%s -> %s", bad[i][0], err);
		free(err);
	}
	char *e = NULL, *u = ig_parse_base_url("--url", "http://h:1/v1/", &e);
	ck_assert_str_eq(u, "http://h:1");
	free(u);
}
END_TEST

START_TEST(preflight_finds_duplicates_exactly)
{
	char *in = tmp_path("dup.jsonl");
	struct bulk_opts o;
	struct preflight pf;
	struct bulk_stats st;
	struct ig_corpus_defaults d = {"m", -1, 0, 0, -1, 0, NULL};
	put_file(in, "{\"custom_id\":\"a\",\"prompt\":\"x\"}\n\n{\"custom_id\":\"b\",\"prompt\":\"x\"}\n"
		       "{\"prompt\":\"x\"}\n{\"custom_id\":\"a\",\"prompt\":\"y\"}\n{\"custom_id\":\"line-4\",\"prompt\":\"y\"}\n");
	memset(&o, 0, sizeof(o));
	memset(&pf, 0, sizeof(pf));
	memset(&st, 0, sizeof(st));
	ig_buf_init(&pf.problems);
	ig_journal_done_init(&pf.done);
	o.input = in;
	o.shard_n = 2;
	o.shard_k = 1;
	scan_input(&o, &d, &pf, &st);
	ck_assert_int_eq(st.requests, 5);
	ck_assert_int_eq(st.selected, 2); /* indexes 1 and 3: blank lines have no index */
	ck_assert_int_eq(pf.n_problems, 2);
	ck_assert_msg(strstr(pf.problems.data, "line 5: duplicate custom_id 'a' (first at line 1)"), "%s", pf.problems.data);
	ck_assert_msg(strstr(pf.problems.data, "line 6: duplicate custom_id 'line-4' (first at line 4)"), "%s", pf.problems.data);
	ig_buf_free(&pf.problems);
	for (size_t i = 0; i < pf.n_models; i++)
		free(pf.models[i].name);
	free(pf.models);
	free(pf.skip);
	free(in);
}
END_TEST

/* The preflight's decision on a /v1/models list: a plain entry (SGLang,
 * vLLM) only has to be there; an infergate entry (or alias) also needs a
 * healthy backend; a model only done lines use is not asked for. */
START_TEST(preflight_decides_on_the_model_list)
{
	struct preflight pf;
	memset(&pf, 0, sizeof(pf));
	ig_buf_init(&pf.problems);
	const char *names[] = {"plain", "gw-up", "gw-down", "alias-down", "missing", "only-done", "odd"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		note_model(&pf, names[i], (long)i + 1, i == 5 ? 1 : 0);
	note_model(&pf, "gw-down", 9, 0);
	json_t *data = json_loads("["
		"{\"id\": \"plain\", \"object\": \"model\"},"
		"{\"id\": \"gw-up\", \"infergate\": {\"backends\": 3, \"backends_healthy\": 1}},"
		"{\"id\": \"gw-down\", \"infergate\": {\"backends\": 2, \"backends_healthy\": 0}},"
		"{\"id\": \"alias-down\", \"root\": \"gw-down\","
		" \"infergate\": {\"alias_of\": \"gw-down\", \"backends\": 2, \"backends_healthy\": 0}},"
		"{\"id\": \"odd\", \"infergate\": {\"backends_healthy\": \"0\"}}"
		"]", 0, NULL);
	ck_assert_ptr_nonnull(data);
	check_models(&pf, data, "http://gw:8080");
	const char *p = pf.problems.data;
	ck_assert_int_eq(pf.n_problems, 3);
	ck_assert_msg(strstr(p, "model 'gw-down' (used by 2 lines, first at line 3) is served by http://gw:8080 "
				"but none of its 2 backends is healthy now\n"), "%s", p);
	ck_assert_msg(strstr(p, "model 'alias-down' (used by 1 lines, first at line 4) is served by http://gw:8080 "
				"but none of its 2 backends is healthy now (it is an alias of 'gw-down')\n"), "%s", p);
	ck_assert_msg(strstr(p, "model 'missing' (used by 1 lines, first at line 5) is not served by http://gw:8080 "
				"(it serves: plain, gw-up, gw-down, alias-down, odd)"), "%s", p);
	ck_assert_ptr_null(strstr(p, "'plain'"));
	ck_assert_ptr_null(strstr(p, "'gw-up'"));
	ck_assert_ptr_null(strstr(p, "'only-done'"));
	ck_assert_ptr_null(strstr(p, "'odd'"));
	json_decref(data);
	ig_buf_free(&pf.problems);
	for (size_t i = 0; i < pf.n_models; i++)
		free(pf.models[i].name);
	free(pf.models);
}
END_TEST

IG_CHECK_MAIN("bulk", flags_validate, preflight_finds_duplicates_exactly, preflight_decides_on_the_model_list)
