/* Unit tests for src/common/log.c: what an operator reads on stderr: one
 * line per call, "TIME IDENT LEVEL: message", below the level nothing, a
 * long message cut to one line, lines of several threads never mixed. */
#include "config.h"
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/log.h"
#include "../check_main.h"

static char path[] = "/tmp/ig-test-log-XXXXXX";
static int saved = -1;

/* stderr into a file, for what follows. */
static void capture(void)
{
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	saved = dup(STDERR_FILENO);
	ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
	close(fd);
}

/* stderr back; what was written, malloc'd. */
static char *captured(size_t *len)
{
	dup2(saved, STDERR_FILENO);
	close(saved);
	FILE *f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	rewind(f);
	char *s = malloc((size_t)n + 1);
	ck_assert_uint_eq(fread(s, 1, (size_t)n, f), (size_t)n);
	s[n] = '\0';
	fclose(f);
	unlink(path);
	strcpy(path, "/tmp/ig-test-log-XXXXXX");
	*len = (size_t)n;
	return s;
}

START_TEST(lines_say_when_who_and_how_bad)
{
	ig_log_set_ident("infergate-test");
	ig_log_set_level(IG_LOG_WARN);
	capture();
	ig_log_info("not shown: %d", 1);
	ig_log_debug("not shown either");
	ig_log_warn("backend %s is down", "http://a:1");
	ig_log_error("cannot write %s: %s", "/x", "No space left on device");
	size_t len;
	char *out = captured(&len);
	char *second = strchr(out, '\n');
	ck_assert_ptr_nonnull(second);
	/* 2026-12-07T11:12:46.000Z infergate-test warn: ... */
	ck_assert_int_eq(out[4], '-');
	ck_assert_int_eq(out[10], 'T');
	ck_assert_ptr_nonnull(strstr(out, "Z infergate-test warn: backend http://a:1 is down\n"));
	ck_assert_ptr_nonnull(strstr(second + 1, " infergate-test error: cannot write /x: No space left on device\n"));
	ck_assert_ptr_null(strstr(out, "not shown"));
	ck_assert_ptr_eq(strchr(second + 1, '\n'), out + len - 1); /* two lines, no more */
	free(out);

	ig_log_set_level(IG_LOG_DEBUG);
	capture();
	ig_log_debug("now %s", "shown");
	out = captured(&len);
	ck_assert_ptr_nonnull(strstr(out, " debug: now shown\n"));
	free(out);
	ig_log_set_level(IG_LOG_INFO);
	ig_log_set_ident("infergate");
}
END_TEST

START_TEST(levels_are_parsed_by_name)
{
	enum ig_log_level l;
	ck_assert_int_eq(ig_log_level_parse("debug", &l), 0);
	ck_assert_int_eq(l, IG_LOG_DEBUG);
	ck_assert_int_eq(ig_log_level_parse("WARN", &l), 0);
	ck_assert_int_eq(l, IG_LOG_WARN);
	ck_assert_int_eq(ig_log_level_parse("Error", &l), 0);
	ck_assert_int_eq(l, IG_LOG_ERROR);
	ck_assert_int_eq(ig_log_level_parse("warning", &l), -1);
	ck_assert_int_eq(ig_log_level_parse("", &l), -1);
}
END_TEST

START_TEST(a_long_message_stays_one_line)
{
	char *big = malloc(5000);
	memset(big, 'x', 4999);
	big[4999] = '\0';
	capture();
	ig_log_error("%s", big);
	ig_log_error("after");
	size_t len;
	char *out = captured(&len);
	char *nl = strchr(out, '\n');
	ck_assert_ptr_nonnull(nl);
	ck_assert_uint_eq((size_t)(nl - out) + 1, 2047); /* cut, its newline kept */
	ck_assert_ptr_nonnull(strstr(nl + 1, " error: after\n"));
	free(out);
	free(big);
}
END_TEST

static void *writer(void *arg)
{
	char c = *(char *)arg, msg[600];
	memset(msg, c, sizeof(msg) - 1);
	msg[sizeof(msg) - 1] = '\0';
	for (int i = 0; i < 200; i++)
		ig_log_warn("%s", msg);
	return NULL;
}

START_TEST(threads_never_mix_their_lines)
{
	capture();
	pthread_t t[4];
	char names[4] = {'a', 'b', 'c', 'd'};
	for (int i = 0; i < 4; i++)
		pthread_create(&t[i], NULL, writer, &names[i]);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	size_t len;
	char *out = captured(&len);
	int lines = 0;
	for (char *p = out, *nl; (nl = strchr(p, '\n')); p = nl + 1, lines++) {
		char *msg = strstr(p, " warn: ");
		ck_assert_ptr_nonnull(msg);
		msg += 7;
		ck_assert_int_eq(nl - msg, 599);
		for (char *q = msg; q < nl; q++)
			ck_assert_int_eq(*q, *msg); /* one thread's line, whole */
	}
	ck_assert_int_eq(lines, 800);
	free(out);
}
END_TEST

IG_CHECK_MAIN("log", lines_say_when_who_and_how_bad, levels_are_parsed_by_name, a_long_message_stays_one_line,
	      threads_never_mix_their_lines)
