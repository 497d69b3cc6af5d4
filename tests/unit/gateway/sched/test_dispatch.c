/* Unit tests for dispatch (src/gateway/sched/dispatch.c): a request started,
 * queued or refused; the queue's order, bound and deadlines; the drain
 * across models; slots given back. Waiters with callbacks that only record
 * what dispatch decided: no request, no socket, no curl. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "api/metrics.h"
#include "gateway.h"
#include "net/rx.h"
#include "sched/dispatch.h"
#include "../../check_main.h"

/* A waiter and what was decided for it. */
struct rec {
	struct ig_waiter w;
	struct ig_backend *started;  /* start's backend */
	unsigned status;             /* fail's status, 0 none */
	char code[64], message[1024];
};

static int rec_start(struct ig_waiter *w, struct ig_backend *b)
{
	IG_CONTAINER_OF(w, struct rec, w)->started = b;
	return 0;
}

static void rec_fail(struct ig_waiter *w, const struct ig_dispatch_error *e)
{
	struct rec *r = IG_CONTAINER_OF(w, struct rec, w);
	r->status = e->status;
	snprintf(r->code, sizeof(r->code), "%s", e->code);
	snprintf(r->message, sizeof(r->message), "%s", e->message);
}

static const struct ig_waiter_ops rec_ops = {rec_start, rec_fail};

/* A gateway with two backends: one serving model-a (its one slot taken),
 * one serving model-b (free). */
struct two {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx;
	struct ig_backend *a, *b;
};

static void two_init(struct two *t)
{
	static char *ma[] = {"model-a"}, *mb[] = {"model-b"};
	char *err = NULL;
	memset(t, 0, sizeof(*t));
	t->cfg.queue_size = 2;
	t->cfg.queue_timeout_ms = 60000;
	t->cfg.queue_timeout_low_ms = 60000;
	t->cfg.queue_timeout_high_ms = 60000;
	t->gw.cfg = &t->cfg;
	t->gw.rx = &t->rx;
	t->gw.nrx = 1;
	t->rx.gw = &t->gw;
	ig_rx_self = &t->rx;
	ig_sched_init(&t->gw.sched);
	ig_clients_init(&t->gw.clients);
	ck_assert_int_eq(ig_dispatch_init(&t->gw, &err), 0);
	t->a = ig_backend_fleet_add(&t->gw.fleet, "http://127.0.0.1:9", 1, 1);
	t->b = ig_backend_fleet_add(&t->gw.fleet, "http://127.0.0.1:10", 1, 1);
	ck_assert_int_eq(ig_backend_set_models(t->a, ma, 1), 0);
	ck_assert_int_eq(ig_backend_set_models(t->b, mb, 1), 0);
	atomic_store(&t->a->state, IG_BACKEND_UP);
	atomic_store(&t->b->state, IG_BACKEND_UP);
	atomic_store(&t->a->inflight, 1); /* its one slot is taken */
	ck_assert_int_eq(ig_sched_rebuild(&t->gw.sched, &t->gw.fleet), 0);
}

static void two_free(struct two *t)
{
	ig_dispatch_free(&t->gw);
	ig_stats_free(&t->gw); /* what ig_dispatch_init registered */
	ig_sched_free(&t->gw.sched);
	ig_clients_free(&t->gw.clients);
	ig_backend_fleet_free(&t->gw.fleet);
}

static void rec_init(struct two *t, struct rec *r, const char *model, const char *key, int klass)
{
	memset(r, 0, sizeof(*r));
	r->w.ops = &rec_ops;
	ig_list_init(&r->w.q.link);
	r->w.q.klass = klass;
	r->w.q.key = ig_clients_get(&t->gw.clients, key);
	ig_clients_hold(r->w.q.key);
	r->w.model = model;
	r->w.m = ig_sched_get(&t->gw.sched, &t->gw.fleet, model);
	ck_assert_ptr_nonnull(r->w.m);
	ig_sched_hold(r->w.m);
}

