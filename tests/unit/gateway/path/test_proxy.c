/* Unit tests for the exchange's life (src/gateway/path/proxy.c, included to
 * reach its static functions): work another reactor decides for an
 * exchange is posted to its own, which alone reads its relay and transfer
 * (dispatch's refusal of a continuation queued by try_continue.c, drained
 * or expired where a slot freed). Two fake reactors, no socket, no curl;
 * the rest of an exchange's life runs against real processes
 * (tests/integration). */
#include "../../../../src/gateway/path/proxy.c"

#include <check.h>

#include "../../check_main.h"

struct two_rx {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx own, other;
	struct ig_req req;
};

static struct two_rx *two_new(void)
{
	struct two_rx *t = calloc(1, sizeof(*t));
	t->gw.cfg = &t->cfg;
	struct ig_rx *r[] = {&t->own, &t->other};
	for (int i = 0; i < 2; i++) {
		r[i]->gw = &t->gw;
		r[i]->ev_wake.fd = -1;
		ig_list_init(&r[i]->posted);
		ig_list_init(&r[i]->reqs);
	}
	ig_rx_self = &t->own;
	ig_xch_init(&t->req, &t->gw, 0, IG_RT_POST, &hooks); /* made on its own reactor */
	snprintf(t->req.request_id, sizeof(t->req.request_id), "r1");
	return t;
}

static void two_free(struct two_rx *t)
{
	ig_relay_free(&t->req.relay);
	free(t->req.err_body);
	free(t->req.cont_refused);
	free(t->req.refusal);
	ig_buf_free(&t->req.body);
	ig_rx_self = NULL;
	free(t);
}

/* Refused on another reactor: nothing of the exchange decided there; its
 * own reactor, when it runs what was posted, answers with the refusal. */
START_TEST(a_refusal_on_another_reactor_is_answered_by_its_own)
{
	struct two_rx *t = two_new();
	char msg[64];
	snprintf(msg, sizeof(msg), "all backends of model 'm' are busy");
	ig_rx_self = &t->other; /* a drain where a slot freed */
	on_refused(&t->req.wait, &(struct ig_dispatch_error){503, NULL, NULL, "queue_timeout", msg});
	memset(msg, 'x', sizeof(msg) - 1); /* dispatch's buffer is gone */
	ck_assert_uint_eq(t->req.err_status, 0);
	ck_assert_ptr_null(t->req.err_body);
	ck_assert(t->req.post_ops & IG_HAND_REFUSED);
	ck_assert_ptr_eq(IG_LIST_FIRST(&t->own.posted, struct ig_req, post_link), &t->req);
	ck_assert(!ig_list_linked(&t->other.posted));

	ig_rx_self = &t->own;
	ig_proxy_run_posted(&t->own);
	ck_assert_uint_eq(t->req.err_status, 503);
	ck_assert_ptr_nonnull(strstr(t->req.err_body, "all backends of model 'm' are busy"));
	ck_assert_str_eq(t->req.refused_code, "queue_timeout");
	ck_assert(!ig_list_linked(&t->own.posted));
	two_free(t);
}
END_TEST

/* A continuation (its stream under way) refused on another reactor: its
 * own ends the stream with an error event naming why, never a second
 * status line. */
START_TEST(a_continuation_refused_elsewhere_ends_its_stream_on_its_own_reactor)
{
	struct two_rx *t = two_new();
	t->req.relay.committed = true;
	t->req.relay.stream = true;
	ig_rx_self = &t->other; /* the queue's expiry where a slot freed */
	on_refused(&t->req.wait, &(struct ig_dispatch_error){503, NULL, NULL, "queue_timeout", "no backend in time"});
	ck_assert(!t->req.relay.upstream_done);
	ck_assert_int_eq(t->req.relay.stream_error, 0);

	ig_rx_self = &t->own;
	ig_proxy_run_posted(&t->own);
	ck_assert(t->req.relay.upstream_done);
	ck_assert_int_eq(t->req.relay.stream_error, 502);
	ck_assert_uint_eq(t->req.err_status, 0); /* the 200 already sent stands */
	ck_assert_ptr_nonnull(strstr(t->req.relay.stream_error_msg, "no backend in time"));
	const char *sent = ig_buf_head(&t->req.relay.resp);
	ck_assert_ptr_nonnull(strstr(sent, "data: {\"error\""));
	two_free(t);
}
END_TEST

IG_CHECK_MAIN("proxy", a_refusal_on_another_reactor_is_answered_by_its_own,
	      a_continuation_refused_elsewhere_ends_its_stream_on_its_own_reactor)
