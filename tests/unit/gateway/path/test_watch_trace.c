/* Unit tests for tracing as an observer of an exchange
 * (src/gateway/path/watch_trace.c, included to reach its static ops): the
 * client's traceparent is continued; each attempt has a CLIENT span whose
 * id goes upstream in the one traceparent header; at the exchange's end
 * its spans are ended with the attributes a trace reader looks for (the
 * queue wait, each attempt's backend, kind and outcome, the SERVER span's
 * method, path, status, model, usage, retries, an error's status) and
 * handed to the exporter; a hedge has no server span of its own. A real
 * exporter that sends nothing (its delay ten minutes), a fake exchange and
 * a fake client connection (fake_mhd.h). */
#include "../../../../src/gateway/path/watch_trace.c"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "net/rx.h"
#include "../../check_main.h"
#include "fake_mhd.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static const struct ig_xch_hooks hooks = {0};

struct fake {
	struct ig_conf cfg, tcfg;
	struct ig_gw gw;
	struct ig_rx rx;
	struct ig_backend b1, b2;
	struct ig_req req;
	struct fake_conn conn;
	json_t *spans; /* the exchange's spans, kept to be read once ended */
};

static struct fake *fake_new(const char *traceparent)
{
	struct fake *f = calloc(1, sizeof(*f));
	ig_routes_default(&f->cfg.routes);
	f->gw.cfg = &f->cfg;
	f->tcfg.trace_endpoint = "http://127.0.0.1:9/v1/traces"; /* nothing listens: nothing is sent */
	f->tcfg.trace_headers = "";
	f->tcfg.trace_service = "test";
	f->tcfg.trace_ratio = 1;
	f->tcfg.trace_delay_ms = 600000;
	char *err = NULL;
	f->gw.tracer = ig_tracer_start(&f->tcfg, &err);
	ck_assert_ptr_null(err);
	ck_assert_ptr_nonnull(f->gw.tracer);
	f->rx.gw = &f->gw;
	f->rx.ev_wake.fd = -1;
	ig_list_init(&f->rx.posted);
	ig_list_init(&f->rx.reqs);
	ig_rx_self = &f->rx;
	f->b1.url = "http://b1:8000";
	f->b2.url = "http://b2:8000";
	struct ig_req *r = &f->req;
	ig_xch_init(r, &f->gw, 0, IG_RT_POST, &hooks);
	snprintf(r->request_id, sizeof(r->request_id), "req-7");
	snprintf(r->client, sizeof(r->client), "203.0.113.5");
	f->conn.traceparent = traceparent;
	r->conn = FAKE_CONN(&f->conn);
	r->adm.model = "m";
	ig_watch_trace.on_begin(r);
	f->spans = json_incref(r->trace.spans);
	return f;
}

static void fake_free(struct fake *f)
{
	ig_list_del(&f->req.link);
	ig_relay_free(&f->req.relay);
	ig_buf_free(&f->req.body);
	curl_slist_free_all(f->req.up_headers);
	free(f->req.err_body);
	json_decref(f->spans);
	ig_tracer_stop(f->gw.tracer);
	ig_routes_clear(&f->cfg.routes);
	ig_rx_self = NULL;
	free(f);
}

/* The exchange's traceparent lines sent upstream: how many, the last. */
static int tp_lines(const struct ig_req *r, const char **last)
{
	int n = 0;
	for (const struct curl_slist *l = r->up_headers; l; l = l->next)
		if (strncmp(l->data, "traceparent: ", 13) == 0) {
			n++;
			*last = l->data + 13;
		}
	return n;
}

static json_t *attr(json_t *span, const char *key)
{
	size_t i;
	json_t *a;
	json_array_foreach(json_object_get(span, "attributes"), i, a)
		if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0)
			return json_object_get(a, "value");
	return NULL;
}

static const char *attr_str(json_t *span, const char *key)
{
	json_t *v = attr(span, key);
	json_t *s = v ? json_object_get(v, "stringValue") : NULL;
	return s ? json_string_value(s) : json_string_value(json_object_get(v, "intValue"));
}

static json_t *span_named(json_t *spans, const char *name, int nth)
{
	size_t i;
	json_t *s;
	json_array_foreach(spans, i, s)
		if (strcmp(json_string_value(json_object_get(s, "name")), name) == 0 && nth-- == 0)
			return s;
	return NULL;
}

static long long status_code(json_t *span)
{
	return json_integer_value(json_object_get(json_object_get(span, "status"), "code"));
}

/* A queued, retried chat request: the client's trace continued; the first
 * attempt fails on b1, the second answers on b2; each attempt's id went
 * upstream in one traceparent header; its spans at the end. */
