/* Unit tests for src/sim/engine.c: slots and FIFO queues, round-robin ranks,
 * the bytes of streamed and whole answers, aborts, hangs, deferred /health
 * answers and the gauges. The engine is driven without a socket: requests
 * are submitted by hand, time is passed to sim_engine_run(), and the `wake`
 * callback records what the HTTP side would be told. */
#include "config.h"
#include <check.h>
#include <limits.h>
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
	c.preempt_threshold = 10; /* SGLang's default, used with priority_scheduling */
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

/* ---- step profiles: the KV cache and the decode steps ---- */

static void chain_of(uint64_t *chain, size_t n, uint64_t salt, size_t shared)
{
	for (size_t k = 0; k < n; k++)
		chain[k] = k < shared ? 1000 + k : (salt << 20) + k; /* any distinct values do */
}

static struct sim_conf conf_steps(void)
{
	struct sim_conf c = conf_default();
	c.profile = SIM_PROFILE_H100_8B;
	c.max_running = 8;
	c.time_scale = 1;
	c.steps = (struct sim_steps){.step_ms = 10, .per_request_us = 1000, .per_context_ns = 0, .tokens_per_step = 1,
				     .prefill_tps = 1000000, .chunk = 100000, .kv_tokens = 100000,
				     .output_reserve = 0};
	return c;
}

/* Runs the engine step by step until nothing runs; returns the steps. */
static int run_steps(struct sim_engine *e, uint64_t *now)
{
	int steps = 0;
	while (e->ranks[0].step_end_us && steps < 100000) {
		*now = e->ranks[0].step_end_us;
		sim_engine_run(e, *now);
		steps++;
	}
	return steps;
}

START_TEST(a_step_serves_the_whole_batch_and_slows_with_it)
{
	struct sim_conf c = conf_steps();
	struct sim_engine e;
	struct sim_req r[4];
	engine_init(&e, &c);
	uint64_t t0 = ig_now_us(), now = t0;
	for (int i = 0; i < 4; i++) {
		req_setup(&r[i], true, 10, 7);
		sim_engine_submit(&e, &r[i]);
	}
	ck_assert_int_eq(e.ranks[0].running, 4);
	/* The first step began with the first request alone: its prefill (7
	 * tokens at 1M/s: 7 us) and 10 ms; it gives its first token. The
	 * others join the next step (continuous batching): their prefills
	 * (21 us) beside the first one's decode (10 ms + 1 ms). Then all four
	 * decode (10 ms + 4 x 1 ms) until the first ends (its 10th token at
	 * step 10), and three more (13 ms) for the last step. */
	uint64_t begun = e.ranks[0].step_end_us - 10007; /* when submit ran it */
	ck_assert_uint_ge(begun, t0);
	int steps = run_steps(&e, &now);
	ck_assert_int_eq(steps, 11);
	ck_assert_uint_eq(now - begun, 10007 + 11021 + 8 * 14000 + 13000);
	for (int i = 0; i < 4; i++) {
		ck_assert_int_eq(r[i].state, SIM_REQ_DONE);
		ck_assert_int_eq(count(&r[i].out, "\"delta\":{\"content\""), 10);
		sim_engine_req_free(&r[i]);
	}
	ck_assert_uint_eq(e.st.generation_tokens, 40);
	sim_engine_free(&e);
}
END_TEST

/* A decode whose KV a prefill server sent (pd.c: kv_ready) computes no
 * prefill: a step beside it is the decode step alone, however long its
 * prompt, and its first token comes from that step; the classic profile
 * gives it no TTFT. */
