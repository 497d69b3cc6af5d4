/* Unit tests for admission (src/gateway/admission.c, included to reach
 * its static functions): the usage option spliced into a body byte for
 * byte, the token estimate, the session key. */
#include "../../../src/gateway/admission.c"

#include <check.h>

#include "../check_main.h"

/* The body gets "stream_options" in front, the rest byte for byte. */
START_TEST(include_usage_is_spliced_in_front)
{
	struct ig_buf b;
	ig_buf_init(&b);
	ig_buf_printf(&b, " {\"model\":\"m\", \"stream\":true, \"temperature\":0.70}");
	ck_assert_int_eq(splice_usage_option(&b), 0);
	const char *want = " {\"stream_options\":{\"include_usage\":true},\"model\":\"m\", \"stream\":true, "
			   "\"temperature\":0.70}";
	ck_assert_uint_eq(ig_buf_pending(&b), strlen(want));
	ck_assert(memcmp(ig_buf_head(&b), want, strlen(want)) == 0);
	ig_buf_free(&b);
}
END_TEST

/* The tokens charged: the prompt at 4 bytes a token (a chat message's role
 * and two separators with its text) plus the output asked for, n times. */
START_TEST(token_estimate_counts_prompt_and_output)
{
	static struct ig_conf cfg;
	struct ig_gw gw = {.cfg = &cfg};
	ig_routes_default(&cfg.routes);
	cfg.default_max_tokens = 100;
	struct ig_admission a;
	ig_admission_init(&a);
	a.route_idx = 0; /* chat */
	json_t *root = json_pack("{s:[{s:s, s:s}], s:i}", "messages", "role", "user", "content", "0123456789", "n", 2);
	/* (4 + 10 + 2) bytes = 4 tokens; no max_tokens: 2 x 100 */
	ck_assert_int_eq(token_estimate(&gw, &a, root), 4 + 200);
	a.max_tokens = 10;
	ck_assert_int_eq(token_estimate(&gw, &a, root), 4 + 20);
	json_decref(root);
	ig_routes_clear(&cfg.routes);
}
END_TEST

/* The session key: X-Session-Id, else the body's user, else the API key;
 * none of them: 0 (least-loaded). The same key, the same hash. */
START_TEST(session_key_comes_from_user_or_key)
{
	struct ig_admission a;
	ig_admission_init(&a);
	json_t *u1 = json_pack("{s:s}", "user", "alice"), *u2 = json_pack("{s:s}", "user", "bob"), *none = json_object();
	/* conn NULL: MHD_lookup_connection_value answers NULL */
	uint64_t alice = session_of(&a, NULL, u1);
	ck_assert_uint_ne(alice, 0);
	ck_assert_uint_eq(session_of(&a, NULL, u1), alice);
	ck_assert_uint_ne(session_of(&a, NULL, u2), alice);
	ck_assert_uint_eq(session_of(&a, NULL, none), 0);
	snprintf(a.key_id, sizeof(a.key_id), "%064d", 7);
	ck_assert_uint_ne(session_of(&a, NULL, none), 0);
	ck_assert_uint_eq(session_of(&a, NULL, u1), alice); /* user first */
	json_decref(u1);
	json_decref(u2);
	json_decref(none);
}
END_TEST

IG_CHECK_MAIN("admission", include_usage_is_spliced_in_front, token_estimate_counts_prompt_and_output,
	      session_key_comes_from_user_or_key)