static void rec_free(struct two *t, struct rec *r)
{
	ig_sched_release(&t->gw.sched, r->w.m);
	ig_clients_release(&t->gw.clients, r->w.q.key);
}

/* Requests wait in FIFO order while every backend of their model is at its
 * limit, a full queue answers 429, and the drain starts the oldest first
 * when a slot frees; a backend gone while they wait: 503. */
START_TEST(queue_is_fifo_and_bounded)
{
	struct two t;
	two_init(&t);
	struct ig_model *ma = ig_sched_find(&t.gw.sched, "model-a");
	ck_assert_ptr_nonnull(ma);
	ck_assert_uint_eq(ma->nbackends, 1);
	struct rec r[4];
	for (int i = 0; i < 4; i++)
		rec_init(&t, &r[i], "model-a", "", IG_CLASS_NORMAL);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &r[0].w), IG_DISPATCH_QUEUED);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &r[1].w), IG_DISPATCH_QUEUED);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &r[2].w), IG_DISPATCH_FAILED);
	ck_assert_uint_eq(r[2].status, 429);
	ck_assert_str_eq(r[2].code, "queue_full");
	ck_assert_uint_eq(t.gw.sched.qlen, 2);
	ck_assert_uint_eq(ma->qlen, 2);
	ck_assert_uint_eq(t.gw.dispatch_stats.queue_rejected, 1);
	/* The slot frees: the oldest starts, with the slot counted. */
	atomic_store(&t.a->inflight, 0);
	ig_dispatch_drain(&t.gw);
	ck_assert_ptr_eq(r[0].started, t.a);
	ck_assert_ptr_null(r[1].started);
	ck_assert(r[0].w.running && r[0].w.was_queued && !r[0].w.queued);
	ck_assert_int_eq(atomic_load(&t.a->inflight), 1);
	ck_assert_int_eq(ma->inflight, 1);
	ck_assert_int_eq(t.gw.sched.class_inflight[IG_CLASS_NORMAL], 1);
	ck_assert_uint_eq(t.gw.sched.dispatched, 1);
	ck_assert_uint_eq(r[0].w.dispatch_seq, 1);
	/* Its end gives the slot back (and asks for a drain). */
	ig_dispatch_end(&t.gw, &r[0].w, &(struct ig_pick_outcome){.ok = true, .completion_tokens = -1});
	ck_assert(!r[0].w.running && t.gw.drain_pending);
	ck_assert_int_eq(atomic_load(&t.a->inflight), 0);
	ck_assert_int_eq(ma->inflight, 0);
	atomic_store(&t.a->inflight, 1);
	/* A client that leaves while it waits: out of the queue. */
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &r[3].w), IG_DISPATCH_QUEUED);
	ig_dispatch_cancel(&t.gw, &r[1].w);
	ck_assert_uint_eq(t.gw.sched.qlen, 1);
	ck_assert_ptr_eq(ig_sched_next(&t.gw.sched, ma, t.gw.cluster_view), &r[3].w.q);
	/* The backend goes away while it waits: 503, not a hang. */
	atomic_store(&t.a->state, IG_BACKEND_DOWN);
	ig_dispatch_drain(&t.gw);
	ck_assert_uint_eq(t.gw.sched.qlen, 0);
	ck_assert_uint_eq(r[3].status, 503);
	ck_assert_str_eq(r[3].code, "no_healthy_backend");
	ck_assert_uint_eq(ma->qlen, 0);
	for (int i = 0; i < 4; i++)
		rec_free(&t, &r[i]);
	two_free(&t);
}
END_TEST

/* model-a's queue is full; a model-b request is not queued behind it, and
 * a name no backend serves is refused with 404 (every list is known). */
