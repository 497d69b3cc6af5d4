/* Unit tests for the reactors' shared parts (src/gateway/rx.c): the
 * modules' timers (ig_rx_every), which reactor.c runs at the end of each
 * turn: their order, their reactor, their period. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
#include "rx.h"
#include "../check_main.h"

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
	static struct ig_gw gw;
	struct ig_rx rx[2];
	memset(&gw, 0, sizeof(gw));
	memset(rx, 0, sizeof(rx));
	gw.rx = rx;
	gw.nrx = 2;
	rx[0].gw = rx[1].gw = &gw;
	/* registered out of order: they run by order, equals as registered */
	ck_assert_int_eq(ig_rx_every(&gw, IG_RX_EACH, IG_RX_TICK_MS, IG_RX_ORDER_WAKE, note, "w"), 0);
	ck_assert_int_eq(ig_rx_every(&gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_HEALTH, note, "h"), 0);
	ck_assert_int_eq(ig_rx_every(&gw, IG_RX_HOME, 0, IG_RX_ORDER_CLUSTER, note, "c"), 0);
	ck_assert_int_eq(ig_rx_every(&gw, IG_RX_EACH, IG_RX_TICK_MS, IG_RX_ORDER_PROXY, note, "p"), 0);
	ck_assert_int_eq(ig_rx_every(&gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_HEALTH, note, "r"), 0);
	ck_assert_int_eq(ig_rx_every(&gw, IG_RX_HOME, 1000, IG_RX_ORDER_METRICS, note, "s"), 0);

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
	static struct ig_gw gw;
	memset(&gw, 0, sizeof(gw));
	for (int i = 0; i < IG_RX_MAX_TIMERS; i++)
		ck_assert_int_eq(ig_rx_every(&gw, IG_RX_EACH, 0, i, note, "x"), 0);
	ck_assert_int_eq(ig_rx_every(&gw, IG_RX_EACH, 0, 0, note, "x"), -1);
	ck_assert_uint_eq(gw.ntimers, IG_RX_MAX_TIMERS);
}
END_TEST

IG_CHECK_MAIN("rx", timers_run_in_their_order_on_their_reactors, the_table_has_a_bound)
