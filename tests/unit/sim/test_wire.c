/* Unit tests for src/sim/wire.c: the bytes of the simulator's answers. A
 * request is filled by hand (no engine, no socket) and each format is
 * checked byte for byte where it is fixed, and against the text generator
 * where it carries the answer's words: a stream's tokens joined are the
 * whole answer's text, a Responses stream numbers its events from 0 with
 * no gap, /generate's outputs are cumulative, a failing stream ends with
 * the imitated server's error event. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "infergate/util.h"
#include "wire.h"
#include "../check_main.h"

static void req_setup(struct sim_req *r, enum sim_kind kind, const char *id, long n_tokens, long prompt_tokens)
{
	sim_engine_req_init(r, kind);
	r->n_tokens = n_tokens;
	r->prompt_tokens = prompt_tokens;
	r->model_json = strdup("\"m\"");
	snprintf(r->id, sizeof(r->id), "%s", id);
	r->created = 1700000000;
	r->text_seed = 42;
	sim_text_init(&r->text, r->text_seed);
	r->stream = true;
}

/* The buffer's bytes as a NUL-terminated string (owned by the buffer). */
static const char *str(struct ig_buf *b)
{
	ig_buf_append(b, "", 1);
	b->len--;
	return b->data ? b->data : "";
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = strstr(hay, needle); p; p = strstr(p + strlen(needle), needle))
		n++;
	return n;
}

/* The whole answer's text, as its own buffer. */
static char *whole_text(const struct sim_req *r)
{
	struct ig_buf t;
	ig_buf_init(&t);
	sim_wire_answer_text(&t, r);
	char *s = strdup(str(&t));
	ig_buf_free(&t);
	return s;
}

/* Streams all of r: open, its tokens, end (or the error after fail_at). */
static void stream_all(struct ig_buf *o, struct sim_req *r, enum sim_flavor flavor)
{
	sim_wire_stream_open(o, r);
	for (r->emitted = 0; r->emitted < r->n_tokens; r->emitted++) {
		if (r->emitted == r->fail_at) {
			sim_wire_stream_error(o, r, flavor);
			return;
		}
		sim_wire_stream_token(o, r);
	}
	sim_wire_stream_end(o, r);
}

/* The JSON objects of a stream's `data: ` lines, [DONE] left out. */
static json_t *data_events(const char *s)
{
	json_t *arr = json_array();
	for (const char *p = strstr(s, "data: "); p; p = strstr(p + 1, "\ndata: ")) {
		if (*p == '\n')
			p++;
		p += 6;
		const char *end = strstr(p, "\n\n");
		ck_assert_ptr_nonnull(end);
		if (strncmp(p, "[DONE]", 6) == 0)
			continue;
		json_error_t err;
		json_t *j = json_loadb(p, (size_t)(end - p), 0, &err);
		ck_assert_msg(j != NULL, "not JSON: %.*s (%s)", (int)(end - p), p, err.text);
		json_array_append_new(arr, j);
	}
	return arr;
}

START_TEST(chat_stream_bytes)
{
	struct sim_req r;
	struct ig_buf o;
	req_setup(&r, SIM_CHAT, "chatcmpl-t", 3, 4);
	r.include_usage = true;
	r.length_cut = true;
	ig_buf_init(&o);
	stream_all(&o, &r, SIM_FLAVOR_SGLANG);
	const char *s = str(&o);
	const char *head = "data: {\"id\":\"chatcmpl-t\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,"
			   "\"model\":\"m\",\"choices\":[";
	/* the role chunk first, exactly */
	char *want = ig_strdupf("%s{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
				"\"finish_reason\":null}]}\n\n", head);
	ck_assert_int_eq(strncmp(s, want, strlen(want)), 0);
	free(want);
	/* then the end: finish chunk, usage chunk (no choices), [DONE] */
	want = ig_strdupf("%s{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"length\"}]}\n\n"
			  "%s],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7}}\n\n"
			  "data: [DONE]\n\n", head, head);
	ck_assert_str_eq(s + strlen(s) - strlen(want), want);
	free(want);
	/* the content deltas, joined, are the whole answer's text */
	json_t *ev = data_events(s);
	ck_assert_int_eq(json_array_size(ev), 1 + 3 + 2);
	struct ig_buf joined;
	ig_buf_init(&joined);
	for (size_t i = 1; i <= 3; i++) {
		json_t *c = json_object_get(json_object_get(json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0),
							    "delta"), "content");
		ck_assert(json_is_string(c));
		ig_buf_append(&joined, json_string_value(c), json_string_length(c));
	}
	char *text = whole_text(&r);
	ck_assert_str_eq(str(&joined), text);
	ck_assert_int_eq(count(s, "\"usage\""), 1); /* only the last chunk: no "usage": null */
	free(text);
	json_decref(ev);
	ig_buf_free(&joined);
	ig_buf_free(&o);
	sim_engine_req_free(&r);
}
END_TEST

