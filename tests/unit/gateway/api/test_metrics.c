/* Unit tests for the gateway's self-reports (src/gateway/api/metrics.c,
 * included to reach its static functions): the Prometheus exposition
 * format as a scraper reads it (one HELP and one TYPE line before a
 * family's samples, histogram buckets cumulative and ending in +Inf equal
 * to _count, label values escaped), and the sources modules above register
 * (they show while registered, and not after). A gateway with no socket. */
#include "../../../../src/gateway/api/metrics.c"

#include <check.h>

#include "infergate/log.h"
#include "path/proxy.h"

#include "../../check_main.h"

struct fixture {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx[1];
};

static void setup(struct fixture *f, const char *model)
{
	memset(f, 0, sizeof(*f));
	ig_routes_default(&f->cfg.routes);
	f->gw.cfg = &f->cfg;
	f->gw.rx = f->rx;
	f->gw.nrx = 1;
	ig_sched_init(&f->gw.sched);
	ck_assert_int_eq(ig_proxy_init(&f->gw), 0); /* the request path's family, as boot registers it */
	if (model) {
		struct ig_backend *b = ig_backend_fleet_add(&f->gw.fleet, "http://127.0.0.1:9/a\"b", 1, 0);
		ck_assert_ptr_nonnull(b);
		b->models_conf = calloc(1, sizeof(char *));
		b->models_conf[0] = strdup(model);
		b->n_models_conf = 1;
		ck_assert_int_eq(ig_sched_rebuild(&f->gw.sched, &f->gw.fleet), 0);
	}
	ig_log_set_level(IG_LOG_ERROR);
}

static void teardown(struct fixture *f)
{
	ig_stats_free(&f->gw);
	ig_sched_free(&f->gw.sched);
	ig_backend_fleet_free(&f->gw.fleet);
	ig_routes_clear(&f->cfg.routes);
}

/* The name of a sample line's family: up to '{' or ' ', without a
 * histogram's _bucket/_sum/_count. */
static void family(const char *line, char *out, size_t n, bool hist)
{
	size_t k = strcspn(line, "{ ");
	snprintf(out, n, "%.*s", (int)k, line);
	static const char *suffix[] = {"_bucket", "_sum", "_count"};
	for (int i = 0; hist && i < 3; i++) {
		size_t l = strlen(out), s = strlen(suffix[i]);
		if (l > s && strcmp(out + l - s, suffix[i]) == 0)
			out[l - s] = 0;
	}
}

START_TEST(every_family_has_one_help_and_one_type_before_its_samples)
{
	struct fixture f;
	setup(&f, "m");
	ig_stats_observe(&f.gw, 0, 200, false, "http://127.0.0.1:9/a\"b", 3000, 1000);
	char *text = ig_metrics_text(&f.gw);
	json_t *help = json_object(), *type = json_object();
	size_t samples = 0;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char name[128];
		if (strncmp(line, "# HELP ", 7) == 0 || strncmp(line, "# TYPE ", 7) == 0) {
			family(line + 7, name, sizeof(name), false);
			json_t *seen = line[2] == 'H' ? help : type;
			ck_assert_msg(!json_object_get(seen, name), "a second %.6s line for %s", line, name);
			const char *t = line + 7 + strlen(name) + 1;
			if (line[2] == 'T')
				ck_assert_msg(strcmp(t, "counter") == 0 || strcmp(t, "gauge") == 0 || strcmp(t, "histogram") == 0,
					      "%s", line);
			json_object_set_new(seen, name, json_string(line[2] == 'T' ? t : ""));
			continue;
		}
		ck_assert_msg(line[0] != '#', "%s", line);
		family(line, name, sizeof(name), false);
		if (!json_object_get(type, name)) /* a histogram's series */
			family(line, name, sizeof(name), true);
		ck_assert_msg(json_object_get(help, name) && json_object_get(type, name), "no HELP/TYPE before %s", line);
		samples++;
	}
	ck_assert_uint_gt(samples, 50);
	ck_assert_str_eq(json_string_value(json_object_get(type, "infergate_request_duration_seconds")), "histogram");
	ck_assert_str_eq(json_string_value(json_object_get(type, "infergate_model_queue_depth")), "gauge");
	json_decref(help);
	json_decref(type);
	free(text);
	teardown(&f);
}
END_TEST

/* The value of the sample that starts with `prefix`. */
static double sample(const char *text, const char *prefix)
{
	const char *p = strstr(text, prefix);
	ck_assert_msg(p != NULL, "no sample %s", prefix);
	return strtod(strchr(p + strlen(prefix), ' ') + 1, NULL);
}

