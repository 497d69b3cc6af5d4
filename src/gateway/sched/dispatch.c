/* Who runs next and where (dispatch.h): admission to a model's queue or a
 * backend, the drain that starts waiting requests when slots free, queue
 * deadlines, and the bookkeeping of slots (the backend's, the model's, the
 * key's, the class's), each counted here and nowhere else.
 * Not here: the order of the queues (scheduler.c), how a backend is chosen
 * among the eligible (policy.c, lb_*.c), what a request does once started
 * (proxy.c). */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "gateway.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "obs/stats.h"
#include "sched/adapters.h"
#include "sched/dispatch.h"

static struct ig_waiter *waiter_of(struct ig_sched_entry *e)
{
	return IG_CONTAINER_OF(e, struct ig_waiter, q);
}

/* ---- the policy ---- */

/* A backend went down or left the table (health.c, through the pool's
 * hook): what the policy learned of it is void. */
static void backend_gone(void *arg, const struct ig_backend *b)
{
	struct ig_sched *s = arg;
	if (s->policy && s->policy->gone)
		s->policy->gone(s->policy_state, b);
	for (int i = 0; i < 2; i++)
		if (s->pd_policy[i] && s->pd_policy[i]->gone)
			s->pd_policy[i]->gone(s->pd_state[i], b);
}

static void one_free(const struct ig_policy **p, void **state)
{
	if (*p && (*p)->free)
		(*p)->free(*state);
	*state = NULL;
}

static void policy_free(struct ig_sched *s)
{
	one_free(&s->policy, &s->policy_state);
	for (int i = 0; i < 2; i++) {
		one_free(&s->pd_policy[i], &s->pd_state[i]);
		s->pd_policy[i] = NULL;
	}
}

/* Policy `index` (policy_list.h) in *p with its state: kept (reconfigured)
 * when it is the one there, else made anew and the old one freed (requests
 * running keep the old one's pointer and are ended without its state:
 * ig_dispatch_end). Returns 0 or -1. */
static int one_set(const struct ig_policy **p, void **state, int index, const struct ig_conf *cfg)
{
	const struct ig_policy *np = ig_policy_get(index);
	void *ns = NULL;
	if (np == *p)
		return np->reconfigure ? np->reconfigure(*state, cfg) : 0;
	if (np->init && np->init(&ns, cfg) < 0)
		return -1;
	one_free(p, state);
	*p = np;
	*state = ns;
	return 0;
}

/* The policy that picks for w, and its state: a pair's half's own in a
 * pool with pairs, else the gateway's. */
static const struct ig_policy *policy_for(struct ig_sched *s, const struct ig_waiter *w, void **state)
{
	int i = w->pick.role == IG_PICK_PREFILL ? 0 : w->m && w->m->pairs ? 1 : -1;
	if (i < 0 || !s->pd_policy[i]) {
		*state = s->policy_state;
		return s->policy;
	}
	*state = s->pd_state[i];
	return s->pd_policy[i];
}

/* The state w's attempt started under, if it is still one of the
 * gateway's (a reload may have replaced it while the request ran), else
 * NULL. */
static void *state_of(const struct ig_sched *s, const struct ig_waiter *w)
{
	if (w->policy == s->policy && w->policy_state == s->policy_state)
		return s->policy_state;
	for (int i = 0; i < 2; i++)
		if (w->policy == s->pd_policy[i] && w->policy_state == s->pd_state[i])
			return s->pd_state[i];
	return NULL;
}

/* Its families of /metrics (metrics.h): the retry budget's refusals, the
 * queues. */
static void denied_prom(void *arg, struct ig_buf *b)
{
	struct ig_gw *gw = IG_CONTAINER_OF(arg, struct ig_gw, dispatch_stats);
	ig_buf_printf(b, "# HELP infergate_retries_denied_total Retries the retry budget refused.\n"
		      "# TYPE infergate_retries_denied_total counter\ninfergate_retries_denied_total %lu\n",
		      (unsigned long)gw->sched.retries_denied);
}

