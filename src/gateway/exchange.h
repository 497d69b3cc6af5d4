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

#include "proxy.h"

/* ---- the exchange (proxy.c) ---- */

/* What every exchange (and a hedge) starts with: its lists, the callbacks
 * of its transfer, relay and waiter, this reactor as its own (in rx->reqs). */
void ig_xch_init(struct ig_req *req, struct ig_gw *gw, int route_idx, unsigned method);

/* The path it goes to upstream: its own (a by-id route's), else its route's. */
const char *ig_xch_req_path(const struct ig_req *req);
/* Its spans ended, its lists left, freed. */
void ig_xch_req_free(struct ig_req *req);
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
/* An error decided by admission or dispatch (type NULL: the status's). */
void ig_xch_set_decided_error(struct ig_req *req, unsigned status, const char *type, const char *param,
			      const char *code, const char *message);
/* Its attempt stopped where it is: a transfer running (or about to start
 * on its reactor) cut, its slot given back and counted as aborted at its
 * backend; a place in the queue left. Returns whether a transfer was cut.
 * Not from a curl callback. */
bool ig_xch_stop_attempt(struct ig_req *req);
/* Admitted (body, limits), then dispatched: answered, or suspended. */
enum MHD_Result ig_xch_admit(struct ig_req *req);
/* One attempt ended (e says how): observers told, strategies asked. */
void ig_xch_end_attempt(struct ig_req *req, enum ig_upstream_error e, const char *detail);
/* The name of an upstream error, for messages. */
const char *ig_xch_uperr_name(enum ig_upstream_error e);

/* ---- the answer to the client (reply.c) ---- */

/* Queues whatever is decided (called again after each resume). */
enum MHD_Result ig_xch_respond(struct ig_req *req);
/* Counts the answer in the metrics and its key's usage, once. */
void ig_xch_count_answer(struct ig_req *req);
/* Its access log line (completed: the client got all of it). */
void ig_xch_req_log(struct ig_req *req, bool completed);
/* The headers every answer carries (id, trace, fallback, limits, backend). */
struct MHD_Response;
void ig_xch_add_common_headers(struct ig_req *req, struct MHD_Response *r);
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
