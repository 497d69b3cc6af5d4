/* The engine: what a GPU batch does, minus the GPU. Requests go round-robin
 * to --dp-ranks ranks; on its rank a request holds one of --max-running
 * slots from admission to its last token, the rest wait in the rank's FIFO
 * (in priority order with --enable-priority-scheduling, where a waiting
 * request may preempt a running one: "priorities" below).
 * Running requests of every rank sit in one min-heap by their next deadline
 * (first token after TTFT, then one token per 1/tokens-per-second), so one
 * timer serves thousands of streams. Tokens go into req->out as SSE chunks,
 * or, for a non-streamed request, the whole JSON answer is written when the
 * last token is due: the engine decides when and how many, wire.c writes
 * the bytes. The engine also keeps what SGLang's scheduler would last have
 * logged (--metrics-refresh sglang) and the deferred /health answers. It
 * knows nothing of HTTP: whoever submitted a request is told through the
 * request's `wake` callback that req->out has new bytes or the answer is
 * complete (server.c hands them to MHD). */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "infergate/tokenizer.h"
#include "infergate/util.h"
#include "deadlines.h"
#include "engine.h"
#include "kvevents.h"
#include "wire.h"

static const char *const fault_names[] = {"ok", "error", "hang", "slow", "down"};

const char *sim_engine_fault_name(enum sim_fault f) { return fault_names[f]; }

int sim_engine_fault_parse(const char *name, enum sim_fault *out)
{
	for (unsigned i = 0; i < sizeof(fault_names) / sizeof(fault_names[0]); i++) {
		if (strcmp(name, fault_names[i]) == 0) {
			*out = (enum sim_fault)i;
			return 0;
		}
	}
	return -1;
}

void sim_engine_req_init(struct sim_req *r, enum sim_kind kind)
{
	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->state = SIM_REQ_READING;
	r->fail_at = -1;
	r->heap_idx = -1;
	r->lora = -1;
	ig_list_init(&r->qlink);
	ig_list_init(&r->blink);
	ig_buf_init(&r->out);
	ig_buf_init(&r->gen_text);
	ig_buf_init(&r->gen_ids);
}

void sim_engine_req_free(struct sim_req *r)
{
	ig_buf_free(&r->out);
	ig_buf_free(&r->gen_text);
	ig_buf_free(&r->gen_ids);
	free(r->model_json);
	r->model_json = NULL;
	free(r->prefill);
	r->prefill = NULL;
	free(r->doc);
	r->doc = NULL;
	free(r->chain);
	r->chain = NULL;
	r->nchain = 0;
	free(r->tokens);
	r->tokens = NULL;
	r->ntokens = 0;
}

/* Tells r's owner there is something new to send. */
static void wake(struct sim_req *r)
{
	if (r->wake)
		r->wake(r);
}

/* SGLang's decode_log_interval default (python/sglang/srt/server_args.py):
 * the scheduler logs its stats every 40 decode steps. */
#define DECODE_LOG_STEPS 40
/* "During idle time, also collect metrics every 30 seconds" (after
 * sgl-project/sglang python/sglang/srt/managers/scheduler_runtime_checker_mixin.py). */
#define IDLE_LOG_US (30u * 1000000u)

/* Returns 0, or -1 when out of memory (logged). */
int sim_engine_init(struct sim_engine *s, const struct sim_conf *conf)
{
	memset(s, 0, sizeof(*s));
	s->conf = conf;
	ig_list_init(&s->delayed);
	s->fault = SIM_FAULT_OK;
	s->hold_after = -1;
	s->fail_rng = (uint64_t)conf->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
	/* A different constant: the same --seed gives an unrelated sequence,
	 * so --stream-fail-rate never shifts which requests --fail-rate fails. */
	s->stream_fail_rng = (uint64_t)conf->seed * 0xD1B54A32D192ED03ull + 0x8CB92BA72F3D8DD7ull;
	s->started = ig_wall_s();
	s->nranks = conf->dp_ranks;
	s->ranks = calloc((size_t)s->nranks, sizeof(*s->ranks));
	if (!s->ranks) {
		ig_log_error("%s: out of memory", __func__);
		return -1;
	}
	uint64_t now = ig_now_us();
	for (long i = 0; i < s->nranks; i++) {
		s->ranks[i].idx = (int)i;
		s->ranks[i].last_log_us = now;
		ig_list_init(&s->ranks[i].queue);
		ig_list_init(&s->ranks[i].batch);
		if (sim_conf_steps(conf) && sim_kv_init(&s->ranks[i].kv, conf->steps.kv_tokens) < 0) {
			ig_log_error("%s: out of memory", __func__);
			return -1;
		}
		if (conf->kv_events && !(s->ranks[i].kvpub = sim_kvevents_open(conf, &s->ranks[i].kv, (int)i)))
			return -1;
		s->ranks[i].slowdown = conf->rank_slowdown ? conf->rank_slowdown[i] : 1;
	}
	s->lora = conf->enable_lora;
	if (s->lora && sim_loras_init(&s->loras, s->nranks, conf->max_loras, conf->flavor == SIM_FLAVOR_SGLANG,
				      conf->max_loaded_loras) < 0) {
		ig_log_error("%s: out of memory", __func__);
		return -1;
	}
	for (size_t i = 0; s->lora && i < conf->nloras; i++) {
		if (sim_loras_add(&s->loras, conf->lora_names[i], conf->lora_paths[i], NULL) != SIM_LORA_ADDED) {
			ig_log_error("%s: out of memory", __func__);
			return -1;
		}
	}
	return 0;
}

