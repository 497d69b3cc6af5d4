/* Unit tests for what every answer of an exchange shares
 * (src/gateway/path/reply.c): the headers a client reads (its request id,
 * the traceparent of its trace, the model it fell back to, its key's rate
 * limits, the backend that answered but not on a gateway's error, its time
 * in the queue), the backend's headers relayed but one, the answer queued
 * with its status and counted once in /metrics and its key's usage, and
 * its access log line. A fake client connection (fake_mhd.h), MHD's own
 * responses, a real access log in a temporary file. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "keys/ratelimit.h"
#include "net/rx.h"
#include "obs/accesslog.h"
#include "obs/stats.h"
#include "path/exchange.h"
#include "../../check_main.h"
#include "fake_mhd.h"

static const struct ig_xch_hooks hooks = {0};

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx;
	struct ig_backend b;
	struct ig_keyent ent;
	struct ig_key key;
	struct ig_req req;
	struct fake_conn conn;
	char dir[64], log[128];
};

static struct fake *fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	ig_routes_default(&f->cfg.routes);
	f->gw.cfg = &f->cfg;
	f->gw.alog.fd = -1; /* no access log unless a test opens one */
	f->rx.gw = &f->gw;
	f->rx.ev_wake.fd = -1;
	ig_list_init(&f->rx.posted);
	ig_list_init(&f->rx.reqs);
	ig_rx_self = &f->rx;
	f->b.url = "http://b1:8000";
	struct ig_req *r = &f->req;
	ig_xch_init(r, &f->gw, 0, IG_RT_POST, &hooks);
	snprintf(r->request_id, sizeof(r->request_id), "req-42");
	r->conn = FAKE_CONN(&f->conn);
	r->adm.model = "m";
	return f;
}

static void fake_free(struct fake *f)
{
	ig_list_del(&f->req.link);
	ig_relay_free(&f->req.relay);
	ig_buf_free(&f->req.body);
	free(f->req.err_body);
	free(f->key.status);
	ig_stats_free(&f->gw);
	if (f->gw.alog.fd >= 0) {
		ig_accesslog_close(&f->gw.alog);
		unlink(f->log);
		rmdir(f->dir);
	}
	ig_routes_clear(&f->cfg.routes);
	ig_rx_self = NULL;
	free(f);
}

static struct MHD_Response *body(const char *s)
{
	return MHD_create_response_from_buffer(strlen(s), (void *)s, MHD_RESPMEM_MUST_COPY);
}

/* A plain answer: its id and backend; nothing it did not have (no
 * fallback, no queue time, no limits, no traceparent). */
START_TEST(an_answer_names_its_request_and_backend)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	r->wait.backend = &f->b;
	struct MHD_Response *m = body("{}");
	ig_xch_add_common_headers(r, m);
	ck_assert_str_eq(MHD_get_response_header(m, "X-Request-Id"), "req-42");
	ck_assert_str_eq(MHD_get_response_header(m, "X-Infergate-Backend"), "http://b1:8000");
	ck_assert_ptr_null(MHD_get_response_header(m, "X-Infergate-Fallback"));
	ck_assert_ptr_null(MHD_get_response_header(m, "X-Infergate-Queued-Ms"));
	ck_assert_ptr_null(MHD_get_response_header(m, "x-ratelimit-limit-requests"));
	ck_assert_ptr_null(MHD_get_response_header(m, "traceparent"));
	MHD_destroy_response(m);

	/* queued 35 ms, run on its fallback, then refused by the gateway: no
	 * backend named (it did not answer) */
	r->wait.was_queued = true;
	r->wait.waited_ms = 35;
	r->fallback = "small";
	r->err_status = 503;
	m = body("{}");
	ig_xch_add_common_headers(r, m);
	ck_assert_str_eq(MHD_get_response_header(m, "X-Infergate-Queued-Ms"), "35");
	ck_assert_str_eq(MHD_get_response_header(m, "X-Infergate-Fallback"), "small");
	ck_assert_ptr_null(MHD_get_response_header(m, "X-Infergate-Backend"));
	MHD_destroy_response(m);
	r->fallback = NULL;
	fake_free(f);
}
END_TEST

/* A key with limits: OpenAI's x-ratelimit-* for what it has (requests
 * here, not tokens), the same values on every answer of the request. */
START_TEST(a_limited_keys_answers_carry_its_limits)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	f->ent.rpm = 60;
	f->key.ent = &f->ent;
	ck_assert_int_eq(ig_bucket_set(&f->key.rpm, 60, ig_now_ms()), 0);
	r->adm.key = &f->key;
	struct MHD_Response *m = body("{}");
	ig_xch_add_common_headers(r, m);
	ck_assert_str_eq(MHD_get_response_header(m, "x-ratelimit-limit-requests"), "60");
	const char *left = MHD_get_response_header(m, "x-ratelimit-remaining-requests");
	ck_assert_ptr_nonnull(left);
	ck_assert_int_le(atoi(left), 60);
	ck_assert_ptr_nonnull(MHD_get_response_header(m, "x-ratelimit-reset-requests"));
	ck_assert_ptr_null(MHD_get_response_header(m, "x-ratelimit-limit-tokens"));
	char was[32];
	snprintf(was, sizeof(was), "%s", left);
	MHD_destroy_response(m);
	m = body("{}");
	ig_xch_add_common_headers(r, m); /* shown once: the same numbers */
	ck_assert_str_eq(MHD_get_response_header(m, "x-ratelimit-remaining-requests"), was);
	MHD_destroy_response(m);
	r->adm.key = NULL;
	fake_free(f);
}
END_TEST

