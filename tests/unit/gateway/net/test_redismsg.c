/* Unit tests for what comes back from Redis (src/gateway/net/redismsg.c): the
 * sync's reply and each gateway's state in it, the key sync's figures and
 * active keys, the frames of a subscription, infergate:resp's messages and
 * infergate:data's envelope. Replies are built as RESP bytes and read by
 * hiredis's own reader, as the connection reads them: what an honest
 * gateway writes is taken, and each way of writing something else is
 * refused with its kind and a reason naming the value. */
#include "config.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "infergate/buf.h"
#include "infergate/util.h"
#include "net/redismsg.h"
#include "../../check_main.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define NOW 1700000000000LL

/* RESP pieces: each returns a malloc'd string; arr takes (and frees) its n pieces. */
static char *bulk(const char *s)
{
	return ig_strdupf("$%zu\r\n%s\r\n", strlen(s), s);
}

static char *integer(long long v)
{
	return ig_strdupf(":%lld\r\n", v);
}

static char *arr(int n, ...)
{
	struct ig_buf b;
	va_list ap;
	ig_buf_init(&b);
	ig_buf_printf(&b, "*%d\r\n", n);
	va_start(ap, n);
	for (int i = 0; i < n; i++) {
		char *p = va_arg(ap, char *);
		ig_buf_append(&b, p, strlen(p));
		free(p);
	}
	va_end(ap);
	ig_buf_append(&b, "", 1);
	char *s = strdup(ig_buf_head(&b));
	ig_buf_free(&b);
	return s;
}

/* The reply n bytes of RESP are, as hiredis reads them. */
static redisReply *reply_n(const char *resp, size_t n)
{
	redisReader *rd = redisReaderCreate();
	void *out = NULL;
	ck_assert_int_eq(redisReaderFeed(rd, resp, n), REDIS_OK);
	ck_assert_int_eq(redisReaderGetReply(rd, &out), REDIS_OK);
	ck_assert_ptr_nonnull(out);
	redisReaderFree(rd);
	return out;
}

/* The same for a string (freed). */
static redisReply *reply_of(char *resp)
{
	redisReader *rd = redisReaderCreate();
	void *out = NULL;
	ck_assert_int_eq(redisReaderFeed(rd, resp, strlen(resp)), REDIS_OK);
	ck_assert_int_eq(redisReaderGetReply(rd, &out), REDIS_OK);
	ck_assert_ptr_nonnull(out);
	redisReaderFree(rd);
	free(resp);
	return out;
}

static char *score(long long v)
{
	char s[32];
	snprintf(s, sizeof(s), "%lld", v);
	return bulk(s);
}

/* A sync's reply for gw-a, gw-b and gw-c, with these states. */
static redisReply *sync_with(int nstates, ...)
{
	char *states[4] = {NULL};
	va_list ap;
	va_start(ap, nstates);
	for (int i = 0; i < nstates; i++)
		states[i] = bulk(va_arg(ap, const char *));
	va_end(ap);
	char *sts = nstates == 0   ? arr(0)
		    : nstates == 1 ? arr(1, states[0])
				   : arr(2, states[0], states[1]);
	return reply_of(arr(3, integer(NOW),
			    arr(6, bulk("gw-b"), score(NOW - 50), bulk("gw-a"), score(NOW - 10), bulk("gw-c"), score(NOW)),
			    sts));
}

static void refused_sync(redisReply *r, const char *kind, const char *why)
{
	struct ig_sync s;
	struct ig_redismsg_bad bad = {0};
	int got = ig_redismsg_sync(r, "gw-a", 300, &s, &bad);
	if (got == 0)
		ig_redismsg_sync_free(&s);
	ck_assert_msg(got == -1, "taken (meant to be refused for '%s')", why);
	ck_assert_str_eq(bad.kind, kind);
	ck_assert_msg(strstr(bad.why, why), "'%s' does not say '%s'", bad.why, why);
	freeReplyObject(r);
}

