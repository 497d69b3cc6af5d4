/* Unit tests for infergate-bulk: SSE rebuilding, histograms, the generator
 * and the flags, the preflight's decisions, per-model counts, the automatic
 * concurrency (the batch files' library it uses: tests/unit/batchfile/). The
 * .c files are included so static functions can be tested. */
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
#define main bulk_main
#include "../../../src/bulk/main.c"
#include "../check_main.h"
#undef main

static char *tmp_path(const char *name)
{
	static char dir[64];
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/test_bulk.XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(dir));
	}
	return ig_strdupf("%s/%s", dir, name);
}

static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}





static const char *chat_sse =
	"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\","
	"\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"},\"finish_reason\":null}]}\r\n\r\n"
	": a comment\n\n"
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n"
	"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n"
	"data: [DONE]\n\n";

START_TEST(sse_rebuilds_chat_body_across_splits)
{
	size_t n = strlen(chat_sse);
	for (size_t step = 1; step <= n; step += (step < 8 ? 1 : 37)) {
		struct ig_stream s;
		int firsts = 0;
		const char *why = NULL;
		ig_stream_init(&s);
		for (size_t off = 0; off < n; off += step)
			firsts += ig_stream_feed(&s, chat_sse + off, off + step > n ? n - off : step);
		ck_assert_int_eq(firsts, 1);
		json_t *b = ig_stream_body(&s, IG_EP_CHAT, &why);
		ck_assert_ptr_nonnull(b);
		ck_assert_str_eq(json_string_value(json_object_get(b, "object")), "chat.completion");
		ck_assert_str_eq(json_string_value(json_object_get(b, "id")), "c1");
		json_t *c = json_array_get(json_object_get(b, "choices"), 0);
		ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "message"), "content")), "Hello \xc3\xa9");
		ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "stop");
		ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(b, "usage"), "completion_tokens")), 2);
		json_decref(b);
		ig_stream_free(&s);
	}
}
END_TEST

START_TEST(sse_incomplete_or_error_stream)
{
	struct ig_stream s;
	const char *why = NULL;
	ig_stream_init(&s);
	ig_stream_feed(&s, "data: {\"choices\":[{\"index\":0,\"text\":\"a\"}]}\n\n", 44);
	ck_assert_ptr_null(ig_stream_body(&s, IG_EP_COMPLETIONS, &why));
	ck_assert_ptr_nonnull(strstr(why, "[DONE]"));
	ig_stream_feed(&s, "data: [DONE]\n", 13);
	json_t *b = ig_stream_body(&s, IG_EP_COMPLETIONS, &why);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(b, "choices"), 0), "text")), "a");
	ck_assert_str_eq(json_string_value(json_object_get(b, "object")), "text_completion");
	json_decref(b);
	ig_stream_free(&s);

	ig_stream_init(&s);
	ig_stream_feed(&s, "data: {\"error\":{\"message\":\"boom\"}}\n\ndata: [DONE]\n\n", 50);
	ck_assert_ptr_null(ig_stream_body(&s, IG_EP_CHAT, &why));
	ck_assert_ptr_nonnull(strstr(why, "error"));
	ig_stream_free(&s);
}
END_TEST

START_TEST(hist_quantiles)
{
	struct ig_report_hist *h = calloc(1, sizeof(*h));
	ck_assert_uint_eq(ig_report_hist_quantile(h, 0.5), 0);
	for (uint64_t v = 1; v <= 100000; v++)
		ig_report_hist_add(h, v);
	double q[] = {0.5, 0.9, 0.99};
	for (int i = 0; i < 3; i++) {
		double want = q[i] * 100000, got = (double)ig_report_hist_quantile(h, q[i]);
		ck_assert_msg(got > want * 0.98 && got < want * 1.02, "q%.2f: %f vs %f", q[i], got, want);
	}
	ck_assert_uint_eq(ig_report_hist_quantile(h, 1.0), 100000);
	ig_report_hist_add(h, 1ull << 62); /* absurd values land in the last bucket */
	ck_assert_uint_eq(h->max, 1ull << 62);
	for (uint64_t v = 0; v < 5000000; v += 997)
		ck_assert_uint_le(bucket_of(v), bucket_of(v + 1));
	free(h);
}
END_TEST

