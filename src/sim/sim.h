/* infergate-sim internals: flags, the request object, the engine (batch
 * slots, FIFO queue, pacing, generation) and the HTTP side.
 *
 * One thread owns everything here: the reactor (reactor.c) runs MHD in
 * external epoll mode, the engine's deadlines and the hang-up watches of
 * suspended clients from one epoll loop, so MHD_resume_connection is always
 * called on MHD's own thread and nothing needs a lock.
 *
 * Data flows one way: server.c (parse a request) -> engine.c (queue, slot,
 * tokens into req->out) -> server.c (MHD reader or final response) -> client. */
#ifndef IG_SIM_H
#define IG_SIM_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "infergate/buf.h"
#include "conf.h"

#define SIM_MAX_BODY (16u * 1024 * 1024) /* larger request bodies get 413 */
#define SIM_TOKEN_MAX 32                 /* longest token text, bytes */

/* ---- deterministic text (text.c) ---- */

struct sim_text {
	uint64_t state;      /* splitmix64 */
	unsigned long index; /* tokens produced so far */
	bool capitalize;     /* next word starts a sentence */
};

/* The seed of a prompt's answer: same prompt bytes and --seed, same text. */
uint64_t sim_text_seed(const void *prompt, size_t n, uint64_t seed);
void sim_text_init(struct sim_text *t, uint64_t text_seed);
/* Writes the next token (NUL-terminated, at most SIM_TOKEN_MAX bytes, JSON-safe
 * ASCII) into out; returns its length. */
size_t sim_text_next(struct sim_text *t, char *out);
/* The answer's natural length in tokens, 16..256, from the same seed. */
long sim_text_natural_tokens(uint64_t text_seed);
/* Tokens the prompt counts as: about one per 4 bytes, at least 1. */
long sim_text_prompt_tokens(size_t bytes);

/* ---- the request object ---- */

