/* The request path's own interface, between proxy.c (the exchange: one
 * client's call and its life) and the files that add to it: the
 * strategies that start more attempts and pick the winner (strategy.h,
 * try_*.c), the observers of an exchange (watch.h, watch_*.c), the answer
 * to the client (reply.c) and the attempt's transfer (attempt.c). Nothing
 * outside the request path includes it (server.c, reactor.c: proxy.h).
 *
 * Who may call what: unless a line says otherwise, a function here runs on
 * the exchange's own reactor (req->rx) with the gateway's lock held. */
#ifndef IG_EXCHANGE_H
#define IG_EXCHANGE_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "gateway.h"
#include "infergate/buf.h"
#include "infergate/httpd.h"
#include "net/upstream.h"
#include "obs/trace.h"
#include "path/admission.h"
#include "path/relay.h"
#include "sched/dispatch.h"

struct ig_req;
struct ig_watch;

/* The request header that marks a batch's own request: "SECRET OWNER"
 * (batches.c sends it, server.c checks it). The gateway's own: a proxied
 * request never forwards it. */
#define IG_BATCH_HEADER "X-Infergate-Batch"

/* The exchange's callbacks, set by its maker (proxy.c) and copied to a
 * hedge: the lower layers (upstream.c, relay.c, dispatch.c) and the
 * strategies and observers report back through them, never by calling
 * proxy.c. */
struct ig_xch_hooks {
	void (*xfer_done)(struct ig_xfer *x, CURLcode result); /* upstream.h */
	const struct ig_relay_ops *relay;
	const struct ig_waiter_ops *waiter;
	/* Frees it (its observers told first). */
	void (*free)(struct ig_req *req);
	/* Its answer is decided (or may be): its observers told. */
	void (*decided)(struct ig_req *req);
	/* Admitted (body, limits), then dispatched: answered, or suspended. */
	enum MHD_Result (*admit)(struct ig_req *req);
	/* An attempt on b is configured, about to start: its observers told. */
	void (*attempt_start)(struct ig_req *req, struct ig_backend *b);
	/* Its running attempt ended by the gateway (e, detail: why), as a
	 * transfer's end is: accounted, the strategies asked. Not from a curl
	 * callback. */
	void (*attempt_cut)(struct ig_req *req, enum ig_upstream_error e, const char *detail);
	/* Its attempt is about to start: a decode server's gets its pair
	 * (try_pd.c's ig_pd_launch; true: req's own transfer does not start now). */
	bool (*attempt_pair)(struct ig_req *req);
};

/* What another reactor asks of a request's own (ig_proxy_run_posted). */
#define IG_HAND_START 1u   /* start the attempt dispatch gave it */
#define IG_HAND_RESUME 2u  /* resume its connection: an answer is decided */
#define IG_HAND_REFUSED 4u /* dispatch refused it on another reactor: `refusal` */
#define IG_HAND_DETACHED_END 8u /* a detached request's answer is decided: told, freed */
#define IG_HAND_HEDGE_LOST 16u  /* the other of its race answered first (hedge_lose) */

/* Dispatch's refusal as another reactor saw it (malloc'd with its message,
 * which e.message points at), kept for the exchange's own. */
struct ig_refusal {
	struct ig_dispatch_error e;  /* type, param and code are literals */
	char message[];
};

/* The exchange: one client's call (its connection, what admission
 * decided, its answer, its reactor) and its upstream attempt (backend,
 * transfer, relay, slot). Who owns what is said part by part: a field is
 * read and written only as its part says. */
struct ig_req {
	/* 1. Fixed at creation. */
	struct ig_call call;         /* what MHD's handler calls (*con_cls) */
	const struct ig_xch_hooks *hooks; /* its maker's callbacks */
	struct ig_gw *gw;
	struct ig_rx *rx;            /* its reactor: the one whose daemon holds conn */
	struct MHD_Connection *conn;
	char request_id[80];
	char client[48];             /* the believed client's address (peer.h) */
	char peer[48];               /* the socket's peer: the client, or a proxy */
	uint64_t t_start_us;

