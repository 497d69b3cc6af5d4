/* Unit tests for src/gateway/obs/trace.c: W3C traceparent parsing, the
 * parent-based sampling, and the spans' OTLP JSON (ids, parents, kinds,
 * times, attributes). The exporter runs against a receiver in
 * tests/integration/test_tracing.py. */
#include "config.h"
#include <check.h>
#include <string.h>

#include "obs/trace.h"
#include "../../check_main.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

START_TEST(traceparent_parsing_follows_the_spec)
{
	uint8_t t[16], p[8], f;
	ck_assert_int_eq(ig_trace_parse(TP, t, p, &f), 0);
	ck_assert_int_eq(t[0], 0x4b);
	ck_assert_int_eq(t[15], 0x36);
	ck_assert_int_eq(p[7], 0xb7);
	ck_assert_int_eq(f, 1);
	static const char *const bad[] = {
		NULL, "", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",       /* short */
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",              /* 00: exactly 55 */
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",                /* version ff */
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",                /* upper case */
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",                /* zero trace id */
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",                /* zero parent */
		"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",                /* separator */
		"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",                /* not hex */
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",               /* later: '-' next */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(ig_trace_parse(bad[i], t, p, &f) < 0, "accepted %s", bad[i] ? bad[i] : "NULL");
	/* a later version may add fields after a '-' */
	ck_assert_int_eq(ig_trace_parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", t, p, &f), 0);
}
END_TEST

static struct ig_tracer *tracer(double ratio)
{
	static struct ig_conf cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.trace_endpoint = "http://127.0.0.1:9/v1/traces"; /* nothing listens: nothing is sent here */
	cfg.trace_headers = "";
	cfg.trace_service = "test";
	cfg.trace_ratio = ratio;
	cfg.trace_delay_ms = 600000;
	char *err = NULL;
	struct ig_tracer *tr = ig_tracer_start(&cfg, &err);
	ck_assert_ptr_null(err);
	ck_assert_ptr_nonnull(tr);
	return tr;
}

static const char *attr_of(json_t *span, const char *key)
{
	size_t i;
	json_t *a;
	json_array_foreach(json_object_get(span, "attributes"), i, a)
		if (strcmp(json_string_value(json_object_get(a, "key")), key) == 0) {
			json_t *v = json_object_get(a, "value");
			json_t *s = json_object_get(v, "stringValue");
			return s ? json_string_value(s) : json_string_value(json_object_get(v, "intValue"));
		}
	return NULL;
}

/* A client's sampled traceparent is continued (its trace id, its span as
 * the server span's parent, the attempts children of the server span); an
 * unsampled one is continued unrecorded; a malformed one starts a new
 * trace, recorded by the ratio. */
START_TEST(parent_based_sampling_and_the_spans)
{
	struct ig_tracer *tr = tracer(0);
	struct ig_trace t;
	ig_trace_begin(&t, tr, TP, "vendor=x");
	ck_assert(t.on && t.sampled && t.remote);
	ck_assert_str_eq(t.state, "vendor=x");
	char out[56];
	ig_trace_format(&t, t.span, out);
	ck_assert_int_eq(strncmp(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36), 0);
	ck_assert_str_eq(out + 53, "01");
	ig_trace_attempt_begin(&t, "chat m");
	ig_span_str(t.attempt, "server.address", "http://b1");
	ig_trace_attempt_end(&t, 502, "HTTP 502");
	ig_trace_attempt_begin(&t, "chat m");
	ig_trace_attempt_end(&t, 200, NULL);
	json_t *q = ig_trace_child(&t, "queue", IG_SPAN_INTERNAL, t.base_us, t.base_us + 1500);
	ck_assert_ptr_nonnull(q);
	json_t *srv = ig_trace_server_span(&t, "POST /v1/chat/completions");
	ig_span_int(srv, "gen_ai.usage.output_tokens", 7);
	ck_assert_uint_eq(json_array_size(t.spans), 3);
	json_t *a1 = json_array_get(t.spans, 0), *a2 = json_array_get(t.spans, 1);
	char sid[17];
	snprintf(sid, sizeof(sid), "%s", json_string_value(json_object_get(srv, "spanId")));
	ck_assert_str_eq(json_string_value(json_object_get(srv, "parentSpanId")), "00f067aa0ba902b7");
	ck_assert_str_eq(json_string_value(json_object_get(srv, "traceId")), "4bf92f3577b34da6a3ce929d0e0e4736");
	ck_assert_int_eq(json_integer_value(json_object_get(srv, "kind")), IG_SPAN_SERVER);
	ck_assert_str_eq(json_string_value(json_object_get(a1, "parentSpanId")), sid);
	ck_assert_int_eq(json_integer_value(json_object_get(a1, "kind")), IG_SPAN_CLIENT);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(a1, "status"), "code")), 2);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(a2, "status"), "code")), 1);
	ck_assert_str_eq(attr_of(a1, "http.response.status_code"), "502");
	ck_assert_str_eq(attr_of(a1, "server.address"), "http://b1");
	ck_assert_str_eq(attr_of(srv, "gen_ai.usage.output_tokens"), "7");
	/* the two attempts have ids of their own; the last one is t.attempt_id */
	ck_assert_str_ne(json_string_value(json_object_get(a1, "spanId")), json_string_value(json_object_get(a2, "spanId")));
	/* the queue's 1.5 ms, in nanoseconds as strings */
	unsigned long long s0 = strtoull(json_string_value(json_object_get(q, "startTimeUnixNano")), NULL, 10);
	unsigned long long s1 = strtoull(json_string_value(json_object_get(q, "endTimeUnixNano")), NULL, 10);
	ck_assert_uint_eq(s1 - s0, 1500000);
	ig_trace_end(&t, tr, srv);
	struct ig_tracer_stats st;
	ig_tracer_stats(tr, &st);
	ck_assert_int_eq(st.queued, 4);

	/* unsampled parent: continued, not recorded (ratio 1 changes nothing) */
	ig_tracer_stop(tr);
	tr = tracer(1);
	ig_trace_begin(&t, tr, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", NULL);
	ck_assert(t.on && !t.sampled && t.remote);
	ig_trace_attempt_begin(&t, "chat m");
	ck_assert_ptr_null(t.attempt);
	ig_trace_format(&t, t.attempt_id, out);
	ck_assert_str_eq(out + 53, "00");
	ck_assert_ptr_null(ig_trace_server_span(&t, "x"));
	ig_trace_end(&t, tr, NULL);
	/* malformed: a new trace, recorded at ratio 1 */
	ig_trace_begin(&t, tr, "00-xyz", NULL);
	ck_assert(t.on && t.sampled && !t.remote);
	ck_assert_int_ne(memcmp(t.trace_id, "\x4b\xf9", 2), 0);
	json_t *root = ig_trace_server_span(&t, "x");
	ck_assert_ptr_null(json_object_get(root, "parentSpanId"));
	ig_trace_end(&t, tr, root);
	ig_tracer_stop(tr);
	/* ratio 0: a new trace is not recorded */
	tr = tracer(0);
	ig_trace_begin(&t, tr, NULL, NULL);
	ck_assert(t.on && !t.sampled);
	ig_trace_end(&t, tr, NULL);
	ig_tracer_stop(tr);
	/* no tracer: nothing on */
	ig_trace_begin(&t, NULL, TP, NULL);
	ck_assert(!t.on && !t.sampled);
	ig_trace_end(&t, NULL, NULL);
}
END_TEST

/* About a tenth of new traces at ratio 0.1 (by their random ids). */
START_TEST(ratio_samples_about_that_share)
{
	struct ig_tracer *tr = tracer(0.1);
	int n = 0;
	for (int i = 0; i < 10000; i++) {
		struct ig_trace t;
		ig_trace_begin(&t, tr, NULL, NULL);
		n += t.sampled;
		ig_trace_end(&t, NULL, NULL);
	}
	ck_assert_int_gt(n, 850);
	ck_assert_int_lt(n, 1150);
	ig_tracer_stop(tr);
}
END_TEST

IG_CHECK_MAIN("trace", traceparent_parsing_follows_the_spec, parent_based_sampling_and_the_spans,
	      ratio_samples_about_that_share)
