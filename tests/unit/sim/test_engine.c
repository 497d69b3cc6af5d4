/* Unit tests for src/sim/engine.c: slots and FIFO queues, round-robin ranks,
 * the bytes of streamed and whole answers, aborts, hangs, deferred /health
 * answers and the gauges. The engine is driven without a socket: requests
 * are submitted by hand, time is passed to sim_engine_run(), and the `wake`
 * callback records what the HTTP side would be told. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "infergate/util.h"
#include "../check_main.h"

#define LATER_US (60ull * 1000000) /* far beyond any deadline below */

static struct sim_req *woken[16];
static int nwoken;

static void on_wake(struct sim_req *r)
{
	if (nwoken < 16)
		woken[nwoken] = r;
	nwoken++;
}

static struct sim_conf conf_default(void)
{
	struct sim_conf c;
	memset(&c, 0, sizeof(c));
	c.model = "m";
	c.tokens_per_second = 100;
	c.ttft_ms = 50;
	c.max_running = 2;
	c.dp_ranks = 1;
	return c;
}

static void req_setup(struct sim_req *r, bool stream, long n_tokens, long prompt_tokens)
{
	sim_engine_req_init(r, SIM_CHAT);
	r->stream = stream;
	r->n_tokens = n_tokens;
	r->prompt_tokens = prompt_tokens;
	r->model_json = strdup("\"m\"");
	strcpy(r->id, "chatcmpl-test");
	r->text_seed = 42;
	sim_text_init(&r->text, r->text_seed);
	r->wake = on_wake;
	r->state = SIM_REQ_READING;
}

/* A fresh engine, and nothing woken yet. */
static void engine_init(struct sim_engine *e, const struct sim_conf *c)
{
	nwoken = 0;
	ck_assert_int_eq(sim_engine_init(e, c), 0);
}

/* Counts the occurrences of needle in the bytes not yet consumed. */
static int count(const struct ig_buf *b, const char *needle)
{
	int n = 0;
	size_t k = strlen(needle);
	const char *p = b->data ? b->data + b->off : NULL;
	const char *end = p ? b->data + b->len : NULL;
	while (p && (size_t)(end - p) >= k) {
		const char *q = memmem(p, (size_t)(end - p), needle, k);
		if (!q)
			break;
		n++;
		p = q + k;
	}
	return n;
}