void sim_engine_free(struct sim_engine *s)
{
	sim_deadlines_free(&s->heap);
	if (s->lora)
		sim_loras_free(&s->loras);
	for (long i = 0; s->ranks && i < s->nranks; i++) {
		free(s->ranks[i].prios);
		free(s->ranks[i].snap.prio);
		sim_kvevents_close(s->ranks[i].kvpub);
		sim_kv_free(&s->ranks[i].kv);
	}
	free(s->ranks);
	s->ranks = NULL;
	s->nranks = 0;
}

/* xorshift64 on a generator of its own, so --seed makes the draws
 * reproducible whatever else draws random numbers. True with probability p. */
static bool draw(uint64_t *state, double p)
{
	uint64_t x = *state;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return (double)(x >> 11) / 9007199254740992.0 < p;
}

bool sim_engine_should_fail(struct sim_engine *s)
{
	if (s->fault == SIM_FAULT_ERROR)
		return true;
	if (s->conf->fail_rate <= 0)
		return false;
	return draw(&s->fail_rng, s->conf->fail_rate);
}

bool sim_engine_should_fail_stream(struct sim_engine *s)
{
	return s->conf->stream_fail_rate > 0 && draw(&s->stream_fail_rng, s->conf->stream_fail_rate);
}

/* ---- a rank's wait queue, the deferred /health answers ---- */

/* Whether a's priority runs before b's: larger values first, smaller with
 * --schedule-low-priority-values-first. */
static bool prio_before(const struct sim_engine *s, long a, long b)
{
	return s->conf->low_first ? a < b : a > b;
}

/* Into its rank's queue: at the end, or with priority scheduling after the
 * last one of its priority or a better one. SGLang sorts its waiting queue
 * by (priority, the time it entered the queue) (after sgl-project/sglang
 * python/sglang/srt/managers/schedule_policy.py _sort_by_priority_and_fcfs);
 * a preempted request enters it anew, behind its equals already there. */
static void queue_push(struct sim_engine *s, struct sim_req *r)
{
	struct ig_list *q = &r->rank->queue, *at = q;
	r->queued_us = ig_now_us();
	if (s->conf->priority_scheduling) {
		struct sim_req *o;
		IG_LIST_FOREACH(o, q, struct sim_req, qlink) {
			if (prio_before(s, r->priority, o->priority)) {
				at = &o->qlink;
				break;
			}
		}
	}
	ig_list_append(at, &r->qlink); /* before `at`: at the end when at is the list */
	r->rank->waiting++;
	s->waiting++;
}

static void queue_unlink(struct sim_engine *s, struct sim_req *r)
{
	ig_list_del(&r->qlink);
	r->rank->waiting--;
	s->waiting--;
}

/* Every --health-delay-ms is the same, so appending keeps the list in
 * deadline order: no heap needed. */
void sim_engine_defer(struct sim_engine *s, struct sim_req *r)
{
	r->state = SIM_REQ_DELAYED;
	r->deadline_us = ig_now_us() + (uint64_t)s->conf->health_delay_ms * 1000u;
	ig_list_append(&s->delayed, &r->qlink);
}

/* ---- priorities and the gauges of /metrics ---- */

/* Remembers a priority submitted to rk: SGLang keeps every priority it has
 * seen in _known_priorities and prints it from then on, at 0 when empty
 * (after sgl-project/sglang python/sglang/srt/observability/metrics_collector.py
 * _log_gauge_queue_count). */
static void note_priority(struct sim_rank *rk, long prio)
{
	size_t i = 0;
	while (i < rk->nprios && rk->prios[i] < prio)
		i++;
	if (i < rk->nprios && rk->prios[i] == prio)
		return;
	if (rk->nprios == rk->prios_cap) {
		size_t cap = rk->prios_cap ? rk->prios_cap * 2 : 8;
		long *p = realloc(rk->prios, cap * sizeof(*p));
		if (!p)
			abort(); /* a few bytes per distinct priority */
		rk->prios = p;
		rk->prios_cap = cap;
	}
	memmove(rk->prios + i + 1, rk->prios + i, (rk->nprios - i) * sizeof(*rk->prios));
	rk->prios[i] = prio;
	rk->nprios++;
}

enum {
	SNAP_RUNNING = 1, /* the running counts */
	SNAP_WAITING = 2, /* the waiting counts */
};

/* The snapshot's count for r's priority when r is on rank rk, or NULL
 * (another rank, or submitted after this snapshot's list was made). */
static struct sim_prio_count *prio_count(struct sim_gauges *g, const struct sim_req *r,
					 const struct sim_rank *rk)
{
	if (r->rank != rk)
		return NULL;
	for (size_t i = 0; i < g->nprio; i++)
		if (g->prio[i].priority == r->priority)
			return &g->prio[i];
	return NULL;
}

/* Copies the rank's counts now into its snapshot. SNAP_RUNNING resets the
 * per-priority list to the known priorities, so it comes first when both
 * halves are taken at different moments. */