START_TEST(histogram_buckets_are_cumulative_and_end_in_inf)
{
	struct fixture f;
	setup(&f, NULL);
	/* 3 ms, 200 ms, 10,000 s (past every bound) on the first route */
	ig_stats_observe(&f.gw, 0, 200, false, "", 3000, -1);
	ig_stats_observe(&f.gw, 0, 200, false, "", 200000, -1);
	ig_stats_observe(&f.gw, 0, 502, false, "", 10000000000ull, -1);
	char *text = ig_metrics_text(&f.gw);
	const char *route = ig_route_path(&f.cfg, 0);
	char prefix[256];
	double last = 0;
	for (int i = 0; i < IG_HIST_BUCKETS; i++) {
		snprintf(prefix, sizeof(prefix), "infergate_request_duration_seconds_bucket{route=\"%s\",le=\"%g\"}", route,
			 ig_stats_bounds[i]);
		double v = sample(text, prefix);
		ck_assert_msg(v >= last, "%s %g after %g", prefix, v, last);
		last = v;
	}
	snprintf(prefix, sizeof(prefix), "infergate_request_duration_seconds_bucket{route=\"%s\",le=\"0.005\"}", route);
	ck_assert_double_eq(sample(text, prefix), 1);
	snprintf(prefix, sizeof(prefix), "infergate_request_duration_seconds_bucket{route=\"%s\",le=\"0.25\"}", route);
	ck_assert_double_eq(sample(text, prefix), 2);
	ck_assert_double_eq(last, 2); /* the 10,000 s one is in no bound */
	snprintf(prefix, sizeof(prefix), "infergate_request_duration_seconds_bucket{route=\"%s\",le=\"+Inf\"}", route);
	ck_assert_double_eq(sample(text, prefix), 3);
	snprintf(prefix, sizeof(prefix), "infergate_request_duration_seconds_count{route=\"%s\"}", route);
	ck_assert_double_eq(sample(text, prefix), 3);
	snprintf(prefix, sizeof(prefix), "infergate_request_duration_seconds_sum{route=\"%s\"}", route);
	ck_assert_double_eq_tol(sample(text, prefix), 10000.203, 1e-6);
	free(text);
	teardown(&f);
}
END_TEST

START_TEST(label_values_are_escaped)
{
	struct fixture f;
	setup(&f, "we\"ird\\na\nme");
	ig_stats_observe(&f.gw, 0, 200, false, "http://127.0.0.1:9/a\"b", 1000, -1);
	char *text = ig_metrics_text(&f.gw);
	/* a quote, a backslash and a newline in a model's name stay inside its label */
	ck_assert_ptr_nonnull(strstr(text, "infergate_model_inflight{model=\"we\\\"ird\\\\na\\nme\"} 0\n"));
	ck_assert_ptr_nonnull(strstr(text, "infergate_backend_up{backend=\"http://127.0.0.1:9/a\\\"b\"} 0\n"));
	ck_assert_ptr_nonnull(strstr(text, ",backend=\"http://127.0.0.1:9/a\\\"b\"} 1\n"));
	/* every line is a comment or name{labels} value: no quote left open */
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (line[0] == '#')
			continue;
		int quotes = 0;
		for (const char *c = line; *c; c++) {
			if (*c == '\\') {
				c++;
				continue;
			}
			quotes += *c == '"';
		}
		ck_assert_msg(quotes % 2 == 0, "%s", line);
	}
	free(text);
	teardown(&f);
}
END_TEST

static json_t *src_json(void *arg)
{
	return json_pack("{s:i}", "n", *(int *)arg);
}

static void src_prom(void *arg, struct ig_buf *out)
{
	ig_buf_printf(out, "# HELP infergate_test_thing A thing.\n# TYPE infergate_test_thing gauge\n"
			   "infergate_test_thing %d\n", *(int *)arg);
}

START_TEST(registered_sources_show_until_removed)
{
	struct fixture f;
	setup(&f, NULL);
	int n = 42;
	ck_assert_int_eq(ig_stats_register(&f.gw, &(struct ig_metrics_source){"things", src_json, src_prom, &n}), 0);
	char *text = ig_metrics_text(&f.gw);
	ck_assert_double_eq(sample(text, "\ninfergate_test_thing"), 42);
	free(text);
	char *js = ig_metrics_backends_json(&f.gw);
	json_t *j = json_loads(js, 0, NULL);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "things"), "n")), 42);
	json_decref(j);
	free(js);
	ig_stats_unregister(&f.gw, &n);
	text = ig_metrics_text(&f.gw);
	ck_assert_ptr_null(strstr(text, "infergate_test_thing"));
	free(text);
	js = ig_metrics_backends_json(&f.gw);
	ck_assert_ptr_null(strstr(js, "\"things\""));
	free(js);
	teardown(&f);
}
END_TEST

