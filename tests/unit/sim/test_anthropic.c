/* Unit tests for src/sim/anthropic.c: /v1/messages and count_tokens as
 * SGLang's and vLLM's Anthropic handlers answer them: the request handed on
 * as a chat request, the engine's chat chunks turned into each server's
 * events (ids, the fields each leaves out, its error events), the whole
 * answer, the chat path's refusals in each server's shape, and the prompt
 * counted as the chat path counts it. No socket: a struct sim with only its
 * flags. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "anthropic.h"
#include "parse.h"
#include "../check_main.h"

static struct sim_conf conf;
static struct sim sim;

static void setup(int flavor)
{
	memset(&conf, 0, sizeof(conf));
	memset(&sim, 0, sizeof(sim));
	conf.model = "m";
	conf.flavor = flavor;
	conf.seed = 1;
	sim.conf = &conf;
}

static json_t *body_json(const struct sim_anth_answer *a)
{
	json_t *j = json_loads(a->body, 0, NULL);
	ck_assert_msg(j != NULL, "not JSON: %s", a->body);
	return j;
}

static struct sim_anth *begin(const char *text, struct ig_buf *body, struct sim_anth_answer *a)
{
	ig_buf_init(body);
	ig_buf_append(body, text, strlen(text));
	memset(a, 0, sizeof(*a));
	return sim_anth_begin(&sim, body, a);
}

START_TEST(request_becomes_chat)
{
	setup(SIM_FLAVOR_SGLANG);
	struct ig_buf body;
	struct sim_anth_answer a;
	struct sim_anth *x = begin("{\"model\":\"m\",\"max_tokens\":5,\"stream\":true,\"system\":\"s\","
				   "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
				   &body, &a);
	ck_assert_ptr_nonnull(x);
	json_t *chat = json_loadb(body.data, body.len, 0, NULL);
	json_t *want = json_loads("{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
				  "\"content\":\"hi\"}],\"max_tokens\":5,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
				  0, NULL);
	ck_assert(json_equal(chat, want));
	json_decref(chat);
	json_decref(want);
	sim_anth_free(x);
	ig_buf_free(&body);
}
END_TEST

/* A body the request model refuses: the framework's validation answer in
 * each server's OpenAI shape. */
START_TEST(refused_body_in_each_shape)
{
	for (int f = 0; f < 2; f++) {
		setup(f ? SIM_FLAVOR_VLLM : SIM_FLAVOR_SGLANG);
		struct ig_buf body;
		struct sim_anth_answer a;
		const char *bad[] = {"{\"model\":\"m\",\"max_tokens\":\"x\",\"messages\":[]}", "not json"};
		for (int i = 0; i < 2; i++) {
			ck_assert_ptr_null(begin(bad[i], &body, &a));
			ck_assert_uint_eq(a.status, 400);
			json_t *j = body_json(&a);
			json_t *e = f ? json_object_get(j, "error") : j;
			ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "Bad Request");
			ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), 400);
			if (i == 0)
				ck_assert_str_eq(json_string_value(json_object_get(e, "message")),
						 "max_tokens: Input should be a valid integer");
			json_decref(j);
			free(a.body);
			ig_buf_free(&body);
		}
	}
}
END_TEST

static const char CHUNKS[] =
	"data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
	"\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
	"data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
	"\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n";
static const char END[] =
	"data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
	"\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}]}\n\n"
	"data: {\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],"
	"\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n\n"
	"data: [DONE]\n\n";

/* The translated stream's events as [name, data] pairs. */
static json_t *events_of(struct ig_buf *b)
{
	json_t *out = json_array();
	const char *p = ig_buf_head(b), *end = p + ig_buf_pending(b);
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		ck_assert_ptr_nonnull(nl);
		ck_assert(strncmp(p, "event: ", 7) == 0);
		json_t *name = json_stringn(p + 7, (size_t)(nl - p - 7));
		p = nl + 1;
		ck_assert(strncmp(p, "data: ", 6) == 0);
		nl = memchr(p, '\n', (size_t)(end - p));
		json_t *data = json_loadb(p + 6, (size_t)(nl - p - 6), 0, NULL);
		ck_assert_ptr_nonnull(data);
		ck_assert(nl[1] == '\n');
		p = nl + 2;
		json_array_append_new(out, json_pack("[o, o]", name, data));
	}
	return out;
}

static const char *name_at(json_t *ev, size_t i)
{
	return json_string_value(json_array_get(json_array_get(ev, i), 0));
}

static json_t *data_at(json_t *ev, size_t i)
{
	return json_array_get(json_array_get(ev, i), 1);
}

/* Feeds `chunks` as the engine would write them, in two pieces (the
 * second ending mid-event), and returns the events. */