START_TEST(an_exchanges_spans_end_with_their_attributes)
{
	struct fake *f = fake_new(TP);
	struct ig_req *r = &f->req;
	ck_assert(r->trace.on && r->trace.sampled && r->trace.remote);
	r->t_submit_us = r->t_start_us;
	r->wait.was_queued = true;
	r->wait.waited_ms = 12;
	r->wait.q.klass = IG_CLASS_HIGH;

	const char *tp1 = NULL, *tp2 = NULL;
	char first[56];
	r->wait.pick.ntried = 1;
	ig_watch_trace.on_attempt_start(r, &f->b1);
	ck_assert_int_eq(tp_lines(r, &tp1), 1);
	snprintf(first, sizeof(first), "%s", tp1);
	ck_assert_int_eq(strncmp(first, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36), 0); /* the client's trace */
	ck_assert_str_eq(first + 53, "01");
	ig_watch_trace.on_attempt_end(r, IG_UPERR_RESET, "Connection reset by peer");
	r->retries_done = 1;
	r->wait.pick.ntried = 2;
	ig_watch_trace.on_attempt_start(r, &f->b2);
	ck_assert_int_eq(tp_lines(r, &tp2), 1); /* rewritten, not added */
	ck_assert_str_ne(tp2, first);            /* the second attempt's own id */
	r->relay.up_status = 200;
	r->relay.prompt_tokens = 11;
	r->relay.completion_tokens = 5;
	r->wait.backend = &f->b2;
	r->status_sent = 200;
	ig_watch_trace.on_attempt_end(r, IG_UPERR_NONE, NULL);
	ig_watch_trace.on_done(r);
	ck_assert(!r->trace.on); /* ended */

	ck_assert_uint_eq(json_array_size(f->spans), 4); /* two attempts, the queue, the server span */
	json_t *a1 = span_named(f->spans, "chat m", 0), *a2 = span_named(f->spans, "chat m", 1);
	json_t *q = span_named(f->spans, "queue", 0), *srv = span_named(f->spans, "POST /v1/chat/completions", 0);
	ck_assert_ptr_nonnull(a1);
	ck_assert_ptr_nonnull(a2);
	ck_assert_ptr_nonnull(q);
	ck_assert_ptr_nonnull(srv);
	ck_assert_int_eq(json_integer_value(json_object_get(a1, "kind")), IG_SPAN_CLIENT);
	ck_assert_str_eq(attr_str(a1, "server.address"), "http://b1:8000");
	ck_assert_str_eq(attr_str(a1, "infergate.attempt.kind"), "first");
	ck_assert_str_eq(attr_str(a1, "gen_ai.request.model"), "m");
	ck_assert_int_eq(status_code(a1), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(a1, "status"), "message")),
			 "Connection reset by peer");
	ck_assert_int_eq(strncmp(first + 36, json_string_value(json_object_get(a1, "spanId")), 16), 0); /* what went upstream */
	ck_assert_str_eq(attr_str(a2, "server.address"), "http://b2:8000");
	ck_assert_str_eq(attr_str(a2, "infergate.attempt.kind"), "retry");
	ck_assert_str_eq(attr_str(a2, "http.response.status_code"), "200");
	ck_assert_int_ne(status_code(a2), 2);
	ck_assert_str_eq(attr_str(q, "infergate.class"), "high");
	ck_assert_str_eq(attr_str(q, "infergate.queue_ms"), "12");
	ck_assert_int_eq(json_integer_value(json_object_get(srv, "kind")), IG_SPAN_SERVER);
	ck_assert_str_eq(json_string_value(json_object_get(srv, "parentSpanId")), "00f067aa0ba902b7");
	ck_assert_str_eq(attr_str(srv, "http.request.method"), "POST");
	ck_assert_str_eq(attr_str(srv, "url.path"), "/v1/chat/completions");
	ck_assert_str_eq(attr_str(srv, "http.response.status_code"), "200");
	ck_assert_str_eq(attr_str(srv, "gen_ai.operation.name"), "chat");
	ck_assert_str_eq(attr_str(srv, "gen_ai.request.model"), "m");
	ck_assert_str_eq(attr_str(srv, "gen_ai.usage.input_tokens"), "11");
	ck_assert_str_eq(attr_str(srv, "gen_ai.usage.output_tokens"), "5");
	ck_assert_str_eq(attr_str(srv, "server.address"), "http://b2:8000");
	ck_assert_str_eq(attr_str(srv, "infergate.request_id"), "req-7");
	ck_assert_str_eq(attr_str(srv, "client.address"), "203.0.113.5");
	ck_assert_str_eq(attr_str(srv, "infergate.retries"), "1");
	ck_assert_int_ne(status_code(srv), 2);
	struct ig_tracer_stats st;
	ig_tracer_stats(f->gw.tracer, &st);
	ck_assert_int_eq(st.queued, 4); /* handed to the exporter */
	fake_free(f);
}
END_TEST

