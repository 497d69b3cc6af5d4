/* Unit tests for the request object's pure logic (src/gateway/proxy.c,
 * included to reach its static functions): hop-by-hop filtering, usage and
 * error events in streams (SSE framing), whole-event relaying, the queue. */
#include "../../../src/gateway/proxy.c"

#include <check.h>

#include "../check_main.h"

/* A configuration with the built-in routes, for a gateway that has none. */
static struct ig_conf *routes_cfg(void)
{
	static struct ig_conf cfg;
	if (!cfg.routes.n)
		ig_routes_default(&cfg.routes);
	return &cfg;
}

/* A request as proxy.c holds it while a stream comes in (a chat one). */
static struct ig_req *stream_req(struct ig_gw *gw)
{
	struct ig_req *req = calloc(1, sizeof(*req));
	ck_assert_ptr_nonnull(req);
	if (!gw->cfg)
		gw->cfg = routes_cfg();
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
	ck_assert_int_eq(append_stream(req, s, strlen(s)), 0);
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

/* A gateway with two backends: one serving model-a (its one slot taken),
 * one serving model-b (free). */
struct two {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx;             /* its one reactor, this thread's */
	struct ig_backend *a, *b;
};

static void two_init(struct two *t)
{
	static char *ma[] = {"model-a"}, *mb[] = {"model-b"};
	memset(t, 0, sizeof(*t));
	t->cfg.queue_size = 2;
	t->cfg.queue_timeout_ms = 60000;
	t->cfg.policy = IG_POLICY_LEAST_LOADED;
	t->gw.cfg = &t->cfg;
	t->gw.rx = &t->rx;
	t->gw.nrx = 1;
	t->rx.gw = &t->gw;
	ig_list_init(&t->rx.reqs);
	ig_list_init(&t->rx.to_watch);
	ig_list_init(&t->rx.posted);
	ig_list_init(&t->rx.jobs);
	ig_rx_self = &t->rx;
	ig_sched_init(&t->gw.sched);
	t->a = ig_backend_pool_add(&t->gw.pool, "http://127.0.0.1:9", 1, 1);
	t->b = ig_backend_pool_add(&t->gw.pool, "http://127.0.0.1:10", 1, 1);
	ck_assert_int_eq(ig_backend_set_models(t->a, ma, 1), 0);
	ck_assert_int_eq(ig_backend_set_models(t->b, mb, 1), 0);
	atomic_store(&t->a->state, IG_BACKEND_UP);
	atomic_store(&t->b->state, IG_BACKEND_UP);
	atomic_store(&t->a->inflight, 1); /* its one slot is taken */
	ck_assert_int_eq(ig_sched_rebuild(&t->gw.sched, &t->gw.pool), 0);
}

static void two_free(struct two *t)
{
	ig_sched_free(&t->gw.sched);
	ig_backend_pool_free(&t->gw.pool);
}

static void req_init(struct two *t, struct ig_req *r, const char *model)
{
	memset(r, 0, sizeof(*r));
	r->gw = &t->gw;
	r->rx = &t->rx;
	ig_list_init(&r->post_link);
	ig_list_init(&r->wait.link);
	r->wait.klass = IG_CLASS_NORMAL;
	r->wait.key = ig_sched_key(&t->gw.sched, "");
	r->wait.key->refs++;
	r->model = (char *)model;
	r->m = ig_sched_get(&t->gw.sched, &t->gw.pool, model);
	ck_assert_ptr_nonnull(r->m);
	ig_sched_hold(r->m);
}

/* Requests wait in FIFO order while every backend of their model is at its
 * limit, a full queue answers 429, and a freed slot starts the oldest
 * first. */
START_TEST(queue_is_fifo_and_bounded)
{
	struct two t;
	two_init(&t);
	struct ig_model *ma = ig_sched_find(&t.gw.sched, "model-a");
	ck_assert_ptr_nonnull(ma);
	ck_assert_uint_eq(ma->nbackends, 1);

	struct ig_req r[3];
	for (int i = 0; i < 3; i++)
		req_init(&t, &r[i], "model-a");
	ck_assert_int_eq(route(&r[0]), ROUTE_QUEUED);
	ck_assert_int_eq(route(&r[1]), ROUTE_QUEUED);
	ck_assert_int_eq(route(&r[2]), ROUTE_FAILED);
	ck_assert_uint_eq(r[2].err_status, 429);
	ck_assert_uint_eq(t.gw.qlen, 2);
	ck_assert_uint_eq(ma->qlen, 2);
	ck_assert_uint_eq(t.gw.stats.queue_rejected, 1);
	ck_assert_ptr_eq(ig_sched_next(&t.gw.sched, ma), &r[0].wait);

	/* The first to leave its place is not the head: order holds. */
	dequeue(&r[0]);
	ck_assert_ptr_eq(ig_sched_next(&t.gw.sched, ma), &r[1].wait);
	ck_assert_uint_eq(t.gw.qlen, 1);
	/* The backend goes away while it waits: 503, not a hang. */
	atomic_store(&t.a->state, IG_BACKEND_DOWN);
	ig_proxy_drain_queue(&t.gw);
	ck_assert_uint_eq(t.gw.qlen, 0);
	ck_assert_uint_eq(r[1].err_status, 503);
	ck_assert_uint_eq(ma->qlen, 0);
	free(r[1].err_body);
	free(r[2].err_body);
	two_free(&t);
}
END_TEST

/* model-a's queue is full; a model-b request is not queued behind it, and
 * a name no backend serves is refused with 404 (every list is known). */
START_TEST(models_have_their_own_pools_and_queues)
{
	struct two t;
	two_init(&t);
	struct ig_req a[2], b, x;
	for (int i = 0; i < 2; i++) {
		req_init(&t, &a[i], "model-a");
		ck_assert_int_eq(route(&a[i]), ROUTE_QUEUED);
	}
	req_init(&t, &b, "model-b");
	/* Picking starts the transfer: stop before, by taking b's slot too,
	 * and see the request wait in model-b's own queue. */
	atomic_store(&t.b->inflight, 1);
	ck_assert_int_eq(route(&b), ROUTE_QUEUED);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-b")->qlen, 1);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-a")->qlen, 2);
	/* model-b's backend frees up: the drain starts its request although
	 * model-a's head, first in the table, still cannot start. */
	t.rx.multi = curl_multi_init();
	atomic_store(&t.b->inflight, 0);
	ig_proxy_drain_queue(&t.gw);
	ck_assert(b.xfer.running);
	ck_assert_ptr_eq(b.backend, t.b);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-a")->qlen, 2);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-b")->qlen, 0);
	ck_assert_uint_eq(b.queue_wait_ms < 60000, 1);
	ck_assert(b.was_queued);
	ig_upstream_stop(&b.xfer);
	curl_easy_cleanup(b.xfer.easy);
	curl_multi_cleanup(t.rx.multi);

	req_init(&t, &x, "model-x");
	ck_assert_uint_eq(x.m->nbackends, 0);
	ck_assert_int_eq(route(&x), ROUTE_FAILED);
	ck_assert_uint_eq(x.err_status, 404);
	ck_assert_ptr_nonnull(strstr(x.err_body, "\"code\":\"model_not_found\""));
	ck_assert_ptr_nonnull(strstr(x.err_body, "served: model-a, model-b"));
	free(x.err_body);
	/* The entry made for model-x goes with its last request. */
	ig_sched_release(&t.gw.sched, x.m);
	ck_assert_ptr_null(ig_sched_find(&t.gw.sched, "model-x"));
	ck_assert_ptr_nonnull(ig_sched_find(&t.gw.sched, "model-a"));
	for (int i = 0; i < 2; i++)
		dequeue(&a[i]);
	two_free(&t);
}
END_TEST

