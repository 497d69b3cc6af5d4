/* --concurrency auto: how many requests the run keeps in flight, decided
 * from what the run sees. No I/O here: scheduler.c reports completions,
 * the in-flight count and the gateway's capacity, and applies the limit.
 *
 * Against an infergate gateway (its GET /health/capacity answers): the
 * slots of the pools that serve the run's models, learned by the gateway
 * from the backends' own load reports, plus a headroom of requests waiting
 * in the gateway's queue, so that a backend slot that frees is refilled at
 * once rather than after the round trip to this client and back. The
 * headroom is measured in requests: each report, the requests of this run
 * that are neither on a backend nor in the gateway's queue (this run's in
 * flight less the pools' in flight and queue) are in transit, answers on
 * their way here or requests on their way there; headroom = 1.5 x that
 * (smoothed) + 2, at most a quarter of the slots + 2.
 * A backend's slots are known from its first load report when it states
 * them (SGLang's max_running_requests), so the run starts at the fleet's
 * size: the first report is waited for (scheduler.c). While the gateway
 * has not learned some backend's slots but caps it by a ramp (its load
 * reports will tell them the first time it queues), the limit is at least
 * the known slots plus the ramps and doubles each report ("learning").
 *
 * Against any other server, or a gateway whose backends send no load
 * reports: a search for the knee of throughput against requests
 * in flight, in the manner of adaptive concurrency limiters (TCP slow start
 * then Vegas-like holding; Netflix concurrency-limits, Envoy's adaptive
 * concurrency filter), but judged on throughput rather than latency alone,
 * because a batching server's latency grows with the batch long before it
 * queues:
 * - ramping: the limit doubles while each step raises throughput by more
 *   than `gain` (5%);
 * - refining: the knee lies between the last level that gained and the first
 *   that did not; a bisection (geometric) finds the lowest level within
 *   `gain` of the best, and the run holds 10% above it (a little queue at
 *   the server costs latency, not throughput);
 * - holding: every few windows one probe, alternately 25% up (kept, and
 *   ramping resumes, when it gains) and 20% down (kept when it loses less
 *   than half of `gain`: a queue that served nothing);
 * - backing off: when throughput falls by 3 x `gain` or latency per token
 *   doubles at the same limit for two windows (the server slowed, or someone
 *   else now loads it), the search starts again from a quarter of the limit.
 * Throughput is measured per window by Little's law, tokens/s = mean in
 * flight x sum(tokens) / sum(latency) over the window's completions: the
 * ratio of sums cancels most of the noise of long-tailed output lengths
 * that a count of tokens per second would carry. Only requests started
 * after the limit changed count; a window opens once as many of them as the
 * limit have come back, and lasts at least two typical latencies, 32
 * completions and half a second. Windows in which the run could not keep
 * the limit filled (retries waiting, --rate, the corpus ending) decide
 * nothing. */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "bulk.h"

#define GAIN 0.05
#define MIN_WINDOW_US 500000u
#define MIN_WINDOW_DONE 32
#define PROBE_EVERY 8           /* windows held between probes */

static const char *const state_names[] = {
	[IG_AUTO_FIXED] = "fixed",         [IG_AUTO_GATEWAY] = "gateway",   [IG_AUTO_RAMPING] = "ramping",
	[IG_AUTO_REFINING] = "refining",   [IG_AUTO_HOLDING] = "holding",   [IG_AUTO_PROBING] = "probing",
	[IG_AUTO_BACKING_OFF] = "backing off", [IG_AUTO_DRAINING] = "draining", [IG_AUTO_LEARNING] = "learning",
};

const char *ig_auto_state_name(enum ig_auto_state s)
{
	return state_names[s];
}

static long clamp(const struct ig_auto *a, double v)
{
	long l = v >= (double)a->max ? a->max : (long)ceil(v);
	if (l < a->floor)
		l = a->floor;
	return l < 1 ? 1 : l > a->max ? a->max : l;
}

/* The limit changes at now: only requests started from now on count, and
 * the window opens once as many of them as the limit have come back (the
 * server's queue, if any, has turned over: measured earlier, the queue of
 * the old limit would still shorten the latencies). */
static void set_limit(struct ig_auto *a, long limit, uint64_t now)
{
	a->limit = limit;
	a->changed_at = now;
	a->fresh_done = 0;
	a->win_start = 0;
}