static void snap_take(struct sim_rank *rk, int what)
{
	struct sim_gauges *g = &rk->snap;

	if (what & SNAP_RUNNING) {
		g->running = rk->running;
		/* Priorities only accumulate, so the array grows with them. */
		if (rk->nprios > g->nprio) {
			struct sim_prio_count *p = realloc(g->prio, rk->nprios * sizeof(*p));
			if (!p)
				abort(); /* a few bytes per distinct priority */
			g->prio = p;
		}
		g->nprio = rk->nprios;
		for (size_t i = 0; i < g->nprio; i++) {
			g->prio[i].priority = rk->prios[i];
			g->prio[i].running = g->prio[i].waiting = 0;
		}
	}
	if (what & SNAP_WAITING) {
		g->waiting = rk->waiting;
		for (size_t i = 0; i < g->nprio; i++)
			g->prio[i].waiting = 0;
	}
	if (g->nprio == 0)
		return;
	/* Every RUNNING request is in its rank's batch, every QUEUED one in
	 * its queue. */
	if (what & SNAP_RUNNING) {
		struct sim_req *r;
		IG_LIST_FOREACH(r, &rk->batch, struct sim_req, blink) {
			struct sim_prio_count *pc = prio_count(g, r, rk);
			if (pc)
				pc->running++;
		}
	}
	if (what & SNAP_WAITING) {
		struct sim_req *r;
		IG_LIST_FOREACH(r, &rk->queue, struct sim_req, qlink) {
			struct sim_prio_count *pc = prio_count(g, r, rk);
			if (pc)
				pc->waiting++;
		}
	}
}

const struct sim_gauges *sim_engine_gauges(struct sim_engine *s, struct sim_rank *rk)
{
	if (s->conf->metrics_refresh == SIM_REFRESH_LIVE)
		snap_take(rk, SNAP_RUNNING | SNAP_WAITING);
	return &rk->snap;
}

static bool sglang_refresh(const struct sim_engine *s)
{
	return s->conf->metrics_refresh == SIM_REFRESH_SGLANG;
}

/* The time between two decode-stats logs: 40 decode steps, one step per
 * 1/tokens-per-second while the rank runs anything. 0 when unpaced. */
static uint64_t decode_log_us(const struct sim_engine *s)
{
	double tps = s->conf->tokens_per_second;
	return tps > 0 ? (uint64_t)ceil(DECODE_LOG_STEPS * 1e6 / tps) : 0;
}

/* A decode step's log: the running batch and the queue as they are now. */
static void log_decode(struct sim_rank *rk, uint64_t now)
{
	snap_take(rk, SNAP_RUNNING | SNAP_WAITING);
	rk->last_log_us = now;
	rk->finished_since_log = 0;
}

/* ---- pacing ---- */

/* When token i (0-based) is due: the first one it makes after its
 * (re)admission when its TTFT has passed, then at its pace. */
static uint64_t token_time(const struct sim_req *r, long i)
{
	if (r->tps <= 0 || i <= r->resumed_at)
		return r->t_first_us;
	return r->t_first_us + (uint64_t)ceil((double)(i - r->resumed_at) * 1e6 / r->tps);
}

/* How many tokens are due by `now` at r's pace (at most n_tokens). */
static long due_by(const struct sim_req *r, uint64_t now)
{
	if (r->tps <= 0)
		return r->n_tokens;
	double d = floor((double)(now - r->t_first_us) * r->tps / 1e6) + 1 + (double)r->resumed_at;
	return d < (double)r->n_tokens ? (long)d : r->n_tokens;
}

static void start(struct sim_engine *s, struct sim_req *r, uint64_t now)
{
	struct sim_rank *rk = r->rank;
	double tps = s->conf->tokens_per_second;
	/* a decode whose KV came from a prefill server (pd.c) has no TTFT to wait */
	uint64_t ttft_us = r->kv_ready ? 0 : (uint64_t)s->conf->ttft_ms * 1000u;

	/* The mode at admission decides the pace for the whole request. */
	if (s->fault == SIM_FAULT_SLOW) {
		ttft_us *= 10;
		tps = tps > 0 ? tps / 10 : 10;
	}
	ttft_us = (uint64_t)((double)ttft_us * rk->slowdown);
	tps /= rk->slowdown;
	if (s->lora && sim_loras_activate(&s->loras, rk->idx, r->lora)) {
		s->lora_loads++;
		ttft_us += (uint64_t)s->conf->lora_load_ms * 1000u; /* its adapter is loaded first */
	}
	r->tps = tps;
	r->t_first_us = now + ttft_us;
	r->state = SIM_REQ_RUNNING;
	s->running++;
	if (rk->running++ == 0 && sglang_refresh(s) && decode_log_us(s) > 0)
		rk->next_log_us = now + decode_log_us(s); /* decode steps begin */
	r->deadline_us = r->stream ? r->t_first_us : token_time(r, r->n_tokens - 1);
	sim_deadlines_push(&s->heap, r);
	ig_list_append(&rk->batch, &r->blink);
}

/* ---- priorities: preemption ----
 * With --enable-priority-scheduling and every slot of a rank taken, the
 * request at the head of its queue preempts the running request of the
 * lowest priority (of those, the one that entered the queue last) when its
 * priority is more than --priority-scheduling-preemption-threshold better;
 * one victim per request admitted, as SGLang's PrefillAdder does when the
 * batch is full of requests (a KV shortage does not preempt there). The
 * victim goes back to the queue, keeps the tokens it made (a stream pauses)
 * and, readmitted, prefills its prompt and those tokens again: SGLang frees
 * its KV (release_req, reset_for_retract) and prefills origin_input_ids +
 * output_ids. After sgl-project/sglang
 * python/sglang/srt/managers/schedule_policy.py preempt_to_schedule and
 * python/sglang/srt/managers/scheduler.py _get_new_batch_prefill_raw
 * (preemption on by default with priority scheduling, off with
 * --disable-priority-preemption). In the classic profile the prefill again
 * is one more TTFT; a held request (POST /sim/hold) is not preempted. */