enum sim_kind {
	SIM_CHAT,       /* POST /v1/chat/completions */
	SIM_COMPLETION, /* POST /v1/completions */
	SIM_FAULT_SET,  /* POST /sim/fault */
	SIM_HEALTH,     /* GET /health with --health-delay-ms: a deferred answer */
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

struct sim;
struct sim_rank;

/* What an epoll event in the reactor belongs to. */
enum sim_evkind {
	SIM_EV_MHD,    /* MHD's epoll fd */
	SIM_EV_SIGNAL, /* signalfd: SIGINT, SIGTERM */
	SIM_EV_CLIENT, /* a request's client socket, watched for hang-up */
};

struct sim_evsrc {
	enum sim_evkind kind;
	void *ptr;
};

struct sim_req {
	struct sim *sim;
	struct MHD_Connection *conn;
	struct sim_req *prev, *next;   /* sim->reqs: every live request */
	struct sim_req *qprev, *qnext; /* its rank's wait queue when QUEUED, the
					* deferred answers when DELAYED */
	struct sim_rank *rank;         /* from submission on; NULL when hung */
	long heap_idx;                 /* in sim's deadline heap, or -1 */
	enum sim_kind kind;
	enum sim_state state;
	bool stream;
	bool include_usage;
	bool too_large;                /* body over SIM_MAX_BODY: 413 */
	bool suspended;                /* MHD connection suspended by us */
	bool watching;                 /* client fd in the reactor's epoll */
	bool client_gone;
	bool length_cut;               /* max_tokens cut the answer: "length" */
	struct sim_evsrc ev;
	int fd;
	struct ig_buf body;            /* request body */
	struct ig_buf out;             /* response bytes not yet handed to MHD */
	char id[48];                   /* "chatcmpl-..." / "cmpl-..." */
	char *model_json;              /* model as a JSON string literal */
	int64_t created;
	uint64_t text_seed;
	struct sim_text text;
	long prompt_tokens;
	long n_tokens;                 /* tokens this answer will have */
	long emitted;                  /* tokens streamed so far */
	long priority;                 /* "priority" (--enable-priority-scheduling) */
	long fail_at;                  /* the stream fails after this many tokens; -1 never */
	double tps;                    /* pace for this request, 0 = unpaced */
	uint64_t t_first_us;           /* when the first token is due */
	uint64_t deadline_us;          /* next engine event; the answer, when DELAYED */
};

/* ---- the simulator (engine.c) ---- */

struct sim_stats {
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
	struct sim_req *qhead, *qtail;
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
};

struct sim {
	struct sim_conf *conf;
	struct MHD_Daemon *mhd;
	int epfd, signal_fd;
	struct sim_evsrc ev_mhd, ev_signal;
	enum sim_fault fault;
	uint64_t fail_rng;          /* --fail-rate draws, seeded from --seed */
	uint64_t stream_fail_rng;   /* --stream-fail-rate draws: its own stream */
	long running, waiting, hung; /* totals over the ranks */
	struct sim_rank *ranks;     /* --dp-ranks of them */
	long nranks;
	long rr_next;               /* the rank the next request goes to */
	struct sim_req *dhead, *dtail; /* DELAYED /health answers, oldest first */
	struct sim_req **heap;      /* RUNNING requests by deadline_us */
	size_t heap_len, heap_cap;
	struct sim_req *reqs;       /* every live request */
	size_t nreqs;
	bool need_mhd_run;          /* a connection was resumed */
	bool stopping;
	bool load_warned;           /* /get_load's deprecation logged */
	struct sim_stats st;
	int64_t started;
};

int sim_engine_init(struct sim *s, struct sim_conf *conf);
void sim_engine_free(struct sim *s);
/* Takes a parsed completion request: hangs it, runs it at once when a slot
 * is free (an unpaced one may be DONE on return), or queues it. */
void sim_engine_submit(struct sim *s, struct sim_req *r);
/* Does everything due by now_us: tokens, finished answers, admissions. */
void sim_engine_run(struct sim *s, uint64_t now_us);
/* Milliseconds until the next engine deadline, or -1 when none. */
int sim_engine_timeout_ms(struct sim *s, uint64_t now_us);
/* The client left: stop the generation, free the slot, count it. */
void sim_engine_abort(struct sim *s, struct sim_req *r);
/* True when this completion should get an injected 500. */
bool sim_engine_should_fail(struct sim *s);
/* True when this stream should fail midway (--stream-fail-rate). */
bool sim_engine_should_fail_stream(struct sim *s);
/* Holds a /health answer for --health-delay-ms; it is woken DONE. */
void sim_engine_defer(struct sim *s, struct sim_req *r);
/* The gauges /metrics shows for a rank: its last logged snapshot, or the
 * live counts (refreshed by this call) with --metrics-refresh live. */
const struct sim_gauges *sim_engine_gauges(struct sim *s, struct sim_rank *rk);
/* The tokens a rank holds (prompt and generated so far of its running
 * requests), those its waiting requests bring, and its decode rate. */
void sim_engine_rank_tokens(struct sim *s, const struct sim_rank *rk, uint64_t now_us,
			    long *used, long *pending, double *tokens_per_s);
const char *sim_fault_name(enum sim_fault f);
/* Returns 0 and sets *out, or -1 for an unknown name. */
int sim_fault_parse(const char *name, enum sim_fault *out);

/* ---- HTTP (server.c) ---- */

enum MHD_Result sim_server_handler(void *cls, struct MHD_Connection *conn, const char *url,
				   const char *method, const char *version,
				   const char *upload_data, size_t *upload_data_size,
				   void **con_cls);
void sim_server_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			  enum MHD_RequestTerminationCode toe);
/* Resumes a suspended connection so MHD picks up new bytes or the end. */
void sim_req_wake(struct sim_req *r);
/* The reactor saw the client socket hang up. */
void sim_server_client_gone(struct sim_req *r);
void sim_req_free(struct sim_req *r);

/* ---- the loop (reactor.c) ---- */

/* Starts MHD, epoll and signals. Returns 0 or -1 (logged). */
int sim_reactor_init(struct sim *s);
/* Runs until SIGINT/SIGTERM; returns the exit code. */
int sim_reactor_run(struct sim *s);
void sim_reactor_free(struct sim *s);
/* Adds the request's client socket to the epoll set (once). */
void sim_reactor_watch(struct sim *s, struct sim_req *r);
void sim_reactor_unwatch(struct sim *s, struct sim_req *r);

#endif
