/* Unit tests for src/batchfile/corpus.c: a batch file's lines read and parsed
 * (the Batch format and the shorthands), each error naming its line, a line
 * given back and read again. Moved from tests/unit/bulk/test_bulk.c. */
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

static const struct ig_corpus_defaults no_defaults = {NULL, -1, 0, 0, -1, 0, NULL};

static int parse(const char *text, const struct ig_corpus_defaults *d, struct ig_corpus_line *l, char **err)
{
	*err = NULL;
	return ig_corpus_parse(text, strlen(text), 7, d, l, err);
}

static char *tmp_path(const char *name)
{
	static char dir[64];
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/test_corpus.XXXXXX");
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

START_TEST(corpus_batch_and_shorthand)
{
	struct ig_corpus_line l;
	char *err;
	struct ig_corpus_defaults d = {"dm", 32, 0.5, 1, -1, 0, NULL};

	ck_assert_int_eq(parse("{\"custom_id\":\"a\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
			       "\"body\":{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":5}}",
			       &d, &l, &err), 0);
	ck_assert_str_eq(l.custom_id, "a");
	ck_assert_int_eq(l.ep, IG_EP_CHAT);
	ck_assert_str_eq(l.model, "x");           /* the line wins over --model */
	ck_assert_int_eq(json_integer_value(json_object_get(l.body, "max_tokens")), 5);
	ck_assert(json_real_value(json_object_get(l.body, "temperature")) == 0.5);
	ig_corpus_line_clear(&l);

	/* prompt shorthand: completions by default, custom_id from the line number */
	ck_assert_int_eq(parse("{\"prompt\":\"p\"}", &d, &l, &err), 0);
	ck_assert_str_eq(l.custom_id, "line-7");
	ck_assert_int_eq(l.ep, IG_EP_COMPLETIONS);
	ck_assert_str_eq(l.model, "dm");
	ck_assert_int_eq(json_integer_value(json_object_get(l.body, "max_tokens")), 32);
	ig_corpus_line_clear(&l);

	/* --endpoint chat turns a prompt into one user message */
	d.endpoint = IG_EP_CHAT;
	ck_assert_int_eq(parse("{\"custom_id\":\"c\",\"prompt\":\"p\"}", &d, &l, &err), 0);
	ck_assert_int_eq(l.ep, IG_EP_CHAT);
	ck_assert_ptr_null(json_object_get(l.body, "prompt"));
	ck_assert_ptr_null(json_object_get(l.body, "custom_id"));
	json_t *m = json_array_get(json_object_get(l.body, "messages"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(m, "content")), "p");
	ig_corpus_line_clear(&l);

	/* --stream asks for the usage chunk too */
	d.stream = 1;
	ck_assert_int_eq(parse("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &d, &l, &err), 0);
	ck_assert(l.stream);
	ck_assert(json_is_true(json_object_get(json_object_get(l.body, "stream_options"), "include_usage")));
	ig_corpus_line_clear(&l);

	ck_assert_int_eq(parse("{\"custom_id\":\"e\",\"url\":\"/v1/embeddings\",\"body\":{\"input\":\"x\"}}", &d, &l, &err), 0);
	ck_assert_int_eq(l.ep, IG_EP_EMBEDDINGS);
	ck_assert_ptr_null(json_object_get(l.body, "stream"));
	ig_corpus_line_clear(&l);
}
END_TEST

START_TEST(corpus_errors_name_the_line)
{
	struct ig_corpus_line l;
	char *err;
	struct ig_corpus_defaults d = no_defaults;
	static const char *bad[][2] = {
		{"{not json", "line 7: not JSON"},
		{"[1,2]", "not a JSON object"},
		{"{\"prompt\":\"p\"}", "no model"},
		{"{\"custom_id\":5,\"prompt\":\"p\",\"model\":\"m\"}", "custom_id"},
		{"{\"custom_id\":\"\",\"prompt\":\"p\",\"model\":\"m\"}", "empty"},
		{"{\"custom_id\":\"z\",\"url\":\"/v1/images\",\"body\":{}}", "'/v1/images'"},
		{"{\"custom_id\":\"z\",\"method\":\"GET\",\"url\":\"/v1/completions\",\"body\":{\"prompt\":\"p\"}}", "POST"},
		{"{\"custom_id\":\"z\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\"}}", "messages"},
		{"{\"model\":\"m\"}", "none of"},
		{"{\"model\":\"m\",\"messages\":[]}", "non-empty"},
		{"{\"model\":\"m\",\"prompt\":\"a\",\"prompt\":\"b\"}", "not JSON"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(parse(bad[i][0], &d, &l, &err), -1);
		ck_assert_msg(strstr(err, bad[i][1]) && strstr(err, "line 7"), "%s -> %s", bad[i][0], err);
		ck_assert_ptr_null(l.body);
		free(err);
	}
	/* the library names no flag: the message says what was wrong, a
	 * program with flags names its own (model_hint) */
	ck_assert_int_eq(parse("{\"prompt\":\"p\"}", &d, &l, &err), -1);
	ck_assert_msg(strstr(err, "no model: set \"model\" in the line") && !strstr(err, "--"), "%s", err);
	free(err);
	d.model_hint = "--model";
	ck_assert_int_eq(parse("{\"prompt\":\"p\"}", &d, &l, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "give --model or set \"model\""));
	free(err);
	d.endpoint = IG_EP_COMPLETIONS;
	ck_assert_int_eq(parse("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", &d, &l, &err), -1);
	ck_assert_msg(strstr(err, "cannot go to the completions endpoint") && !strstr(err, "--"), "%s", err);
	free(err);
}
END_TEST

/* A line given back (the Batch API holds a line while the backends' model
 * lists are not known) comes again, with its number; then the next. */
START_TEST(corpus_unread_gives_the_same_line_again)
{
	char *in = tmp_path("unread.jsonl");
	struct ig_corpus_reader r;
	char *err = NULL;
	put_file(in, "one\n\ntwo\nthree\n");
	ck_assert_int_eq(ig_corpus_open(&r, in, &err), 0);
	ck_assert_int_eq(ig_corpus_next(&r), 1);
	ck_assert_int_eq(ig_corpus_next(&r), 1);
	ck_assert_str_eq(r.line, "two");
	ck_assert_int_eq(r.lineno, 3);
	for (int k = 0; k < 2; k++) { /* twice in a row: still that line, not the one before */
		ck_assert_int_eq(ig_corpus_unread(&r), 0);
		ck_assert_int_eq(ig_corpus_next(&r), 1);
		ck_assert_str_eq(r.line, "two");
		ck_assert_int_eq(r.lineno, 3);
		ck_assert_int_eq(r.index, 1);
		ck_assert_int_eq(r.offset, 5);
	}
	ck_assert_int_eq(ig_corpus_next(&r), 1);
	ck_assert_str_eq(r.line, "three");
	ck_assert_int_eq(r.offset, 9);
	ck_assert_int_eq(ig_corpus_next(&r), 0);
	ig_corpus_close(&r);
	free(in);
}
END_TEST

IG_CHECK_MAIN("corpus", corpus_batch_and_shorthand, corpus_errors_name_the_line, corpus_unread_gives_the_same_line_again)
