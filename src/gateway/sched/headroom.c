/* Learned headroom (headroom.h). */
#include "config.h"
#include <math.h>
#include <string.h>

#include "conf/conf.h"
#include "sched/headroom.h"

#define BUSY_ALPHA 0.1 /* the EWMA's weight of a new busy time */
#define BUSY_FIRST 1.0 /* seconds assumed before any is seen */

void ig_headroom_init(struct ig_headroom *h)
{
	memset(h, 0, sizeof(*h));
}

/* Second sec's count, emptied when it held an older one. */
static uint32_t *count_of(struct ig_headroom *h, uint64_t sec)
{
	size_t i = (size_t)(sec % IG_HEADROOM_WINDOW_S);
	if (h->sec[i] != sec) {
		h->sec[i] = sec;
		h->n[i] = 0;
	}
	return &h->n[i];
}

void ig_headroom_arrival(struct ig_headroom *h, uint64_t now_ms)
{
	if (!h->first_ms || (h->last_ms && now_ms - h->last_ms > IG_HEADROOM_WINDOW_S * 1000u))
		h->first_ms = now_ms ? now_ms : 1; /* the first, or the first after a quiet window */
	h->last_ms = now_ms;
	(*count_of(h, now_ms / 1000))++;
	if (h->slots == 0) /* the first after a quiet window: one slot kept at once */
		h->slots = 1;
}

void ig_headroom_busy(struct ig_headroom *h, double seconds)
{
	if (seconds < 0)
		seconds = 0;
	h->busy_s = h->busy_s > 0 ? (1 - BUSY_ALPHA) * h->busy_s + BUSY_ALPHA * seconds : seconds;
}

long ig_headroom_rule(double rate, double busy_s, long pool_slots, long max_percent, bool *capped)
{
	*capped = false;
	if (rate <= 0 || max_percent <= 0)
		return 0;
	double l = rate * (busy_s > 0 ? busy_s : BUSY_FIRST);
	long slots = (long)ceil(l + sqrt(l));
	if (slots < 1)
		slots = 1;
	if (pool_slots > 0) {
		long cap = pool_slots * max_percent / 100;
		if (cap < 1)
			cap = 1;
		if (slots > cap) {
			slots = cap;
			*capped = true;
		}
	}
	return slots;
}

long ig_headroom_update(struct ig_headroom *h, uint64_t now_ms, long pool_slots, long max_percent)
{
	uint64_t sec = now_ms / 1000, n = 0;
	for (size_t i = 0; i < IG_HEADROOM_WINDOW_S; i++)
		if (h->sec[i] + IG_HEADROOM_WINDOW_S > sec && h->sec[i] <= sec)
			n += h->n[i];
	/* over the window's seconds (the last one as far as it has gone), or
	 * since the first arrival while that is younger; a second at least:
	 * a first burst is not read as a huge rate */
	uint64_t from_ms = sec + 1 >= IG_HEADROOM_WINDOW_S ? (sec + 1 - IG_HEADROOM_WINDOW_S) * 1000u : 0;
	if (h->first_ms > from_ms)
		from_ms = h->first_ms;
	double span = (double)(now_ms - from_ms) / 1000.0;
	if (span < 1)
		span = 1;
	h->rate = (double)n / span;
	/* stopped: no arrival for five of its mean gaps (2 s at least) */
	if (h->rate > 0 && now_ms > h->last_ms) {
		double quiet_ms = 5000.0 / h->rate;
		if ((double)(now_ms - h->last_ms) > (quiet_ms > 2000 ? quiet_ms : 2000))
			h->rate = 0;
	}
	h->in_use = h->rate * (h->busy_s > 0 ? h->busy_s : BUSY_FIRST);
	h->slots = ig_headroom_rule(h->rate, h->busy_s, pool_slots, max_percent, &h->capped);
	return h->slots;
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag headroom_rows[] = {
	{.name = "--headroom-max-percent", .key = "headroom.max_percent", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(headroom_max_percent), .min = 0, .max = 90, .def = "25", .metavar = "P",
	 .help = "slots kept free of new low (bulk) work for high and normal requests are learned from their "
		 "arrival rate and how long they hold a slot, up to P% of a model's slots (0 = none kept: priority "
		 "alone; a backend's reserve_slots overrides it)"},
};
const struct ig_conf_part ig_headroom_conf = IG_CONF_PART(headroom_rows);
static const struct ig_flag overshoot_rows[] = {
	{.name = "--headroom-overshoot", .key = "headroom.overshoot", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(headroom_overshoot), .min = 0, .max = 64, .def = "1", .metavar = "N",
	 .help = "a high or normal request that finds no free slot may go up to N over the slots of a backend "
		 "that preempts lower priorities (SGLang with --enable-priority-scheduling, learned from its "
		 "/server_info), which then preempts a low one; those N count as headroom (0 = never)"},
};
const struct ig_conf_part ig_headroom_conf_overshoot = IG_CONF_PART(overshoot_rows);