/* The running request on rk that `head` may preempt, or NULL. */
static struct sim_req *victim(const struct sim_engine *s, struct sim_rank *rk, const struct sim_req *head)
{
	if (!s->conf->priority_scheduling || s->conf->no_preemption)
		return NULL;
	struct sim_req *v = NULL, *r;
	IG_LIST_FOREACH(r, &rk->batch, struct sim_req, blink) {
		if (r->held || r->state != SIM_REQ_RUNNING)
			continue;
		if (!v || prio_before(s, v->priority, r->priority) ||
		    (v->priority == r->priority && r->queued_us > v->queued_us))
			v = r;
	}
	if (!v)
		return NULL;
	/* (priorities may be LONG_MIN/LONG_MAX: the difference in double) */
	double diff = (double)head->priority - (double)v->priority;
	if (s->conf->low_first)
		diff = -diff;
	return diff > (double)s->conf->preempt_threshold ? v : NULL;
}

/* v leaves its slot for the queue, with the tokens it has. */
static void preempt(struct sim_engine *s, struct sim_req *v, uint64_t now)
{
	struct sim_rank *rk = v->rank;
	ig_log_debug("%s: %s (priority %ld) preempted after %ld tokens", __func__, v->id, v->priority, v->emitted);
	if (sim_conf_steps(s->conf)) {
		ig_list_del(&v->blink);
		sim_kv_release(&rk->kv, v->chain, v->tokens, v->nmatched, v->nmatched, v->own);
		v->own = 0;
		v->prefill_now = v->prefill_left = 0;
		v->resumed_at = v->emitted;
	} else {
		v->resumed_at = v->stream ? v->emitted : (now < v->t_first_us ? v->resumed_at : due_by(v, now));
		if (v->resumed_at >= v->n_tokens)
			v->resumed_at = v->n_tokens - 1; /* its last token is made after the prefill again */
		sim_deadlines_remove(&s->heap, v);
		ig_list_del(&v->blink);
	}
	s->running--;
	rk->running--;
	if (s->lora)
		sim_loras_deactivate(&s->loras, rk->idx, v->lora);
	v->kv_ready = false; /* its KV is freed: readmitted, it prefills */
	v->preempted++;
	s->st.preempted++;
	v->state = SIM_REQ_QUEUED;
	queue_push(s, v);
}

/* Whether `head` has a slot on rk: a free one, or one a running request
 * of a lower priority gave up to it (preempted). */
static bool slot_for(struct sim_engine *s, struct sim_rank *rk, struct sim_req *head, uint64_t now)
{
	if (rk->running < s->conf->max_running)
		return true;
	struct sim_req *v = victim(s, rk, head);
	if (!v)
		return false;
	preempt(s, v, now);
	return true;
}

/* The first request of rk's queue that may join its batch: the head,
 * unless LoRA adapters hold it back (vLLM and SGLang skip a request whose
 * adapter would be one too many in the batch, and it keeps its place in the
 * queue: lora.c). NULL: none. */
static struct sim_req *next_admissible(const struct sim_engine *s, struct sim_rank *rk)
{
	struct sim_req *r;
	IG_LIST_FOREACH(r, &rk->queue, struct sim_req, qlink) {
		if (!s->lora || sim_loras_fits(&s->loras, rk->idx, r->lora))
			return r;
	}
	return NULL;
}

/* Fills the rank's free slots from the head of its queue: one prefill
 * batch. SGLang logs each prefill batch with the running batch as it was
 * before the new requests join and the queue after they left it (after
 * sgl-project/sglang python/sglang/srt/observability/scheduler_metrics_mixin.py
 * report_prefill_stats: PrefillStats.from_adder(adder, running_batch.reqs)). */
static void admit(struct sim_engine *s, struct sim_rank *rk, uint64_t now)
{
	bool log = sglang_refresh(s) && !ig_list_empty(&rk->queue) && rk->running < s->conf->max_running;

	if (log)
		snap_take(rk, SNAP_RUNNING);
	struct sim_req *r;
	while ((r = next_admissible(s, rk))) {
		if (!slot_for(s, rk, r, now))
			break;
		queue_unlink(s, r);
		start(s, r, now);
	}
	if (log) {
		snap_take(rk, SNAP_WAITING);
		rk->last_log_us = now;
	}
}

static void step_admit(struct sim_engine *s, struct sim_rank *rk, uint64_t now);
static void step_begin(struct sim_engine *s, struct sim_rank *rk, uint64_t now);

/* --kv-events: what rk's cache did since the last call goes out as one
 * batch, at the end of each step and of each call that changed it. */
static void kv_publish(struct sim_engine *s, struct sim_rank *rk)
{
	if (rk->kvpub)
		sim_kvevents_publish(s->conf, rk->kvpub, &rk->kv, rk->idx);
}

/* r no longer holds its slot. With a step profile it leaves the batch and
 * gives back its KV (its prompt's blocks join the cache when it was
 * served); the caller admits others at the end of the step. */
static void release(struct sim_engine *s, struct sim_req *r, uint64_t now)
{
	struct sim_rank *rk = r->rank;

	if (s->lora)
		sim_loras_deactivate(&s->loras, rk->idx, r->lora);
	if (sim_conf_steps(s->conf)) {
		ig_list_del(&r->blink);
		ig_list_init(&r->blink);
		sim_kv_release(&rk->kv, r->chain, r->tokens, r->nmatched,
			       r->state == SIM_REQ_DONE ? r->nchain : r->nmatched, r->own);
		r->own = 0;
		s->running--;
		rk->running--;
		return;
	}
	sim_deadlines_remove(&s->heap, r);
	ig_list_del(&r->blink);
	s->running--;
	if (--rk->running == 0)
		rk->next_log_us = 0; /* no decode steps while nothing runs */
	admit(s, rk, now);
}

