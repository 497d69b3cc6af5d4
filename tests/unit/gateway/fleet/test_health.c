/* Unit tests for backend health (src/gateway/fleet/health.c, included to reach
 * its static functions): the rise/fall state machine of probes, passive
 * ejection by requests, slot learning from load reports, and removal of
 * drained backends. No socket: results are fed as a probe would give them. */
#include "../../../../src/gateway/fleet/health.c"

#include <check.h>

#include "../../check_main.h"

static struct ig_conf cfg;

static void setup_gw(struct ig_gw *gw, int nbackends)
{
	memset(gw, 0, sizeof(*gw));
	memset(&cfg, 0, sizeof(cfg));
	cfg.health_rise = 2;
	cfg.health_fall = 3;
	cfg.health_interval_ms = 1000;
	gw->cfg = &cfg;
	for (int i = 0; i < nbackends; i++) {
		char url[64];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d", 9000 + i);
		ck_assert_ptr_nonnull(ig_backend_fleet_add(&gw->fleet, url, 1, 0));
	}
	ig_log_set_level(IG_LOG_ERROR);
}

static int state(const struct ig_backend *b) { return atomic_load(&b->state); }

START_TEST(probes_rise_and_fall)
{
	struct ig_gw gw;
	setup_gw(&gw, 1);
	struct ig_backend *b = gw.fleet.v[0];

	/* Never seen up: the first success brings it up at once (a gateway
	 * started next to healthy backends serves at once), with its model
	 * list read (until then it is coming up: counted as a backend whose
	 * list may come, not as healthy), and asks the reactor to start
	 * queued requests. */
	ck_assert_int_eq(state(b), IG_BACKEND_DOWN);
	probe_result(&gw, b, true, "probe: HTTP 200");
	ck_assert_int_eq(state(b), IG_BACKEND_DOWN);
	ck_assert(b->coming_up);
	ck_assert_uint_eq(ig_backend_fleet_healthy(&gw.fleet), 0);
	struct ig_buf list;
	ig_buf_init(&list);
	ig_buf_printf(&list, "{\"object\":\"list\",\"data\":[{\"id\":\"m\"}]}");
	models_read(&gw, b, CURLE_OK, 200, &list, 1);
	ig_buf_free(&list);
	ck_assert_int_eq(state(b), IG_BACKEND_UP);
	ck_assert(!b->coming_up);
	ck_assert_uint_eq(ig_backend_fleet_healthy(&gw.fleet), 1);
	ck_assert(gw.drain_pending);
	gw.drain_pending = false;

	/* fall - 1 failures keep it up; a success in between starts over. */
	probe_result(&gw, b, false, "x");
	probe_result(&gw, b, false, "x");
	probe_result(&gw, b, true, "ok");
	probe_result(&gw, b, false, "x");
	probe_result(&gw, b, false, "x");
	ck_assert_int_eq(state(b), IG_BACKEND_UP);
	probe_result(&gw, b, false, "x");
	ck_assert_int_eq(state(b), IG_BACKEND_DOWN);

	/* Seen up once: back only after `rise` successes in a row. */
	probe_result(&gw, b, true, "ok");
	ck_assert_int_eq(state(b), IG_BACKEND_DOWN);
	ck_assert(!gw.drain_pending);
	probe_result(&gw, b, true, "ok");
	ck_assert_int_eq(state(b), IG_BACKEND_UP);
	ck_assert(gw.drain_pending);
	ig_backend_fleet_free(&gw.fleet);
}
END_TEST

