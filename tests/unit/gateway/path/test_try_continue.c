/* Unit tests for stream continuation (src/gateway/path/try_continue.c, included
 * to reach its static decisions): a broken stream goes on elsewhere only
 * after its first byte, within continue.max and the retry budget, with the
 * text relayed so far; else the exchange ends it. Fake exchanges: a relay's
 * state fed real events (cont.h), the budget a counting fake. */
#include "../../../../src/gateway/path/try_continue.c"

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

#define CHUNK(text) "{\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":" \
		    "[{\"index\":0,\"delta\":{\"content\":\"" text "\"},\"finish_reason\":null}]}"

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_backend b;
	struct ig_req req;
};

/* A chat stream that relayed "Hello" (continue.max: max) and broke. */
static struct fake *fake_new(int max)
{
	struct fake *f = calloc(1, sizeof(*f));
	f->gw.cfg = &f->cfg;
	f->b.url = "http://b1";
	f->req.gw = &f->gw;
	f->req.wait.backend = &f->b;
	f->req.relay.committed = true;
	ig_buf_init(&f->req.body);
	ig_buf_init(&f->req.orig_body);
	ig_buf_printf(&f->req.body, "{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
	ig_cont_init(&f->req.relay.cont, max);
	char *out = NULL;
	ig_cont_event(&f->req.relay.cont, CHUNK("Hello"), strlen(CHUNK("Hello")), &out);
	free(out);
	budget_asked = 0;
	budget_left = true;
	return f;
}

static void fake_free(struct fake *f)
{
	ig_cont_free(&f->req.relay.cont);
	ig_buf_free(&f->req.body);
	ig_buf_free(&f->req.orig_body);
	free(f);
}

/* Within continue.max and the budget: the next backend is asked to go on
 * from the text the client already has. */
START_TEST(a_broken_stream_goes_on_from_what_was_relayed)
{
	struct fake *f = fake_new(2);
	char *body;
	ck_assert_ptr_null(refusal(&f->req, &body, fake_budget));
	ck_assert_ptr_nonnull(body);
	json_t *o = json_loads(body, 0, NULL);
	json_t *last = json_array_get(json_object_get(o, "messages"), 1);
	ck_assert_str_eq(json_string_value(json_object_get(last, "content")), "Hello");
	ck_assert(json_is_true(json_object_get(o, "continue_final_message")));
	json_decref(o);
	free(body);
	ck_assert_int_eq(budget_asked, 1);
	fake_free(f);
}
END_TEST

/* Not continued: continue.max 0 or its client gone (silently), max
 * continuations made, a spent budget (each says why); the budget is asked
 * only when a continuation would go, and its "no" is respected. */
START_TEST(continue_max_the_budget_and_a_gone_client_are_respected)
{
	struct fake *f = fake_new(0);
	char *body;
	ck_assert_str_eq(refusal(&f->req, &body, fake_budget), "");
	fake_free(f);

	f = fake_new(1);
	f->req.relay.client_gone = true;
	ck_assert_str_eq(refusal(&f->req, &body, fake_budget), "");
	f->req.relay.client_gone = false;
	ig_cont_begin(&f->req.relay.cont); /* the one allowed was made */
	ck_assert_str_eq(refusal(&f->req, &body, fake_budget), "continue.max continuations were made");
	ck_assert_ptr_null(body);
	ck_assert_int_eq(budget_asked, 0);
	fake_free(f);

	f = fake_new(2);
	budget_left = false;
	ck_assert_str_eq(refusal(&f->req, &body, fake_budget), "the retry budget is spent");
	ck_assert_ptr_null(body);
	ck_assert_int_eq(budget_asked, 1);
	/* through the strategy: not its to take, the exchange ends the stream */
	struct ig_attempt_end ae = {IG_UPERR_RESET, "Connection reset", &f->b};
	ck_assert(!continue_stream(&f->req, ae.e, ae.detail, fake_budget));
	ck_assert_int_eq(f->req.relay.cont.count, 0);
	ck_assert_uint_eq(f->gw.stats.continued[IG_CONT_RESET], 0);
	fake_free(f);
}
END_TEST

/* Before the first byte a failure is retry's (or hedging's), never a
 * continuation: the client has nothing to continue. */
START_TEST(nothing_is_continued_before_the_first_byte)
{
	struct fake *f = fake_new(2);
	f->req.relay.committed = false;
	struct ig_attempt_end ae = {IG_UPERR_RESET, "Connection reset", &f->b};
	ck_assert_int_eq(ig_try_continue.on_attempt_end(&f->req, &ae), IG_TRY_PASS);
	ck_assert_int_eq(f->req.relay.cont.count, 0);
	ck_assert_ptr_null(f->req.orig_body.data);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("try_continue", a_broken_stream_goes_on_from_what_was_relayed,
	      continue_max_the_budget_and_a_gone_client_are_respected, nothing_is_continued_before_the_first_byte)