/* Step profiles: the answer joins the request's chain, as the server caches
 * the tokens it generated with the prompt (SGLang's radix cache inserts a
 * finished request's whole sequence: mem_cache/radix_cache.py
 * cache_finished_req). The text is the one the next turn of a conversation
 * sends back: for chat "assistant\n" + the answer + "\n" after the
 * prompt's messages (the prompt's own layout, parse.c prompt_text), for
 * completions the answer right after the prompt. With --tokenizer, the
 * answer's ids after the prompt's, as an engine caches the ids it
 * generated (a next turn's template may tokenize that history otherwise,
 * as it does on a real engine). */
static void chain_answer(const struct sim_conf *conf, struct sim_req *r)
{
	struct ig_buf t;
	ig_buf_init(&t);
	if (r->ntokens) { /* --tokenizer: the answer's ids after the prompt's, as the engine caches them */
		uint32_t *ans = NULL;
		size_t na = 0;
		sim_wire_answer_text(&t, r);
		if (ig_tokenizer_encode(conf->tok, t.data ? t.data : "", t.len, false, &ans, &na) < 0)
			abort();
		ig_buf_free(&t);
		size_t total = r->ntokens + na, more = total / IG_BLOCK_TOKENS - r->nchain;
		uint32_t *tk = realloc(r->tokens, (total ? total : 1) * sizeof(*tk));
		uint64_t *v = realloc(r->chain, (r->nchain + more + 1) * sizeof(*v));
		if (!tk || !v)
			abort();
		memcpy(tk + r->ntokens, ans, na * sizeof(*tk));
		free(ans);
		r->tokens = tk;
		r->ntokens = total;
		r->chain = v;
		for (size_t k = 0; k < more; k++, r->nchain++)
			v[r->nchain] = ig_block_hash_ids(r->nchain ? v[r->nchain - 1] : 0, tk + r->nchain * IG_BLOCK_TOKENS);
		return;
	}
	ig_buf_append(&t, r->tail, r->ntail);
	bool chat = r->kind == SIM_CHAT || r->kind == SIM_RESPONSES;
	if (chat)
		ig_buf_append(&t, "assistant\n", 10);
	sim_wire_answer_text(&t, r);
	if (chat)
		ig_buf_append(&t, "\n", 1);
	size_t more = t.len / IG_BLOCK_BYTES;
	uint64_t *v = more ? realloc(r->chain, (r->nchain + more) * sizeof(*v)) : NULL;
	if (v && r->tokens) { /* --kv-events: the answer's token ids too */
		uint32_t *tk = realloc(r->tokens, (r->nchain + more) * IG_BLOCK_TOKENS * sizeof(*tk));
		if (!tk)
			abort();
		r->tokens = tk;
		sim_kv_text_tokens(t.data, more, tk + r->nchain * IG_BLOCK_TOKENS);
	}
	if (v) {
		r->chain = v;
		uint64_t h = r->nchain ? r->chain[r->nchain - 1] : 0;
		for (size_t k = 0; k < more; k++)
			r->chain[r->nchain++] = h = ig_block_hash(h, t.data + k * IG_BLOCK_BYTES, IG_BLOCK_BYTES);
	}
	ig_buf_free(&t);
}

/* The generation ended: completed, or cut by --stream-fail-rate (failed). */
static void finish(struct sim_engine *s, struct sim_req *r, uint64_t now, bool failed)
{
	struct sim_rank *rk = r->rank;

	if (!failed && r->cache_report)
		chain_answer(s->conf, r);
	r->state = SIM_REQ_DONE;
	if (failed) {
		s->st.stream_failed++;
	} else {
		s->st.served++;
		rk->served++;
		s->st.prompt_tokens += (uint64_t)r->prompt_tokens;
		rk->prompt_tokens += (uint64_t)r->prompt_tokens;
		rk->cached_tokens += (uint64_t)r->cached_tokens;
		if (r->length_cut)
			rk->finished_length++;
		else
			rk->finished_stop++;
	}
	release(s, r, now);
	/* Unpaced, a decode step has no length in time: count finished
	 * requests as steps instead. */
	if (sglang_refresh(s) && decode_log_us(s) == 0 && ++rk->finished_since_log >= DECODE_LOG_STEPS)
		log_decode(rk, now);
}


/* ---- output (the bytes themselves: wire.c) ---- */

/* The whole non-streamed answer, written when its last token is due. */
static void emit_full(struct sim_engine *s, struct sim_req *r)
{
	sim_wire_answer(&r->out, r);
	s->st.generation_tokens += (uint64_t)r->n_tokens;
	r->rank->generation_tokens += (uint64_t)r->n_tokens;
}

/* A streamed r's tokens up to `due` go out, one chunk each (a chat answer's
 * first chunk carries the role), then its end or its failure when that has
 * come. Returns true when r finished. */
static bool stream_through(struct sim_engine *s, struct sim_req *r, long due, uint64_t now)
{
	if (r->emitted == 0)
		sim_wire_stream_open(&r->out, r);
	/* Tokens that fell due together (a late wake-up, a pace above the
	 * timer's resolution, a decode step) go out together, one chunk each. */
	while (r->emitted < due) {
		sim_wire_stream_token(&r->out, r);
		r->emitted++;
		s->st.generation_tokens++;
		r->rank->generation_tokens++;
	}
	if (r->emitted == r->fail_at) {
		sim_wire_stream_error(&r->out, r, (enum sim_flavor)s->conf->flavor);
		ig_log_debug("%s: %s failed after %ld tokens (--stream-fail-rate)", __func__, r->id, r->emitted);
		finish(s, r, now, true);
		return true;
	}
	if (r->emitted >= r->n_tokens) {
		sim_wire_stream_end(&r->out, r);
		finish(s, r, now, false);
		return true;
	}
	return false;
}

