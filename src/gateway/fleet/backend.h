/* A backend (one inference server) and the fleet of them. The fleet and
 * every backend are under the gateway's lock; the counters that code
 * running without it reads or writes (the relay's last_io_ms and
 * least-tokens' out_tokens, /metrics) are atomics. Health bookkeeping
 * belongs to reactor 0, which probes. */
#ifndef IG_BACKEND_H
#define IG_BACKEND_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "fleet/capacity.h"

enum ig_backend_state {
	IG_BACKEND_UP,       /* serving: probes and requests succeed */
	IG_BACKEND_DOWN,     /* `fall` consecutive failures, or never seen up */
};

enum ig_backend_admin {
	IG_ADMIN_ENABLED,   /* takes new requests when up */
	IG_ADMIN_DRAINING,  /* no new requests; in-flight ones finish */
	IG_ADMIN_REMOVING,  /* draining, then removed from the table */
};

struct ig_probe;
struct ig_kvindex;
struct ig_kvevents;

/* prio_sched: the server orders its queue by the request's "priority"... */
#define IG_PRIO_LARGER_FIRST 1u  /* larger values first (SGLang's default) */
#define IG_PRIO_SMALLER_FIRST 2u /* smaller first (--schedule-low-priority-values-first) */
#define IG_PRIO_PREEMPTS 4u      /* and a waiting request preempts a running one that
				  * is more than prio_threshold below it when its
				  * slots are full (not --disable-priority-preemption) */

