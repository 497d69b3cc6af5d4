/* The reactors: `workers` epoll loops, each a thread (reactor 0 on the
 * main thread), each driving its own libmicrohttpd daemons (external mode,
 * each daemon's epoll fd added to the reactor's: server.c) and its own
 * libcurl multi handle (multi_socket_action, its timer as the loop's
 * timeout), plus a housekeeping tick and the event sources other modules
 * add (every client socket's hang-up watch: server.c), each with its handler.
 * Reactor 0 also has the listening socket (it hands each new client to the
 * reactor with the fewest), the signals, discovery's eventfd, and the
 * control plane's work on its tick: health probes, queue deadlines, the
 * Batch API's runner.
 * Every MHD and curl call for an object happens on its reactor's thread.
 * The gateway's own state is shared and guarded by one lock, which a
 * reactor holds while our code runs and lets go of while it waits and
 * while the libraries do their I/O (rx.h: ig_gw_lock); with one
 * reactor there is no lock at all (see STYLE.md, "Concurrency model").
 * The top of the gateway's layers but the bootstrap (boot.c, which sets
 * the loops up through ig_reactor_new/open): it calls down into every
 * module and none calls it; they ask for deferred work through gw's and
 * rx's flags and jobs, done here at the end of a turn.
 * Not here: setting up the process (boot.c), what a request does
 * (proxy.c) or how MHD callbacks answer (server.c). */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "api/batches.h"
#include "cluster/cluster.h"
#include "core/notify.h"
#include "core/reactor.h"
#include "core/reload.h"
#include "core/server.h"
#include "fleet/health.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/bio.h"
#include "net/rx.h"
#include "net/upstream.h"
#include "obs/stats.h"
#include "path/idem_share.h"
#include "path/proxy.h"
#include "sched/dispatch.h"


static void on_signal(struct ig_event *ev, uint32_t events);

/* A reactor's housekeeping timer: its work runs after the events of the turn. */
static void on_tick(struct ig_event *ev, uint32_t events IG_UNUSED)
{
	struct ig_rx *rx = ev->data;
	uint64_t junk;
	if (read(ev->fd, &junk, sizeof(junk)) < 0 && errno != EAGAIN)
		ig_log_warn("%s: timerfd read: %s", __func__, strerror(errno));
	rx->tick_due = true;
}

/* Another reactor handed this one something or posted it a job (rx.c):
 * it is done at the end of the turn (deferred). */
static void on_wake(struct ig_event *ev, uint32_t events IG_UNUSED)
{
	struct ig_rx *rx = ev->data;
	uint64_t junk;
	if (read(ev->fd, &junk, sizeof(junk)) < 0 && errno != EAGAIN)
		ig_log_warn("%s: eventfd read: %s", __func__, strerror(errno));
	rx->woken = false;
}

/* The number of reactors: `workers`, or (0) one per core the process may
 * run on but one, at least one and at most IG_AUTO_WORKERS. One core is
 * left to the kernel's network stack and the processes beside the
 * gateway: on two cores shared with its load, a second reactor gave
 * 0.87-0.89x the req/s of one and 1.6x its p99 (bench/proxy.py). And every
 * reactor holds the shared lock for about a fifth of its time at full
 * load (bench/scaling.py: 11-14 us of a request's 55), so past four or
 * five the lock, not the cores, is the limit. */
#define IG_AUTO_WORKERS 4
static size_t reactor_count(const struct ig_conf *cfg)
{
	long n = cfg->workers;
	if (n <= 0) {
		cpu_set_t set;
		n = (sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1) - 1;
		if (n > IG_AUTO_WORKERS)
			n = IG_AUTO_WORKERS;
	}
	return (size_t)(n < 1 ? 1 : n > IG_MAX_WORKERS ? IG_MAX_WORKERS : n);
}

