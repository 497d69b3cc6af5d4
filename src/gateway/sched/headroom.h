/* Learned headroom: how many of a model's slots to keep free of new low
 * (bulk) work so that its high and normal (interactive) requests find one
 * free when they arrive, with no knob. By Little's law the slots that
 * interactive requests hold on average are L = arrival rate x the time a
 * slot stays busy with one; the headroom is L plus a margin for the tail
 * (their number in service is about Poisson: L + sqrt(L), rounded up),
 * capped at a share of the pool. When the interactive traffic stops (no
 * arrival for five of its mean gaps, 2 s at least) the headroom is 0 and a
 * bulk run gets every slot; the first arrival makes it 1 at once (it is
 * counted the moment it arrives).
 * reserve_slots, where set, overrides it (dispatch.c); what high and normal
 * requests may take over the slots of backends that preempt low work
 * (headroom.overshoot, policy.c) is deducted from it there.
 *
 * Threads: under the gateway's lock (the model's, scheduler.h).
 * Not here: where it holds low work back (dispatch.c). */
#ifndef IG_HEADROOM_H
#define IG_HEADROOM_H

#include <stdbool.h>
#include <stdint.h>

#define IG_HEADROOM_WINDOW_S 10 /* arrivals counted over this many seconds */

struct ig_headroom {
	uint64_t sec[IG_HEADROOM_WINDOW_S]; /* the second each count is of */
	uint32_t n[IG_HEADROOM_WINDOW_S];   /* high and normal arrivals in it */
	uint64_t first_ms;                  /* the first arrival seen (the window's start before it is full) */
	uint64_t last_ms;                   /* the last one */
	double busy_s;                      /* a slot's time per interactive request (EWMA), 0: none seen */
	/* the last ig_headroom_update's */
	double rate;                        /* arrivals per second */
	double in_use;                      /* L = rate x busy_s */
	long slots;                         /* the headroom */
	bool capped;                        /* it was cut to the cap */
};

void ig_headroom_init(struct ig_headroom *h);
/* A high or normal request arrived. */
void ig_headroom_arrival(struct ig_headroom *h, uint64_t now_ms);
/* One held a slot this long (its attempt's start to its end). */
void ig_headroom_busy(struct ig_headroom *h, double seconds);
/* The rule alone: the headroom for `rate` arrivals/s each busy `busy_s`
 * seconds, at most max_percent of pool_slots (pool_slots 0: no cap known,
 * none). 0 when rate is 0. */
long ig_headroom_rule(double rate, double busy_s, long pool_slots, long max_percent, bool *capped);
/* Recomputes it now; returns the headroom. */
long ig_headroom_update(struct ig_headroom *h, uint64_t now_ms, long pool_slots, long max_percent);

#endif
