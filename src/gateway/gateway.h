/* The gateway process's shared state: the one `struct ig_gw` every module is
 * handed, the event sources the reactor dispatches, and the deferred actions
 * it runs once per loop turn. Types and flags only: no module's functions
 * are declared here, so including this header ties a file to no module
 * above it. With one reactor everything here is touched by its thread
 * only; with more, by the thread that holds gw->lock (struct ig_gw), but a
 * reactor's library objects only by their own (struct ig_rx), and the
 * backend counters the router reads are atomics (backend.h).
 *
 * The layers, calls only going down (README, "How it is built"):
 *   reactor.c                          the loops; owns every event source
 *   server.c  admin.c  reload.c  discover.c
 *   proxy.c                            the request object, admission, retries, SSE relay
 *   scheduler.c                        per-model pools and queues, the keys' state
 *   router.c  upstream.c  health.c  metrics.c  accesslog.c
 *   backend.c  loadreport.c  ratelimit.c  keyset.c  conf.c  rx.c  (and this header)
 * A lower layer reports back through a callback stored in the object it was
 * handed (struct ig_event, struct ig_xfer, struct ig_call) or by setting a
 * flag below that the reactor acts on. */
#ifndef IG_GATEWAY_H
#define IG_GATEWAY_H

#include <curl/curl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "accesslog.h"
#include "keyset.h"
#include "backend.h"
#include "conf.h"
#include "infergate/list.h"
#include "scheduler.h"

/* An event source of the reactor's epoll set: it carries its own handler
 * (Redis's aeFileProc, nginx's ev->handler), so the loop needs no switch
 * over kinds. */
struct ig_event {
	int fd;
	void (*handler)(struct ig_event *ev, uint32_t events);
	void *data;
};

/* epoll data for curl sockets: this bit set, the fd in the low 32 bits
 * (user-space pointers never have bit 63 set on Linux). Tagged by fd, not
 * by pointer, so an event for a socket curl closed earlier in the same
 * batch is harmless (upstream.c). */
#define IG_EV_CURL_BIT (1ull << 63)

/* What the MHD access handler calls for one connection's request: *con_cls
 * always points to one of these, embedded in the object that answers (a
 * proxied request, an admin call, or a fixed answer), so the server tells
 * objects apart by the function they carry, not by a tag. */
struct ig_gw;

struct ig_call {
	enum MHD_Result (*on_request)(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
				      const char *url, const char *method, const char *upload_data,
				      size_t *upload_data_size, void **con_cls);
	/* The connection is done with the request (MHD_OPTION_NOTIFY_COMPLETED);
	 * frees what the call owns. NULL: nothing to do. */
	void (*on_completed)(struct ig_call *call, enum MHD_RequestTerminationCode toe);
};

/* A proxied request's route (routes.h): the table is the configuration's,
 * fixed at start. */
static inline const struct ig_route *ig_gw_route(const struct ig_conf *cfg, int route)
{
	return &cfg->routes.v[route >= 0 && (size_t)route < cfg->routes.n ? route : 0];
}
static inline const char *ig_route_path(const struct ig_conf *cfg, int route)
{
	return route >= 0 && (size_t)route < cfg->routes.n ? cfg->routes.v[route].path : "";
}
/* The first routes (chat, completions, embeddings in the built-in table)
 * show their metrics series before any request. */
#define IG_ROUTES_SHOWN 3

/* Latency histogram (Prometheus style: cumulative when printed). */
#define IG_HIST_BUCKETS 16
struct ig_metrics_hist {
	uint64_t counts[IG_HIST_BUCKETS + 1]; /* last one: above every bound */
	double sum;
	uint64_t n;
};

/* Requests by route, status and backend: a short list (a few dozen
 * combinations in practice), searched linearly. */
struct ig_reqcount {
	int route;          /* index for ig_route_path */
	unsigned status;
	char *backend;      /* URL, or "" when no backend answered */
	uint64_t n;
};

/* Kinds of upstream failure (upstream.c classifies, proxy.c and health.c
 * count them). */
enum ig_upstream_error {
	IG_UPERR_NONE,
	IG_UPERR_CONNECT, /* refused, unreachable, connect timeout */
	IG_UPERR_RESET,   /* connection closed or reset mid-transfer */
	IG_UPERR_TIMEOUT, /* no byte for timeouts.idle_s */
	IG_UPERR_STATUS,  /* 502, 503 or 504 from the backend */
	IG_UPERR_OTHER,
};