struct ig_backend {
	int id;                 /* stable for the process, never reused */
	char *url;              /* normalised base URL, no trailing slash */
	/* A server with data-parallel ranks (backends[].dp_ranks > 1) is one
	 * entry per rank, each with its own slots (from its rank's load
	 * report), load and queue; the request names its rank (attempt.c).
	 * Rank 0's entry is the server's: it alone is probed, and what the
	 * probe learns is given to every rank (health.c). */
	int dp_rank;            /* its rank, -1: a server without ranks */
	struct ig_backend *server; /* rank 0's entry (itself for rank 0 and for a
				    * server without ranks) */
	struct ig_backend **ranks; /* rank 0's: the nranks entries, by rank; NULL without */
	int nranks;             /* rank 0's: 1 for a server without ranks */
	char *key;              /* url, or url#dpR for rank R: its name in /metrics and
				 * in what the cluster shares */
	long weight;
	long max_inflight;      /* 0 = unlimited */
	long reserve_slots;     /* of its limit, slots class low may not take */
	long max_loras;         /* LoRA adapters the gateway keeps loaded there, 0:
				 * max_loras_learned (sched/adapters.c) */
	/* vLLM's /metrics max_lora, or SGLang's /server_info max_loras_per_batch; 0 none */
	atomic_long max_loras_learned; /* written by: health */
	atomic_int lora_by_path; /* an adapter is named to it by "lora_path" (SGLang: its
				  * /server_info is SGLang's ServerArgs); written by: health */
	int role;               /* enum ig_pd_role (conf.h): half of a prefill/decode pair, or both */
	int engine;             /* enum ig_pd_engine: the pair's protocol */
	long bootstrap_port;    /* an SGLang prefill server's bootstrap port */
	int priority_field;     /* struct ig_backend_conf's (0: as learned, below) */
	/* What its /server_info says of its scheduling (health.c; SGLang's
	 * ServerArgs): IG_PRIO_* bits, 0 none known; read without the lock. */
	atomic_int prio_sched;
	atomic_long prio_threshold; /* its priority_scheduling_preemption_threshold */
	_Atomic int state;      /* enum ig_backend_state */
	_Atomic int admin;      /* enum ig_backend_admin */
	atomic_long inflight;   /* requests through this gateway, now */
	atomic_long low_inflight; /* of them, of class low (dispatch.c) */
	atomic_ulong served;    /* responses relayed (any status) */
	atomic_ulong failures;  /* connect errors, resets, timeouts, 502/503/504 */
	atomic_ulong retried;   /* requests moved from here to another backend */
	atomic_ullong rest_until_ms; /* it answered 429 or 503 with Retry-After: no
				      * new request before then (monotonic ms) */
	atomic_ulong rests;     /* such answers */
	/* Its circuit breaker (health.c): opened by breaker.failures request
	 * failures in a row, it takes no request until breaker_until_ms, then
	 * one trial at a time (half-open): a success closes it, a failure opens
	 * it again for twice as long. Under the gateway's lock but the reads of
	 * breaker_until_ms (0: closed). */
	_Atomic uint64_t breaker_until_ms;
	int breaker_fails;      /* request failures in a row (probes do not reset them) */
	int breaker_trips;      /* times opened in a row */
	atomic_ulong breaker_opened; /* times opened, ever */
	atomic_ulong aborted;   /* upstream transfers cut because the client left */
	atomic_ulong pd_pairs;  /* prefill/decode pairs it was a half of; written by: try_pd */
	atomic_ulong prompt_tokens;     /* from "usage" in responses */
	atomic_ulong completion_tokens;
	atomic_ulong probes_ok, probes_failed;
	atomic_ulong probes_slow;  /* timed out while requests were answered: not counted */
	atomic_long external_load; /* backend-reported load not sent by us (load_source backend) */
	long reported_load;        /* last running + waiting the backend reported, -1 none */
	long reported_waiting;     /* of which waiting in its own queue, -1 none */
	atomic_long inflight_peak; /* the most in flight since the last report */
	atomic_long out_tokens;    /* least-tokens: the work of its requests in flight
				    * (their estimates less what was relayed) */
	atomic_long speed_milli;   /* output tokens/s per request x 1000, a moving
				    * average over its answers; 0 = not measured */
	atomic_long prefill_tokens; /* cache-aware: prompt tokens of its requests in
				    * flight not yet prefilled (no event relayed yet),
				    * less what its record says is cached there;
				    * written by: lb_cache_aware */
	atomic_long kv_tokens;     /* cache-aware: the KV its requests in flight hold
				    * (prompt and output so far, in tokens);
				    * written by: lb_cache_aware */
	_Atomic uint64_t last_io_ms; /* last byte from it for one of our requests (any reactor) */
	_Atomic uint64_t last_sent_ms; /* when a request was last given to it (monotonic ms;
					* kvevents.c: events are due after it); written by: policy */
	/* Its engines' KV events (kvevents.c): its sources in the exact index
	 * (fleet.kvindex) are kv_src - 1 .. kv_src + kv_ranks - 2, one per
	 * data-parallel rank; kv_src 0: not subscribed. kv_exact 1: every
	 * rank's events flow (not waiting for the first, stale, nor after a
	 * gap that could not be filled), so the index says what it holds;
	 * else a policy goes by what it sent it. Read without the lock. */
	atomic_int kv_exact;       /* written by: kvevents */
	atomic_int kv_src;         /* written by: kvevents */
	atomic_int kv_ranks;       /* written by: kvevents */
	const char *load_path;     /* load_path auto: where it was read (a static
				    * string); NULL before, or with a set path */
	atomic_long slots;         /* reported or learned from load reports
				    * (learn.cur): the requests it runs at once,
				    * 0 = not known; the limit when max_inflight
				    * is not set */
	/* What other gateways run on it, and this one's part of it, are not
	 * here: the cluster's view (cluster_view.h) says, by id. */
	atomic_long ramp;          /* while slots is 0: the cap that grows until
				    * they are known (learn.ramp), 0 = none */
	struct ig_slots learn;     /* capacity.h; under the gateway's lock */
	/* health, owned by the probing reactor */
	int consec_ok, consec_fail;
	int seen_up;            /* ever been up: first success counts as `rise` */
	int probing;
	bool coming_up;         /* its probe passed, its model list is being read:
				 * it goes up with the list (health.c) */
	char up_why[200];       /* the probe's words for the log line then */
	uint64_t next_probe_ms;
	uint64_t last_probe_ms; /* when the last probe finished (monotonic) */
	int last_probe_ok;
	long last_probe_status; /* HTTP status, 0 when none */
	double last_probe_latency_ms;
	char last_probe_error[256];
	/* The models it serves: configured (models_conf), else learned from its
	 * /v1/models (models); see ig_backend_serves. */
	char **models_conf;     /* NULL: learn them */
	size_t n_models_conf;
	uint64_t models_at_ms;  /* when models were last fetched */
	json_t *models;         /* the backend's /v1/models "data" array, or NULL */
	bool models_any;        /* its /v1/models answered an error: it is sent any
				 * model, as before routing by model */
	struct ig_probe *probe; /* health.c's transfer state */
	char *discover;         /* the discover URL it came from, NULL if configured */
};

