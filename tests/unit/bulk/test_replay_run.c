/* Unit tests for src/bulk/replay_run.c: the request a trace line becomes
 * (a Mooncake line: its synthetic prompt, max_tokens, ignore_eos, streamed
 * with usage; a Batch line: its body without "timestamp", streamed), and
 * the backend header read from the answer. The open loop itself runs
 * against simulators in tests/integration/test_replay.py. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/bulk/stream.c"
#include "../../../src/bulk/report.c"
#include "../../../src/bulk/autoconc.c"
#include "../../../src/bulk/replay_run.c"
#include "../check_main.h"

static char *write_tmp(const char *text)
{
	char *path = strdup("/tmp/ig-replay-run-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void load(const char *path, struct ig_trace *t)
{
	struct ig_trace_opts to = {0, 0, 0, 512};
	struct ig_buf pb;
	long n = 0;
	ig_buf_init(&pb);
	ck_assert_int_eq(ig_trace_load(t, path, &to, &pb, &n), 0);
	ig_buf_free(&pb);
}

START_TEST(a_mooncake_line_becomes_a_streamed_request_of_its_lengths)
{
	char *path = write_tmp("{\"timestamp\": 0, \"input_length\": 700, \"output_length\": 42, \"hash_ids\": [5, 6]}\n"
			       "{\"timestamp\": 9, \"input_length\": 600, \"output_length\": 0, \"hash_ids\": [5, 7]}\n");
	struct ig_trace t;
	load(path, &t);
	struct replay_opts o = {.model = "m", .block_tokens = 512, .bytes_per_token = 4, .input = path};
	struct ig_replay r = {.o = &o, .t = &t};
	struct loop L = {.r = &r, .urls = {"http://g/v1/chat/completions", "http://g/v1/completions"}};
	const char *url = NULL;
	char *err = NULL;
	char *body = request_body(&L, 0, &url, &err);
	ck_assert_ptr_nonnull(body);
	ck_assert_str_eq(url, "http://g/v1/chat/completions");
	json_t *j = json_loads(body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "m");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "max_tokens")), 42);
	ck_assert(json_is_true(json_object_get(j, "ignore_eos")));
	ck_assert(json_is_true(json_object_get(j, "stream")));
	ck_assert(json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage")));
	json_t *m = json_array_get(json_object_get(j, "messages"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "user");
	const char *text = json_string_value(json_object_get(m, "content"));
	ck_assert_uint_eq(strlen(text), 2800);
	struct ig_buf want;
	ig_buf_init(&want);
	ig_trace_prompt(&want, &t, &t.v[0], 512, 4);
	ck_assert_uint_eq(want.len, 2800);
	ck_assert_int_eq(memcmp(text, ig_buf_head(&want), 2800), 0);
	ig_buf_free(&want);
	json_decref(j);
	free(body);

	/* completions: the prompt; an output_length of 0 asks for one token */
	o.endpoint = 1;
	body = request_body(&L, 1, &url, &err);
	ck_assert_str_eq(url, "http://g/v1/completions");
	j = json_loads(body, 0, NULL);
	ck_assert_uint_eq(json_string_length(json_object_get(j, "prompt")), 2400);
	ck_assert_int_eq(json_integer_value(json_object_get(j, "max_tokens")), 1);
	ck_assert_ptr_null(json_object_get(j, "messages"));
	json_decref(j);
	free(body);
	ig_trace_free(&t);
	unlink(path);
	free(path);
}
END_TEST

START_TEST(a_batch_line_goes_as_its_body_says_without_its_timestamp)
{
	char *path = write_tmp("{\"custom_id\": \"a\", \"timestamp\": 0, \"method\": \"POST\", \"url\": \"/v1/completions\", "
			       "\"body\": {\"model\": \"x\", \"prompt\": \"hi\", \"max_tokens\": 3}}\n"
			       "{\"timestamp\": 10, \"messages\": [{\"role\": \"user\", \"content\": \"yo\"}]}\n");
	struct ig_trace t;
	load(path, &t);
	struct replay_opts o = {.model = "m", .block_tokens = 512, .bytes_per_token = 4, .input = path};
	struct ig_replay r = {.o = &o, .t = &t};
	struct loop L = {.r = &r, .urls = {"http://g/v1/chat/completions", "http://g/v1/completions"}};
	L.d = (struct ig_corpus_defaults){o.model, -1, 0, 0, -1, 1, "--model"};
	L.in = fopen(path, "r");
	const char *url = NULL;
	char *err = NULL;
	char *body = request_body(&L, 0, &url, &err);
	ck_assert_str_eq(url, "http://g/v1/completions");
	json_t *j = json_loads(body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "x");
	ck_assert_str_eq(json_string_value(json_object_get(j, "prompt")), "hi");
	ck_assert(json_is_true(json_object_get(j, "stream")));
	ck_assert_ptr_null(json_object_get(j, "timestamp"));
	json_decref(j);
	free(body);
	body = request_body(&L, 1, &url, &err);
	ck_assert_str_eq(url, "http://g/v1/chat/completions");
	j = json_loads(body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "m"); /* --model */
	ck_assert_ptr_null(json_object_get(j, "timestamp"));
	json_decref(j);
	free(body);
	fclose(L.in);
	ig_trace_free(&t);
	unlink(path);
	free(path);
}
END_TEST

START_TEST(the_backend_header_is_read_whatever_its_case)
{
	struct flight f;
	memset(&f, 0, sizeof(f));
	char h1[] = "content-type: text/event-stream\r\n";
	char h2[] = "x-infergate-backend:  http://127.0.0.1:9001 \r\n";
	ck_assert_uint_eq(answer_header(h1, 1, strlen(h1), &f), strlen(h1));
	ck_assert_str_eq(f.backend, "");
	ck_assert_uint_eq(answer_header(h2, 1, strlen(h2), &f), strlen(h2));
	ck_assert_str_eq(f.backend, "http://127.0.0.1:9001");
}
END_TEST

IG_CHECK_MAIN("replay_run", a_mooncake_line_becomes_a_streamed_request_of_its_lengths,
	      a_batch_line_goes_as_its_body_says_without_its_timestamp, the_backend_header_is_read_whatever_its_case)