static json_t *translate(const char *request, const char *chunks)
{
	struct ig_buf body;
	struct sim_anth_answer a;
	struct sim_anth *x = begin(request, &body, &a);
	ck_assert_ptr_nonnull(x);
	struct sim_req r;
	sim_engine_req_init(&r, SIM_CHAT);
	snprintf(r.id, sizeof(r.id), "chatcmpl-abc");
	r.prompt_tokens = 5;
	size_t n = strlen(chunks), half = n / 2;
	ig_buf_append(&r.out, chunks, half);
	struct ig_buf *out = sim_anth_stream(x, &r);
	ig_buf_append(&r.out, chunks + half, n - half);
	out = sim_anth_stream(x, &r);
	ck_assert_uint_eq(ig_buf_pending(&r.out), 0);
	json_t *ev = events_of(out);
	sim_engine_req_free(&r);
	sim_anth_free(x);
	ig_buf_free(&body);
	return ev;
}

static const char STREAM_REQ[] =
	"{\"model\":\"asked\",\"max_tokens\":5,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

START_TEST(stream_sglang)
{
	setup(SIM_FLAVOR_SGLANG);
	char all[2048];
	snprintf(all, sizeof(all), "%s%s", CHUNKS, END);
	json_t *ev = translate(STREAM_REQ, all);
	const char *names[] = {"message_start", "content_block_start", "content_block_delta", "content_block_stop",
			       "message_delta", "message_stop"};
	ck_assert_uint_eq(json_array_size(ev), 6);
	for (size_t i = 0; i < 6; i++)
		ck_assert_str_eq(name_at(ev, i), names[i]);
	json_t *m = json_object_get(data_at(ev, 0), "message");
	ck_assert(strncmp(json_string_value(json_object_get(m, "id")), "msg_", 4) == 0);
	ck_assert_uint_eq(strlen(json_string_value(json_object_get(m, "id"))), 36);
	ck_assert_str_eq(json_string_value(json_object_get(m, "model")), "asked");
	ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "assistant");
	ck_assert_ptr_null(json_object_get(m, "stop_reason")); /* exclude_none */
	json_t *want = json_loads("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":"
				  "{\"input_tokens\":5,\"output_tokens\":1,\"cache_read_input_tokens\":0}}",
				  0, NULL);
	ck_assert(json_equal(data_at(ev, 4), want));
	json_decref(want);
	json_decref(ev);
}
END_TEST

START_TEST(stream_vllm)
{
	setup(SIM_FLAVOR_VLLM);
	char all[2048];
	snprintf(all, sizeof(all), "%s%s", CHUNKS, END);
	json_t *ev = translate(STREAM_REQ, all);
	ck_assert_uint_eq(json_array_size(ev), 6);
	json_t *want = json_loads("{\"type\":\"message_start\",\"message\":{\"id\":\"chatcmpl-abc\",\"model\":\"m\",\"content\":[],"
				  "\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":0}}}",
				  0, NULL);
	ck_assert(json_equal(data_at(ev, 0), want));
	json_decref(want);
	want = json_loads("{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":"
			  "{\"input_tokens\":5,\"output_tokens\":1}}",
			  0, NULL);
	ck_assert(json_equal(data_at(ev, 4), want));
	json_decref(want);
	json_decref(ev);
}
END_TEST

/* A stream that fails midway (--stream-fail-rate): vLLM's converter sends
 * one error event and stops; SGLang's sends its error and goes on to
 * close the message at [DONE]. */
START_TEST(stream_failure)
{
	static const char VLLM_ERR[] = "data: {\"error\": {\"message\": \"Internal server error\", \"type\": "
				       "\"InternalServerError\", \"param\": null, \"code\": 500}}\n\ndata: [DONE]\n\n";
	char all[2048];
	setup(SIM_FLAVOR_VLLM);
	snprintf(all, sizeof(all), "%s%s", CHUNKS, VLLM_ERR);
	json_t *ev = translate(STREAM_REQ, all);
	ck_assert_uint_eq(json_array_size(ev), 4);
	ck_assert_str_eq(name_at(ev, 3), "error");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(data_at(ev, 3), "error"), "type")),
			 "internal_error");
	json_decref(ev);

	setup(SIM_FLAVOR_SGLANG);
	ev = translate(STREAM_REQ, all);
	const char *names[] = {"message_start", "content_block_start", "content_block_delta", "error",
			       "content_block_stop", "message_delta", "message_stop"};
	ck_assert_uint_eq(json_array_size(ev), 7);
	for (size_t i = 0; i < 7; i++)
		ck_assert_str_eq(name_at(ev, i), names[i]);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(data_at(ev, 3), "error"), "message")),
			 "Stream processing error");
	json_decref(ev);
}
END_TEST