START_TEST(generator_is_deterministic_and_parses)
{
	struct ig_buf a, b;
	struct ig_corpus_defaults d = {"m", -1, 0, 0, -1, 0, NULL};
	ig_buf_init(&a);
	ig_buf_init(&b);
	size_t min = (size_t)-1, max = 0;
	for (long i = 0; i < 500; i++) {
		ig_buf_reset(&a);
		ig_buf_reset(&b);
		ig_generate_line(&a, 42, i, i % 2 ? IG_EP_COMPLETIONS : IG_EP_CHAT, NULL, -1);
		ig_generate_line(&b, 42, i, i % 2 ? IG_EP_COMPLETIONS : IG_EP_CHAT, NULL, -1);
		ck_assert_uint_eq(a.len, b.len);
		ck_assert(memcmp(a.data, b.data, a.len) == 0);
		ck_assert_ptr_null(memchr(a.data, '\n', a.len));
		struct ig_corpus_line l;
		char *err = NULL;
		ck_assert_msg(ig_corpus_parse(a.data, a.len, i + 1, &d, &l, &err) == 0, "%s", err);
		char want[32];
		snprintf(want, sizeof(want), "req-%09ld", i + 1);
		ck_assert_str_eq(l.custom_id, want);
		ck_assert_int_eq(l.ep, i % 2 ? IG_EP_COMPLETIONS : IG_EP_CHAT);
		ig_corpus_line_clear(&l);
		if (a.len < min)
			min = a.len;
		if (a.len > max)
			max = a.len;
	}
	ck_assert_uint_gt(max, min * 5); /* varied lengths */
	ig_buf_reset(&b);
	ig_generate_line(&b, 43, 0, IG_EP_CHAT, NULL, -1);
	ig_buf_reset(&a);
	ig_generate_line(&a, 42, 0, IG_EP_CHAT, NULL, -1);
	ck_assert(a.len != b.len || memcmp(a.data, b.data, a.len) != 0);
	ig_buf_free(&a);
	ig_buf_free(&b);
}
END_TEST

static int flags_of(const char *line, struct bulk_opts *o, char **err)
{
	char *argv[32], *copy = strdup(line);
	int argc = 0;
	for (char *t = strtok(copy, " "); t && argc < 31; t = strtok(NULL, " "))
		argv[argc++] = t;
	argv[argc] = NULL;
	*err = NULL;
	int rc = parse_flags(argc, argv, o, err);
	opts_free(o); /* the strings; the numbers stay for the checks */
	free(copy);
	return rc;
}

