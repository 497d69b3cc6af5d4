/* What the reactors hand each other: a wake-up through the reactor's
 * eventfd (ev_wake, in its epoll set), and jobs posted to a reactor that it
 * runs at the end of its turn, nobody waiting (nginx's posted events): so
 * one reactor never waits on another. Requests and sockets handed over are
 * lists in struct ig_rx too, read by the loop (reactor.c) when it wakes.
 * Not here: the loops (reactor.c). */
#include "config.h"
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "infergate/log.h"
#include "net/rx.h"

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

void ig_rx_post(struct ig_rx *rx, struct ig_rx_job *job)
{
	if (job->link.next && ig_list_linked(&job->link))
		return;
	ig_list_append(&rx->jobs, &job->link);
	ig_rx_wake(rx);
}

void ig_rx_unpost(struct ig_rx_job *job)
{
	if (job->link.next)
		ig_list_del(&job->link);
}

void ig_rx_run_jobs(struct ig_rx *rx)
{
	struct ig_rx_job *job;
	while ((job = IG_LIST_FIRST(&rx->jobs, struct ig_rx_job, link))) {
		ig_list_del(&job->link); /* off first: a post from here on is a new one */
		job->run(job);
	}
}

int ig_rx_every(struct ig_gw *gw, enum ig_rx_which which, unsigned period_ms, int order, ig_rx_timer_fn fn,
		void *arg)
{
	if (gw->ntimers == IG_RX_MAX_TIMERS) {
		ig_log_error("%s: more than %d timers", __func__, IG_RX_MAX_TIMERS);
		return -1;
	}
	/* kept sorted by order, registration order among equals */
	size_t i = gw->ntimers;
	while (i > 0 && gw->timers[i - 1].order > order) {
		gw->timers[i] = gw->timers[i - 1];
		i--;
	}
	gw->timers[i] = (struct ig_rx_timer){fn, arg, which, period_ms, order};
	gw->ntimers++;
	return 0;
}

void ig_rx_run_timers(struct ig_rx *rx, uint64_t now_ms, bool tick)
{
	struct ig_gw *gw = rx->gw;
	bool home = rx == ig_gw_home(gw);
	for (size_t i = 0; i < gw->ntimers; i++) {
		const struct ig_rx_timer *t = &gw->timers[i];
		if (t->which == IG_RX_HOME && !home)
			continue;
		if (t->period_ms > 0 && (!tick || (t->period_ms > IG_RX_TICK_MS && now_ms - rx->timer_last[i] < t->period_ms)))
			continue;
		rx->timer_last[i] = now_ms;
		t->fn(rx, now_ms, t->arg);
	}
}