/* A reactor's epoll set, timer, wake-up eventfd and curl multi handle. */
static int rx_open(struct ig_rx *rx)
{
	struct itimerspec tick = {{0, IG_RX_TICK_MS * 1000000L}, {0, IG_RX_TICK_MS * 1000000L}};
	rx->epfd = epoll_create1(EPOLL_CLOEXEC);
	rx->ev_tick.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	rx->ev_wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (rx->epfd < 0 || rx->ev_tick.fd < 0 || rx->ev_wake.fd < 0) {
		ig_log_error("%s: epoll/timerfd/eventfd: %s", __func__, strerror(errno));
		return -1;
	}
	timerfd_settime(rx->ev_tick.fd, 0, &tick, NULL);
	if (ig_event_add(rx, &rx->ev_tick, EPOLLIN) < 0 || ig_event_add(rx, &rx->ev_wake, EPOLLIN) < 0) {
		ig_log_error("%s: epoll_ctl: %s", __func__, strerror(errno));
		return -1;
	}
	return ig_upstream_init(rx);
}

int ig_reactor_new(struct ig_gw *gw)
{
	gw->ev_signal = (struct ig_event){-1, on_signal, gw};
	gw->nrx = reactor_count(gw->cfg);
	if (!(gw->rx = calloc(gw->nrx, sizeof(*gw->rx))))
		return -1;
	for (size_t i = 0; i < gw->nrx; i++) {
		struct ig_rx *rx = &gw->rx[i];
		rx->gw = gw;
		rx->epfd = -1;
		rx->ev_tick = (struct ig_event){-1, on_tick, rx};
		rx->ev_wake = (struct ig_event){-1, on_wake, rx};
		rx->curl_deadline_us = UINT64_MAX;
		ig_list_init(&rx->reqs);
		ig_list_init(&rx->heads);
		ig_list_init(&rx->kept);
		ig_list_init(&rx->pokes);
		ig_list_init(&rx->unwatched);
		ig_list_init(&rx->posted);
		ig_list_init(&rx->jobs);
		ig_list_init(&rx->unpause);
	}
	ig_rx_self = &gw->rx[0];
	return 0;
}

int ig_reactor_open(struct ig_gw *gw)
{
	sigset_t mask;

	for (size_t i = 0; i < gw->nrx; i++)
		if (rx_open(&gw->rx[i]) < 0)
			return -1;
	if (gw->files && !(gw->bio = ig_bio_start(gw))) /* the Files and Batch APIs' disk work */
		return -1;
	/* Signals reach reactor 0's signalfd only: every thread blocks them
	 * (the reactors' threads inherit this mask). */
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGUSR1);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	gw->ev_signal.fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	if (gw->ev_signal.fd < 0 || ig_event_add(ig_gw_home(gw), &gw->ev_signal, EPOLLIN) < 0) {
		ig_log_error("%s: signalfd: %s", __func__, strerror(errno));
		return -1;
	}
	return 0;
}

static void begin_stop(struct ig_gw *gw, int signo)
{
	if (gw->stopping) {
		ig_log_warn("second signal (%s): stopping now, %zu requests cut", strsignal(signo), gw->nreqs);
		gw->stop_deadline_ms = 0;
		return;
	}
	gw->stopping = true;
	gw->stop_deadline_ms = ig_now_ms() + (uint64_t)gw->cfg->shutdown_grace_s * 1000u;
	ig_server_stop_accepting(gw);
	for (size_t i = 1; i < gw->nrx; i++)
		ig_rx_wake(&gw->rx[i]);
	ig_log_info("%s: no longer accepting; %zu requests in flight, up to %lds to finish",
		    strsignal(signo), gw->nreqs, gw->cfg->shutdown_grace_s);
	ig_notify_stopping("stopping: %zu requests in flight, up to %lds to finish", gw->nreqs,
			   gw->cfg->shutdown_grace_s);
}

/* SIGHUP. The service manager sees the reload start and end (its outcome
 * in STATUS=); not while stopping, when STOPPING=1 was the last word. */
