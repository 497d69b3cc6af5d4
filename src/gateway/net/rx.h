/* What a reactor is (struct ig_rx: its epoll set, daemons, multi handle
 * and requests) and what the reactors share and hand each other: the
 * gateway's lock, a wake-up, and the work one posts to another. The lowest
 * layer of the gateway: it calls nothing above it. The loops themselves
 * are reactor.c's. */
#ifndef IG_RX_H
#define IG_RX_H

#include <curl/curl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "gateway.h"
#include "infergate/list.h"
#include "infergate/util.h"
#include "net/event.h"

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
/* Which door a daemon's connections came in by (server.c): the listen
 * address (HTTPS with server_tls), admin_listen's (the same), or the
 * gateway's own socket for a batch's lines (plain HTTP on a Unix socket
 * only its user may open: batches_run.c). */
enum ig_door { IG_DOOR_PUBLIC, IG_DOOR_ADMIN, IG_DOOR_INTERNAL };

struct ig_httpd {
	struct MHD_Daemon *mhd;
	enum ig_door door;
	struct ig_event ev;            /* the daemon's epoll fd; data: its reactor */
	long conns;                    /* client connections it holds */
	bool due;                      /* has events or resumed connections: MHD_run it */
	int trail;                     /* turns it still runs after it last had work (ig_server_run) */
};

/* A client socket reactor 0 accepted for another. */
struct ig_newfd {
	int fd;
	enum ig_door door;
	bool counted;                  /* in gw->per_ip (max_connections_per_ip), under its address */
	socklen_t len;
	struct sockaddr_storage addr;
};

/* One reactor: a thread with its own epoll set, libmicrohttpd daemons and
 * curl multi handle, and the requests whose client connection it holds
 * (reactor.c). A library object (an MHD daemon or connection, the multi
 * and the transfers in it) is only ever touched by its reactor's thread;
 * another reactor that must act on one (start a queued request it
 * dispatched, answer one whose wait expired) hands the request over
 * through `posted`, or posts a job (`jobs`, ig_rx_post) that the owner
 * runs. The control plane (health probes, discovery, signals, the Batch
 * API's transfers) lives on reactor 0; every client call, admin and Batch
 * API calls too, is answered by the reactor that holds its connection. */
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
	/* Its client connections waiting for a request head (server.c), each
	 * list oldest first: `heads` since their deadline started, `kept`
	 * kept alive after an answer, the next request's first byte not seen. */
	struct ig_list heads, kept;
	struct ig_list unwatched;      /* connections not yet watched for a hang-up, oldest first */
	struct ig_list pokes;          /* clients that hung up, their sockets to shut after MHD's run */
	void *adding;                  /* the connection MHD_add_connection is taking (server.c) */
	uint64_t next_idle_scan_ms;
	/* Handed over by other reactors (under the gateway's lock): */
	struct ig_list posted;         /* requests to start or resume (proxy.c) */
	struct ig_list jobs;           /* work posted to it (struct ig_rx_job), nobody waiting */
	/* Its own (upstream.c): */
	struct ig_list unpause;        /* paused transfers to go on, before it next waits */
	struct ig_newfd *newfds;       /* accepted client sockets for its daemons */
	size_t nnewfds, capnewfds;
	uint64_t accepted;             /* client connections it was given, in total */
	uint64_t requests;             /* proxied requests it received, in total (all
					* reactors' together: the gateway's count) */
	uint64_t timer_last[IG_RX_MAX_TIMERS]; /* when each of gw->timers last ran here */
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


/* The reactor this thread runs (NULL on other threads: discovery's
 * resolver). */
extern __thread struct ig_rx *ig_rx_self;
/* How deep this thread is in ig_gw_lock (the lock is held when > 0). */
extern __thread int ig_lock_depth;

/* The lock itself, counted (for /metrics: how often it was taken, how
 * often another reactor held it, how long it was held): only with more
 * than one reactor. */
static inline void ig_gw_lock_take(struct ig_gw *gw)
{
	if (pthread_mutex_trylock(&gw->lock) != 0) {
		pthread_mutex_lock(&gw->lock);
		gw->lock_contended++;
	}
	gw->lock_taken++;
	gw->lock_since_ns = ig_now_ns();
}
static inline void ig_gw_lock_give(struct ig_gw *gw)
{
	gw->lock_held_ns += ig_now_ns() - gw->lock_since_ns;
	pthread_mutex_unlock(&gw->lock);
}

