/* The request object: one proxied call, owning both halves (the client
 * connection and the upstream transfer). See proxy.c for its life;
 * docs/how-it-is-built.md (and gateway.h) for the ownership rules the
 * struct's three parts follow. */
#ifndef IG_PROXY_H
#define IG_PROXY_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "admission.h"
#include "dispatch.h"
#include "gateway.h"
#include "infergate/buf.h"
#include "relay.h"
#include "trace.h"
#include "upstream.h"

/* The request header that marks a batch's own request: "SECRET OWNER"
 * (batches.c sends it, server.c checks it). The gateway's own: a proxied
 * request never forwards it. */
#define IG_BATCH_HEADER "X-Infergate-Batch"

/* What another reactor asks of a request's own (ig_proxy_run_posted). */
#define IG_HAND_START 1u   /* start the attempt dispatch gave it */
#define IG_HAND_RESUME 2u  /* resume its connection: an answer is decided */
#define IG_HAND_END_STREAM 4u /* its stream's continuation was refused: end it (cont_refused) */
#define IG_HAND_DETACHED_END 8u /* a detached request's answer is decided: told, freed */
#define IG_HAND_HEDGE_LOST 16u  /* the other of its race answered first (hedge_lose) */

struct ig_req {
	/* 1. Fixed at creation. */
	struct ig_call call;         /* what MHD's handler calls (*con_cls) */
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
	char *prio_body;             /* the body with "priority" for this attempt's backend, or NULL */
	struct curl_slist *up_headers; /* headers sent upstream */
	uint64_t bytes_in;
	uint64_t t_answer_us;        /* response handed to MHD */

	/* 3. Under the gateway's lock (and on any reactor: dispatch's
	 * callbacks and the drain run where a slot freed). */
	struct ig_admission adm;     /* what it is, its key, its limits (admission.h) */
	struct ig_waiter wait;       /* its place with the scheduler (dispatch.h) */
	struct ig_list post_link;    /* rx->posted: handed over by another reactor */
	unsigned post_ops;           /* IG_HAND_*, while posted */
	bool start_posted;           /* its attempt waits for its reactor to start it */
	bool deadline_hit;           /* the client's deadline passed (X-Infergate-Timeout-Ms) */
	const char *refused_code;    /* the code of dispatch's refusal (a literal) */
	char *fallback;              /* the model it runs on instead of its own (model_fallbacks) */
	bool ttft_cut;               /* its attempt ended for timeouts.ttft_ms (no health failure) */
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
	struct ig_list idem_link;    /* a reader waiting: the entry's `waiting` */
	/* Hedging: a request with no byte after hedge.after_ms is sent to a
	 * second backend too, by a hedge (a detached request of its own); the
	 * first byte of either wins, the other is dropped, and a primary whose
	 * hedge won reads the hedge's answer (through its entry, as a
	 * duplicate reads its runner's). */
	struct ig_req *hedge;        /* the primary's hedge, while it lives */
	struct ig_req *hedge_of;     /* the hedge's primary, while it lives */
	int hedge_winner;            /* the primary's: 0 undecided, 1 it, 2 its hedge */
	bool hedge_lost;             /* it lost its race: its transfer goes, no retry */
	bool hedged;                 /* the primary was hedged, or its budget said no
				      * (once at most) */
	bool hedge_missed;           /* a hedge found no free slot (tried again later) */
	uint64_t hedge_next_ms;      /* when it may be tried again */
	bool hedge_refused;          /* a hedge that dispatch would not place */
	bool is_hedge;               /* it is a hedge (not counted as a request) */
	int retries_done;
	enum ig_upstream_error last_err;
	unsigned err_status;         /* error answer decided by the gateway */
	char *err_body;
	unsigned status_sent;        /* what the client was answered */
	bool counted;                /* in the metrics and its key's usage */
	/* Tracing (trace.h): its context and spans, when it went to the
	 * scheduler, its first attempt's start, the traceparent line of
	 * up_headers (rewritten per attempt). */
	struct ig_trace trace;
	uint64_t t_submit_us, t_first_attempt_us;
	struct curl_slist *tp_node;
};

/* A new request for a proxied route (method: its IG_RT_ method bit; id:
 * the stored response a BY_ID route names, idn bytes, else NULL); its call
 * (req->call) reads the body, then admits, dispatches and answers. NULL
 * when out of memory. On the reactor whose daemon holds conn. */
struct ig_req *ig_proxy_req_new(struct ig_gw *gw, struct MHD_Connection *conn, int route_idx, unsigned method,
				const char *id, size_t idn);
/* The client left or the gateway stops: abort everything, let MHD close
 * (a detached request is freed). On its reactor. */
void ig_proxy_req_client_gone(struct ig_req *req);
/* The status a request ended with: what was sent, or the status named by
 * the error event a 200 stream carried (metrics and the access log count it
 * as that). */
static inline unsigned ig_proxy_req_status(const struct ig_req *req)
{
	return req->relay.stream_error ? req->relay.stream_error : req->status_sent;
}

/* On each reactor's housekeeping tick: idle timeouts and deadlines of its
 * requests. */
void ig_proxy_tick_rx(struct ig_rx *rx, uint64_t now_ms);
/* Wakes the readers waiting for an Idempotency-Key entry (idem.h's hook,
 * set at start). Under the lock. */
struct ig_idem_entry;
void ig_proxy_idem_wake(struct ig_idem_entry *e);
/* Does what other reactors asked of rx's requests (IG_HAND_*). */
void ig_proxy_run_posted(struct ig_rx *rx);

#endif