START_TEST(strict_numbers_and_names)
{
	long long v;
	double d;
	ck_assert_int_eq(ig_redismsg_int("42", 2, 0, 100, &v), 0);
	ck_assert_int_eq(v, 42);
	ck_assert_int_eq(ig_redismsg_int("-7", 2, -10, 0, &v), 0);
	ck_assert_int_eq(v, -7);
	ck_assert_int_eq(ig_redismsg_int("9223372036854775807", 19, 0, INT64_MAX, &v), 0);
	const char *bad_ints[] = {"", "-", "+1", " 1", "1 ", "1x", "0x10", "1e3", "1.0",
				  "9223372036854775808", "-9223372036854775809", "nan", "101"};
	for (size_t i = 0; i < sizeof(bad_ints) / sizeof(*bad_ints); i++)
		ck_assert_msg(ig_redismsg_int(bad_ints[i], strlen(bad_ints[i]), -100, 100, &v) < 0, "'%s' taken",
			      bad_ints[i]);
	ck_assert_int_eq(ig_redismsg_int("12", 1, 0, 100, &v), 0); /* the length given, not the string's */
	ck_assert_int_eq(v, 1);

	ck_assert_int_eq(ig_redismsg_num("1.500", 5, 0, 10, &d), 0);
	ck_assert_double_eq(d, 1.5);
	ck_assert_int_eq(ig_redismsg_num("2.5e3", 5, 0, 1e4, &d), 0);
	ck_assert_double_eq(d, 2500);
	ck_assert_int_eq(ig_redismsg_num("-0.000", 6, 0, 1, &d), 0); /* Lua's %.3f of -0 */
	const char *bad_nums[] = {"nan", "-nan", "inf", "-inf", "infinity", "1e309", "-1e309", "0x1p3", "",
				  " 1", "1 ", "+1", "1,5", "-1", "11", "1e", "."};
	for (size_t i = 0; i < sizeof(bad_nums) / sizeof(*bad_nums); i++)
		ck_assert_msg(ig_redismsg_num(bad_nums[i], strlen(bad_nums[i]), 0, 10, &d) < 0, "'%s' taken",
			      bad_nums[i]);

	ck_assert(ig_redismsg_name_ok("gw-a", 4));
	ck_assert(ig_redismsg_name_ok("10.0.0.1:8080", 13));
	char long_name[66];
	memset(long_name, 'a', 65);
	long_name[65] = '\0';
	ck_assert(ig_redismsg_name_ok(long_name, 64));
	ck_assert(!ig_redismsg_name_ok(long_name, 65));
	ck_assert(!ig_redismsg_name_ok("", 0));
	ck_assert(!ig_redismsg_name_ok("a b", 3));
	ck_assert(!ig_redismsg_name_ok("a\nb", 3));
	ck_assert(!ig_redismsg_name_ok("../x", 4));
	ck_assert(!ig_redismsg_name_ok("a\0b", 3));
	ck_assert(ig_redismsg_digest_ok(HEX64, 64));
	ck_assert(!ig_redismsg_digest_ok(HEX64, 63));
	ck_assert(!ig_redismsg_digest_ok("0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", 64));

	struct ig_redismsg_field f[3];
	ck_assert_int_eq(ig_redismsg_fields("a bb c", 6, f, 3), 3);
	ck_assert_int_eq((int)f[1].n, 2);
	ck_assert_int_eq(ig_redismsg_fields("a bb c d", 8, f, 3), -1);  /* one too many */
	ck_assert_int_eq(ig_redismsg_fields("a  b", 4, f, 3), -1);      /* an empty field */
	ck_assert_int_eq(ig_redismsg_fields(" a", 2, f, 3), -1);
	ck_assert_int_eq(ig_redismsg_fields("a ", 2, f, 3), -1);
	ck_assert_int_eq(ig_redismsg_fields("", 0, f, 3), -1);
	ck_assert_int_eq(ig_redismsg_fields("a\nb", 3, f, 3), -1);

	char out[12];
	ig_redismsg_shown(out, sizeof(out), "ab\x1b[2Jc\n", 8);
	ck_assert_str_eq(out, "ab?[2Jc?");
	ig_redismsg_shown(out, sizeof(out), "0123456789abcdef", 16);
	ck_assert_str_eq(out, "01234567..."); /* cut, and says so */
}
END_TEST

