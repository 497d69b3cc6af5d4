/* Who runs next and where: the one place a request meets the scheduler
 * (its model's queue, classes and fair shares: scheduler.h) and the routing
 * policy (which backend: policy.h). A request submits its struct ig_waiter;
 * dispatch either starts it at once (the waiter's `start` with the backend,
 * its slot taken), queues it, or refuses it (`fail` with OpenAI's error);
 * a queued one is started or failed later, by the drain when a slot frees,
 * or by its deadline. The request never touches the queues, the slots or
 * the counters; dispatch never looks past the waiter (the callbacks are how
 * it reports back, as upstream.c's xfer.done does).
 * Threads: everything here runs under the gateway's lock, except
 * ig_dispatch_progress (the relay's, without it). The callbacks are called
 * under the lock too, possibly on a reactor that is not the request's: a
 * request whose connection or transfer another reactor owns must hand the
 * work to it (proxy.c posts it). */
#ifndef IG_DISPATCH_H
#define IG_DISPATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "keys/clients.h"
#include "sched/policy.h"
#include "sched/scheduler.h"

struct ig_gw;
struct ig_waiter;

/* The queues' counters (dispatch.c writes them, its family of /metrics
 * prints them): gw->dispatch_stats. */
struct ig_dispatch_stats {
	uint64_t queue_rejected;    /* 429 */
	uint64_t queue_timeouts;    /* 503 after waiting */
};

/* An answer dispatch decided for a request it will not run, in OpenAI's
 * shape (oaerror.h). */
struct ig_dispatch_error {
	unsigned status;
	const char *type;            /* NULL: the type of the status */
	const char *param;           /* NULL: none */
	const char *code;
	const char *message;
};

/* What a waiter's request does when dispatch decides. */
struct ig_waiter_ops {
	/* Start the attempt on b (its slot is taken: w->backend is b). Returns
	 * 0 when started or handed to its reactor to start, -1 when it could
	 * not (it gave the slot back with ig_dispatch_end and set its error). */
	int (*start)(struct ig_waiter *w, struct ig_backend *b);
	/* It will not run: answer e (w is out of every queue). */
	void (*fail)(struct ig_waiter *w, const struct ig_dispatch_error *e);
};

/* What a request embeds (the scheduler's part, struct ig_sched_entry, is
 * its place in a queue). Set by the request before ig_dispatch_submit:
 * ops, klass, key, m, model/alias (for messages), pick (what the policy is
 * told), pin_param/pin_id when pinned. The rest is dispatch's. */
struct ig_waiter {
	struct ig_sched_entry q;          /* klass, key, place in the queue, deadline */
	const struct ig_waiter_ops *ops;
	struct ig_model *m;               /* its model's pool and queue (held) */
	const char *model, *alias;        /* the served name, the client's alias or NULL */
	const char *pin_param, *pin_id;   /* "response_id" or "previous_response_id" and
					   * the id, when pick.pinned */
	struct ig_pick_req pick;
	/* dispatch's */
	const struct ig_policy *policy;   /* the policy its attempt started under */
	void *policy_state;               /* and that policy's state (two halves' policies
					   * may be two of one kind) */
	struct ig_backend *backend;       /* the current (or last) attempt's */
	bool running;                     /* holds a slot on backend */
	bool queued;                      /* in its model's queue */
	bool was_queued;                  /* has waited at some point */
	uint64_t queued_ms;               /* when it last entered the queue */
	uint64_t waited_ms;               /* time spent waiting, in total */
	uint64_t dispatch_seq;            /* its first attempt was the gateway's n-th sent, 0 none */
	uint64_t attempt_us;              /* the current attempt's start */
	bool lora_path;                   /* its model is an adapter its backend takes as
					   * "lora_path" (SGLang: adapters.h) */
};

enum ig_dispatch_result {
	IG_DISPATCH_STARTED,  /* `start` was called and returned 0 */
	IG_DISPATCH_QUEUED,   /* it waits; start or fail comes later */
	IG_DISPATCH_FAILED,   /* `fail` was called, or `start` returned -1 */
};

/* The policy the configuration names, its state made. Returns 0 or -1 with
 * *err (malloc'd). */
int ig_dispatch_init(struct ig_gw *gw, char **err);
/* A reload: the policy named now (its state made anew when it changed, else
 * reconfigured). Returns 0 or -1 (out of memory: the old one kept). */
int ig_dispatch_configure(struct ig_gw *gw);
void ig_dispatch_free(struct ig_gw *gw);

/* A new request: started, queued or refused (see enum ig_dispatch_result). */
enum ig_dispatch_result ig_dispatch_submit(struct ig_gw *gw, struct ig_waiter *w);
/* Its attempt failed before any byte went to the client (ig_dispatch_end
 * called): another backend, the queue, or `fail` (timeout: a 504, else a
 * 502, naming the backend and `what` went wrong). */
enum ig_dispatch_result ig_dispatch_retry(struct ig_gw *gw, struct ig_waiter *w, bool timeout, const char *what);
/* Whether the retry budget allows one more retry now (counted when it
 * does): over the last IG_RETRY_WINDOW_S seconds, retries stay within
 * retry_budget.percent of the requests submitted plus
 * retry_budget.min_per_s a second. */
bool ig_dispatch_retry_budget(struct ig_gw *gw);
/* Whether one more hedge may go now (counted when it may): over the last
 * IG_HEDGE_WINDOW_S seconds, hedges stay within hedge.budget_percent of the
 * requests submitted, and within the retry budget. */
bool ig_dispatch_hedge_budget(struct ig_gw *gw);
/* A hedge counted by ig_dispatch_hedge_budget that did not go (no backend
 * had a free slot): given back, in both budgets. */
void ig_dispatch_hedge_unspend(struct ig_gw *gw);
/* Its attempt ended (answered, failed, or cut): the slot given back, the
 * policy told. A drain follows at the end of the turn. */
void ig_dispatch_end(struct ig_gw *gw, struct ig_waiter *w, const struct ig_pick_outcome *o);
/* It leaves the queue without running (its client left). */
void ig_dispatch_cancel(struct ig_gw *gw, struct ig_waiter *w);
/* One SSE event of its attempt was relayed: without the lock (the relay's
 * thread, the request's reactor). */
void ig_dispatch_progress(const struct ig_gw *gw, struct ig_waiter *w);

/* Each model's learned headroom recomputed (headroom.h): the slots its
 * low requests leave free for high and normal ones. On the tick. */
void ig_dispatch_headroom(struct ig_gw *gw, uint64_t now_ms);
/* Starts waiting requests while their models' backends have slots. */
void ig_dispatch_drain(struct ig_gw *gw);
/* Requests that waited their class's queue timeout: 503. */
void ig_dispatch_expire(struct ig_gw *gw, uint64_t now_ms);

/* The policy's fields for b's entry of /health/backends, and the gateway's. */
void ig_dispatch_report_backend(const struct ig_gw *gw, const struct ig_backend *b, json_t *entry);
void ig_dispatch_report(const struct ig_gw *gw, json_t *obj);

#endif