/* ---- holding generations (POST /sim/hold) ---- */

/* True when POST /sim/hold stops r before its end. */
static bool stops(const struct sim_engine *s, const struct sim_req *r)
{
	return s->hold_after >= 0 && s->hold_after < r->n_tokens;
}

/* r waits, in the heap, for sim_engine_hold to let it go: a deadline that
 * never comes keeps it out of the way of the others. */
static void hold(struct sim_engine *s, struct sim_req *r)
{
	r->held = true;
	s->held++;
	r->deadline_us = UINT64_MAX;
	sim_deadlines_later(&s->heap, r);
}

int sim_engine_hold(struct sim_engine *s, long after, uint64_t now)
{
	if (sim_conf_steps(s->conf))
		return -1;
	s->hold_after = after < 0 ? -1 : after;
	if (s->held == 0)
		return 0;
	for (size_t i = 0; i < s->heap.len; i++) {
		struct sim_req *r = s->heap.v[i];
		if (r->held) {
			r->held = false;
			r->deadline_us = now;
		}
	}
	s->held = 0;
	sim_deadlines_reorder(&s->heap); /* deadlines moved earlier */
	return 0;
}

/* r is RUNNING and its deadline has come. */
static void step(struct sim_engine *s, struct sim_req *r, uint64_t now)
{
	if (!r->stream) {
		if (stops(s, r)) {
			hold(s, r);
			return;
		}
		emit_full(s, r);
		finish(s, r, now, false);
		wake(r);
		return;
	}
	long due = r->n_tokens;
	if (r->tps > 0 && now >= r->t_first_us)
		due = due_by(r, now);
	if (r->fail_at >= 0 && due > r->fail_at)
		due = r->fail_at;
	if (stops(s, r) && due > s->hold_after)
		due = s->hold_after;
	if (!stream_through(s, r, due, now)) {
		if (stops(s, r) && r->emitted >= s->hold_after) {
			hold(s, r);
		} else {
			r->deadline_us = token_time(r, r->emitted);
			if (r->deadline_us <= now)
				r->deadline_us = now + 1;
			sim_deadlines_later(&s->heap, r);
		}
	}
	wake(r);
}

/* ---- decode steps (every profile but classic) ----
 * One step serves every running request of a rank: the prefill of up to
 * `chunk` prompt tokens (the oldest unfinished prefills first, as chunked
 * prefill does) and one decode of every request past its prefill, which
 * gives each tokens_per_step tokens (MTP: more than one, on average). Its
 * length, in simulated time: step_ms, plus per_request_us per decoding
 * request, plus per_context_ns per token of their context, plus the
 * prefill at prefill_tps. Admission is first come first served (SGLang's
 * default --schedule-policy fcfs) while a slot is free and the KV budget
 * holds the request's uncached prompt and its output reserve. */

/* Wall-clock microseconds of sim_us simulated ones. */
static uint64_t wall_us(const struct sim_engine *s, double sim_us)
{
	double w = ceil(sim_us / s->conf->time_scale);
	return w < 1 ? 1 : (uint64_t)w;
}

static void step_admit(struct sim_engine *s, struct sim_rank *rk, uint64_t now)
{
	const struct sim_steps *k = &s->conf->steps;
	struct sim_req *r;
	while ((r = next_admissible(s, rk))) {
		if (!slot_for(s, rk, r, now))
			break;
		size_t m = sim_kv_match(&rk->kv, r->chain, r->nchain);
		/* The last prompt token is always computed (it gives the first
		 * output token), so a fully cached prompt still prefills one. */
		long cached = (long)m * IG_BLOCK_TOKENS;
		if (cached > r->prompt_tokens - 1)
			cached = r->prompt_tokens > 0 ? r->prompt_tokens - 1 : 0;
		/* a preempted one prefills the tokens it made too */
		long own = r->prompt_tokens - cached + r->emitted;
		long left = r->n_tokens - r->emitted;
		long reserve = left < k->output_reserve ? left : k->output_reserve;
		if (sim_kv_admit(&rk->kv, r->chain, m, own, reserve) < 0) {
			if (rk->running > 0)
				break; /* the head waits for room; FCFS: so do the others */
			/* Alone and still too big: it runs over budget rather
			 * than never (a real server refuses it at its context
			 * length; --context-length does that here). */
			sim_kv_admit(&rk->kv, r->chain, 0, 0, 0);
			rk->kv.own += own;
			m = 0;
			cached = 0;
			own = r->prompt_tokens + r->emitted;
		}
		queue_unlink(s, r);
		r->nmatched = m;
		r->cached_tokens = cached;
		r->cache_report = true;
		r->own = own;
		/* KV transferred from a prefill server (pd.c): nothing to compute,
		 * its first token comes from the next decode step */
		r->prefill_left = r->kv_ready ? 0 : own;
		r->prefill_now = 0;
		r->acc = 0;
		r->state = SIM_REQ_RUNNING;
		s->running++;
		rk->running++;
		ig_list_append(&rk->batch, &r->blink);
		if (s->lora && sim_loras_activate(&s->loras, rk->idx, r->lora)) {
			s->lora_loads++;
			rk->lora_stall_us += (double)s->conf->lora_load_ms * 1000.0; /* the next step loads it first */
		}
	}
}

