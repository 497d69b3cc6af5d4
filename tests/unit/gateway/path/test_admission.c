/* Unit tests for admission (src/gateway/path/admission.c, included to reach
 * its static functions): the usage option spliced into a body byte for
 * byte, the token estimate, the session key. */
#include "../../../../src/gateway/path/admission.c"

#include <check.h>

#include "../../check_main.h"

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
	ck_assert_int_eq(token_estimate(&gw, &a, root, -1), 4 + 200);
	a.max_tokens = 10;
	ck_assert_int_eq(token_estimate(&gw, &a, root, -1), 4 + 20);
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

/* The counts a client sends are bounded before any arithmetic: a 400
 * naming the field; in range, their product is held to
 * IG_ADMISSION_TOKENS_MAX (past any tpm), never overflowed; best_of counts
 * as n does. A backend's usage cannot overflow the settling either. */
START_TEST(a_clients_counts_are_bounded_and_the_estimate_saturates)
{
	static struct ig_conf cfg;
	struct ig_gw gw = {.cfg = &cfg};
	ig_routes_default(&cfg.routes);
	cfg.default_max_tokens = 100;
	struct ig_admission a;
	ig_admission_init(&a);
	a.route_idx = 0; /* chat */
	static const struct {
		const char *body, *param, *code;
	} bad[] = {
		{"{\"model\":\"m\",\"max_tokens\":9223372036854775807}", "max_tokens", "integer_above_max_value"},
		{"{\"model\":\"m\",\"max_completion_tokens\":2147483648}", "max_completion_tokens",
		 "integer_above_max_value"},
		{"{\"model\":\"m\",\"n\":4294967296}", "n", "integer_above_max_value"},
		{"{\"model\":\"m\",\"n\":0}", "n", "integer_below_min_value"},
		{"{\"model\":\"m\",\"best_of\":\"2\"}", "best_of", "invalid_type"},
		{"{\"model\":\"m\",\"sampling_params\":{\"max_new_tokens\":-1}}", "sampling_params.max_new_tokens",
		 "integer_below_min_value"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *root = json_loads(bad[i].body, 0, NULL);
		ck_assert_int_eq(check_fields(&gw, &a, root), -1);
		ck_assert_uint_eq(a.err.status, 400);
		ck_assert_str_eq(a.err.param, bad[i].param);
		ck_assert_str_eq(a.err.code, bad[i].code);
		json_decref(root);
	}
	json_t *root = json_loads("{\"model\":\"m\",\"max_tokens\":2147483647,\"n\":2147483647,\"best_of\":3}", 0,
				  NULL);
	ck_assert_int_eq(check_fields(&gw, &a, root), 0);
	a.max_tokens = 2147483647;
	ck_assert_int_eq(token_estimate(&gw, &a, root, -1), IG_ADMISSION_TOKENS_MAX);
	json_decref(root);
	root = json_loads("{\"model\":\"m\",\"prompt\":\"abcd\",\"n\":2,\"best_of\":5}", 0, NULL);
	a.max_tokens = 10;
	ck_assert_int_eq(token_estimate(&gw, &a, root, -1), 1 + 5 * 10); /* best_of sequences are made */
	json_decref(root);
	/* a backend's usage past any range: its charge is given back, not overflowed */
	struct ig_key k = {0};
	ig_bucket_set(&k.tpm, 1000, 0);
	a.key = &k;
	a.tok_charge = 100;
	ig_admission_settle(&a, LONG_MAX, LONG_MAX, true);
	/* charged what the usage says past the estimate, each count held to the range (no wrap to a gift) */
	ck_assert(k.tpm.level < 0 && k.tpm.level >= 1000.0 - 2.0 * (double)IG_ADMISSION_TOKENS_MAX);
	a.key = NULL;
	ig_admission_free(&gw, &a, true);
	ig_routes_clear(&cfg.routes);
}
END_TEST

IG_CHECK_MAIN("admission", include_usage_is_spliced_in_front, token_estimate_counts_prompt_and_output,
	      session_key_comes_from_user_or_key, a_clients_counts_are_bounded_and_the_estimate_saturates)