static void reload(struct ig_gw *gw)
{
	if (gw->stopping) {
		ig_reload(gw);
		return;
	}
	ig_notify_reloading("reloading %s", gw->cfg->config_path ? gw->cfg->config_path : "the key files");
	int rc = ig_reload(gw);
	ig_notify_ready("listening on %s, %zu backend%s; %s", gw->cfg->listen, gw->fleet.n, gw->fleet.n == 1 ? "" : "s",
			rc == 0 ? "reload applied" : "reload refused, running configuration kept (see the log)");
}

static void on_signal(struct ig_event *ev, uint32_t events IG_UNUSED)
{
	struct ig_gw *gw = ev->data;
	struct signalfd_siginfo si;
	while (read(ev->fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGTERM:
		case SIGINT:
			begin_stop(gw, (int)si.ssi_signo);
			break;
		case SIGHUP:
			reload(gw);
			break;
		case SIGUSR1:
			ig_accesslog_reopen(&gw->alog);
			break;
		default:
			ig_log_info("signal %s ignored", strsignal((int)si.ssi_signo));
			break;
		}
	}
}

/* The work other modules and reactors deferred to this turn's end (gw's
 * and rx's flags and lists). */
static void deferred(struct ig_rx *rx)
{
	struct ig_gw *gw = rx->gw;
	ig_rx_run_jobs(rx);
	if (gw->threaded) {
		if (rx->nnewfds)
			ig_server_take_handed(rx);
		if (gw->accept_paused && rx == ig_gw_home(gw))
			ig_server_resume_accept(gw);
	}
	/* what other reactors handed over, and what a request deferred to the
	 * end of its own reactor's turn (a detached one's end: proxy.c) */
	ig_proxy_run_posted(rx);
	/* the modules' periodic work (rx.h: ig_rx_every) */
	bool tick = rx->tick_due;
	rx->tick_due = false;
	ig_rx_run_timers(rx, ig_now_ms(), tick);
	if (tick && rx == ig_gw_home(gw))
		gw->drain_pending = gw->models_dirty;
	if (gw->models_dirty) {
		gw->models_dirty = false;
		if (ig_sched_rebuild(&gw->sched, &gw->fleet) < 0)
			gw->models_dirty = true; /* out of memory: next turn */
		gw->drain_pending = true;
	}
	if (gw->drain_pending) {
		gw->drain_pending = false;
		ig_dispatch_drain(gw);
	}
}

/* Whether rx has handed-over or posted work waiting (it must not sleep). */
static bool rx_pending(const struct ig_rx *rx)
{
	return rx->nnewfds || !ig_list_empty(&rx->posted) || !ig_list_empty(&rx->jobs);
}

#ifdef IG_TEST_FAULTS
/* The test build's fault (tests/Makemodule.am: tests/infergate-faults, for
 * tests/integration/test_stop.py), never in the installed program:
 * IG_TEST_FAULT_EPOLL="K PATH" makes reactor K's epoll_wait fail (EBADF)
 * once the file PATH exists. Read before the reactors' threads start. */
static long fault_rx = -1;
static char fault_path[1024];

static void fault_setup(void)
{
	const char *v = getenv("IG_TEST_FAULT_EPOLL");
	int at = 0;
	if (v && sscanf(v, "%ld %n", &fault_rx, &at) == 1 && v[at])
		snprintf(fault_path, sizeof(fault_path), "%s", v + at);
	else
		fault_rx = -1;
}

/* Whether rx's epoll_wait is to fail now. */
static bool fault_due(const struct ig_rx *rx)
{
	return fault_rx == rx - rx->gw->rx && access(fault_path, F_OK) == 0;
}
#endif

/* Every reactor stops at once, with the exit code 1: one of them cannot
 * go on (its epoll_wait failed, its thread did not start). */
