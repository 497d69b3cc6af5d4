/* Unit tests for the SSE line splitter (src/common/sse.c) and the list
 * (include/infergate/list.h): the primitives every program shares. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/buf.h"
#include "infergate/list.h"
#include "infergate/sse.h"
#include "../check_main.h"

/* Collects data lines as "payload|line_len|rest;" */
static void collect(void *arg, const char *d, size_t n, size_t line_len, size_t rest)
{
	struct ig_buf *out = arg;
	if (d)
		ig_buf_append(out, d, n);
	else
		ig_buf_printf(out, "(overlong)");
	ig_buf_printf(out, "|%zu|%zu;", line_len, rest);
}

START_TEST(data_lines_with_any_framing)
{
	struct ig_sse s;
	struct ig_buf out;
	ig_sse_init(&s);
	ig_buf_init(&out);
	const char *in = "data: a\n: comment\nevent: x\ndata:b\r\n\r\ndata:\n\ndata:  two spaces\nid: 1\n";
	ck_assert_int_eq(ig_sse_feed(&s, in, strlen(in), collect, &out), 0);
	ig_buf_append(&out, "", 1);
	/* One space is the separator, a second is data; CR is not data. */
	ck_assert_str_eq(out.data, "a|7|60;b|7|33;|5|25; two spaces|17|6;");
	ig_buf_free(&out);
	ig_sse_free(&s);
}
END_TEST

START_TEST(lines_split_at_every_byte)
{
	const char *in = "data: {\"x\": 1}\r\n\r\ndata:[DONE]\n\n";
	size_t n = strlen(in);
	for (size_t cut = 0; cut <= n; cut++) {
		struct ig_sse s;
		struct ig_buf out;
		ig_sse_init(&s);
		ig_buf_init(&out);
		ig_sse_feed(&s, in, cut, collect, &out);
		ig_sse_feed(&s, in + cut, n - cut, collect, &out);
		ig_buf_append(&out, "", 1);
		/* rest counts bytes after the line's LF in the feed that ended it. */
		char *a = strstr(out.data, "{\"x\": 1}|15|"), *b = strstr(out.data, "[DONE]|11|");
		ck_assert_msg(a && b && a < b, "cut %zu: %s", cut, out.data);
		ig_buf_free(&out);
		ig_sse_free(&s);
	}
}
END_TEST

START_TEST(overlong_lines_are_bounded)
{
	struct ig_sse s;
	struct ig_buf out;
	ig_sse_init(&s);
	ig_buf_init(&out);
	size_t big = IG_SSE_MAX_LINE + 100;
	char *line = malloc(big);
	memcpy(line, "data: ", 6);
	memset(line + 6, 'x', big - 6);
	/* Across many feeds: memory stays at the cap, the line is reported. */
	for (size_t off = 0; off < big; off += 4096)
		ig_sse_feed(&s, line + off, off + 4096 > big ? big - off : 4096, collect, &out);
	ck_assert_uint_le(s.line.cap, 2 * (size_t)IG_SSE_MAX_LINE);
	ig_sse_feed(&s, "\ndata: ok\n", 10, collect, &out);
	/* In one feed. */
	char *two = malloc(big + 1);
	memcpy(two, line, big);
	two[big] = '\n';
	ig_sse_feed(&s, two, big + 1, collect, &out);
	ig_buf_append(&out, "", 1);
	char want[128];
	snprintf(want, sizeof(want), "(overlong)|%zu|9;ok|8|0;(overlong)|%zu|0;", big, big);
	ck_assert_str_eq(out.data, want);
	free(line);
	free(two);
	ig_buf_free(&out);
	ig_sse_free(&s);
}
END_TEST

struct item {
	int v;
	struct ig_list link;
};

START_TEST(list_order_and_safe_delete)
{
	struct ig_list head;
	struct item it[4], *p, *tmp;
	ig_list_init(&head);
	ck_assert(ig_list_empty(&head));
	ck_assert_ptr_null(IG_LIST_FIRST(&head, struct item, link));
	for (int i = 0; i < 4; i++) {
		it[i].v = i;
		ig_list_init(&it[i].link);
		ck_assert(!ig_list_linked(&it[i].link));
	}
	ig_list_append(&head, &it[1].link);
	ig_list_append(&head, &it[2].link);
	ig_list_insert(&head, &it[0].link);
	ig_list_append(&head, &it[3].link);
	int want = 0;
	IG_LIST_FOREACH(p, &head, struct item, link)
		ck_assert_int_eq(p->v, want++);
	ck_assert_int_eq(want, 4);
	IG_LIST_FOREACH_SAFE(p, tmp, &head, struct item, link)
		if (p->v % 2 == 0)
			ig_list_del(&p->link);
	ig_list_del(&it[0].link); /* twice: harmless */
	ck_assert(!ig_list_linked(&it[0].link));
	ck_assert_int_eq(IG_LIST_FIRST(&head, struct item, link)->v, 1);
	ig_list_del(&it[1].link);
	ig_list_del(&it[3].link);
	ck_assert(ig_list_empty(&head));
}
END_TEST

IG_CHECK_MAIN("sse", data_lines_with_any_framing, lines_split_at_every_byte,
	      overlong_lines_are_bounded, list_order_and_safe_delete)