START_TEST(transferred_kv_skips_the_prefill)
{
	struct sim_conf c = conf_steps();
	c.steps.prefill_tps = 1000; /* a 5,000-token prompt would take 5 s */
	struct sim_engine e;
	struct sim_req r;
	engine_init(&e, &c);
	req_setup(&r, true, 3, 5000);
	r.kv_ready = true;
	uint64_t before = ig_now_us();
	sim_engine_submit(&e, &r);
	uint64_t now = ig_now_us();
	/* the step ends step_ms + one request after it began, whenever that was in
	 * [before, now]: no prefill in it (5 s of it would be) */
	ck_assert_uint_le(e.ranks[0].step_end_us, now + 10000 + 1000 + 100);
	ck_assert_uint_ge(e.ranks[0].step_end_us, before + 10000);
	ck_assert_int_eq(run_steps(&e, &now), 3);
	ck_assert_int_eq(r.state, SIM_REQ_DONE);
	ck_assert_int_eq(count(&r.out, "\"delta\":{\"content\""), 3);
	sim_engine_req_free(&r);
	sim_engine_free(&e);

	struct sim_conf k = conf_default();
	k.tokens_per_second = 0;
	engine_init(&e, &k);
	req_setup(&r, false, 4, 10);
	r.kv_ready = true;
	sim_engine_submit(&e, &r); /* unpaced and no TTFT: done at once */
	ck_assert_int_eq(r.state, SIM_REQ_DONE);
	sim_engine_req_free(&r);
	sim_engine_free(&e);
}
END_TEST

START_TEST(mtp_gives_more_tokens_per_step)
{
	struct sim_conf c = conf_steps();
	struct sim_engine e;
	struct sim_req r;
	c.steps.tokens_per_step = 2.5;
	engine_init(&e, &c);
	uint64_t now = ig_now_us();
	req_setup(&r, false, 21, 7);
	sim_engine_submit(&e, &r);
	/* 1 token from the prefill, then 2.5 a step: 20 more in 8 steps */
	ck_assert_int_eq(run_steps(&e, &now), 9);
	ck_assert_int_eq(r.state, SIM_REQ_DONE);
	ck_assert_int_eq(count(&r.out, "\"completion_tokens\":21"), 1);
	sim_engine_req_free(&r);
	sim_engine_free(&e);
}
END_TEST

START_TEST(kv_budget_queues_and_the_cache_skips_prefill)
{
	struct sim_conf c = conf_steps();
	struct sim_engine e;
	struct sim_req r[3];
	c.steps.kv_tokens = 40 * IG_BLOCK_TOKENS;
	c.steps.prefill_tps = 16000; /* a block of 16 tokens: 1 ms */
	engine_init(&e, &c);
	uint64_t t0 = ig_now_us(), now = t0;
	for (int i = 0; i < 3; i++) {
		req_setup(&r[i], false, 4, 24 * IG_BLOCK_TOKENS);
		r[i].nchain = 24;
		r[i].chain = malloc(24 * sizeof(uint64_t));
		chain_of(r[i].chain, 24, (uint64_t)i + 1, 20); /* 20 blocks shared */
		sim_engine_submit(&e, &r[i]);
	}
	/* 24 blocks each in a budget of 40: one runs, two wait */
	ck_assert_int_eq(e.ranks[0].running, 1);
	ck_assert_int_eq(e.ranks[0].waiting, 2);
	/* its whole prompt prefills: 10 ms + 24 ms */
	ck_assert_uint_ge(e.ranks[0].step_end_us - t0, 34000);
	ck_assert_uint_eq(e.ranks[0].step_sim_us, 34000);
	run_steps(&e, &now);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(r[i].state, SIM_REQ_DONE);
	/* the first found nothing cached, the next ones the shared 20 blocks */
	ck_assert_int_eq(r[0].cached_tokens, 0);
	ck_assert_int_eq(r[1].cached_tokens, 20 * IG_BLOCK_TOKENS);
	ck_assert_int_eq(r[2].cached_tokens, 20 * IG_BLOCK_TOKENS);
	ck_assert_int_eq(count(&r[1].out, "\"prompt_tokens_details\":{\"cached_tokens\":320}"), 1);
	ck_assert_uint_eq(e.ranks[0].cached_tokens, 640);
	ck_assert_int_le(sim_kv_used(&e.ranks[0].kv), 40 * IG_BLOCK_TOKENS);
	for (int i = 0; i < 3; i++)
		sim_engine_req_free(&r[i]);
	sim_engine_free(&e);
}
END_TEST