static void fail_all(struct ig_gw *gw)
{
	gw->stopping = gw->failed = true;
	gw->stop_deadline_ms = 0;
	for (size_t i = 0; i < gw->nrx; i++)
		ig_rx_wake(&gw->rx[i]);
}

/* Reactor 0 ends last, whatever stopped the loops: the others may still
 * answer a batch's requests, whose transfers are its own, and nothing any
 * reactor hands it afterwards would be seen. Its loop leaves only once
 * nrunning is 1, except when its own epoll_wait failed: then it waits
 * here for the others, the lock let go meanwhile (counted as
 * ig_gw_lock_give and ig_gw_lock_take count it). */
static void wait_for_others(struct ig_gw *gw)
{
	if (!gw->threaded || gw->nrunning <= 1)
		return;
	int depth = ig_lock_depth;
	gw->lock_held_ns += ig_now_ns() - gw->lock_since_ns;
	while (gw->nrunning > 1)
		pthread_cond_wait(&gw->rx_ended, &gw->lock);
	gw->lock_taken++;
	gw->lock_since_ns = ig_now_ns();
	ig_lock_depth = depth;
}

/* One reactor's loop, until the stop and its grace period, or a failure
 * of its own epoll_wait. It holds the lock but while it waits and while
 * the libraries do I/O. */
static void rx_loop(struct ig_rx *rx)
{
	struct ig_gw *gw = rx->gw;
	struct epoll_event evs[512];

	for (;;) {
		int timeout = -1;
		if (!ig_list_empty(&rx->unpause)) {
			/* streams their clients drained (relay.h): curl may run the
			 * write callback at once, so not under the lock */
			int depth = ig_gw_release(gw);
			ig_upstream_run_unpauses(rx);
			ig_gw_reacquire(gw, depth);
		}
		if (ig_server_busy(rx) || rx_pending(rx))
			timeout = 0;
		if (timeout != 0 && rx->curl_deadline_us != UINT64_MAX) {
			uint64_t now = ig_now_us();
			timeout = rx->curl_deadline_us <= now ? 0 : (int)((rx->curl_deadline_us - now + 999) / 1000);
		}
		int depth = ig_gw_release(gw);
		int n = epoll_wait(rx->epfd, evs, (int)(sizeof(evs) / sizeof(evs[0])), timeout);
		int err = errno;
#ifdef IG_TEST_FAULTS
		if (n >= 0 && fault_due(rx)) {
			n = -1;
			err = EBADF;
		}
#endif
		/* curl's events first, with the lock still let go: its I/O, and
		 * the callbacks that touch only their own transfer, run beside
		 * the other reactors (upstream.c); one taking of the lock after. */
		bool curl_ran = false;
		for (int i = 0; i < n; i++)
			if (evs[i].data.u64 & IG_EV_CURL_BIT) {
				ig_upstream_on_socket(rx, (int)(evs[i].data.u64 & 0xffffffffu), evs[i].events);
				curl_ran = true;
			}
		if (rx->curl_deadline_us != UINT64_MAX && ig_now_us() >= rx->curl_deadline_us) {
			ig_upstream_on_timer(rx);
			curl_ran = true;
		}
		ig_gw_reacquire(gw, depth);
		if (n < 0 && err != EINTR) {
			ig_log_error("reactor %zu: epoll_wait: %s; stopping", (size_t)(rx - gw->rx), strerror(err));
			fail_all(gw);
			break;
		}
		if (curl_ran)
			ig_upstream_check_done(rx);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u64 & IG_EV_CURL_BIT)
				continue;
			struct ig_event *ev = evs[i].data.ptr;
			ev->handler(ev, evs[i].events);
		}
		deferred(rx);
		ig_server_run(rx);
		/* a batch's answers in flight are written before the end, not
		 * sent again; reactor 0 ends last (a batch's transfers, in its
		 * multi, are answered by the others) */
		if (gw->stopping && ((gw->nreqs == 0 && ig_batches_inflight(gw->batches) == 0) ||
				     ig_now_ms() >= gw->stop_deadline_ms) &&
		    (rx != ig_gw_home(gw) || gw->nrunning == 1))
			break;
	}
	if (rx == ig_gw_home(gw))
		wait_for_others(gw);
	/* Abort what is left and let MHD see the connections once more. */
	struct ig_req *r, *rnext;
	IG_LIST_FOREACH_SAFE(r, rnext, &rx->reqs, struct ig_req, link)
		ig_proxy_req_client_gone(r); /* a detached one is freed */
	ig_server_wake_all(rx);
	ig_server_run(rx);
	gw->nrunning--;
	if (gw->threaded)
		pthread_cond_signal(&gw->rx_ended);
	ig_rx_wake(ig_gw_home(gw));
}

