#include "config.h"
#include <check.h>
#include "infergate/jinja.h"
#include "../check_main.h"
START_TEST(placeholder) { ck_assert(1); }
END_TEST
IG_CHECK_MAIN("jinja_value", placeholder)
