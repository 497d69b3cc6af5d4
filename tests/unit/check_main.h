/* The main() every unit test program shares: run one suite, exit non-zero
 * on a failure. Output is TAP when CK_TAP_LOG_FILE_NAME is set (make check). */
#ifndef IG_CHECK_MAIN_H
#define IG_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

static inline int ig_check_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
