/* The simulator's engine (engine.c): batch slots, FIFO queues, pacing and
 * generation, what a GPU batch does minus the GPU. It knows nothing of HTTP:
 * it is handed a parsed request (struct sim_req), writes the answer's bytes
 * into req->out, and tells the owner there is something to send by calling
 * the request's own `wake` callback. Time comes in as arguments or from
 * ig_now_us(), so the unit tests drive it without a socket. */
#ifndef IG_SIM_ENGINE_H
#define IG_SIM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "infergate/buf.h"
#include "kvcache.h"
#include "infergate/list.h"
#include "text.h"

enum sim_kind {
	SIM_CHAT,       /* POST /v1/chat/completions */
	SIM_COMPLETION, /* POST /v1/completions */
	SIM_FAULT_SET,  /* POST /sim/fault */
	SIM_HEALTH,     /* GET /health with --health-delay-ms: a deferred answer */
	SIM_UTILITY,    /* POST /tokenize, /detokenize: answered at once from the body */
	SIM_RESPONSES,  /* POST /v1/responses (OpenAI's Responses API) */
	SIM_GENERATE,   /* POST /generate (SGLang's native generation) */
};

enum sim_state {
	SIM_REQ_READING, /* body still arriving */
	SIM_REQ_QUEUED,  /* waiting for a batch slot (FIFO) */
	SIM_REQ_RUNNING, /* holds a slot: TTFT wait or decoding */
	SIM_REQ_HUNG,    /* hang fault: accepted, never answered, no slot */
	SIM_REQ_DELAYED, /* a /health answer waiting for --health-delay-ms */
	SIM_REQ_DONE,    /* generation finished; bytes may still be going out */
	SIM_REQ_ABORTED, /* the client left before the end */
};

enum sim_fault {
	SIM_FAULT_OK,    /* normal service */
	SIM_FAULT_ERROR, /* every completion answered 500 */
	SIM_FAULT_HANG,  /* completions accepted and never answered */
	SIM_FAULT_SLOW,  /* TTFT x10, decode rate /10 (10 tokens/s when unpaced) */
	SIM_FAULT_DOWN,  /* /health and completions answer 503 */
};

struct sim_rank;

/* One generation as the engine sees it. The HTTP side embeds it in its own
 * per-connection object and fills the fields above `rank` before
 * sim_engine_submit(); the engine owns the rest. */
struct sim_req {
	enum sim_kind kind;
	enum sim_state state;
	bool stream;
	bool include_usage;
	bool length_cut;               /* max_tokens cut the answer: "length" */
	char id[48];                   /* "chatcmpl-..." / "cmpl-..." / "resp_..." / a /generate rid */
	char prev_id[48];              /* Responses: previous_response_id, "" none */
	long seq;                      /* Responses: the next event's sequence_number */
	bool store;                    /* Responses: kept for follow-ups ("store", default true) */
	char *model_json;              /* model as a JSON string literal */
	int64_t created;
	uint64_t text_seed;
	struct sim_text text;
	long prompt_tokens;
	long n_tokens;                 /* tokens this answer will have */
	long priority;                 /* "priority" (--enable-priority-scheduling) */
	long fail_at;                  /* the stream fails after this many tokens; -1 never */
	uint64_t t_recv_us;            /* when it came (/generate's e2e_latency) */
	/* Called by the engine when `out` got bytes or the state became DONE
	 * (from sim_engine_submit, sim_engine_run); NULL: nobody to tell. */
	void (*wake)(struct sim_req *r);

	struct sim_rank *rank;         /* from submission on; NULL when hung */
	struct ig_list qlink;          /* its rank's wait queue when QUEUED, the
					* deferred answers when DELAYED */
	long heap_idx;                 /* in the engine's deadline heap, or -1 */
	struct ig_buf out;             /* response bytes not yet handed on */
	struct ig_buf gen_text;        /* /generate streams: the text so far (JSON-safe) */
	struct ig_buf gen_ids;         /* ... and its output_ids, "1,2,3" */
	long emitted;                  /* tokens streamed so far */
	double tps;                    /* pace for this request, 0 = unpaced */
	uint64_t t_first_us;           /* when the first token is due */
	uint64_t deadline_us;          /* next engine event; the answer, when DELAYED */
	/* Step profiles (engine.c "decode steps"): the HTTP side sets the
	 * prompt's block chain (malloc'd; sim_engine_req_free frees it). */
	uint64_t *chain;
	size_t nchain;
	char tail[IG_BLOCK_BYTES];     /* the prompt's bytes past its last whole block */
	size_t ntail;
	size_t nmatched;               /* leading blocks found cached at admission */
	long cached_tokens;            /* usage.prompt_tokens_details.cached_tokens */
	bool cache_report;             /* usage carries it (step profiles) */
	long prefill_left;             /* prompt tokens still to prefill */
	long prefill_now;              /* of which this step prefills */
	long own;                      /* KV tokens it holds outside cached blocks */
	double acc;                    /* output tokens owed, fractional (MTP) */
	struct ig_list blink;          /* its rank's batch while RUNNING */
};

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
	double gen_tps;             /* output tokens/s of the last step (simulated time) */
	uint64_t cached_tokens;     /* prompt tokens found cached, of served requests */
};

struct sim_engine {
	const struct sim_conf *conf;
	enum sim_fault fault;
	uint64_t fail_rng;          /* --fail-rate draws, seeded from --seed */
	uint64_t stream_fail_rng;   /* --stream-fail-rate draws: its own stream */
	long running, waiting, hung; /* totals over the ranks */
	struct sim_rank *ranks;     /* --dp-ranks of them */
	long nranks;
	long rr_next;               /* the rank the next request goes to */
	struct ig_list delayed;     /* DELAYED /health answers, oldest first */
	struct sim_req **heap;      /* RUNNING requests by deadline_us */
	size_t heap_len, heap_cap;
	struct sim_stats st;
	int64_t started;
};

/* Returns 0, or -1 when out of memory (logged). */
int sim_engine_init(struct sim_engine *e, const struct sim_conf *conf);
void sim_engine_free(struct sim_engine *e);
/* A request as the HTTP side hands it over: READING, fail_at -1, no rank,
 * empty `out`. sim_engine_req_free() releases what the engine put in it. */
/* A finished Responses API answer's object (what GET /v1/responses/{id}
 * gives back), from r's id, model, created, seed and counts. */
void sim_engine_response_object(struct ig_buf *o, const struct sim_req *r);
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