static void queue_prom(void *arg, struct ig_buf *b)
{
	const struct ig_dispatch_stats *st = arg;
	struct ig_gw *gw = IG_CONTAINER_OF(arg, struct ig_gw, dispatch_stats);
	ig_buf_printf(b, "# HELP infergate_queue_depth Requests waiting for a backend slot.\n"
		      "# TYPE infergate_queue_depth gauge\ninfergate_queue_depth %zu\n", gw->sched.qlen);
	ig_buf_printf(b, "# HELP infergate_queue_rejected_total Requests refused with 429 (queue full).\n"
		      "# TYPE infergate_queue_rejected_total counter\ninfergate_queue_rejected_total %lu\n",
		      (unsigned long)st->queue_rejected);
	ig_buf_printf(b, "# HELP infergate_queue_timeouts_total Requests that waited too long (503).\n"
		      "# TYPE infergate_queue_timeouts_total counter\ninfergate_queue_timeouts_total %lu\n",
		      (unsigned long)st->queue_timeouts);
}

/* Reactor 0's tick: the queues' timeouts (which drain the queue too). */
static void expire_timer(struct ig_rx *rx, uint64_t now_ms, void *arg IG_UNUSED)
{
	ig_dispatch_expire(rx->gw, now_ms);
}

int ig_dispatch_init(struct ig_gw *gw, char **err)
{
	struct ig_sched *s = &gw->sched;
	if (one_set(&s->policy, &s->policy_state, gw->cfg->policy, gw->cfg) < 0 ||
	    one_set(&s->pd_policy[0], &s->pd_state[0], gw->cfg->pd_prefill_policy, gw->cfg) < 0 ||
	    one_set(&s->pd_policy[1], &s->pd_state[1], gw->cfg->pd_decode_policy, gw->cfg) < 0) {
		*err = strdup("routing policies: out of memory");
		return -1;
	}
	gw->fleet.on_gone = backend_gone;
	gw->fleet.on_gone_arg = s;
	gw->report_backend = ig_dispatch_report_backend;
	gw->report_gateway = ig_dispatch_report;
	if (ig_rx_every(gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_DISPATCH, expire_timer, NULL) < 0 ||
	    ig_stats_register_at(gw, &(struct ig_metrics_source){.name = "retry_budget", .prom = denied_prom,
								    .arg = &gw->dispatch_stats},
				   IG_METRICS_ORDER_RETRY_BUDGET) < 0 ||
	    ig_stats_register_at(gw, &(struct ig_metrics_source){.name = "queue", .prom = queue_prom,
								    .arg = &gw->dispatch_stats},
				   IG_METRICS_ORDER_QUEUE) < 0) {
		*err = strdup("out of memory");
		return -1;
	}
	return 0;
}

int ig_dispatch_configure(struct ig_gw *gw)
{
	struct ig_sched *s = &gw->sched;
	if (one_set(&s->policy, &s->policy_state, gw->cfg->policy, gw->cfg) < 0 ||
	    one_set(&s->pd_policy[0], &s->pd_state[0], gw->cfg->pd_prefill_policy, gw->cfg) < 0 ||
	    one_set(&s->pd_policy[1], &s->pd_state[1], gw->cfg->pd_decode_policy, gw->cfg) < 0)
		return -1;
	return 0;
}

void ig_dispatch_free(struct ig_gw *gw)
{
	ig_stats_unregister(gw, &gw->dispatch_stats);
	policy_free(&gw->sched);
	gw->sched.policy = NULL;
	gw->fleet.on_gone = NULL;
}

void ig_dispatch_report_backend(const struct ig_gw *gw, const struct ig_backend *b, json_t *entry)
{
	const struct ig_sched *s = &gw->sched;
	if (s->policy && s->policy->report)
		s->policy->report(s->policy_state, b, entry);
	ig_adapters_report_backend(gw, b, entry);
}

void ig_dispatch_report(const struct ig_gw *gw, json_t *obj)
{
	const struct ig_sched *s = &gw->sched;
	if (s->policy && s->policy->report_gateway)
		s->policy->report_gateway(s->policy_state, obj);
}

/* ---- answers ---- */

