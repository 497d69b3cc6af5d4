/* Unit tests for src/sim/parse.c: what a generation request's body becomes
 * and, above all, the refusals: each bad body gets the status, error type,
 * param and message the imitated server (SGLang or vLLM) answers with, the
 * context-length check in each server's wording, vLLM's model check, and a
 * previous_response_id the simulator does not hold. No socket: a struct sim
 * with only its flags and its stored Responses. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"
#include "stored.h"
#include "wire.h"
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

static void teardown(void)
{
	free(sim.stored);
	sim.stored = NULL;
}

/* Parses body as a request of that kind; returns the parser's result, with
 * *r filled and *e the refusal (e->msg to free). */
static int parse(enum sim_kind kind, const char *body, struct sim_req *r, struct sim_perr *e)
{
	sim_engine_req_init(r, kind);
	memset(e, 0, sizeof(*e));
	return sim_parse_completion(&sim, r, body, strlen(body), e);
}

/* Asserts body is refused with exactly this status, type, param and message
 * (a message ending in '*': that prefix). */
static void refused(enum sim_kind kind, const char *body, unsigned status, const char *type, const char *param,
		    const char *msg)
{
	struct sim_req r;
	struct sim_perr e;
	ck_assert_msg(parse(kind, body, &r, &e) == -1, "accepted: %s", body);
	ck_assert_uint_eq(e.status, status);
	ck_assert_str_eq(e.type ? e.type : "(null)", type ? type : "(null)");
	ck_assert_str_eq(e.param ? e.param : "(null)", param ? param : "(null)");
	ck_assert_ptr_nonnull(e.msg);
	size_t n = strlen(msg);
	if (n && msg[n - 1] == '*')
		ck_assert_msg(strncmp(e.msg, msg, n - 1) == 0, "%s: got \"%s\"", body, e.msg);
	else
		ck_assert_str_eq(e.msg, msg);
	free(e.msg);
	sim_engine_req_free(&r);
}

#define CHAT_OK "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]"

START_TEST(schema_errors_are_400_bad_request)
{
	setup(SIM_FLAVOR_SGLANG);
	const char *V = SIM_T_VALIDATION;
	refused(SIM_CHAT, "{nope", 400, V, NULL, "invalid JSON body: *");
	refused(SIM_CHAT, "[]", 400, V, NULL, "the request body must be a JSON object");
	refused(SIM_CHAT, "{}", 400, V, NULL, "'messages' is required");
	refused(SIM_CHAT, "{\"messages\":[]}", 400, V, NULL, "'messages' must be a non-empty array");
	refused(SIM_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", 400, V, NULL,
		"messages[0] must be an object with a string 'role'");
	refused(SIM_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", 400, V, NULL,
		"messages[0].content must be a string, null or an array of parts");
	refused(SIM_CHAT, "{" CHAT_OK ",\"model\":3}", 400, V, NULL, "'model' must be a string");
	refused(SIM_CHAT, "{" CHAT_OK ",\"stream\":1}", 400, V, NULL, "'stream' must be a boolean");
	refused(SIM_CHAT, "{" CHAT_OK ",\"stream_options\":{\"include_usage\":1}}", 400, V, NULL,
		"'stream_options' must be an object with a boolean 'include_usage'");
	refused(SIM_CHAT, "{" CHAT_OK ",\"max_tokens\":0}", 400, V, NULL, "'max_tokens' must be an integer of at least 1");
	refused(SIM_CHAT, "{" CHAT_OK ",\"max_completion_tokens\":\"5\"}", 400, V, NULL,
		"'max_completion_tokens' must be an integer of at least 1");
	refused(SIM_CHAT, "{" CHAT_OK ",\"n\":2}", 400, V, NULL, "'n' must be 1 (infergate-sim answers one choice)");
	refused(SIM_COMPLETION, "{}", 400, V, NULL, "'prompt' is required");
	refused(SIM_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", 400, V, NULL,
		"'prompt' must be a string (or an array of one string)");
	refused(SIM_RESPONSES, "{\"input\":[]}", 400, V, NULL, "'input' must be a string or a non-empty array of messages");
	refused(SIM_RESPONSES, "{\"input\":\"x\",\"instructions\":1}", 400, V, NULL, "'instructions' must be a string");
	refused(SIM_RESPONSES, "{\"input\":\"x\",\"store\":\"yes\"}", 400, V, NULL, "'store' must be a boolean");
	refused(SIM_GENERATE, "{\"sampling_params\":3}", 400, V, NULL, "'sampling_params' must be an object");
	/* a priority is read only with --enable-priority-scheduling */
	struct sim_req r;
	struct sim_perr e;
	ck_assert_int_eq(parse(SIM_CHAT, "{" CHAT_OK ",\"priority\":\"high\"}", &r, &e), 0);
	sim_engine_req_free(&r);
	conf.priority_scheduling = true;
	refused(SIM_CHAT, "{" CHAT_OK ",\"priority\":\"high\"}", 400, V, NULL, "'priority' must be an integer");
	teardown();
}
END_TEST