START_TEST(models_have_their_own_pools_and_queues)
{
	struct two t;
	two_init(&t);
	struct rec a[2], b, x;
	for (int i = 0; i < 2; i++) {
		rec_init(&t, &a[i], "model-a", "", IG_CLASS_NORMAL);
		ck_assert_int_eq(ig_dispatch_submit(&t.gw, &a[i].w), IG_DISPATCH_QUEUED);
	}
	rec_init(&t, &b, "model-b", "", IG_CLASS_NORMAL);
	atomic_store(&t.b->inflight, 1);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &b.w), IG_DISPATCH_QUEUED);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-b")->qlen, 1);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-a")->qlen, 2);
	/* model-b's backend frees up: the drain starts its request although
	 * model-a's head, first in the table, still cannot start. */
	atomic_store(&t.b->inflight, 0);
	ig_dispatch_drain(&t.gw);
	ck_assert_ptr_eq(b.started, t.b);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-a")->qlen, 2);
	ck_assert_uint_eq(ig_sched_find(&t.gw.sched, "model-b")->qlen, 0);
	ck_assert(b.w.was_queued);
	ig_dispatch_end(&t.gw, &b.w, &(struct ig_pick_outcome){.ok = true, .completion_tokens = -1});

	rec_init(&t, &x, "model-x", "", IG_CLASS_NORMAL);
	ck_assert_uint_eq(x.w.m->nbackends, 0);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &x.w), IG_DISPATCH_FAILED);
	ck_assert_uint_eq(x.status, 404);
	ck_assert_str_eq(x.code, "model_not_found");
	ck_assert_ptr_nonnull(strstr(x.message, "served: model-a, model-b"));
	/* The entry made for model-x goes with its last request. */
	rec_free(&t, &x);
	ck_assert_ptr_null(ig_sched_find(&t.gw.sched, "model-x"));
	ck_assert_ptr_nonnull(ig_sched_find(&t.gw.sched, "model-a"));
	for (int i = 0; i < 2; i++) {
		ig_dispatch_cancel(&t.gw, &a[i].w);
		rec_free(&t, &a[i]);
	}
	rec_free(&t, &b);
	two_free(&t);
}
END_TEST

/* A backend whose list is not learned yet (up): a request for a model no
 * known backend serves waits for it instead of a 404. */
START_TEST(unknown_lists_make_requests_wait)
{
	struct two t;
	two_init(&t);
	struct ig_backend *u = ig_backend_fleet_add(&t.gw.fleet, "http://127.0.0.1:11", 1, 1);
	atomic_store(&u->state, IG_BACKEND_UP);
	ck_assert_int_eq(ig_sched_rebuild(&t.gw.sched, &t.gw.fleet), 0);
	ck_assert_uint_eq(t.gw.sched.unknown_up, 1);
	struct rec x;
	rec_init(&t, &x, "model-c", "", IG_CLASS_NORMAL);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &x.w), IG_DISPATCH_QUEUED);
	/* Its list arrives without model-c: the waiting request gets 404. */
	u->models = json_pack("[{s:s}]", "id", "model-d");
	ck_assert_int_eq(ig_sched_rebuild(&t.gw.sched, &t.gw.fleet), 0);
	ck_assert_uint_eq(t.gw.sched.unknown_up, 0);
	ck_assert_ptr_nonnull(ig_sched_find(&t.gw.sched, "model-d"));
	ck_assert_ptr_nonnull(ig_sched_find(&t.gw.sched, "model-c")); /* held by x */
	ig_dispatch_drain(&t.gw);
	ck_assert_uint_eq(x.status, 404);
	rec_free(&t, &x);
	two_free(&t);
}
END_TEST

/* A retry goes to a backend not tried yet; with none left it is a 502 that
 * names the last backend and what failed (a 504 after a timeout). */