static void step_begin(struct sim_engine *s, struct sim_rank *rk, uint64_t now)
{
	const struct sim_steps *k = &s->conf->steps;
	long budget = k->chunk, decoding = 0, prefill = 0;
	double ctx = 0;
	struct sim_req *r;

	rk->step_end_us = 0;
	if (ig_list_empty(&rk->batch))
		return;
	IG_LIST_FOREACH(r, &rk->batch, struct sim_req, blink) {
		if (r->prefill_left > 0) {
			r->prefill_now = r->prefill_left < budget ? r->prefill_left : budget;
			budget -= r->prefill_now;
			prefill += r->prefill_now;
		} else {
			decoding++;
			ctx += (double)(r->prompt_tokens + r->emitted);
		}
	}
	double us = k->step_ms * 1000.0 + k->per_request_us * (double)decoding + k->per_context_ns * ctx / 1000.0 +
		    (double)prefill * 1e6 / k->prefill_tps;
	if (s->fault == SIM_FAULT_SLOW)
		us *= 10;
	us = us * rk->slowdown + rk->lora_stall_us;
	rk->lora_stall_us = 0;
	rk->step_sim_us = us;
	rk->step_tokens = 0;
	rk->step_end_us = now + wall_us(s, us);
}

/* r got n more output tokens in a step: streamed ones go out now, the last
 * one finishes it. */
static void step_emit(struct sim_engine *s, struct sim_req *r, long n, uint64_t now)
{
	long target = r->emitted + n;
	if (target > r->n_tokens)
		target = r->n_tokens;
	if (r->fail_at >= 0 && target > r->fail_at)
		target = r->fail_at;
	r->rank->step_tokens += target - r->emitted;
	r->rank->kv.own += target - r->emitted;
	r->own += target - r->emitted;
	if (!r->stream) {
		r->emitted = target; /* the text is written whole at the end */
		if (r->emitted >= r->n_tokens) {
			emit_full(s, r);
			finish(s, r, now, false);
			wake(r);
		}
		return;
	}
	stream_through(s, r, target, now);
	wake(r);
}

/* The step under way on rk ends at `now`: prefills advance, decodes
 * produce, finished requests leave, others are admitted, the next step
 * begins. */
static void step_end(struct sim_engine *s, struct sim_rank *rk, uint64_t now)
{
	struct sim_req *r, *next;
	double tps = s->conf->steps.tokens_per_step;

	IG_LIST_FOREACH_SAFE(r, next, &rk->batch, struct sim_req, blink) {
		if (r->prefill_now > 0) {
			r->prefill_left -= r->prefill_now;
			r->prefill_now = 0;
			if (r->prefill_left > 0)
				continue;
			r->acc += 1; /* the prefill's forward pass gives the first token */
			r->t_first_us = now;
		} else if (r->prefill_left == 0) {
			r->acc += tps;
		} else {
			continue; /* its prefill waits for room in a step */
		}
		long n = (long)floor(r->acc);
		r->acc -= (double)n;
		if (n > 0)
			step_emit(s, r, n, now);
	}
	rk->gen_tps = rk->step_sim_us > 0 ? (double)rk->step_tokens * 1e6 / rk->step_sim_us : 0;
	step_admit(s, rk, now);
	step_begin(s, rk, now);
	kv_publish(s, rk);
}

void sim_engine_submit(struct sim_engine *s, struct sim_req *r)
{
	uint64_t now = ig_now_us();

	r->heap_idx = -1;
	if (s->fault == SIM_FAULT_HANG) {
		r->state = SIM_REQ_HUNG;
		s->hung++;
		return;
	}
	/* SGLang's data-parallel controller sends each request to the next
	 * rank in turn: load_balance_method "auto" is round_robin outside
	 * PD disaggregation (after sgl-project/sglang
	 * python/sglang/srt/managers/data_parallel_controller.py
	 * round_robin_scheduler, python/sglang/srt/server_args.py). */
	/* A rank the client named (the HTTP side checked it is one): SGLang's
	 * controller sends it there before any balancing
	 * (maybe_external_dp_rank_routing), vLLM's client to that engine
	 * (vllm/v1/engine/core_client.py get_core_engine_for_request). */
	if (r->dp_rank_set && r->dp_rank >= 0 && r->dp_rank < s->nranks) {
		r->rank = &s->ranks[r->dp_rank];
	} else {
		r->rank = &s->ranks[s->rr_next];
		s->rr_next = (s->rr_next + 1) % s->nranks;
	}
	if (s->conf->priority_scheduling)
		note_priority(r->rank, r->priority);
	r->state = SIM_REQ_QUEUED;
	queue_push(s, r);
	if (sim_conf_steps(s->conf)) {
		step_admit(s, r->rank, now);
		if (r->rank->step_end_us == 0)
			step_begin(s, r->rank, now);
		kv_publish(s, r->rank);
		return;
	}
	admit(s, r->rank, now);
	/* An unpaced request is answered before the handler returns: no
	 * suspend, no resume, no second trip through the loop. */
	if (r->state == SIM_REQ_RUNNING && r->deadline_us <= now)
		step(s, r, now);
}

/* When the rank's snapshot is next refreshed without an admission: the
 * next decode-stats log while it runs, 30 s after the last log while it
 * is idle. 0 when never (live gauges). */