	/* 2. Its reactor's alone: only rx's thread reads or writes these,
	 * with or without the lock (curl's and MHD's callbacks run without
	 * it: the relay). No other reactor touches conn or xfer. */
	struct ig_xfer xfer;         /* the current attempt's transfer */
	struct ig_relay relay;       /* its bytes to the client (relay.h) */
	struct ig_list link;         /* rx->reqs */
	bool suspended;              /* MHD connection suspended by us */
	struct ig_buf body;          /* the client's body (the forwarded one, once admitted;
				      * a continuation's, once continued) */
	struct ig_buf orig_body;     /* a continued stream's forwarded body, which each
				      * continuation is made from (cont.h) */
	json_t *parsed;              /* the body, parsed with the lock let go, or NULL */
	json_error_t parse_error;    /* why it did not parse */
	bool parse_done;
	bool too_large;
	bool body_done;              /* the body was read whole: admitted and dispatched */
	char *prio_body;             /* the body with "priority" (and an adapter's "lora_path") for this attempt's backend, or NULL */
	struct curl_slist *up_headers; /* headers sent upstream */
	struct curl_slist *rank_node; /* its line naming the attempt's data-parallel rank; written by: attempt */
	uint64_t bytes_in;
	uint64_t t_answer_us;        /* response handed to MHD */

	/* 3a. Under the gateway's lock, on any reactor: dispatch's callbacks,
	 * the drain and the queue's expiry run where a slot freed; another
	 * reactor writes these and posts the rest of the work (IG_HAND_*) to
	 * rx, never reading part 2 or 3b. */
	struct ig_admission adm;     /* what it is, its key, its limits (admission.h) */
	struct ig_waiter wait;       /* its place with the scheduler (dispatch.h) */
	struct ig_list post_link;    /* rx->posted: handed over by another reactor */
	unsigned post_ops;           /* IG_HAND_*, while posted */
	bool start_posted;           /* its attempt waits for its reactor to start it */
	struct ig_refusal *refusal;  /* dispatch's refusal decided on another reactor,
				      * until its own runs it (IG_HAND_REFUSED), or NULL */
	struct ig_list idem_link;    /* a reader waiting: its entry's `waiting`, which the
				      * entry's wakers walk (idem_share.c's replies too) */

	/* 3b. Under the gateway's lock, on its reactor alone (the strategies,
	 * the observers, the tick, what was posted to it). A hedge shares its
	 * primary's reactor, so the race's fields are read by one thread. */
	const struct ig_watch *answerer; /* the observer that answers it (watch.h's `answer`):
				      * set by the one that takes it, else NULL */
	const char *refused_code;    /* the code of dispatch's refusal (a literal) */
	char *fallback;              /* the model it runs on instead of its own (model_fallbacks) */
	char *cont_refused;          /* why its stream's continuation was refused */
	/* Idempotency-Key (idem.h): the entry it runs (its answer goes there)
	 * or reads (a duplicate: the runner's answer is its own). */
	struct ig_idem_entry *idem;
	bool idem_runner, idem_reader;
	bool idem_ended;             /* the runner told the entry its end */
	bool idem_asking;            /* the other gateways asked first (idem_share.h) */
	bool idem_followed;          /* meanwhile another gateway ran it (counted as joined) */
	bool detached;               /* a runner whose client left: it runs on for the
				      * entry, conn is NULL, freed at its end */
	size_t idem_off;             /* a reader's bytes of the answer sent */
	/* Hedging (try_hedge.c): a request with no byte after hedge.after_ms
	 * is sent to a second backend too, by a hedge (a detached exchange of
	 * its own, made by ig_xch_init); the first byte of either wins, the
	 * other is dropped, and a primary whose hedge won reads the hedge's
	 * answer (through its entry, as a duplicate reads its runner's).
	 * hedge_winner and hedge_lost are written at the first byte (the
	 * relay's, the lock taken for it). */
	struct ig_req *hedge;        /* the primary's hedge, while it lives */
	struct ig_req *hedge_of;     /* the hedge's primary, while it lives */
	int hedge_winner;            /* the primary's: 0 undecided, 1 it, 2 its hedge */
	bool hedge_lost;             /* it lost its race: its transfer goes, no retry */
	bool hedged;                 /* the primary was hedged, or its budget said no
				      * (once at most) */
	bool hedge_missed;           /* a hedge found no free slot (tried again later) */
	uint64_t hedge_next_ms;      /* when it may be tried again */
	bool hedge_refused;          /* a hedge or a prefill half that dispatch would not place */
	bool is_hedge;               /* it is a hedge (not counted as a request) */
	/* Prefill/decode pairs (try_pd.c): an attempt on a decode server has a
	 * prefill half, a detached exchange of its own (pd_leg; its pd_of is
	 * the exchange, while both live). SGLang's halves run at once; vLLM's
	 * decode attempt waits (pd_waiting, its slot held) for the prefill's
	 * answer and starts with its kv_transfer_params (pd_handed). */
	struct ig_req *pd_leg;
	struct ig_req *pd_of;
	bool is_pd_leg;              /* it is a prefill half (not counted as a request) */
	bool pd_waiting;
	bool pd_handed;
	int pd_pairs;                /* pairs made for it */
	uint64_t pd_start_ms;        /* the current pair's start */
	struct ig_backend *pd_prefill; /* the current (or last) pair's prefill server */
	struct ig_backend *pd_failed[IG_MAX_TRIES]; /* prefill servers that failed it */
	int pd_nfailed;
	int retries_done;
	enum ig_upstream_error last_err;
	unsigned err_status;         /* error answer decided by the gateway */
	char *err_body;
	unsigned status_sent;        /* what the client was answered */
	bool counted;                /* in the metrics and its key's usage */
	bool deadline_hit;           /* the client's deadline passed (X-Infergate-Timeout-Ms) */
	bool ttft_cut;               /* its attempt ended for timeouts.ttft_ms (no health failure) */
	/* Tracing (trace.h): its context and spans, when it went to the
	 * scheduler, its first attempt's start, the traceparent line of
	 * up_headers (rewritten per attempt). */
	struct ig_trace trace;
	uint64_t t_submit_us, t_first_attempt_us;
	struct curl_slist *tp_node;
};

