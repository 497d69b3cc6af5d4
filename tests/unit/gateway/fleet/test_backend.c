/* Unit tests for src/gateway/fleet/backend.c: the fleet table (ids, lookups,
 * removal), which models a backend serves, its limit and where it comes
 * from, whether it takes requests, and the priority field it is sent. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet/backend.h"
#include "infergate/util.h"
#include "../../check_main.h"

static void make_up(struct ig_backend *b)
{
	atomic_store(&b->state, IG_BACKEND_UP);
}

START_TEST(ids_are_never_reused_and_a_removed_backend_lives_on)
{
	struct ig_fleet f;
	memset(&f, 0, sizeof(f));
	struct ig_backend *a = ig_backend_fleet_add(&f, "http://10.0.0.1:8000", 1, 0);
	struct ig_backend *b = ig_backend_fleet_add(&f, "http://10.0.0.2:8000", 2, 4);
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_ne(a->id, b->id);
	ck_assert_ptr_eq(ig_backend_fleet_find_url(&f, "http://10.0.0.2:8000"), b);
	ck_assert_ptr_null(ig_backend_fleet_find_url(&f, "http://10.0.0.3:8000"));
	ck_assert_ptr_eq(ig_backend_fleet_find_id(&f, a->id), a);
	/* a new backend starts down, enabled, its load not reported */
	ck_assert_str_eq(ig_backend_state_name(atomic_load(&a->state)), "down");
	ck_assert_str_eq(ig_backend_admin_name(atomic_load(&a->admin)), "enabled");
	ck_assert_int_eq(a->reported_load, -1);

	int old = a->id;
	a->models = json_pack("[{s:s}]", "id", "m");
	ig_backend_fleet_remove(&f, a);
	ck_assert_uint_eq(f.n, 1);
	ck_assert_ptr_null(ig_backend_fleet_find_id(&f, old));
	/* a request may still hold its address: it is kept, its list let go */
	ck_assert_uint_eq(f.ngone, 1);
	ck_assert_ptr_eq(f.gone[0], a);
	ck_assert_ptr_null(a->models);
	ck_assert_str_eq(a->url, "http://10.0.0.1:8000");

	struct ig_backend *c = ig_backend_fleet_add(&f, "http://10.0.0.1:8000", 1, 0);
	ck_assert_int_ne(c->id, old); /* the same URL back is another backend */
	ck_assert_int_ne(c->id, b->id);
	ig_backend_fleet_free(&f);
}
END_TEST

START_TEST(the_fleet_is_built_from_the_configuration)
{
	char *models[] = {"llama", "qwen"};
	struct ig_backend_conf bcs[3] = {
		{.url = "http://a:1", .weight = 3, .max_inflight = 8, .reserve_slots = 2, .priority_field = 1},
		{.url = "b.svc:1", .weight = 1, .discover = 1}, /* discover.c makes those */
		{.url = "http://c:1", .weight = 1, .models = models, .n_models = 2},
	};
	struct ig_conf cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.backends = bcs;
	cfg.n_backends = 3;
	struct ig_fleet f;
	ck_assert_int_eq(ig_backend_fleet_init(&f, &cfg), 0);
	ck_assert_uint_eq(f.n, 2);
	ck_assert_str_eq(f.v[0]->url, "http://a:1");
	ck_assert_int_eq(f.v[0]->weight, 3);
	ck_assert_int_eq(f.v[0]->max_inflight, 8);
	ck_assert_int_eq(f.v[0]->reserve_slots, 2);
	ck_assert_str_eq(f.v[1]->url, "http://c:1");
	ck_assert_uint_eq(f.v[1]->n_models_conf, 2);

	/* a reload with the same models changes nothing; other models do */
	ck_assert_int_eq(ig_backend_configure(f.v[1], &bcs[2]), 0);
	char *other[] = {"llama"};
	struct ig_backend_conf changed = bcs[2];
	changed.models = other;
	changed.n_models = 1;
	changed.weight = 5;
	ck_assert_int_eq(ig_backend_configure(f.v[1], &changed), 1);
	ck_assert_int_eq(f.v[1]->weight, 5);
	ck_assert_int_eq(ig_backend_serves(f.v[1], "qwen"), IG_SERVES_NO);
	ig_backend_fleet_free(&f);
}
END_TEST