START_TEST(a_sync_as_an_honest_gateway_writes_it)
{
	struct ig_sync s;
	struct ig_redismsg_bad bad = {0};
	redisReply *r = sync_with(1, "g gw-b\nb http://10.0.0.1:8000 3\nm llama 2\nh llama 4\nk " HEX64
				  " 1 2 3\nk - 0 1 0\nz a line of a newer gateway\n");
	ck_assert_int_eq(ig_redismsg_sync(r, "gw-a", 300, &s, &bad), 0);
	ck_assert(!s.taken);
	ck_assert_int_eq(s.now, NOW);
	ck_assert_int_eq((int)s.nmembers, 3);
	ck_assert_str_eq(s.members[0].name, "gw-a"); /* by name */
	ck_assert_int_eq(s.members[0].score, NOW - 10);
	ck_assert_str_eq(s.members[1].name, "gw-b");
	ck_assert_int_eq((int)s.nstates, 1);
	const struct ig_state *st = &s.states[0];
	struct ig_state_line l[6];
	size_t at = 0, nl = 0;
	ck_assert_str_eq(st->name, "gw-b");
	ck_assert_int_eq((int)st->nkeys, 2);
	while (nl < 6 && ig_redismsg_state_next(st, &at, &l[nl]))
		nl++;
	ck_assert_int_eq((int)nl, 5); /* the newer gateway's line skipped */
	ck_assert_int_eq(l[0].what, 'b');
	ck_assert_str_eq(l[0].name, "http://10.0.0.1:8000");
	ck_assert_int_eq(l[0].v[0], 3);
	ck_assert_str_eq(l[1].name, "llama");
	ck_assert_int_eq(l[2].what, 'h');
	ck_assert_str_eq(l[3].name, HEX64);
	ck_assert_int_eq(l[3].v[0], 1);
	ck_assert_int_eq(l[3].v[1], 2);
	ck_assert_int_eq(l[3].v[2], 3);
	ck_assert_str_eq(l[4].name, "-");
	ck_assert_int_eq(ig_redismsg_state_next(st, &at, &l[5]), 0);
	ig_redismsg_sync_free(&s);
	freeReplyObject(r);

	r = sync_with(0); /* gw-b has no state (yet) */
	ck_assert_int_eq(ig_redismsg_sync(r, "gw-a", 300, &s, &bad), 0);
	ck_assert_int_eq((int)s.nstates, 0);
	ig_redismsg_sync_free(&s);
	freeReplyObject(r);

	r = reply_of(arr(1, integer(-1))); /* the name is another's */
	ck_assert_int_eq(ig_redismsg_sync(r, "gw-a", 300, &s, &bad), 0);
	ck_assert(s.taken);
	ig_redismsg_sync_free(&s);
	freeReplyObject(r);
}
END_TEST

