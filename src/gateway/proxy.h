/* The request object: one proxied call, owning both halves (the client
 * connection and the upstream transfer), and the queue of requests waiting
 * for a backend slot. See proxy.c for its life. */
#ifndef IG_PROXY_H
#define IG_PROXY_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "gateway.h"
#include "infergate/buf.h"
#include "infergate/sse.h"
#include "upstream.h"

#define IG_MAX_TRIES 21 /* retries <= 20, plus the first attempt */

enum ig_req_phase {
	IG_REQ_READING,  /* receiving the client body */
	IG_REQ_QUEUED,   /* waiting for a backend slot */
	IG_REQ_UPSTREAM, /* transfer running */
	IG_REQ_FINISHED, /* answer decided (response or error) */
};

/* What another reactor asks of a request's own (ig_proxy_run_posted). */
#define IG_POST_START 1u   /* start the transfer its drain set up */
#define IG_POST_RESUME 2u  /* resume its connection: an answer is decided */

struct ig_req {
	struct ig_call call;         /* what MHD's handler calls (*con_cls) */
	struct ig_xfer xfer;         /* the upstream transfer of the current attempt */
	struct ig_gw *gw;
	struct ig_rx *rx;            /* its reactor: the one whose daemon holds conn;
				      * only its thread touches conn and xfer */
	struct ig_list post_link;    /* rx->posted: handed over by another reactor */
	unsigned post_ops;           /* IG_POST_*, while posted */
	bool start_posted;           /* its transfer is set up (slot taken) and
				      * waits for its reactor to start it */
	struct MHD_Connection *conn;
	struct ig_list link;         /* rx->reqs: its reactor's live requests */
	struct ig_list watch_link;   /* rx->to_watch: suspended, not yet watched for a hang-up */
	struct ig_waiter wait;       /* its class and key (held: whose share it
				      * counts against; the client's key, or the
				      * one shared key with scheduling fifo), and
				      * its place in m's queues when QUEUED */
	char key_id[65];             /* the hex SHA-256 of its bearer key, "" none
				      * (server.c sets it) */
	struct ig_key *key;          /* the client's key (held): limits, usage */
	long tok_estimate;           /* its work in tokens (prompt estimate and output
				      * asked for): its key's tpm charge, and its
				      * weight with least-tokens */
	long work_left;              /* least-tokens: of it, counted on its backend
				      * now (less the events relayed) */
	uint64_t t_attempt_us;       /* the current attempt's start */
	uint64_t *chain;             /* cache-aware: its prompt's block hashes */
	size_t nchain;
	long tok_charge;             /* what it was charged (admitted), 0 none */
	bool tok_settled;            /* the charge was corrected by the usage */
	bool rl_shown;               /* rl_* below are set */
	long rl_req_left, rl_tok_left; /* its key's buckets when it was admitted */
	uint64_t rl_req_reset_ms, rl_tok_reset_ms;
	uint64_t retry_after_ms;     /* a rate-limit 429: when to come back */
	bool usage_added;            /* stream_options.include_usage was added for
				      * the gateway's count: the usage chunk (and
				      * "usage": null members) are not relayed */
	bool skip_blank;             /* the next body bytes start with the blank
				      * line that ended a removed usage event */
	enum ig_req_phase phase;
	int route_idx;               /* its route (routes.h) */
	unsigned method;             /* IG_RT_POST, _PUT, _GET or _DELETE */
	char *resp_id;               /* a BY_ID route: the stored response it names */
	char *up_path;               /* the path (and query) sent upstream */
	struct ig_buf body;
	json_t *parsed;              /* the body, parsed before start() (lock let go), or NULL */
	json_error_t parse_error;    /* why it did not parse, when parse_done and !parsed */
	bool parse_done;
	bool too_large;
	bool stream;                 /* client asked for "stream": true */
	bool suspended;              /* MHD connection suspended by us */
	bool committed;              /* response bytes handed to MHD: no retry */
	bool upstream_done;
	bool upstream_failed;        /* ended with an error after commit */
	bool sse;                    /* the streamed body is text/event-stream */
	size_t ready;                /* pending resp bytes that end a whole SSE event */
	bool client_gone;
	bool paused;                 /* curl transfer paused for back-pressure */
	bool watching;               /* client fd in our epoll for hang-up */
	char request_id[80];
	char client[48];
	char *model;                 /* the served name (an alias resolved) */
	char *alias;                 /* the client's name when it was an alias */
	struct ig_model *m;          /* its model's pool and queue (held) */
	uint64_t queued_ms;          /* when it last entered the queue, 0 never */
	uint64_t queue_wait_ms;      /* time spent waiting, in total */
	bool was_queued;
	uint64_t dispatch_seq;       /* its first attempt was the gateway's n-th sent, 0 none */
	long max_tokens;
	struct curl_slist *up_headers;  /* headers sent upstream */
	char *prio_body;                /* the body with "priority" for a backend with
					 * priority_field (this attempt's), or NULL */
	struct ig_backend *backend;     /* current attempt */
	struct ig_backend *tried[IG_MAX_TRIES];
	int ntried;
	int retries_done;
	long up_status;
	struct ig_buf up_resp_headers;  /* "Name\0Value\0" pairs to relay */
	bool headers_done;
	struct ig_buf resp;             /* response body bytes not yet sent */
	unsigned err_status;            /* error answer decided by the gateway */
	char *err_body;
	enum ig_upstream_error last_err;
	uint64_t t_start_us, t_first_byte_us;
	uint64_t last_io_ms;            /* last byte from the backend (idle timeout) */
	uint64_t suspended_at_ms;       /* when it was last suspended */
	struct ig_sse sse_lines;        /* SSE lines, to find usage and error events */
	long prompt_tokens, completion_tokens; /* from "usage", -1 when none */
	unsigned stream_error;          /* a 200 stream that carried an error event:
					 * the status it names (counted and logged
					 * as that), 0 when none */
	char *stream_error_msg;         /* its message, for the access log */
	long sse_events;                /* data lines relayed (a Responses error event numbers itself after them) */
	/* the Responses API */
	char *prev_id;                  /* previous_response_id, or NULL */
	int pinned;                     /* 1 + the id of the backend that holds it; 0 none */
	bool store;                     /* the answer is stored by its backend: remember where */
	bool stored;                    /* its id is remembered */
	unsigned status_sent;           /* what the client was answered */
	bool counted;                   /* in the metrics and its key's usage (count_answer) */
	uint64_t bytes_in;              /* the body the client sent */
	uint64_t bytes_out;
	uint64_t t_answer_us;           /* response handed to MHD */
	struct ig_event client_ev;      /* hang-up watch on the client's socket */
};

