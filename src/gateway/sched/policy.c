/* What every routing policy shares (policy.h): the table of policies, which
 * backends are eligible for a request (those with a free slot; when there
 * is none, for a high or normal request, those that preempt lower
 * priorities, up to headroom.overshoot over their slots), the rotating
 * start among them, and the in-flight slot taken on the one chosen. Runs under the gateway's
 * lock, so a slot is a plain check and increment of the backend's count
 * (atomic only because the metrics and the relay read it without the lock).
 * Not here: how a policy chooses (lb_*.c), what happens when none is
 * eligible (dispatch.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/util.h"
#include "sched/policy.h"
#include "sched/policy_list.h"

#define DECLARE(id, name, help) extern const struct ig_policy ig_lb_##id;
IG_LB_LIST(DECLARE)
#undef DECLARE

#define ROW(id, name, help) &ig_lb_##id,
static const struct ig_policy *const table[] = {IG_LB_LIST(ROW)};
#undef ROW

const struct ig_policy *ig_policy_get(int index)
{
	return index >= 0 && (size_t)index < ig_policy_count() ? table[index] : table[0];
}

const char *ig_policy_name(int index)
{
	return ig_policy_get(index)->name;
}

size_t ig_policy_count(void)
{
	return sizeof(table) / sizeof(table[0]);
}

static bool tried_already(const struct ig_backend *b, const struct ig_pick_req *rq)
{
	for (int i = 0; i < rq->ntried; i++)
		if (rq->tried[i] == b)
			return true;
	return false;
}

/* Whether b may take a pick of role `role` (enum ig_pick_role). */
static bool role_fits(const struct ig_backend *b, int role)
{
	switch (role) {
	case IG_PICK_PREFILL:
		return b->role == IG_ROLE_PREFILL;
	case IG_PICK_ALONE:
		return b->role == IG_ROLE_BOTH || (b->role == IG_ROLE_DECODE && b->engine == IG_ENGINE_VLLM);
	default:
		return b->role != IG_ROLE_PREFILL;
	}
}

long ig_policy_limit(const struct ig_cluster_view *v, const struct ig_backend *b, bool low)
{
	long limit = ig_backend_limit(b);
	long others = ig_cluster_others_inflight(v, b);
	if (limit > 0 && others > 0) { /* several gateways share what it states */
		if (limit <= others)
			return -1;
		limit -= others;
	}
	long cap = ig_cluster_claim_cap(v, b);
	if (limit > 0 && cap < 0) /* the free slots split with the others that wait: none left here */
		return -1;
	if (limit > 0 && cap > 0 && cap < limit)
		limit = cap;
	if (low && limit > 0 && b->reserve_slots > 0)
		return limit > b->reserve_slots ? limit - b->reserve_slots : -1;
	return limit;
}

size_t ig_policy_least_loaded(const struct ig_pick_set *set)
{
	size_t pick = 0;
	for (size_t i = 1; i < set->k; i++)
		if (ig_policy_less_loaded(set->cand[i], set->cand[pick]))
			pick = i;
	return pick;
}

/* Takes a slot on b, and notes the most in flight there since its last
 * load report (health.c weighs the report against it). */
static void take_slot(struct ig_backend *b)
{
	long now = atomic_load(&b->inflight) + 1;
	atomic_store(&b->inflight, now);
	if (now > atomic_load(&b->inflight_peak))
		atomic_store(&b->inflight_peak, now);
	/* its engine's KV events are due after this (kvevents.c: stale) */
	atomic_store(&b->last_sent_ms, ig_now_ms());
}