/* Takes / lets go of the gateway's lock, nested: a callback that libcurl
 * or libmicrohttpd makes while our code holds it (MHD_add_connection calls
 * the connection callback) takes it again without blocking. Nothing with
 * one reactor. */
static inline void ig_gw_lock(struct ig_gw *gw)
{
	if (gw->threaded && ig_lock_depth++ == 0)
		ig_gw_lock_take(gw);
}
static inline void ig_gw_unlock(struct ig_gw *gw)
{
	if (gw->threaded && --ig_lock_depth == 0)
		ig_gw_lock_give(gw);
}
/* Around a library call that does I/O (MHD_run, curl_multi_socket_action,
 * epoll_wait): the lock is let go entirely and taken back after. */
static inline int ig_gw_release(struct ig_gw *gw)
{
	int depth = ig_lock_depth;
	if (gw->threaded && depth > 0) {
		ig_lock_depth = 0;
		ig_gw_lock_give(gw);
	}
	return depth;
}
static inline void ig_gw_reacquire(struct ig_gw *gw, int depth)
{
	if (gw->threaded && depth > 0) {
		ig_gw_lock_take(gw);
		ig_lock_depth = depth;
	}
}

/* Wakes rx from its epoll_wait: its posted lists or new sockets have
 * something (under the lock). Nothing when rx is this thread's. */
void ig_rx_wake(struct ig_rx *rx);

/* Posts job (its `run` set) to reactor rx, under the lock: rx runs it at
 * the end of its turn (this one, when rx is this thread's), on its own
 * thread, with the lock held. Nothing when the job is posted already: one
 * run does the work of every post before it. The job stays valid until it
 * has run or is taken back. */
void ig_rx_post(struct ig_rx *rx, struct ig_rx_job *job);
/* Takes a posted job back before it ran (its object is going away);
 * nothing when it is not posted. Under the lock. */
void ig_rx_unpost(struct ig_rx_job *job);
/* Reactor rx runs the jobs posted to it (its loop, under the lock). */
void ig_rx_run_jobs(struct ig_rx *rx);

/* The housekeeping tick of every reactor (a timerfd): the finest period
 * of a timer but 0. */
#define IG_RX_TICK_MS 20

/* Where a module's timer runs among the others of a turn (lower first):
 * the order the reactor's turn has always had, which the modules' effects
 * rely on (the queues expire after the probes' verdicts, the connections
 * are woken last). */
enum ig_rx_order {
	IG_RX_ORDER_CLUSTER = 10,     /* each turn: Redis's events, the outbox (cluster.c) */
	IG_RX_ORDER_PROXY = 20,       /* stalled transfers, deadlines (proxy.c) */
	IG_RX_ORDER_SERVER = 30,      /* client connections' deadlines (server.c) */
	IG_RX_ORDER_HEALTH = 40,      /* probes (health.c) */
	IG_RX_ORDER_ADAPTERS = 45,    /* LoRA adapters' loads and unloads started (sched/adapters.c) */
	IG_RX_ORDER_IDEM_SHARE = 50,  /* shared Idempotency-Keys (idem_share.c) */
	IG_RX_ORDER_DISPATCH = 60,    /* queue timeouts, then a drain (dispatch.c) */
	IG_RX_ORDER_BATCHES = 70,     /* the Batch API (batches.c) */
	IG_RX_ORDER_REAP = 80,        /* removed backends leave (health.c) */
	IG_RX_ORDER_METRICS = 90,     /* the status page's history (metrics.c) */
	IG_RX_ORDER_WAKE = 100,       /* connections woken, accept resumed (server.c) */
};

/* Registers periodic work: fn(rx, now, arg) on reactor 0 (IG_RX_HOME) or
 * on each (IG_RX_EACH), every loop turn (period_ms 0), every tick
 * (IG_RX_TICK_MS or less) or once period_ms have passed since it last ran
 * there; with the gateway's lock held, after the work posted to the turn.
 * At boot, before the reactors run (the modules' inits). Returns 0, or -1
 * when IG_RX_MAX_TIMERS are registered (logged). */
int ig_rx_every(struct ig_gw *gw, enum ig_rx_which which, unsigned period_ms, int order, ig_rx_timer_fn fn,
		void *arg);
/* Runs rx's due timers in their order: those of every turn, and the
 * others when `tick` (the tick fired this turn). */
void ig_rx_run_timers(struct ig_rx *rx, uint64_t now_ms, bool tick);

#endif