START_TEST(retries_skip_tried_backends_then_fail)
{
	struct two t;
	two_init(&t);
	static char *mb[] = {"model-b"};
	struct ig_backend *b2 = ig_backend_fleet_add(&t.gw.fleet, "http://127.0.0.1:12", 1, 1);
	ck_assert_int_eq(ig_backend_set_models(b2, mb, 1), 0);
	atomic_store(&b2->state, IG_BACKEND_UP);
	ck_assert_int_eq(ig_sched_rebuild(&t.gw.sched, &t.gw.fleet), 0);
	struct rec r;
	rec_init(&t, &r, "model-b", "", IG_CLASS_NORMAL);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &r.w), IG_DISPATCH_STARTED);
	struct ig_backend *first = r.started;
	ig_dispatch_end(&t.gw, &r.w, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
	ck_assert_int_eq(ig_dispatch_retry(&t.gw, &r.w, false, "reset"), IG_DISPATCH_STARTED);
	ck_assert_ptr_ne(r.started, first);
	ck_assert_int_eq(r.w.pick.ntried, 2);
	struct ig_backend *second = r.started;
	ig_dispatch_end(&t.gw, &r.w, &(struct ig_pick_outcome){.ok = false, .completion_tokens = -1});
	ck_assert_int_eq(ig_dispatch_retry(&t.gw, &r.w, false, "reset"), IG_DISPATCH_FAILED);
	ck_assert_uint_eq(r.status, 502);
	ck_assert_ptr_nonnull(strstr(r.message, "after 2 attempt(s)"));
	ck_assert_ptr_nonnull(strstr(r.message, second->url));
	ck_assert_int_eq(ig_dispatch_retry(&t.gw, &r.w, true, "timeout"), IG_DISPATCH_FAILED);
	ck_assert_uint_eq(r.status, 504);
	ck_assert_int_eq(atomic_load(&t.b->inflight) + atomic_load(&b2->inflight), 0);
	rec_free(&t, &r);
	two_free(&t);
}
END_TEST

/* Queue deadlines: 503 queue_timeout, per class. */
START_TEST(waiters_past_their_deadline_get_503)
{
	struct two t;
	two_init(&t);
	t.cfg.queue_timeout_high_ms = 1000000;
	struct rec n, h;
	rec_init(&t, &n, "model-a", "", IG_CLASS_NORMAL);
	rec_init(&t, &h, "model-a", "", IG_CLASS_HIGH);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &n.w), IG_DISPATCH_QUEUED);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &h.w), IG_DISPATCH_QUEUED);
	ig_dispatch_expire(&t.gw, ig_now_ms() + 60001);
	ck_assert_uint_eq(n.status, 503);
	ck_assert_str_eq(n.code, "queue_timeout");
	ck_assert_uint_eq(h.status, 0);
	ck_assert_uint_eq(t.gw.dispatch_stats.queue_timeouts, 1);
	ck_assert_uint_eq(t.gw.sched.qlen, 1);
	ig_dispatch_cancel(&t.gw, &h.w);
	rec_free(&t, &n);
	rec_free(&t, &h);
	two_free(&t);
}
END_TEST

/* A view of the cluster (cluster_view.h) as cluster.c publishes it: other
 * gateways hold `waiting` high and normal requests for `model`, in a run
 * of waiting that began at view `since`. */
static struct ig_cluster_view *others_wait(const char *model, long waiting, uint64_t seq, uint64_t since)
{
	struct ig_cluster_view *v = calloc(1, sizeof(*v));
	ck_assert_ptr_nonnull(v);
	v->seq = seq;
	v->models = calloc(1, sizeof(*v->models));
	v->nmodels = 1;
	v->models[0] = (struct ig_cluster_view_model){.name = strdup(model), .others_waiting = waiting,
						      .waiting_since = waiting > 0 ? since : 0};
	ig_cluster_view_seal(v);
	return v;
}

static void publish(struct ig_gw *gw, struct ig_cluster_view *v)
{
	ig_cluster_view_free(gw->cluster_view);
	gw->cluster_view = v;
}

/* While another gateway holds normal requests waiting for model-a (cluster.h),
 * this one's low request waits, though a slot is free, but for low's turn:
 * after low_every - 1 of this gateway's requests of the model ended, the
 * next slot goes to it. With none waiting elsewhere, low goes at once. */