/* A backend whose list is not learned yet (up): a request for a model no
 * known backend serves waits for it instead of a 404. */
START_TEST(unknown_lists_make_requests_wait)
{
	struct two t;
	two_init(&t);
	struct ig_backend *u = ig_backend_pool_add(&t.gw.pool, "http://127.0.0.1:11", 1, 1);
	atomic_store(&u->state, IG_BACKEND_UP);
	ck_assert_int_eq(ig_sched_rebuild(&t.gw.sched, &t.gw.pool), 0);
	ck_assert_uint_eq(t.gw.sched.unknown_up, 1);
	struct ig_req x;
	req_init(&t, &x, "model-c");
	ck_assert_int_eq(route(&x), ROUTE_QUEUED);
	/* Its list arrives without model-c: the waiting request gets 404. */
	u->models = json_pack("[{s:s}]", "id", "model-d");
	ck_assert_int_eq(ig_sched_rebuild(&t.gw.sched, &t.gw.pool), 0);
	ck_assert_uint_eq(t.gw.sched.unknown_up, 0);
	ck_assert_ptr_nonnull(ig_sched_find(&t.gw.sched, "model-d"));
	ck_assert_ptr_nonnull(ig_sched_find(&t.gw.sched, "model-c")); /* held by x */
	ig_proxy_drain_queue(&t.gw);
	ck_assert_uint_eq(x.err_status, 404);
	free(x.err_body);
	two_free(&t);
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
		struct ig_gw gw = {0};
		struct ig_req *req = stream_req(&gw);
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
	struct ig_gw gw = {0};
	struct ig_req *req = stream_req(&gw);
	feed(req, stream);
	ck_assert_uint_eq(ig_buf_pending(&req->resp), n);
	stream_req_free(req);
}
END_TEST

/* OpenAI's own shape puts "usage": null on every other chunk; with CRLF
 * line ends too. */
START_TEST(usage_null_members_are_taken_out)
{
	struct ig_gw gw = {0};
	struct ig_req *req = stream_req(&gw);
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

IG_CHECK_MAIN("proxy", an_added_usage_event_is_taken_out, usage_null_members_are_taken_out,
	      include_usage_is_spliced_in_front, hop_by_hop_headers_are_not_relayed,
	      usage_is_read_from_the_last_usage_key, sse_usage_with_any_framing_split_anywhere,
	      sse_error_events_count_and_flat_ones_are_rewritten,
	      torn_event_is_replaced_by_an_error_event, queue_is_fifo_and_bounded,
	      models_have_their_own_pools_and_queues, unknown_lists_make_requests_wait)
