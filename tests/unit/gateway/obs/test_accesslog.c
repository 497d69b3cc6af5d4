/* Unit tests for src/gateway/obs/accesslog.c: one JSON object per line, in the
 * caller's order, appended; a logrotate's move followed by a reopen; a path
 * that cannot be opened told; off when empty. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/accesslog.h"
#include "../../check_main.h"

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	static char buf[4096];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static char dir[] = "/tmp/ig-test-accesslog-XXXXXX";

START_TEST(lines_are_appended_whole_in_order)
{
	ck_assert_ptr_nonnull(mkdtemp(dir));
	char path[128];
	snprintf(path, sizeof(path), "%s/access.log", dir);
	FILE *f = fopen(path, "w"); /* what was there stays: appended to */
	fputs("{\"old\":1}\n", f);
	fclose(f);

	struct ig_accesslog log;
	char *err = NULL;
	ck_assert_int_eq(ig_accesslog_open(&log, path, &err), 0);
	ig_accesslog_write(&log, json_pack("{s:s, s:i, s:s, s:f}", "time", "t", "status", 200, "path",
					   "/v1/chat\ncompletions", "ms", 1.25));
	ig_accesslog_write(&log, json_pack("{s:s, s:i}", "time", "u", "status", 429));
	ck_assert_str_eq(slurp(path), "{\"old\":1}\n"
				      "{\"time\":\"t\",\"status\":200,\"path\":\"/v1/chat\\ncompletions\",\"ms\":1.25}\n"
				      "{\"time\":\"u\",\"status\":429}\n");

	/* logrotate moves the file; the reopen (reactor.c, on its signal) starts a new one */
	char moved[160];
	snprintf(moved, sizeof(moved), "%s.1", path);
	ck_assert_int_eq(rename(path, moved), 0);
	ig_accesslog_write(&log, json_pack("{s:i}", "before_reopen", 1));
	ig_accesslog_reopen(&log);
	ig_accesslog_write(&log, json_pack("{s:i}", "after_reopen", 1));
	ck_assert_ptr_nonnull(strstr(slurp(moved), "{\"before_reopen\":1}\n"));
	ck_assert_str_eq(slurp(path), "{\"after_reopen\":1}\n");
	ig_accesslog_close(&log);
	ck_assert_int_eq(log.fd, -1);
	unlink(moved);
	unlink(path);
	rmdir(dir);
}
END_TEST

START_TEST(a_path_that_cannot_be_opened_is_told)
{
	struct ig_accesslog log;
	char *err = NULL;
	ck_assert_int_eq(ig_accesslog_open(&log, "/nonexistent-ig-dir/access.log", &err), -1);
	ck_assert_ptr_nonnull(err);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent-ig-dir/access.log"));
	ck_assert_ptr_nonnull(strstr(err, "No such file"));
	free(err);
	ck_assert_int_eq(log.fd, -1);
}
END_TEST

START_TEST(an_empty_path_is_off)
{
	struct ig_accesslog log;
	char *err = NULL;
	ck_assert_int_eq(ig_accesslog_open(&log, "", &err), 0);
	ck_assert_int_eq(log.fd, -1);
	ck_assert_ptr_null(log.path);
	ig_accesslog_write(&log, json_pack("{s:i}", "x", 1)); /* released, written nowhere */
	ig_accesslog_reopen(&log);
	ig_accesslog_close(&log);
	ck_assert_ptr_null(err);
}
END_TEST

IG_CHECK_MAIN("accesslog", lines_are_appended_whole_in_order, a_path_that_cannot_be_opened_is_told,
	      an_empty_path_is_off)
