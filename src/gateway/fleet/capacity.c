/* Slot counts reported by backends and learned from their load reports
 * (capacity.h). No I/O, no clock: tests/unit/gateway/fleet/test_capacity.c drives
 * it with report sequences. */
#include "config.h"

#include "fleet/capacity.h"

enum ig_slots_from ig_capacity_from(const struct ig_slots *s)
{
	if (s->cur > 0)
		return s->reported > 0 && s->cur == s->reported ? IG_SLOTS_REPORTED : IG_SLOTS_LEARNED;
	return s->ramp > 0 ? IG_SLOTS_RAMP : IG_SLOTS_NONE;
}

const char *ig_capacity_from_name(enum ig_slots_from from)
{
	static const char *const names[] = {
		[IG_SLOTS_NONE] = "none",
		[IG_SLOTS_RAMP] = "ramp",
		[IG_SLOTS_REPORTED] = "reported",
		[IG_SLOTS_LEARNED] = "learned",
	};
	return names[from];
}

long ig_capacity_learn(struct ig_slots *s, long running, long waiting, long ours)
{
	if (running < 0 || waiting < 0)
		return s->cur;
	if (waiting > 0) {
		s->calm = 0;
		/* A stated capacity is lowered only by a queue that lasts: one
		 * report can catch requests that arrived since the last step. */
		if (s->reported > 0 && s->cur > 0 && ++s->queued < 2)
			return s->cur;
		if (s->shared && s->reported > 0) {
			/* the gateways' requests together: it runs what it states
			 * (no lower limit), or fewer (a KV budget): that many in all */
			if (running < s->cur)
				s->cur = running > 0 ? running : 1;
			if (s->cur > s->peak)
				s->peak = s->cur;
			return s->cur;
		}
		/* Our share of what it runs: all of it when we are its only
		 * client, 1/M when M gateways (or other clients) load it alike. */
		long total = running + waiting, mine = ours < total ? ours : total;
		long share = (long)(((long long)running * mine + total - 1) / total);
		s->cur = share > 0 ? share : 1;
		if (s->reported > 0 && s->cur > s->reported)
			s->cur = s->reported;
		if (s->cur > s->peak)
			s->peak = s->cur;
		return s->cur;
	}
	s->queued = 0;
	if (s->cur == 0) {
		/* Not known yet: no queue with the ramp full, twice the ramp. */
		if (s->ramp > 0 && ours >= s->ramp)
			s->ramp = s->ramp < IG_SLOTS_RAMP_MAX / 2 ? 2 * s->ramp : IG_SLOTS_RAMP_MAX;
		return 0;
	}
	if (ours < s->cur) {
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
	if (s->reported > 0 && s->cur > s->reported)
		s->cur = s->reported; /* it runs no more than it says */
	return s->cur;
}

long ig_capacity_report(struct ig_slots *s, long running, long waiting, long capacity, long ours, long peak,
			unsigned long done, bool *stale)
{
	/* What it states is its configuration, never stale: the limit starts
	 * there, and a limit learned above it comes down to it. */
	if (capacity > 0 && running >= 0) {
		s->reported = capacity;
		if (s->cur == 0 || s->cur > capacity)
			s->cur = capacity;
		if (s->peak > capacity)
			s->peak = capacity;
	}
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
	/* Reports again after none (ig_capacity_no_reports): a ramp from
	 * what is in flight there now. */
	if (running >= 0 && s->cur == 0 && s->ramp == 0)
		s->ramp = peak > IG_SLOTS_RAMP_START ? peak : IG_SLOTS_RAMP_START;
	if (waiting > 0 && peak == 0)
		return s->cur;
	return ig_capacity_learn(s, running, waiting, peak);
}

bool ig_capacity_done(struct ig_slots *s, long inflight)
{
	if (s->cur > 0 || s->ramp == 0 || inflight < s->ramp || s->ramp >= IG_SLOTS_RAMP_MAX)
		return false;
	s->ramp++;
	return true;
}

void ig_capacity_no_reports(struct ig_slots *s)
{
	if (s->cur == 0)
		s->ramp = 0;
}
