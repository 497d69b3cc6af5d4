/* What a backend's load reports teach about its capacity: how many
 * requests this gateway may have in flight there. Pure arithmetic on the
 * counts loadreport.c reads; health.c feeds it once per report, dispatch.c
 * once per finished request, and backend.c publishes the result in the
 * backend's `slots` and `ramp`. Under the gateway's lock (reports on reactor
 * 0, completions on any). Not here: reading the report (loadreport.c), or
 * using the limit (policy.c).
 *
 * Where a limit comes from, in order:
 * - reported: the server states it (SGLang's /v1/loads max_running_requests);
 *   known from the first report, before any request;
 * - learned: a queue in its reports shows it runs fewer (a server whose KV
 *   budget holds fewer requests than its max_running_requests, or one that
 *   other clients share): our share of what it runs;
 * - ramp: neither yet; a small cap that grows while the server answers
 *   without queueing (one more per request it finishes at the cap, twice as
 *   many per report without a queue at the cap), until a queue shows the
 *   real capacity: never a deep queue on a server of unknown size;
 * - none: no load reports to learn from (load_source gateway, or a server
 *   that answers none of the load paths): no limit, as before. */
#ifndef IG_CAPACITY_H
#define IG_CAPACITY_H

#include <stdbool.h>

enum ig_slots_from {
	IG_SLOTS_NONE,     /* no limit: nothing to learn it from */
	IG_SLOTS_RAMP,     /* not known yet: ramp */
	IG_SLOTS_REPORTED, /* as the server states it */
	IG_SLOTS_LEARNED,  /* from a queue it reported */
};

/* What the reports taught of one backend. */
struct ig_slots {
	long cur;      /* the limit reported or learned (0 = not known) */
	long peak;     /* the highest limit learned while it queued */
	int calm;      /* reports in a row without a queue while we were at cur */
	long reported; /* the capacity the server states, 0 none */
	int queued;    /* reports in a row with a queue (a stated capacity is
			* lowered only by a queue seen twice: SGLang counts a
			* request waiting until its scheduler's next step) */
	long ramp;     /* with cur 0: the cap while it is learned; 0 = no cap */
	/* the previous report, to tell a stale one (ig_capacity_report) */
	long last_running, last_waiting; /* -1 none */
	long last_ours;
	unsigned long last_done;
	unsigned long stale;             /* reports set aside as stale */
	bool last_stale;                 /* the previous one was */
	bool shared;   /* several gateways share it and subtract each other's requests
			* (cluster.c): cur is what the server runs in all, not our
			* share, and a queue while it runs all it states is theirs and
			* ours together sent a moment apart, not a smaller capacity */
};

/* Whether several gateways share s (its `shared`; cluster.c, from its view). */
static inline void ig_capacity_set_shared(struct ig_slots *s, bool shared)
{
	s->shared = shared;
}

/* The first cap of a backend whose capacity is not known: small enough not
 * to queue on any server, doubled by each calm report at it. */
#define IG_SLOTS_RAMP_START 8
#define IG_SLOTS_RAMP_MAX 1000000L

/* Nothing learned, no previous report (a new backend, or one that went
 * down). `reports`: load reports are expected (load_source backend), so a
 * ramp caps it until they tell its capacity. */
static inline void ig_capacity_reset(struct ig_slots *s, bool reports)
{
	*s = (struct ig_slots){.last_running = -1, .last_waiting = -1, .ramp = reports ? IG_SLOTS_RAMP_START : 0};
}

/* The limit now: reported or learned, else the ramp (0 = none). */
static inline long ig_capacity_limit(const struct ig_slots *s)
{
	return s->cur > 0 ? s->cur : s->ramp;
}

/* Where the limit comes from. */
enum ig_slots_from ig_capacity_from(const struct ig_slots *s);
const char *ig_capacity_from_name(enum ig_slots_from from);

/* Reports between probes above the peak: a backend that queues cannot run
 * more, so going past what it ran costs a request waiting there. */
#define IG_SLOTS_PROBE_AFTER 5

/* Learns from one load report of a backend: `running` and `waiting` in its
 * own queue (-1 unknown), `ours` of them in flight from this gateway.
 * A backend that queues is full: the limit becomes our share of what it
 * runs, running x ours / (running + waiting) rounded up (all of it when we
 * are its only client; gateways sharing it so do not overfill it together);
 * with a stated capacity, only when the queue shows in two reports in a row.
 * Without a queue while we are at the limit, the limit climbs back towards
 * the peak (a queue seen in passing can undercount), and past it only after
 * IG_SLOTS_PROBE_AFTER calm reports, by an eighth; never past a stated
 * capacity. Without a limit yet, a calm report at the ramp doubles it.
 * Returns the new limit (cur). */
long ig_capacity_learn(struct ig_slots *s, long running, long waiting, long ours);

/* Takes one load report, guarded against stale ones, and learns from it.
 * `capacity`: what the server states it runs at once (-1 not stated); the
 * limit starts there and never goes past it.
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
 * What is not learned from leaves the limit as it was. Returns the limit
 * (cur); *stale tells whether the report was set aside as stale. */
long ig_capacity_report(struct ig_slots *s, long running, long waiting, long capacity, long ours, long peak,
			unsigned long done, bool *stale);

/* A request of ours there finished, answered, with `inflight` of ours there
 * counting it: at the ramp's cap, the cap grows by one (so it doubles per
 * round of requests, as a TCP window in slow start). Returns whether it
 * grew. */
bool ig_capacity_done(struct ig_slots *s, long inflight);

/* Its load reports are missing (no load path answers one): no ramp, no
 * limit until they come (then a ramp from what is in flight). */
void ig_capacity_no_reports(struct ig_slots *s);

#endif
