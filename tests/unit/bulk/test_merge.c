/* Unit tests for `infergate-bulk merge`: an exact join, each kind of
 * finding (missing, duplicated, unknown, torn), errors files, hash
 * collisions, usage errors, and the memory per id. The .c files are
 * included so static functions can be tested. */
#include "config.h"
#include <check.h>
#include <dirent.h>
#include <ftw.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../src/batchfile/corpus.c"
#include "../../../src/batchfile/idset.c"
#include "../../../src/batchfile/journal.c"
#include "../../../src/bulk/report.c"
#include "../../../src/bulk/autoconc.c"
#include "../../../src/bulk/merge.c"
#include "../check_main.h"

static char dir[64];

static char *path_of(const char *name)
{
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/test_bulk_merge.XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(dir));
	}
	return ig_strdupf("%s/%s", dir, name);
}

static void put(const char *name, const char *text)
{
	char *p = path_of(name);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	free(p);
}

static char *slurp(const char *name)
{
	char *p = path_of(name);
	FILE *f = fopen(p, "r");
	free(p);
	if (!f)
		return NULL;
	char *text = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&text, &n);
	int c;
	while ((c = fgetc(f)) != EOF)
		fputc(c, m);
	fclose(f);
	fclose(m);
	return text;
}

static void drop(const char *name)
{
	char *p = path_of(name);
	unlink(p);
	free(p);
}

/* Runs `merge ARGS` (space-separated; a leading @ on a word is the test
 * directory) with stdout to a file; returns the exit code. */
static int merge(const char *args)
{
	char *copy = strdup(args), *argv[32], *owned[32];
	int argc = 0, n_owned = 0;
	argv[argc++] = "merge";
	for (char *t = strtok(copy, " "); t && argc < 31; t = strtok(NULL, " ")) {
		if (*t == '@')
			t = owned[n_owned++] = path_of(t + 1);
		argv[argc++] = t;
	}
	argv[argc] = NULL;
	fflush(stdout);
	int saved = dup(STDOUT_FILENO);
	char *rep = path_of("report.txt");
	int fd = open(rep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, STDOUT_FILENO);
	close(fd);
	int rc = ig_merge_main(argc, argv);
	fflush(stdout);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	free(rep);
	for (int i = 0; i < n_owned; i++)
		free(owned[i]);
	free(copy);
	return rc;
}

static json_t *summary(void)
{
	char *text = slurp("summary.json");
	ck_assert_ptr_nonnull(text);
	json_t *j = json_loads(text, 0, NULL);
	ck_assert_ptr_nonnull(j);
	free(text);
	return j;
}

static long jget(json_t *j, const char *a, const char *b)
{
	json_t *v = json_object_get(j, a);
	if (b)
		v = json_object_get(v, b);
	ck_assert_msg(json_is_integer(v), "%s.%s is not an integer", a, b ? b : "");
	return (long)json_integer_value(v);
}

#define OK(id) "{\"id\":\"batch_req_1\",\"custom_id\":\"" id "\",\"response\":{\"status_code\":200},\"error\":null}\n"
#define ERR(id, code) "{\"id\":\"batch_req_2\",\"custom_id\":\"" id "\",\"response\":null," \
		      "\"error\":{\"code\":\"" code "\",\"message\":\"m\"}}\n"

/* 6 request lines (a blank line takes no index); line 4 has no custom_id,
 * so it is line-4 as the run names it. */
static const char *corpus_text =
	"{\"custom_id\":\"a\",\"prompt\":\"x\"}\n"
	"{\"custom_id\":\"b\",\"prompt\":\"x\"}\n"
	"\n"
	"{\"prompt\":\"no id\"}\n"
	"{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"messages\":[]}}\n"
	"{\"custom_id\":\"d\",\"prompt\":\"x\"}\n"
	"{\"custom_id\":\"e\",\"prompt\":\"x\"}";  /* no final newline */

static void three_shards(void)
{
	put("corpus.jsonl", corpus_text);
	/* indexes a 0, b 1, line-4 2, c 3, d 4, e 5; shard k/3 holds k and k+3 */
	put("s0.jsonl", OK("a"));
	put("s0.errors.jsonl", ERR("c", "http_400"));
	put("s1.jsonl", OK("d") OK("b"));
	put("s2.jsonl", OK("e") OK("line-4"));
	put("s2.errors.jsonl", "");
	drop("m.jsonl");
	drop("m.errors.jsonl");
	drop("summary.json");
}