START_TEST(a_servers_data_parallel_ranks_are_entries_of_their_own)
{
	char *models[] = {"qwen"};
	struct ig_backend_conf bcs[2] = {
		{.url = "http://a:1", .weight = 2, .max_inflight = 10, .reserve_slots = 3, .dp_ranks = 3,
		 .models = models, .n_models = 1},
		{.url = "http://b:1", .weight = 1},
	};
	struct ig_conf cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.backends = bcs;
	cfg.n_backends = 2;
	struct ig_fleet f;
	ck_assert_int_eq(ig_backend_fleet_init(&f, &cfg), 0);
	ck_assert_uint_eq(f.n, 4);
	struct ig_backend *head = f.v[0];
	ck_assert_int_eq(head->nranks, 3);
	for (int r = 0; r < 3; r++) {
		struct ig_backend *b = f.v[r];
		char key[32];
		snprintf(key, sizeof(key), "http://a:1#dp%d", r);
		ck_assert_ptr_eq(ig_backend_rank(head, r), b);
		ck_assert_ptr_eq(b->server, head);
		ck_assert_int_eq(b->dp_rank, r);
		ck_assert_str_eq(b->url, "http://a:1");
		ck_assert_str_eq(b->key, key);
		ck_assert_ptr_eq(ig_backend_fleet_find_key(&f, key), b);
		/* the server's limits split over its ranks, rounded up */
		ck_assert_int_eq(b->max_inflight, 4);
		ck_assert_int_eq(b->reserve_slots, 1);
		ck_assert_int_eq(b->weight, 2);
		ck_assert_int_eq(ig_backend_serves(b, "qwen"), IG_SERVES_YES);
	}
	/* the URL names the server: its rank 0 */
	ck_assert_ptr_eq(ig_backend_fleet_find_url(&f, "http://a:1"), head);
	/* a server without ranks is one entry, its own server */
	struct ig_backend *b = f.v[3];
	ck_assert(b->dp_rank == -1 && b->server == b && b->nranks == 1 && ig_backend_rank(b, 0) == b);
	ck_assert_str_eq(b->key, "http://b:1");
	ig_backend_server_admin(head, IG_ADMIN_DRAINING);
	for (int r = 0; r < 3; r++)
		ck_assert_int_eq(atomic_load(&f.v[r]->admin), IG_ADMIN_DRAINING);
	ck_assert_int_eq(atomic_load(&b->admin), IG_ADMIN_ENABLED);
	ig_backend_fleet_free(&f);
}
END_TEST

START_TEST(what_a_backend_serves)
{
	struct ig_fleet f;
	memset(&f, 0, sizeof(f));
	struct ig_backend *b = ig_backend_fleet_add(&f, "http://x:1", 1, 0);
	/* its /v1/models not read yet: nobody knows */
	ck_assert_int_eq(ig_backend_serves(b, "llama"), IG_SERVES_UNKNOWN);
	b->models = json_pack("[{s:s},{s:i},{s:s}]", "id", "llama", "id", 7, "id", "qwen");
	ck_assert_int_eq(ig_backend_serves(b, "llama"), IG_SERVES_YES);
	ck_assert_int_eq(ig_backend_serves(b, "mistral"), IG_SERVES_NO);
	json_t *names = ig_backend_model_names(b);
	ck_assert_uint_eq(json_array_size(names), 2); /* the id that is not a string is skipped */
	ck_assert_str_eq(json_string_value(json_array_get(names, 0)), "llama");
	ck_assert_str_eq(json_string_value(json_array_get(names, 1)), "qwen");
	json_decref(names);
	/* its /v1/models answered an error: it is sent any model */
	json_decref(b->models);
	b->models = NULL;
	b->models_any = true;
	ck_assert_int_eq(ig_backend_serves(b, "mistral"), IG_SERVES_YES);
	/* a configured list wins over what it says */
	char *conf[] = {"phi"};
	ck_assert_int_eq(ig_backend_set_models(b, conf, 1), 0);
	ck_assert_int_eq(ig_backend_serves(b, "mistral"), IG_SERVES_NO);
	ck_assert_int_eq(ig_backend_serves(b, "phi"), IG_SERVES_YES);
	names = ig_backend_model_names(b);
	ck_assert_uint_eq(json_array_size(names), 1);
	json_decref(names);
	ig_backend_fleet_free(&f);
}
END_TEST

