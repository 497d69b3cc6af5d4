/* What the reactors share and hand each other (struct ig_rx, gateway.h):
 * the gateway's lock, a wake-up, and a call one waits on. The loops
 * themselves are reactor.c's. */
#ifndef IG_RX_H
#define IG_RX_H

#include "gateway.h"
#include "infergate/util.h"

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
/* Runs fn(arg) on reactor `to` and returns when it has; at once when this
 * thread is `to`. The caller holds the lock, which is let go while it
 * waits: what it read before may have changed. Only towards reactor 0,
 * which never waits on another, so no two reactors wait on each other. */
void ig_rx_call(struct ig_rx *to, void (*fn)(void *arg), void *arg);
/* Reactor rx runs the calls others wait on (its loop, under the lock). */
void ig_rx_run_jobs(struct ig_rx *rx);

#endif