static void *rx_thread(void *arg)
{
	struct ig_rx *rx = arg;
	ig_rx_self = rx;
	ig_gw_lock(rx->gw);
	rx_loop(rx);
	ig_gw_unlock(rx->gw);
	return NULL;
}

int ig_reactor_run(struct ig_gw *gw)
{
	ig_log_info("listening on %s%s, %zu backends, policy %s, %zu reactor%s%s%s", gw->tls ? "https://" : "",
		    gw->cfg->listen, gw->fleet.n, ig_policy_name(gw->cfg->policy), gw->nrx, gw->nrx == 1 ? "" : "s",
		    gw->admin_fd >= 0 ? "; admin API, /metrics and status page on " : "",
		    gw->admin_fd >= 0 ? gw->cfg->admin_listen : "");
	gw->threaded = gw->nrx > 1;
	gw->nrunning = gw->nrx;
#ifdef IG_TEST_FAULTS
	fault_setup();
#endif
	ig_gw_lock(gw);
	for (size_t i = 1; i < gw->nrx; i++) {
		struct ig_rx *rx = &gw->rx[i];
		int rc = pthread_create(&rx->thread, NULL, rx_thread, rx);
		if (rc != 0) {
			ig_log_error("cannot start reactor %zu: %s", i, strerror(rc));
			gw->nrunning -= gw->nrx - i;
			fail_all(gw);
			break;
		}
		rx->started = true;
	}
	/* init bound the port and started MHD: a client may connect now */
	if (!gw->stopping)
		ig_notify_ready("listening on %s, %zu backend%s", gw->cfg->listen, gw->fleet.n,
				gw->fleet.n == 1 ? "" : "s");
	rx_loop(ig_gw_home(gw));
	if (gw->nreqs)
		ig_log_warn("grace period over: cutting %zu requests", gw->nreqs);
	ig_gw_unlock(gw);
	for (size_t i = 1; i < gw->nrx; i++)
		if (gw->rx[i].started)
			pthread_join(gw->rx[i].thread, NULL);
	gw->threaded = false; /* one thread from here: no lock */
	ig_log_info("stopped");
	return gw->failed ? 1 : 0;
}

void ig_reactor_close(struct ig_gw *gw)
{
	for (size_t i = 0; gw->rx && i < gw->nrx; i++) {
		struct ig_rx *rx = &gw->rx[i];
		ig_upstream_free(rx);
		if (rx->epfd >= 0)
			close(rx->epfd);
		if (rx->ev_tick.fd >= 0)
			close(rx->ev_tick.fd);
		if (rx->ev_wake.fd >= 0)
			close(rx->ev_wake.fd);
		rx->epfd = rx->ev_tick.fd = rx->ev_wake.fd = -1;
	}
}

void ig_reactor_free(struct ig_gw *gw)
{
	if (gw->ev_signal.fd >= 0)
		close(gw->ev_signal.fd);
	gw->ev_signal.fd = -1;
	free(gw->rx);
	gw->rx = NULL;
	gw->nrx = 0;
}