START_TEST(serving_errors_carry_their_own_types)
{
	setup(SIM_FLAVOR_SGLANG);
	/* /generate with no prompt: SGLang's GenerateReqInput message */
	refused(SIM_GENERATE, "{\"sampling_params\":{}}", 400, SIM_T_BAD_REQUEST, NULL,
		"Either text, input_ids or input_embeds should be provided.");
	/* a previous_response_id not held: 404, as serving_responses.py */
	refused(SIM_RESPONSES, "{\"input\":\"x\",\"previous_response_id\":\"resp_zz\"}", 404, "invalid_request_error",
		NULL, "Response with id 'resp_zz' not found.");
	/* vLLM serves its model names only; SGLang answers for any */
	struct sim_req r;
	struct sim_perr e;
	ck_assert_int_eq(parse(SIM_CHAT, "{" CHAT_OK ",\"model\":\"other\"}", &r, &e), 0);
	ck_assert_str_eq(r.model_json, "\"other\"");
	sim_engine_req_free(&r);
	setup(SIM_FLAVOR_VLLM);
	refused(SIM_CHAT, "{" CHAT_OK ",\"model\":\"other\"}", 404, "NotFoundError", "model",
		"The model `other` does not exist.");
	ck_assert_int_eq(parse(SIM_CHAT, "{" CHAT_OK ",\"model\":\"\"}", &r, &e), 0);
	ck_assert_str_eq(r.model_json, "\"m\""); /* empty: the served model */
	sim_engine_req_free(&r);
	teardown();
}
END_TEST

/* 40 bytes of prompt: 10 tokens (one per 4 bytes). */
#define PROMPT40 "{\"prompt\":\"0123456789012345678901234567890123456789\""

START_TEST(context_length_in_each_servers_words)
{
	setup(SIM_FLAVOR_SGLANG);
	conf.context_length = 10;
	refused(SIM_COMPLETION, PROMPT40 "}", 400, SIM_T_BAD_REQUEST, NULL,
		"The input (10 tokens) is longer than the model's context length (10 tokens).");
	conf.context_length = 15;
	refused(SIM_COMPLETION, PROMPT40 ",\"max_tokens\":5}", 400, SIM_T_BAD_REQUEST, NULL,
		"Requested token count exceeds the model's maximum context length of 15 tokens. You requested a "
		"total of 15 tokens: 10 tokens from the input messages and 5 tokens for the completion. Please "
		"reduce the number of tokens in the input messages or the completion to fit within the limit.");
	/* vLLM: input + max_tokens may reach the context, not pass it; the
	 * smaller of max_tokens and max_completion_tokens counts */
	setup(SIM_FLAVOR_VLLM);
	conf.context_length = 15;
	struct sim_req r;
	struct sim_perr e;
	ck_assert_int_eq(parse(SIM_COMPLETION, PROMPT40 ",\"max_tokens\":5}", &r, &e), 0);
	sim_engine_req_free(&r);
	refused(SIM_COMPLETION, PROMPT40 ",\"max_tokens\":6}", 400, SIM_T_BAD_REQUEST, "max_tokens",
		"'max_tokens' or 'max_completion_tokens' is too large: 6. This model's maximum context length is "
		"15 tokens and your request has 10 input tokens (6 > 15 - 10).");
	conf.context_length = 10;
	refused(SIM_COMPLETION, PROMPT40 "}", 400, SIM_T_BAD_REQUEST, "input_tokens",
		"This model's maximum context length is 10 tokens. However, your request has 10 input tokens. "
		"Please reduce the length of the input messages.");
	teardown();
}
END_TEST