/* An error answer of the gateway's, or none at all: the server span is an
 * error; an attempt that lost a hedge race says so. */
START_TEST(an_error_answer_marks_the_server_span)
{
	struct fake *f = fake_new(TP);
	struct ig_req *r = &f->req;
	r->wait.pick.ntried = 1;
	ig_watch_trace.on_attempt_start(r, &f->b1);
	r->hedge_lost = true;
	ig_watch_trace.on_attempt_end(r, IG_UPERR_NONE, NULL);
	r->err_status = 503;
	r->err_body = strdup("{}");
	r->status_sent = 503;
	ig_watch_trace.on_done(r);
	json_t *a = span_named(f->spans, "chat m", 0), *srv = span_named(f->spans, "POST /v1/chat/completions", 0);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(a, "status"), "message")),
			 "lost the race to the other attempt");
	ck_assert_str_eq(attr_str(srv, "http.response.status_code"), "503");
	ck_assert_int_eq(status_code(srv), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(srv, "status"), "message")), "an error answer");
	fake_free(f);

	f = fake_new(TP); /* the client left before any answer */
	ig_watch_trace.on_done(&f->req);
	srv = span_named(f->spans, "POST /v1/chat/completions", 0);
	ck_assert_int_eq(status_code(srv), 2);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(srv, "status"), "message")), "no answer");
	fake_free(f);
}
END_TEST

/* A hedge's attempt span says "hedge"; it has no queue or server span of
 * its own (its primary's are the trace's). */
START_TEST(a_hedge_has_no_server_span)
{
	struct fake *f = fake_new(TP);
	struct ig_req *r = &f->req;
	r->is_hedge = true;
	r->t_submit_us = r->t_start_us;
	r->wait.pick.ntried = 2;
	ig_watch_trace.on_attempt_start(r, &f->b2);
	ig_watch_trace.on_attempt_end(r, IG_UPERR_NONE, NULL);
	ig_watch_trace.on_done(r);
	ck_assert_uint_eq(json_array_size(f->spans), 1);
	ck_assert_str_eq(attr_str(json_array_get(f->spans, 0), "infergate.attempt.kind"), "hedge");
	fake_free(f);
}
END_TEST

/* An unsampled client trace: continued (a traceparent of ours goes
 * upstream, unsampled), nothing recorded; no tracer: nothing at all. */
START_TEST(unsampled_and_untraced_exchanges)
{
	struct fake *f = fake_new("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
	struct ig_req *r = &f->req;
	const char *tp = NULL;
	ck_assert(r->trace.on && !r->trace.sampled);
	ig_watch_trace.on_attempt_start(r, &f->b1);
	ck_assert_int_eq(tp_lines(r, &tp), 1);
	ck_assert_str_eq(tp + 53, "00");
	ig_watch_trace.on_attempt_end(r, IG_UPERR_NONE, NULL);
	ig_watch_trace.on_done(r);
	ck_assert_ptr_null(f->spans);
	struct ig_tracer_stats st;
	ig_tracer_stats(f->gw.tracer, &st);
	ck_assert_int_eq(st.queued, 0);
	fake_free(f);

	f = fake_new(TP);
	r = &f->req;
	ig_watch_trace.on_done(r);
	json_decref(f->spans);
	f->spans = NULL;
	ig_tracer_stop(f->gw.tracer);
	f->gw.tracer = NULL; /* tracing off */
	ig_watch_trace.on_begin(r);
	ck_assert(!r->trace.on);
	ig_watch_trace.on_attempt_start(r, &f->b1);
	ck_assert_ptr_null(r->up_headers);
	fake_free(f);
}
END_TEST

/* gen_ai.operation.name by the path. */
START_TEST(the_operation_is_named_by_the_path)
{
	struct fake *f = fake_new(NULL);
	struct ig_req *r = &f->req;
	const char *p[][2] = {{"/v1/chat/completions", "chat"}, {"/v1/completions", "text_completion"},
			      {"/v1/embeddings", "embeddings"}, {"/v1/responses", "chat"}, {"/v1/models", NULL}};
	char path[64];
	for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++) {
		snprintf(path, sizeof(path), "%s", p[i][0]);
		r->adm.up_path = path;
		const char *op = ig_xch_gen_ai_operation(r);
		if (p[i][1])
			ck_assert_str_eq(op, p[i][1]);
		else
			ck_assert_ptr_null(op);
	}
	r->adm.up_path = NULL;
	ig_watch_trace.on_done(r);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("watch_trace", an_exchanges_spans_end_with_their_attributes, an_error_answer_marks_the_server_span,
	      a_hedge_has_no_server_span, unsampled_and_untraced_exchanges, the_operation_is_named_by_the_path)