/* Counters written where things happen, printed by metrics.c. */
struct ig_stats {
	struct ig_metrics_hist duration[IG_MAX_ROUTES];   /* whole request */
	struct ig_metrics_hist ttfb[IG_MAX_ROUTES];       /* streams: first byte */
	struct ig_metrics_hist queue_wait[IG_NCLASSES]; /* time waited, per class */
	struct ig_reqcount *counts;
	size_t ncounts;
	uint64_t responses[6];      /* by status class 1xx..5xx, index status/100 */
	uint64_t retries;
	uint64_t client_aborts;
	uint64_t queue_rejected;    /* 429 */
	uint64_t queue_timeouts;    /* 503 after waiting */
	uint64_t stream_errors;     /* 200 streams that carried an error event */
	uint64_t upstream_errors[IG_UPERR_OTHER + 1];
	uint64_t prompt_tokens, completion_tokens;
};

struct ig_discovery;
struct ig_affinity;
struct ig_respstore;
struct ig_files;
struct ig_batches;
struct ig_bio;
struct ig_metrics_sources;

/* One libmicrohttpd daemon and the client connections given to it
 * (server.c). MHD walks all of a daemon's suspended connections whenever
 * one is resumed; with every held stream suspended between its events,
 * that walk was three quarters of the gateway's CPU at 4,000 streams. So
 * a daemon takes new connections until it holds IG_HTTPD_FILL, then the
 * next one does: a walk is never longer than that, and a light load still
 * lives in one daemon, run once a turn for all its connections. Only the
 * daemons with work run in a turn. */
#define IG_HTTPD_SHARDS 256
#define IG_HTTPD_FILL 64
#define IG_HTTPD_TRAIL 3        /* turns a daemon still runs after it had work */
struct ig_rx;
struct ig_httpd {
	struct MHD_Daemon *mhd;
	struct ig_event ev;            /* the daemon's epoll fd; data: its reactor */
	long conns;                    /* client connections it holds */
	bool due;                      /* has events or resumed connections: MHD_run it */
	int trail;                     /* turns it still runs after it last had work (ig_server_run) */
};

/* A client socket reactor 0 accepted for another. */
struct ig_newfd {
	int fd;
	socklen_t len;
	struct sockaddr_storage addr;
};

/* One reactor: a thread with its own epoll set, libmicrohttpd daemons and
 * curl multi handle, and the requests whose client connection it holds
 * (reactor.c). A library object (an MHD daemon or connection, the multi
 * and the transfers in it) is only ever touched by its reactor's thread;
 * another reactor that must act on one (start a queued request it
 * dispatched, answer one whose wait expired) hands the request over
 * through `posted`. The control plane (health probes, discovery, signals,
 * the admin and Batch APIs) lives on reactor 0. */
struct ig_rx {
	struct ig_gw *gw;
	pthread_t thread;
	bool started;                  /* its thread runs (reactors 1..) */
	int epfd;
	struct ig_event ev_tick, ev_wake;
	bool tick_due;                 /* its housekeeping timer fired this turn */
	bool woken;                    /* ev_wake was written and not yet read */
	uint64_t curl_deadline_us;     /* when curl wants its timeout action */
	uint32_t *curl_fds;            /* upstream.c: epoll state of curl sockets, by fd */
	size_t ncurl_fds;
	CURL **easy_free;              /* reset easy handles kept for reuse */
	size_t neasy_free;
	CURLM *multi;
	struct ig_httpd httpd[IG_HTTPD_SHARDS];
	size_t nhttpd;                 /* daemons started (as the connections need them) */
	long conns;                    /* client connections its daemons hold */
	uint64_t closed;               /* of them, closed in total */
	bool httpd_due;                /* some httpd[].due is set */
	bool httpd_trail;              /* some httpd[].trail is set */
	struct ig_list reqs;           /* its live proxied requests (struct ig_req) */
	struct ig_list to_watch;       /* requests suspended without a hang-up watch, oldest first */
	uint64_t next_idle_scan_ms;
	uint64_t next_watch_scan_ms;
	/* Handed over by other reactors (under the gateway's lock): */
	struct ig_list posted;         /* requests to start or resume (proxy.c) */
	struct ig_list jobs;           /* calls another reactor waits on (ig_rx_call) */
	struct ig_newfd *newfds;       /* accepted client sockets for its daemons */
	size_t nnewfds, capnewfds;
	uint64_t accepted;             /* client connections it was given, in total */
	uint64_t requests;             /* proxied requests it received, in total (all
					* reactors' together: the gateway's count) */
};