/* The status a request ended with: what was sent, or the status named by
 * the error event a 200 stream carried (metrics and the access log count it
 * as that). */
static inline unsigned ig_proxy_req_status(const struct ig_req *req)
{
	return req->relay.stream_error ? req->relay.stream_error : req->status_sent;
}


/* ---- the exchange's primitives (exchange.c) ---- */

/* What every exchange (and a hedge) starts with: its lists, its hooks
 * (and through them the callbacks of its transfer, relay and waiter), this
 * reactor as its own (in rx->reqs). */
void ig_xch_init(struct ig_req *req, struct ig_gw *gw, int route_idx, unsigned method,
		 const struct ig_xch_hooks *hooks);

/* h made a detached companion of exchange p on p's reactor (a hedge, a
 * prefill half): p's model, stream, usage and prompt estimate, its id with
 * `suffix`, its client, its upstream headers but the per-attempt
 * traceparent, a fork of its trace, its class, key and model pool (held);
 * not retried (its maker decides what follows its end). Not dispatched,
 * no body. */
void ig_xch_fork(struct ig_req *h, struct ig_req *p, const char *suffix);
/* The path it goes to upstream: its own (a by-id route's), else its route's. */
const char *ig_xch_req_path(const struct ig_req *req);
/* Its MHD connection suspended (not a detached one). */
void ig_xch_suspend(struct ig_req *req);
/* Lets MHD see its connection again (posted when called on another
 * reactor; a detached exchange whose answer is decided ends). Any reactor. */
void ig_xch_resume(struct ig_req *req);
/* Hands req to its own reactor, which does `ops` (IG_HAND_*) when it wakes.
 * Any reactor. */
