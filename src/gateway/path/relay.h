/* The relay: one attempt's bytes from the backend to the client. curl's
 * header and body callbacks fill it, SSE events are read (usage, errors)
 * and rewritten where needed (a hidden usage event, an error event in
 * OpenAI's shape), and libmicrohttpd's content reader drains it, whole
 * events at a time, with back-pressure on the transfer.
 *
 * Threads and locks: a struct ig_relay is its request's reactor's alone,
 * and nothing here takes the gateway's lock or touches shared state but a
 * backend's atomics. The callbacks run with the lock let go: curl's in the
 * reactor's curl actions, the content reader inside MHD_run under the
 * response's own mutex. What needs shared state goes through `ops`, which
 * the request implements (proxy.c); `stored` takes the lock itself. The
 * reader never calls into curl: an unpause is asked of the reactor
 * (ig_upstream_unpause), which does it outside MHD, so curl's write
 * callback never runs under MHD's mutex.
 * Not here: the request's life (proxy.c), retries and continuations
 * (try_*.c), the answer's headers (reply.c). */
#ifndef IG_RELAY_H
#define IG_RELAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "fleet/backend.h"
#include "infergate/buf.h"
#include "infergate/sse.h"
#include "net/upstream.h"
#include "path/cont.h"

struct ig_relay;
struct ig_anth_stream;

/* What the relay asks of its request. */
struct ig_relay_ops {
	/* Bytes are ready for the client: resume its connection. */
	void (*wake)(struct ig_relay *r);
	/* The reader has nothing yet: suspend the connection (before the
	 * reader returns 0, or MHD spins). */
	void (*idle)(struct ig_relay *r);
	/* The first event is going out: no retry can send the request body
	 * again (the request may let it go). */
	void (*committed)(struct ig_relay *r);
	/* One SSE data event was relayed (a token done, for least-tokens). */
	void (*event)(struct ig_relay *r);
	/* A stored Responses API answer was seen (its object): remember which
	 * backend holds it. Takes the gateway's lock itself. */
	void (*stored)(struct ig_relay *r, json_t *response);
	/* With `tee`: n more bytes of the stream as the client gets them (whole
	 * events, rewritten). Takes the gateway's lock itself. */
	void (*tee)(struct ig_relay *r, const char *p, size_t n);
	/* With `race`: the first byte of a 2xx answer. Returns whether this
	 * attempt won its race with a hedge (false: the transfer is dropped).
	 * Takes the gateway's lock itself. */
	bool (*first_byte)(struct ig_relay *r);
};

struct ig_relay {
	const struct ig_relay_ops *ops;
	/* Set by the request before its first attempt. */
	int usage_where;             /* IG_USAGE_* of its route (routes.h) */
	bool responses;              /* a Responses API route (its own error events) */
	bool anthropic;              /* an Anthropic Messages route (its error event);
				      * written by: proxy, try_hedge */
	/* Anthropic's Messages translated to a chat backend (xlate.h): what
	 * the answer's translation needs (the model the client named, its
	 * stop_sequences, the prompt's tokens as counted at admission, -1 not
	 * known); written by: xlate. A stream's translator, made anew for each
	 * attempt until the first event went out (relay.c). */
	bool xlate;                  /* written by: xlate */
	char *xlate_model;           /* written by: xlate */
	json_t *xlate_stop;          /* written by: xlate */
	long xlate_input;            /* written by: xlate */
	struct ig_anth_stream *xlate_stream;
	bool stream;                 /* the client asked for "stream": true */
	bool usage_added;            /* stream_options.include_usage was added for the
				      * gateway's count: the usage event (and "usage":
				      * null members) are not relayed */
	bool store;                  /* the answer is stored by its backend: tell `stored` */
	bool tee;                    /* a stream's bytes go to `tee` too (Idempotency-Key) */
	bool race;                   /* a hedge runs: the first byte asks `first_byte` */
	bool first_seen;             /* a 2xx answer's first body byte came */
	bool detached;               /* its client left, the stream runs on for `tee`
				      * alone: what is teed is consumed */
	bool stored;                 /* told */
	/* The attempt's (ig_relay_attempt resets them). */
	struct ig_xfer *xfer;        /* its transfer (pause, upload size) */
	struct ig_backend *backend;  /* where it runs (last_io_ms) */
	long up_status;
	struct ig_buf up_headers;    /* "Name\0Value\0" pairs to relay */
	bool headers_done;
	struct ig_buf resp;          /* response body bytes not yet sent */
	size_t ready;                /* of them, those that end a whole SSE event */
	bool sse;                    /* the streamed body is text/event-stream */
	bool skip_blank;             /* the next bytes start with the blank line that
				      * ended a removed usage event */
	bool paused;                 /* the transfer is paused for back-pressure */
	struct ig_sse lines;         /* SSE lines, to find usage and error events */
	/* The request's, across attempts. */
	bool committed;              /* bytes handed to MHD: no retry */
	bool upstream_done;          /* the last attempt ended (proxy.c sets it) */
	bool upstream_failed;        /* ... with an error after commit */
	bool client_gone;            /* proxy.c sets it: stop relaying */
	uint64_t last_io_ms;         /* last byte from the backend (idle timeout) */
	uint64_t t_first_byte_us;
	uint64_t bytes_out;          /* streamed bytes handed to MHD */
	uint64_t consumed;           /* bytes taken out of resp (by MHD, or detached) */
	uint64_t teed;               /* bytes handed to `tee` */
	long prompt_tokens, completion_tokens; /* from "usage", -1 when none */
	unsigned stream_error;       /* a 200 stream that carried an error event: the
				      * status it names, 0 none */
	char *stream_error_msg;      /* its message, for the access log */
	long sse_events;             /* data lines relayed (a Responses error event
				      * numbers itself after them) */
	struct ig_cont cont;         /* what a continuation elsewhere needs (cont.h);
				      * cont.max set by the request, 0: none */
};

void ig_relay_init(struct ig_relay *r, const struct ig_relay_ops *ops);
void ig_relay_free(struct ig_relay *r);
/* A new attempt on b through x: the buffers emptied (a continuation's:
 * the whole events not yet sent kept, a torn one dropped), curl's
 * callbacks set on x->easy. */
void ig_relay_attempt(struct ig_relay *r, struct ig_xfer *x, struct ig_backend *b);
/* Whether a header (name, n bytes) is hop-by-hop, or the gateway's own to
 * set: not relayed either way. 1 or 0. */
int ig_relay_hop_by_hop(const char *name, size_t n);
/* The value of a header relayed from the backend, or NULL. */
const char *ig_relay_header(const struct ig_relay *r, const char *name);
/* A 2xx answer to a stream request: relayed as a stream. */
bool ig_relay_streaming(const struct ig_relay *r);
/* A whole (not streamed) 2xx body arrived: its usage read, and a stored
 * response told. */
void ig_relay_whole_body(struct ig_relay *r);
/* Its client left: from now on what is teed is consumed unread (and what
 * was ready already). */
void ig_relay_detach(struct ig_relay *r);
/* The stream's end: with `tee`, the bytes it had not teed yet (whatever
 * is left goes to the client now). */
void ig_relay_tee_rest(struct ig_relay *r);
/* The backend failed mid-stream: the torn event dropped, an error event in
 * the route's shape ends the stream. */
void ig_relay_fail_stream(struct ig_relay *r, const char *why);
/* libmicrohttpd's content reader (MHD_create_response_from_callback's
 * crc, cls: the relay). */
ssize_t ig_relay_read(void *cls, uint64_t pos, char *buf, size_t max);

#endif