START_TEST(a_sync_written_by_anyone_else_is_refused_whole)
{
	refused_sync(reply_of(integer(3)), IG_BAD_SYNC, "not an array");
	refused_sync(reply_of(arr(1, integer(-2))), IG_BAD_SYNC, "{now, members, states}");
	refused_sync(reply_of(arr(2, integer(NOW), arr(0))), IG_BAD_SYNC, "{now, members, states}");
	refused_sync(reply_of(arr(3, bulk("1700000000000"), arr(2, bulk("gw-a"), score(NOW)), arr(0))), IG_BAD_SYNC,
		     "{now, members, states}");
	refused_sync(reply_of(arr(3, integer(0), arr(2, bulk("gw-a"), score(0)), arr(0))), IG_BAD_SYNC,
		     "clock 0 is out of range");
	refused_sync(reply_of(arr(3, integer(1LL << 53), arr(2, bulk("gw-a"), score(NOW)), arr(0))), IG_BAD_SYNC,
		     "out of range");
	refused_sync(reply_of(arr(3, integer(NOW), arr(0), arr(0))), IG_BAD_SYNC, "members are 0 elements");
	refused_sync(reply_of(arr(3, integer(NOW), arr(3, bulk("gw-a"), score(NOW), bulk("gw-b")), arr(0))),
		     IG_BAD_SYNC, "members are 3 elements");
	refused_sync(reply_of(arr(3, integer(NOW), arr(4, bulk("gw-a"), score(NOW), bulk("gw b"), score(NOW)), arr(0))),
		     IG_BAD_SYNC, "name 'gw b'");
	refused_sync(reply_of(arr(3, integer(NOW), arr(4, bulk("gw-a"), score(NOW), integer(5), score(NOW)), arr(0))),
		     IG_BAD_SYNC, "(a integer)");
	static const char nul_name[] = "*3\r\n:1700000000000\r\n*4\r\n$4\r\ngw-a\r\n$13\r\n1700000000000\r\n"
				       "$4\r\ngw\0b\r\n$13\r\n1700000000000\r\n*0\r\n";
	refused_sync(reply_n(nul_name, sizeof(nul_name) - 1), IG_BAD_SYNC, "is not a gateway's name");
	refused_sync(reply_of(arr(3, integer(NOW), arr(2, bulk("gw-a"), bulk("nan")), arr(0))), IG_BAD_SYNC,
		     "score 'nan'");
	refused_sync(reply_of(arr(3, integer(NOW), arr(2, bulk("gw-a"), bulk("1.7e12")), arr(0))), IG_BAD_SYNC,
		     "score '1.7e12'");
	refused_sync(reply_of(arr(3, integer(NOW), arr(2, bulk("gw-a"), score(NOW + 60001)), arr(0))), IG_BAD_SYNC,
		     "within the last 300 ms (or 60000 ms ahead)");
	refused_sync(reply_of(arr(3, integer(NOW), arr(2, bulk("gw-a"), score(NOW - 301)), arr(0))), IG_BAD_SYNC,
		     "within the last 300 ms");
	refused_sync(reply_of(arr(3, integer(NOW), arr(4, bulk("gw-a"), score(NOW), bulk("gw-a"), score(NOW)), arr(0))),
		     IG_BAD_SYNC, "named twice");
	refused_sync(reply_of(arr(3, integer(NOW), arr(2, bulk("gw-b"), score(NOW)), arr(0))), IG_BAD_SYNC,
		     "do not include this gateway");
	refused_sync(reply_of(arr(3, integer(NOW), arr(2, bulk("gw-a"), score(NOW)), arr(1, bulk("g gw-b\n")))),
		     IG_BAD_SYNC, "1 states for 0 other gateways");
	/* a state: the whole reply goes with it */
	refused_sync(reply_of(arr(3, integer(NOW), arr(4, bulk("gw-a"), score(NOW), bulk("gw-b"), score(NOW)),
				  arr(1, integer(7)))),
		     IG_BAD_SYNC_STATE, "state 0 is a integer");
	refused_sync(sync_with(1, "b http://x 1\n"), IG_BAD_SYNC_STATE, "first line 'b http://x 1'");
	refused_sync(sync_with(1, ""), IG_BAD_SYNC_STATE, "an empty state");
	refused_sync(sync_with(1, "g gw-a\n"), IG_BAD_SYNC_STATE, "this one");
	refused_sync(sync_with(1, "g gw-d\n"), IG_BAD_SYNC_STATE, "not a member");
	refused_sync(sync_with(2, "g gw-b\n", "g gw-b\nb http://x 1"), IG_BAD_SYNC_STATE, "two states");
	refused_sync(sync_with(1, "g gw-b\nb http://x 0\n"), IG_BAD_SYNC_STATE, "'b http://x 0'");
	refused_sync(sync_with(1, "g gw-b\nb http://x -1\n"), IG_BAD_SYNC_STATE, "N from 1 to 1000000000");
	refused_sync(sync_with(1, "g gw-b\nb http://x 1000000001\n"), IG_BAD_SYNC_STATE, "line 2");
	refused_sync(sync_with(1, "g gw-b\nb http://x 9223372036854775807\n"), IG_BAD_SYNC_STATE, "line 2");
	refused_sync(sync_with(1, "g gw-b\nm llama nan\n"), IG_BAD_SYNC_STATE, "'m llama nan'");
	refused_sync(sync_with(1, "g gw-b\nb http://x 1 2\n"), IG_BAD_SYNC_STATE, "line 2");
	refused_sync(sync_with(1, "g gw-b\nb  http://x 1\n"), IG_BAD_SYNC_STATE, "single spaces");
	refused_sync(sync_with(1, "g gw-b\n\nb http://x 1\n"), IG_BAD_SYNC_STATE, "line 2");
	refused_sync(sync_with(1, "g gw-b\nk zz 1 1 1\n"), IG_BAD_SYNC_STATE, "'k DIGEST");
	refused_sync(sync_with(1, "g gw-b\nk " HEX64 " 1 1001 1\n"), IG_BAD_SYNC_STATE, "0 to 1000");
	refused_sync(sync_with(1, "g gw-b\nk " HEX64 " -1 1 1\n"), IG_BAD_SYNC_STATE, "'k DIGEST");
	refused_sync(sync_with(1, "g gw-b\nk " HEX64 " 1 1\n"), IG_BAD_SYNC_STATE, "'k DIGEST");
	refused_sync(sync_with(1, "g gw-b\nB http://x 1\n"), IG_BAD_SYNC_STATE, "of no kind");
	{ /* more key lines than all states may hold (each is kept while they are read) */
		struct ig_buf big;
		ig_buf_init(&big);
		ig_buf_printf(&big, "g gw-b\n");
		for (int i = 0; i <= IG_REDISMSG_KEYS_MAX; i++)
			ig_buf_printf(&big, "k - 1 1 1\n");
		ig_buf_append(&big, "", 1);
		refused_sync(sync_with(1, ig_buf_head(&big)), IG_BAD_SYNC_STATE, "more than 1000000 key lines");
		ig_buf_free(&big);
	}
	refused_sync(sync_with(1, "g gw-b\ng gw-c\n"), IG_BAD_SYNC_STATE, "of no kind");
	/* a NUL inside a state */
	struct ig_state st;
	struct ig_redismsg_bad bad = {0};
	ck_assert_int_eq(ig_redismsg_state("g gw-b\nb x\0 1\n", 14, &st, &bad), -1);
	ck_assert_str_eq(bad.kind, IG_BAD_SYNC_STATE);
	ck_assert_ptr_nonnull(strstr(bad.why, "NUL"));
	/* what a refusal shows of a value is printable */
	ck_assert_int_eq(ig_redismsg_state("g gw-b\nb \x1b[31mx 0\n", 18, &st, &bad), -1);
	ck_assert_ptr_null(strchr(bad.why, '\x1b'));
}
END_TEST

