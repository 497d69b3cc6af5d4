/* Load-balancing policies. Load is compared as inflight / weight without
 * division (a.inflight * b.weight vs b.inflight * a.weight). Ties are broken
 * by a rotating start so that equal backends share work even when idle: the
 * "always the first" bug that a plain argmin has.
 * Not here: health (health.c) or what happens when nothing is eligible
 * (proxy.c queues or answers). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "router.h"
#include "infergate/util.h"

static int tried_already(const struct ig_backend *b, struct ig_backend *const *tried, int ntried)
{
	for (int i = 0; i < ntried; i++)
		if (tried[i] == b)
			return 1;
	return 0;
}

/* Returns 1 when a is strictly less loaded than b, relative to weights. */
static int less_loaded(struct ig_backend *a, struct ig_backend *b)
{
	long la = atomic_load(&a->inflight) + atomic_load(&a->external_load);
	long lb = atomic_load(&b->inflight) + atomic_load(&b->external_load);
	return la * b->weight < lb * a->weight;
}

static long load_of(struct ig_backend *b)
{
	return atomic_load(&b->inflight) + atomic_load(&b->external_load);
}

/* cache-aware: the candidate that was sent the longest prefix of the
 * prompt when the match covers threshold_percent of it and the load guard
 * lets it; else `fallback`, the least loaded. After SGLang's gateway
 * (sgl-router/src/policies/cache_aware.rs: a match rate over
 * cache_threshold wins unless the fleet is imbalanced, max - min >
 * balance_abs_threshold and max > min x balance_rel_threshold), with two
 * differences: the guard weighs the preferred backend's own load against
 * the least loaded (so one hot conversation does not turn affinity off for
 * every other), and a weak match goes to the least loaded rather than to
 * the backend with the smallest record. */
static size_t cache_pick(struct ig_backend **cand, size_t k, const struct ig_route_req *rq, size_t fallback)
{
	size_t best = k, bm = 0;
	if (!rq->affinity || rq->nchain == 0)
		return fallback;
	/* Among those with the longest match, the least loaded: a prefix
	 * every backend holds (a shared system prompt) is no reason to prefer
	 * one of them. */
	for (size_t i = 0; i < k; i++) {
		size_t m = ig_affinity_match(rq->affinity, cand[i]->id, rq->chain, rq->nchain);
		if (m > bm || (m == bm && m > 0 && best < k && less_loaded(cand[i], cand[best]))) {
			bm = m;
			best = i;
		}
	}
	if (best == k || (long)(bm * 100) < rq->threshold_percent * (long)rq->nchain)
		return fallback;
	long lb = load_of(cand[best]), lmin = load_of(cand[fallback]);
	if (lb - lmin > rq->balance_abs && (double)lb > (double)lmin * rq->balance_rel)
		return fallback;
	return best;
}

/* least-tokens: a is expected to finish a request of `tokens` sooner than
 * b: their outstanding work plus it, over their speed (tokens/s per
 * request, measured from their answers) and weight. A backend not measured
 * yet counts at `dflt`, the mean of those measured. */
static int sooner(struct ig_backend *a, struct ig_backend *b, long tokens, double dflt)
{
	double sa = (double)atomic_load(&a->speed_milli), sb = (double)atomic_load(&b->speed_milli);
	double wa = (double)(atomic_load(&a->out_tokens) + tokens) / ((sa > 0 ? sa : dflt) * (double)a->weight);
	double wb = (double)(atomic_load(&b->out_tokens) + tokens) / ((sb > 0 ? sb : dflt) * (double)b->weight);
	return wa < wb;
}

long ig_router_limit(const struct ig_backend *b, bool low)
{
	long limit = ig_backend_limit(b);
	if (low && limit > 0 && b->reserve_slots > 0)
		return limit > b->reserve_slots ? limit - b->reserve_slots : -1;
	return limit;
}

static int reserve(struct ig_backend *b, bool low)
{
	long cur = atomic_load(&b->inflight), limit = ig_router_limit(b, low);
	if (limit < 0)
		return 0;
	do {
		if (limit > 0 && cur >= limit)
			return 0;
	} while (!atomic_compare_exchange_weak(&b->inflight, &cur, cur + 1));
	/* The most in flight since the last load report (health.c take_load). */
	long peak = atomic_load(&b->inflight_peak);
	while (cur + 1 > peak && !atomic_compare_exchange_weak(&b->inflight_peak, &peak, cur + 1))
		;
	return 1;
}