/* The fleet: every backend the gateway knows, configured or discovered
 * (gw->fleet). A model's pool is the part of it that serves the model
 * (scheduler.h). */
struct ig_fleet {
	struct ig_backend **v;
	size_t n, cap;
	int next_id;
	/* Called when a backend goes down or leaves the table (health.c), so
	 * that what the routing policy learned of it goes (dispatch.c sets it:
	 * a call up through a hook, as xfer.done is). NULL: nothing. */
	void (*on_gone)(void *arg, const struct ig_backend *b);
	void *on_gone_arg;
	struct ig_backend **gone; /* removed backends: requests may still hold
				   * their address in `tried`, so they live on */
	size_t ngone;
	/* The exact prefix index fed by the engines' KV events (sched/kvindex.h,
	 * fleet/kvevents.c), NULL without kv_events: its sources are the
	 * backends' kv_src ranges, kv_nsrc of them in all (the size of
	 * ig_kvindex_match's array). Made at boot, freed at shutdown after the
	 * reactors; its own lock, so read without the gateway's. */
	struct ig_kvindex *kvindex;         /* written by: boot */
	size_t kv_nsrc;                     /* written by: boot */
	struct ig_kvevents *kvevents;       /* the subscriber (kvevents.h); written by: boot */
};

enum ig_serves {
	IG_SERVES_NO,      /* another model's backend */
	IG_SERVES_YES,     /* named in its configured or learned list (or models_any) */
	IG_SERVES_UNKNOWN, /* its list is not learned yet */
};

/* Whether b's configured or learned list names `model`. */
bool ig_backend_names_model(const struct ig_backend *b, const char *model);
/* Whether b serves `model` (a served name, not an alias). */
enum ig_serves ig_backend_serves(const struct ig_backend *b, const char *model);
/* Sets the configured models (copied; n == 0: learn them). Returns 0 or -1. */
int ig_backend_set_models(struct ig_backend *b, char *const *models, size_t n);
/* Takes a configuration entry's settings: weight, max_inflight,
 * reserve_slots, priority_field, its pair role, engine and bootstrap port,
 * and the models (set only when they differ).
 * Returns 1 when the models or the role changed, 0 when not, -1 when out of memory
 * (the models kept). */
int ig_backend_configure(struct ig_backend *b, const struct ig_backend_conf *bc);
/* The model names b serves now (configured, else learned), each once, in
 * its order, as a JSON array of strings (new reference). */
json_t *ig_backend_model_names(const struct ig_backend *b);

/* Rank r of the server whose rank 0 (or only) entry is `server`. */
static inline struct ig_backend *ig_backend_rank(const struct ig_backend *server, int r)
{
	return server->ranks ? server->ranks[r] : (struct ig_backend *)server;
}
/* Adds a server from its configuration entry (url already normalised): one
 * entry, or one per rank with dp_ranks > 1, configured. Returns rank 0's
 * (or the only) entry, or NULL when out of memory (nothing added). */