START_TEST(flags_validate)
{
	struct bulk_opts o;
	char *err;
	ck_assert_int_eq(flags_of("b --input i --output out.jsonl", &o, &err), 0);
	ck_assert_int_eq(o.concurrency, 0); /* auto */
	ck_assert_int_eq(o.retries, 5);
	ck_assert_int_eq(o.shard_n, 1);
	ck_assert_int_eq(flags_of("b --input i --output o --shard 2/3 --url http://h:1/v1/ --concurrency 5", &o, &err), 0);
	ck_assert_int_eq(o.shard_k, 2);
	ck_assert_int_eq(o.shard_n, 3);
	static const char *bad[][2] = {
		{"b --input i", "--output is required"},
		{"b --input i --output o --shard 3/3", "--shard"},
		{"b --input i --output o --shard x", "--shard"},
		{"b --input i --output o --concurrency 0", "--concurrency"},
		{"b --input i --output o --bogus", "unknown flag '--bogus'"},
		{"b --input i --output o --url ftp://x", "--url"},
		{"b --input i --output o --endpoint images", "--endpoint"},
		{"b --input i --output o --api-key-env IG_TEST_NOT_SET_ANYWHERE", "not set"},
		{"b --input i --output o extra", "unexpected argument"},
		{"b --input i --output o --temperature 3", "--temperature"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(flags_of(bad[i][0], &o, &err), -1);
		ck_assert_msg(strstr(err, bad[i][1]), "%s -> %s", bad[i][0], err);
		free(err);
	}
	char *e = NULL, *u = ig_parse_base_url("--url", "http://h:1/v1/", &e);
	ck_assert_str_eq(u, "http://h:1");
	free(u);
}
END_TEST

/* submit's flags: parsed as `infergate-bulk submit ...` parses them. */
static int submit_flags_of(const char *line, char **err)
{
	char *argv[32], *copy = strdup(line);
	int argc = 0;
	struct submit s;
	for (char *t = strtok(copy, " "); t && argc < 31; t = strtok(NULL, " "))
		argv[argc++] = t;
	argv[argc] = NULL;
	*err = NULL;
	sb_init(&s);
	int rc = sb_flags(&s, argc, argv, err);
	sb_free(&s);
	free(copy);
	return rc;
}

START_TEST(submit_flags_quoting_and_rate)
{
	char *err;
	ck_assert_int_eq(submit_flags_of("submit --input i --url http://h/v1 --output o --metadata a=1 --metadata b=", &err), 0);
	ck_assert_int_eq(submit_flags_of("submit --batch batch_1 --url http://h --output o --cancel", &err), 0);
	ck_assert_int_eq(submit_flags_of("submit --input i --url http://h --no-wait", &err), 0);
	static const char *bad[][2] = {
		{"submit --input i --output o", "--url is required"},
		{"submit --url http://h --output o", "--input FILE is required"},
		{"submit --input i --batch b --url http://h --output o", "give one"},
		{"submit --input i --url http://h", "--output FILE is required"},
		{"submit --input i --url http://h --no-wait --output o", "--output: --no-wait downloads nothing"},
		{"submit --input i --url http://h --output o --cancel", "--cancel needs --batch"},
		{"submit --batch b --url http://h --output o --endpoint chat", "--endpoint is for creating"},
		{"submit --batch a/b --url http://h --output o", "--batch: 'a/b' is not a batch id"},
		{"submit --input i --url ftp://h --output o", "--url: 'ftp://h'"},
		{"submit --input i --url http://h --output o --metadata x", "--metadata: 'x' is not KEY=VALUE"},
		{"submit --input i --url http://h --output o --metadata x=1 --metadata x=2", "given twice"},
		{"submit --input i --url http://h --output o --endpoint images", "'images' is not chat, completions"},
		{"submit --input i --url http://h --output o --api-key-env IG_TEST_NOT_SET_ANYWHERE", "not set"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(submit_flags_of(bad[i][0], &err), -1);
		ck_assert_msg(strstr(err, bad[i][1]), "%s -> %s", bad[i][0], err);
		free(err);
	}
	/* 17 pairs: one too many */
	char line[1024] = "submit --input i --url http://h --output o";
	for (int i = 0; i < 17; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), " --metadata=k%d=v", i);
	ck_assert_int_eq(submit_flags_of(line, &err), -1);
	ck_assert_msg(strstr(err, "at most 16"), "%s", err);
	free(err);

	/* the resume command reads back as the same arguments in a shell */
	struct ig_buf b;
	ig_buf_init(&b);
	sb_shell_arg(&b, "out/r-1.jsonl");
	sb_shell_arg(&b, "my file's.jsonl");
	sb_shell_arg(&b, "");
	ck_assert_str_eq(b.data, " out/r-1.jsonl 'my file'\\''s.jsonl' ''");
	ig_buf_free(&b);

	/* lines per second over the samples kept, the oldest dropped */
	struct submit s;
	sb_init(&s);
	ck_assert(sb_rate(&s) < 0);
	for (int i = 0; i < SB_RATE_SAMPLES + 8; i++)
		sb_sample(&s, (uint64_t)i * 2000000u, i < SB_RATE_SAMPLES ? i * 10 : SB_RATE_SAMPLES * 10 + (i - SB_RATE_SAMPLES) * 40);
	ck_assert(sb_rate(&s) > 5.0 && sb_rate(&s) < 20.0);
	sb_free(&s);
}
END_TEST

START_TEST(preflight_finds_duplicates_exactly)
{
	char *in = tmp_path("dup.jsonl");
	struct bulk_opts o;
	struct preflight pf;
	struct bulk_stats st;
	struct ig_corpus_defaults d = {"m", -1, 0, 0, -1, 0, NULL};
	put_file(in, "{\"custom_id\":\"a\",\"prompt\":\"x\"}\n\n{\"custom_id\":\"b\",\"prompt\":\"x\"}\n"
		       "{\"prompt\":\"x\"}\n{\"custom_id\":\"a\",\"prompt\":\"y\"}\n{\"custom_id\":\"line-4\",\"prompt\":\"y\"}\n");
	memset(&o, 0, sizeof(o));
	memset(&pf, 0, sizeof(pf));
	memset(&st, 0, sizeof(st));
	ig_buf_init(&pf.problems);
	ig_journal_done_init(&pf.done);
	o.input = in;
	o.shard_n = 2;
	o.shard_k = 1;
	scan_input(&o, &d, &pf, &st);
	ck_assert_int_eq(st.requests, 5);
	ck_assert_int_eq(st.selected, 2); /* indexes 1 and 3: blank lines have no index */
	ck_assert_int_eq(pf.n_problems, 2);
	ck_assert_msg(strstr(pf.problems.data, "line 5: duplicate custom_id 'a' (first at line 1)"), "%s", pf.problems.data);
	ck_assert_msg(strstr(pf.problems.data, "line 6: duplicate custom_id 'line-4' (first at line 4)"), "%s", pf.problems.data);
	ig_buf_free(&pf.problems);
	for (size_t i = 0; i < pf.n_models; i++)
		free(pf.models[i].name);
	free(pf.models);
	free(pf.skip);
	free(in);
}
END_TEST

/* Per-model counts: none with one model (the summary is unchanged), each
 * model's total, ok, errors and done with two, resumed lines included. */
START_TEST(models_are_counted_apart_only_when_there_are_several)
{
	struct bulk_model m[2] = {{"a", 10, 3, 1, 4, 2, 0, 0}, {"b", 5, 0, 0, 5, 0, 0, 0}};
	struct bulk_stats st = {.models = m, .n_models = 1};
	ck_assert_ptr_null(ig_report_models_json(&st));
	st.n_models = 2;
	ck_assert_int_eq(ig_report_model_index(&st, "b"), 1);
	ck_assert_int_eq(ig_report_model_index(&st, "c"), -1);
	json_t *j = ig_report_models_json(&st);
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	ck_assert_str_eq(s, "{\"a\":{\"done\":10,\"errors\":3,\"ok\":7,\"total\":10},"
			    "\"b\":{\"done\":5,\"errors\":0,\"ok\":5,\"total\":5}}");
	free(s);
	json_decref(j);
	/* The preflight's tally: done lines count for their model, not as to send. */
	struct preflight pf;
	memset(&pf, 0, sizeof(pf));
	note_model(&pf, "a", 1, 0);
	note_model(&pf, "b", 2, 1);
	note_model(&pf, "a", 3, 2);
	note_model(&pf, "a", 4, 0);
	ck_assert_uint_eq(pf.n_models, 2);
	ck_assert_int_eq(pf.models[0].lines, 2);
	ck_assert_int_eq(pf.models[0].first_line, 1);
	ck_assert_int_eq(pf.models[0].resumed_err, 1);
	ck_assert_int_eq(pf.models[1].lines, 0);
	ck_assert_int_eq(pf.models[1].resumed_ok, 1);
	for (size_t i = 0; i < pf.n_models; i++)
		free(pf.models[i].name);
	free(pf.models);
}
END_TEST

/* The preflight's decision on a /v1/models list: a plain entry (SGLang,
 * vLLM) only has to be there; an infergate entry (or alias) also needs a
 * healthy backend; a model only done lines use is not asked for. */
START_TEST(preflight_decides_on_the_model_list)
{
	struct preflight pf;
	memset(&pf, 0, sizeof(pf));
	ig_buf_init(&pf.problems);
	const char *names[] = {"plain", "gw-up", "gw-down", "alias-down", "missing", "only-done", "odd"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		note_model(&pf, names[i], (long)i + 1, i == 5 ? 1 : 0);
	note_model(&pf, "gw-down", 9, 0);
	json_t *data = json_loads("["
		"{\"id\": \"plain\", \"object\": \"model\"},"
		"{\"id\": \"gw-up\", \"infergate\": {\"backends\": 3, \"backends_healthy\": 1}},"
		"{\"id\": \"gw-down\", \"infergate\": {\"backends\": 2, \"backends_healthy\": 0}},"
		"{\"id\": \"alias-down\", \"root\": \"gw-down\","
		" \"infergate\": {\"alias_of\": \"gw-down\", \"backends\": 2, \"backends_healthy\": 0}},"
		"{\"id\": \"odd\", \"infergate\": {\"backends_healthy\": \"0\"}}"
		"]", 0, NULL);
	ck_assert_ptr_nonnull(data);
	check_models(&pf, data, "http://gw:8080");
	const char *p = pf.problems.data;
	ck_assert_int_eq(pf.n_problems, 3);
	ck_assert_msg(strstr(p, "model 'gw-down' (used by 2 lines, first at line 3) is served by http://gw:8080 "
				"but none of its 2 backends is healthy now\n"), "%s", p);
	ck_assert_msg(strstr(p, "model 'alias-down' (used by 1 lines, first at line 4) is served by http://gw:8080 "
				"but none of its 2 backends is healthy now (it is an alias of 'gw-down')\n"), "%s", p);
	ck_assert_msg(strstr(p, "model 'missing' (used by 1 lines, first at line 5) is not served by http://gw:8080 "
				"(it serves: plain, gw-up, gw-down, alias-down, odd)"), "%s", p);
	ck_assert_ptr_null(strstr(p, "'plain'"));
	ck_assert_ptr_null(strstr(p, "'gw-up'"));
	ck_assert_ptr_null(strstr(p, "'only-done'"));
	ck_assert_ptr_null(strstr(p, "'odd'"));
	json_decref(data);
	ig_buf_free(&pf.problems);
	for (size_t i = 0; i < pf.n_models; i++)
		free(pf.models[i].name);
	free(pf.models);
}
END_TEST

/* The summary for people: one "by model" line per model with several, the
 * same text as before with one. */
START_TEST(summary_shows_models_only_when_several)
{
	struct bulk_model m[2] = {{"a", 10, 3, 1, 4, 2, 0, 0}, {"b", 5, 0, 0, 5, 0, 0, 0}};
	struct ig_report_hist *h = calloc(2, sizeof(*h));
	struct bulk_stats st = {.requests = 15, .selected = 15, .resumed_ok = 3, .resumed_err = 1, .ok = 9,
				.failed = 2, .latency = &h[0], .ttft = &h[1], .models = m, .n_models = 1};
	struct bulk_opts o = {.output = "out.jsonl", .errors = "out.errors.jsonl", .shard_n = 1};
	char *text;
	size_t len;
	FILE *f = open_memstream(&text, &len);
	ig_report_summary(&o, &st, f, 1);
	fclose(f);
	ck_assert_msg(!strstr(text, "by model"), "%s", text);
	free(text);
	st.n_models = 2;
	f = open_memstream(&text, &len);
	ig_report_summary(&o, &st, f, 1);
	fclose(f);
	ck_assert_msg(strstr(text, "  by model   a: 7 ok, 3 errors (of 10)\n             b: 5 ok, 0 errors (of 5)\n"
				   "  output "), "%s", text);
	free(text);
	free(h);
}
END_TEST

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

IG_CHECK_MAIN("bulk", sse_rebuilds_chat_body_across_splits, sse_incomplete_or_error_stream, hist_quantiles,
	      generator_is_deterministic_and_parses, flags_validate, preflight_finds_duplicates_exactly,
	      preflight_decides_on_the_model_list, models_are_counted_apart_only_when_there_are_several,
	      summary_shows_models_only_when_several, auto_finds_the_knee_backs_off_and_climbs_again,
	      auto_through_a_gateway_holds_its_slots_plus_headroom, submit_flags_quoting_and_rate)