static void refuse(struct ig_waiter *w, unsigned status, const char *type, const char *param, const char *code,
		   const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void refuse(struct ig_waiter *w, unsigned status, const char *type, const char *param, const char *code,
		   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = ig_oaerror_vmessagef(fmt, ap);
	va_end(ap);
	struct ig_dispatch_error e = {status, type, param, code, msg ? msg : "out of memory"};
	w->ops->fail(w, &e);
	free(msg);
}

/* The answer for a model no known backend serves: 404 when every
 * backend's list is known, else 503 (the others' may name it once up). */
static void not_served(struct ig_gw *gw, struct ig_waiter *w)
{
	const struct ig_sched *s = &gw->sched;
	char served[300] = "", shown[300];
	size_t k = 0;

	if (s->unknown_down > 0) {
		refuse(w, 503, NULL, NULL, "no_healthy_backend",
		       "no healthy backend serves the model '%s': %zu backend(s) are down and their models are not "
		       "known yet", w->model, s->unknown_down);
		return;
	}
	for (size_t i = 0; i < s->n; i++) {
		const struct ig_model *m = s->v[i];
		if (m->nbackends == 0)
			continue;
		size_t at = strlen(served);
		snprintf(served + at, sizeof(served) - at, "%s%s", k++ ? ", " : "", m->name);
	}
	for (size_t i = 0; i < gw->cfg->n_aliases; i++) {
		size_t at = strlen(served);
		snprintf(served + at, sizeof(served) - at, "%s%s (alias)", k++ ? ", " : "", gw->cfg->aliases[i].alias);
	}
	if (w->alias)
		snprintf(shown, sizeof(shown), "%s' (an alias of '%s')", w->alias, w->model);
	else
		snprintf(shown, sizeof(shown), "%s'", w->model);
	refuse(w, 404, "invalid_request_error", "model", "model_not_found",
	       "The model '%s does not exist or is not served here; served: %s", shown, k ? served : "none yet");
}

/* The backend a pinned request must go to is down or gone: its stored
 * response is out of reach, OpenAI's 404. */
static void pin_lost(struct ig_gw *gw, struct ig_waiter *w)
{
	const struct ig_backend *held = ig_backend_fleet_find_id(&gw->fleet, w->pick.pinned - 1);
	const char *why = held ? "is down" : "has left the gateway";
	bool prev = w->pin_param && strcmp(w->pin_param, "previous_response_id") == 0;
	refuse(w, 404, "invalid_request_error", w->pin_param, prev ? "previous_response_not_found" : "response_not_found",
	       "%s with id '%s' not found (its backend %s).", prev ? "Previous response" : "Response",
	       w->pin_id ? w->pin_id : "", why);
}

/* ---- the queue ---- */

/* Each model has its own queue (scheduler.h): a request for an idle model
 * never waits behind another's. queue_size and queue_timeout_ms apply to
 * each. */
static uint64_t queue_timeout_ms(const struct ig_conf *cfg, int klass)
{
	return (uint64_t)(klass == IG_CLASS_HIGH ? cfg->queue_timeout_high_ms
			  : klass == IG_CLASS_LOW ? cfg->queue_timeout_low_ms : cfg->queue_timeout_ms);
}

/* Returns 0, or -1 out of memory (then not queued). */
static int enqueue(struct ig_gw *gw, struct ig_waiter *w)
{
	w->queued_ms = ig_now_ms();
	w->q.deadline_ms = w->queued_ms + queue_timeout_ms(gw->cfg, w->q.klass);
	if (ig_sched_enqueue(&gw->sched, w->m, &w->q) < 0)
		return -1;
	if (!w->was_queued)
		w->m->queued++;
	w->was_queued = w->queued = true;
	gw->sched.qlen++;
	return 0;
}

/* Out of the queue (the scheduler's part already done when dispatched);
 * how long it waited goes to the class's histogram. */
static void dequeue(struct ig_gw *gw, struct ig_waiter *w)
{
	uint64_t waited = ig_now_ms() - w->queued_ms;
	if (w->q.flow)
		ig_sched_dequeue(&gw->sched, w->m, &w->q);
	w->queued = false;
	gw->sched.qlen--;
	w->waited_ms += waited;
	ig_stats_observe_wait(gw, w->q.klass, waited);
}

/* Queues w in its model's queue, or refuses it (429) when that is full. */
static enum ig_dispatch_result wait_or_refuse(struct ig_gw *gw, struct ig_waiter *w)
{
	if ((long)w->m->qlen >= gw->cfg->queue_size) {
		gw->dispatch_stats.queue_rejected++;
		w->m->rejected++;
		refuse(w, 429, NULL, NULL, "queue_full",
		       "every backend of the model '%s' is at its in-flight limit and its queue is full (%ld "
		       "waiting); retry later", w->model, gw->cfg->queue_size);
		return IG_DISPATCH_FAILED;
	}
	if (enqueue(gw, w) < 0) {
		refuse(w, 500, NULL, NULL, "internal_error", "out of memory");
		return IG_DISPATCH_FAILED;
	}
	return IG_DISPATCH_QUEUED;
}

/* ---- slots ---- */

/* m's ends_held counts in the others' present run of waiting for it (a
 * view of the cluster's): from 0 when a new run began, or none goes on. */
static void ends_sync(struct ig_model *m, const struct ig_cluster_view *v)
{
	uint64_t run = ig_cluster_waiting_run(v, m->name);
	if (run != m->ends_run) {
		m->ends_held = 0;
		m->ends_run = run;
	}
}

/* w's attempt on b: b's slot was taken by the pick; the model's, the key's
 * and the class's counts follow, the policy is told, the request starts. */
static enum ig_dispatch_result start(struct ig_gw *gw, struct ig_waiter *w, struct ig_backend *b)
{
	struct ig_sched *s = &gw->sched;
	void *state;
	if (w->pick.ntried == 0 && w->pick.role != IG_PICK_PREFILL) /* a pair is one request sent */
		w->dispatch_seq = ++s->dispatched;
	if (w->pick.ntried < IG_MAX_TRIES)
		w->pick.tried[w->pick.ntried++] = b;
	w->backend = b;
	w->running = true;
	w->attempt_us = ig_now_us();
	w->policy = policy_for(s, w, &state);
	w->policy_state = state;
	if (w->pick.role != IG_PICK_PREFILL) /* a pair is one request of its model */
		w->m->inflight++;
	if (w->pick.low)
		atomic_fetch_add(&b->low_inflight, 1);
	ends_sync(w->m, gw->cluster_view);
	if (w->pick.low && ig_cluster_others_waiting(gw->cluster_view, w->m->name) > 0)
		w->m->ends_held = 0; /* low's turn taken */
	if (w->pick.role != IG_PICK_PREFILL) { /* a pair is one request of its key and class */
		w->q.key->inflight++;
		s->class_inflight[w->q.klass]++;
	}
	if (w->policy->started)
		w->policy->started(state, b, &w->pick);
	w->lora_path = ig_adapters_started(gw, w->model, b);
	return w->ops->start(w, b) == 0 ? IG_DISPATCH_STARTED : IG_DISPATCH_FAILED;
}

/* A low request of m waits while other gateways hold high or normal ones
 * waiting for it (cluster.h), but for low's turn: one of every low_every
 * of this gateway's requests of m that end meanwhile (the slot it frees is
 * its own until the next sync) is followed by a low one; the others' slots
 * go to the other gateways. Low's small share, across gateways as within
 * one. It waits too while the model's free slots are down to its learned
 * headroom (headroom_full). */
static bool headroom_full(const struct ig_cluster_view *v, const struct ig_model *m);
static bool low_held(const struct ig_sched *s, struct ig_model *m, const struct ig_cluster_view *v)
{
	ends_sync(m, v);
	if (ig_cluster_others_waiting(v, m->name) > 0 && m->ends_held + 1 < s->low_every)
		return true;
	return headroom_full(v, m);
}

void ig_dispatch_end(struct ig_gw *gw, struct ig_waiter *w, const struct ig_pick_outcome *o)
{
	struct ig_sched *s = &gw->sched;
	if (!w->running)
		return;
	w->running = false;
	ig_backend_finished(w->backend, o->ok);
	ig_policy_release(w->backend);
	ig_adapters_ended(gw, w->model, w->backend);
	if (w->pick.low)
		atomic_fetch_sub(&w->backend->low_inflight, 1);
	if (w->pick.role != IG_PICK_PREFILL)
		w->m->inflight--;
	ends_sync(w->m, gw->cluster_view);
	if (ig_cluster_others_waiting(gw->cluster_view, w->m->name) > 0 && w->m->ends_held < gw->sched.low_every)
		w->m->ends_held++;
	if (w->pick.role != IG_PICK_PREFILL) {
		w->q.key->inflight--;
		s->class_inflight[w->q.klass]--;
	}
	struct ig_pick_outcome out = *o;
	out.duration_us = ig_now_us() - w->attempt_us;
	if (w->q.klass != IG_CLASS_LOW)
		ig_headroom_busy(&w->m->headroom, (double)out.duration_us / 1e6);
	if (w->policy && w->policy->done)
		/* A reload may have changed the policy while it ran: the old
		 * one's state is gone, it undoes its counts without it. */
		w->policy->done(state_of(s, w), w->backend, &w->pick, &out);
	gw->drain_pending = true;
}

void ig_dispatch_progress(const struct ig_gw *gw IG_UNUSED, struct ig_waiter *w)
{
	if (w->running && w->policy && w->policy->progress)
		w->policy->progress(w->backend, &w->pick);
}

/* ---- placing a request: a backend, the queue, or a refusal ---- */

/* How far over a preempting backend's slots w may go when none is free
 * (policy.c): headroom.overshoot for high and normal, never for low work or
 * a hedge. Read at each pick: a reload may change it. */
static void set_overshoot(const struct ig_gw *gw, struct ig_waiter *w)
{
	w->pick.overshoot = w->pick.low || w->pick.no_overshoot ? 0 : gw->cfg->headroom_overshoot;
}

/* The policy's pick among w's model's backends, or, for an adapter, among
 * the servers that hold it (adapters.h: it may start a load and wait). */
static enum ig_pick pick(struct ig_gw *gw, struct ig_waiter *w, const struct ig_policy *p, void *state,
			 struct ig_backend **b)
{
	enum ig_pick got;
	if (ig_adapters_pick(gw, w->model, p, state, &w->m->rotor, &w->pick, b, &got))
		return got;
	return ig_policy_pick(p, state, w->m->backends, w->m->nbackends, &w->m->rotor, &w->pick, b);
}

/* Finds a backend among those that serve w's model and starts w there,
 * queues it, or refuses it. `timeout`, `what`: how its last attempt failed
 * (retries). */
static enum ig_dispatch_result place(struct ig_gw *gw, struct ig_waiter *w, bool timeout, const char *what)
{
	struct ig_sched *s = &gw->sched;
	struct ig_model *m = w->m;
	struct ig_backend *b = NULL;

	/* A key at its cap waits for one of its own requests to end; a low
	 * request, while other gateways hold high or normal ones waiting for
	 * the model (cluster.h), for them to be placed. */
	if ((ig_cluster_key_capped(gw->cluster_view, w->q.key) || (w->pick.low && low_held(s, m, gw->cluster_view))) &&
	    m->nbackends > 0)
		return wait_or_refuse(gw, w);
	set_overshoot(gw, w);
	if (w->pick.pinned) {
		/* A follow-up goes where its previous response is, or nowhere. */
		const struct ig_backend *held = ig_backend_fleet_find_id(&gw->fleet, w->pick.pinned - 1);
		if (!held || (!ig_backend_usable(held) && w->pick.ntried == 0)) {
			pin_lost(gw, w);
			return IG_DISPATCH_FAILED;
		}
	}
	w->pick.view = gw->cluster_view;
	void *state;
	const struct ig_policy *p = policy_for(s, w, &state);
	enum ig_pick got = pick(gw, w, p, state, &b);
	if (got != IG_PICK_OK && w->pick.role == IG_PICK_ALONE) {
		/* no server that prefills alone is free: a pair after all */
		w->pick.role = IG_PICK_SERVE;
		w->pick.view = gw->cluster_view;
		got = pick(gw, w, p, state, &b);
	}
	switch (got) {
	case IG_PICK_OK:
		return start(gw, w, b);
	case IG_PICK_BUSY:
		return wait_or_refuse(gw, w);
	case IG_PICK_NONE:
		break;
	}
	if (w->pick.role == IG_PICK_PREFILL) {
		/* a pair's prefill half: its tried ones are those that failed the
		 * request (path/try_pd.c), its waiter never ran before */
		refuse(w, 503, NULL, NULL, "no_healthy_backend",
		       "no prefill server of the model '%s' is up that has not failed the request (%d failed it)",
		       w->model, w->pick.ntried);
	} else if (w->pick.ntried == 0 && m->nbackends == 0) {
		/* Some backend's list is not learned yet: it may serve it. */
		if (s->unknown_up > 0)
			return wait_or_refuse(gw, w);
		not_served(gw, w);
	} else if (w->pick.ntried == 0) {
		size_t prefill = 0; /* a pool with pairs: its prefill servers take no request of their own */
		for (size_t i = 0; m->pairs && i < m->nbackends; i++)
			prefill += m->backends[i]->role == IG_ROLE_PREFILL;
		if (prefill)
			refuse(w, 503, NULL, NULL, "no_healthy_backend",
			       "no decode server of the model '%s' is up (%zu decode or co-located server(s), 0 up; "
			       "%zu prefill server(s))", w->model, m->nbackends - prefill, prefill);
		else
			refuse(w, 503, NULL, NULL, "no_healthy_backend",
			       "no healthy backend serves the model '%s' (%zu of them, 0 up)", w->model, m->nbackends);
	} else if (timeout) {
		refuse(w, 504, NULL, NULL, "backend_timeout", "backend %s timed out after %d attempt(s): %s",
		       w->backend ? w->backend->url : "?", w->pick.ntried, what);
	} else {
		refuse(w, 502, NULL, NULL, "backend_error", "backend failed after %d attempt(s), last %s: %s error",
		       w->pick.ntried, w->backend ? w->backend->url : "?", what);
	}
	return IG_DISPATCH_FAILED;
}

/* ---- learned headroom (headroom.h) ---- */

/* Its usable backends' slots and, of them, those free now (-1: some
 * backend has no limit known, so the pool's free slots are not known). */
static void pool_slots(const struct ig_cluster_view *v, const struct ig_model *m, long *slots, long *free)
{
	*slots = 0;
	*free = 0;
	for (size_t i = 0; i < m->nbackends; i++) {
		const struct ig_backend *b = m->backends[i];
		if (!ig_backend_usable(b))
			continue;
		long limit = ig_policy_limit(v, b, false);
		if (limit == 0) { /* no limit known: nothing to keep free from */
			*slots = 0;
			*free = -1;
			return;
		}
		if (limit < 0)
			continue;
		long in = atomic_load(&b->inflight);
		*slots += limit;
		*free += limit > in ? limit - in : 0;
	}
}

/* Whether a new low request would take one of the slots kept for high and
 * normal ones: its model's learned headroom, this gateway's and the other
 * gateways' (a cluster: interactive traffic through one, bulk through
 * another), unless a backend of it has reserve_slots (the operator's number
 * wins) or no limit is known. */
static long headroom_kept(const struct ig_cluster_view *v, const struct ig_model *m)
{
	/* the fleet's interactive traffic, less what goes over the slots of
	 * backends that preempt a low request for it (policy.c) */
	long keep = m->headroom.slots + ig_cluster_others_headroom(v, m->name) - m->overshoot_slots;
	return keep > 0 ? keep : 0;
}

static bool headroom_full(const struct ig_cluster_view *v, const struct ig_model *m)
{
	long keep = headroom_kept(v, m);
	if (m->reserve_set || keep <= 0)
		return false;
	long slots, free;
	pool_slots(v, m, &slots, &free);
	return free >= 0 && slots > 0 && free <= keep;
}

void ig_dispatch_headroom(struct ig_gw *gw, uint64_t now_ms)
{
	long pct = gw->cfg->headroom_max_percent;
	for (size_t i = 0; i < gw->sched.n; i++) {
		struct ig_model *m = gw->sched.v[i];
		bool reserve = false;
		for (size_t k = 0; k < m->nbackends; k++)
			reserve = reserve || m->backends[k]->reserve_slots > 0;
		m->reserve_set = reserve;
		pool_slots(gw->cluster_view, m, &m->pool_slots, &m->free_slots);
		m->preempting = 0;
		for (size_t k = 0; k < m->nbackends; k++) {
			const struct ig_backend *b = m->backends[k];
			m->preempting += ig_backend_usable(b) && ig_policy_limit(gw->cluster_view, b, false) > 0 && ig_backend_preempts(b);
		}
		long over_before = m->overshoot_slots;
		m->overshoot_slots = m->preempting * gw->cfg->headroom_overshoot;
		if (m->overshoot_slots > over_before)
			gw->drain_pending = true;
		long before = m->headroom.slots;
		ig_headroom_update(&m->headroom, now_ms, m->pool_slots, reserve ? 0 : pct);
		m->kept_slots = reserve ? 0 : headroom_kept(gw->cluster_view, m);
		if (m->headroom.slots < before)
			gw->drain_pending = true; /* low work may take what was kept */
	}
}

/* ---- the retry budget (after Finagle's RetryBudget and Envoy's
 * retry_budget: a share of the requests plus a floor, over a window) ---- */

/* The ring's slot for second `sec`, emptied when it held an older one. */
static size_t budget_slot(struct ig_sched *s, uint64_t sec)
{
	size_t i = (size_t)(sec % IG_RETRY_WINDOW_S);
	if (s->budget_sec[i] != sec) {
		s->budget_sec[i] = sec;
		s->budget_req[i] = s->budget_retry[i] = 0;
	}
	return i;
}

/* The hedge ring's slot for second `sec`. */
static size_t hedge_slot(struct ig_sched *s, uint64_t sec)
{
	size_t i = (size_t)(sec % IG_HEDGE_WINDOW_S);
	if (s->hedge_sec[i] != sec) {
		s->hedge_sec[i] = sec;
		s->hedge_req[i] = s->hedge_n[i] = 0;
	}
	return i;
}

bool ig_dispatch_hedge_budget(struct ig_gw *gw)
{
	struct ig_sched *s = &gw->sched;
	uint64_t sec = ig_now_ms() / 1000, req = 0, n = 0;
	size_t at = hedge_slot(s, sec);
	for (size_t i = 0; i < IG_HEDGE_WINDOW_S; i++)
		if (s->hedge_sec[i] + IG_HEDGE_WINDOW_S > sec && s->hedge_sec[i] <= sec) {
			req += s->hedge_req[i];
			n += s->hedge_n[i];
		}
	if ((n + 1) * 100 > req * (uint64_t)gw->cfg->hedge_budget_percent || !ig_dispatch_retry_budget(gw))
		return false;
	s->hedge_n[at]++;
	return true;
}

void ig_dispatch_hedge_unspend(struct ig_gw *gw)
{
	struct ig_sched *s = &gw->sched;
	uint64_t sec = ig_now_ms() / 1000;
	size_t h = hedge_slot(s, sec), r = budget_slot(s, sec);
	if (s->hedge_n[h] > 0)
		s->hedge_n[h]--;
	if (s->budget_retry[r] > 0)
		s->budget_retry[r]--;
}

bool ig_dispatch_retry_budget(struct ig_gw *gw)
{
	struct ig_sched *s = &gw->sched;
	uint64_t sec = ig_now_ms() / 1000, req, retry;
	size_t i = budget_slot(s, sec);
	ig_sched_budget_window(s, sec, &req, &retry);
	uint64_t allowed = (uint64_t)gw->cfg->retry_budget_min_per_s * IG_RETRY_WINDOW_S +
			   req * (uint64_t)gw->cfg->retry_budget_percent / 100;
	if (retry + 1 > allowed) {
		s->retries_denied++;
		return false;
	}
	s->budget_retry[i]++;
	return true;
}

enum ig_dispatch_result ig_dispatch_submit(struct ig_gw *gw, struct ig_waiter *w)
{
	struct ig_sched *s = &gw->sched;
	s->budget_req[budget_slot(s, ig_now_ms() / 1000)]++;
	s->hedge_req[hedge_slot(s, ig_now_ms() / 1000)]++;
	w->m->requests++;
	w->pick.low = w->q.klass == IG_CLASS_LOW;
	if (!w->pick.low && gw->cfg->headroom_max_percent > 0)
		ig_headroom_arrival(&w->m->headroom, ig_now_ms());
	return place(gw, w, false, "");
}

enum ig_dispatch_result ig_dispatch_retry(struct ig_gw *gw, struct ig_waiter *w, bool timeout, const char *what)
{
	return place(gw, w, timeout, what);
}

void ig_dispatch_cancel(struct ig_gw *gw, struct ig_waiter *w)
{
	if (w->queued)
		dequeue(gw, w);
}

/* ---- the drain ---- */

/* A waiter taken out of its queue while the drain looks past it. */
struct parked {
	struct ig_waiter *w;
	double tag;                  /* its flow's, should the flow go with it */
};

/* Starts waiting requests while their models' backends have slots, one
 * model after another (one request each per round), so that a model whose
 * backends are busy never holds up another's; within a model, a request
 * pinned to a full backend is looked past (parked) and put back in front
 * after. */
void ig_dispatch_drain(struct ig_gw *gw)
{
	struct ig_sched *s = &gw->sched;
	bool progress = s->qlen > 0;
	struct parked *parked = NULL;
	size_t nparked = 0, capparked = 0;

	while (progress) {
		progress = false;
		for (size_t k = 0; k < s->n; k++) {
			struct ig_model *m = s->v[(s->next + k) % s->n];
			struct ig_sched_entry *e;
			struct ig_waiter *w = NULL;
			struct ig_backend *b = NULL;
			enum ig_pick p = IG_PICK_NONE;
			while ((e = m->qlen ? ig_sched_next(s, m, gw->cluster_view) : NULL)) {
				w = waiter_of(e);
				if (w->pick.low && low_held(s, m, gw->cluster_view)) {
					p = IG_PICK_BUSY; /* others' high and normal first */
					break;
				}
				set_overshoot(gw, w);
				w->pick.view = gw->cluster_view;
				void *state;
				const struct ig_policy *pol = policy_for(s, w, &state);
				if (w->pick.role == IG_PICK_ALONE) /* it waited: whichever half frees first */
					w->pick.role = IG_PICK_SERVE;
				p = pick(gw, w, pol, state, &b);
				if (p != IG_PICK_BUSY || !w->pick.pinned)
					break;
				/* Pinned to a backend that is full: the requests behind it
				 * need not wait for that one (no head-of-line blocking). */
				if (nparked == capparked) {
					struct parked *v = realloc(parked, (capparked = capparked ? 2 * capparked : 8) * sizeof(*v));
					if (!v)
						break;
					parked = v;
				}
				parked[nparked++] = (struct parked){w, e->flow->tag};
				ig_sched_dequeue(s, m, e);
			}
			if (!e || p == IG_PICK_BUSY || (p == IG_PICK_NONE && m->nbackends == 0 && s->unknown_up > 0))
				continue;
			ig_sched_dispatch(s, m, e);
			dequeue(gw, w);
			progress = true;
			if (p == IG_PICK_OK)
				start(gw, w, b);
			else if (w->pick.pinned)
				pin_lost(gw, w);
			else if (m->nbackends == 0)
				not_served(gw, w);
			else
				refuse(w, 503, NULL, NULL, "no_healthy_backend",
				       "no healthy backend serves the model '%s' any more while the request waited", w->model);
		}
		s->next++;
	}
	/* Back in front of their queues, in their order. */
	while (nparked > 0) {
		struct parked *pk = &parked[--nparked];
		if (ig_sched_requeue_front(s, pk->w->m, &pk->w->q, pk->tag) < 0) {
			dequeue(gw, pk->w);
			refuse(pk->w, 500, NULL, NULL, "internal_error", "out of memory");
		}
	}
	free(parked);
}

/* A request that waited its class's queue_timeout: 503. */
static void expire_one(struct ig_sched_entry *e, void *arg)
{
	struct ig_gw *gw = arg;
	struct ig_waiter *w = waiter_of(e);
	dequeue(gw, w);
	gw->dispatch_stats.queue_timeouts++;
	w->m->timeouts++;
	refuse(w, 503, NULL, NULL, "queue_timeout", "waited %llu ms for a free backend (class %s); retry later",
	       (unsigned long long)queue_timeout_ms(gw->cfg, w->q.klass), ig_conf_class_name(w->q.klass));
}

void ig_dispatch_expire(struct ig_gw *gw, uint64_t now_ms)
{
	ig_dispatch_headroom(gw, now_ms);
	ig_dispatch_drain(gw);
	/* Each flow is FIFO within one timeout: its head expires first. */
	for (size_t i = 0; i < gw->sched.n && gw->sched.qlen; i++)
		ig_sched_expire(&gw->sched, gw->sched.v[i], now_ms, expire_one, gw);
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag retry_budget_rows[] = {
	{.name = "--retry-budget-percent", .key = "retry_budget.percent", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(retry_budget_percent), .min = 0, .max = 1000, .def = "20", .metavar = "P",
	 .help = "retries over the last 10 s: at most P% of the requests (plus the minimum below), so that a "
		 "failing fleet is not hit by a storm of retries"},
	{.name = "--retry-budget-min-per-s", .key = "retry_budget.min_per_s", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(retry_budget_min_per_s), .min = 0, .max = 100000, .def = "10", .metavar = "N",
	 .help = "retries a second always allowed, whatever the share"},
};
const struct ig_conf_part ig_dispatch_conf = IG_CONF_PART(retry_budget_rows);
