/* Unit tests for src/gateway/core/entry.c (included to reach its static
 * functions): the framing check run over a request's headers before its
 * body is read, and the path tests. What a client receives for each path
 * and refusal is test_server.c's, through the access handler. */
#include "../../../../src/gateway/core/entry.c"

#include <check.h>

#include "../../check_main.h"

/* One header line given to check_header as libmicrohttpd leaves it in
 * its read buffer: the colon made a NUL, the value after the blanks. */
static enum MHD_Result line(struct framing *f, const char *text)
{
	static char buf[256];
	snprintf(buf, sizeof(buf), "%s", text);
	char *colon = strchr(buf, ':'), *value = colon + 1;
	*colon = '\0';
	while (*value == ' ' || *value == '\t')
		value++;
	return check_header(f, MHD_HEADER_KIND, buf, strlen(buf), value, strlen(value));
}

START_TEST(the_framing_check_itself)
{
	/* check_header is MHD's iterator over the request's headers */
	struct framing f = {0, 0, 0, NULL};
	line(&f, "Content-Length: 12");
	line(&f, "transfer-encoding:chunked");
	ck_assert_int_eq(f.content_lengths, 1);
	ck_assert_int_eq(f.transfer_encodings, 1);
	ck_assert_int_eq(f.bad, 0);
	line(&f, "Transfer-Encoding: gzip, chunked");
	ck_assert_int_eq(f.bad, 1);
	ck_assert_str_eq(f.why, "a Transfer-Encoding other than chunked");

	struct framing g = {0, 0, 0, NULL};
	line(&g, "X(y): 1");
	ck_assert_str_eq(g.why, "a header name that is not a token");
	struct framing h = {0, 0, 0, NULL};
	line(&h, "X-Tab: a\tb"); /* a tab is fine */
	line(&h, "X-Blanks: \t  \t v"); /* and blanks before the value */
	line(&h, "X-Empty:");
	ck_assert_int_eq(h.bad, 0);
	line(&h, "X-Del: a\x7f");
	ck_assert_str_eq(h.why, "a control character in a header value");

	/* obs-fold, as libmicrohttpd 0.9.75 joins it: the continuation on the
	 * name (moved to a block of its own, or written over the line in
	 * place), the value left where the first line had it */
	char pool[] = "Transfer-Encoding\0 chunked\0Transfer-Encodingx"; /* the line, then the new block */
	struct framing k = {0, 0, 0, NULL};
	ck_assert_int_eq(check_header(&k, MHD_HEADER_KIND, pool + 27, 18, pool + 19, 7), MHD_NO);
	ck_assert_str_eq(k.why, "a folded header line (obs-fold)");
	char in_place[] = "X-Acont\0nt";
	struct framing m = {0, 0, 0, NULL};
	check_header(&m, MHD_HEADER_KIND, in_place, 7, in_place + 5, 2);
	ck_assert_str_eq(m.why, "a folded header line (obs-fold)");
	char after_blank[] = "X-A\0 junk v";
	struct framing n = {0, 0, 0, NULL};
	check_header(&n, MHD_HEADER_KIND, after_blank, 3, after_blank + 10, 1);
	ck_assert_str_eq(n.why, "a folded header line (obs-fold)");
	struct framing o = {0, 0, 0, NULL};
	line(&o, " X-A: v"); /* a fold of the request line */
	ck_assert_str_eq(o.why, "a folded header line (obs-fold)");

	ck_assert(admin_path("/admin") && admin_path("/admin/backends") && !admin_path("/administer"));
	ck_assert(batches_path("/v1/batches") && batches_path("/v1/batches/b1/cancel") && !batches_path("/v1/batchesx"));
}
END_TEST

IG_CHECK_MAIN("entry", the_framing_check_itself)
