/* What the reactors hand each other: a wake-up through the reactor's
 * eventfd (ev_wake, in its epoll set), and a call another reactor waits on
 * (the admin and Batch APIs answered on reactor 0, where the control
 * plane's transfers live). Requests and sockets handed over are
 * lists in struct ig_rx, read by the loop (reactor.c) when it wakes. */
#include "config.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "infergate/log.h"
#include "rx.h"

__thread struct ig_rx *ig_rx_self;
__thread int ig_lock_depth;

void ig_rx_wake(struct ig_rx *rx)
{
	uint64_t one = 1;
	if (rx == ig_rx_self || rx->woken || rx->ev_wake.fd < 0)
		return;
	rx->woken = true;
	if (write(rx->ev_wake.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		ig_log_warn("%s: eventfd write: %s", __func__, strerror(errno));
}

struct job {
	void (*fn)(void *arg);
	void *arg;
	bool done;
	struct ig_list link;
};

void ig_rx_call(struct ig_rx *to, void (*fn)(void *arg), void *arg)
{
	struct ig_gw *gw = to->gw;
	if (to == ig_rx_self || !gw->threaded) {
		fn(arg);
		return;
	}
	struct job j = {fn, arg, false, {NULL, NULL}};
	ig_list_append(&to->jobs, &j.link);
	ig_rx_wake(to);
	int depth = ig_lock_depth; /* >= 1: the caller holds the lock */
	/* pthread_cond_wait lets go of the lock and takes it back: counted as
	 * ig_gw_lock_give and ig_gw_lock_take count it, so the wait is not
	 * held time */
	gw->lock_held_ns += ig_now_ns() - gw->lock_since_ns;
	while (!j.done)
		pthread_cond_wait(&gw->job_done, &gw->lock);
	gw->lock_taken++;
	gw->lock_since_ns = ig_now_ns();
	ig_lock_depth = depth;
}

void ig_rx_run_jobs(struct ig_rx *rx)
{
	struct job *j;
	bool any = false;
	while ((j = IG_LIST_FIRST(&rx->jobs, struct job, link))) {
		ig_list_del(&j->link);
		j->fn(j->arg);
		j->done = true;
		any = true;
	}
	if (any)
		pthread_cond_broadcast(&rx->gw->job_done);
}
