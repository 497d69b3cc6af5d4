/* Unit tests for the scheduler (src/gateway/sched/scheduler.c): who runs next
 * when a slot frees. Entries are queued and dispatched by hand; no socket
 * (tests/unit/gateway/sched/test_dispatch.c drives the same through dispatch). */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "sched/scheduler.h"
#include "../../check_main.h"

struct fixture {
	struct ig_sched s;
	struct ig_clients c;
	struct ig_fleet fleet;
	struct ig_model *m;
};

static void setup(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	ig_sched_init(&f->s);
	ig_clients_init(&f->c);
	f->m = ig_sched_get(&f->s, &f->fleet, "m");
	ck_assert_ptr_nonnull(f->m);
	ig_sched_hold(f->m);
}

static void teardown(struct fixture *f)
{
	ig_sched_free(&f->s);
	ig_clients_free(&f->c);
}

static void put(struct fixture *f, struct ig_sched_entry *w, int klass, struct ig_key *k)
{
	memset(w, 0, sizeof(*w));
	w->klass = klass;
	w->key = k;
	w->deadline_ms = 1000;
	ck_assert_int_eq(ig_sched_enqueue(&f->s, f->m, w), 0);
}

/* Dispatches the next waiter and returns it. */
static struct ig_sched_entry *take(struct fixture *f)
{
	struct ig_sched_entry *w = ig_sched_next(&f->s, f->m, NULL);
	if (w)
		ig_sched_dispatch(&f->s, f->m, w);
	return w;
}

START_TEST(classes_go_in_strict_order)
{
	struct fixture f;
	setup(&f);
	struct ig_key *k = ig_clients_get(&f.c, "");
	struct ig_sched_entry low, normal, high, normal2;
	put(&f, &low, IG_CLASS_LOW, k);
	put(&f, &normal, IG_CLASS_NORMAL, k);
	put(&f, &high, IG_CLASS_HIGH, k);
	put(&f, &normal2, IG_CLASS_NORMAL, k);
	ck_assert_uint_eq(f.m->qlen, 4);
	ck_assert_ptr_eq(take(&f), &high);
	ck_assert_ptr_eq(take(&f), &normal);
	ck_assert_ptr_eq(take(&f), &normal2);
	ck_assert_ptr_eq(take(&f), &low);
	ck_assert_ptr_null(take(&f));
	ck_assert_uint_eq(f.m->qlen, 0);
	teardown(&f);
}
END_TEST

/* low gets one dispatch in low_every while higher classes wait. */
START_TEST(low_is_never_starved)
{
	struct fixture f;
	setup(&f);
	f.s.low_every = 4;
	struct ig_key *k = ig_clients_get(&f.c, "");
	struct ig_sched_entry hi[12], lo[4];
	for (int i = 0; i < 12; i++)
		put(&f, &hi[i], IG_CLASS_HIGH, k);
	for (int i = 0; i < 4; i++)
		put(&f, &lo[i], IG_CLASS_LOW, k);
	char order[17] = "";
	for (int i = 0; i < 16; i++)
		order[i] = take(&f)->klass == IG_CLASS_LOW ? 'L' : 'H';
	ck_assert_str_eq(order, "HHHLHHHLHHHLHHHL");
	teardown(&f);
}
END_TEST

/* Two keys always waiting: shares follow the weights (1:1, then 3:1),
 * FIFO within each key. */
START_TEST(keys_share_by_weight)
{
	struct fixture f;
	setup(&f);
	struct ig_key *a = ig_clients_get(&f.c, "a"), *b = ig_clients_get(&f.c, "b");
	enum { N = 400 };
	struct ig_sched_entry *wa = calloc(N, sizeof(*wa)), *wb = calloc(N, sizeof(*wb));
	for (int i = 0; i < N; i++) {
		put(&f, &wa[i], IG_CLASS_NORMAL, a);
		put(&f, &wb[i], IG_CLASS_NORMAL, b);
	}
	int na = 0, nb = 0;
	for (int i = 0; i < 100; i++) {
		struct ig_sched_entry *w = take(&f);
		if (w->key == a)
			ck_assert_ptr_eq(w, &wa[na++]);
		else
			ck_assert_ptr_eq(w, &wb[nb++]);
	}
	ck_assert_int_eq(na, 50);
	ck_assert_int_eq(nb, 50);
	b->weight = 3;
	na = nb = 0;
	for (int i = 0; i < 200; i++) {
		if (take(&f)->key == a)
			na++;
		else
			nb++;
	}
	ck_assert_int_eq(nb, 150);
	ck_assert_int_eq(na, 50);
	while (take(&f))
		;
	free(wa);
	free(wb);
	teardown(&f);
}
END_TEST

/* A key at its max_inflight is passed over; when none may run, nothing. */
START_TEST(a_capped_key_waits)
{
	struct fixture f;
	setup(&f);
	struct ig_key *a = ig_clients_get(&f.c, "a"), *b = ig_clients_get(&f.c, "b");
	a->max_inflight = 1;
	a->inflight = 1;
	struct ig_sched_entry w1, w2;
	put(&f, &w1, IG_CLASS_HIGH, a);
	put(&f, &w2, IG_CLASS_LOW, b);
	ck_assert_ptr_eq(take(&f), &w2);
	ck_assert_ptr_null(ig_sched_next(&f.s, f.m, NULL));
	a->inflight = 0;
	ck_assert_ptr_eq(take(&f), &w1);
	teardown(&f);
}
END_TEST

static void expire(struct ig_sched_entry *w, void *arg)
{
	struct fixture *f = arg;
	ig_sched_dequeue(&f->s, f->m, w);
	w->deadline_ms = 0; /* mark */
}

START_TEST(deadlines_expire_per_waiter)
{
	struct fixture f;
	setup(&f);
	struct ig_key *k = ig_clients_get(&f.c, "");
	struct ig_sched_entry w[3];
	put(&f, &w[0], IG_CLASS_HIGH, k);
	put(&f, &w[1], IG_CLASS_HIGH, k);
	put(&f, &w[2], IG_CLASS_LOW, k);
	w[0].deadline_ms = 10;
	w[1].deadline_ms = 20;
	w[2].deadline_ms = 15;
	ig_sched_expire(&f.s, f.m, 15, expire, &f);
	ck_assert_uint_eq(w[0].deadline_ms, 0);
	ck_assert_uint_eq(w[1].deadline_ms, 20);
	ck_assert_uint_eq(w[2].deadline_ms, 0);
	ck_assert_uint_eq(f.m->qlen, 1);
	ck_assert_ptr_eq(take(&f), &w[1]);
	teardown(&f);
}
END_TEST

IG_CHECK_MAIN("scheduler", classes_go_in_strict_order, low_is_never_starved, keys_share_by_weight,
	      a_capped_key_waits, deadlines_expire_per_waiter)
