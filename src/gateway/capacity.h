/* What a backend's load reports teach about its capacity: how many
 * requests this gateway may have in flight there (its learned slots). Pure
 * arithmetic on the counts loadreport.c reads; health.c feeds it once per
 * report and stores the result in the backend's `slots`. Not here: reading
 * the report (loadreport.c), or using the limit (policy.c). */
#ifndef IG_CAPACITY_H
#define IG_CAPACITY_H

#include <stdbool.h>

/* What the reports taught of one backend (owned by the probing reactor). */
struct ig_slots {
	long cur;   /* the limit now (0 = none learned) */
	long peak;  /* the highest limit learned while it queued */
	int calm;   /* reports in a row without a queue while we were at cur */
	/* the previous report, to tell a stale one (ig_capacity_report) */
	long last_running, last_waiting; /* -1 none */
	long last_ours;
	unsigned long last_done;
	unsigned long stale;             /* reports set aside as stale */
	bool last_stale;                 /* the previous one was */
};

/* Nothing learned, no previous report (a new backend, or one that went down). */
static inline void ig_capacity_reset(struct ig_slots *s)
{
	*s = (struct ig_slots){.last_running = -1, .last_waiting = -1};
}

/* Reports between probes above the peak: a backend that queues cannot run
 * more, so going past what it ran costs a request waiting there. */
#define IG_SLOTS_PROBE_AFTER 5

/* Learns from one load report of a backend: `running` and `waiting` in its
 * own queue (-1 unknown), `ours` of them in flight from this gateway.
 * A backend that queues is full: the limit becomes our share of what it
 * runs, running x ours / (running + waiting) rounded up (all of it when we
 * are its only client; gateways sharing it so do not overfill it together).
 * Without a queue while we are at the limit, the limit climbs back towards
 * the peak (a queue seen in passing can undercount), and past it only after
 * IG_SLOTS_PROBE_AFTER calm reports, by an eighth. Returns the new limit. */
long ig_capacity_learn(struct ig_slots *s, long running, long waiting, long ours);

/* Takes one load report, guarded against stale ones, and learns from it.
 * A report tells the backend's state at some moment since the previous
 * one, not now (SGLang's /metrics gauges are refreshed only when its
 * scheduler logs: each prefill batch, every 40 decode steps, every 30 s
 * when idle, so a queue can show long after it is gone):
 * - it is weighed against `peak`, the most requests this gateway had in
 *   flight there since the previous report, not `ours` now;
 * - a queue while we had nothing there says nothing of our share;
 * - counts that repeat the previous report's exactly while our own traffic
 *   there moved (`ours` or `done`, our finished requests, changed) are stale:
 *   a live server's counts would have moved too; and they stay stale while
 *   they repeat.
 * What is not learned from leaves the limit as it was. Returns the limit;
 * *stale tells whether the report was set aside as stale. */
long ig_capacity_report(struct ig_slots *s, long running, long waiting, long ours, long peak, unsigned long done,
			bool *stale);

#endif
