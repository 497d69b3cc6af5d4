/* Unit tests for the retry strategy (src/gateway/path/try_retry.c, included to
 * reach its static decisions) and the order the strategies are asked in
 * (proxy.c's ig_strategies): a failed attempt is retried while no byte
 * went to the client, up to `retries`, within the budget; a spent budget
 * is the error the client reads. Fake exchanges: a relay's state and a
 * backend, no socket, no curl; the budget is a counting fake. */
#include "../../../../src/gateway/path/try_retry.c"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../check_main.h"

static int budget_asked;
static bool budget_left;

static bool fake_budget(struct ig_gw *gw IG_UNUSED)
{
	budget_asked++;
	return budget_left;
}

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_backend b;
	struct ig_req req;
};

static struct fake *fake_new(long retries)
{
	struct fake *f = calloc(1, sizeof(*f));
	f->cfg.retries = retries;
	f->gw.cfg = &f->cfg;
	f->b.url = "http://10.0.0.1:8000";
	f->req.gw = &f->gw;
	f->req.wait.backend = &f->b;
	snprintf(f->req.request_id, sizeof(f->req.request_id), "r1");
	budget_asked = 0;
	budget_left = true;
	return f;
}

static void fake_free(struct fake *f)
{
	free(f->req.err_body);
	free(f);
}

/* Once the client has a byte, no retry: whatever is left of `retries`,
 * and the budget is not spent on it. */
START_TEST(no_retry_once_a_byte_went_to_the_client)
{
	struct fake *f = fake_new(3);
	f->req.relay.committed = true;
	ck_assert_int_eq(retry_decide(&f->req, 3, fake_budget), RETRY_PASS);
	ck_assert_int_eq(budget_asked, 0);
	struct ig_attempt_end ae = {IG_UPERR_RESET, "Connection reset", &f->b};
	ck_assert_int_eq(retry_attempt_end_with(&f->req, &ae, fake_budget), IG_TRY_PASS);
	ck_assert_int_eq(f->req.retries_done, 0);
	ck_assert_uint_eq(f->gw.stats.retries, 0);
	fake_free(f);
}
END_TEST

/* `retries: 2`: a second attempt, a third, then none (the exchange ends
 * with the gateway's 502 or the backend's own answer). */
START_TEST(retries_stop_at_the_configured_count)
{
	struct fake *f = fake_new(2);
	ck_assert_int_eq(retry_decide(&f->req, 2, fake_budget), RETRY_GO);
	f->req.retries_done = 1;
	ck_assert_int_eq(retry_decide(&f->req, 2, fake_budget), RETRY_GO);
	f->req.retries_done = 2;
	ck_assert_int_eq(retry_decide(&f->req, 2, fake_budget), RETRY_PASS);
	ck_assert_int_eq(budget_asked, 2); /* not asked for the one that does not go */
	f->req.retries_done = 0;
	ck_assert_int_eq(retry_decide(&f->req, 0, fake_budget), RETRY_PASS); /* retries: 0 */
	fake_free(f);
}
END_TEST

/* A spent budget: no retry; the client reads a 502 (504 for a timeout)
 * that says so; a backend's own 5xx answer is relayed as it is. */
START_TEST(a_spent_budget_is_the_error_the_client_reads)
{
	struct fake *f = fake_new(2);
	budget_left = false;
	struct ig_attempt_end ae = {IG_UPERR_CONNECT, "Couldn't connect to server", &f->b};
	ck_assert_int_eq(retry_attempt_end_with(&f->req, &ae, fake_budget), IG_TRY_END);
	ck_assert_int_eq(f->req.retries_done, 0);
	ck_assert_uint_eq(f->req.err_status, 502);
	ck_assert_ptr_nonnull(strstr(f->req.err_body, "not retried: the retry budget is spent"));
	ck_assert_ptr_nonnull(strstr(f->req.err_body, "http://10.0.0.1:8000"));
	free(f->req.err_body);
	f->req.err_body = NULL;
	f->req.err_status = 0;
	ae.e = IG_UPERR_TIMEOUT;
	ck_assert_int_eq(retry_attempt_end_with(&f->req, &ae, fake_budget), IG_TRY_END);
	ck_assert_uint_eq(f->req.err_status, 504);
	free(f->req.err_body);
	f->req.err_body = NULL;
	f->req.err_status = 0;
	ae.e = IG_UPERR_STATUS;
	ck_assert_int_eq(retry_attempt_end_with(&f->req, &ae, fake_budget), IG_TRY_END);
	ck_assert_uint_eq(f->req.err_status, 0); /* the backend's 503 goes to the client */
	fake_free(f);
}
END_TEST

/* The order of the strategies: a stream that broke after its first byte,
 * with no continuation allowed (continue.max 0) and no hedge, is taken by
 * none of them (it ends with an error event), and no retry is counted. */
START_TEST(a_broken_stream_is_retried_by_no_strategy)
{
	struct fake *f = fake_new(2);
	f->req.relay.committed = true;
	struct ig_attempt_end ae = {IG_UPERR_RESET, "Connection reset", &f->b};
	int hedge = -1, cont = -1, retry = -1, n = 0;
	for (const struct ig_strategy *const *s = ig_strategies; *s; s++, n++) {
		ck_assert_int_eq((*s)->on_attempt_end(&f->req, &ae), IG_TRY_PASS);
		hedge = strcmp((*s)->name, "hedge") == 0 ? n : hedge;
		cont = strcmp((*s)->name, "continue") == 0 ? n : cont;
		retry = strcmp((*s)->name, "retry") == 0 ? n : retry;
	}
	/* a failure while a hedge runs is the hedge's; a stream's is
	 * continuation's before any retry is asked */
	ck_assert_int_ge(hedge, 0);
	ck_assert_int_gt(cont, hedge);
	ck_assert_int_gt(retry, cont);
	ck_assert_uint_eq(f->gw.stats.retries, 0);
	ck_assert_uint_eq(f->req.err_status, 0);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("try_retry", no_retry_once_a_byte_went_to_the_client, retries_stop_at_the_configured_count,
	      a_spent_budget_is_the_error_the_client_reads, a_broken_stream_is_retried_by_no_strategy)
