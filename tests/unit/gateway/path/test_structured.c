/* Unit tests for src/gateway/path/structured.c: which request bodies constrain
 * their answer (and so are never continued on a second server). */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "path/structured.h"
#include "../../check_main.h"

/* The field that constrains body (JSON text), or "" when none does. */
static const char *field(const char *body)
{
	static char out[64];
	json_t *o = json_loads(body, JSON_DECODE_ANY, NULL);
	ck_assert_msg(o != NULL, "bad test JSON: %s", body);
	const char *f = ig_structured_field(o);
	ck_assert_int_eq(ig_structured_output(o), f != NULL);
	snprintf(out, sizeof(out), "%s", f ? f : "");
	json_decref(o);
	return out;
}

#define CHAT "\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true"

START_TEST(openai_response_format)
{
	ck_assert_str_eq(field("{" CHAT ",\"response_format\":{\"type\":\"json_object\"}}"), "response_format");
	ck_assert_str_eq(field("{" CHAT ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\","
			       "\"schema\":{\"type\":\"object\"}}}}"), "response_format");
	ck_assert_str_eq(field("{" CHAT ",\"response_format\":{\"type\":\"structural_tag\",\"structures\":[]}}"),
			 "response_format");
	/* the Responses API's */
	ck_assert_str_eq(field("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}"),
			 "text.format");
	/* plain text, or nothing, does not constrain */
	ck_assert_str_eq(field("{" CHAT ",\"response_format\":{\"type\":\"text\"}}"), "");
	ck_assert_str_eq(field("{" CHAT ",\"response_format\":null}"), "");
	ck_assert_str_eq(field("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"text\"}}}"), "");
	ck_assert_str_eq(field("{" CHAT "}"), "");
	ck_assert_str_eq(field("{\"prompt\":\"x\",\"max_tokens\":5}"), "");
}
END_TEST

START_TEST(vllm_fields)
{
	ck_assert_str_eq(field("{" CHAT ",\"guided_json\":{\"type\":\"object\"}}"), "guided_json");
	ck_assert_str_eq(field("{\"prompt\":\"x\",\"guided_json\":\"{}\"}"), "guided_json");
	ck_assert_str_eq(field("{" CHAT ",\"guided_regex\":\"[a-z]+\"}"), "guided_regex");
	ck_assert_str_eq(field("{" CHAT ",\"guided_choice\":[\"yes\",\"no\"]}"), "guided_choice");
	ck_assert_str_eq(field("{" CHAT ",\"guided_grammar\":\"root ::= x\"}"), "guided_grammar");
	ck_assert_str_eq(field("{" CHAT ",\"structured_outputs\":{\"json\":{\"type\":\"object\"}}}"),
			 "structured_outputs");
	ck_assert_str_eq(field("{" CHAT ",\"structured_outputs\":{\"choice\":[\"a\"]}}"), "structured_outputs");
	ck_assert_str_eq(field("{" CHAT ",\"structured_outputs\":{\"json_object\":true}}"), "structured_outputs");
	ck_assert_str_eq(field("{" CHAT ",\"structured_outputs\":{\"grammar\":\"root ::= x\"}}"),
			 "structured_outputs");
	/* unset (None), or options without a constraint */
	ck_assert_str_eq(field("{" CHAT ",\"guided_json\":null,\"guided_regex\":null}"), "");
	ck_assert_str_eq(field("{" CHAT ",\"structured_outputs\":{\"json\":null,\"json_object\":false,"
			       "\"disable_any_whitespace\":true}}"), "");
	ck_assert_str_eq(field("{" CHAT ",\"structured_outputs\":null}"), "");
}
END_TEST

START_TEST(sglang_fields)
{
	ck_assert_str_eq(field("{" CHAT ",\"json_schema\":\"{\\\"type\\\":\\\"object\\\"}\"}"), "json_schema");
	ck_assert_str_eq(field("{\"prompt\":\"x\",\"regex\":\"a|b\"}"), "regex");
	ck_assert_str_eq(field("{\"prompt\":\"x\",\"ebnf\":\"root ::= x\"}"), "ebnf");
	/* /generate */
	ck_assert_str_eq(field("{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":5,\"json_schema\":\"{}\"}}"),
			 "sampling_params.json_schema");
	ck_assert_str_eq(field("{\"text\":\"x\",\"sampling_params\":{\"regex\":\"a\"}}"), "sampling_params.regex");
	ck_assert_str_eq(field("{\"text\":\"x\",\"sampling_params\":{\"ebnf\":\"r ::= x\"}}"), "sampling_params.ebnf");
	ck_assert_str_eq(field("{\"text\":\"x\",\"sampling_params\":{\"structural_tag\":\"{}\"}}"),
			 "sampling_params.structural_tag");
	ck_assert_str_eq(field("{\"text\":\"x\",\"sampling_params\":{\"max_new_tokens\":5,\"regex\":null}}"), "");
	ck_assert_str_eq(field("{" CHAT ",\"regex\":null,\"ebnf\":null,\"json_schema\":null}"), "");
}
END_TEST

START_TEST(not_an_object)
{
	ck_assert_ptr_null(ig_structured_field(NULL));
	ck_assert_str_eq(field("[1]"), "");
	ck_assert_str_eq(field("\"response_format\""), "");
	ck_assert(!ig_structured_output(NULL));
}
END_TEST

IG_CHECK_MAIN("structured", openai_response_format, vllm_fields, sglang_fields, not_an_object)
