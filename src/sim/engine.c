/* The engine: what a GPU batch does, minus the GPU. A request holds one of
 * --max-running slots from admission to its last token; the rest wait in a
 * FIFO. Running requests sit in a min-heap by their next deadline (first
 * token after TTFT, then one token per 1/tokens-per-second), so one timer
 * serves thousands of streams. Tokens go into req->out as SSE chunks, or, for
 * a non-streamed request, the whole JSON answer is written when the last
 * token is due. Not the HTTP side: server.c turns req->out into responses. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "sim.h"

static const char *const fault_names[] = {"ok", "error", "hang", "slow", "down"};

const char *sim_fault_name(enum sim_fault f) { return fault_names[f]; }

int sim_fault_parse(const char *name, enum sim_fault *out)
{
	for (unsigned i = 0; i < sizeof(fault_names) / sizeof(fault_names[0]); i++) {
		if (strcmp(name, fault_names[i]) == 0) {
			*out = (enum sim_fault)i;
			return 0;
		}
	}
	return -1;
}

int sim_engine_init(struct sim *s, struct sim_conf *conf)
{
	memset(s, 0, sizeof(*s));
	s->conf = conf;
	s->epfd = s->signal_fd = -1;
	s->fault = SIM_FAULT_OK;
	s->fail_rng = (uint64_t)conf->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
	s->started = ig_wall_s();
	return 0;
}

void sim_engine_free(struct sim *s)
{
	free(s->heap);
	s->heap = NULL;
	s->heap_len = s->heap_cap = 0;
}

bool sim_engine_should_fail(struct sim *s)
{
	if (s->fault == SIM_FAULT_ERROR)
		return true;
	if (s->conf->fail_rate <= 0)
		return false;
	/* xorshift64: its own stream, so --seed makes the failures reproducible
	 * whatever else draws random numbers. */
	uint64_t x = s->fail_rng;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	s->fail_rng = x;
	return (double)(x >> 11) / 9007199254740992.0 < s->conf->fail_rate;
}

/* ---- the deadline heap ---- */

static void heap_set(struct sim *s, size_t i, struct sim_req *r)
{
	s->heap[i] = r;
	r->heap_idx = (long)i;
}

static void sift_up(struct sim *s, size_t i)
{
	struct sim_req *r = s->heap[i];
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (s->heap[p]->deadline_us <= r->deadline_us)
			break;
		heap_set(s, i, s->heap[p]);
		i = p;
	}
	heap_set(s, i, r);
}

static void sift_down(struct sim *s, size_t i)
{
	struct sim_req *r = s->heap[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= s->heap_len)
			break;
		if (c + 1 < s->heap_len && s->heap[c + 1]->deadline_us < s->heap[c]->deadline_us)
			c++;
		if (r->deadline_us <= s->heap[c]->deadline_us)
			break;
		heap_set(s, i, s->heap[c]);
		i = c;
	}
	heap_set(s, i, r);
}

static void heap_push(struct sim *s, struct sim_req *r)
{
	if (s->heap_len == s->heap_cap) {
		size_t cap = s->heap_cap ? s->heap_cap * 2 : 256;
		struct sim_req **h = realloc(s->heap, cap * sizeof(*h));
		if (!h)
			abort(); /* a few KB; nothing sensible to do without it */
		s->heap = h;
		s->heap_cap = cap;
	}
	heap_set(s, s->heap_len++, r);
	sift_up(s, s->heap_len - 1);
}

static void heap_remove(struct sim *s, struct sim_req *r)
{
	if (r->heap_idx < 0)
		return;
	size_t i = (size_t)r->heap_idx;
	r->heap_idx = -1;
	s->heap_len--;
	if (i == s->heap_len)
		return;
	heap_set(s, i, s->heap[s->heap_len]);
	sift_down(s, i);
	sift_up(s, (size_t)s->heap[i]->heap_idx);
}

/* r's deadline moved later: restore the heap order. */
static void heap_later(struct sim *s, struct sim_req *r)
{
	sift_down(s, (size_t)r->heap_idx);
}

/* ---- the wait queue ---- */

static void queue_push(struct sim *s, struct sim_req *r)
{
	r->qnext = NULL;
	r->qprev = s->qtail;
	if (s->qtail)
		s->qtail->qnext = r;
	else
		s->qhead = r;
	s->qtail = r;
	s->waiting++;
}

