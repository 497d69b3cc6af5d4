/* Unit tests for the relay (src/gateway/path/relay.c, included to reach its
 * static functions): hop-by-hop filtering, usage and error events in
 * streams (SSE framing), whole-event relaying, a hidden usage event. */
#include "../../../../src/gateway/path/relay.c"

#include <check.h>

#include "../../check_main.h"

static void nothing(struct ig_relay *r IG_UNUSED)
{
}

static void stored_nothing(struct ig_relay *r IG_UNUSED, json_t *o IG_UNUSED)
{
}

static const struct ig_relay_ops ops = {nothing, nothing, nothing, nothing, stored_nothing, NULL, NULL};

/* A relay as a chat stream comes in. */
static struct ig_relay *stream_req(void)
{
	struct ig_relay *r = calloc(1, sizeof(*r));
	ck_assert_ptr_nonnull(r);
	ig_relay_init(r, &ops);
	r->stream = true;
	r->sse = true;
	r->up_status = 200;
	return r;
}

static void stream_req_free(struct ig_relay *r)
{
	ig_relay_free(r);
	free(r);
}

/* What on_body does with a chunk, without curl: append, scan, mark. */
static void feed(struct ig_relay *r, const char *s)
{
	ck_assert_int_eq(append_stream(r, s, strlen(s)), 0);
}

START_TEST(hop_by_hop_headers_are_not_relayed)
{
	const char *hop[] = {"Connection", "keep-alive", "Transfer-Encoding", "TE", "Upgrade", "Host",
			     "Content-Length", "Proxy-Authorization", "X-Request-Id", "Date"};
	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		ck_assert_msg(ig_relay_hop_by_hop(hop[i], strlen(hop[i])), "%s relayed", hop[i]);
	const char *end[] = {"Content-Type", "Authorization", "X-Custom", "Cache-Control", "Te-Extra"};
	for (size_t i = 0; i < sizeof(end) / sizeof(end[0]); i++)
		ck_assert_msg(!ig_relay_hop_by_hop(end[i], strlen(end[i])), "%s dropped", end[i]);
	/* Only the name's bytes count: "Connection: x" as name "Connection". */
	ck_assert(ig_relay_hop_by_hop("Connection: close", 10));
}
END_TEST

START_TEST(usage_is_read_from_the_last_usage_key)
{
		struct ig_relay *req = stream_req();
	const char *body = "{\"choices\":[{\"text\":\"\\\"usage\\\": {\\\"prompt_tokens\\\": 99}\"}],"
			   "\"usage\": {\"prompt_tokens\": 7, \"completion_tokens\": 5}}";
	usage_from_json(req, body, strlen(body));
	ck_assert_int_eq(req->prompt_tokens, 7);
	ck_assert_int_eq(req->completion_tokens, 5);
	req->prompt_tokens = req->completion_tokens = -1;
	usage_from_json(req, "{\"usage\": null}", 15);
	ck_assert_int_eq(req->prompt_tokens, -1);
	stream_req_free(req);
}
END_TEST

/* data: with and without the space, CRLF and LF, events torn at every byte:
 * usage is found and only whole events are ready to relay. */
START_TEST(sse_usage_with_any_framing_split_anywhere)
{
	const char *streams[] = {
		"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
		"data: [DONE]\n\n",
		"data:{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n"
		"data:{\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\r\n\r\n"
		"data:[DONE]\r\n\r\n",
	};
	for (size_t k = 0; k < 2; k++) {
		const char *s = streams[k];
		size_t n = strlen(s);
		for (size_t cut = 1; cut < n; cut++) {
						struct ig_relay *req = stream_req();
			char *a = strndup(s, cut);
			feed(req, a);
			/* Ready bytes always end a whole event. */
			const char *h = ig_buf_head(&req->resp);
			if (req->ready)
				ck_assert_msg(h[req->ready - 1] == '\n' && (h[req->ready - 2] == '\n' ||
					      (h[req->ready - 2] == '\r' && h[req->ready - 3] == '\n')),
					      "stream %zu cut %zu: ready ends mid-event", k, cut);
			feed(req, s + cut);
			ck_assert_msg(req->prompt_tokens == 3 && req->completion_tokens == 2,
				      "stream %zu cut at %zu: usage %ld/%ld", k, cut, req->prompt_tokens,
				      req->completion_tokens);
			ck_assert_uint_eq(req->ready, n);
			ck_assert_uint_eq(req->stream_error, 0);
			free(a);
			stream_req_free(req);
		}
	}
}
END_TEST

/* A 200 stream that fails: the request counts as the error's status
 * (tests/fixtures/sglang-error-stream.sse, OpenAI's nested shape, is
 * relayed as it is); an event in SGLang's flat shape is rewritten into
 * OpenAI's in the bytes the client gets, the events around it untouched. */
