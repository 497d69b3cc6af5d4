/* One generation request as the simulator's layers share it (types only):
 * the HTTP side (server.c) fills it in, the engine (engine.c) schedules and
 * paces it, the wire formats (wire.c) write its answer's bytes from it.
 * Apart from engine.h so that wire.c can read a request without depending
 * on the engine that calls it (tests/check_layers.py). */
#ifndef IG_SIM_REQUEST_H
#define IG_SIM_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infergate/blockhash.h"
#include "infergate/buf.h"
#include "infergate/list.h"
#include "text.h"

enum sim_kind {
	SIM_CHAT,       /* POST /v1/chat/completions */
	SIM_COMPLETION, /* POST /v1/completions */
	SIM_FAULT_SET,  /* POST /sim/fault or /sim/hold: a test control */
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
	SIM_REQ_FETCHING, /* PD decode: waiting for its KV from the prefill (pd.c), no slot */
	SIM_REQ_DONE,    /* generation finished; bytes may still be going out */
	SIM_REQ_ABORTED, /* the client left before the end */
};

struct sim_rank;
struct sim_pd_room;
struct sim_pd_fetch;

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
	long text_skip;                /* words of the seed's text already given:
					* continue_final_message's prefill (parse.c) */
	char *prefill;                 /* that prefill (the final message), or NULL */
	size_t prefill_len;
	char *doc;                     /* a JSON answer's tokens (structured outputs,
					* schema.h), or NULL: words */
	size_t doc_len;
	struct sim_text text;
	long prompt_tokens;
	long n_tokens;                 /* tokens this answer will have */
	long priority;                 /* "priority" (--enable-priority-scheduling; LONG_MIN
					* or LONG_MAX when not sent: the last) */
	long fail_at;                  /* the stream fails after this many tokens; -1 never */
	bool held;                     /* stopped by POST /sim/hold until released */
	uint64_t t_recv_us;            /* when it came (/generate's e2e_latency) */
	/* Prefill/decode disaggregation (pd.c): */
	struct sim_pd_room *pd_room;   /* a prefill's room until it answers; NULL: none */
	struct sim_pd_fetch *pd_fetch; /* a decode's fetch of its KV; NULL: none */
	bool pd_hold;                  /* the finished answer waits for the KV hand-over */
	bool kv_ready;                 /* its prompt's KV came from a prefill: no prefill compute */
	unsigned status;               /* the answer's HTTP status; 0: 200 */
	long dp_rank;                  /* the rank the client asked for (dp_rank_set) */
	bool dp_rank_set;              /* ... else round-robin */
	int lora;                      /* its LoRA adapter (engine's sim_loras index); -1: the base model */
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
	long resumed_at;               /* tokens it had when last admitted (> 0: preempted
					* and resumed) */
	uint64_t queued_us;            /* when it last entered its rank's queue */
	long preempted;                /* times it was preempted */
	double tps;                    /* pace for this request, 0 = unpaced */
	uint64_t t_first_us;           /* when the first token is due */
	uint64_t deadline_us;          /* next engine event; the answer, when DELAYED */
	/* Step profiles (engine.c "decode steps"): the HTTP side sets the
	 * prompt's block chain (malloc'd; sim_engine_req_free frees it). */
	uint64_t *chain;
	size_t nchain;
	uint32_t *tokens;              /* --kv-events: the chain's token ids, IG_BLOCK_TOKENS a
					* block, for the BlockStored events (malloc'd; NULL
					* without). parse.c takes the text's 4-byte groups
					* (sim_kv_text_tokens), or with --tokenizer the
					* prompt's ids, all ntokens of them. */
	size_t ntokens;                /* --tokenizer: the ids in tokens (past the chain's
					* blocks: its partial last block); 0 without */
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

#endif