START_TEST(an_accepted_request_is_filled_in)
{
	struct sim_req r;
	struct sim_perr e;
	setup(SIM_FLAVOR_SGLANG);
	conf.output_tokens = 20;
	/* chat: the prompt is each message's role and content on lines of
	 * their own, and the answer's seed comes from it */
	ck_assert_int_eq(parse(SIM_CHAT, "{" CHAT_OK ",\"stream\":true,\"stream_options\":{\"include_usage\":true},"
			       "\"max_tokens\":30,\"max_completion_tokens\":8}", &r, &e), 0);
	const char *prompt = "user\nhello\n";
	ck_assert_uint_eq(r.text_seed, sim_text_seed(prompt, strlen(prompt), 1));
	ck_assert_int_eq(r.prompt_tokens, sim_text_prompt_tokens(strlen(prompt)));
	ck_assert(r.stream && r.include_usage);
	ck_assert_int_eq(r.n_tokens, 8); /* the smaller limit cuts it... */
	ck_assert(r.length_cut);          /* ...so it ends on "length" */
	ck_assert_str_eq(r.model_json, "\"m\"");
	sim_engine_req_free(&r);
	/* under the limit: the natural length, "stop" */
	ck_assert_int_eq(parse(SIM_COMPLETION, "{\"prompt\":[\"x\"],\"max_tokens\":50}", &r, &e), 0);
	ck_assert_int_eq(r.n_tokens, 20);
	ck_assert(!r.length_cut && !r.stream);
	sim_engine_req_free(&r);
	/* ignore_eos: the limit, not the natural 20, and "length"; in
	 * /generate's sampling_params too; not a boolean: refused */
	ck_assert_int_eq(parse(SIM_COMPLETION, "{\"prompt\":\"x\",\"max_tokens\":50,\"ignore_eos\":true}", &r, &e), 0);
	ck_assert_int_eq(r.n_tokens, 50);
	ck_assert(r.length_cut);
	sim_engine_req_free(&r);
	ck_assert_int_eq(parse(SIM_GENERATE, "{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":40,"
			       "\"ignore_eos\":true}}", &r, &e), 0);
	ck_assert_int_eq(r.n_tokens, 40);
	sim_engine_req_free(&r);
	refused(SIM_CHAT, "{" CHAT_OK ",\"ignore_eos\":1}", 400, SIM_T_VALIDATION, NULL, "'ignore_eos' must be a boolean");
	/* /generate: rid and max_new_tokens, input_ids read as /detokenize */
	ck_assert_int_eq(parse(SIM_GENERATE, "{\"input_ids\":[1,2],\"rid\":\"abc\",\"sampling_params\":"
			       "{\"max_new_tokens\":3}}", &r, &e), 0);
	ck_assert_str_eq(r.id, "abc");
	ck_assert_int_eq(r.n_tokens, 3);
	sim_engine_req_free(&r);
	/* Responses: a previous_response_id the simulator holds */
	struct sim_req held;
	sim_engine_req_init(&held, SIM_RESPONSES);
	strcpy(held.id, "resp_1");
	held.model_json = strdup("\"m\"");
	sim_stored_put(&sim, &held);
	sim_engine_req_free(&held);
	ck_assert_int_eq(parse(SIM_RESPONSES, "{\"input\":\"x\",\"previous_response_id\":\"resp_1\",\"store\":false}",
			       &r, &e), 0);
	ck_assert_str_eq(r.prev_id, "resp_1");
	ck_assert(!r.store);
	sim_engine_req_free(&r);
	teardown();
}
END_TEST