START_TEST(a_cached_prompt_still_prefills_its_last_token)
{
	struct sim_conf c = conf_steps();
	struct sim_engine e;
	struct sim_req r[2];
	engine_init(&e, &c);
	uint64_t now = ig_now_us();
	for (int i = 0; i < 2; i++) {
		req_setup(&r[i], true, 2, 2 * IG_BLOCK_TOKENS);
		r[i].nchain = 2;
		r[i].chain = malloc(2 * sizeof(uint64_t));
		chain_of(r[i].chain, 2, 9, 2);
		sim_engine_submit(&e, &r[i]);
		run_steps(&e, &now);
		ck_assert_int_eq(r[i].state, SIM_REQ_DONE);
	}
	ck_assert_int_eq(r[1].cached_tokens, 2 * IG_BLOCK_TOKENS - 1);
	/* aborting a running request frees its KV, caching nothing of it */
	struct sim_req x;
	req_setup(&x, true, 50, 3 * IG_BLOCK_TOKENS);
	x.nchain = 3;
	x.chain = malloc(3 * sizeof(uint64_t));
	chain_of(x.chain, 3, 77, 0);
	sim_engine_submit(&e, &x);
	long before = sim_kv_used(&e.ranks[0].kv);
	sim_engine_abort(&e, &x);
	ck_assert_int_eq(sim_kv_used(&e.ranks[0].kv), before - 3 * IG_BLOCK_TOKENS);
	ck_assert_uint_eq(sim_kv_match(&e.ranks[0].kv, x.chain, 3), 0);
	ck_assert_int_eq(e.ranks[0].running, 0);
	sim_engine_req_free(&x);
	for (int i = 0; i < 2; i++)
		sim_engine_req_free(&r[i]);
	sim_engine_free(&e);
}
END_TEST

/* POST /sim/hold: generations stop after N tokens, out of the timer's
 * way, and go on together when released. */
START_TEST(hold_stops_at_n_tokens_until_released)
{
	struct sim_conf c = conf_default();
	struct sim_engine e;
	struct sim_req r[3];

	c.max_running = 3;
	engine_init(&e, &c);
	ck_assert_int_eq(sim_engine_hold(&e, 2, ig_now_us()), 0);
	for (int i = 0; i < 3; i++) {
		req_setup(&r[i], i < 2, 5, 7);
		sim_engine_submit(&e, &r[i]);
	}
	uint64_t later = ig_now_us() + LATER_US;
	sim_engine_run(&e, later);
	ck_assert_int_eq(e.held, 3);
	for (int i = 0; i < 3; i++)
		ck_assert(r[i].held && r[i].state == SIM_REQ_RUNNING);
	ck_assert_int_eq(r[0].emitted, 2); /* streams: two tokens out, no more */
	ck_assert_int_eq(count(&r[0].out, "\"delta\":{\"content\":"), 2);
	ck_assert_int_eq(ig_buf_pending(&r[2].out), 0); /* the whole answer: not written */
	/* held ones wait on nothing: no timer due (and no overflow) */
	ck_assert_int_eq(sim_engine_timeout_ms(&e, later), 3600000);
	ck_assert_int_eq(sim_engine_hold(&e, -1, later), 0);
	ck_assert_int_eq(e.held, 0);
	ck_assert_int_eq(sim_engine_timeout_ms(&e, later), 0);
	sim_engine_run(&e, later);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(r[i].state, SIM_REQ_DONE);
	ck_assert_int_eq(count(&r[0].out, "\"delta\":{\"content\":"), 5);
	ck_assert_int_eq(e.st.served, 3);
	/* a held request whose client leaves is no longer counted */
	sim_engine_hold(&e, 0, later);
	struct sim_req gone;
	req_setup(&gone, true, 5, 7);
	sim_engine_submit(&e, &gone);
	sim_engine_run(&e, later + LATER_US);
	ck_assert_int_eq(e.held, 1);
	sim_engine_abort(&e, &gone);
	ck_assert_int_eq(e.held, 0);
	ck_assert_int_eq(e.running, 0);
	sim_engine_req_free(&gone);
	for (int i = 0; i < 3; i++)
		sim_engine_req_free(&r[i]);
	sim_engine_free(&e);
}
END_TEST