START_TEST(sse_error_events_count_and_flat_ones_are_rewritten)
{
	size_t len;
	char *text = ig_fixture("sglang-error-stream.sse", &len);
		struct ig_relay *req = stream_req();
	feed(req, text);
	ck_assert_uint_eq(req->stream_error, 400);
	ck_assert_int_eq(strncmp(req->stream_error_msg, "Requested token count exceeds", 29), 0);
	ck_assert_uint_eq(ig_buf_pending(&req->resp), len); /* unchanged */
	ck_assert_int_eq(memcmp(ig_buf_head(&req->resp), text, len), 0);
	stream_req_free(req);
	free(text);

	req = stream_req();
	feed(req, "data: {\"x\":1}\n\n"
		  "data:{\"object\":\"error\",\"message\":\"boom\",\"type\":\"BadRequestError\",\"param\":null,"
		  "\"code\":400}\r\n\r\ndata: [DONE]\n\n");
	ck_assert_uint_eq(req->stream_error, 400);
	const char *out = ig_buf_head(&req->resp);
	size_t n = ig_buf_pending(&req->resp);
	char *copy = strndup(out, n);
	const char *head = "data: {\"x\":1}\n\ndata: {\"error\":{\"message\":\"boom\",";
	ck_assert_msg(strncmp(copy, head, strlen(head)) == 0, "got: %s", copy);
	const char *tail = "\n\r\ndata: [DONE]\n\n";
	ck_assert_msg(n > strlen(tail) && strcmp(copy + n - strlen(tail), tail) == 0, "tail: %s", copy);
	ck_assert_uint_eq(req->ready, n);
	free(copy);
	stream_req_free(req);
}
END_TEST

/* A backend that dies mid-event: the torn event is dropped, an error event
 * follows the whole ones. */
START_TEST(torn_event_is_replaced_by_an_error_event)
{
		struct ig_relay *req = stream_req();
	feed(req, "data: {\"a\":1}\n\ndata: {\"b\":");
	const char *whole = "data: {\"a\":1}\n\n", *err = "data: {\"error\":{";
	ck_assert_uint_eq(req->ready, strlen(whole));
	ig_relay_fail_stream(req, "the backend failed");
	const char *out = ig_buf_head(&req->resp);
	ck_assert_int_eq(strncmp(out, whole, strlen(whole)), 0);
	ck_assert_int_eq(strncmp(out + strlen(whole), err, strlen(err)), 0);
	ck_assert_ptr_null(strstr(out, "{\"b\":"));
	ck_assert_uint_eq(req->stream_error, 502);
	ck_assert(req->upstream_failed);
	stream_req_free(req);
}
END_TEST

/* SGLang's stream with include_usage (the gateway added it): the client
 * gets the stream it asked for, without the usage event, in whatever
 * pieces the bytes come; the gateway still reads the usage. */
#define CHUNK(x) "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" x "\"}}]}\n\n"
#define USAGE_EV "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\n"
START_TEST(an_added_usage_event_is_taken_out)
{
	const char *stream = CHUNK("a") CHUNK("b") USAGE_EV "data: [DONE]\n\n";
	const char *want = CHUNK("a") CHUNK("b") "data: [DONE]\n\n";
	size_t n = strlen(stream);
	/* every split point of the stream into two pieces */
	for (size_t cut = 0; cut <= n; cut++) {
				struct ig_relay *req = stream_req();
		req->usage_added = true;
		char *a = strndup(stream, cut);
		feed(req, a);
		feed(req, stream + cut);
		free(a);
		ck_assert_msg(ig_buf_pending(&req->resp) == strlen(want) &&
			      memcmp(ig_buf_head(&req->resp), want, strlen(want)) == 0,
			      "cut %zu: got '%.*s'", cut, (int)ig_buf_pending(&req->resp), ig_buf_head(&req->resp));
		ck_assert_int_eq(req->prompt_tokens, 7);
		ck_assert_int_eq(req->completion_tokens, 2);
		stream_req_free(req);
	}
	/* A client that asked for usage gets it. */
		struct ig_relay *req = stream_req();
	feed(req, stream);
	ck_assert_uint_eq(ig_buf_pending(&req->resp), n);
	stream_req_free(req);
}
END_TEST

/* OpenAI's own shape puts "usage": null on every other chunk; with CRLF
 * line ends too. */
START_TEST(usage_null_members_are_taken_out)
{
		struct ig_relay *req = stream_req();
	req->usage_added = true;
	feed(req, "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"}}],\"usage\":null}\r\n\r\n"
		  "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1}}\r\n");
	feed(req, "\r\ndata: [DONE]\r\n\r\n");
	const char *want = "data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r\n\r\n"
			   "data: [DONE]\r\n\r\n";
	ck_assert_uint_eq(ig_buf_pending(&req->resp), strlen(want));
	ck_assert(memcmp(ig_buf_head(&req->resp), want, strlen(want)) == 0);
	ck_assert_int_eq(req->completion_tokens, 1);
	stream_req_free(req);
}
END_TEST


IG_CHECK_MAIN("relay", an_added_usage_event_is_taken_out, usage_null_members_are_taken_out,
	      hop_by_hop_headers_are_not_relayed,
	      usage_is_read_from_the_last_usage_key, sse_usage_with_any_framing_split_anywhere,
	      sse_error_events_count_and_flat_ones_are_rewritten,
	      torn_event_is_replaced_by_an_error_event)