/* The stored Responses are a ring: the oldest goes when SIM_STORED more
 * came after it, and then it is unknown like any other. */
START_TEST(a_response_out_of_the_ring_is_unknown)
{
	struct sim_req r;
	struct sim_perr e;
	setup(SIM_FLAVOR_VLLM);
	sim_engine_req_init(&r, SIM_RESPONSES);
	r.model_json = strdup("\"m\"");
	for (int i = 0; i <= SIM_STORED; i++) {
		snprintf(r.id, sizeof(r.id), "resp_%d", i);
		sim_stored_put(&sim, &r);
	}
	sim_engine_req_free(&r);
	ck_assert_ptr_null(sim_stored_find(&sim, "resp_0"));
	ck_assert_ptr_nonnull(sim_stored_find(&sim, "resp_1"));
	ck_assert_ptr_nonnull(sim_stored_find(&sim, "resp_4096"));
	refused(SIM_RESPONSES, "{\"input\":\"x\",\"previous_response_id\":\"resp_0\"}", 404, "invalid_request_error",
		NULL, "Response with id 'resp_0' not found.");
	ck_assert_int_eq(parse(SIM_RESPONSES, "{\"input\":\"x\",\"previous_response_id\":\"resp_1\"}", &r, &e), 0);
	sim_engine_req_free(&r);
	teardown();
}
END_TEST


/* Structured outputs: the answer is the schema's JSON document (schema.c),
 * whole within the answer's length, cut by max_tokens with "length". */
START_TEST(a_json_answer_for_a_schema)
{
	struct sim_req r;
	struct sim_perr e;
	setup(SIM_FLAVOR_VLLM);
	const char *rf = ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"schema\":"
			 "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},"
			 "\"required\":[\"city\",\"n\"]}}}";
	char body[512];
	snprintf(body, sizeof(body), "{" CHAT_OK "%s}", rf);
	ck_assert_int_eq(parse(SIM_CHAT, body, &r, &e), 0);
	ck_assert_ptr_nonnull(r.doc);
	ck_assert(!r.length_cut);
	struct ig_buf o;
	ig_buf_init(&o);
	ig_buf_append(&o, "\"", 1);
	sim_wire_answer_text(&o, &r);
	ig_buf_append(&o, "\"", 1);
	json_t *s = json_loadb(o.data, o.len, JSON_DECODE_ANY, NULL);
	ck_assert(json_is_string(s));
	json_t *v = json_loads(json_string_value(s), 0, NULL);
	ck_assert_msg(json_is_object(v), "not a JSON object: %s", json_string_value(s));
	ck_assert(json_is_string(json_object_get(v, "city")) && json_is_integer(json_object_get(v, "n")));
	json_decref(v);
	json_decref(s);
	ig_buf_free(&o);
	long whole = r.n_tokens;
	sim_engine_req_free(&r);
	/* max_tokens below the document's length: cut, "length" */
	snprintf(body, sizeof(body), "{" CHAT_OK ",\"max_tokens\":3%s}", rf);
	ck_assert_int_eq(parse(SIM_CHAT, body, &r, &e), 0);
	ck_assert_int_lt(3, whole);
	ck_assert_int_eq(r.n_tokens, 3);
	ck_assert(r.length_cut);
	sim_engine_req_free(&r);
	/* SGLang's json_schema, a schema as text, that is not JSON */
	refused(SIM_COMPLETION, "{\"prompt\":\"x\",\"json_schema\":\"{nope\"}", 400, SIM_T_VALIDATION, NULL,
		"'json_schema' is not a valid JSON schema: *");
	teardown();
}
END_TEST

IG_CHECK_MAIN("sim parse", schema_errors_are_400_bad_request, serving_errors_carry_their_own_types,
	      context_length_in_each_servers_words, an_accepted_request_is_filled_in,
	      a_response_out_of_the_ring_is_unknown, a_json_answer_for_a_schema)