/* A new request for a proxied route (method: its IG_RT_ method bit; id:
 * the stored response a BY_ID route names, idn bytes, else NULL); its call (req->call) reads the body,
 * then validates, routes and answers. NULL when out of memory. */
struct ig_req *ig_proxy_req_new(struct ig_gw *gw, struct MHD_Connection *conn, int route_idx, unsigned method,
				const char *id, size_t idn);
/* The client left or the gateway stops: abort everything, let MHD close. */
void ig_proxy_req_client_gone(struct ig_req *req);
/* The status a request ended with: what was sent, or the status named by
 * the error event a 200 stream carried (metrics and the access log count it
 * as that). */
static inline unsigned ig_proxy_req_status(const struct ig_req *req)
{
	return req->stream_error ? req->stream_error : req->status_sent;
}

/* On each reactor's housekeeping tick: idle timeouts and hang-up watches
 * of its requests. */
void ig_proxy_tick_rx(struct ig_rx *rx, uint64_t now_ms);
/* On reactor 0's tick: queue deadlines (and a drain), all reactors'. */
void ig_proxy_tick(struct ig_gw *gw, uint64_t now_ms);
/* Does what other reactors asked of rx's requests (IG_POST_*). */
void ig_proxy_run_posted(struct ig_rx *rx);
/* Starts queued requests while backends have slots. */
void ig_proxy_drain_queue(struct ig_gw *gw);

#endif
