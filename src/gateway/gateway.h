/* The gateway process's shared state: the one `struct ig_gw` every module is
 * handed, and the deferred actions a reactor runs once per loop turn (its
 * flags). Types only: no function is declared or defined here, so including
 * this header ties a file to no module. Each module's own types live beside
 * it: the reactors and what they hand each other in rx.h, the callback
 * objects (struct ig_event, struct ig_call) in event.h, a transfer and the
 * kinds of upstream failure in upstream.h, the route table in routes.h.
 * With one reactor everything here is touched by its thread only; with
 * more, by the thread that holds gw->lock, but a reactor's library objects
 * only by their own thread (rx.h), and the backend counters the router
 * reads are atomics (backend.h).
 *
 * Calls only go down the layers, from the loops (reactor.c) through the
 * server, the request and the scheduler to the tables and rx.c at the
 * bottom; the order is declared once, in tests/check_layers.py (LAYERS),
 * which `make check` runs and which fails on a call or include up. A lower
 * layer reports back through a callback stored in the object it was handed
 * (struct ig_event, struct ig_xfer, struct ig_call) or by setting a flag
 * below that a reactor acts on. */
#ifndef IG_GATEWAY_H
#define IG_GATEWAY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "conf/conf.h"
#include "conf/peer.h"
#include "core/server.h"
#include "fleet/backend.h"
#include "infergate/list.h"
#include "keys/clients.h"
#include "keys/keyset.h"
#include "net/event.h"
#include "net/upstream.h"
#include "obs/accesslog.h"
#include "obs/stats.h"
#include "path/cont.h"
#include "path/idem.h"
#include "path/path_stats.h"
#include "sched/dispatch.h"
#include "sched/scheduler.h"

struct ig_rx;
struct ig_discovery;
struct ig_respstore;
struct ig_cluster;
struct ig_cluster_view;
struct ig_files;
struct ig_batches;
struct ig_bio;
struct ig_adapters;
struct ig_metrics_sources;
struct ig_servertls;

struct ig_gw {
	struct ig_conf *cfg;
	struct ig_fleet fleet;           /* every backend (backend.h); a model's pool is its part of it */
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
	uint64_t lock_taken;           /* times the lock was taken, */
	uint64_t lock_contended;       /* of which another reactor held it, */
	uint64_t lock_held_ns;         /* and how long it was held, in total */
	uint64_t lock_since_ns;        /* when the holder took it */
	bool threaded;                 /* nrx > 1: the lock is taken */
	size_t nrunning;               /* reactors whose loop runs */
	pthread_cond_t rx_ended;       /* nrunning fell: reactor 0, whose own loop failed,
					* waits on it to end last (reactor.c) */
	struct ig_event ev_listen, ev_signal; /* reactor 0's */
	int listen_fd;
	struct ig_event ev_admin;      /* reactor 0's: admin_listen's socket */
	int admin_fd;                  /* -1 without admin_listen */
	struct ig_event ev_self;       /* reactor 0's: the gateway's own socket, */
	int self_fd;                   /* for a batch's lines; -1 without data_dir */
	char *self_path;               /* its path */
	struct ig_servertls *tls;      /* HTTPS for clients (servertls.h), NULL for plain HTTP */
	bool accept_paused;            /* at conn_limit: the listening socket is not watched */
	long conns, conn_limit;        /* client connections open or being handed over, and the most at once */
	struct ig_peer_counts per_ip;  /* open connections by client address (max_connections_per_ip) */
	size_t next_rx;                /* where the next accepted client's reactor search starts */
	/* Deferred actions, run by a reactor at the end of its turn. */
	bool drain_pending;            /* a slot or backend freed up: start queued requests */
	bool models_dirty;             /* a backend's models, state or presence changed:
					* rebuild the per-model pools (scheduler.h) */
	struct ig_rx_job reap_job;     /* posted to reactor 0: backends marked for removal
					* leave (their probes are its transfers: admin.c) */
	size_t nreqs;                  /* live proxied requests, all reactors */
	struct ig_sched sched;         /* per-model pools and wait queues, the policy */
	struct ig_clients clients;     /* API keys' state: shares, limits, usage */
	struct ig_proxy_stats stats;     /* the request path's counters (path/path_stats.h) */
	struct ig_metrics_stats metrics; /* the finished requests' (metrics.h) */
	struct ig_server_stats server_stats; /* the client connections' (server.h) */
	struct ig_dispatch_stats dispatch_stats; /* the queues' (dispatch.h) */
	uint64_t started_ms;
	bool stopping;
	bool failed;                   /* a reactor failed (epoll_wait, or its thread did not
					 * start): all stop, the exit code is 1 */
	uint64_t stop_deadline_ms;
	struct ig_keyset api_keys, admin_keys;
	struct ig_accesslog alog;
	struct ig_discovery *discovery;  /* NULL without discover entries */
	struct ig_respstore *responses;  /* which backend holds each stored Responses API answer */
	struct ig_adapters *adapters;    /* LoRA adapters: where each is, loads (sched/adapters.h) */
	struct ig_prompts *prompts;      /* the models' tokenizers (sched/prompt.h), NULL: none;
					 * loaded at start, kept by a reload */
	struct ig_idem idem;             /* Idempotency-Key answers (idem.h) */
	struct ig_cluster *cluster;      /* the gateways it acts as one with (cluster.h), NULL alone */
	struct ig_cluster_view *cluster_view; /* what the others hold, as last learned: cluster.c
					 * swaps it whole, under the lock; read under the lock
					 * only (cluster_view.h), NULL without a cluster */
	struct ig_files *files;          /* the Files API's store, NULL when data_dir is "" */
	struct ig_batches *batches;      /* the Batch API's, the same */
	/* What modules above metrics add to /health/backends (dispatch.c sets
	 * them: the routing policy's view of each backend, and of the whole). */
	void (*report_backend)(const struct ig_gw *gw, const struct ig_backend *b, json_t *entry);
	void (*report_gateway)(const struct ig_gw *gw, json_t *obj);
	struct ig_bio *bio;              /* their disk work's thread (bio.h), the same */
	struct ig_tracer *tracer;        /* spans' exporter (trace.h), NULL without tracing */
	struct ig_metrics_sources *reports; /* what modules registered to report (metrics.h) */
	struct ig_rx_timer timers[IG_RX_MAX_TIMERS]; /* modules' periodic work (rx.h: ig_rx_every), by order */
	size_t ntimers;
	int argc;                      /* to re-read the configuration on SIGHUP */
	char **argv;
};

#endif