/* With priority scheduling (SGLang's), the queue runs by priority, larger
 * first, equals in arrival order; a request more than the threshold above
 * the lowest running one preempts it (of equals, the last one queued), and
 * the preempted stream resumes later where it stopped: whole, no token
 * twice. */
START_TEST(priorities_order_the_queue_and_preempt)
{
	struct sim_conf c = conf_default();
	c.priority_scheduling = true;
	struct sim_engine e;
	struct sim_req r[5];
	long prio[5] = {-11, -11, 0, -5, LONG_MIN};

	engine_init(&e, &c);
	for (int i = 0; i < 5; i++) {
		req_setup(&r[i], true, 10, 3);
		r[i].priority = prio[i];
	}
	uint64_t t0 = ig_now_us();
	sim_engine_submit(&e, &r[0]);
	sim_engine_submit(&e, &r[1]);
	sim_engine_run(&e, t0 + 85000); /* TTFT 50 ms, then 100 tokens/s: 4 tokens each */
	ck_assert_int_eq(r[0].emitted, 4);
	ck_assert_int_eq(r[1].emitted, 4);
	/* 0 is 11 above -11: r[1], queued after r[0], gives up its slot */
	sim_engine_submit(&e, &r[2]);
	ck_assert_int_eq(r[2].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(r[1].state, SIM_REQ_QUEUED);
	ck_assert_int_eq(r[0].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(e.st.preempted, 1);
	/* -5 is only 6 above -11: it waits, but before r[1]; no priority at all
	 * is the last */
	sim_engine_submit(&e, &r[3]);
	sim_engine_submit(&e, &r[4]);
	ck_assert_int_eq(e.st.preempted, 1);
	ck_assert_int_eq(e.waiting, 3);
	struct sim_req *q[3], *x;
	int n = 0;
	IG_LIST_FOREACH(x, &e.ranks[0].queue, struct sim_req, qlink)
		q[n++] = x;
	ck_assert_ptr_eq(q[0], &r[3]);
	ck_assert_ptr_eq(q[1], &r[1]);
	ck_assert_ptr_eq(q[2], &r[4]);
	/* a running low request's turn comes back: everything ends whole */
	uint64_t t = t0 + LATER_US;
	for (int k = 0; k < 5 && e.running + e.waiting > 0; k++, t += LATER_US)
		sim_engine_run(&e, t);
	ck_assert_int_eq(e.st.served, 5);
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(r[i].state, SIM_REQ_DONE);
		ck_assert_int_eq(count(&r[i].out, "\"delta\":{\"content\""), 10);
		ck_assert_int_eq(count(&r[i].out, "[DONE]"), 1);
	}
	ck_assert_int_eq(r[1].preempted, 1);
	ck_assert_int_eq(r[0].preempted, 0);
	ck_assert_uint_eq(e.st.generation_tokens, 50);
	for (int i = 0; i < 5; i++)
		sim_engine_req_free(&r[i]);
	sim_engine_free(&e);
	/* --disable-priority-preemption: ordered, never preempted */
	c.no_preemption = true;
	engine_init(&e, &c);
	for (int i = 0; i < 3; i++) {
		req_setup(&r[i], true, 10, 3);
		r[i].priority = prio[i];
		sim_engine_submit(&e, &r[i]);
	}
	ck_assert_int_eq(r[2].state, SIM_REQ_QUEUED);
	ck_assert_int_eq(e.st.preempted, 0);
	for (int i = 0; i < 3; i++) {
		sim_engine_abort(&e, &r[i]);
		sim_engine_req_free(&r[i]);
	}
	sim_engine_free(&e);
}
END_TEST

/* Decode steps: the preempted request gives back its KV and, readmitted,
 * prefills its prompt and the tokens it had made again. */
START_TEST(a_preempted_request_prefills_again_in_steps)
{
	struct sim_conf c = conf_steps();
	c.max_running = 1;
	c.priority_scheduling = true;
	struct sim_engine e;
	struct sim_req r[2];
	engine_init(&e, &c);
	uint64_t now = ig_now_us();
	req_setup(&r[0], true, 10, 7);
	r[0].priority = -20;
	sim_engine_submit(&e, &r[0]);
	for (int i = 0; i < 4; i++) { /* its prefill gives one token, then a decode each */
		now = e.ranks[0].step_end_us;
		sim_engine_run(&e, now);
	}
	ck_assert_int_eq(r[0].emitted, 4);
	req_setup(&r[1], true, 10, 7);
	r[1].priority = 0;
	sim_engine_submit(&e, &r[1]);
	ck_assert_int_eq(r[0].state, SIM_REQ_QUEUED);
	ck_assert_int_eq(r[1].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(e.st.preempted, 1);
	ck_assert_int_eq(e.ranks[0].kv.own, 7); /* r[1]'s prompt only: r[0]'s KV freed */
	run_steps(&e, &now);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(r[i].state, SIM_REQ_DONE);
		ck_assert_int_eq(count(&r[i].out, "\"delta\":{\"content\""), 10);
	}
	ck_assert_uint_eq(e.st.generation_tokens, 20);
	for (int i = 0; i < 2; i++)
		sim_engine_req_free(&r[i]);
	sim_engine_free(&e);
}
END_TEST

/* A rank the client named takes the request; the others keep their turns. */
START_TEST(requested_rank_and_slowdown)
{
	struct sim_conf c = conf_default();
	double slow[] = {1, 4};
	c.dp_ranks = 2;
	c.rank_slowdown = slow;
	struct sim_engine e;
	struct sim_req r[3];

	engine_init(&e, &c);
	for (int i = 0; i < 3; i++) {
		req_setup(&r[i], true, 10, 10);
		r[i].dp_rank = 1;
		r[i].dp_rank_set = i < 2; /* the third asks for none: rank 0's turn */
		sim_engine_submit(&e, &r[i]);
	}
	ck_assert_int_eq(r[0].rank->idx, 1);
	ck_assert_int_eq(r[1].rank->idx, 1);
	ck_assert_int_eq(r[2].rank->idx, 0);
	/* rank 1 is 4 times slower: its TTFT 200 ms, its pace 25 tokens/s */
	ck_assert(r[0].tps == 25 && r[2].tps == 100);
	ck_assert(r[0].t_first_us > r[2].t_first_us + 140000);
	for (int i = 0; i < 3; i++) {
		sim_engine_abort(&e, &r[i]);
		sim_engine_req_free(&r[i]);
	}
	sim_engine_free(&e);
}
END_TEST

/* --max-loras 1: a request for another adapter waits, the base-model
 * request behind it runs; it starts when the running adapter's request
 * ends, after the adapter's load time. */
START_TEST(lora_adapter_waits_for_a_slot)
{
	struct sim_conf c = conf_default();
	char *names[] = {"a", "b"}, *paths[] = {"/a", "/b"};
	c.max_running = 8;
	c.flavor = SIM_FLAVOR_VLLM;
	c.enable_lora = true;
	c.max_loras = 1;
	c.lora_names = names;
	c.lora_paths = paths;
	c.nloras = 2;
	c.lora_load_ms = 1000;
	struct sim_engine e;
	struct sim_req r[3];

	engine_init(&e, &c);
	for (int i = 0; i < 3; i++) {
		req_setup(&r[i], true, 5, 10);
		r[i].lora = i == 2 ? -1 : i; /* a, b, the base model */
		sim_engine_submit(&e, &r[i]);
	}
	ck_assert_int_eq(r[0].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(r[1].state, SIM_REQ_QUEUED);
	ck_assert_int_eq(r[2].state, SIM_REQ_RUNNING);
	ck_assert_uint_eq(e.lora_loads, 1);
	ck_assert(r[0].t_first_us >= r[2].t_first_us + 900000); /* a waited for its load */
	sim_engine_run(&e, r[0].t_first_us + 10000000);          /* everything due */
	ck_assert_int_eq(r[0].state, SIM_REQ_DONE);
	ck_assert_int_ne(r[1].state, SIM_REQ_QUEUED);
	ck_assert_uint_eq(e.lora_loads, 2);
	ck_assert_int_eq(e.loras.a[0].running[0], 0);
	for (int i = 0; i < 3; i++) {
		sim_engine_abort(&e, &r[i]);
		sim_engine_req_free(&r[i]);
	}
	ck_assert_int_eq(e.loras.a[1].running[0], 0);
	sim_engine_free(&e);
}
END_TEST

/* Step profiles: a slowed rank's steps take FACTOR times as long; an
 * adapter load lengthens the step after the admission by --lora-load-ms;
 * the request for the other adapter joins the batch once the first left. */
START_TEST(steps_slowdown_and_lora_loads)
{
	struct sim_conf c = conf_steps();
	char *names[] = {"a", "b"}, *paths[] = {"/a", "/b"};
	double slow[] = {3};
	c.rank_slowdown = slow;
	c.flavor = SIM_FLAVOR_VLLM;
	c.enable_lora = true;
	c.max_loras = 1;
	c.lora_names = names;
	c.lora_paths = paths;
	c.nloras = 2;
	c.lora_load_ms = 50;
	struct sim_engine e;
	struct sim_req r[2];
	engine_init(&e, &c);
	uint64_t now;
	for (int i = 0; i < 2; i++) {
		req_setup(&r[i], true, 3, 7);
		r[i].lora = i;
		sim_engine_submit(&e, &r[i]);
	}
	ck_assert_int_eq(r[0].state, SIM_REQ_RUNNING);
	ck_assert_int_eq(r[1].state, SIM_REQ_QUEUED);
	/* one request prefilling: (10 ms + 7 us) x 3, then a's load, 50 ms */
	ck_assert(e.ranks[0].step_sim_us == 10007 * 3 + 50000);
	while (r[0].state != SIM_REQ_DONE) {
		now = e.ranks[0].step_end_us;
		sim_engine_run(&e, now);
	}
	ck_assert_int_eq(r[1].state, SIM_REQ_RUNNING); /* admitted as a left */
	ck_assert_uint_eq(e.lora_loads, 2);
	ck_assert(e.ranks[0].step_sim_us == 10007 * 3 + 50000); /* b's load, the same shape */
	run_steps(&e, &now);
	ck_assert_int_eq(r[1].state, SIM_REQ_DONE);
	for (int i = 0; i < 2; i++)
		sim_engine_req_free(&r[i]);
	sim_engine_free(&e);
}
END_TEST

IG_CHECK_MAIN("sim engine", slots_then_fifo, unpaced_answer_is_done_on_submit, stream_bytes,
	      stream_fails_midway, max_tokens_cut_is_length, abort_frees_slot_for_next,
	      ranks_round_robin, hang_fault_holds_no_slot, deferred_health_answer, priority_gauges,
	      fail_draws_follow_the_seed,
	      a_step_serves_the_whole_batch_and_slows_with_it, transferred_kv_skips_the_prefill,
	      mtp_gives_more_tokens_per_step,
	      kv_budget_queues_and_the_cache_skips_prefill, a_cached_prompt_still_prefills_its_last_token,
	      hold_stops_at_n_tokens_until_released, priorities_order_the_queue_and_preempt,
	      a_preempted_request_prefills_again_in_steps, requested_rank_and_slowdown,
	      lora_adapter_waits_for_a_slot, steps_slowdown_and_lora_loads)
