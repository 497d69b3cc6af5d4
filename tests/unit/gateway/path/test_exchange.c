/* Unit tests for the exchange's primitives (src/gateway/path/exchange.c):
 * an exchange belongs to the reactor it was made on; its connection is
 * suspended and resumed once each (MHD's resume of a connection not
 * suspended is undefined), never once its client left; another reactor
 * hands it over instead of touching it, waking its own; the error answer
 * the gateway decides has its status and an OpenAI-shaped body. Fake
 * reactors, a fake client connection (fake_mhd.h), no curl. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "net/rx.h"
#include "path/exchange.h"
#include "../../check_main.h"
#include "fake_mhd.h"

static const struct ig_xch_hooks hooks = {0};

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx own, other;
	struct ig_req req;
	struct fake_conn conn;
};

static struct fake *fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	ig_routes_default(&f->cfg.routes);
	f->gw.cfg = &f->cfg;
	struct ig_rx *r[] = {&f->own, &f->other};
	for (int i = 0; i < 2; i++) {
		r[i]->gw = &f->gw;
		r[i]->ev_wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		ck_assert_int_ge(r[i]->ev_wake.fd, 0);
		ig_list_init(&r[i]->posted);
		ig_list_init(&r[i]->reqs);
	}
	ig_rx_self = &f->own;
	ig_xch_init(&f->req, &f->gw, 0, IG_RT_POST, &hooks);
	snprintf(f->req.request_id, sizeof(f->req.request_id), "r1");
	f->req.conn = FAKE_CONN(&f->conn);
	return f;
}

static void fake_free(struct fake *f)
{
	ig_relay_free(&f->req.relay);
	ig_buf_free(&f->req.body);
	free(f->req.err_body);
	close(f->own.ev_wake.fd);
	close(f->other.ev_wake.fd);
	ig_routes_clear(&f->cfg.routes);
	ig_rx_self = NULL;
	free(f);
}

/* Whether rx was woken (its eventfd written), clearing it. */
static bool woken(struct ig_rx *rx)
{
	uint64_t n = 0;
	bool w = read(rx->ev_wake.fd, &n, sizeof(n)) == sizeof(n) && n > 0;
	rx->woken = false;
	return w;
}

/* Made on this reactor: its own, counted, listed there; its method and
 * route; the path it goes to upstream is its route's, or its own. */
START_TEST(an_exchange_belongs_to_the_reactor_it_was_made_on)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	ck_assert_ptr_eq(r->rx, &f->own);
	ck_assert_ptr_eq(IG_LIST_FIRST(&f->own.reqs, struct ig_req, link), r);
	ck_assert_uint_eq(f->gw.nreqs, 1);
	ck_assert_uint_eq(r->adm.method, IG_RT_POST);
	ck_assert_int_eq(r->adm.route_idx, 0);
	ck_assert_uint_eq(r->wait.q.klass, IG_CLASS_NORMAL);
	ck_assert_int_eq(r->relay.prompt_tokens, -1); /* no usage seen */
	ck_assert_str_eq(ig_xch_req_path(r), "/v1/chat/completions");
	r->adm.up_path = "/v1/responses/resp_1";
	ck_assert_str_eq(ig_xch_req_path(r), "/v1/responses/resp_1");
	ck_assert_str_eq(ig_xch_uperr_name(IG_UPERR_CONNECT), "connect");
	ck_assert_str_eq(ig_xch_uperr_name(IG_UPERR_TIMEOUT), "timeout");
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

/* Suspended once however often asked, resumed once, and only when
 * suspended: the reactor is not woken for its own exchange. */
START_TEST(suspend_and_resume_happen_once_each)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	ig_xch_resume(r); /* not suspended: MHD not asked */
	ck_assert_int_eq(f->conn.resumes, 0);
	ig_xch_suspend(r);
	ig_xch_suspend(r);
	ck_assert_int_eq(f->conn.suspends, 1);
	ck_assert(r->suspended);
	ig_xch_resume(r);
	ig_xch_resume(r);
	ck_assert_int_eq(f->conn.resumes, 1);
	ck_assert(!r->suspended);
	ck_assert(!woken(&f->own));
	ck_assert(!ig_list_linked(&r->post_link)); /* nothing posted */
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

/* Resumed from another reactor: not touched there, handed to its own
 * (IG_HAND_RESUME, posted once however often), which is woken and resumes
 * it when it runs what was posted. */
START_TEST(another_reactor_hands_it_over)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	ig_xch_suspend(r);
	ig_rx_self = &f->other;
	ig_xch_resume(r);
	ck_assert_int_eq(f->conn.resumes, 0);
	ck_assert(r->suspended);
	ck_assert(r->post_ops & IG_HAND_RESUME);
	ck_assert_ptr_eq(IG_LIST_FIRST(&f->own.posted, struct ig_req, post_link), r);
	ck_assert(woken(&f->own));
	ig_xch_hand_over(r, IG_HAND_REFUSED); /* more work: the same post */
	ck_assert_uint_eq(r->post_ops, IG_HAND_RESUME | IG_HAND_REFUSED);
	ig_list_del(&r->post_link);
	ck_assert(ig_list_empty(&f->own.posted)); /* it was there once */
	ck_assert(ig_list_empty(&f->other.posted));
	ig_rx_self = &f->own; /* its own, running what was posted */
	ig_xch_resume(r);
	ck_assert_int_eq(f->conn.resumes, 1);
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

