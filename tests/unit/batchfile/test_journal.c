/* Unit tests for src/batchfile/journal.c: result files appended a whole line
 * at a time, a full disk leaving no half line, and a resume reading what
 * earlier runs wrote (a torn last line cut). Moved from tests/unit/bulk/test_bulk.c. */
#include "config.h"
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/batchfile/journal.c" /* its static add_done too */
#include "infergate/util.h"
#include "../check_main.h"

static char *tmp_path(const char *name)
{
	static char dir[64];
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/test_journal.XXXXXX");
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

START_TEST(doneset_resume_and_torn_line)
{
	char *out = tmp_path("out.jsonl"), *errs = tmp_path("out.errors.jsonl");
	char *e = NULL;
	struct ig_doneset d;

	put_file(out, "{\"custom_id\":\"a\",\"response\":{}}\n{\"custom_id\":\"b\"}\n{\"custom_id\":\"c\",\"resp");
	put_file(errs, "{\"custom_id\":\"x\",\"error\":{}}\n{\"custom_id\":\"b\"}\n");
	ig_journal_done_init(&d);
	ck_assert_int_eq(ig_journal_done_load(&d, out, errs, &e), 0);
	ck_assert_int_eq(ig_journal_done_find(&d, "a", 1), 1);
	ck_assert_int_eq(ig_journal_done_find(&d, "b", 1), 1);
	ck_assert_int_eq(ig_journal_done_find(&d, "x", 1), 2);
	ck_assert_int_eq(ig_journal_done_find(&d, "c", 1), 0); /* torn: not done */
	ck_assert_int_eq(ig_journal_done_find(&d, "zz", 2), 0);
	ck_assert_int_eq(d.in_both, 1);
	ck_assert_int_eq(d.count[0], 2);
	ck_assert_int_eq(d.count[1], 1);
	ck_assert_int_eq(ig_journal_done_cut_torn(&d, out, errs, &e), 0);
	FILE *f = fopen(out, "r");
	char buf[256];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	ck_assert_uint_eq(n, strlen("{\"custom_id\":\"a\",\"response\":{}}\n{\"custom_id\":\"b\"}\n"));

	/* A hash that is present but belongs to another id: the re-read of the
	 * line at the stored offset tells them apart, so "q" is not done even if
	 * its hash were in the set (a simulated 64-bit collision). */
	uint64_t hq = ig_idset_hash("q", 1);
	ck_assert_int_eq(ig_idset_add(&d.set, hq, (0ull << 1) | 0, NULL), 1); /* offset 0 holds "a" */
	ck_assert_int_eq(ig_journal_done_find(&d, "q", 1), 0);
	/* and an id that collided at load time lives in the exact list */
	ck_assert_int_eq(add_done(&d, "q", 1, 0), 0);
	ck_assert_uint_eq(d.n_extra, 1);
	ck_assert_int_eq(ig_journal_done_find(&d, "q", 1), 2);
	ig_journal_done_free(&d);

	/* a bad line that is not the last one is an error naming the file */
	put_file(errs, "garbage\n{\"custom_id\":\"x\"}\n");
	ig_journal_done_init(&d);
	ck_assert_int_eq(ig_journal_done_load(&d, out, errs, &e), -1);
	ck_assert_ptr_nonnull(strstr(e, "line 1"));
	free(e);
	ig_journal_done_free(&d);
	free(out);
	free(errs);
}
END_TEST

START_TEST(journal_lines_and_append)
{
	char *path = tmp_path("j.jsonl"), *e = NULL;
	struct ig_journal j;
	size_t len;
	json_t *body = json_pack("{s:s}", "object", "chat.completion");

	unlink(path);
	ck_assert_int_eq(ig_journal_open(&j, path, &e), 0);
	char *l1 = ig_journal_ok_line("id\"1", 200, "req-1", NULL, body, &len);
	ck_assert_int_eq(ig_journal_append(&j, l1, len), 0);
	ck_assert(l1[len - 1] == '\n');
	json_t *o = json_loadb(l1, len, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(o, "custom_id")), "id\"1");
	ck_assert(json_is_null(json_object_get(o, "error")));
	json_t *r = json_object_get(o, "response");
	ck_assert_int_eq(json_integer_value(json_object_get(r, "status_code")), 200);
	ck_assert_str_eq(json_string_value(json_object_get(r, "request_id")), "req-1");
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(o, "id")), "batch_req_"));
	json_decref(o);
	ck_assert_ptr_null(strstr(l1, "trace_id")); /* only with --trace */
	char *l2 = ig_journal_error_line("id2", 0, NULL, "4bf92f3577b34da6a3ce929d0e0e4736", NULL, "timeout",
					 "no byte for 5 s", &len);
	o = json_loadb(l2, len, 0, NULL);
	ck_assert(json_is_null(json_object_get(o, "response")));
	ck_assert_str_eq(json_string_value(json_object_get(o, "trace_id")), "4bf92f3577b34da6a3ce929d0e0e4736");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "code")), "timeout");
	json_decref(o);
	ck_assert_int_eq(ig_journal_append(&j, l2, len), 0);
	ig_journal_close(&j);
	free(l1);
	free(l2);
	json_decref(body);
	free(path);
}
END_TEST

START_TEST(journal_full_disk_leaves_no_half_line)
{
	struct ig_journal j;
	char *e = NULL;
	if (access("/dev/full", W_OK) != 0)
		return;
	ck_assert_int_eq(ig_journal_open(&j, "/dev/full", &e), 0);
	ck_assert_int_eq(ig_journal_append(&j, "{}\n", 3), -1);
	ck_assert_int_eq(errno, ENOSPC);
	ck_assert_int_eq(j.size, 0);
	ig_journal_close(&j);
}
END_TEST

IG_CHECK_MAIN("journal", doneset_resume_and_torn_line, journal_lines_and_append, journal_full_disk_leaves_no_half_line)