enum ig_pick ig_router_pick(struct ig_backend *const *v, size_t n, atomic_uint *rotor, enum ig_policy policy,
			    const struct ig_route_req *rq, struct ig_backend **out)
{
	bool low = rq->low;
	struct ig_backend *elig[256];
	struct ig_backend **cand = elig;
	size_t k = 0, healthy = 0;
	enum ig_pick res = IG_PICK_NONE;

	if (n > 256 && !(cand = malloc(n * sizeof(*cand))))
		return IG_PICK_NONE;
	for (size_t i = 0; i < n; i++) {
		struct ig_backend *b = v[i];
		if (!ig_backend_routable(b) || tried_already(b, rq->tried, rq->ntried) ||
		    (rq->pinned && b->id + 1 != rq->pinned))
			continue;
		healthy++;
		long limit = ig_router_limit(b, low);
		if (limit < 0 || (limit > 0 && atomic_load(&b->inflight) >= limit))
			continue;
		cand[k++] = b;
	}
	/* Rotate among the eligible ones (not among all: a down backend would
	 * hand its turn to its neighbour and skew the split). */
	if (k > 1) {
		size_t start = atomic_fetch_add(rotor, 1) % k;
		struct ig_backend *tmp[256], **t = k <= 256 ? tmp : malloc(k * sizeof(*t));
		if (t) {
			for (size_t i = 0; i < k; i++)
				t[i] = cand[(start + i) % k];
			memcpy(cand, t, k * sizeof(*t));
			if (t != tmp)
				free(t);
		}
	}
	double speed = 0; /* least-tokens: the mean measured speed */
	if (policy == IG_POLICY_LEAST_TOKENS) {
		size_t known = 0;
		for (size_t i = 0; i < k; i++) {
			long sp = atomic_load(&cand[i]->speed_milli);
			if (sp > 0) {
				speed += (double)sp;
				known++;
			}
		}
		speed = known ? speed / (double)known : 1;
	}
	/* Candidates are in rotated order, so "first best" rotates among equals. */
	while (k > 0) {
		size_t pick = 0;
		switch (policy) {
		case IG_POLICY_CACHE_AWARE:
			for (size_t i = 1; i < k; i++)
				if (less_loaded(cand[i], cand[pick]))
					pick = i;
			pick = cache_pick(cand, k, rq, pick);
			break;
		case IG_POLICY_LEAST_TOKENS:
			for (size_t i = 1; i < k; i++)
				if (sooner(cand[i], cand[pick], rq->tokens, speed))
					pick = i;
			break;
		case IG_POLICY_LEAST_LOADED:
			for (size_t i = 1; i < k; i++)
				if (less_loaded(cand[i], cand[pick]))
					pick = i;
			break;
		case IG_POLICY_ROUND_ROBIN:
			pick = 0;
			break;
		case IG_POLICY_RANDOM:
			pick = ig_rand_below(k);
			break;
		case IG_POLICY_POWER_OF_TWO:
			if (k > 1) {
				size_t a = ig_rand_below(k), b = ig_rand_below(k - 1);
				if (b >= a)
					b++;
				pick = less_loaded(cand[b], cand[a]) ? b : a;
			}
			break;
		}
		if (reserve(cand[pick], low)) {
			*out = cand[pick];
			res = IG_PICK_OK;
			goto done;
		}
		/* Lost a race for its last slot (several reactors): try the rest. */
		cand[pick] = cand[--k];
	}
	res = healthy ? IG_PICK_BUSY : IG_PICK_NONE;
done:
	if (cand != elig)
		free(cand);
	return res;
}

void ig_router_release(struct ig_backend *b)
{
	atomic_fetch_sub(&b->inflight, 1);
}

long ig_router_slots_learn(struct ig_slots *s, long running, long waiting, long ours)
{
	if (running < 0 || waiting < 0)
		return s->cur;
	if (waiting > 0) {
		/* Our share of what it runs: all of it when we are its only
		 * client, 1/M when M gateways (or other clients) load it alike. */
		long total = running + waiting, mine = ours < total ? ours : total;
		long share = (long)(((long long)running * mine + total - 1) / total);
		s->cur = share > 0 ? share : 1;
		if (s->cur > s->peak)
			s->peak = s->cur;
		s->calm = 0;
		return s->cur;
	}
	if (s->cur == 0 || ours < s->cur) {
		s->calm = 0;
		return s->cur;
	}
	long step = s->cur / 8 > 1 ? s->cur / 8 : 1;
	if (s->cur < s->peak)
		s->cur = s->cur + step < s->peak ? s->cur + step : s->peak;
	else if (++s->calm >= IG_SLOTS_PROBE_AFTER) {
		s->cur += step;
		s->calm = 0;
	}
	return s->cur;
}

long ig_router_slots_report(struct ig_slots *s, long running, long waiting, long ours, long peak, unsigned long done,
		     bool *stale)
{
	bool moved = done != s->last_done || ours != s->last_ours;
	bool same = running >= 0 && running + waiting > 0 && running == s->last_running &&
		    waiting == s->last_waiting;
	/* Once seen stale, the same counts stay stale until they change. */
	*stale = same && (moved || s->last_stale);
	s->last_stale = *stale;
	s->last_running = running;
	s->last_waiting = waiting;
	s->last_ours = ours;
	s->last_done = done;
	if (*stale) {
		s->stale++;
		return s->cur;
	}
	if (peak < ours)
		peak = ours;
	if (waiting > 0 && peak == 0)
		return s->cur;
	return ig_router_slots_learn(s, running, waiting, peak);
}
