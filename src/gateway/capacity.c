/* Slot counts learned from load reports (capacity.h). No I/O, no clock:
 * tests/unit/gateway/test_capacity.c drives it with report sequences. */
#include "config.h"

#include "capacity.h"

long ig_capacity_learn(struct ig_slots *s, long running, long waiting, long ours)
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

long ig_capacity_report(struct ig_slots *s, long running, long waiting, long ours, long peak, unsigned long done,
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
	return ig_capacity_learn(s, running, waiting, peak);
}