START_TEST(whole_answers_chat_and_completion)
{
	struct sim_req r;
	struct ig_buf o;
	req_setup(&r, SIM_COMPLETION, "cmpl-t", 5, 2);
	r.stream = false;
	ig_buf_init(&o);
	sim_wire_answer(&o, &r);
	char *text = whole_text(&r);
	char *want = ig_strdupf("{\"id\":\"cmpl-t\",\"object\":\"text_completion\",\"created\":1700000000,\"model\":\"m\","
				"\"choices\":[{\"index\":0,\"text\":\"%s\",\"logprobs\":null,\"finish_reason\":\"stop\"}],"
				"\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":5,\"total_tokens\":7}}", text);
	ck_assert_str_eq(str(&o), want);
	free(want);
	sim_engine_req_free(&r);
	ig_buf_free(&o);

	/* chat: the text in a message; a step profile's cache report in usage */
	req_setup(&r, SIM_CHAT, "chatcmpl-t", 5, 2);
	r.stream = false;
	r.cache_report = true;
	r.cached_tokens = 1;
	ig_buf_init(&o);
	sim_wire_answer(&o, &r);
	want = ig_strdupf("{\"id\":\"chatcmpl-t\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"m\","
			  "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"%s\"},"
			  "\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":2,"
			  "\"completion_tokens\":5,\"total_tokens\":7,\"prompt_tokens_details\":{\"cached_tokens\":1}}}",
			  text);
	ck_assert_str_eq(str(&o), want);
	free(want);
	free(text);
	sim_engine_req_free(&r);
	ig_buf_free(&o);
}
END_TEST

START_TEST(responses_stream_numbers_its_events)
{
	struct sim_req r;
	struct ig_buf o;
	req_setup(&r, SIM_RESPONSES, "resp_abc", 2, 3);
	r.length_cut = true;
	ig_buf_init(&o);
	stream_all(&o, &r, SIM_FLAVOR_SGLANG);
	const char *s = str(&o);
	static const char *const order[] = {
		"response.created", "response.in_progress", "response.output_item.added",
		"response.content_part.added", "response.output_text.delta", "response.output_text.delta",
		"response.output_text.done", "response.content_part.done", "response.output_item.done",
		"response.incomplete"};
	const char *p = s;
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		char *want = ig_strdupf("event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%zu", order[i], order[i], i);
		ck_assert_msg(strncmp(p, want, strlen(want)) == 0, "event %zu: %.80s", i, p);
		free(want);
		p = strstr(p, "}\n\n");
		ck_assert_ptr_nonnull(p);
		p += 3;
	}
	ck_assert_str_eq(p, ""); /* nothing after, no [DONE] */
	ck_assert_int_eq(r.seq, 10);
	ck_assert_int_eq(count(s, "\"item_id\":\"msg_abc\""), 5);
	ck_assert_int_eq(count(s, "\"incomplete_details\":{\"reason\":\"max_output_tokens\"}"), 1);
	ig_buf_free(&o);

	/* the stored object: what GET /v1/responses/{id} gives back */
	ig_buf_init(&o);
	snprintf(r.prev_id, sizeof(r.prev_id), "resp_before");
	sim_wire_response_object(&o, &r);
	char *text = whole_text(&r);
	char *want = ig_strdupf("{\"id\":\"resp_abc\",\"object\":\"response\",\"created_at\":1700000000,"
				"\"status\":\"incomplete\",\"model\":\"m\",\"previous_response_id\":\"resp_before\","
				"\"incomplete_details\":{\"reason\":\"max_output_tokens\"},\"output\":[{\"type\":\"message\","
				"\"id\":\"msg_abc\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":"
				"\"output_text\",\"text\":\"%s\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":3,"
				"\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":2,"
				"\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":5}}", text);
	ck_assert_str_eq(str(&o), want);
	free(want);
	free(text);
	ig_buf_free(&o);
	sim_engine_req_free(&r);
}
END_TEST

