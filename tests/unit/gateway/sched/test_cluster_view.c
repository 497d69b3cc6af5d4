/* Unit tests for the published view of the other gateways
 * (src/gateway/sched/cluster_view.c): no view reads as a gateway alone; a
 * view's entries are found by backend id, model name and key digest
 * whatever order they were made in; a key's part of its max_inflight
 * caps it as the scheduler sees it. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/backend.h"
#include "keys/clients.h"
#include "sched/cluster_view.h"

#include "../../check_main.h"

START_TEST(no_view_is_a_gateway_alone)
{
	struct ig_backend b = {.id = 3};
	struct ig_key k = {.digest = "abc", .max_inflight = 2, .inflight = 1};
	ck_assert_int_eq(ig_cluster_others_inflight(NULL, &b), 0);
	ck_assert_int_eq(ig_cluster_claim_cap(NULL, &b), 0);
	ck_assert_int_eq(ig_cluster_others_waiting(NULL, "m"), 0);
	ck_assert_int_eq(ig_cluster_others_headroom(NULL, "m"), 0);
	ck_assert_uint_eq(ig_cluster_waiting_run(NULL, "m"), 0);
	ck_assert(!ig_cluster_key_capped(NULL, &k)); /* 1 of its 2 */
	k.inflight = 2;
	ck_assert(ig_cluster_key_capped(NULL, &k));
	ck_assert_double_eq(ig_cluster_others_req(NULL, &k), 0);
	ck_assert_uint_eq(ig_cluster_retry_floor(NULL, &k), 0);
	ig_cluster_view_free(NULL);
}
END_TEST

START_TEST(entries_are_found_whatever_their_order)
{
	struct ig_cluster_view *v = calloc(1, sizeof(*v));
	v->backends = calloc(3, sizeof(*v->backends));
	v->backends[0] = (struct ig_cluster_view_backend){.id = 9, .others_inflight = 90, .claim_cap = -1};
	v->backends[1] = (struct ig_cluster_view_backend){.id = 2, .others_inflight = 20, .claim_cap = 4};
	v->backends[2] = (struct ig_cluster_view_backend){.id = 5, .others_inflight = 50};
	v->nbackends = 3;
	v->models = calloc(2, sizeof(*v->models));
	v->models[0] = (struct ig_cluster_view_model){.name = strdup("zeta"), .others_waiting = 7, .waiting_since = 4};
	v->models[1] = (struct ig_cluster_view_model){.name = strdup("alpha"), .others_headroom = 3};
	v->nmodels = 2;
	const char *digests[] = {"ff", "", "0a"};
	for (size_t i = 0; i < 3; i++) {
		struct ig_cluster_view_key *e = ig_cluster_view_add_key(v, digests[i]);
		ck_assert_ptr_nonnull(e);
		e->claim_cap = (long)i + 1;
		e->retry_floor_ms = 100 * (i + 1);
	}
	ig_cluster_view_seal(v);
	struct ig_backend b2 = {.id = 2}, b9 = {.id = 9}, b7 = {.id = 7};
	ck_assert_int_eq(ig_cluster_others_inflight(v, &b2), 20);
	ck_assert_int_eq(ig_cluster_claim_cap(v, &b2), 4);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &b9), 90);
	ck_assert_int_eq(ig_cluster_claim_cap(v, &b9), -1);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &b7), 0); /* a backend the view does not name */
	ck_assert_int_eq(ig_cluster_others_waiting(v, "zeta"), 7);
	ck_assert_uint_eq(ig_cluster_waiting_run(v, "zeta"), 4);
	ck_assert_uint_eq(ig_cluster_waiting_run(v, "alpha"), 0); /* nobody waits */
	ck_assert_int_eq(ig_cluster_others_headroom(v, "alpha"), 3);
	ck_assert_int_eq(ig_cluster_others_waiting(v, "beta"), 0);
	struct ig_key anon = {.digest = "", .max_inflight = 5, .inflight = 2};
	ck_assert_int_eq(ig_cluster_key_cap(v, &anon), 2); /* the anonymous key's entry */
	ck_assert(ig_cluster_key_capped(v, &anon));      /* 2 of its part of 2 */
	ck_assert_uint_eq(ig_cluster_retry_floor(v, &anon), 200);
	struct ig_key ff = {.digest = "ff", .max_inflight = 5, .inflight = 0};
	ck_assert_int_eq(ig_cluster_key_cap(v, &ff), 1);
	ck_assert(!ig_cluster_key_capped(v, &ff));
	ff.max_inflight = 0; /* no cap of its own: the view's part is not one */
	ck_assert_int_eq(ig_cluster_key_cap(v, &ff), 0);
	ff.inflight = 50;
	ck_assert(!ig_cluster_key_capped(v, &ff));
	ig_cluster_view_free(v);
}
END_TEST

START_TEST(none_more_is_a_cap_of_nothing)
{
	struct ig_cluster_view *v = calloc(1, sizeof(*v));
	struct ig_cluster_view_key *e = ig_cluster_view_add_key(v, "k1");
	e->claim_cap = -1;
	ig_cluster_view_seal(v);
	struct ig_key k = {.digest = "k1", .max_inflight = 8, .inflight = 0};
	ck_assert(ig_cluster_key_capped(v, &k)); /* until the next sync, not one */
	ig_cluster_view_free(v);
}
END_TEST

IG_CHECK_MAIN("cluster_view", no_view_is_a_gateway_alone, entries_are_found_whatever_their_order,
	      none_more_is_a_cap_of_nothing)
