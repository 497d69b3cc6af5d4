/* The simulator's engine (engine.c): batch slots, FIFO queues, pacing and
 * generation, what a GPU batch does minus the GPU. It knows nothing of HTTP:
 * it is handed a parsed request (struct sim_req), has the answer's bytes
 * written into req->out (wire.h), and tells the owner there is something
 * to send by calling the request's own `wake` callback. Time comes in as arguments or from
 * ig_now_us(), so the unit tests drive it without a socket. */
#ifndef IG_SIM_ENGINE_H
#define IG_SIM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "deadlines.h"
#include "infergate/buf.h"
#include "kvcache.h"
#include "infergate/list.h"
#include "lora.h"
#include "request.h"
#include "text.h"

enum sim_fault {
	SIM_FAULT_OK,    /* normal service */
	SIM_FAULT_ERROR, /* every completion answered 500 */
	SIM_FAULT_HANG,  /* completions accepted and never answered */
	SIM_FAULT_SLOW,  /* TTFT x10, decode rate /10 (10 tokens/s when unpaced) */
	SIM_FAULT_DOWN,  /* /health and completions answer 503 */
};

struct ig_kvpub;

struct sim_stats {
	uint64_t received;          /* completion requests received (any outcome) */
	uint64_t served;            /* generations finished */
	uint64_t aborted;           /* clients that left before the end */
	uint64_t failed;            /* injected 500s (error mode, --fail-rate) */
	uint64_t rejected;          /* 503s in down mode */
	uint64_t invalid;           /* 4xx answers */
	uint64_t prompt_tokens;     /* of served requests */
	uint64_t generation_tokens; /* tokens produced, aborted ones included */
	uint64_t stream_failed;     /* streams ended by --stream-fail-rate */
	uint64_t preempted;         /* running requests preempted by a higher priority */
};

/* The running and waiting counts the gauges of /metrics show for one rank,
 * in total and per priority. */
struct sim_gauges {
	long running, waiting;
	size_t nprio;
	struct sim_prio_count {
		long priority, running, waiting;
	} *prio;                    /* malloc'd; the rank's known priorities */
};

/* One data-parallel rank: an independent scheduler with its own slots and
 * FIFO (SGLang runs one scheduler process per DP rank). */
struct sim_rank {
	int idx;
	long running, waiting;
	struct ig_list queue;       /* QUEUED requests, oldest first */
	long *prios;                /* every priority submitted here, ascending
				     * (only with --enable-priority-scheduling) */
	size_t nprios, prios_cap;
	struct sim_gauges snap;     /* what /metrics shows */
	uint64_t next_log_us;       /* next decode-stats refresh; 0 while idle */
	uint64_t last_log_us;       /* last refresh of snap */
	long finished_since_log;    /* unpaced: a decode refresh every 40 */
	/* per-rank counters (SGLang and vLLM print one series per rank):
	 * prompts and finish reasons of served requests, every token produced */
	uint64_t prompt_tokens, generation_tokens, finished_stop, finished_length;
	/* Step profiles: the batch, the step under way, KV and prefix cache. */
	struct ig_list batch;       /* RUNNING requests, admitted first first */
	uint64_t step_end_us;       /* when the current step ends; 0: none */
	double step_sim_us;         /* its length in simulated time */
	long step_tokens;           /* output tokens its decode produces */
	struct sim_kv kv;
	struct ig_kvpub *kvpub;     /* --kv-events: its publisher; NULL: none */
	double gen_tps;             /* output tokens/s of the last step (simulated time) */
	double slowdown;            /* --dp-rank-slowdown: its times stretched by this (1: none) */
	double lora_stall_us;       /* step profiles: adapter loads the next step waits for */
	uint64_t served;            /* requests it finished (/sim/state's per-rank counts) */
	uint64_t cached_tokens;     /* prompt tokens found cached, of served requests */
};