START_TEST(exact_merge_copies_lines_and_errors)
{
	three_shards();
	ck_assert_int_eq(merge("--input @corpus.jsonl --output @m.jsonl --summary-json @summary.json "
			       "--shards 3 @s0.jsonl @s1.jsonl @s2.jsonl"), 0);
	char *out = slurp("m.jsonl"), *errs = slurp("m.errors.jsonl"), *rep = slurp("report.txt");
	ck_assert_str_eq(out, OK("a") OK("d") OK("b") OK("e") OK("line-4"));
	ck_assert_str_eq(errs, ERR("c", "http_400"));
	ck_assert_msg(strstr(rep, "exact: each of the 6 ids is in exactly one line"), "%s", rep);
	ck_assert_msg(strstr(rep, "'c' ("), "the id in an errors file is listed: %s", rep);
	ck_assert_msg(strstr(rep, "http_400 1"), "%s", rep);
	json_t *j = summary();
	ck_assert(json_is_true(json_object_get(j, "exact")));
	ck_assert_int_eq(jget(j, "corpus_ids", NULL), 6);
	ck_assert_int_eq(jget(j, "result_lines", NULL), 5);
	ck_assert_int_eq(jget(j, "error_lines", NULL), 1);
	ck_assert_int_eq(jget(j, "in_errors", "ids"), 1);
	ck_assert_int_eq(jget(j, "errors_by_code", "http_400"), 1);
	ck_assert_int_eq(jget(j, "written_results", NULL), 5);
	ck_assert_int_eq(jget(j, "written_errors", NULL), 1);
	/* the errors files next to s0 and s2 were found without being named */
	ck_assert_int_eq(json_array_size(json_object_get(j, "files")), 5);
	json_decref(j);
	free(out);
	free(errs);
	free(rep);

	/* an existing MERGED is not replaced without --force */
	ck_assert_int_eq(merge("--input @corpus.jsonl --output @m.jsonl @s0.jsonl @s1.jsonl @s2.jsonl"), 2);
	ck_assert_int_eq(merge("--input @corpus.jsonl --output @m.jsonl --force @s0.jsonl @s1.jsonl @s2.jsonl"), 0);
	/* check only: nothing named, nothing written */
	drop("m.jsonl");
	drop("m.errors.jsonl");
	ck_assert_int_eq(merge("--input @corpus.jsonl @s2.jsonl @s0.jsonl @s1.jsonl"), 0);
	ck_assert_ptr_null(slurp("m.jsonl"));
	/* an errors file named explicitly is not read twice */
	ck_assert_int_eq(merge("--input @corpus.jsonl @s0.errors.jsonl @s0.jsonl @s1.jsonl @s2.jsonl"), 0);
}
END_TEST

START_TEST(missing_duplicated_unknown_exit_1_and_write_nothing)
{
	three_shards();
	/* shard 2 not given: line-4 and e missing */
	ck_assert_int_eq(merge("--input @corpus.jsonl --output @m.jsonl --summary-json @summary.json "
			       "--shards 3 @s0.jsonl @s1.jsonl"), 1);
	ck_assert_ptr_null(slurp("m.jsonl"));
	ck_assert_ptr_null(slurp("m.errors.jsonl"));
	json_t *j = summary();
	ck_assert(json_is_false(json_object_get(j, "exact")));
	ck_assert_int_eq(jget(j, "missing", "count"), 2);
	json_t *per = json_object_get(j, "missing_per_shard");
	ck_assert_int_eq(json_integer_value(json_array_get(per, 2)), 2);
	ck_assert_int_eq(json_integer_value(json_array_get(per, 0)), 0);
	ck_assert_int_eq(json_integer_value(json_array_get(per, 1)), 0);
	json_decref(j);
	char *rep = slurp("report.txt");
	ck_assert_msg(strstr(rep, "missing      2 ids (shard 2/3: 2)"), "%s", rep);
	ck_assert_msg(strstr(rep, "'line-4' (corpus line 4, shard 2/3)"), "%s", rep);
	ck_assert_msg(strstr(rep, "NOT exact: 2 missing"), "%s", rep);
	free(rep);

	/* a line twice (in the output of one shard and the errors of another)
	 * and an id that is not in the corpus */
	put("s2.errors.jsonl", ERR("a", "timeout") ERR("a", "timeout"));
	put("s3.jsonl", OK("zz"));
	drop("summary.json");
	ck_assert_int_eq(merge("--input @corpus.jsonl --output @m.jsonl --summary-json @summary.json "
			       "@s0.jsonl @s1.jsonl @s2.jsonl @s3.jsonl"), 1);
	ck_assert_ptr_null(slurp("m.jsonl"));
	j = summary();
	ck_assert_int_eq(jget(j, "missing", "count"), 0);
	ck_assert_int_eq(jget(j, "duplicated", "ids"), 1);
	ck_assert_int_eq(jget(j, "duplicated", "extra_lines"), 2);
	ck_assert_int_eq(jget(j, "unknown", "lines"), 1);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(j, "unknown"), "first"), 0)), "zz");
	json_decref(j);
	rep = slurp("report.txt");
	ck_assert_msg(strstr(rep, "'a' 3 times (the second at "), "%s", rep);
	ck_assert_msg(strstr(rep, "s2.errors.jsonl line 1)"), "%s", rep);
	free(rep);
	/* no temp file is left behind */
	DIR *dh = opendir(dir);
	struct dirent *de;
	while ((de = readdir(dh)))
		ck_assert_msg(!strstr(de->d_name, ".tmp."), "left behind: %s", de->d_name);
	closedir(dh);
}
END_TEST