void ig_xch_hand_over(struct ig_req *req, unsigned ops);
/* The error answer decided by the gateway, in OpenAI's shape. */
void ig_xch_set_error(struct ig_req *req, unsigned status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* The gateway's own answer (a JSON body, taken over), sent as errors are. */
void ig_xch_set_answer(struct ig_req *req, unsigned status, char *body);
/* An error decided by admission or dispatch (type NULL: the status's). */
void ig_xch_set_decided_error(struct ig_req *req, unsigned status, const char *type, const char *param,
			      const char *code, const char *message);
/* Its attempt stopped where it is: a transfer running (or about to start
 * on its reactor) cut, its slot given back and counted as aborted at its
 * backend; a place in the queue left. Returns whether a transfer was cut.
 * Not from a curl callback. */
bool ig_xch_stop_attempt(struct ig_req *req);
/* The name of an upstream error, for messages. */
const char *ig_xch_uperr_name(enum ig_upstream_error e);

/* ---- its attempt (attempt.c) ---- */

/* Its request id: the client's X-Request-Id when it is a sane one, else new. */
void ig_attempt_request_id(struct ig_req *req);
/* The upstream headers: the client's, less hop-by-hop ones and the
 * gateway's own, with its request id, X-Forwarded-For and the backend key. */
void ig_attempt_headers(struct ig_req *req);
/* Its attempt on req->wait.backend (its slot taken) configured and started
 * on its reactor; a client gone meanwhile gives the slot back; a failure
 * to start sets its error (xfer.running says whether it runs). */
void ig_attempt_launch(struct ig_req *req);
/* How an attempt ended, from curl's result and the status. */
enum ig_upstream_error ig_attempt_classify(struct ig_req *req, CURLcode result);
/* Seconds of a Retry-After value (at most 300), 0 when none or not one. */
long ig_attempt_retry_after_s(const char *v);
/* Its end, told of its backend: failed (e: health, counters), cut by the
 * client's deadline (a 504 or a stream's error event), answered (health,
 * time to first byte, tokens; a continuation refused ends the stream). */
void ig_attempt_failed(struct ig_req *req, enum ig_upstream_error e, const char *detail, struct ig_backend *b);
void ig_attempt_deadline(struct ig_req *req, struct ig_backend *b);
void ig_attempt_answered(struct ig_req *req, struct ig_backend *b);
/* A stored Responses API answer (its object): which backend has it, in
 * the store and the cluster's (the lock taken, nested). */
void ig_attempt_stored(struct ig_req *req, json_t *response);

/* ---- prefill/decode pairs (try_pd.c) ---- */

/* Its attempt is about to start on req->wait.backend: on a decode server
 * (not a short prompt's), its prefill half is made and sent, and the body
 * given what the engine's protocol needs. Returns false when req's own
 * transfer starts now (SGLang: with the bootstrap fields; any other
 * server), true when it does not: vLLM's decode waits for the prefill
 * (pd_waiting), or no prefill server could take it (its error set, its
 * slot given back). */
bool ig_pd_launch(struct ig_req *req);
/* A prefill half's end (detached_end): its answer handed to the decode
 * (vLLM), or the pair made again with another prefill server; freed. */
void ig_pd_leg_end(struct ig_req *leg);
/* Its prefill half, if any, stopped and freed (the exchange's end). */
void ig_pd_drop_leg(struct ig_req *req);

/* ---- model fallbacks (try_fallback.c) ---- */

/* Refused for no backend up or a full queue: placed on the model's next
 * fallback its key may use (true: started or queued, X-Infergate-Fallback
 * says so); false leaves the last refusal. */
bool ig_try_fallback(struct ig_req *req);

/* ---- the answer to the client (reply.c) ---- */

/* Counts the answer in the metrics and its key's usage, once. */
void ig_xch_count_answer(struct ig_req *req);
/* Its access log line (completed: the client got all of it). */
void ig_xch_req_log(struct ig_req *req, bool completed);
/* The headers every answer carries (id, trace, fallback, limits, backend). */
struct MHD_Response;
void ig_xch_add_common_headers(struct ig_req *req, struct MHD_Response *r);
/* Relays the backend's response headers, but `skip` (NULL: none). */
void ig_xch_add_relayed_headers(struct ig_req *req, struct MHD_Response *r, const char *skip);
/* Queues r on the connection (body_len: bytes sent at once). */
enum MHD_Result ig_xch_queue_answer(struct ig_req *req, unsigned status, struct MHD_Response *r, size_t body_len);

/* ---- tracing (watch_trace.c) ---- */

/* What a request asks of a model, in the GenAI conventions' words
 * (gen_ai.operation.name), or NULL. */
const char *ig_xch_gen_ai_operation(const struct ig_req *req);

/* ---- continuation (try_continue.c) ---- */

/* A stream whose continuation was refused (no backend left, the queue, its
 * deadline) ends with an error event. */
void ig_xch_end_refused_stream(struct ig_req *req);

#endif
