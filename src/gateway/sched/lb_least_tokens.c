/* least-tokens: the backend expected to finish the request soonest, its
 * outstanding work plus the request's over its speed (output tokens per
 * second of one request, measured from its answers) and weight. A backend
 * not measured yet counts at the mean of those measured.
 * The work a request brings (its prompt estimate and the output it asked
 * for) is counted on its backend when it starts, less one per event relayed
 * (`progress`, in the relay without the lock: the backend's counters are
 * atomics), and the rest when it ends. */
#include "config.h"

#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/policy.h"

/* a is expected to finish a request of `tokens` sooner than b. */
static bool sooner(const struct ig_backend *a, const struct ig_backend *b, long tokens, double dflt)
{
	double sa = (double)atomic_load(&a->speed_milli), sb = (double)atomic_load(&b->speed_milli);
	double wa = (double)(atomic_load(&a->out_tokens) + tokens) / ((sa > 0 ? sa : dflt) * (double)a->weight);
	double wb = (double)(atomic_load(&b->out_tokens) + tokens) / ((sb > 0 ? sb : dflt) * (double)b->weight);
	return wa < wb;
}

static size_t pick(void *state IG_UNUSED, const struct ig_pick_set *set, const struct ig_pick_req *rq)
{
	double speed = 0;
	size_t known = 0, best = 0;
	for (size_t i = 0; i < set->k; i++) {
		long sp = atomic_load(&set->cand[i]->speed_milli);
		if (sp > 0) {
			speed += (double)sp;
			known++;
		}
	}
	speed = known ? speed / (double)known : 1;
	for (size_t i = 1; i < set->k; i++)
		if (sooner(set->cand[i], set->cand[best], rq->tokens, speed))
			best = i;
	return best;
}

static void started(void *state IG_UNUSED, struct ig_backend *b, struct ig_pick_req *rq)
{
	rq->charged = rq->tokens > 0 ? rq->tokens : 0;
	if (rq->charged)
		atomic_fetch_add(&b->out_tokens, rq->charged);
}

/* An event relayed is about a token done. */
static void progress(struct ig_backend *b, struct ig_pick_req *rq)
{
	if (rq->charged > 0) {
		rq->charged--;
		atomic_fetch_sub(&b->out_tokens, 1);
	}
}

/* Its work leaves with it; its speed is a moving average (a fifth of each
 * new answer), from the start of the attempt, not from its first byte: a
 * server that queues requests of its own delivers less per second of a
 * request's life, however fast it decodes once it runs them. */
static void done(void *state IG_UNUSED, struct ig_backend *b, struct ig_pick_req *rq, const struct ig_pick_outcome *o)
{
	if (rq->charged > 0)
		atomic_fetch_sub(&b->out_tokens, rq->charged);
	rq->charged = 0;
	if (!o->ok || o->completion_tokens < 2 || o->duration_us == 0)
		return;
	double milli = (double)o->completion_tokens * 1e9 / (double)o->duration_us;
	long old = atomic_load(&b->speed_milli);
	atomic_store(&b->speed_milli, old > 0 ? (long)(0.8 * (double)old + 0.2 * milli) : (long)milli);
}

static void report(const void *state IG_UNUSED, const struct ig_backend *b, json_t *o)
{
	long sp = atomic_load(&b->speed_milli);
	json_object_set_new(o, "speed_tokens_per_s", sp > 0 ? json_real((double)sp / 1000.0) : json_null());
	json_object_set_new(o, "outstanding_tokens", json_integer(atomic_load(&b->out_tokens)));
}

const struct ig_policy ig_lb_least_tokens = {
	.name = "least-tokens",
	.needs = IG_POLICY_NEEDS_TOKENS,
	.pick = pick,
	.started = started,
	.progress = progress,
	.done = done,
	.report = report,
};