struct ig_backend *ig_backend_fleet_add_server(struct ig_fleet *fleet, const char *url,
					       const struct ig_backend_conf *bc);
/* Configures every rank of `server` (ig_backend_configure); max_inflight
 * and reserve_slots are the server's, split evenly over its ranks. Returns
 * as ig_backend_configure, 1 when any changed. */
int ig_backend_server_configure(struct ig_backend *server, const struct ig_backend_conf *bc);
/* Sets the admin state of every rank of `server`. */
void ig_backend_server_admin(struct ig_backend *server, int admin);

/* Creates the table from the configuration. Returns 0 or -1. */
int ig_backend_fleet_init(struct ig_fleet *fleet, const struct ig_conf *cfg);
void ig_backend_fleet_free(struct ig_fleet *fleet);
/* Adds a backend (url already normalised); returns it or NULL. */
struct ig_backend *ig_backend_fleet_add(struct ig_fleet *fleet, const char *url, long weight, long max_inflight);
/* Takes b out of the table (its slot count must be zero). */
void ig_backend_fleet_remove(struct ig_fleet *fleet, struct ig_backend *b);
/* b went down or is leaving the table: the fleet's hook is told. */
static inline void ig_backend_fleet_gone(const struct ig_fleet *fleet, const struct ig_backend *b)
{
	if (fleet->on_gone)
		fleet->on_gone(fleet->on_gone_arg, b);
}
/* The server at url: its only entry, or its rank 0's. */
struct ig_backend *ig_backend_fleet_find_url(const struct ig_fleet *fleet, const char *url);
/* The entry whose key (url, or url#dpR) is `key`. */
struct ig_backend *ig_backend_fleet_find_key(const struct ig_fleet *fleet, const char *key);
struct ig_backend *ig_backend_fleet_find_id(const struct ig_fleet *fleet, int id);
/* Backends that can take requests: up and enabled. */
size_t ig_backend_fleet_healthy(const struct ig_fleet *fleet);
int ig_backend_usable(const struct ig_backend *b);
/* Its circuit breaker's state: "closed", "open" or "half_open". */
const char *ig_backend_breaker_state(const struct ig_backend *b);
/* Requests this gateway may have in flight on b: max_inflight when set,
 * else the reported or learned slot count, else the ramp; 0 = no limit. */
long ig_backend_limit(const struct ig_backend *b);
/* What b is known to take: max_inflight, else the reported or learned
 * slots; 0 = not known (a ramp is not knowledge). */
long ig_backend_capacity(const struct ig_backend *b);
/* How a request's class goes into its body as "priority" for b: 0 it does
 * not (no scheduling by priority known or configured, or "none"), 1
 * larger values first, 2 smaller first; *step: the value of high (and
 * minus it, of low; normal is 0), one more than the server's preemption
 * threshold when it told it (so normal preempts low and high normal), else
 * 10. Read without the lock. */
int ig_backend_priority_field(const struct ig_backend *b, long *step);
/* Whether b preempts a running request for a waiting one of a priority more
 * than its threshold above (learned; a configured field does not say). */
bool ig_backend_preempts(const struct ig_backend *b);
/* Where ig_backend_limit comes from: "max_inflight", or capacity.h's
 * "reported", "learned", "ramp", "none". */
const char *ig_backend_limit_from(const struct ig_backend *b);
/* b->learn changed: its slots and ramp are published to the atomics that
 * code without the lock reads. */
void ig_backend_publish_slots(struct ig_backend *b);
/* A request of ours on b finished (ok: b answered it), b's in-flight count
 * still counting it: a ramp at its cap grows. Under the lock. */
void ig_backend_finished(struct ig_backend *b, bool ok);
const char *ig_backend_state_name(int state);
const char *ig_backend_admin_name(int admin);

#endif