struct sim_engine {
	const struct sim_conf *conf;
	enum sim_fault fault;
	uint64_t fail_rng;          /* --fail-rate draws, seeded from --seed */
	uint64_t stream_fail_rng;   /* --stream-fail-rate draws: its own stream */
	long running, waiting, hung; /* totals over the ranks */
	long hold_after;            /* POST /sim/hold: generations stop after this
				     * many tokens until released; -1: none */
	long held;                  /* requests stopped by it now */
	struct sim_rank *ranks;     /* --dp-ranks of them */
	long nranks;
	long rr_next;               /* the rank the next request goes to */
	struct ig_list delayed;     /* DELAYED /health answers, oldest first */
	struct sim_deadlines heap;  /* RUNNING requests by deadline_us */
	struct sim_stats st;
	int64_t started;
	struct sim_loras loras;     /* --enable-lora: the adapters (lora.c) */
	bool lora;                  /* --enable-lora */
	uint64_t lora_loads;        /* adapter loads into a GPU slot */
};

/* Returns 0, or -1 when out of memory (logged). */
int sim_engine_init(struct sim_engine *e, const struct sim_conf *conf);
void sim_engine_free(struct sim_engine *e);
/* A request as the HTTP side hands it over: READING, fail_at -1, no rank,
 * empty `out`. sim_engine_req_free() releases what the engine put in it. */
void sim_engine_req_init(struct sim_req *r, enum sim_kind kind);
void sim_engine_req_free(struct sim_req *r);
/* Takes a parsed completion request: hangs it, runs it at once when a slot
 * is free (an unpaced one may be DONE on return), or queues it. */
void sim_engine_submit(struct sim_engine *e, struct sim_req *r);
/* Does everything due by now_us: tokens, finished answers, admissions. */
void sim_engine_run(struct sim_engine *e, uint64_t now_us);
/* Milliseconds until the next engine deadline, or -1 when none. */
int sim_engine_timeout_ms(struct sim_engine *e, uint64_t now_us);
/* The client left: stop the generation, free the slot, count it. */
void sim_engine_abort(struct sim_engine *e, struct sim_req *r);
/* True when this completion should get an injected 500. */
bool sim_engine_should_fail(struct sim_engine *e);
/* True when this stream should fail midway (--stream-fail-rate). */
bool sim_engine_should_fail_stream(struct sim_engine *e);
/* A test control (POST /sim/hold, classic profile only): from now on
 * every generation stops after `after` tokens, a stream having sent them
 * and a whole answer not yet written, until another call; after -1: none.
 * Each call first lets the held ones go on at once (tokens that fell due
 * meanwhile go out together), so they stop again at a new `after`. Returns
 * 0, or -1 with a step profile (its decode steps are not held). */
int sim_engine_hold(struct sim_engine *e, long after, uint64_t now_us);
/* SGLang's /flush_cache: every rank's prefix cache emptied (an
 * AllBlocksCleared each with --kv-events). Returns 0, or -1 while
 * requests run or wait (SGLang refuses then too). */
int sim_engine_flush_cache(struct sim_engine *e);
/* Holds a /health answer for --health-delay-ms; it is woken DONE. */
void sim_engine_defer(struct sim_engine *e, struct sim_req *r);
/* The gauges /metrics shows for a rank: its last logged snapshot, or the
 * live counts (refreshed by this call) with --metrics-refresh live. */
const struct sim_gauges *sim_engine_gauges(struct sim_engine *e, struct sim_rank *rk);
/* The tokens a rank holds (prompt and generated so far of its running
 * requests; with a step profile, its KV in use, cache included), those its
 * waiting requests bring, and its decode rate. */
void sim_engine_rank_tokens(const struct sim_engine *e, const struct sim_rank *rk, uint64_t now_us,
			    long *used, long *pending, double *tokens_per_s);
const char *sim_engine_fault_name(enum sim_fault f);
/* Returns 0 and sets *out, or -1 for an unknown name. */
int sim_engine_fault_parse(const char *name, enum sim_fault *out);

#endif
