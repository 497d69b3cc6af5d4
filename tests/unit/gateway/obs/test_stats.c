/* Unit tests for what the gateway counts (src/gateway/obs/stats.c): a finished
 * request counted once by route, status and backend, its duration in the
 * bucket of its bound; a model's answers with their time per output token;
 * a queue wait by class, a class out of range ignored; the reactors'
 * received requests added up; the modules' sources registered in order and
 * removed by their argument. What /metrics prints of them is
 * test_metrics.c's. A gateway with no socket. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "net/rx.h"
#include "obs/stats.h"
#include "../../check_main.h"

struct fixture {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx[2];
};

static void setup(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	ig_routes_default(&f->cfg.routes);
	f->gw.cfg = &f->cfg;
	f->gw.rx = f->rx;
	f->gw.nrx = 2;
}

static void teardown(struct fixture *f)
{
	ig_stats_free(&f->gw);
	ig_routes_clear(&f->cfg.routes);
}

/* The bucket a duration lands in: the first bound at or above it. */
static int bucket_of(const struct ig_metrics_hist *h)
{
	for (int i = 0; i <= IG_HIST_BUCKETS; i++)
		if (h->counts[i])
			return i;
	return -1;
}

START_TEST(a_request_is_counted_once_by_route_status_and_backend)
{
	struct fixture f;
	setup(&f);
	struct ig_metrics_stats *s = &f.gw.metrics;
	ig_stats_observe(&f.gw, 0, 200, false, "http://a", 30000, -1);      /* 30 ms: the 0.05 s bucket */
	ig_stats_observe(&f.gw, 0, 200, false, "http://a", 30000, 4000);
	ig_stats_observe(&f.gw, 0, 502, true, "http://b", 2000000, 10000); /* 2 s: the 2.5 s bucket */
	ig_stats_observe(&f.gw, (int)f.cfg.routes.n, 200, false, "http://a", 1, -1); /* no such route */
	ig_stats_observe(&f.gw, 0, 0, false, "http://a", 1, -1);           /* no status */
	ck_assert_uint_eq(s->ncounts, 2);
	ck_assert_str_eq(s->counts[0].backend, "http://a");
	ck_assert_uint_eq(s->counts[0].n, 2);
	ck_assert_uint_eq(s->counts[1].status, 502);
	ck_assert_uint_eq(s->counts[1].n, 1);
	ck_assert_uint_eq(s->stream_errors, 1);
	ck_assert_uint_eq(s->duration[0].n, 3);
	ck_assert_uint_eq(s->ttfb[0].n, 2); /* only the streams */
	ck_assert_double_eq_tol(s->duration[0].sum, 2.06, 1e-9);
	struct ig_metrics_hist one = {0};
	one.counts[3] = 1;
	ck_assert_int_eq(bucket_of(&one), 3);
	ck_assert_double_eq(ig_stats_bounds[3], 0.05);
	ck_assert_uint_eq(s->duration[0].counts[3], 2);
	ck_assert_double_eq(ig_stats_bounds[8], 2.5);
	ck_assert_uint_eq(s->duration[0].counts[8], 1);
	teardown(&f);
}
END_TEST

START_TEST(a_models_answers_and_the_queue_waits)
{
	struct fixture f;
	setup(&f);
	ck_assert_ptr_null(ig_stats_model_stats(&f.gw.metrics, "m"));
	/* 1 s, first token at 0.1 s, 10 tokens: 0.1 s per token after the first */
	ig_stats_observe_model(&f.gw, "m", 1000000, 100000, 50, 10);
	ig_stats_observe_model(&f.gw, "m", 500000, -1, -1, -1); /* not streamed, tokens unknown */
	ig_stats_observe_model(&f.gw, NULL, 1, 1, 1, 1);
	const struct ig_model_stats *m = ig_stats_model_stats(&f.gw.metrics, "m");
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(f.gw.metrics.nmodels, 1);
	ck_assert_uint_eq(m->duration.n, 2);
	ck_assert_uint_eq(m->ttft.n, 1);
	ck_assert_uint_eq(m->tpot.n, 1);
	ck_assert_double_eq_tol(m->tpot.sum, 0.1, 1e-9);
	ck_assert_uint_eq(m->prompt_tokens, 50);
	ck_assert_uint_eq(m->completion_tokens, 10);

	ig_stats_observe_wait(&f.gw, IG_CLASS_LOW, 250);
	ig_stats_observe_wait(&f.gw, -1, 250);
	ig_stats_observe_wait(&f.gw, IG_NCLASSES, 250);
	uint64_t n = 0;
	for (int k = 0; k < IG_NCLASSES; k++)
		n += f.gw.metrics.queue_wait[k].n;
	ck_assert_uint_eq(n, 1);
	ck_assert_double_eq_tol(f.gw.metrics.queue_wait[IG_CLASS_LOW].sum, 0.25, 1e-9);

	f.rx[0].requests = 7;
	f.rx[1].requests = 5;
	ck_assert_uint_eq(ig_stats_requests_received(&f.gw), 12);
	teardown(&f);
}
END_TEST

static json_t *say(void *arg)
{
	return json_string(arg);
}

START_TEST(sources_are_kept_in_order_and_removed_by_their_argument)
{
	struct fixture f;
	setup(&f);
	static char a[] = "a", b[] = "b";
	ck_assert_int_eq(ig_stats_register(&f.gw, &(struct ig_metrics_source){.name = "first", .json = say, .arg = a}), 0);
	ck_assert_int_eq(ig_stats_register_at(&f.gw, &(struct ig_metrics_source){.name = "second", .json = say, .arg = b},
					      IG_METRICS_ORDER_SERVER), 0);
	ck_assert_uint_eq(f.gw.reports->n, 2);
	ck_assert_str_eq(f.gw.reports->v[0].src.name, "first");
	ck_assert_int_eq(f.gw.reports->v[0].order, IG_METRICS_ORDER_LAST);
	ck_assert_int_eq(f.gw.reports->v[1].order, IG_METRICS_ORDER_SERVER);
	ig_stats_unregister(&f.gw, a);
	ck_assert_uint_eq(f.gw.reports->n, 1);
	ck_assert_str_eq(f.gw.reports->v[0].src.name, "second");
	ig_stats_unregister(&f.gw, a); /* gone already: nothing */
	ck_assert_uint_eq(f.gw.reports->n, 1);
	teardown(&f);
}
END_TEST

IG_CHECK_MAIN("stats", a_request_is_counted_once_by_route_status_and_backend, a_models_answers_and_the_queue_waits,
	      sources_are_kept_in_order_and_removed_by_their_argument)
