/* The main() every unit test program shares: run one suite, exit non-zero
 * on a failure. Output is TAP when CK_TAP_LOG_FILE_NAME is set (make check). */
#ifndef IG_CHECK_MAIN_H
#define IG_CHECK_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int ig_check_run(const char *name, const TTest *const *tests, size_t n)
{
	Suite *s = suite_create(name);
	TCase *tc = tcase_create("core");
	/* A guard against a hang, not a limit on speed: tests assert counts
	 * and bytes, and run slowly under ASan (Check's default is 4 s). */
	tcase_set_timeout(tc, 600);
	for (size_t i = 0; i < n; i++)
		tcase_add_test(tc, tests[i]);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* The test program's main: runs the named tests (START_TEST names) in
 * order as one suite. */
#define IG_CHECK_MAIN(suite, ...)                                               \
	int main(void)                                                          \
	{                                                                       \
		const TTest *const tests[] = {__VA_ARGS__};                     \
		return ig_check_run(suite, tests, sizeof(tests) / sizeof(tests[0])); \
	}

/* A file of tests/fixtures (real servers' payloads), without its leading
 * `//` lines, which name the upstream source it follows. malloc'd, with its
 * length in *len; the test fails when it cannot be read. */
static inline char *ig_fixture(const char *name, size_t *len)
{
	const char *src = getenv("IG_SRCDIR");
	char path[1024];
	snprintf(path, sizeof(path), "%s/tests/fixtures/%s", src ? src : "..", name);
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "cannot open fixture %s", path);
	char *text = NULL;
	size_t cap = 0, n = 0, got;
	do {
		if (n + 4096 > cap) {
			cap = (n + 4096) * 2;
			text = realloc(text, cap);
			ck_assert_ptr_nonnull(text);
		}
		got = fread(text + n, 1, cap - n - 1, f);
		n += got;
	} while (got > 0);
	fclose(f);
	text[n] = '\0';
	char *p = text;
	while (strncmp(p, "//", 2) == 0 && strchr(p, '\n'))
		p = strchr(p, '\n') + 1;
	*len = n - (size_t)(p - text);
	memmove(text, p, *len + 1);
	return text;
}

#endif