START_TEST(its_limit_and_where_it_comes_from)
{
	struct ig_fleet f;
	memset(&f, 0, sizeof(f));
	struct ig_backend *b = ig_backend_fleet_add(&f, "http://x:1", 1, 0);
	ck_assert_int_eq(ig_backend_limit(b), 0); /* nothing known: no limit */
	ck_assert_int_eq(ig_backend_capacity(b), 0);
	atomic_store(&b->ramp, 4);
	ck_assert_int_eq(ig_backend_limit(b), 4);
	ck_assert_int_eq(ig_backend_capacity(b), 0); /* a ramp is not knowledge */
	atomic_store(&b->slots, 32);
	ck_assert_int_eq(ig_backend_limit(b), 32);
	ck_assert_int_eq(ig_backend_capacity(b), 32);
	b->max_inflight = 10;
	ck_assert_int_eq(ig_backend_limit(b), 10);
	ck_assert_int_eq(ig_backend_capacity(b), 10);
	ck_assert_str_eq(ig_backend_limit_from(b), "max_inflight");
	ig_backend_fleet_free(&f);
}
END_TEST

START_TEST(only_up_enabled_and_closed_backends_take_requests)
{
	struct ig_fleet f;
	memset(&f, 0, sizeof(f));
	struct ig_backend *a = ig_backend_fleet_add(&f, "http://a:1", 1, 0);
	struct ig_backend *b = ig_backend_fleet_add(&f, "http://b:1", 1, 0);
	ck_assert_uint_eq(ig_backend_fleet_healthy(&f), 0);
	make_up(a);
	make_up(b);
	ck_assert_uint_eq(ig_backend_fleet_healthy(&f), 2);
	atomic_store(&b->admin, IG_ADMIN_DRAINING);
	ck_assert(!ig_backend_usable(b));
	ck_assert_str_eq(ig_backend_admin_name(atomic_load(&b->admin)), "draining");
	ck_assert_uint_eq(ig_backend_fleet_healthy(&f), 1);

	ck_assert_str_eq(ig_backend_breaker_state(a), "closed");
	atomic_store(&a->breaker_until_ms, ig_now_ms() + 60000);
	ck_assert_str_eq(ig_backend_breaker_state(a), "open");
	ck_assert(!ig_backend_usable(a));
	atomic_store(&a->breaker_until_ms, ig_now_ms() - 1); /* its time passed: one trial */
	ck_assert_str_eq(ig_backend_breaker_state(a), "half_open");
	ck_assert(ig_backend_usable(a));
	ig_backend_fleet_free(&f);
}
END_TEST

START_TEST(the_priority_field_follows_the_server)
{
	struct ig_fleet f;
	memset(&f, 0, sizeof(f));
	struct ig_backend *b = ig_backend_fleet_add(&f, "http://x:1", 1, 0);
	long step;
	ck_assert_int_eq(ig_backend_priority_field(b, &step), 0); /* nothing learned: not sent */
	ck_assert_int_eq(step, 10);
	/* SGLang with --enable-priority-scheduling, threshold 5, preempting */
	atomic_store(&b->prio_sched, IG_PRIO_LARGER_FIRST | IG_PRIO_PREEMPTS);
	atomic_store(&b->prio_threshold, 5);
	ck_assert_int_eq(ig_backend_priority_field(b, &step), 1);
	ck_assert_int_eq(step, 6); /* normal preempts low, high normal */
	ck_assert(ig_backend_preempts(b));
	/* configured "vllm" (smaller first) against a larger-first server: sent
	 * that way, but it does not preempt in that order */
	b->priority_field = 2;
	ck_assert_int_eq(ig_backend_priority_field(b, &step), 2);
	ck_assert(!ig_backend_preempts(b));
	b->priority_field = 3; /* "none" */
	ck_assert_int_eq(ig_backend_priority_field(b, &step), 0);
	b->priority_field = 0;
	atomic_store(&b->prio_sched, IG_PRIO_SMALLER_FIRST);
	atomic_store(&b->prio_threshold, -1);
	ck_assert_int_eq(ig_backend_priority_field(b, &step), 2);
	ck_assert_int_eq(step, 10);
	ck_assert(!ig_backend_preempts(b));
	ig_backend_fleet_free(&f);
}
END_TEST

IG_CHECK_MAIN("backend", ids_are_never_reused_and_a_removed_backend_lives_on, the_fleet_is_built_from_the_configuration,
	      a_servers_data_parallel_ranks_are_entries_of_their_own, what_a_backend_serves, its_limit_and_where_it_comes_from, only_up_enabled_and_closed_backends_take_requests,
	      the_priority_field_follows_the_server)
