/* Unit tests for the scheduler (src/gateway/scheduler.c): who runs next
 * when a slot frees. Waiters are queued and dispatched by hand; no socket. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"
#include "../check_main.h"

struct fixture {
	struct ig_sched s;
	struct ig_pool pool;
	struct ig_model *m;
};

static void setup(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	ig_sched_init(&f->s);
	f->m = ig_sched_get(&f->s, &f->pool, "m");
	ck_assert_ptr_nonnull(f->m);
	ig_sched_hold(f->m);
}

static void teardown(struct fixture *f)
{
	ig_sched_free(&f->s);
}

static void put(struct fixture *f, struct ig_waiter *w, int klass, struct ig_key *k)
{
	memset(w, 0, sizeof(*w));
	w->klass = klass;
	w->key = k;
	w->deadline_ms = 1000;
	ck_assert_int_eq(ig_sched_enqueue(&f->s, f->m, w), 0);
}

/* Dispatches the next waiter and returns it. */
static struct ig_waiter *take(struct fixture *f)
{
	struct ig_waiter *w = ig_sched_next(&f->s, f->m);
	if (w)
		ig_sched_dispatch(&f->s, f->m, w);
	return w;
}

START_TEST(classes_go_in_strict_order)
{
	struct fixture f;
	setup(&f);
	struct ig_key *k = ig_sched_key(&f.s, "");
	struct ig_waiter low, normal, high, normal2;
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
	struct ig_key *k = ig_sched_key(&f.s, "");
	struct ig_waiter hi[12], lo[4];
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
	struct ig_key *a = ig_sched_key(&f.s, "a"), *b = ig_sched_key(&f.s, "b");
	enum { N = 400 };
	struct ig_waiter *wa = calloc(N, sizeof(*wa)), *wb = calloc(N, sizeof(*wb));
	for (int i = 0; i < N; i++) {
		put(&f, &wa[i], IG_CLASS_NORMAL, a);
		put(&f, &wb[i], IG_CLASS_NORMAL, b);
	}
	int na = 0, nb = 0;
	for (int i = 0; i < 100; i++) {
		struct ig_waiter *w = take(&f);
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
	struct ig_key *a = ig_sched_key(&f.s, "a"), *b = ig_sched_key(&f.s, "b");
	a->max_inflight = 1;
	a->inflight = 1;
	struct ig_waiter w1, w2;
	put(&f, &w1, IG_CLASS_HIGH, a);
	put(&f, &w2, IG_CLASS_LOW, b);
	ck_assert_ptr_eq(take(&f), &w2);
	ck_assert_ptr_null(ig_sched_next(&f.s, f.m));
	a->inflight = 0;
	ck_assert_ptr_eq(take(&f), &w1);
	teardown(&f);
}
END_TEST

static void expire(struct ig_waiter *w, void *arg)
{
	struct fixture *f = arg;
	ig_sched_dequeue(&f->s, f->m, w);
	w->deadline_ms = 0; /* mark */
}

START_TEST(deadlines_expire_per_waiter)
{
	struct fixture f;
	setup(&f);
	struct ig_key *k = ig_sched_key(&f.s, "");
	struct ig_waiter w[3];
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

/* Keys the configuration names keep their settings; others go with their
 * last request. */
START_TEST(keys_come_and_go)
{
	struct ig_sched s;
	ig_sched_init(&s);
	struct ig_key_conf kc = {.priority = IG_CLASS_LOW, .weight = 3, .max_inflight = 7};
	memset(kc.digest, 'a', 64);
	kc.digest[64] = '\0';
	struct ig_conf cfg = {.low_share_percent = 5, .keys = &kc, .n_keys = 1};
	ck_assert_int_eq(ig_sched_configure(&s, &cfg, NULL, 0), 0);
	ck_assert_uint_eq(s.low_every, 20);
	struct ig_key *k = ig_sched_key(&s, kc.digest);
	ck_assert_int_eq(k->weight, 3);
	ck_assert_int_eq(k->klass, IG_CLASS_LOW);
	struct ig_key *t = ig_sched_key(&s, "other");
	t->refs++;
	ck_assert_uint_eq(s.nkeys, 2);
	ig_sched_key_release(&s, t);
	ck_assert_uint_eq(s.nkeys, 1);
	cfg.n_keys = 0;
	ig_sched_configure(&s, &cfg, NULL, 0);
	ck_assert_uint_eq(s.nkeys, 0);
	ig_sched_free(&s);
}
END_TEST

/* Keys of the keys file: found among 10,000 by digest, their buckets and
 * usage kept across a reload that keeps them, gone when left out. */
START_TEST(keys_file_keys_keep_their_buckets_across_reloads)
{
	struct ig_sched s;
	struct ig_conf cfg = {.low_share_percent = 5};
	struct ig_keyset ks = {0};
	ig_sched_init(&s);
	ks.n = 10000;
	ks.v = calloc(ks.n, sizeof(*ks.v));
	for (size_t i = 0; i < ks.n; i++) {
		ks.v[i] = (struct ig_keyent){.priority = -1, .weight = 1, .rpm = 60};
		memcpy(ks.v[i].digest, &i, sizeof(i));
	}
	ks.v[5].weight = 4;
	ck_assert_int_eq(ig_sched_configure(&s, &cfg, &ks, 1000), 0);
	ck_assert_uint_eq(s.nkeys, 10000);
	char hex[65];
	ig_keyset_hex(ks.v[5].digest, hex);
	struct ig_key *k = ig_sched_key_find(&s, hex);
	ck_assert_ptr_nonnull(k);
	ck_assert_ptr_eq(k->ent, &ks.v[5]);
	ck_assert_int_eq(k->weight, 4);
	ck_assert_int_eq(ig_bucket_remaining(&k->rpm), 60);
	k->rpm.level = 10; /* ten left */
	k->prompt_tokens = 99;
	/* reloaded with the same keys: the level and the usage stay */
	ck_assert_int_eq(ig_sched_configure(&s, &cfg, &ks, 1000), 0);
	ck_assert_ptr_eq(ig_sched_key_find(&s, hex), k);
	ck_assert_int_eq(ig_bucket_remaining(&k->rpm), 10);
	ck_assert_int_eq(k->prompt_tokens, 99);
	/* reloaded without them: unheld keys go, a held one waits for its request */
	k->refs++;
	ks.n = 0;
	ck_assert_int_eq(ig_sched_configure(&s, &cfg, &ks, 1000), 0);
	ck_assert_uint_eq(s.nkeys, 1);
	ck_assert_ptr_null(k->ent);
	ck_assert(k->rpm.limit == 0);
	ig_sched_key_release(&s, k);
	ck_assert_uint_eq(s.nkeys, 0);
	free(ks.v);
	ig_sched_free(&s);
}
END_TEST

IG_CHECK_MAIN("scheduler", classes_go_in_strict_order, low_is_never_starved, keys_share_by_weight,
	      a_capped_key_waits, deadlines_expire_per_waiter, keys_come_and_go,
	      keys_file_keys_keep_their_buckets_across_reloads)