static uint64_t next_refresh(const struct sim_engine *s, const struct sim_rank *rk)
{
	if (!sglang_refresh(s))
		return 0;
	if (rk->running > 0)
		return rk->next_log_us; /* 0 when unpaced: counted in finish() */
	if (rk->waiting == 0)
		return rk->last_log_us + IDLE_LOG_US;
	return 0;
}

void sim_engine_run(struct sim_engine *s, uint64_t now_us)
{
	while (s->heap.len > 0 && s->heap.v[0]->deadline_us <= now_us)
		step(s, s->heap.v[0], now_us);
	/* Steps that ended by now, each at its own end (a late wake-up
	 * catches up, a bounded number at a time). */
	for (long i = 0; i < s->nranks; i++) {
		struct sim_rank *rk = &s->ranks[i];
		for (int n = 0; n < 1000 && rk->step_end_us && rk->step_end_us <= now_us; n++)
			step_end(s, rk, rk->step_end_us);
	}
	struct sim_req *r;
	while ((r = IG_LIST_FIRST(&s->delayed, struct sim_req, qlink)) && r->deadline_us <= now_us) {
		ig_list_del(&r->qlink);
		r->state = SIM_REQ_DONE;
		wake(r);
	}
	for (long i = 0; i < s->nranks; i++) {
		struct sim_rank *rk = &s->ranks[i];
		uint64_t due = next_refresh(s, rk);
		if (due == 0 || due > now_us)
			continue;
		log_decode(rk, now_us);
		if (rk->running > 0) {
			rk->next_log_us += decode_log_us(s);
			if (rk->next_log_us <= now_us) /* a late wake-up: no burst of logs */
				rk->next_log_us = now_us + decode_log_us(s);
		}
	}
}

int sim_engine_timeout_ms(struct sim_engine *s, uint64_t now_us)
{
	uint64_t d = s->heap.len > 0 ? s->heap.v[0]->deadline_us : 0;

	const struct sim_req *first = IG_LIST_FIRST(&s->delayed, struct sim_req, qlink);
	if (first && (d == 0 || first->deadline_us < d))
		d = first->deadline_us;
	for (long i = 0; i < s->nranks; i++) {
		uint64_t r = next_refresh(s, &s->ranks[i]);
		if (r != 0 && (d == 0 || r < d))
			d = r;
		r = s->ranks[i].step_end_us;
		if (r != 0 && (d == 0 || r < d))
			d = r;
	}
	if (d == 0)
		return -1;
	if (d <= now_us)
		return 0;
	/* capped before rounding up: a held request's deadline is UINT64_MAX */
	uint64_t us = d - now_us;
	return us > 3600000000ull ? 3600000 : (int)((us + 999) / 1000);
}

/* How many of r's tokens exist by now: all streamed ones, or for a
 * non-streamed answer (written only at its end) those its pace made due. */
static long tokens_so_far(const struct sim_req *r, uint64_t now)
{
	if (r->stream)
		return r->emitted;
	if (now < r->t_first_us)
		return r->resumed_at;
	return due_by(r, now);
}

void sim_engine_rank_tokens(const struct sim_engine *s, const struct sim_rank *rk, uint64_t now_us,
			    long *used, long *pending, double *tokens_per_s)
{
	*used = *pending = 0;
	*tokens_per_s = 0;
	if (sim_conf_steps(s->conf)) {
		*used = sim_kv_used(&rk->kv);
		*tokens_per_s = rk->running > 0 ? rk->gen_tps : 0;
	}
	for (size_t h = 0; h < s->heap.len; h++) {
		const struct sim_req *r = s->heap.v[h];
		if (r->rank != rk)
			continue;
		*used += r->prompt_tokens + tokens_so_far(r, now_us);
		if (now_us >= r->t_first_us)
			*tokens_per_s += r->tps;
	}
	const struct sim_req *r;
	IG_LIST_FOREACH(r, &rk->queue, const struct sim_req, qlink)
		*pending += r->prompt_tokens;
}

int sim_engine_flush_cache(struct sim_engine *s)
{
	if (s->running > 0 || s->waiting > 0)
		return -1;
	for (long i = 0; sim_conf_steps(s->conf) && i < s->nranks; i++) {
		size_t n = sim_kv_flush(&s->ranks[i].kv);
		ig_log_info("rank %ld: prefix cache flushed, %zu blocks", i, n);
		kv_publish(s, &s->ranks[i]);
	}
	return 0;
}

void sim_engine_abort(struct sim_engine *s, struct sim_req *r)
{
	switch (r->state) {
	case SIM_REQ_QUEUED:
		queue_unlink(s, r);
		break;
	case SIM_REQ_RUNNING:
		if (r->held) {
			r->held = false;
			s->held--;
		}
		r->state = SIM_REQ_ABORTED; /* before release: nothing of it is cached */
		release(s, r, ig_now_us());
		if (sim_conf_steps(s->conf)) {
			step_admit(s, r->rank, ig_now_us());
			if (r->rank->step_end_us == 0)
				step_begin(s, r->rank, ig_now_us());
			kv_publish(s, r->rank);
		}
		break;
	case SIM_REQ_HUNG:
		s->hung--;
		break;
	case SIM_REQ_DELAYED:
		/* A health probe that left: not a completion, not counted. */
		ig_list_del(&r->qlink);
		r->state = SIM_REQ_ABORTED;
		return;
	default:
		return; /* not started, or already finished: nothing to stop */
	}
	r->state = SIM_REQ_ABORTED;
	s->st.aborted++;
	ig_log_debug("%s: %s aborted by the client", __func__, r->id);
}
