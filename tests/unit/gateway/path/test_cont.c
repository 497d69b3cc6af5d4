/* Unit tests for a broken stream's continuation (src/gateway/path/cont.c): the
 * text and tokens read from relayed events, the body that asks the next
 * backend to go on, a continuation's events in the first one's name, and
 * the streams that cannot be continued. */
#include "../../../../src/gateway/path/cont.c"

#include <check.h>

#include "../../check_main.h"

/* Feeds one data payload; returns the action, *out the rewrite (or NULL). */
static enum ig_cont_action ev(struct ig_cont *c, const char *d, char **out)
{
	return ig_cont_event(c, d, strlen(d), out);
}

static void keep(struct ig_cont *c, const char *d)
{
	char *out;
	ck_assert_int_eq(ev(c, d, &out), IG_CONT_KEEP);
	ck_assert_ptr_null(out);
}

#define CHUNK(text) "{\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":" \
		    "[{\"index\":0,\"delta\":{\"content\":\"" text "\"},\"finish_reason\":null}]}"

static json_t *body_of(struct ig_cont *c, const char *body, const char **why)
{
	char *s = ig_cont_body(c, body, strlen(body), why);
	if (!s)
		return NULL;
	json_t *o = json_loads(s, 0, NULL);
	free(s);
	ck_assert_ptr_nonnull(o);
	return o;
}

START_TEST(chat_text_is_read_and_the_body_continues_it)
{
	struct ig_cont c;
	ig_cont_init(&c, 2);
	keep(&c, "{\"id\":\"a\",\"object\":\"chat.completion.chunk\",\"created\":5,\"model\":\"m\",\"choices\":"
		 "[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}");
	keep(&c, CHUNK("Hello"));
	keep(&c, CHUNK(" wor\\\"ld"));
	keep(&c, "[DONE]");
	ck_assert_int_eq(c.tokens, 2);
	ck_assert_uint_eq(c.text.len, 12);
	ck_assert(memcmp(c.text.data, "Hello wor\"ld", 12) == 0);
	const char *why = "x";
	json_t *o = body_of(&c, "{\"model\":\"m\",\"max_tokens\":10,\"min_tokens\":1,\"stream\":true,"
				"\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &why);
	ck_assert_ptr_nonnull(o);
	ck_assert_ptr_null(why);
	json_t *msgs = json_object_get(o, "messages");
	ck_assert_uint_eq(json_array_size(msgs), 2);
	json_t *last = json_array_get(msgs, 1);
	ck_assert_str_eq(json_string_value(json_object_get(last, "role")), "assistant");
	ck_assert_str_eq(json_string_value(json_object_get(last, "content")), "Hello wor\"ld");
	ck_assert(json_is_true(json_object_get(o, "continue_final_message")));
	ck_assert(json_is_false(json_object_get(o, "add_generation_prompt")));
	ck_assert_int_eq(json_integer_value(json_object_get(o, "max_tokens")), 8);
	ck_assert_int_eq(json_integer_value(json_object_get(o, "min_tokens")), 0);
	json_decref(o);
	ig_cont_free(&c);
}
END_TEST

START_TEST(a_continuations_events_carry_the_first_ones_name_and_the_whole_usage)
{
	struct ig_cont c;
	ig_cont_init(&c, 2);
	keep(&c, CHUNK("One"));
	keep(&c, CHUNK(" two"));
	keep(&c, CHUNK(" three"));
	ig_cont_begin(&c);
	char *out;
	/* its opening role chunk goes */
	ck_assert_int_eq(ev(&c, "{\"id\":\"b\",\"created\":9,\"model\":\"m2\",\"choices\":[{\"index\":0,\"delta\":"
				"{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}", &out),
			 IG_CONT_DROP);
	ck_assert_ptr_null(out);
	ck_assert_int_eq(ev(&c, "{\"id\":\"b\",\"created\":9,\"model\":\"m2\",\"choices\":[{\"index\":0,\"delta\":"
				"{\"content\":\" four\"},\"finish_reason\":null}]}", &out),
			 IG_CONT_REWRITE);
	ck_assert_str_eq(out, "{\"id\":\"a\",\"created\":5,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":"
			      "{\"content\":\" four\"},\"finish_reason\":null}]}");
	free(out);
	/* usage: the prompt as sent (the continuation's held the 3 tokens
	 * relayed before it), the completion of both attempts */
	ck_assert_int_eq(ev(&c, "{\"id\":\"b\",\"created\":9,\"model\":\"m2\",\"choices\":[],\"usage\":"
				"{\"prompt_tokens\":13,\"completion_tokens\":1,\"total_tokens\":14}}", &out),
			 IG_CONT_REWRITE);
	ck_assert_str_eq(out, "{\"id\":\"a\",\"created\":5,\"model\":\"m\",\"choices\":[],\"usage\":"
			      "{\"prompt_tokens\":10,\"completion_tokens\":4,\"total_tokens\":14}}");
	free(out);
	ck_assert_int_eq(c.tokens, 4);
	ck_assert_int_eq(c.reprefilled, 13);
	ig_cont_free(&c);
}
END_TEST

START_TEST(completions_continue_after_the_prompt_and_the_text)
{
	struct ig_cont c;
	ig_cont_init(&c, 1);
	keep(&c, "{\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":"
		 "[{\"index\":0,\"text\":\"Once\",\"logprobs\":null,\"finish_reason\":null}]}");
	keep(&c, "{\"id\":\"c\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":"
		 "[{\"index\":0,\"text\":\" more\",\"logprobs\":null,\"finish_reason\":null}]}");
	const char *why;
	json_t *o = body_of(&c, "{\"model\":\"m\",\"prompt\":[\"tell: \"],\"max_tokens\":5}", &why);
	ck_assert_ptr_nonnull(o);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(o, "prompt"), 0)), "tell: Once more");
	ck_assert_int_eq(json_integer_value(json_object_get(o, "max_tokens")), 3);
	json_decref(o);
	ck_assert(ig_cont_possible(&c));
	ig_cont_begin(&c);
	ck_assert(!ig_cont_possible(&c)); /* continue.max: 1 */
	ig_cont_free(&c);
}
END_TEST