START_TEST(generate_outputs_are_cumulative)
{
	struct sim_req r;
	struct ig_buf o;
	req_setup(&r, SIM_GENERATE, "rid1", 3, 2);
	r.length_cut = true;
	ig_buf_init(&o);
	stream_all(&o, &r, SIM_FLAVOR_SGLANG);
	const char *s = str(&o);
	json_t *ev = data_events(s);
	/* one output per token, the last with its finish_reason, then [DONE] */
	ck_assert_int_eq(json_array_size(ev), 3);
	ck_assert_int_eq(count(s, "data: [DONE]\n\n"), 1);
	char *text = whole_text(&r);
	size_t prev = 0;
	for (size_t i = 0; i < 3; i++) {
		json_t *e = json_array_get(ev, i), *meta = json_object_get(e, "meta_info");
		const char *t = json_string_value(json_object_get(e, "text"));
		ck_assert_uint_gt(strlen(t), prev); /* grows */
		ck_assert_int_eq(strncmp(t, text, strlen(t)), 0); /* a prefix of the answer */
		prev = strlen(t);
		ck_assert_int_eq(json_array_size(json_object_get(e, "output_ids")), i + 1);
		ck_assert_int_eq(json_integer_value(json_object_get(meta, "completion_tokens")), (json_int_t)i + 1);
		ck_assert_str_eq(json_string_value(json_object_get(meta, "id")), "rid1");
		ck_assert(i < 2 ? json_is_null(json_object_get(meta, "finish_reason"))
				: json_object_get(meta, "e2e_latency") != NULL);
	}
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(ev, 2), "text")), text);
	ck_assert_int_eq(count(s, "\"finish_reason\":{\"type\":\"length\",\"length\":3}"), 1);
	json_decref(ev);
	ig_buf_free(&o);

	/* whole: the same text and ids; a natural end is "stop" on the EOS id */
	r.length_cut = false;
	r.stream = false;
	ig_buf_init(&o);
	sim_wire_answer(&o, &r);
	json_t *j = json_loads(str(&o), 0, NULL);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(json_string_value(json_object_get(j, "text")), text);
	ck_assert_int_eq(json_array_size(json_object_get(j, "output_ids")), 3);
	ck_assert_int_eq(count(str(&o), "\"finish_reason\":{\"type\":\"stop\",\"matched\":2}"), 1);
	json_decref(j);
	free(text);
	ig_buf_free(&o);
	sim_engine_req_free(&r);
}
END_TEST

START_TEST(a_failing_stream_ends_as_the_server_writes_it)
{
	struct sim_req r;
	struct ig_buf o;
	static const char *const sglang_end =
		"data: {\"error\": {\"object\": \"error\", \"message\": \"Simulated generation failure "
		"(--stream-fail-rate).\", \"type\": \"INTERNAL_SERVER_ERROR\", \"param\": null, \"code\": 500}}\n\n"
		"data: [DONE]\n\n";
	static const char *const vllm_end =
		"data: {\"error\": {\"message\": \"Internal server error\", \"type\": \"InternalServerError\", "
		"\"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n";

	for (int f = SIM_FLAVOR_SGLANG; f <= SIM_FLAVOR_VLLM; f++) {
		req_setup(&r, SIM_COMPLETION, "cmpl-t", 4, 2);
		r.fail_at = 2;
		ig_buf_init(&o);
		stream_all(&o, &r, (enum sim_flavor)f);
		const char *s = str(&o), *end = f == SIM_FLAVOR_VLLM ? vllm_end : sglang_end;
		ck_assert_int_eq(count(s, "\"text\":\""), 2); /* two tokens went out */
		ck_assert_int_eq(count(s, "finish_reason\":\"stop\""), 0);
		ck_assert_str_eq(s + strlen(s) - strlen(end), end);
		ig_buf_free(&o);
		sim_engine_req_free(&r);
	}
	/* /generate: SGLang's ValueError event; Responses: an "error" event, numbered */
	req_setup(&r, SIM_GENERATE, "g", 4, 2);
	r.fail_at = 0;
	ig_buf_init(&o);
	stream_all(&o, &r, SIM_FLAVOR_SGLANG);
	ck_assert_str_eq(str(&o), "data: {\"error\":{\"message\":\"Simulated generation failure (--stream-fail-rate).\"}}"
				  "\n\ndata: [DONE]\n\n");
	ig_buf_free(&o);
	sim_engine_req_free(&r);
	req_setup(&r, SIM_RESPONSES, "resp_x", 4, 2);
	r.fail_at = 1;
	ig_buf_init(&o);
	stream_all(&o, &r, SIM_FLAVOR_VLLM);
	const char *s = str(&o), *err = "event: error\ndata: {\"type\":\"error\",\"sequence_number\":5,\"code\":"
					"\"server_error\",\"message\":\"Simulated generation failure "
					"(--stream-fail-rate).\",\"param\":null}\n\n";
	ck_assert_str_eq(s + strlen(s) - strlen(err), err);
	ig_buf_free(&o);
	sim_engine_req_free(&r);
}
END_TEST

IG_CHECK_MAIN("sim wire", chat_stream_bytes, whole_answers_chat_and_completion, responses_stream_numbers_its_events,
	      generate_outputs_are_cumulative, a_failing_stream_ends_as_the_server_writes_it)