enum ig_pick ig_policy_pick(const struct ig_policy *p, void *state, struct ig_backend *const *v, size_t n,
			    unsigned *rotor, struct ig_pick_req *rq, struct ig_backend **out)
{
	struct ig_backend *elig[256], *rot[256];
	struct ig_backend **cand = elig, **t = rot;
	size_t k = 0, healthy = 0;
	enum ig_pick res = IG_PICK_NONE;

	if (n > 256 && (!(cand = malloc(n * sizeof(*cand))) || !(t = malloc(n * sizeof(*t))))) {
		if (cand != elig)
			free(cand);
		rq->view = NULL;
		return IG_PICK_NONE;
	}
	uint64_t now = 0;
	/* Pass 0: backends with a free slot. Pass 1, when there is none and
	 * the request may: those that preempt a lower priority for it, up to
	 * `overshoot` over their slots and while a low request of ours runs
	 * there for each one over (the server runs it at once and puts a low
	 * request back in its queue; with none, it would only wait there). */
	long over = 0;
	bool any = false; /* a prefill half past every limit (IG_PICK_PREFILL) */
again:
	for (size_t i = 0; i < n; i++) {
		struct ig_backend *b = v[i];
		if (!ig_backend_usable(b) || tried_already(b, rq) || (rq->pinned && b->server->id + 1 != rq->pinned) ||
		    !role_fits(b, rq->role))
			continue;
		if (any) {
			cand[k++] = b;
			continue;
		}
		healthy++;
		/* It asked for time (Retry-After): up, but nothing new until then;
		 * a request with nowhere else to go waits for it. */
		if (atomic_load(&b->rest_until_ms) && atomic_load(&b->rest_until_ms) > (now ? now : (now = ig_now_ms())))
			continue;
		/* Its breaker is half-open (health.c): one trial request at a time. */
		if (atomic_load(&b->breaker_until_ms) && atomic_load(&b->inflight) > 0)
			continue;
		long limit = ig_policy_limit(rq->view, b, rq->low);
		if (over && (limit <= 0 || !ig_backend_preempts(b) ||
			     atomic_load(&b->low_inflight) <= atomic_load(&b->inflight) - limit))
			continue;
		if (limit < 0 || (limit > 0 && atomic_load(&b->inflight) >= limit + over))
			continue;
		cand[k++] = b;
	}
	if (k == 0 && healthy && !over && rq->overshoot > 0 && !rq->low) {
		over = rq->overshoot;
		healthy = 0;
		goto again;
	}
	if (k == 0 && healthy && rq->role == IG_PICK_PREFILL && !any) {
		any = true;
		over = 0;
		goto again;
	}
	if (k == 0) {
		res = healthy ? IG_PICK_BUSY : IG_PICK_NONE;
		goto done;
	}
	rq->over = over > 0;
	/* Rotate among the eligible ones (not among all: a down backend would
	 * hand its turn to its neighbour and skew the split). */
	if (k > 1) {
		size_t start = (*rotor)++ % k;
		for (size_t i = 0; i < k; i++)
			t[i] = cand[(start + i) % k];
		memcpy(cand, t, k * sizeof(*t));
	}
	struct ig_pick_set set = {v, n, cand, k};
	size_t pick = p->pick(state, &set, rq);
	*out = cand[pick < k ? pick : 0];
	take_slot(*out);
	res = IG_PICK_OK;
done:
	if (cand != elig) {
		free(cand);
		free(t);
	}
	rq->view = NULL; /* the view may be freed once the lock is let go (cluster_view.h) */
	return res;
}

void ig_policy_release(struct ig_backend *b)
{
	atomic_fetch_sub(&b->inflight, 1);
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
/* --policy's words, from the policies' table. */
#define LB_BAR(id, name, help) "|" name
#define LB_SPACE(id, name, help) " " name
#define LB_HELP(id, name, help) " " name " (" help ");"
static const struct ig_flag policy_rows[] = {
	/* The choices, the default (the first row) and the help come from the
	 * policies' table (policy_list.h): a new policy needs no line here. */
	{.name = "--policy", .key = "policy", .type = IG_FLAG_CHOICE, .off = IG_CONF_OFF(policy), .def = IG_LB_DEFAULT,
	 .metavar = IG_LB_LIST(LB_BAR) + 1,
	 .bad = "%s: unknown policy '%s' (one of:" IG_LB_LIST(LB_SPACE) ")",
	 .help = "how a backend is chosen:" IG_LB_LIST(LB_HELP)},
};
const struct ig_conf_part ig_policy_conf = IG_CONF_PART(policy_rows);