START_TEST(torn_last_line_counts_as_missing)
{
	three_shards();
	/* shard 1 was killed while writing its second line and never resumed */
	put("s1.jsonl", OK("d") "{\"id\":\"batch_req_1\",\"custom_id\":\"b\",\"resp");
	ck_assert_int_eq(merge("--input @corpus.jsonl --summary-json @summary.json @s0.jsonl @s1.jsonl @s2.jsonl"), 1);
	json_t *j = summary();
	ck_assert_int_eq(jget(j, "missing", "count"), 1);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(j, "missing"), "first"), 0)), "b");
	ck_assert(json_is_true(json_object_get(json_array_get(json_object_get(j, "files"), 1), "torn")));
	json_decref(j);
	char *rep = slurp("report.txt");
	ck_assert_msg(strstr(rep, "torn last line ignored"), "%s", rep);
	free(rep);
}
END_TEST

START_TEST(usage_errors_exit_2)
{
	three_shards();
	put("bad.jsonl", "not json\n" OK("a"));
	static const char *cases[] = {
		"@s0.jsonl",                                                  /* no --input */
		"--input @corpus.jsonl",                                      /* no files */
		"--input @corpus.jsonl --bogus @s0.jsonl",                    /* unknown flag */
		"--input @corpus.jsonl --shards 0 @s0.jsonl",                 /* bad --shards */
		"--input @corpus.jsonl --errors @x.jsonl @s0.jsonl",          /* --errors without --output */
		"--input @nope.jsonl @s0.jsonl",                              /* no corpus */
		"--input @corpus.jsonl @s0.jsonl @s0.jsonl",                  /* the same file twice */
		"--input @corpus.jsonl @s0.jsonl @missing.jsonl",             /* a file that is not there */
		"--input @corpus.jsonl @corpus.jsonl",                        /* the corpus as a result file */
		"--input @corpus.jsonl @bad.jsonl",                           /* not a result file */
		"--input @corpus.jsonl --output @s1.jsonl --force @s0.jsonl @s1.jsonl", /* writes over an input */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		ck_assert_msg(merge(cases[i]) == 2, "%s", cases[i]);
	/* a corpus with a duplicate id: no run could have used it */
	put("dup.jsonl", "{\"custom_id\":\"a\",\"prompt\":\"x\"}\n{\"prompt\":\"x\"}\n{\"custom_id\":\"line-2\",\"prompt\":\"x\"}\n");
	ck_assert_int_eq(merge("--input @dup.jsonl @s0.jsonl"), 2);
	ck_assert_int_eq(merge("--help"), 0);
}
END_TEST

/* A result id whose hash is in the set but belongs to another corpus id (a
 * simulated 64-bit collision) is not counted as that id: the corpus line at
 * the stored offset is read again and compared. Corpus ids that share a
 * hash are compared as strings. */
START_TEST(hash_collisions_are_resolved_by_the_strings)
{
	struct merge m;
	uint64_t *v;
	struct mg_exact *ex;

	three_shards();
	mg_init(&m);
	m.input = path_of("corpus.jsonl"); /* mg_free() frees it, as it frees a flag */
	mg_load_corpus(&m);
	ck_assert_int_eq(m.n_problems, 0);
	ck_assert_int_eq(m.corpus_ids, 6);
	ck_assert_int_eq(mg_find(&m, "e", 1, &v, &ex), 1); /* the last line, without its newline */
	ck_assert_int_eq(mg_find(&m, "line-4", 6, &v, &ex), 1);
	ck_assert_int_eq(mg_find(&m, "line-5", 6, &v, &ex), 0);
	ck_assert_int_eq(mg_find(&m, "a\0b", 3, &v, &ex), 0);
	uint64_t *a = ig_idset_val(&m.ids, ig_idset_hash("a", 1));
	ck_assert_ptr_nonnull(a);
	/* "q" collides with "a": same value, so the same corpus line */
	ck_assert_int_eq(ig_idset_add(&m.ids, ig_idset_hash("q", 1), *ig_idset_val(&m.ids, ig_idset_hash("a", 1)), NULL), 1);
	ck_assert_int_eq(mg_find(&m, "q", 1, &v, &ex), 0);
	ck_assert_int_eq(mg_find(&m, "a", 1, &v, &ex), 1);
	/* and "line-4" colliding with a derived id compares the derived name */
	ck_assert_int_eq(ig_idset_add(&m.ids, ig_idset_hash("r", 1), *ig_idset_val(&m.ids, ig_idset_hash("line-4", 6)), NULL), 1);
	ck_assert_int_eq(mg_find(&m, "r", 1, &v, &ex), 0);
	/* two corpus ids sharing a hash: both kept as strings */
	ck_assert_int_eq(ig_idset_add(&m.ambiguous, ig_idset_hash("b", 1), 0, NULL), 1);
	mg_load_exact(&m);
	ck_assert_uint_eq(m.n_exact, 1);
	ck_assert_int_eq(mg_find(&m, "b", 1, &v, &ex), 1);
	ck_assert_ptr_nonnull(ex);
	ck_assert_ptr_null(v);
	mg_free(&m);
}
END_TEST

/* 902,087 ids (the size of the real job) cost one 16-byte slot each at a
 * load of at most 3/4: 32 MiB, whatever the length of the lines. */
START_TEST(memory_per_id_is_bounded)
{
	struct ig_idset s;
	ck_assert_int_eq(ig_idset_init(&s, 1), 0);
	char id[32];
	for (long i = 0; i < 902087; i++) {
		int n = snprintf(id, sizeof(id), "req-%09ld", i);
		ck_assert_int_eq(ig_idset_add(&s, ig_idset_hash(id, (size_t)n), MG_VAL(i * 700, 0), NULL), 1);
	}
	size_t bytes = s.cap * (sizeof(*s.keys) + sizeof(*s.vals));
	ck_assert_msg(bytes <= 40u << 20, "%zu bytes", bytes);
	uint64_t *v = ig_idset_val(&s, ig_idset_hash("req-000000007", 13));
	ck_assert_ptr_nonnull(v);
	ck_assert_uint_eq(MG_WHERE(*v), 7 * 700);
	(*v)++;
	ck_assert_uint_eq(MG_COUNT(*v), 1);
	ck_assert_uint_eq(MG_DERIVED(*v), 0);
	ig_idset_free(&s);
}
END_TEST

START_TEST(corpus_line_id_and_offsets)
{
	char *id, *err;
	int derived;
#define LINE_ID(text, lineno) ig_corpus_line_id(text, strlen(text), lineno, &id, &derived, &err)
	ck_assert_int_eq(LINE_ID("{\"custom_id\":\"x\"}", 3), 0);
	ck_assert_str_eq(id, "x");
	ck_assert_int_eq(derived, 0);
	free(id);
	ck_assert_int_eq(LINE_ID("{\"custom_id\":null,\"prompt\":\"p\"}", 9), 0);
	ck_assert_str_eq(id, "line-9");
	ck_assert_int_eq(derived, 1);
	free(id);
	ck_assert_int_eq(LINE_ID("[1]", 2), -1);
	ck_assert_ptr_nonnull(strstr(err, "line 2"));
	free(err);
	ck_assert_int_eq(LINE_ID("{\"custom_id\":5}", 2), -1);
	free(err);

	three_shards();
	struct ig_corpus_reader r;
	char *p = path_of("corpus.jsonl");
	ck_assert_int_eq(ig_corpus_open(&r, p, &err), 0);
	long offs[6], i = 0;
	while (ig_corpus_next(&r) > 0 && i < 6)
		offs[i++] = (long)r.offset;
	ig_corpus_close(&r);
	ck_assert_int_eq(i, 6);
	ck_assert_int_eq(offs[0], 0);
	ck_assert_int_eq(offs[2], (long)(strchr(strchr(corpus_text, '\n') + 1, '\n') - corpus_text) + 2);
	ck_assert_int_eq(offs[5], (long)(strrchr(corpus_text, '\n') - corpus_text) + 1);
	char *e = ig_journal_errors_path("a/out.jsonl"), *f = ig_journal_errors_path("out");
	ck_assert_str_eq(e, "a/out.errors.jsonl");
	ck_assert_str_eq(f, "out.errors.jsonl");
	free(e);
	free(f);
	free(p);
}
END_TEST

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

int main(void)
{
	const TTest *const tests[] = {exact_merge_copies_lines_and_errors, missing_duplicated_unknown_exit_1_and_write_nothing,
				      torn_last_line_counts_as_missing, usage_errors_exit_2,
				      hash_collisions_are_resolved_by_the_strings, memory_per_id_is_bounded, corpus_line_id_and_offsets};
	/* made here, so that the forked tests share it and it is removed at the end */
	snprintf(dir, sizeof(dir), "/tmp/test_bulk_merge.XXXXXX");
	if (!mkdtemp(dir))
		return EXIT_FAILURE;
	int rc = ig_check_run("bulk_merge", tests, sizeof(tests) / sizeof(tests[0]));
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	return rc;
}