static void src_prom_b(void *arg, struct ig_buf *out)
{
	ig_buf_printf(out, "# HELP infergate_test_other Another.\n# TYPE infergate_test_other gauge\n"
			   "infergate_test_other %d\n", *(int *)arg);
}

/* A module's families go where their order puts them among the gateway's
 * (and those of one order in the order registered); those of no order after
 * all of them. */
START_TEST(families_go_where_their_order_puts_them)
{
	struct fixture f;
	setup(&f, NULL);
	int n = 7, m = 8, last = 9;
	ck_assert_int_eq(ig_stats_register(&f.gw, &(struct ig_metrics_source){"last", NULL, src_prom, &last}), 0);
	ck_assert_int_eq(ig_stats_register_at(&f.gw, &(struct ig_metrics_source){"b", NULL, src_prom_b, &m},
						IG_METRICS_ORDER_QUEUE), 0);
	ck_assert_int_eq(ig_stats_register_at(&f.gw, &(struct ig_metrics_source){"a", NULL, src_prom, &n},
						IG_METRICS_ORDER_QUEUE), 0);
	char *text = ig_metrics_text(&f.gw);
	const char *aborts = strstr(text, "# HELP infergate_client_aborts_total");
	const char *other = strstr(text, "# HELP infergate_test_other");
	const char *thing = strstr(text, "# HELP infergate_test_thing");
	const char *errors = strstr(text, "# HELP infergate_stream_errors_total");
	const char *probes = strstr(text, "# HELP infergate_backend_probes_total");
	ck_assert_ptr_nonnull(aborts);
	ck_assert_ptr_nonnull(errors);
	ck_assert_ptr_nonnull(probes);
	/* QUEUE is between the clients' aborts and the answers' errors */
	ck_assert(aborts < other && other < thing && thing < errors);
	ck_assert_double_eq(sample(text, "\ninfergate_test_other"), 8);
	ck_assert_double_eq(sample(text, "\ninfergate_test_thing"), 7);
	/* the one of no order: after every family of the gateway's */
	const char *second = strstr(thing + 1, "# HELP infergate_test_thing");
	ck_assert_ptr_nonnull(second);
	ck_assert(second > probes);
	free(text);
	ig_stats_unregister(&f.gw, &m);
	text = ig_metrics_text(&f.gw);
	ck_assert_ptr_null(strstr(text, "infergate_test_other"));
	free(text);
	teardown(&f);
}
END_TEST

/* The request path's family (path/proxy_metrics.c, registered by
 * ig_proxy_init as boot does) shows its counters where it always did:
 * after the reactors' requests, before the clients that left. */
START_TEST(the_request_paths_family_shows_its_counters_in_its_place)
{
	struct fixture f;
	setup(&f, NULL);
	f.gw.stats.retries = 3;
	f.gw.stats.hedges[1] = 2;
	f.gw.stats.idem[2] = 5;
	f.gw.stats.continued[1] = 4;
	char *text = ig_metrics_text(&f.gw);
	ck_assert_double_eq(sample(text, "\ninfergate_retries_total"), 3);
	ck_assert_ptr_nonnull(strstr(text, "\ninfergate_hedges_total{outcome=\"won\"} 2\n"));
	ck_assert_ptr_nonnull(strstr(text, "\ninfergate_idempotency_requests_total{outcome=\"replayed\"} 5\n"));
	ck_assert_ptr_nonnull(strstr(text, "\ninfergate_stream_continuations_total{reason=\"error_event\"} 4\n"));
	const char *reactors = strstr(text, "# HELP infergate_reactor_requests_total");
	const char *retries = strstr(text, "# HELP infergate_retries_total");
	const char *aborts = strstr(text, "# HELP infergate_client_aborts_total");
	ck_assert_ptr_nonnull(reactors);
	ck_assert_ptr_nonnull(retries);
	ck_assert_ptr_nonnull(aborts);
	ck_assert(reactors < retries && retries < aborts);
	ck_assert_ptr_null(strstr(retries + 1, "# HELP infergate_retries_total")); /* once */
	free(text);
	teardown(&f);
}
END_TEST

IG_CHECK_MAIN("metrics", every_family_has_one_help_and_one_type_before_its_samples,
	      histogram_buckets_are_cumulative_and_end_in_inf, label_values_are_escaped,
	      registered_sources_show_until_removed, families_go_where_their_order_puts_them,
	      the_request_paths_family_shows_its_counters_in_its_place)