static void describe(struct ig_auto *a)
{
	switch (a->state) {
	case IG_AUTO_FIXED:
		snprintf(a->why, sizeof(a->why), "--concurrency %ld", a->limit);
		break;
	case IG_AUTO_GATEWAY:
		snprintf(a->why, sizeof(a->why), "gateway: %ld slots + %ld", a->gw_slots, a->headroom);
		break;
	case IG_AUTO_LEARNING:
		snprintf(a->why, sizeof(a->why), "learning: %ld of %ld backends' slots not known yet", a->gw_unknown,
			 a->gw_healthy);
		break;
	case IG_AUTO_RAMPING:
	case IG_AUTO_BACKING_OFF:
		snprintf(a->why, sizeof(a->why), "%s%s", ig_auto_state_name(a->state),
			 a->gw_unknown > 0 ? ": some backends send no load reports (their slots are never learned)" : "");
		break;
	case IG_AUTO_REFINING:
		snprintf(a->why, sizeof(a->why), "refining: knee between %ld and %ld", a->lo, a->hi);
		break;
	case IG_AUTO_HOLDING:
		snprintf(a->why, sizeof(a->why), "holding: knee near %ld", a->knee);
		break;
	case IG_AUTO_PROBING:
		snprintf(a->why, sizeof(a->why), "probing %s from %ld", a->limit > a->hold ? "up" : "down", a->hold);
		break;
	case IG_AUTO_DRAINING:
		break; /* the last decision stays the reason */
	}
}

void ig_auto_init(struct ig_auto *a, long fixed, long start, long max, uint64_t now)
{
	memset(a, 0, sizeof(*a));
	a->max = max;
	a->floor = 1;
	a->gw_unknown = -1;
	a->windows_to_hold = -1;
	a->t0 = a->last_us = now;
	if (fixed > 0) {
		a->state = IG_AUTO_FIXED;
		a->limit = a->max = fixed;
	} else {
		a->on = 1;
		a->state = IG_AUTO_RAMPING;
		a->limit = start < max ? start : max;
	}
	a->min_seen = a->max_seen = a->limit;
	describe(a);
}

void ig_auto_done(struct ig_auto *a, uint64_t tokens, uint64_t started_us, uint64_t latency_us)
{
	double lat = (double)latency_us / 1e6;
	a->lat_ewma_s = a->lat_ewma_s > 0 ? 0.9 * a->lat_ewma_s + 0.1 * lat : lat;
	if (started_us < a->changed_at)
		return;
	a->fresh_done++;
	if (!a->win_start)
		return;
	a->win_done++;
	a->win_lat += lat;
	a->win_tokens += (double)tokens;
}

static void ramp_from(struct ig_auto *a, enum ig_auto_state st, long limit, uint64_t now)
{
	a->state = st;
	a->best_tps = 0;
	a->best_limit = a->below_best = 0;
	set_limit(a, clamp(a, (double)limit), now);
}

/* Holds 10% above the knee. The search's own figures (the best throughput
 * it measured, the latency of its last window) are what the hold is judged
 * against: a first window of its own could already be a worse server's. */
static void hold(struct ig_auto *a, long knee, double tps, double lat, uint64_t now)
{
	a->state = IG_AUTO_HOLDING;
	a->knee = knee;
	a->hold = clamp(a, (double)knee * 1.1 > (double)knee + 1 ? (double)knee * 1.1 : (double)knee + 1);
	a->hold_tps = tps;
	a->hold_lat = lat;
	a->held = a->bad = 0;
	if (a->windows_to_hold < 0)
		a->windows_to_hold = a->windows;
	set_limit(a, a->hold, now);
}

void ig_auto_capacity(struct ig_auto *a, const struct ig_capacity *c, long our_inflight, uint64_t now)
{
	if (!a->on)
		return;
	bool first = a->gw_unknown < 0;
	double transit = (double)(our_inflight - c->inflight - c->queued);
	if (transit < 0)
		transit = 0; /* others' requests in the pool */
	a->transit = a->gw_unknown >= 0 ? 0.8 * a->transit + 0.2 * transit : transit;
	a->rtt_s = a->gw_unknown >= 0 ? 0.8 * a->rtt_s + 0.2 * c->rtt_s : c->rtt_s;
	a->gw_slots = c->slots;
	a->gw_unknown = c->unknown;
	a->gw_healthy = c->healthy;
	a->headroom = (long)(1.5 * a->transit + 0.5) + 2;
	if (a->headroom > c->slots / 4 + 2)
		a->headroom = c->slots / 4 + 2;
	if (a->state == IG_AUTO_DRAINING)
		return;
	long known = c->slots + a->headroom < a->max ? c->slots + a->headroom : a->max;
	if (c->unknown == 0 && c->slots > 0) {
		a->state = IG_AUTO_GATEWAY;
		a->floor = 1;
		if (known != a->limit)
			set_limit(a, known, now);
	} else if (c->learning == c->unknown && c->unknown > 0) {
		/* The gateway caps them by a ramp that grows while they are
		 * full and calm, until they queue and are learned: keep the
		 * ramps full, and a queue at the gateway so that they grow. */
		long want = a->limit;
		if (a->state != IG_AUTO_LEARNING)
			a->state = IG_AUTO_LEARNING;
		else if ((double)our_inflight >= 0.9 * (double)a->limit)
			want = a->limit * 2;
		a->floor = known + c->ramp < a->max ? known + c->ramp : a->max;
		want = clamp(a, (double)want);
		if (want != a->limit)
			set_limit(a, want, now);
	} else {
		/* Search, but never below what the gateway knows it can place. */
		a->floor = c->slots > 0 ? known : 1;
		if (a->state == IG_AUTO_GATEWAY || a->state == IG_AUTO_LEARNING)
			ramp_from(a, IG_AUTO_RAMPING, a->limit, now);
		else if (a->limit < a->floor)
			set_limit(a, a->floor, now);
	}
	/* The run waited for this first report (scheduler.c): the limit it
	 * set is the first one held, not the 16 it was made with. */
	if (first && our_inflight == 0) {
		a->min_seen = a->max_seen = a->limit;
		a->limit_area = 0;
		a->t0 = a->last_us = now;
	}
	describe(a);
}

