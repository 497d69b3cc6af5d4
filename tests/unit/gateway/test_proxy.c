/* Unit tests for the request object's pure logic (src/gateway/proxy.c,
 * included to reach its static functions): hop-by-hop filtering, usage and
 * error events in streams (SSE framing), whole-event relaying, the queue. */
#include "../../../src/gateway/proxy.c"

#include <check.h>

#include "../check_main.h"

/* A request as proxy.c holds it while a stream comes in. */
static struct ig_req *stream_req(struct ig_gw *gw)
{
	struct ig_req *req = calloc(1, sizeof(*req));
	ck_assert_ptr_nonnull(req);
	req->gw = gw;
	req->stream = true;
	req->sse = true;
	req->up_status = 200;
	req->prompt_tokens = req->completion_tokens = -1;
	ig_buf_init(&req->resp);
	ig_sse_init(&req->sse_lines);
	return req;
}

static void stream_req_free(struct ig_req *req)
{
	ig_buf_free(&req->resp);
	ig_sse_free(&req->sse_lines);
	free(req->stream_error_msg);
	free(req);
}

/* What on_body does with a chunk, without curl: append, scan, mark. */
static void feed(struct ig_req *req, const char *s)
{
	size_t before = ig_buf_pending(&req->resp), n = strlen(s);
	ck_assert_int_eq(ig_buf_append(&req->resp, s, n), 0);
	size_t changed = scan_sse(req, s, n);
	mark_ready(req, changed < before ? changed : before);
}

START_TEST(hop_by_hop_headers_are_not_relayed)
{
	const char *hop[] = {"Connection", "keep-alive", "Transfer-Encoding", "TE", "Upgrade", "Host",
			     "Content-Length", "Proxy-Authorization", "X-Request-Id", "Date"};
	for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
		ck_assert_msg(is_hop_by_hop(hop[i], strlen(hop[i])), "%s relayed", hop[i]);
	const char *end[] = {"Content-Type", "Authorization", "X-Custom", "Cache-Control", "Te-Extra"};
	for (size_t i = 0; i < sizeof(end) / sizeof(end[0]); i++)
		ck_assert_msg(!is_hop_by_hop(end[i], strlen(end[i])), "%s dropped", end[i]);
	/* Only the name's bytes count: "Connection: x" as name "Connection". */
	ck_assert(is_hop_by_hop("Connection: close", 10));
}
END_TEST

START_TEST(usage_is_read_from_the_last_usage_key)
{
	struct ig_gw gw = {0};
	struct ig_req *req = stream_req(&gw);
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
			struct ig_gw gw = {0};
			struct ig_req *req = stream_req(&gw);
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
	struct ig_gw gw = {0};
	struct ig_req *req = stream_req(&gw);
	feed(req, text);
	ck_assert_uint_eq(req->stream_error, 400);
	ck_assert_int_eq(strncmp(req->stream_error_msg, "Requested token count exceeds", 29), 0);
	ck_assert_uint_eq(ig_buf_pending(&req->resp), len); /* unchanged */
	ck_assert_int_eq(memcmp(ig_buf_head(&req->resp), text, len), 0);
	stream_req_free(req);
	free(text);

	req = stream_req(&gw);
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
	struct ig_gw gw = {0};
	struct ig_req *req = stream_req(&gw);
	feed(req, "data: {\"a\":1}\n\ndata: {\"b\":");
	const char *whole = "data: {\"a\":1}\n\n", *err = "data: {\"error\":{";
	ck_assert_uint_eq(req->ready, strlen(whole));
	end_stream_with_error(req, "the backend failed");
	const char *out = ig_buf_head(&req->resp);
	ck_assert_int_eq(strncmp(out, whole, strlen(whole)), 0);
	ck_assert_int_eq(strncmp(out + strlen(whole), err, strlen(err)), 0);
	ck_assert_ptr_null(strstr(out, "{\"b\":"));
	ck_assert_uint_eq(req->stream_error, 502);
	ck_assert(req->upstream_failed);
	stream_req_free(req);
}
END_TEST

/* Requests wait in FIFO order while every backend is at its limit, a full
 * queue answers 429, and a freed slot starts the oldest first. */
START_TEST(queue_is_fifo_and_bounded)
{
	struct ig_conf cfg = {0};
	struct ig_gw gw = {0};
	cfg.queue_size = 2;
	cfg.queue_timeout_ms = 60000;
	cfg.policy = IG_POLICY_LEAST_LOADED;
	gw.cfg = &cfg;
	ig_list_init(&gw.reqs);
	ig_list_init(&gw.queue);
	struct ig_backend *b = ig_backend_pool_add(&gw.pool, "http://127.0.0.1:9", 1, 1);
	ck_assert_ptr_nonnull(b);
	atomic_store(&b->state, IG_BACKEND_UP);
	atomic_store(&b->inflight, 1); /* its one slot is taken */

	struct ig_req r[3];
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 3; i++) {
		r[i].gw = &gw;
		ig_list_init(&r[i].qlink);
	}
	ck_assert_int_eq(route(&r[0]), ROUTE_QUEUED);
	ck_assert_int_eq(route(&r[1]), ROUTE_QUEUED);
	ck_assert_int_eq(route(&r[2]), ROUTE_FAILED);
	ck_assert_uint_eq(r[2].err_status, 429);
	ck_assert_uint_eq(gw.qlen, 2);
	ck_assert_uint_eq(gw.stats.queue_rejected, 1);
	ck_assert_ptr_eq(IG_LIST_FIRST(&gw.queue, struct ig_req, qlink), &r[0]);

	/* The first to leave its place is not the head: order holds. */
	dequeue(&r[0]);
	ck_assert_ptr_eq(IG_LIST_FIRST(&gw.queue, struct ig_req, qlink), &r[1]);
	ck_assert_uint_eq(gw.qlen, 1);
	/* The backend goes away while it waits: 503, not a hang. */
	atomic_store(&b->state, IG_BACKEND_DOWN);
	ig_proxy_drain_queue(&gw);
	ck_assert_uint_eq(gw.qlen, 0);
	ck_assert_uint_eq(r[1].err_status, 503);
	ck_assert(ig_list_empty(&gw.queue));
	free(r[1].err_body);
	free(r[2].err_body);
	ig_backend_pool_free(&gw.pool);
}
END_TEST

IG_CHECK_MAIN("proxy", hop_by_hop_headers_are_not_relayed,
	      usage_is_read_from_the_last_usage_key, sse_usage_with_any_framing_split_anywhere,
	      sse_error_events_count_and_flat_ones_are_rewritten,
	      torn_event_is_replaced_by_an_error_event, queue_is_fifo_and_bounded)