START_TEST(requests_eject_a_backend)
{
	struct ig_gw gw;
	setup_gw(&gw, 2);
	struct ig_backend *a = gw.fleet.v[0], *b = gw.fleet.v[1];
	/* a list that could not be read still lets it up (the probe passed) */
	probe_result(&gw, a, true, "ok");
	models_read(&gw, a, CURLE_COULDNT_CONNECT, 0, NULL, 1);
	/* nor does one whose list is known (here: it answered without one, so it takes any model) */
	b->models_any = true;
	probe_result(&gw, b, true, "ok");
	ck_assert_int_eq(state(a), IG_BACKEND_UP);
	ck_assert_int_eq(state(b), IG_BACKEND_UP);

	/* A refused connection is not a fluke: down at once. */
	ig_health_passive_fail(&gw, a, IG_UPERR_CONNECT, "Couldn't connect to server");
	ck_assert_int_eq(state(a), IG_BACKEND_DOWN);
	ck_assert_int_eq(ig_backend_fleet_healthy(&gw.fleet), 1);

	/* Resets and timeouts: after `fall` in a row; a success resets. */
	ig_health_passive_fail(&gw, b, IG_UPERR_RESET, "reset");
	ig_health_passive_fail(&gw, b, IG_UPERR_TIMEOUT, "timeout");
	ig_health_passive_ok(&gw, b);
	ig_health_passive_fail(&gw, b, IG_UPERR_RESET, "reset");
	ig_health_passive_fail(&gw, b, IG_UPERR_STATUS, "HTTP 503");
	ck_assert_int_eq(state(b), IG_BACKEND_UP);
	ig_health_passive_fail(&gw, b, IG_UPERR_OTHER, "other");
	ck_assert_int_eq(state(b), IG_BACKEND_DOWN);
	ck_assert_int_eq(ig_backend_fleet_healthy(&gw.fleet), 0);
	ig_backend_fleet_free(&gw.fleet);
}
END_TEST

/* Load reports teach the slot count; more slots ask for the queue to be
 * drained; a backend that goes down forgets what it taught. */
START_TEST(load_reports_teach_slots)
{
	struct ig_gw gw;
	setup_gw(&gw, 1);
	struct ig_backend *b = gw.fleet.v[0];
	b->models_any = true;
	probe_result(&gw, b, true, "ok");
	gw.drain_pending = false;

	/* 8 of ours in flight, it runs 8 and queues 4: it holds 8 at once. */
	atomic_store(&b->inflight, 12);
	atomic_store(&b->inflight_peak, 12);
	take_load(&gw, b, 8, 4, -1);
	ck_assert_int_eq(atomic_load(&b->slots), 8);
	ck_assert_int_eq(b->reported_load, 12);
	ck_assert_int_eq(atomic_load(&b->external_load), 0); /* all of it is ours */

	/* Others' requests show as external load: 6 running while we have 4
	 * there. Not at once: since the previous report we had up to 12 there,
	 * and the report may have been taken then (a request of ours that
	 * ended after it must not show as another client's). */
	atomic_store(&b->inflight, 4);
	atomic_store(&b->served, 8);
	take_load(&gw, b, 6, 0, -1);
	ck_assert_int_eq(atomic_load(&b->external_load), 0);
	take_load(&gw, b, 6, 0, -1);
	ck_assert_int_eq(atomic_load(&b->external_load), 2);

	/* Down: learn anew when it comes back. */
	ig_health_passive_fail(&gw, b, IG_UPERR_CONNECT, "refused");
	ck_assert_int_eq(atomic_load(&b->slots), 0);
	ck_assert_int_eq(b->learn.cur, 0);
	ig_backend_fleet_free(&gw.fleet);
}
END_TEST

START_TEST(removed_backends_leave_when_drained)
{
	struct ig_gw gw;
	setup_gw(&gw, 3);
	struct ig_backend *a = gw.fleet.v[0], *b = gw.fleet.v[1];
	int id_c = gw.fleet.v[2]->id;
	ck_assert_int_eq(ig_health_add(&gw, a), 0);
	ck_assert_ptr_nonnull(a->probe);
	atomic_store(&a->admin, IG_ADMIN_REMOVING);
	atomic_store(&b->admin, IG_ADMIN_REMOVING);
	atomic_store(&b->inflight, 1); /* still serving one */
	ig_health_reap(&gw);
	ck_assert_uint_eq(gw.fleet.n, 2);
	ck_assert_ptr_null(ig_backend_fleet_find_url(&gw.fleet, "http://127.0.0.1:9000"));
	ck_assert_ptr_nonnull(ig_backend_fleet_find_id(&gw.fleet, b->id));
	ck_assert_ptr_nonnull(ig_backend_fleet_find_id(&gw.fleet, id_c));
	atomic_store(&b->inflight, 0);
	ig_health_reap(&gw);
	ck_assert_uint_eq(gw.fleet.n, 1);
	ck_assert_int_eq(gw.fleet.v[0]->id, id_c);
	ig_backend_fleet_free(&gw.fleet);
}
END_TEST

IG_CHECK_MAIN("health", probes_rise_and_fall, requests_eject_a_backend,
	      load_reports_teach_slots, removed_backends_leave_when_drained)