/* One finished window of the search: tps and latency per token measured at
 * the current limit. */
static void judge(struct ig_auto *a, double tps, double lat, uint64_t now)
{
	switch (a->state) {
	case IG_AUTO_RAMPING:
	case IG_AUTO_BACKING_OFF:
		if (a->best_tps == 0 || tps >= a->best_tps * (1 + GAIN)) {
			a->below_best = a->best_limit;
			a->best_limit = a->limit;
			a->best_tps = tps;
			if (a->limit >= a->max)
				hold(a, a->max, tps, lat, now);
			else
				set_limit(a, clamp(a, (double)a->limit * 2), now);
			break;
		}
		/* The best level is within GAIN of this one: the knee lies
		 * between the level below it and it. */
		a->state = IG_AUTO_REFINING;
		/* with no level below it measured (the search began there), half
		 * of it: a knee lower still only leaves some queue, which the
		 * probes down remove */
		a->lo = a->below_best > 0 ? a->below_best : a->best_limit / 2 > a->floor ? a->best_limit / 2 : a->floor;
		a->hi = a->best_limit;
		a->ref = tps > a->best_tps ? tps : a->best_tps;
		goto bisect;
	case IG_AUTO_REFINING:
		if (tps >= a->ref * (1 - GAIN)) {
			a->hi = a->limit;
			if (tps > a->ref)
				a->ref = tps;
		} else {
			a->lo = a->limit;
		}
	bisect:
		if (a->hi - a->lo <= 1 || (double)a->hi <= (double)a->lo * 1.15) {
			hold(a, a->hi, a->ref, lat, now);
			break;
		}
		set_limit(a, clamp(a, floor(sqrt((double)a->lo * (double)a->hi) + 0.5)), now);
		break;
	case IG_AUTO_HOLDING:
		if (a->hold_tps == 0) {
			a->hold_tps = tps;
			a->hold_lat = lat;
			break;
		}
		if (tps < a->hold_tps * (1 - 3 * GAIN) || lat > 2 * a->hold_lat) {
			if (++a->bad >= 2) {
				a->backoffs++;
				ramp_from(a, IG_AUTO_BACKING_OFF, a->limit / 4, now);
			}
			break;
		}
		a->bad = 0;
		a->hold_tps = 0.7 * a->hold_tps + 0.3 * tps;
		a->hold_lat = 0.7 * a->hold_lat + 0.3 * lat;
		if (++a->held >= PROBE_EVERY) {
			long to = a->probe_up ? clamp(a, (double)a->hold * 1.25) : clamp(a, (double)a->hold * 0.8);
			a->probe_up = !a->probe_up;
			a->held = 0;
			if (to != a->hold) {
				a->state = IG_AUTO_PROBING;
				set_limit(a, to, now);
			}
		}
		break;
	case IG_AUTO_PROBING:
		if (a->limit > a->hold && tps >= a->hold_tps * (1 + GAIN)) {
			/* more capacity than when it settled: search upwards again */
			a->state = IG_AUTO_RAMPING;
			a->below_best = a->hold;
			a->best_limit = a->limit;
			a->best_tps = tps;
			set_limit(a, clamp(a, (double)a->limit * 2), now);
		} else if (a->limit < a->hold && tps >= a->hold_tps * (1 - GAIN / 2)) {
			a->state = IG_AUTO_HOLDING; /* the same throughput with less queue */
			a->hold = a->limit;
			a->knee = (long)((double)a->limit / 1.1);
			a->held = PROBE_EVERY - 1; /* and lower still, after one window */
			a->probe_up = 0;
			set_limit(a, a->limit, now);
		} else {
			a->state = IG_AUTO_HOLDING;
			set_limit(a, a->hold, now);
		}
		break;
	default:
		break;
	}
}

