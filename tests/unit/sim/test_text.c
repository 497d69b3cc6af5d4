/* Unit tests for src/sim/text.c: the deterministic answer text. */
#include "config.h"
#include <check.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "text.h"
#include "../check_main.h"

/* The first n tokens for a prompt and seed, concatenated. */
static char *answer(const char *prompt, uint64_t seed, long n)
{
	struct sim_text t;
	char tok[SIM_TOKEN_MAX + 1];
	size_t cap = (size_t)n * (SIM_TOKEN_MAX + 1) + 1, len = 0;
	char *out = malloc(cap);

	sim_text_init(&t, sim_text_seed(prompt, strlen(prompt), seed));
	for (long i = 0; i < n; i++) {
		size_t k = sim_text_next(&t, tok);
		ck_assert_uint_eq(k, strlen(tok));
		ck_assert_uint_le(k, SIM_TOKEN_MAX);
		memcpy(out + len, tok, k);
		len += k;
	}
	out[len] = '\0';
	return out;
}

START_TEST(same_prompt_same_text)
{
	char *a = answer("Tell me about rivers.", 7, 200);
	char *b = answer("Tell me about rivers.", 7, 200);
	ck_assert_str_eq(a, b);
	free(a);
	free(b);
}
END_TEST

START_TEST(seed_and_prompt_change_text)
{
	char *a = answer("Tell me about rivers.", 7, 50);
	char *b = answer("Tell me about rivers.", 8, 50);
	char *c = answer("Tell me about rivers!", 7, 50);
	ck_assert_str_ne(a, b);
	ck_assert_str_ne(a, c);
	free(a);
	free(b);
	free(c);
}
END_TEST

START_TEST(tokens_are_json_safe_words)
{
	char *a = answer("x", 0, 5000);
	ck_assert(isupper((unsigned char)a[0]));
	for (const char *p = a; *p; p++)
		ck_assert(isalpha((unsigned char)*p) || *p == ' ' || *p == '.' || *p == ',');
	/* Every token after the first starts with a space: one word each. */
	struct sim_text t;
	char tok[SIM_TOKEN_MAX + 1];
	sim_text_init(&t, 42);
	sim_text_next(&t, tok);
	ck_assert(tok[0] != ' ');
	for (int i = 0; i < 100; i++) {
		sim_text_next(&t, tok);
		ck_assert(tok[0] == ' ' && tok[1] != ' ');
	}
	free(a);
}
END_TEST

START_TEST(natural_length_in_range)
{
	long lo = 1000, hi = 0;
	for (uint64_t s = 0; s < 5000; s++) {
		long n = sim_text_natural_tokens(sim_text_seed(&s, sizeof(s), 1));
		ck_assert_int_ge(n, 16);
		ck_assert_int_le(n, 256);
		lo = n < lo ? n : lo;
		hi = n > hi ? n : hi;
	}
	ck_assert_int_lt(lo, 30);
	ck_assert_int_gt(hi, 240);
	ck_assert_int_eq(sim_text_natural_tokens(99), sim_text_natural_tokens(99));
}
END_TEST

START_TEST(prompt_tokens)
{
	ck_assert_int_eq(sim_text_prompt_tokens(0), 1);
	ck_assert_int_eq(sim_text_prompt_tokens(1), 1);
	ck_assert_int_eq(sim_text_prompt_tokens(4), 1);
	ck_assert_int_eq(sim_text_prompt_tokens(5), 2);
	ck_assert_int_eq(sim_text_prompt_tokens(400), 100);
}
END_TEST

IG_CHECK_MAIN("sim_text", same_prompt_same_text, seed_and_prompt_change_text,
	      tokens_are_json_safe_words, natural_length_in_range, prompt_tokens)