START_TEST(a_keys_figures_are_six_finite_numbers_in_range)
{
	struct ig_key_figures f;
	struct ig_redismsg_bad bad = {0};
	const char *good = "1.000 20.500 3.000 40.000 5.000 6.000";
	ck_assert_int_eq(ig_redismsg_key_figures(good, strlen(good), &f, &bad), 0);
	ck_assert_double_eq(f.mreq, 1);
	ck_assert_double_eq(f.mtok, 20.5);
	ck_assert_double_eq(f.req, 3);
	ck_assert_double_eq(f.tok, 40);
	ck_assert_double_eq(f.lreq, 5);
	ck_assert_double_eq(f.ltok, 6);
	const char *refused[][2] = {
		{"nan 0.000 0.000 0.000 0.000 0.000", "'nan'"},
		{"0.000 0.000 -nan 0.000 0.000 0.000", "'-nan'"},
		{"0.000 0.000 inf 0.000 0.000 0.000", "'inf'"},
		{"0.000 0.000 0.000 0.000 -1e309 0.000", "'-1e309'"},
		{"0.000 0.000 1e309 0.000 0.000 0.000", "'1e309'"},
		{"0.000 0.000 0.000 0.000 -1.000 0.000", "figure 5 '-1.000'"},
		{"0.000 0.000 0.000 0.000 0.000 10000000000001", "figure 6"},
		{"0.000 0.000 0.000 0.000 0.000 0x10", "figure 6 '0x10'"},
		{"1.000 2.000 3.000", "not six numbers"},
		{"1 2 3 4 5 6 7", "not six numbers"},
		{"1  2 3 4 5 6", "not six numbers"},
		{"5.000 0.000 1.000 0.000 0.000 0.000", "less than this gateway's"},
		{"0.000 5.000 0.000 1.000 0.000 0.000", "less than this gateway's"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++) {
		bad.kind = NULL;
		ck_assert_int_eq(ig_redismsg_key_figures(refused[i][0], strlen(refused[i][0]), &f, &bad), -1);
		ck_assert_str_eq(bad.kind, IG_BAD_KEY_SYNC);
		ck_assert_msg(strstr(bad.why, refused[i][1]), "'%s': '%s'", refused[i][0], bad.why);
	}

	/* the reply's shape for 2 keys, and its active keys */
	redisReply *r = reply_of(arr(3, bulk(good), bulk(good), arr(2, bulk(HEX64), bulk(HEX64))));
	ck_assert_int_eq(ig_redismsg_keys(r, 2, &bad), 0);
	ck_assert_int_eq(ig_redismsg_active(r->element[2], 10, &bad), 0);
	ck_assert_int_eq(ig_redismsg_active(r->element[2], 1, &bad), -1); /* more than it may name */
	ck_assert_int_eq(ig_redismsg_keys(r, 1, &bad), -1);
	ck_assert_ptr_nonnull(strstr(bad.why, "3 elements, not an array of 2"));
	freeReplyObject(r);
	r = reply_of(arr(3, bulk(good), integer(1), arr(0)));
	ck_assert_int_eq(ig_redismsg_keys(r, 2, &bad), -1);
	ck_assert_ptr_nonnull(strstr(bad.why, "key 1's figures are a integer"));
	freeReplyObject(r);
	r = reply_of(arr(2, bulk(good), bulk("x")));
	ck_assert_int_eq(ig_redismsg_keys(r, 1, &bad), -1);
	ck_assert_ptr_nonnull(strstr(bad.why, "active keys are a string"));
	freeReplyObject(r);
	r = reply_of(arr(3, bulk(HEX64), bulk("../../etc"), integer(3)));
	ck_assert_int_eq(ig_redismsg_active(r, 10, &bad), -1);
	ck_assert_ptr_nonnull(strstr(bad.why, "active key 1 '../../etc'"));
	freeReplyObject(r);
	r = reply_of(arr(1, integer(3)));
	ck_assert_int_eq(ig_redismsg_active(r, 10, &bad), -1);
	freeReplyObject(r);
}
END_TEST

START_TEST(subscription_frames_and_resp_messages)
{
	struct ig_redismsg_bad bad = {0};
	const char *p = NULL;
	size_t n = 0;
	redisReply *r = reply_of(arr(3, bulk("message"), bulk("infergate:resp"), bulk("gw-b 12 http://b:1 resp_1")));
	ck_assert_int_eq(ig_redismsg_pubsub(r, IG_BAD_RESP, &p, &n, &bad), 1);
	ck_assert_str_eq(p, "gw-b 12 http://b:1 resp_1");
	struct ig_resp_msg m;
	ck_assert_int_eq(ig_redismsg_resp(p, n, &m, &bad), 0);
	ck_assert_str_eq(m.name, "gw-b");
	ck_assert_uint_eq(m.owner, 12);
	ck_assert_str_eq(m.url, "http://b:1");
	ck_assert_str_eq(m.id, "resp_1");
	freeReplyObject(r);
	r = reply_of(arr(3, bulk("subscribe"), bulk("infergate:resp"), integer(1)));
	ck_assert_int_eq(ig_redismsg_pubsub(r, IG_BAD_RESP, &p, &n, &bad), 0);
	freeReplyObject(r);
	redisReply *bad_frames[] = {
		reply_of(arr(3, bulk("message"), integer(5), bulk("x"))),
		reply_of(arr(1, bulk("message"))),
		reply_of(arr(4, bulk("pmessage"), bulk("x"), bulk("y"), bulk("z"))),
		reply_n("*3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$3\r\na\0b\r\n", 33),
		reply_of(arr(3, bulk("message"), bulk("c"), arr(0))),
		reply_of(arr(0)),
		reply_of(integer(1)),
	};
	for (size_t i = 0; i < sizeof(bad_frames) / sizeof(*bad_frames); i++) {
		bad.kind = NULL;
		ck_assert_msg(ig_redismsg_pubsub(bad_frames[i], IG_BAD_DATA, &p, &n, &bad) == -1, "frame %zu", i);
		ck_assert_str_eq(bad.kind, IG_BAD_DATA);
		freeReplyObject(bad_frames[i]);
	}
	char long_id[600];
	snprintf(long_id, sizeof(long_id), "gw-b 1 http://b:1 %0513d", 0);
	const char *refused[][2] = {
		{"gw-b -1 http://b:1 resp_1", "owner"},
		{"gw-b 4294967296 http://b:1 resp_1", "owner"},
		{"gw-b 1e3 http://b:1 resp_1", "owner"},
		{"gw b 1 http://b:1 resp_1", "not 'NAME OWNER URL ID'"},
		{"gw/b 1 http://b:1 resp_1", "not a gateway's name"},
		{"gw-b 1 http://b:1", "not 'NAME OWNER URL ID'"},
		{"gw-b 1 http://b:1 resp_1 more", "not 'NAME OWNER URL ID'"},
		{"gw-b 1 http://b:1 resp\x7f", "printable"},
		{long_id, "an id of 513"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++) {
		bad.kind = NULL;
		ck_assert_int_eq(ig_redismsg_resp(refused[i][0], strlen(refused[i][0]), &m, &bad), -1);
		ck_assert_str_eq(bad.kind, IG_BAD_RESP);
		ck_assert_msg(strstr(bad.why, refused[i][1]), "'%s': '%s'", refused[i][0], bad.why);
	}
}
END_TEST

START_TEST(a_data_messages_envelope)
{
	struct ig_redismsg_bad bad = {0};
	struct ig_data_msg m;
	const char *s = "p gw-b batch_0123456789abcdef01234567 3 1 2";
	ck_assert_int_eq(ig_redismsg_data(s, strlen(s), &m, &bad), 0);
	ck_assert_int_eq(m.kind, 'p');
	ck_assert_str_eq(m.name, "gw-b");
	ck_assert_str_eq(m.rest, "batch_0123456789abcdef01234567 3 1 2");
	ck_assert_int_eq((int)m.restlen, 36);
	char big[700];
	snprintf(big, sizeof(big), "b gw-b %0601d", 0);
	const char *refused[][3] = {
		{"b", IG_BAD_DATA, "not 'KIND NAME ...'"},
		{"B gw-b x", IG_BAD_DATA, "not 'KIND NAME ...'"},
		{"bb gw-b x", IG_BAD_DATA, "not 'KIND NAME ...'"},
		{"b gw-b", IG_BAD_DATA, "not 'KIND NAME ...'"},
		{"b  gw-b x", IG_BAD_DATA, "not a gateway's name"},
		{"b g\x01w x", IG_BAD_DATA, "not a gateway's name"},
		{"b gw-b ", IG_BAD_DATA_BATCH, "fields"},
		{"p gw-b a  b", IG_BAD_DATA_PROGRESS, "fields"},
		{"c gw-b a\nb", IG_BAD_DATA_CANCEL, "fields"},
		{big, IG_BAD_DATA_BATCH, "1 to 600 bytes"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(*refused); i++) {
		bad.kind = NULL;
		ck_assert_int_eq(ig_redismsg_data(refused[i][0], strlen(refused[i][0]), &m, &bad), -1);
		ck_assert_str_eq(bad.kind, refused[i][1]);
		ck_assert_msg(strstr(bad.why, refused[i][2]), "'%s': '%s'", refused[i][0], bad.why);
	}
	ck_assert_str_eq(ig_redismsg_data_kind('f'), IG_BAD_DATA_FILE);
	ck_assert_str_eq(ig_redismsg_data_kind('d'), IG_BAD_DATA_FILE);
	ck_assert_str_eq(ig_redismsg_data_kind('z'), IG_BAD_DATA);
	/* every kind has its series */
	ck_assert_int_eq((int)ig_redismsg_nkinds, 11);
}
END_TEST


/* What the connection logs of a reply it drops (moved from redis.c with
 * ig_redismsg_describe): its shape, strings cut and their quotes masked. */
START_TEST(a_reply_described_for_a_log_line)
{
	char out[200];
	redisReply *r = reply_of(strdup("*5\r\n$7\r\nmessage\r\n:3\r\n$1\r\nx\r\n$-1\r\n+OK\r\n"));
	ig_redismsg_describe(r, out, sizeof(out));
	ck_assert_str_eq(out, "array of 5: bulk \"message\", integer, bulk, nil, ...");
	freeReplyObject(r);
	r = reply_of(strdup("-ERR \"no\" \\ way\r\n"));
	ig_redismsg_describe(r, out, sizeof(out));
	ck_assert_str_eq(out, "error \"ERR ?no? ? way\"");
	freeReplyObject(r);
	r = reply_of(strdup(":12\r\n"));
	ig_redismsg_describe(r, out, sizeof(out));
	ck_assert_str_eq(out, "integer");
	freeReplyObject(r);
	ig_redismsg_quoted(out, sizeof(out), 4, "abcdefghij", 10);
	ck_assert_uint_le(strlen(out), 8);
}
END_TEST

IG_CHECK_MAIN("redismsg", strict_numbers_and_names, a_sync_as_an_honest_gateway_writes_it,
	      a_sync_written_by_anyone_else_is_refused_whole, a_keys_figures_are_six_finite_numbers_in_range,
	      subscription_frames_and_resp_messages, a_data_messages_envelope, a_reply_described_for_a_log_line)