/* Its client left (detached, no connection): never suspended or resumed;
 * once its answer is decided, a resume ends it on its reactor. */
START_TEST(a_detached_exchange_is_ended_not_resumed)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	r->detached = true;
	r->conn = NULL;
	ig_xch_suspend(r);
	ck_assert(!r->suspended);
	ig_xch_resume(r); /* nothing decided: it runs on */
	ck_assert_uint_eq(r->post_ops, 0);
	r->relay.upstream_done = true;
	ig_xch_resume(r);
	ck_assert_uint_eq(r->post_ops, IG_HAND_DETACHED_END);
	ig_list_del(&r->post_link);
	ck_assert_int_eq(f->conn.suspends + f->conn.resumes, 0);
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

/* The error the gateway decides: its status, and the body the client reads
 * in OpenAI's shape, its type the status's; a later one replaces it. */
START_TEST(the_error_answer_is_openai_shaped)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	ig_xch_set_error(r, 503, "no_healthy_backend", "no backend of model '%s' is up (%d tried)", "m", 2);
	ck_assert_uint_eq(r->err_status, 503);
	ck_assert_str_eq(r->err_body, "{\"error\":{\"message\":\"no backend of model 'm' is up (2 tried)\","
				      "\"type\":\"server_error\",\"param\":null,\"code\":\"no_healthy_backend\"}}");
	ig_xch_set_error(r, 429, "queue_full", "the queue of model \"%s\" is full", "m");
	ck_assert_uint_eq(r->err_status, 429);
	ck_assert_str_eq(r->err_body, "{\"error\":{\"message\":\"the queue of model \\\"m\\\" is full\","
				      "\"type\":\"rate_limit_error\",\"param\":null,\"code\":\"queue_full\"}}");
	ig_xch_set_error(r, 400, NULL, "bad");
	ck_assert_str_eq(r->err_body, "{\"error\":{\"message\":\"bad\",\"type\":\"invalid_request_error\","
				      "\"param\":null,\"code\":null}}");
	ig_xch_set_decided_error(r, 404, NULL, "model", "model_not_found", "The model 'x' does not exist");
	ck_assert_uint_eq(r->err_status, 404);
	ck_assert_str_eq(r->err_body, "{\"error\":{\"message\":\"The model 'x' does not exist\","
				      "\"type\":\"not_found_error\",\"param\":\"model\",\"code\":\"model_not_found\"}}");
	ig_xch_set_decided_error(r, 400, "invalid_request_error", "Idempotency-Key", "k", "m");
	ck_assert_str_eq(r->err_body, "{\"error\":{\"message\":\"m\",\"type\":\"invalid_request_error\","
				      "\"param\":\"Idempotency-Key\",\"code\":\"k\"}}");
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

/* A long message is cut at 1023 bytes; the body stays valid JSON. */
START_TEST(a_long_error_message_is_bounded)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	char big[3000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	ig_xch_set_error(r, 502, "upstream_error", "backend said: %s", big);
	json_t *j = json_loads(r->err_body, 0, NULL);
	ck_assert_ptr_nonnull(j);
	const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	ck_assert_uint_eq(strlen(msg), 1023);
	ck_assert_int_eq(strncmp(msg, "backend said: xxx", 17), 0);
	json_decref(j);
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

/* A long message naming non-ASCII text is cut before a character it
 * would split: the client reads valid UTF-8, the whole of every character
 * kept (the one formatter, oaerror.h's). */
START_TEST(a_long_error_message_is_not_cut_inside_a_character)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	char big[2001]; /* 1000 times "é" (2 bytes each) */
	for (int i = 0; i < 1000; i++)
		memcpy(big + 2 * i, "\xc3\xa9", 2);
	big[2000] = '\0';
	ig_xch_set_error(r, 404, "model_not_found", "the model %s does not exist", big);
	json_t *j = json_loads(r->err_body, 0, NULL);
	ck_assert_ptr_nonnull(j);
	const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
	size_t n = strlen(msg);
	ck_assert_uint_le(n, 1023);
	ck_assert_uint_eq(n, 1022); /* "the model " (10 bytes) and 506 whole characters, not 1013 bytes */
	ck_assert_int_eq(strncmp(msg, "the model ", 10), 0);
	ck_assert_int_eq(memcmp(msg + n - 2, "\xc3\xa9", 2), 0);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "not_found_error");
	json_decref(j);
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

/* Nothing running and nothing queued: stopping its attempt cuts nothing. */
START_TEST(stopping_with_no_attempt_cuts_nothing)
{
	struct fake *f = fake_new();
	struct ig_req *r = &f->req;
	ck_assert(!ig_xch_stop_attempt(r));
	ck_assert(!r->xfer.running);
	ck_assert(!r->wait.queued);
	ig_list_del(&r->link);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("exchange", an_exchange_belongs_to_the_reactor_it_was_made_on, suspend_and_resume_happen_once_each,
	      another_reactor_hands_it_over, a_detached_exchange_is_ended_not_resumed, the_error_answer_is_openai_shaped,
	      a_long_error_message_is_bounded, a_long_error_message_is_not_cut_inside_a_character,
	      stopping_with_no_attempt_cuts_nothing)