void ig_auto_inflight(struct ig_auto *a, uint64_t now, long in_flight)
{
	if (a->win_start && now > a->area_at) {
		double step = (double)(now - a->area_at) / 1e6;
		a->win_area += step * (double)a->inflight;
		if ((double)a->inflight < 0.9 * (double)a->limit)
			a->starved_s += step;
	}
	a->area_at = now;
	a->inflight = in_flight;
}

long ig_auto_tick(struct ig_auto *a, uint64_t now, int sending_done)
{
	double dt = (double)(now - a->last_us) / 1e6;
	a->limit_area += dt * (double)a->limit;
	a->last_us = now;
	if (a->limit < a->min_seen)
		a->min_seen = a->limit;
	if (a->limit > a->max_seen)
		a->max_seen = a->limit;
	if (!a->on || a->state == IG_AUTO_DRAINING)
		return a->limit;
	if (sending_done) {
		a->state = IG_AUTO_DRAINING;
		describe(a);
		return a->limit;
	}
	if (a->state == IG_AUTO_GATEWAY || a->state == IG_AUTO_LEARNING)
		return a->limit;
	if (!a->win_start) {
		if (a->fresh_done < a->limit)
			return a->limit;
		a->win_start = a->area_at = now;
		a->win_area = a->win_lat = a->win_tokens = 0;
		a->win_done = 0;
		a->starved_s = 0;
		return a->limit;
	}
	ig_auto_inflight(a, now, a->inflight);
	uint64_t len = now - a->win_start;
	double need = 2 * a->lat_ewma_s * 1e6;
	int enough = a->win_done >= MIN_WINDOW_DONE && len >= MIN_WINDOW_US && (double)len >= need;
	/* a very slow server: decide on fewer completions rather than never */
	int overdue = a->win_done >= 4 && (double)len >= 5 * need && len >= 4 * MIN_WINDOW_US;
	if (!enough && !overdue)
		return a->limit;
	double secs = (double)len / 1e6;
	int starved = a->starved_s > 0.2 * secs;
	a->starved_s = 0;
	a->windows++;
	if (starved || a->win_lat <= 0) {
		a->win_start = 0; /* the next window starts now: the limit is unchanged */
		return a->limit;
	}
	double work = a->win_tokens > 0 ? a->win_tokens : (double)a->win_done; /* embeddings: requests */
	double mean_inflight = a->win_area / secs;
	double tps = mean_inflight * work / a->win_lat;
	double lat = a->win_lat / work;
	long before = a->limit;
	ig_log_debug("concurrency auto: window %ld at %ld (%s): %.0f tok/s, %.4f s/token, %ld done; hold %.0f tok/s "
		     "%.4f s/token", a->windows, a->limit, ig_auto_state_name(a->state), tps, lat, a->win_done,
		     a->hold_tps, a->hold_lat);
	judge(a, tps, lat, now);
	if (a->limit == before && a->win_start)
		a->win_start = 0;
	describe(a);
	return a->limit;
}

double ig_auto_mean(const struct ig_auto *a)
{
	double secs = (double)(a->last_us - a->t0) / 1e6;
	return secs > 0 ? a->limit_area / secs : (double)a->limit;
}

json_t *ig_auto_json(const struct ig_auto *a)
{
	json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:I, s:I, s:f}", "mode", a->on ? "auto" : "fixed", "state",
			      ig_auto_state_name(a->state), "final", (json_int_t)a->limit, "why", a->why, "min",
			      (json_int_t)a->min_seen, "max", (json_int_t)a->max_seen, "mean", ig_auto_mean(a));
	if (a->on)
		json_object_set_new(j, "search", json_pack("{s:I, s:I, s:I}", "windows", (json_int_t)a->windows,
							  "windows_to_hold", (json_int_t)a->windows_to_hold, "backoffs",
							  (json_int_t)a->backoffs));
	if (a->on && a->gw_unknown >= 0)
		json_object_set_new(j, "gateway", json_pack("{s:I, s:I, s:I, s:f, s:f}", "slots", (json_int_t)a->gw_slots,
							    "unknown_backends", (json_int_t)a->gw_unknown, "headroom",
							    (json_int_t)a->headroom, "in_transit", a->transit, "rtt_ms",
							    a->rtt_s * 1e3));
	return j;
}