static void queue_unlink(struct sim *s, struct sim_req *r)
{
	if (r->qprev)
		r->qprev->qnext = r->qnext;
	else
		s->qhead = r->qnext;
	if (r->qnext)
		r->qnext->qprev = r->qprev;
	else
		s->qtail = r->qprev;
	r->qprev = r->qnext = NULL;
	s->waiting--;
}

/* ---- pacing ---- */

/* When token i (0-based) is due. */
static uint64_t token_time(const struct sim_req *r, long i)
{
	if (r->tps <= 0 || i <= 0)
		return r->t_first_us;
	return r->t_first_us + (uint64_t)ceil((double)i * 1e6 / r->tps);
}

static void start(struct sim *s, struct sim_req *r, uint64_t now)
{
	double tps = s->conf->tokens_per_second;
	uint64_t ttft_us = (uint64_t)s->conf->ttft_ms * 1000u;

	/* The mode at admission decides the pace for the whole request. */
	if (s->fault == SIM_FAULT_SLOW) {
		ttft_us *= 10;
		tps = tps > 0 ? tps / 10 : 10;
	}
	r->tps = tps;
	r->t_first_us = now + ttft_us;
	r->state = SIM_REQ_RUNNING;
	s->running++;
	r->deadline_us = r->stream ? r->t_first_us : token_time(r, r->n_tokens - 1);
	heap_push(s, r);
}

/* Fills free slots from the head of the queue. */
static void admit(struct sim *s, uint64_t now)
{
	while (s->qhead && s->running < s->conf->max_running) {
		struct sim_req *r = s->qhead;
		queue_unlink(s, r);
		start(s, r, now);
	}
}

static void finish(struct sim *s, struct sim_req *r, uint64_t now)
{
	heap_remove(s, r);
	s->running--;
	r->state = SIM_REQ_DONE;
	s->st.served++;
	s->st.prompt_tokens += (uint64_t)r->prompt_tokens;
	admit(s, now);
}

/* ---- output ---- */

/* `data: {"id":...,"object":...,"created":...,"model":...,"choices":[` */
static void chunk_head(struct ig_buf *o, const struct sim_req *r)
{
	ig_buf_printf(o, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":%s,\"choices\":[",
		      r->id, r->kind == SIM_CHAT ? "chat.completion.chunk" : "text_completion",
		      (long long)r->created, r->model_json);
}

/* Closes a chunk; with include_usage every chunk but the last carries
 * "usage": null, as OpenAI does. */
static void chunk_tail(struct ig_buf *o, const struct sim_req *r)
{
	ig_buf_printf(o, "]%s}\n\n", r->include_usage ? ",\"usage\":null" : "");
}

static void emit_token(struct ig_buf *o, struct sim_req *r)
{
	char tok[SIM_TOKEN_MAX + 1];
	sim_text_next(&r->text, tok);
	chunk_head(o, r);
	if (r->kind == SIM_CHAT)
		ig_buf_printf(o, "{\"index\":0,\"delta\":{\"content\":\"%s\"},\"logprobs\":null,\"finish_reason\":null}", tok);
	else
		ig_buf_printf(o, "{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":null}", tok);
	chunk_tail(o, r);
}

static const char *finish_reason(const struct sim_req *r)
{
	return r->length_cut ? "length" : "stop";
}

static void emit_end(struct ig_buf *o, struct sim_req *r)
{
	chunk_head(o, r);
	if (r->kind == SIM_CHAT)
		ig_buf_printf(o, "{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"%s\"}", finish_reason(r));
	else
		ig_buf_printf(o, "{\"index\":0,\"text\":\"\",\"logprobs\":null,\"finish_reason\":\"%s\"}", finish_reason(r));
	chunk_tail(o, r);
	if (r->include_usage) {
		chunk_head(o, r);
		ig_buf_printf(o, "],\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld}}\n\n",
			      r->prompt_tokens, r->n_tokens, r->prompt_tokens + r->n_tokens);
	}
	ig_buf_printf(o, "data: [DONE]\n\n");
}