START_TEST(low_waits_for_other_gateways_but_for_its_turn)
{
	struct two t;
	two_init(&t);
	t.gw.sched.low_every = 3;
	struct ig_model *ma = ig_sched_find(&t.gw.sched, "model-a");
	publish(&t.gw, others_wait("model-a", 2, 1, 1));
	atomic_store(&t.a->inflight, 0);
	struct rec n1, n2, low, low2;
	rec_init(&t, &n1, "model-a", "", IG_CLASS_NORMAL);
	rec_init(&t, &n2, "model-a", "", IG_CLASS_NORMAL);
	rec_init(&t, &low, "model-a", "", IG_CLASS_LOW);
	rec_init(&t, &low2, "model-a", "", IG_CLASS_LOW);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &n1.w), IG_DISPATCH_STARTED);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &low.w), IG_DISPATCH_QUEUED);
	struct ig_pick_outcome ok = {.ok = true, .completion_tokens = -1};
	ig_dispatch_end(&t.gw, &n1.w, &ok); /* 1 of 3: the slot is left to the others */
	ig_dispatch_drain(&t.gw);
	ck_assert_ptr_null(low.started);
	ck_assert_uint_eq(ma->ends_held, 1);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &n2.w), IG_DISPATCH_STARTED); /* normal is not held */
	ig_dispatch_end(&t.gw, &n2.w, &ok); /* 2 of 3: low's turn */
	ig_dispatch_drain(&t.gw);
	ck_assert_ptr_eq(low.started, t.a);
	ck_assert_uint_eq(ma->ends_held, 0);
	ig_dispatch_end(&t.gw, &low.w, &ok);
	ck_assert_uint_eq(ma->ends_held, 1);
	/* none waiting elsewhere: low is not held */
	publish(&t.gw, others_wait("model-a", 0, 2, 0));
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &low2.w), IG_DISPATCH_STARTED);
	ig_dispatch_end(&t.gw, &low2.w, &ok);
	ck_assert_uint_eq(ma->ends_held, 0);
	/* they wait again (a new run): the ends counted before do not make
	 * low's turn come sooner */
	publish(&t.gw, others_wait("model-a", 2, 3, 3));
	struct rec n3, n4, low3;
	rec_init(&t, &n3, "model-a", "", IG_CLASS_NORMAL);
	rec_init(&t, &n4, "model-a", "", IG_CLASS_NORMAL);
	rec_init(&t, &low3, "model-a", "", IG_CLASS_LOW);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &n3.w), IG_DISPATCH_STARTED);
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &low3.w), IG_DISPATCH_QUEUED);
	ig_dispatch_end(&t.gw, &n3.w, &ok);
	ig_dispatch_drain(&t.gw);
	ck_assert_ptr_null(low3.started); /* 1 of 3 in this run */
	publish(&t.gw, others_wait("model-a", 2, 4, 4)); /* a new run began at view 4 */
	ck_assert_int_eq(ig_dispatch_submit(&t.gw, &n4.w), IG_DISPATCH_STARTED);
	ig_dispatch_end(&t.gw, &n4.w, &ok);
	ig_dispatch_drain(&t.gw);
	ck_assert_uint_eq(ma->ends_held, 1);
	ck_assert_ptr_null(low3.started); /* 1 of 3 again: the count restarted */
	ig_dispatch_cancel(&t.gw, &low3.w);
	rec_free(&t, &n3);
	rec_free(&t, &n4);
	rec_free(&t, &low3);
	publish(&t.gw, NULL);
	rec_free(&t, &n1);
	rec_free(&t, &n2);
	rec_free(&t, &low);
	rec_free(&t, &low2);
	two_free(&t);
}
END_TEST

IG_CHECK_MAIN("dispatch", queue_is_fifo_and_bounded, models_have_their_own_pools_and_queues,
	      unknown_lists_make_requests_wait, retries_skip_tried_backends_then_fail,
	      waiters_past_their_deadline_get_503, low_waits_for_other_gateways_but_for_its_turn)
