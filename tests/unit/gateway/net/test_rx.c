/* Unit tests for what the reactors hand each other (src/gateway/net/rx.c and
 * rx.h's lock): a posted job runs once for every post before it, in order,
 * its reactor woken once through its eventfd (not when it is this thread's
 * own); a job taken back does not run; the gateway's lock nested, let go
 * around I/O and taken back, counted as /metrics shows it, and not taken
 * with one reactor; the modules' timers (ig_rx_every), which reactor.c
 * runs at the end of each turn: their order, their reactor, their period. */
#include "config.h"
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "gateway.h"
#include "net/rx.h"
#include "../../check_main.h"

static struct ig_rx *rx_new(void)
{
	static struct ig_rx rx;
	memset(&rx, 0, sizeof(rx));
	ig_list_init(&rx.jobs);
	rx.ev_wake.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ck_assert_int_ge(rx.ev_wake.fd, 0);
	return &rx;
}

/* What the reactor's eventfd holds (read, so emptied); 0 when nothing. */
static uint64_t wakes(struct ig_rx *rx)
{
	uint64_t n = 0;
	if (read(rx->ev_wake.fd, &n, sizeof(n)) < 0)
		return 0;
	rx->woken = false;
	return n;
}

static char order[16];
static int reposts;
static struct ig_rx *the_rx;

struct job {
	struct ig_rx_job job;
	char name;
};

static void run(struct ig_rx_job *j)
{
	struct job *me = IG_CONTAINER_OF(j, struct job, job);
	size_t n = strlen(order);
	order[n] = me->name;
	order[n + 1] = '\0';
	if (reposts > 0) { /* a post from its own run is a new one */
		reposts--;
		ig_rx_post(the_rx, j);
	}
}

START_TEST(posted_jobs_run_once_in_order_and_wake_their_reactor)
{
	struct ig_rx *rx = the_rx = rx_new();
	struct job a = {{run, {0}}, 'a'}, b = {{run, {0}}, 'b'}, c = {{run, {0}}, 'c'};
	order[0] = '\0';
	ig_rx_post(rx, &a.job);
	ig_rx_post(rx, &b.job);
	ig_rx_post(rx, &a.job); /* posted already: one run does both posts' work */
	ig_rx_post(rx, &c.job);
	ck_assert_uint_eq(wakes(rx), 1); /* one wake-up for all of them */
	ig_rx_unpost(&c.job);             /* its object goes away: taken back */
	ig_rx_unpost(&c.job);             /* and again: nothing */
	ig_rx_run_jobs(rx);
	ck_assert_str_eq(order, "ab");
	ck_assert(ig_list_empty(&rx->jobs));

	/* a job that posts itself again from its run runs again, after the others */
	order[0] = '\0';
	reposts = 1;
	ig_rx_post(rx, &a.job);
	ig_rx_post(rx, &b.job);
	ig_rx_run_jobs(rx);
	ck_assert_str_eq(order, "aba");
	reposts = 0;

	/* the reactor posting to itself is not woken: it runs them at the end of its turn */
	wakes(rx);
	ig_rx_self = rx;
	ig_rx_post(rx, &b.job);
	ck_assert_uint_eq(wakes(rx), 0);
	ig_rx_self = NULL;
	ig_rx_run_jobs(rx);
	close(rx->ev_wake.fd);
}
END_TEST

static struct ig_gw gw;
static volatile int held;

static void *holder(void *arg)
{
	(void)arg;
	ig_gw_lock(&gw);
	held = 1;
	usleep(100000);
	ig_gw_unlock(&gw);
	return NULL;
}

