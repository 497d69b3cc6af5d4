/* Unit tests for what Redis holds under an Idempotency-Key
 * (src/gateway/path/idem_share.c's ig_idem_share_parse): another gateway's
 * claim and its kept answer are read as they are written
 * (ig_idem_share_claim, ig_idem_share_end); anything else is refused, so
 * that nothing of it reaches a client: not a status, not a header, not a
 * body larger than this gateway keeps. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/redismsg.h"
#include "path/idem_share.h"
#include "../../check_main.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define TOKEN "00112233445566778899aabbccddeeff"

static int parse_n(const char *v, size_t n, size_t max, struct ig_idem_value *out, struct ig_redismsg_bad *bad)
{
	bad->kind = NULL;
	return ig_idem_share_parse(v, n, max, out, bad);
}

static int parse(const char *v, struct ig_idem_value *out, struct ig_redismsg_bad *bad)
{
	return parse_n(v, strlen(v), 1 << 20, out, bad);
}

START_TEST(a_claim_and_a_kept_answer_as_gateways_write_them)
{
	struct ig_idem_value v;
	struct ig_redismsg_bad bad;
	ck_assert_int_eq(parse("R " HEX64 " gw-b " TOKEN, &v, &bad), 0);
	ck_assert_int_eq(v.kind, 'R');
	ck_assert_str_eq(v.digest, HEX64);

	const char *kept = "D " HEX64 " 200 application/json; charset=utf-8\n{\"id\": 1}";
	ck_assert_int_eq(parse(kept, &v, &bad), 0);
	ck_assert_int_eq(v.kind, 'D');
	ck_assert_uint_eq(v.status, 200);
	ck_assert_str_eq(v.ctype, "application/json; charset=utf-8");
	ck_assert_int_eq((int)v.nbody, 9);
	ck_assert(memcmp(v.body, "{\"id\": 1}", 9) == 0);

	ck_assert_int_eq(parse("D " HEX64 " 429 -\n", &v, &bad), 0); /* no Content-Type, an empty answer */
	ck_assert_str_eq(v.ctype, "");
	ck_assert_int_eq((int)v.nbody, 0);
	/* an answer with NUL bytes and line ends is bytes, as kept */
	const char bin[] = "D " HEX64 " 200 application/octet-stream\na\0b\nc";
	ck_assert_int_eq(parse_n(bin, sizeof(bin) - 1, 100, &v, &bad), 0);
	ck_assert_int_eq((int)v.nbody, 5);
}
END_TEST

START_TEST(anything_else_under_its_key_is_refused)
{
	struct ig_idem_value v;
	struct ig_redismsg_bad bad;
	char big[400];
	snprintf(big, sizeof(big), "D " HEX64 " 200 %0256d\nx", 0);
	const char *refused[][2] = {
		{"", "is not 'R DIGEST HOLDER'"},
		{"X " HEX64 " gw-b " TOKEN, "is not 'R DIGEST HOLDER'"},
		{"R " HEX64, "is not 'R DIGEST HOLDER'"},
		{"R 0123 gw-b " TOKEN, "is not 'R DIGEST HOLDER'"},
		{"R 0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef gw-b " TOKEN, "is not 'R DIGEST"},
		{"R " HEX64 " gw-b", "holder"},
		{"R " HEX64 " gw b " TOKEN, "holder"},
		{"R " HEX64 " gw-b xyz", "holder"},
		{"R " HEX64 " gw-b " TOKEN "\nmore", "holder"},
		{"D " HEX64 " 200 text/plain", "no status"},                /* no line's end */
		{"D " HEX64 " 99 text/plain\nx", "no status"},
		{"D " HEX64 " 600 text/plain\nx", "no status"},
		{"D " HEX64 " +200 text/plain\nx", "no status"},
		{"D " HEX64 " 200x text/plain\nx", "no status"},
		{"D " HEX64 " 2e2 text/plain\nx", "no status"},
		{"D " HEX64 " 200\nx", "no status"},
		{"D " HEX64 " 200 \nx", "Content-Type is not"},
		{"D " HEX64 " 200  text\nx", "Content-Type is not"},
		{"D " HEX64 " 200 text/html\rSet-Cookie: a=b\nx", "control byte"},
		{"D " HEX64 " 200 text/\x7f\nx", "control byte"},
		{big, "Content-Type is not"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++) {
		ck_assert_msg(parse(refused[i][0], &v, &bad) == -1, "%zu taken", i);
		ck_assert_str_eq(bad.kind, IG_BAD_IDEM);
		ck_assert_msg(strstr(bad.why, refused[i][1]), "%zu: '%s'", i, bad.why);
		ck_assert_ptr_null(strchr(bad.why, '\r'));
	}
	/* no more than this gateway keeps */
	const char *kept = "D " HEX64 " 200 -\n0123456789";
	ck_assert_int_eq(parse_n(kept, strlen(kept), 10, &v, &bad), 0);
	ck_assert_int_eq(parse_n(kept, strlen(kept), 9, &v, &bad), -1);
	ck_assert_ptr_nonnull(strstr(bad.why, "an answer of 10 bytes (at most 9"));
	/* the digest's NUL byte */
	const char nul[] = "R 0123456789abcdef0123456789abcdef\0" "123456789abcdef0123456789abcdef gw-b " TOKEN;
	ck_assert_int_eq(parse_n(nul, sizeof(nul) - 1, 100, &v, &bad), -1);
}
END_TEST

IG_CHECK_MAIN("idem_share", a_claim_and_a_kept_answer_as_gateways_write_them, anything_else_under_its_key_is_refused)