/* What is not continued, each with its reason. */
START_TEST(streams_that_cannot_be_continued_say_why)
{
	static const struct {
		const char *event, *body, *why;
	} cases[] = {
		{"{\"id\":\"a\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":"
		 "[{\"index\":0,\"function\":{\"name\":\"f\"}}]}}]}",
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tool calls"},
		{"{\"id\":\"a\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":"
		 "\"hmm\"}}]}",
		 "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "reasoning"},
		{CHUNK("x"), "{\"n\":2,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "several choices"},
		{"{\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"x\"}]}",
		 "{\"prompt\":\"p\",\"echo\":true}", "echo"},
		{"{\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"x\"}]}",
		 "{\"prompt\":[1,2,3]}", "token ids"},
		{CHUNK("x"), "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "every token"},
		{CHUNK("x"), "not json", "gone"},
		/* structured outputs (structured.c): OpenAI's, vLLM's, SGLang's */
		{CHUNK("{\\\"a\\\": "), "{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}},"
		 "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "structured output"},
		{CHUNK("{"), "{\"guided_regex\":\"a+\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
		 "structured output"},
		{"{\"id\":\"c\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"x\"}]}",
		 "{\"prompt\":\"p\",\"ebnf\":\"root ::= x\"}", "structured output"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct ig_cont c;
		char *out;
		ig_cont_init(&c, 2);
		ev(&c, CHUNK(""), &out); /* the head */
		free(out);
		ev(&c, cases[i].event, &out);
		free(out);
		const char *why = NULL;
		char *b = ig_cont_body(&c, cases[i].body, strlen(cases[i].body), &why);
		ck_assert_msg(!b && why && strstr(why, cases[i].why), "case %zu: %s", i, why ? why : b);
		ig_cont_free(&c);
	}
	/* continue.max 0: nothing read, nothing rewritten */
	struct ig_cont c;
	ig_cont_init(&c, 0);
	keep(&c, CHUNK("x"));
	ck_assert_int_eq(c.tokens, 0);
	ck_assert(!ig_cont_possible(&c));
	ig_cont_free(&c);
}
END_TEST

IG_CHECK_MAIN("cont", chat_text_is_read_and_the_body_continues_it,
	      a_continuations_events_carry_the_first_ones_name_and_the_whole_usage,
	      completions_continue_after_the_prompt_and_the_text, streams_that_cannot_be_continued_say_why)