START_TEST(final_answer)
{
	static const char COMPLETION[] =
		"{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,"
		"\"message\":{\"role\":\"assistant\",\"content\":\"Hello there\"},\"logprobs\":null,\"finish_reason\":\"length\"}],"
		"\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}";
	for (int f = 0; f < 2; f++) {
		setup(f ? SIM_FLAVOR_VLLM : SIM_FLAVOR_SGLANG);
		struct ig_buf body;
		struct sim_anth_answer a;
		struct sim_anth *x = begin("{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
					   &body, &a);
		struct sim_req r;
		sim_engine_req_init(&r, SIM_CHAT);
		ig_buf_append(&r.out, COMPLETION, strlen(COMPLETION));
		sim_anth_final(&sim, x, &r, &a);
		ck_assert_uint_eq(a.status, 200);
		json_t *m = body_json(&a);
		const char *id = json_string_value(json_object_get(m, "id"));
		if (f)
			ck_assert_str_eq(id, "chatcmpl-abc");
		else
			ck_assert(strncmp(id, "msg_", 4) == 0 && strlen(id) == 36);
		json_object_del(m, "id");
		json_t *want = json_loads(f ? "{\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"text\","
					      "\"text\":\"Hello there\"}],\"stop_reason\":\"max_tokens\",\"usage\":{\"input_tokens\":5,"
					      "\"output_tokens\":2}}"
					    : "{\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"text\","
					      "\"text\":\"Hello there\"}],\"stop_reason\":\"max_tokens\",\"usage\":{\"input_tokens\":5,"
					      "\"output_tokens\":2,\"cache_read_input_tokens\":0}}",
					  0, NULL);
		ck_assert(json_equal(m, want));
		json_decref(want);
		json_decref(m);
		free(a.body);
		sim_engine_req_free(&r);
		sim_anth_free(x);
		ig_buf_free(&body);
	}
}
END_TEST

/* The chat path's refusals: vLLM keeps their status and type in
 * Anthropic's shape; SGLang answers 500 internal_error, or a stream of its
 * error event. */
START_TEST(chat_path_errors)
{
	struct ig_buf body;
	struct sim_anth_answer a;
	setup(SIM_FLAVOR_VLLM);
	struct sim_anth *x = begin(STREAM_REQ, &body, &a);
	sim_anth_error(&sim, x, 404, "NotFoundError", "The model `x` does not exist.", &a);
	ck_assert_uint_eq(a.status, 404);
	ck_assert_str_eq(a.body, "{\"type\":\"error\",\"error\":{\"type\":\"NotFoundError\",\"message\":\"The model `x` does "
				 "not exist.\"}}");
	free(a.body);
	sim_anth_free(x);
	ig_buf_free(&body);

	setup(SIM_FLAVOR_SGLANG);
	x = begin(STREAM_REQ, &body, &a);
	sim_anth_error(&sim, x, 400, "BadRequestError", "too long", &a);
	ck_assert_uint_eq(a.status, 200);
	ck_assert_str_eq(a.ctype, "text/event-stream");
	ck_assert(strncmp(a.body, "event: error\n", 13) == 0);
	free(a.body);
	sim_anth_free(x);
	ig_buf_free(&body);
	x = begin("{\"model\":\"m\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &body, &a);
	sim_anth_error(&sim, x, 400, "BadRequestError", "too long", &a);
	ck_assert_uint_eq(a.status, 500);
	ck_assert_str_eq(a.body, "{\"type\":\"error\",\"error\":{\"type\":\"internal_error\",\"message\":\"Internal processing "
				 "error\"}}");
	free(a.body);
	sim_anth_free(x);
	ig_buf_free(&body);
}
END_TEST

/* count_tokens counts what the chat path counts for the same messages. */
START_TEST(count_tokens)
{
	static const char REQ[] = "{\"model\":\"m\",\"system\":\"be brief\",\"messages\":[{\"role\":\"user\",\"content\":"
				  "\"a question of some length to count\"}]}";
	static const char CHAT[] = "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":"
				   "\"user\",\"content\":\"a question of some length to count\"}]}";
	for (int f = 0; f < 2; f++) {
		setup(f ? SIM_FLAVOR_VLLM : SIM_FLAVOR_SGLANG);
		struct sim_req r;
		struct sim_perr e = {0, NULL, NULL, NULL};
		sim_engine_req_init(&r, SIM_CHAT);
		ck_assert_int_eq(sim_parse_completion(&sim, &r, CHAT, strlen(CHAT), &e), 0);
		struct sim_anth_answer a;
		sim_anth_count_tokens(&sim, REQ, strlen(REQ), &a);
		ck_assert_uint_eq(a.status, 200);
		json_t *j = body_json(&a);
		ck_assert_int_eq(json_integer_value(json_object_get(j, "input_tokens")), r.prompt_tokens);
		ck_assert_int_gt(r.prompt_tokens, 3);
		if (f)
			ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "context_management"),
									    "original_input_tokens")),
					 r.prompt_tokens);
		else
			ck_assert_uint_eq(json_object_size(j), 1);
		json_decref(j);
		free(a.body);
		sim_engine_req_free(&r);

		/* vLLM's model check, in Anthropic's shape; SGLang counts any model */
		static const char OTHER[] = "{\"model\":\"other\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
		sim_anth_count_tokens(&sim, OTHER, strlen(OTHER), &a);
		ck_assert_uint_eq(a.status, f ? 404 : 200);
		free(a.body);
		sim_anth_count_tokens(&sim, "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[]}", 41, &a);
		ck_assert_uint_eq(a.status, 400);
		free(a.body);
	}
}
END_TEST

IG_CHECK_MAIN("sim_anthropic", request_becomes_chat, refused_body_in_each_shape, stream_sglang, stream_vllm,
	      stream_failure, final_answer, chat_path_errors, count_tokens)