START_TEST(slots_then_fifo)
{
	struct sim_conf c = conf_default();
	struct sim_engine e;
	struct sim_req r[3];

	engine_init(&e, &c);
	for (int i = 0; i < 3; i++) {
		req_setup(&r[i], false, 4, 10);
		sim_engine_submit(&e, &r[i]);
	}
	ck_assert_int_eq(r[0].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(r[1].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(r[2].state, SIM_REQ_QUEUED);
	ck_assert_int_eq(e.running, 2);
	ck_assert_int_eq(e.waiting, 1);
	ck_assert_int_eq(nwoken, 0);
	/* A deadline is pending: TTFT plus three more tokens at 100/s. */
	ck_assert_int_gt(sim_engine_timeout_ms(&e, ig_now_us()), 0);

	uint64_t t = ig_now_us() + LATER_US;
	sim_engine_run(&e, t);
	/* The first two finished and woke their owners; the third took a
	 * freed slot at t and is due later. */
	ck_assert_int_eq(nwoken, 2);
	ck_assert_int_eq(r[0].state, SIM_REQ_DONE);
	ck_assert_int_eq(r[1].state, SIM_REQ_DONE);
	ck_assert_int_eq(r[2].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(e.running, 1);
	ck_assert_int_eq(e.waiting, 0);
	sim_engine_run(&e, t + LATER_US);
	ck_assert_int_eq(nwoken, 3);
	ck_assert_ptr_eq(woken[2], &r[2]);
	ck_assert_int_eq(r[2].state, SIM_REQ_DONE);
	ck_assert_int_eq(e.st.served, 3);
	ck_assert_int_eq(e.st.generation_tokens, 12);
	ck_assert_int_eq(e.st.prompt_tokens, 30);
	ck_assert_int_eq(sim_engine_timeout_ms(&e, t), -1);
	/* A whole answer: one JSON object with the usage of this request. */
	ck_assert_int_eq(count(&r[0].out, "\"object\":\"chat.completion\""), 1);
	ck_assert_int_eq(count(&r[0].out, "\"completion_tokens\":4"), 1);
	ck_assert_int_eq(count(&r[0].out, "\"finish_reason\":\"stop\""), 1);
	for (int i = 0; i < 3; i++)
		sim_engine_req_free(&r[i]);
	sim_engine_free(&e);
}
END_TEST

START_TEST(unpaced_answer_is_done_on_submit)
{
	struct sim_conf c = conf_default();
	c.tokens_per_second = 0;
	c.ttft_ms = 0;
	struct sim_engine e;
	struct sim_req r;

	engine_init(&e, &c);
	req_setup(&r, false, 3, 5);
	sim_engine_submit(&e, &r);
	ck_assert_int_eq(r.state, SIM_REQ_DONE);
	ck_assert_int_eq(nwoken, 1);
	ck_assert_int_eq(e.running, 0);
	ck_assert_int_eq(e.st.served, 1);
	sim_engine_req_free(&r);
	sim_engine_free(&e);
}
END_TEST

START_TEST(stream_bytes)
{
	struct sim_conf c = conf_default();
	struct sim_engine e;
	struct sim_req r;

	engine_init(&e, &c);
	req_setup(&r, true, 5, 7);
	r.include_usage = true;
	sim_engine_submit(&e, &r);
	ck_assert_int_eq(ig_buf_pending(&r.out), 0); /* nothing before TTFT */
	sim_engine_run(&e, ig_now_us() + LATER_US);
	ck_assert_int_eq(r.state, SIM_REQ_DONE);
	/* The role chunk, five tokens, the finish chunk, the usage chunk, [DONE]. */
	ck_assert_int_eq(count(&r.out, "data: "), 9);
	ck_assert_int_eq(count(&r.out, "\"role\":\"assistant\""), 1);
	ck_assert_int_eq(count(&r.out, "\"finish_reason\":\"stop\""), 1);
	/* only the last chunk has "usage", as in SGLang (no "usage": null) */
	ck_assert_int_eq(count(&r.out, "\"usage\""), 1);
	ck_assert_int_eq(count(&r.out, "\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":5,\"total_tokens\":12}"), 1);
	ck_assert_int_eq(count(&r.out, "data: [DONE]\n\n"), 1);
	ck_assert_int_eq(e.st.generation_tokens, 5);
	sim_engine_req_free(&r);
	sim_engine_free(&e);
}
END_TEST

START_TEST(stream_fails_midway)
{
	struct sim_conf c = conf_default();
	struct sim_engine e;
	struct sim_req r;

	engine_init(&e, &c);
	req_setup(&r, true, 6, 7);
	r.fail_at = 3;
	sim_engine_submit(&e, &r);
	sim_engine_run(&e, ig_now_us() + LATER_US);
	ck_assert_int_eq(r.state, SIM_REQ_DONE);
	ck_assert_int_eq(r.emitted, 3);
	ck_assert_int_eq(count(&r.out, "\"delta\":{\"content\":"), 3);
	ck_assert_int_eq(count(&r.out, "\"type\": \"INTERNAL_SERVER_ERROR\""), 1);
	ck_assert_int_eq(count(&r.out, "finish_reason\":\"stop\""), 0);
	ck_assert_int_eq(count(&r.out, "data: [DONE]\n\n"), 1);
	ck_assert_int_eq(e.st.stream_failed, 1);
	ck_assert_int_eq(e.st.served, 0);
	ck_assert_int_eq(e.running, 0);
	sim_engine_req_free(&r);
	sim_engine_free(&e);
}
END_TEST

START_TEST(max_tokens_cut_is_length)
{
	struct sim_conf c = conf_default();
	struct sim_engine e;
	struct sim_req r;

	engine_init(&e, &c);
	req_setup(&r, false, 2, 1);
	r.length_cut = true;
	sim_engine_submit(&e, &r);
	sim_engine_run(&e, ig_now_us() + LATER_US);
	ck_assert_int_eq(count(&r.out, "\"finish_reason\":\"length\""), 1);
	ck_assert_int_eq(e.ranks[0].finished_length, 1);
	ck_assert_int_eq(e.ranks[0].finished_stop, 0);
	sim_engine_req_free(&r);
	sim_engine_free(&e);
}
END_TEST

START_TEST(abort_frees_slot_for_next)
{
	struct sim_conf c = conf_default();
	c.max_running = 1;
	struct sim_engine e;
	struct sim_req a, b, q;

	engine_init(&e, &c);
	req_setup(&a, true, 50, 1);
	req_setup(&b, true, 50, 1);
	req_setup(&q, true, 50, 1);
	sim_engine_submit(&e, &a);
	sim_engine_submit(&e, &b);
	sim_engine_submit(&e, &q);
	ck_assert_int_eq(b.state, SIM_REQ_QUEUED);
	ck_assert_int_eq(q.state, SIM_REQ_QUEUED);
	/* A queued request that leaves keeps its place from nobody. */
	sim_engine_abort(&e, &b);
	ck_assert_int_eq(b.state, SIM_REQ_ABORTED);
	ck_assert_int_eq(e.waiting, 1);
	/* The running one leaves: the slot goes to the head of the queue. */
	sim_engine_abort(&e, &a);
	ck_assert_int_eq(a.state, SIM_REQ_ABORTED);
	ck_assert_int_eq(q.state, SIM_REQ_RUNNING);
	ck_assert_int_eq(e.running, 1);
	ck_assert_int_eq(e.waiting, 0);
	ck_assert_int_eq(e.st.aborted, 2);
	/* Aborting what already ended changes nothing. */
	sim_engine_abort(&e, &a);
	ck_assert_int_eq(e.st.aborted, 2);
	ck_assert_int_eq(nwoken, 0);
	sim_engine_abort(&e, &q);
	sim_engine_req_free(&a);
	sim_engine_req_free(&b);
	sim_engine_req_free(&q);
	sim_engine_free(&e);
}
END_TEST

START_TEST(ranks_round_robin)
{
	struct sim_conf c = conf_default();
	c.dp_ranks = 3;
	c.max_running = 1;
	struct sim_engine e;
	struct sim_req r[5];

	engine_init(&e, &c);
	for (int i = 0; i < 5; i++) {
		req_setup(&r[i], true, 10, 100 + i);
		sim_engine_submit(&e, &r[i]);
		ck_assert_int_eq(r[i].rank->idx, i % 3);
	}
	/* Ranks 0 and 1 run one and queue one; rank 2 runs one. */
	ck_assert_int_eq(e.ranks[0].running, 1);
	ck_assert_int_eq(e.ranks[0].waiting, 1);
	ck_assert_int_eq(e.ranks[1].waiting, 1);
	ck_assert_int_eq(e.ranks[2].waiting, 0);
	long used, pending;
	double tps;
	sim_engine_rank_tokens(&e, &e.ranks[0], ig_now_us(), &used, &pending, &tps);
	ck_assert_int_eq(used, 100); /* the running prompt; no token before TTFT */
	ck_assert_int_eq(pending, 103);
	for (int i = 0; i < 5; i++) {
		sim_engine_abort(&e, &r[i]);
		sim_engine_req_free(&r[i]);
	}
	ck_assert_int_eq(e.running + e.waiting, 0);
	sim_engine_free(&e);
}
END_TEST

START_TEST(hang_fault_holds_no_slot)
{
	struct sim_conf c = conf_default();
	struct sim_engine e;
	struct sim_req r;

	engine_init(&e, &c);
	e.fault = SIM_FAULT_HANG;
	req_setup(&r, false, 4, 1);
	sim_engine_submit(&e, &r);
	ck_assert_int_eq(r.state, SIM_REQ_HUNG);
	ck_assert_int_eq(e.hung, 1);
	ck_assert_int_eq(e.running, 0);
	sim_engine_run(&e, ig_now_us() + LATER_US);
	ck_assert_int_eq(nwoken, 0);
	sim_engine_abort(&e, &r);
	ck_assert_int_eq(e.hung, 0);
	ck_assert_int_eq(e.st.aborted, 1);
	sim_engine_req_free(&r);
	sim_engine_free(&e);
}
END_TEST

START_TEST(deferred_health_answer)
{
	struct sim_conf c = conf_default();
	c.health_delay_ms = 1000;
	struct sim_engine e;
	struct sim_req h;

	engine_init(&e, &c);
	sim_engine_req_init(&h, SIM_HEALTH);
	h.wake = on_wake;
	uint64_t before = ig_now_us();
	sim_engine_defer(&e, &h);
	ck_assert_int_eq(h.state, SIM_REQ_DELAYED);
	int ms = sim_engine_timeout_ms(&e, before);
	ck_assert_int_ge(ms, 1000);
	sim_engine_run(&e, before); /* not yet due */
	ck_assert_int_eq(nwoken, 0);
	sim_engine_run(&e, before + LATER_US);
	ck_assert_int_eq(nwoken, 1);
	ck_assert_int_eq(h.state, SIM_REQ_DONE);
	ck_assert_int_eq(sim_engine_timeout_ms(&e, before), -1);
	sim_engine_req_free(&h);
	sim_engine_free(&e);
}
END_TEST

START_TEST(priority_gauges)
{
	struct sim_conf c = conf_default();
	c.max_running = 1;
	c.priority_scheduling = true;
	c.metrics_refresh = SIM_REFRESH_LIVE;
	struct sim_engine e;
	struct sim_req r[3];
	long prio[3] = {5, 0, 5};

	engine_init(&e, &c);
	for (int i = 0; i < 3; i++) {
		req_setup(&r[i], true, 10, 1);
		r[i].priority = prio[i];
		sim_engine_submit(&e, &r[i]);
	}
	const struct sim_gauges *g = sim_engine_gauges(&e, &e.ranks[0]);
	ck_assert_int_eq(g->running, 1);
	ck_assert_int_eq(g->waiting, 2);
	ck_assert_uint_eq(g->nprio, 2);
	ck_assert_int_eq(g->prio[0].priority, 0);
	ck_assert_int_eq(g->prio[0].running, 0);
	ck_assert_int_eq(g->prio[0].waiting, 1);
	ck_assert_int_eq(g->prio[1].priority, 5);
	ck_assert_int_eq(g->prio[1].running, 1);
	ck_assert_int_eq(g->prio[1].waiting, 1);
	for (int i = 0; i < 3; i++) {
		sim_engine_abort(&e, &r[i]);
		sim_engine_req_free(&r[i]);
	}
	/* Known priorities stay listed, at 0. */
	g = sim_engine_gauges(&e, &e.ranks[0]);
	ck_assert_uint_eq(g->nprio, 2);
	ck_assert_int_eq(g->prio[1].running + g->prio[1].waiting + g->prio[0].waiting, 0);
	sim_engine_free(&e);
}
END_TEST

START_TEST(fail_draws_follow_the_seed)
{
	struct sim_conf c = conf_default();
	c.fail_rate = 0.25;
	c.seed = 9;
	struct sim_engine a, b;
	int fails = 0;

	ck_assert_int_eq(sim_engine_init(&a, &c), 0);
	ck_assert_int_eq(sim_engine_init(&b, &c), 0);
	for (int i = 0; i < 2000; i++) {
		bool x = sim_engine_should_fail(&a);
		ck_assert_int_eq(x, sim_engine_should_fail(&b));
		fails += x;
	}
	/* 500 expected; a binomial's 5 standard deviations are about 97. */
	ck_assert_int_gt(fails, 400);
	ck_assert_int_lt(fails, 600);
	a.fault = SIM_FAULT_ERROR;
	ck_assert(sim_engine_should_fail(&a));
	ck_assert_int_eq(sim_engine_fault_parse("slow", &a.fault), 0);
	ck_assert_int_eq(a.fault, SIM_FAULT_SLOW);
	ck_assert_str_eq(sim_engine_fault_name(a.fault), "slow");
	ck_assert_int_eq(sim_engine_fault_parse("sideways", &a.fault), -1);
	sim_engine_free(&a);
	sim_engine_free(&b);
}
END_TEST

IG_CHECK_MAIN("sim engine", slots_then_fifo, unpaced_answer_is_done_on_submit, stream_bytes,
	      stream_fails_midway, max_tokens_cut_is_length, abort_frees_slot_for_next,
	      ranks_round_robin, hang_fault_holds_no_slot, deferred_health_answer, priority_gauges,
	      fail_draws_follow_the_seed)
