/* Unit tests for infergate-sim's HTTP side (src/sim/server.c), as the
 * gateway and its tests see it: /v1/models, a chat completion with its
 * usage, a stream of chunks ending in [DONE], errors in each server's
 * shape (SGLang's flat object, vLLM's nested one; vLLM checks the model
 * name, SGLang does not), the API key checked before routing with the
 * health and metrics paths exempt as SGLang does, unknown paths and
 * methods. A simulator started as main does, on a loopback port. */
#include "config.h"
#include <jansson.h>

#include "sim_harness.h"
#include "../check_main.h"

#define CHAT(model, extra) "{\"model\": \"" model "\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]" extra "}"

static json_t *parsed(const struct reply *r)
{
	json_t *j = json_loads(r->body, 0, NULL);
	ck_assert_msg(j != NULL, "not JSON: %s", r->body);
	return j;
}

START_TEST(models_completions_and_streams)
{
	struct harness h;
	harness_start(&h, "--model", "llama-sim", NULL);
	struct reply r = harness_ask(&h, "GET", "/v1/models", NULL, NULL);
	ck_assert_uint_eq(r.status, 200);
	json_t *j = parsed(&r);
	ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "list");
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id")),
			 "llama-sim");
	json_decref(j);
	free(r.body);

	r = harness_ask(&h, "POST", "/v1/chat/completions", NULL, CHAT("llama-sim", ", \"max_tokens\": 5"));
	ck_assert_uint_eq(r.status, 200);
	j = parsed(&r);
	ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
	json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "length");
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ch, "message"), "role")), "assistant");
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 5);
	json_decref(j);
	free(r.body);

	r = harness_ask(&h, "POST", "/v1/chat/completions", NULL,
			CHAT("llama-sim", ", \"max_tokens\": 3, \"stream\": true"));
	ck_assert_uint_eq(r.status, 200);
	ck_assert_ptr_nonnull(strcasestr(r.head, "\r\nContent-Type: text/event-stream"));
	int chunks = 0;
	for (char *p = r.body; (p = strstr(p, "data: {")); p++)
		chunks++;
	ck_assert_int_eq(chunks, 5); /* the role, three tokens, the finish */
	ck_assert_ptr_nonnull(strstr(r.body, "\"finish_reason\":\"length\""));
	size_t n = strlen(r.body);
	ck_assert_uint_gt(n, 16);
	ck_assert_str_eq(r.body + n - strlen("data: [DONE]\n\n"), "data: [DONE]\n\n");
	free(r.body);
	harness_stop(&h);
}
END_TEST

START_TEST(errors_in_each_servers_shape)
{
	struct harness h;
	harness_start(&h, NULL); /* sglang */
	struct reply r = harness_ask(&h, "POST", "/v1/chat/completions", NULL, "{\"model\": \"x\", \"messages\":");
	ck_assert_uint_eq(r.status, 400);
	json_t *j = parsed(&r);
	ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "error"); /* SGLang's ErrorResponse, flat */
	ck_assert_int_eq(json_integer_value(json_object_get(j, "code")), 400);
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(j, "message")), "invalid JSON body"));
	json_decref(j);
	free(r.body);
	/* SGLang serves whatever model is named */
	r = harness_ask(&h, "POST", "/v1/chat/completions", NULL, CHAT("any-name", ", \"max_tokens\": 1"));
	ck_assert_uint_eq(r.status, 200);
	free(r.body);
	r = harness_ask(&h, "GET", "/no/such/path", NULL, NULL);
	ck_assert_uint_eq(r.status, 404);
	j = parsed(&r);
	ck_assert_str_eq(json_string_value(json_object_get(j, "detail")), "Not Found"); /* FastAPI's */
	json_decref(j);
	free(r.body);
	r = harness_ask(&h, "GET", "/v1/chat/completions", NULL, NULL);
	ck_assert_uint_eq(r.status, 405);
	free(r.body);
	harness_stop(&h);

	harness_start(&h, "--flavor", "vllm", NULL);
	r = harness_ask(&h, "POST", "/v1/chat/completions", NULL, CHAT("x", ""));
	ck_assert_uint_eq(r.status, 404);
	j = parsed(&r);
	json_t *e = json_object_get(j, "error"); /* vLLM's, nested */
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "The model `x` does not exist.");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "NotFoundError");
	ck_assert_str_eq(json_string_value(json_object_get(e, "param")), "model");
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), 404);
	json_decref(j);
	free(r.body);
	r = harness_ask(&h, "POST", "/v1/chat/completions", NULL, "{\"model\": \"sim-model\", \"messages\":");
	ck_assert_uint_eq(r.status, 400);
	j = parsed(&r);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "error"), "code")), 400);
	json_decref(j);
	free(r.body);
	harness_stop(&h);
}
END_TEST

START_TEST(the_key_is_checked_before_routing)
{
	struct harness h;
	harness_start(&h, "--api-key", "sekrit", NULL);
	struct reply r = harness_ask(&h, "GET", "/v1/models", NULL, NULL);
	ck_assert_uint_eq(r.status, 401);
	ck_assert_str_eq(r.body, "{\"error\":\"Unauthorized\"}"); /* SGLang's API-key middleware */
	free(r.body);
	r = harness_ask(&h, "GET", "/no/such/path", NULL, NULL);
	ck_assert_uint_eq(r.status, 401); /* not 404: the key comes first */
	free(r.body);
	r = harness_ask(&h, "GET", "/v1/models", "Authorization: Bearer wrong\r\n", NULL);
	ck_assert_uint_eq(r.status, 401);
	free(r.body);
	r = harness_ask(&h, "GET", "/v1/models", "Authorization: Bearer sekrit\r\n", NULL);
	ck_assert_uint_eq(r.status, 200);
	free(r.body);
	/* the gateway's probes need no key */
	r = harness_ask(&h, "GET", "/health", NULL, NULL);
	ck_assert_uint_eq(r.status, 200);
	free(r.body);
	r = harness_ask(&h, "GET", "/metrics", NULL, NULL);
	ck_assert_uint_eq(r.status, 200);
	free(r.body);
	harness_stop(&h);
}
END_TEST

IG_CHECK_MAIN("sim_server", models_completions_and_streams, errors_in_each_servers_shape, the_key_is_checked_before_routing)
