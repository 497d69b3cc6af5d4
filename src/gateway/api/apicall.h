/* The part every call that answers an API request by itself shares (the
 * Files API's and the Batch API's calls: struct ig_call, event.h): its
 * connection and the reactor holding it, who asked and what, and the life
 * of a call whose answer waits for work on a background thread: the
 * connection suspended meanwhile, resumed when a job ends, the call freed
 * by whichever of "MHD is done" and "the last job ended" comes second.
 * Not for proxied requests (proxy.h), which have their own life.
 *
 * Threads: all on the reactor holding the connection (rx), the jobs'
 * `done` included (bio.h posts them there). */
#ifndef IG_APICALL_H
#define IG_APICALL_H

#include <microhttpd.h>
#include <stdbool.h>

#include "net/event.h"

struct ig_gw;
struct ig_rx;

struct ig_api_call {
	struct ig_call call;          /* what MHD's handler calls (*con_cls) */
	struct ig_gw *gw;
	struct MHD_Connection *conn;  /* NULL once MHD is done with it (gone) */
	struct ig_rx *rx;             /* the reactor holding the connection */
	char owner[65];               /* the API key's digest, hex; "" without keys */
	char method[8];
	char url[200];
	int jobs;                     /* its jobs on a background thread (the call lives until 0) */
	bool suspended;               /* the connection waits (MHD_suspend_connection) */
	bool gone;                    /* MHD completed the request */
};

/* c for one request on conn, answered through ops (its on_request and
 * on_completed), on the calling reactor (the control plane's when not on
 * one: the tests). Longer method, url or owner strings are cut. */
void ig_api_call_init(struct ig_api_call *c, struct ig_call ops, struct ig_gw *gw, struct MHD_Connection *conn,
		      const char *url, const char *method, const char *owner);

/* A job starts for c (its `done` will call ig_api_call_job_done). */
static inline void ig_api_call_job(struct ig_api_call *c)
{
	c->jobs++;
}

/* The connection waits for a job: MHD calls the handler again once it is
 * resumed. */
void ig_api_call_suspend(struct ig_api_call *c);

/* One of c's jobs ended. Returns true when c must be freed now (its client
 * left and no job is left); else, when the connection waits and resume is
 * true, resumes it (the handler runs again, to go on or to answer). */
bool ig_api_call_job_done(struct ig_api_call *c, bool resume);

/* MHD is done with c's request (its on_completed): the connection is
 * forgotten. Returns true when c must be freed now (no job runs). */
bool ig_api_call_completed(struct ig_api_call *c);

#endif
