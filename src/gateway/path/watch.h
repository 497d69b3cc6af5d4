/* Observers of an exchange (as HAProxy's filters, flt_ops): each watches
 * the exchange's events through a table of ops and may keep state of its
 * own in the exchange (its marked fields in struct ig_req). They are told
 * in the order of ig_watches (proxy.c); a new observer is one file
 * (watch_NAME.c) and one row. An observer does not start or stop attempts
 * (strategies do: strategy.h); one may answer the exchange itself
 * (Idempotency-Key's duplicate reads the first one's answer).
 *
 * Every op runs on the exchange's own reactor, under the gateway's lock.
 * NULL ops are skipped. */
#ifndef IG_WATCH_H
#define IG_WATCH_H

#include <stdbool.h>

#include "infergate/httpd.h"
#include "net/upstream.h"
#include "path/exchange.h"

struct ig_req;
struct ig_backend;

struct ig_watch {
	const char *name;
	/* The body is read, the request id known: before admission. */
	void (*on_begin)(struct ig_req *req);
	/* Classified (its key known): 0 it goes on to admission; else the
	 * exchange is answered now or waits (ig_xch_respond decides: an error
	 * set, or `answer` takes it). The first non-zero stops the list. */
	int (*on_admit)(struct ig_req *req);
	/* An attempt on b is configured, about to start. */
	void (*on_attempt_start)(struct ig_req *req, struct ig_backend *b);
	/* An attempt ended (e: how; detail: why, or NULL). */
	void (*on_attempt_end)(struct ig_req *req, enum ig_upstream_error e, const char *detail);
	/* Whether it answers the exchange itself, *ret MHD's: asked first,
	 * after every resume, of the observer that took the exchange (set
	 * itself as req->answerer: a duplicate, its keys asked elsewhere). */
	bool (*answer)(struct ig_req *req, enum MHD_Result *ret);
	/* The answer is decided (or may be: a stream at its end): once it is,
	 * each op is told once at least. */
	void (*on_decided)(struct ig_req *req);
	/* The exchange ends: freed after this. */
	void (*on_done)(struct ig_req *req);
};

/* The observers, in the order they are told; NULL-terminated (proxy.c). */
extern const struct ig_watch *const ig_watches[];

extern const struct ig_watch ig_watch_trace; /* watch_trace.c */
extern const struct ig_watch ig_watch_idem;  /* watch_idem.c */

/* Idempotency-Key's hooks outside the table (watch_idem.c): a runner's
 * stream bytes (the relay's tee, the lock let go: taken here); its status
 * and type once a stream commits (the lock let go: taken here); whether a
 * runner whose client left runs on for its entry. */
void ig_watch_idem_tee(struct ig_req *req, const char *p, size_t n);
void ig_watch_idem_committed(struct ig_req *req);
static inline bool ig_watch_idem_runs_on(const struct ig_req *req)
{
	return req->idem_runner && !req->idem_ended;
}
/* Its client left while it ran: a runner runs on, its answer going to its
 * entry alone (conn NULL, freed at its end). */
void ig_watch_idem_detach(struct ig_req *req);

#endif