START_TEST(the_lock_nests_is_let_go_around_io_and_is_counted)
{
	memset(&gw, 0, sizeof(gw));
	pthread_mutex_init(&gw.lock, NULL);

	/* one reactor: no lock at all */
	ig_gw_lock(&gw);
	ig_gw_unlock(&gw);
	ck_assert_uint_eq(gw.lock_taken, 0);

	gw.threaded = true;
	ig_gw_lock(&gw);
	ig_gw_lock(&gw); /* a callback under our own call: taken again without blocking */
	ck_assert_int_eq(ig_lock_depth, 2);
	ck_assert_uint_eq(gw.lock_taken, 1);
	int depth = ig_gw_release(&gw); /* around epoll_wait, MHD_run: let go whole */
	ck_assert_int_eq(depth, 2);
	ck_assert_int_eq(ig_lock_depth, 0);
	ck_assert_int_eq(pthread_mutex_trylock(&gw.lock), 0); /* really free */
	pthread_mutex_unlock(&gw.lock);
	ig_gw_reacquire(&gw, depth);
	ck_assert_int_eq(ig_lock_depth, 2);
	ck_assert_uint_eq(gw.lock_taken, 2);
	ig_gw_unlock(&gw);
	ig_gw_unlock(&gw);
	ck_assert_int_eq(ig_lock_depth, 0);
	ck_assert_uint_eq(gw.lock_contended, 0);

	/* another reactor holds it: this one waits, and that is counted */
	pthread_t t;
	held = 0;
	ck_assert_int_eq(pthread_create(&t, NULL, holder, NULL), 0);
	while (!held)
		usleep(1000);
	ig_gw_lock(&gw);
	ig_gw_unlock(&gw);
	pthread_join(t, NULL);
	ck_assert_uint_eq(gw.lock_taken, 4);
	ck_assert_uint_eq(gw.lock_contended, 1);
	ck_assert_uint_ge(gw.lock_held_ns, 100000000ull); /* the other's 100 ms held */
	pthread_mutex_destroy(&gw.lock);
}
END_TEST

struct call {
	char what[64][8];
	size_t n;
};
static struct call calls;

static void note(struct ig_rx *rx, uint64_t now_ms, void *arg)
{
	(void)now_ms;
	ck_assert_uint_lt(calls.n, 64);
	snprintf(calls.what[calls.n++], 8, "%s%zu", (const char *)arg, (size_t)(rx - rx->gw->rx));
}

static char *joined(void)
{
	static char s[512];
	s[0] = 0;
	for (size_t i = 0; i < calls.n; i++) {
		strcat(s, i ? " " : "");
		strcat(s, calls.what[i]);
	}
	calls.n = 0;
	return s;
}

START_TEST(timers_run_in_their_order_on_their_reactors)
{
	static struct ig_gw tgw;
	struct ig_rx rx[2];
	memset(&tgw, 0, sizeof(tgw));
	memset(rx, 0, sizeof(rx));
	tgw.rx = rx;
	tgw.nrx = 2;
	rx[0].gw = rx[1].gw = &tgw;
	/* registered out of order: they run by order, equals as registered */
	ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_EACH, IG_RX_TICK_MS, IG_RX_ORDER_WAKE, note, "w"), 0);
	ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_HEALTH, note, "h"), 0);
	ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_HOME, 0, IG_RX_ORDER_CLUSTER, note, "c"), 0);
	ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_EACH, IG_RX_TICK_MS, IG_RX_ORDER_PROXY, note, "p"), 0);
	ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_HEALTH, note, "r"), 0);
	ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_HOME, 1000, IG_RX_ORDER_METRICS, note, "s"), 0);

	/* a turn without the tick: the per-turn ones only, on their reactor */
	ig_rx_run_timers(&rx[0], 1000, false);
	ck_assert_str_eq(joined(), "c0");
	ig_rx_run_timers(&rx[1], 1000, false);
	ck_assert_str_eq(joined(), "");
	/* a tick: everything due, in order; the second's once a second */
	ig_rx_run_timers(&rx[0], 1000, true);
	ck_assert_str_eq(joined(), "c0 p0 h0 r0 s0 w0");
	ig_rx_run_timers(&rx[1], 1000, true);
	ck_assert_str_eq(joined(), "p1 w1");
	ig_rx_run_timers(&rx[0], 1020, true);
	ck_assert_str_eq(joined(), "c0 p0 h0 r0 w0");
	/* the tick's period: every tick, however close the ticks came */
	ig_rx_run_timers(&rx[0], 1021, true);
	ck_assert_str_eq(joined(), "c0 p0 h0 r0 w0");
	ig_rx_run_timers(&rx[0], 2000, true);
	ck_assert_str_eq(joined(), "c0 p0 h0 r0 s0 w0");
}
END_TEST

START_TEST(the_table_has_a_bound)
{
	static struct ig_gw tgw;
	memset(&tgw, 0, sizeof(tgw));
	for (int i = 0; i < IG_RX_MAX_TIMERS; i++)
		ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_EACH, 0, i, note, "x"), 0);
	ck_assert_int_eq(ig_rx_every(&tgw, IG_RX_EACH, 0, 0, note, "x"), -1);
	ck_assert_uint_eq(tgw.ntimers, IG_RX_MAX_TIMERS);
}
END_TEST

IG_CHECK_MAIN("rx", posted_jobs_run_once_in_order_and_wake_their_reactor, the_lock_nests_is_let_go_around_io_and_is_counted,
	      timers_run_in_their_order_on_their_reactors, the_table_has_a_bound)