/* The whole non-streamed answer, written when its last token is due. */
static void emit_full(struct sim *s, struct sim_req *r)
{
	struct ig_buf *o = &r->out;
	char tok[SIM_TOKEN_MAX + 1];

	ig_buf_printf(o, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":%s,\"choices\":[{\"index\":0,",
		      r->id, r->kind == SIM_CHAT ? "chat.completion" : "text_completion",
		      (long long)r->created, r->model_json);
	if (r->kind == SIM_CHAT)
		ig_buf_printf(o, "\"message\":{\"role\":\"assistant\",\"content\":\"");
	else
		ig_buf_printf(o, "\"text\":\"");
	for (long i = 0; i < r->n_tokens; i++) {
		size_t n = sim_text_next(&r->text, tok);
		ig_buf_append(o, tok, n);
	}
	ig_buf_printf(o, "\"%s,\"logprobs\":null,\"finish_reason\":\"%s\"}],"
		      "\"usage\":{\"prompt_tokens\":%ld,\"completion_tokens\":%ld,\"total_tokens\":%ld}}",
		      r->kind == SIM_CHAT ? "}" : "", finish_reason(r),
		      r->prompt_tokens, r->n_tokens, r->prompt_tokens + r->n_tokens);
	s->st.generation_tokens += (uint64_t)r->n_tokens;
}

/* r is RUNNING and its deadline has come. */
static void step(struct sim *s, struct sim_req *r, uint64_t now)
{
	if (!r->stream) {
		emit_full(s, r);
		finish(s, r, now);
		sim_req_wake(r);
		return;
	}
	if (r->emitted == 0 && r->kind == SIM_CHAT) {
		chunk_head(&r->out, r);
		ig_buf_printf(&r->out, "{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
			      "\"logprobs\":null,\"finish_reason\":null}");
		chunk_tail(&r->out, r);
	}
	long due = r->n_tokens;
	if (r->tps > 0 && now >= r->t_first_us) {
		double d = floor((double)(now - r->t_first_us) * r->tps / 1e6) + 1;
		if (d < (double)due)
			due = (long)d;
	}
	/* Tokens that fell due together (a late wake-up, or a pace above the
	 * timer's resolution) go out together, still one chunk each. */
	while (r->emitted < due) {
		emit_token(&r->out, r);
		r->emitted++;
		s->st.generation_tokens++;
	}
	if (r->emitted >= r->n_tokens) {
		emit_end(&r->out, r);
		finish(s, r, now);
	} else {
		r->deadline_us = token_time(r, r->emitted);
		if (r->deadline_us <= now)
			r->deadline_us = now + 1;
		heap_later(s, r);
	}
	sim_req_wake(r);
}

void sim_engine_submit(struct sim *s, struct sim_req *r)
{
	uint64_t now = ig_now_us();

	r->heap_idx = -1;
	if (s->fault == SIM_FAULT_HANG) {
		r->state = SIM_REQ_HUNG;
		s->hung++;
		return;
	}
	r->state = SIM_REQ_QUEUED;
	queue_push(s, r);
	admit(s, now);
	/* An unpaced request is answered before the handler returns: no
	 * suspend, no resume, no second trip through the loop. */
	if (r->state == SIM_REQ_RUNNING && r->deadline_us <= now)
		step(s, r, now);
}

void sim_engine_run(struct sim *s, uint64_t now_us)
{
	while (s->heap_len > 0 && s->heap[0]->deadline_us <= now_us)
		step(s, s->heap[0], now_us);
}

int sim_engine_timeout_ms(struct sim *s, uint64_t now_us)
{
	if (s->heap_len == 0)
		return -1;
	uint64_t d = s->heap[0]->deadline_us;
	if (d <= now_us)
		return 0;
	uint64_t ms = (d - now_us + 999) / 1000;
	return ms > 3600000 ? 3600000 : (int)ms;
}

void sim_engine_abort(struct sim *s, struct sim_req *r)
{
	switch (r->state) {
	case SIM_REQ_QUEUED:
		queue_unlink(s, r);
		break;
	case SIM_REQ_RUNNING:
		heap_remove(s, r);
		s->running--;
		admit(s, ig_now_us());
		break;
	case SIM_REQ_HUNG:
		s->hung--;
		break;
	default:
		return; /* not started, or already finished: nothing to stop */
	}
	r->state = SIM_REQ_ABORTED;
	s->st.aborted++;
	ig_log_debug("%s: %s aborted by the client", __func__, r->id);
}
