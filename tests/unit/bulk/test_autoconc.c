/* Unit tests for src/bulk/autoconc.c: --concurrency auto against a model
 * server in virtual time finds the knee, backs off and climbs again, and
 * through a gateway holds its slots plus the headroom.
 * Moved from tests/unit/bulk/test_bulk.c unchanged; the bulk client's .c
 * files are included, as there, so static functions can be tested. */
#include "config.h"
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/batchfile/corpus.c"
#include "../../../src/batchfile/idset.c"
#include "../../../src/batchfile/journal.c"
#include "../../../src/bulk/stream.c"
#include "../../../src/bulk/report.c"
#include "../../../src/bulk/progress.c"
#include "../../../src/bulk/generate.c"
#include "../../../src/bulk/scheduler.c"
#include "../../../src/bulk/autoconc.c"
#include "../../../src/bulk/merge.c"
#include "../../../src/bulk/submit.c"
#include "../../../src/bulk/submit_flags.c"
#define main bulk_main
#include "../../../src/bulk/main.c"
#include "../check_main.h"
#undef main

/* --concurrency auto against a model server in virtual time: `slots` run at
 * once, each request takes `service_us` once it runs (10 tokens), the rest
 * wait in FIFO order. The client keeps auto's limit in flight. */
struct model_server {
	long slots;
	uint64_t service_us;
	uint64_t *start, *end;  /* per request in flight: client start, service end (0: waiting) */
	long n, cap;
};

static void model_step(struct model_server *m, struct ig_auto *a, uint64_t now)
{
	long running = 0;
	for (long i = 0; i < m->n;) { /* completions */
		if (m->end[i] && m->end[i] <= now) {
			ig_auto_done(a, 10, m->start[i], now - m->start[i]);
			memmove(&m->start[i], &m->start[i + 1], (size_t)(m->n - i - 1) * sizeof(uint64_t));
			memmove(&m->end[i], &m->end[i + 1], (size_t)(m->n - i - 1) * sizeof(uint64_t));
			m->n--;
			continue;
		}
		i++;
	}
	for (long i = 0; i < m->n; i++) /* FIFO: the oldest waiting take the free slots */
		if (m->end[i])
			running++;
		else if (running < m->slots) {
			m->end[i] = now + m->service_us;
			running++;
		}
	long limit = ig_auto_tick(a, now, 0);
	while (m->n < limit && m->n < m->cap) {
		m->start[m->n] = now;
		m->end[m->n] = running < m->slots ? now + m->service_us : 0;
		running += running < m->slots;
		m->n++;
	}
	ig_auto_inflight(a, now, m->n);
}

static uint64_t model_run(struct model_server *m, struct ig_auto *a, uint64_t from, uint64_t to)
{
	for (uint64_t t = from; t < to; t += 1000)
		model_step(m, a, t);
	return to;
}

START_TEST(auto_finds_the_knee_backs_off_and_climbs_again)
{
	struct model_server m = {.slots = 40, .service_us = 100000, .cap = 4096};
	struct ig_auto a;
	m.start = calloc((size_t)m.cap, sizeof(uint64_t));
	m.end = calloc((size_t)m.cap, sizeof(uint64_t));
	ig_auto_init(&a, 0, 16, 4096, 1);
	uint64_t t = model_run(&m, &a, 1, 30000000);
	/* 16, 32, 64 (no gain), bisection between 16 and 32..64, hold 10% above */
	ck_assert_msg(a.state == IG_AUTO_HOLDING || a.state == IG_AUTO_PROBING, "%s", a.why);
	ck_assert_msg(a.hold >= 40 && a.hold <= 50, "hold %ld (%s)", a.hold, a.why);
	ck_assert_int_le(a.windows_to_hold, 8);
	/* another tenant takes three quarters of it */
	m.slots = 10;
	t = model_run(&m, &a, t, t + 30000000);
	ck_assert_int_ge(a.backoffs, 1);
	ck_assert_msg(a.hold >= 10 && a.hold <= 13, "hold %ld (%s)", a.hold, a.why);
	/* and gives it back, with more: the probes up find it */
	m.slots = 80;
	model_run(&m, &a, t, t + 60000000);
	ck_assert_msg(a.hold >= 80 && a.hold <= 100, "hold %ld (%s)", a.hold, a.why);
	free(m.start);
	free(m.end);
}
END_TEST

START_TEST(auto_through_a_gateway_holds_its_slots_plus_headroom)
{
	struct ig_auto a;
	ig_auto_init(&a, 0, 16, 4096, 1);
	/* nothing learned yet, all seven send load reports: doubling while the run fills it */
	struct ig_capacity c = {.slots = 0, .unknown = 7, .learning = 7, .healthy = 7, .rtt_s = 0.001};
	ig_auto_capacity(&a, &c, 16, 2);
	ck_assert_int_eq(a.state, IG_AUTO_LEARNING);
	ck_assert_int_eq(a.limit, 16);
	ig_auto_capacity(&a, &c, 16, 3);
	ck_assert_int_eq(a.limit, 32);
	ig_auto_capacity(&a, &c, 10, 4); /* not filled yet: no doubling */
	ck_assert_int_eq(a.limit, 32);
	ck_assert_str_eq(a.why, "learning: 7 of 7 backends' slots not known yet");
	/* four of seven learned (4 x 64): never below them */
	c = (struct ig_capacity){.slots = 256, .unknown = 3, .learning = 3, .healthy = 7, .inflight = 30};
	ig_auto_capacity(&a, &c, 32, 5);
	ck_assert_int_eq(a.state, IG_AUTO_LEARNING);
	ck_assert_int_eq(a.limit, 256 + a.headroom);
	/* all learned: slots + 1.5 x the requests in transit + 2 */
	c = (struct ig_capacity){.slots = 448, .unknown = 0, .healthy = 7, .inflight = 440, .queued = 12};
	for (int i = 0; i < 60; i++)
		ig_auto_capacity(&a, &c, 460, 6 + (uint64_t)i); /* 460 - 440 - 12 = 8 in transit */
	ck_assert_int_eq(a.state, IG_AUTO_GATEWAY);
	ck_assert_int_eq(a.headroom, 14);
	ck_assert_int_eq(a.limit, 462);
	ck_assert_str_eq(a.why, "gateway: 448 slots + 14");
	/* a backend leaves */
	c.slots = 384;
	ig_auto_capacity(&a, &c, 460, 100);
	ck_assert_int_eq(a.limit, 384 + 14);
	/* backends that send no load reports are never learned: the search, from the known floor */
	c = (struct ig_capacity){.slots = 384, .unknown = 1, .learning = 0, .healthy = 7, .inflight = 380};
	ig_auto_capacity(&a, &c, 398, 101);
	ck_assert_int_eq(a.state, IG_AUTO_RAMPING);
	ck_assert_int_ge(a.limit, 384);
	/* never above --max-concurrency */
	struct ig_auto b;
	ig_auto_init(&b, 0, 16, 300, 1);
	c = (struct ig_capacity){.slots = 448, .healthy = 7};
	ig_auto_capacity(&b, &c, 0, 2);
	ck_assert_int_eq(b.limit, 300);
	/* fixed stays fixed */
	struct ig_auto f;
	ig_auto_init(&f, 48, 16, 4096, 1);
	ig_auto_capacity(&f, &c, 0, 2);
	ck_assert_int_eq(f.limit, 48);
	ck_assert_int_eq(f.state, IG_AUTO_FIXED);
}
END_TEST

IG_CHECK_MAIN("autoconc", auto_finds_the_knee_backs_off_and_climbs_again, auto_through_a_gateway_holds_its_slots_plus_headroom)