struct ig_gw {
	struct ig_conf *cfg;
	struct ig_pool pool;
	/* The reactors; rx[0] runs on the main thread. With more than one,
	 * everything below (and what it points to) is shared: a reactor holds
	 * `lock` whenever it runs the gateway's code, and lets go of it only
	 * while it waits for events and while libmicrohttpd or libcurl do
	 * their I/O; their callbacks that reach shared state take it again
	 * (rx.h: ig_gw_lock), those that touch only a request its reactor
	 * owns do not (proxy.c: on_header). */
	struct ig_rx *rx;
	size_t nrx;
	pthread_mutex_t lock;
	pthread_cond_t job_done;       /* an ig_rx_call finished */
	uint64_t lock_taken;           /* times the lock was taken, */
	uint64_t lock_contended;       /* of which another reactor held it, */
	uint64_t lock_held_ns;         /* and how long it was held, in total */
	uint64_t lock_since_ns;        /* when the holder took it */
	bool threaded;                 /* nrx > 1: the lock is taken */
	size_t nrunning;               /* reactors whose loop runs */
	struct ig_event ev_listen, ev_signal; /* reactor 0's */
	int listen_fd;
	bool accept_paused;            /* at conn_limit: the listening socket is not watched */
	long conns, conn_limit;        /* client connections open or being handed over, and the most at once */
	size_t next_rx;                /* where the next accepted client's reactor search starts */
	/* Deferred actions, run by a reactor at the end of its turn. */
	bool drain_pending;            /* a slot or backend freed up: start queued requests */
	bool models_dirty;             /* a backend's models, state or presence changed:
					* rebuild the per-model pools (scheduler.h) */
	size_t nreqs;                  /* live proxied requests, all reactors */
	struct ig_sched sched;         /* per-model pools and wait queues */
	size_t qlen;                   /* requests waiting, all models */
	uint64_t dispatched;            /* requests sent to a backend (first attempts) */
	long class_inflight[IG_NCLASSES];
	struct ig_stats stats;
	uint64_t started_ms;
	bool stopping;
	bool failed;                   /* a reactor failed (epoll_wait, or its thread did not
					 * start): all stop, the exit code is 1 */
	uint64_t stop_deadline_ms;
	struct ig_keyset api_keys, admin_keys;
	struct ig_accesslog alog;
	struct ig_discovery *discovery;  /* NULL without discover entries */
	struct ig_affinity *affinity;    /* cache-aware: prefixes sent to each backend */
	struct ig_respstore *responses;  /* which backend holds each stored Responses API answer */
	struct ig_files *files;          /* the Files API's store, NULL when data_dir is "" */
	struct ig_batches *batches;      /* the Batch API's, the same */
	struct ig_bio *bio;              /* their disk work's thread (bio.h), the same */
	struct ig_metrics_sources *reports; /* what modules registered to report (metrics.h) */
	int argc;                      /* to re-read the configuration on SIGHUP */
	char **argv;
};

/* The control plane's reactor: health probes, discovery, the Batch API's
 * transfers, signals. */
static inline struct ig_rx *ig_gw_home(struct ig_gw *gw)
{
	return &gw->rx[0];
}

/* Adds / removes an event source to / from the reactor's epoll set.
 * Returns 0 or -1 (errno set). */
static inline int ig_event_add(struct ig_rx *rx, struct ig_event *ev, uint32_t events)
{
	struct epoll_event e = {.events = events, .data.ptr = ev};
	return epoll_ctl(rx->epfd, EPOLL_CTL_ADD, ev->fd, &e);
}

static inline void ig_event_del(struct ig_rx *rx, struct ig_event *ev)
{
	epoll_ctl(rx->epfd, EPOLL_CTL_DEL, ev->fd, NULL);
}

/* Daemon h runs this turn (the reactor calls server.c's ig_server_run). */
static inline void ig_httpd_due(struct ig_rx *rx, struct ig_httpd *h)
{
	h->due = true;
	rx->httpd_due = true;
}

/* conn, one of rx's, was resumed: MHD handles it in its daemon's next
 * run, this turn. */
static inline void ig_httpd_resumed(struct ig_rx *rx, struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_DAEMON);
	for (size_t i = 0; i < rx->nhttpd; i++)
		if (!ci || rx->httpd[i].mhd == ci->daemon)
			ig_httpd_due(rx, &rx->httpd[i]);
}

#endif
