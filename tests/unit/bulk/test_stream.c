/* Unit tests for src/bulk/stream.c: a streamed chat answer rebuilt into the
 * body a non-streamed request gets, across any split of its bytes; an
 * incomplete or erroring stream told apart.
 * Moved from tests/unit/bulk/test_bulk.c unchanged; the bulk client's .c
 * files are included, as there, so static functions can be tested. */
#include "config.h"
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/batchfile/corpus.c"
#include "../../../src/batchfile/idset.c"
#include "../../../src/batchfile/journal.c"
#include "../../../src/bulk/stream.c"
#include "../../../src/bulk/report.c"
#include "../../../src/bulk/progress.c"
#include "../../../src/bulk/generate.c"
#include "../../../src/bulk/scheduler.c"
#include "../../../src/bulk/autoconc.c"
#include "../../../src/bulk/merge.c"
#include "../../../src/bulk/submit.c"
#include "../../../src/bulk/submit_flags.c"
#define main bulk_main
#include "../../../src/bulk/main.c"
#include "../check_main.h"
#undef main

static const char *chat_sse =
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\","
	"\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"},\"finish_reason\":null}]}\r\n\r\n"
	": a comment\n\n"
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
	"data: [DONE]\n\n";

START_TEST(sse_rebuilds_chat_body_across_splits)
{
	size_t n = strlen(chat_sse);
	for (size_t step = 1; step <= n; step += (step < 8 ? 1 : 37)) {
		struct ig_stream s;
		int firsts = 0;
		const char *why = NULL;
		ig_stream_init(&s);
		for (size_t off = 0; off < n; off += step)
			firsts += ig_stream_feed(&s, chat_sse + off, off + step > n ? n - off : step);
		ck_assert_int_eq(firsts, 1);
		json_t *b = ig_stream_body(&s, IG_EP_CHAT, &why);
		ck_assert_ptr_nonnull(b);
		ck_assert_str_eq(json_string_value(json_object_get(b, "object")), "chat.completion");
		ck_assert_str_eq(json_string_value(json_object_get(b, "id")), "c1");
		json_t *c = json_array_get(json_object_get(b, "choices"), 0);
		ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "message"), "content")), "Hello \xc3\xa9");
		ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "stop");
		ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(b, "usage"), "completion_tokens")), 2);
		json_decref(b);
		ig_stream_free(&s);
	}
}
END_TEST

START_TEST(sse_incomplete_or_error_stream)
{
	struct ig_stream s;
	const char *why = NULL;
	ig_stream_init(&s);
	ig_stream_feed(&s, "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n", 44);
	ck_assert_ptr_null(ig_stream_body(&s, IG_EP_COMPLETIONS, &why));
	ck_assert_ptr_nonnull(strstr(why, "[DONE]"));
	ig_stream_feed(&s, "data: [DONE]\n", 13);
	json_t *b = ig_stream_body(&s, IG_EP_COMPLETIONS, &why);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(b, "choices"), 0), "text")), "a");
	ck_assert_str_eq(json_string_value(json_object_get(b, "object")), "text_completion");
	json_decref(b);
	ig_stream_free(&s);

	ig_stream_init(&s);
	ig_stream_feed(&s, "data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", 50);
	ck_assert_ptr_null(ig_stream_body(&s, IG_EP_CHAT, &why));
	ck_assert_ptr_nonnull(strstr(why, "error"));
	ig_stream_free(&s);
}
END_TEST

IG_CHECK_MAIN("stream", sse_rebuilds_chat_body_across_splits, sse_incomplete_or_error_stream)