/* The backend's headers relayed, but the one skipped. */
START_TEST(the_backends_headers_are_relayed_but_one)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	ig_buf_append(&r->relay.up_headers, "Content-Type\0application/json\0x-engine\0sglang\0", 46);
	struct MHD_Response *m = body("{}");
	ig_xch_add_relayed_headers(r, m, "content-type");
	ck_assert_ptr_null(MHD_get_response_header(m, "Content-Type"));
	ck_assert_str_eq(MHD_get_response_header(m, "x-engine"), "sglang");
	MHD_destroy_response(m);
	m = body("{}");
	ig_xch_add_relayed_headers(r, m, NULL);
	ck_assert_str_eq(MHD_get_response_header(m, "Content-Type"), "application/json");
	MHD_destroy_response(m);
	fake_free(f);
}
END_TEST

/* Queued: its status on the connection, counted by class for /metrics,
 * its bytes; counted once in its key's usage, and not before it was
 * queued. */
START_TEST(an_answer_is_queued_and_counted_once)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	r->adm.key = &f->key;
	ig_xch_count_answer(r); /* nothing sent yet: not counted */
	ck_assert(!r->counted);
	ck_assert_uint_eq(f->key.nstatus, 0);
	ck_assert_int_eq(ig_xch_queue_answer(r, 201, body("{\"ok\":1}"), 8), MHD_YES);
	ck_assert_int_eq(f->conn.queued, 1);
	ck_assert_uint_eq(f->conn.status, 201);
	ck_assert_uint_eq(r->status_sent, 201);
	ck_assert_uint_eq(f->gw.stats.responses[2], 1);
	ck_assert_uint_eq(r->relay.bytes_out, 8);
	ck_assert(r->t_answer_us >= r->t_start_us);
	ig_xch_count_answer(r);
	ig_xch_count_answer(r);
	ck_assert(r->counted);
	ck_assert_uint_eq(f->key.nstatus, 1);
	ck_assert_uint_eq(f->key.status[0].status, 201);
	ck_assert_uint_eq(f->key.status[0].n, 1);
	r->adm.key = NULL;
	fake_free(f);

	f = fake_new(); /* a stream that broke: its error's status is its count */
	r = &f->req;
	r->adm.key = &f->key;
	ig_xch_queue_answer(r, 200, body(""), 0);
	r->relay.stream_error = 502;
	ig_xch_count_answer(r);
	ck_assert_uint_eq(f->key.status[0].status, 502);
	ck_assert_uint_eq(f->gw.stats.responses[2], 1); /* what went on the wire */
	r->adm.key = NULL;
	fake_free(f);
}
END_TEST

/* The access log's line: one JSON object with what an operator reads. */
START_TEST(the_access_log_line_says_what_happened)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	snprintf(f->dir, sizeof(f->dir), "/tmp/ig-test-reply-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	snprintf(f->log, sizeof(f->log), "%s/access.log", f->dir);
	char *err = NULL;
	ck_assert_int_eq(ig_accesslog_open(&f->gw.alog, f->log, &err), 0);
	r->wait.backend = &f->b;
	r->wait.waited_ms = 7;
	r->retries_done = 1;
	r->relay.prompt_tokens = 3;
	r->relay.completion_tokens = 9;
	snprintf(r->client, sizeof(r->client), "198.51.100.2");
	ig_xch_queue_answer(r, 200, body("{}"), 2);
	ig_xch_req_log(r, true);
	FILE *fp = fopen(f->log, "r");
	ck_assert_ptr_nonnull(fp);
	char line[4096];
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), fp));
	ck_assert_ptr_null(fgets(line + strlen(line), (int)(sizeof(line) - strlen(line)), fp)); /* one line */
	fclose(fp);
	json_t *j = json_loads(line, 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "request_id")), "req-42");
	ck_assert_str_eq(json_string_value(json_object_get(j, "method")), "POST");
	ck_assert_str_eq(json_string_value(json_object_get(j, "path")), "/v1/chat/completions");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "status")), 200);
	ck_assert_str_eq(json_string_value(json_object_get(j, "backend")), "http://b1:8000");
	ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "m");
	ck_assert_str_eq(json_string_value(json_object_get(j, "client")), "198.51.100.2");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "queue_ms")), 7);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "retries")), 1);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "bytes_out")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "prompt_tokens")), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "completion_tokens")), 9);
	ck_assert(json_is_true(json_object_get(j, "completed")));
	ck_assert(json_is_null(json_object_get(j, "error")));
	json_decref(j);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("reply", an_answer_names_its_request_and_backend, a_limited_keys_answers_carry_its_limits,
	      the_backends_headers_are_relayed_but_one, an_answer_is_queued_and_counted_once,
	      the_access_log_line_says_what_happened)
