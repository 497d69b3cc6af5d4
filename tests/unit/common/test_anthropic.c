/* Unit tests for src/common/anthropic.c and its part anthropic_reply.c: Anthropic Messages requests into
 * chat requests (every block kind, every refusal naming its field, hostile
 * bodies of every wrong type), chat completions back into Messages, the
 * stream translator's event order, and the error bodies. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/anthropic.h"
#include "infergate/buf.h"
#include "../check_main.h"

static json_t *parse(const char *text)
{
	json_error_t e;
	json_t *j = json_loads(text, JSON_DECODE_ANY, &e);
	if (!j)
		ck_abort_msg("bad test JSON: %s: %s", e.text, text);
	return j;
}

/* The chat request for an Anthropic body, or NULL with *err. */
static json_t *to_chat(const char *body, enum ig_anth_kind kind, char **err)
{
	json_t *req = parse(body);
	json_t *chat = ig_anth_to_chat(req, kind, err);
	json_decref(req);
	if (chat)
		ck_assert_ptr_null(*err);
	else
		ck_assert_ptr_nonnull(*err);
	return chat;
}

static void assert_json(json_t *got, const char *want_text)
{
	json_t *want = parse(want_text);
	char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS);
	char *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
	ck_assert_msg(json_equal(got, want), "got  %s\nwant %s", g, w);
	free(g);
	free(w);
	json_decref(want);
}

/* The body is refused with a message that starts with `prefix`. */
static void assert_refused(const char *body, enum ig_anth_kind kind, const char *prefix)
{
	char *err = NULL;
	json_t *chat = to_chat(body, kind, &err);
	ck_assert_ptr_null(chat);
	ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "for %s\n  got  '%s'\n  want '%s...'", body, err,
		      prefix);
	free(err);
}

START_TEST(request_simple)
{
	char *err = NULL;
	json_t *chat = to_chat("{\"model\":\"m\",\"max_tokens\":64,\"system\":\"be brief\","
			       "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
			       "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"stop_sequences\":[\"END\",\"\\n\\n\"],"
			       "\"metadata\":{\"user_id\":\"u-1\"}}",
			       IG_ANTH_MESSAGES, &err);
	assert_json(chat, "{\"model\":\"m\",\"max_tokens\":64,\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
			  "{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,"
			  "\"stop\":[\"END\",\"\\n\\n\"],\"user\":\"u-1\"}");
	json_decref(chat);
}
END_TEST

START_TEST(request_stream_and_ignored)
{
	char *err = NULL;
	/* cache_control, citations, service_tier, thinking and thinking
	 * blocks are accepted and dropped */
	json_t *chat = to_chat(
		"{\"model\":\"m\",\"max_tokens\":8,\"stream\":true,\"service_tier\":\"auto\","
		"\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024},\"anthropic_version\":\"vertex-2023-10-16\","
		"\"system\":[{\"type\":\"text\",\"text\":\"a\",\"cache_control\":{\"type\":\"ephemeral\"}},"
		"{\"type\":\"text\",\"text\":\"b\"}],"
		"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\",\"citations\":null}]},"
		"{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
		"{\"type\":\"redacted_thinking\",\"data\":\"xx\"},{\"type\":\"text\",\"text\":\"r\"}]},"
		"{\"role\":\"user\",\"content\":\"more\"}]}",
		IG_ANTH_MESSAGES, &err);
	assert_json(chat, "{\"model\":\"m\",\"max_tokens\":8,\"stream\":true,\"stream_options\":{\"include_usage\":true},"
			  "\"messages\":[{\"role\":\"system\",\"content\":\"a\\nb\"},{\"role\":\"user\",\"content\":\"q\"},"
			  "{\"role\":\"assistant\",\"content\":\"r\"},{\"role\":\"user\",\"content\":\"more\"}]}");
	json_decref(chat);
	/* an assistant turn of thinking alone stays a turn, empty */
	chat = to_chat("{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"q\"},"
		       "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"t\",\"signature\":\"s\"}]},"
		       "{\"role\":\"user\",\"content\":\"again\"}]}",
		       IG_ANTH_MESSAGES, &err);
	assert_json(json_object_get(chat, "messages"), "[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\","
						       "\"content\":\"\"},{\"role\":\"user\",\"content\":\"again\"}]");
	json_decref(chat);
}
END_TEST

START_TEST(request_images)
{
	char *err = NULL;
	json_t *chat = to_chat(
		"{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":["
		"{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"iVBOR\"}},"
		"{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"https://example.com/a.jpg\"}},"
		"{\"type\":\"text\",\"text\":\"what is it?\"}]}]}",
		IG_ANTH_MESSAGES, &err);
	assert_json(chat, "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":["
			  "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,iVBOR\"}},"
			  "{\"type\":\"image_url\",\"image_url\":{\"url\":\"https://example.com/a.jpg\"}},"
			  "{\"type\":\"text\",\"text\":\"what is it?\"}]}]}");
	json_decref(chat);
}
END_TEST

/* A whole tool round: the tools, the assistant's tool_use, the user's
 * tool_result (string and blocks), and the user's next words. */
START_TEST(request_tools)
{
	char *err = NULL;
	json_t *chat = to_chat(
		"{\"model\":\"m\",\"max_tokens\":8,"
		"\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather of a city\",\"input_schema\":"
		"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}},\"cache_control\":{\"type\":\"ephemeral\"}},"
		"{\"type\":\"custom\",\"name\":\"noop\",\"input_schema\":{\"type\":\"object\"},\"strict\":true}],"
		"\"tool_choice\":{\"type\":\"any\",\"disable_parallel_tool_use\":true},"
		"\"messages\":[{\"role\":\"user\",\"content\":\"weather in Paris and Rome?\"},"
		"{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Checking.\"},"
		"{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}},"
		"{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"get_weather\",\"input\":{\"city\":\"Rome\"}}]},"
		"{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":\"18C\"},"
		"{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_2\",\"is_error\":false,\"content\":["
		"{\"type\":\"text\",\"text\":\"21C\"},{\"type\":\"text\",\"text\":\"sunny\"},"
		"{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"http://x/map.png\"}}]},"
		"{\"type\":\"text\",\"text\":\"thanks\"}]}]}",
		IG_ANTH_MESSAGES, &err);
	assert_json(chat,
		    "{\"model\":\"m\",\"max_tokens\":8,"
		    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather of a "
		    "city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},"
		    "{\"type\":\"function\",\"function\":{\"name\":\"noop\",\"parameters\":{\"type\":\"object\"},\"strict\":true}}],"
		    "\"tool_choice\":\"required\",\"parallel_tool_calls\":false,"
		    "\"messages\":[{\"role\":\"user\",\"content\":\"weather in Paris and Rome?\"},"
		    "{\"role\":\"assistant\",\"content\":\"Checking.\",\"tool_calls\":["
		    "{\"id\":\"toolu_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
		    "\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
		    "{\"id\":\"toolu_2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
		    "\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},"
		    "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"18C\"},"
		    "{\"role\":\"tool\",\"tool_call_id\":\"toolu_2\",\"content\":\"21C\\nsunny\"},"
		    "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"http://x/map.png\"}},"
		    "{\"type\":\"text\",\"text\":\"thanks\"}]}]}");
	json_decref(chat);

	/* tool results alone are tool messages; an assistant of tool calls
	 * alone has null content */
	chat = to_chat("{\"model\":\"m\",\"max_tokens\":8,\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},"
		       "\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\","
		       "\"input\":{}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\"}]}]}",
		       IG_ANTH_MESSAGES, &err);
	assert_json(chat, "{\"model\":\"m\",\"max_tokens\":8,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
			  "\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"a\",\"type\":"
			  "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
			  "{\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"\"}]}");
	json_decref(chat);

	static const char *const choices[][2] = {{"auto", "\"auto\""}, {"none", "\"none\""}};
	for (size_t i = 0; i < 2; i++) {
		char *body = NULL;
		ck_assert_int_ge(asprintf(&body, "{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"%s\"},"
						 "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
					  choices[i][0]),
				 0);
		chat = to_chat(body, IG_ANTH_MESSAGES, &err);
		json_t *want = parse(choices[i][1]);
		ck_assert(json_equal(json_object_get(chat, "tool_choice"), want));
		json_decref(want);
		json_decref(chat);
		free(body);
	}
}
END_TEST

/* What Claude Code (2.1.337, `claude -p`) sends besides the basics, each
 * accepted: thinking adaptive, context_management's edits, output_config's
 * effort and a tool's defer_loading are dropped; a role "system" turn amid
 * the conversation becomes a chat system message where it stands. */
START_TEST(request_claude_code)
{
	char *err = NULL;
	json_t *chat = to_chat(
		"{\"model\":\"m\",\"max_tokens\":32000,\"stream\":true,"
		"\"thinking\":{\"type\":\"adaptive\",\"display\":\"omitted\"},"
		"\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\",\"keep\":\"all\"},"
		"{\"type\":\"clear_tool_uses_20250919\",\"trigger\":{\"type\":\"input_tokens\",\"value\":100000}}]},"
		"\"output_config\":{\"effort\":\"high\"},"
		"\"metadata\":{\"user_id\":\"{\\\"device_id\\\":\\\"d\\\",\\\"account_uuid\\\":\\\"\\\","
		"\\\"session_id\\\":\\\"s1\\\"}\"},"
		"\"system\":[{\"type\":\"text\",\"text\":\"header\"},"
		"{\"type\":\"text\",\"text\":\"agent\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
		"\"tools\":[{\"name\":\"Read\",\"description\":\"r\",\"input_schema\":{\"type\":\"object\"}},"
		"{\"name\":\"Later\",\"input_schema\":{\"type\":\"object\"},\"defer_loading\":true}],"
		"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"reminder\"},"
		"{\"type\":\"text\",\"text\":\"say hello\"}]},"
		"{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"# Environment\","
		"\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":\"linux\"}]},"
		"{\"role\":\"assistant\",\"content\":\"hello\"},{\"role\":\"system\",\"content\":\"plain\"},"
		"{\"role\":\"user\",\"content\":\"again\"}]}",
		IG_ANTH_MESSAGES, &err);
	assert_json(chat, "{\"model\":\"m\",\"max_tokens\":32000,\"stream\":true,"
			  "\"stream_options\":{\"include_usage\":true},"
			  "\"user\":\"{\\\"device_id\\\":\\\"d\\\",\\\"account_uuid\\\":\\\"\\\",\\\"session_id\\\":\\\"s1\\\"}\","
			  "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"Read\",\"description\":\"r\","
			  "\"parameters\":{\"type\":\"object\"}}},{\"type\":\"function\",\"function\":{\"name\":\"Later\","
			  "\"parameters\":{\"type\":\"object\"}}}],"
			  "\"messages\":[{\"role\":\"system\",\"content\":\"header\\nagent\"},"
			  "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"reminder\"},"
			  "{\"type\":\"text\",\"text\":\"say hello\"}]},"
			  "{\"role\":\"system\",\"content\":\"# Environment\\nlinux\"},"
			  "{\"role\":\"assistant\",\"content\":\"hello\"},{\"role\":\"system\",\"content\":\"plain\"},"
			  "{\"role\":\"user\",\"content\":\"again\"}]}");
	json_decref(chat);
	/* count_tokens takes context_management and output_config too */
	chat = to_chat("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
		       "\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\"}]},"
		       "\"output_config\":{\"effort\":\"low\"}}",
		       IG_ANTH_COUNT_TOKENS, &err);
	assert_json(chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
	json_decref(chat);
	/* what a chat backend cannot do stays refused, each naming its field:
	 * Claude Code resends without system turns when one is refused */
	const char *M = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
	struct {
		const char *body, *prefix;
	} cases[] = {
		{"\"context_management\":[]", "context_management: Input should be a valid dictionary"},
		{"\"context_management\":{\"edits\":{}}", "context_management.edits: Input should be a valid list"},
		{"\"context_management\":{\"edits\":[{\"type\":\"compact\"}]}",
		 "context_management.edits.0.type: Input tag 'compact' found"},
		{"\"context_management\":{\"edits\":[7]}", "context_management.edits.0: Input should be a valid dictionary"},
		{"\"context_management\":{\"edits\":[],\"x\":1}", "context_management.x: Extra inputs are not permitted"},
		{"\"output_config\":\"high\"", "output_config: Input should be a valid dictionary"},
		{"\"output_config\":{\"effort\":3}", "output_config.effort: Input should be a valid string"},
		{"\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}",
		 "output_config.format: not supported by this server"},
		{"\"tools\":[{\"name\":\"f\",\"input_schema\":{},\"defer_loading\":\"yes\"}]",
		 "tools.0.defer_loading: Input should be a valid boolean"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char body[512];
		snprintf(body, sizeof(body), "{\"model\":\"m\",\"max_tokens\":1,%s,%s}", M, cases[i].body);
		assert_refused(body, IG_ANTH_MESSAGES, cases[i].prefix);
	}
	const char *turns[][2] = {
		{"{\"role\":\"system\",\"content\":[{\"type\":\"tool_addition\",\"tool\":{}}]}",
		 "messages.1.content.0.type: Input should be 'text'"},
		{"{\"role\":\"system\",\"content\":\"x\",\"clear_at\":\"next_user_message\"}",
		 "messages.1.clear_at: not supported by this server"},
		{"{\"role\":\"system\",\"content\":[],\"output_config\":{\"effort\":\"low\"}}",
		 "messages.1.output_config: not supported by this server"},
		{"{\"role\":\"system\",\"content\":5}", "messages.1.content: Input should be a valid string or a valid list"},
		{"{\"role\":\"system\"}", "messages.1.content: Field required"},
		{"{\"role\":\"tool\",\"content\":\"x\"}", "messages.1.role: Input should be 'user', 'assistant' or 'system'"},
	};
	for (size_t i = 0; i < sizeof(turns) / sizeof(turns[0]); i++) {
		char body[512];
		snprintf(body, sizeof(body), "{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\","
			 "\"content\":\"x\"},%s]}", turns[i][0]);
		assert_refused(body, IG_ANTH_MESSAGES, turns[i][1]);
	}
}
END_TEST

START_TEST(request_count_tokens)
{
	char *err = NULL;
	json_t *chat = to_chat("{\"model\":\"m\",\"system\":\"s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
			       "\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"thinking\":{\"type\":\"disabled\"}}",
			       IG_ANTH_COUNT_TOKENS, &err);
	assert_json(chat, "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
			  "\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
			  "{\"type\":\"object\"}}}]}");
	json_decref(chat);
	/* count_tokens takes no max_tokens nor stream, as Anthropic's */
	assert_refused("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
		       IG_ANTH_COUNT_TOKENS, "max_tokens: Extra inputs are not permitted");
	assert_refused("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", IG_ANTH_MESSAGES,
		       "max_tokens: Field required");
}
END_TEST

/* Every refusal names the field, in Anthropic's dotted style. */
START_TEST(request_refusals)
{
	const char *M = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
	struct {
		const char *body, *prefix;
	} cases[] = {
		{"[]", "body: Input should be a valid dictionary"},
		{"\"x\"", "body: Input should be a valid dictionary"},
		{"{\"max_tokens\":1,\"messages\":[]}", "model: Field required"},
		{"{\"model\":7,\"max_tokens\":1}", "model: Input should be a valid string"},
		{"{\"model\":\"\",\"max_tokens\":1}", "model: String should have at least 1 character"},
		{"{\"model\":\"m\",\"max_tokens\":1}", "messages: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":{}}", "messages: Input should be a valid list"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[]}", "messages: List should have at least 1 item"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[7]}", "messages.0: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}]}",
		 "messages.0.role: Input should be 'user', 'assistant' or 'system'"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"content\":\"x\"}]}", "messages.0.role: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\"}]}", "messages.0.content: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":5}]}",
		 "messages.0.content: Input should be a valid string or a valid list"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"n\"}]}",
		 "messages.0.name: Extra inputs are not permitted"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[]}]}",
		 "messages.0.content: List should have at least 1 item"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}",
		 "messages.0.content.0: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}",
		 "messages.0.content.0.type: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
		 "messages.0.content.0.text: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":1}]}]}",
		 "messages.0.content.0.text: Input should be a valid string"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"video\"}]}]}",
		 "messages.0.content.0.type: Input tag 'video' found"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\","
		 "\"source\":{}}]}]}",
		 "messages.0.content.0.type: 'document' blocks are not supported by this server"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\","
		 "\"id\":\"a\",\"name\":\"f\",\"input\":{}}]}]}",
		 "messages.0.content.0.type: 'tool_use' blocks are not allowed in user messages"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_result\","
		 "\"tool_use_id\":\"a\"}]}]}",
		 "messages.0.content.0.type: 'tool_result' blocks are not allowed in assistant messages"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\"}]}]}",
		 "messages.0.content.0.source: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
		 "\"source\":{\"type\":\"file\",\"file_id\":\"f\"}}]}]}",
		 "messages.0.content.0.source.type: file sources are not supported"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
		 "\"source\":{\"type\":\"base64\",\"data\":\"x\"}}]}]}",
		 "messages.0.content.0.source.media_type: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
		 "\"source\":{\"type\":\"url\",\"url\":[]}}]}]}",
		 "messages.0.content.0.source.url: Input should be a valid string"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
		 "\"id\":\"a\",\"name\":\"f\",\"input\":\"{}\"}]}]}",
		 "messages.0.content.0.input: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\","
		 "\"name\":\"f\",\"input\":{}}]}]}",
		 "messages.0.content.0.id: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
		 "\"content\":\"x\"}]}]}",
		 "messages.0.content.0.tool_use_id: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
		 "\"tool_use_id\":\"a\",\"content\":7}]}]}",
		 "messages.0.content.0.content: Input should be a valid string or a valid list"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
		 "\"tool_use_id\":\"a\",\"content\":[{\"type\":\"tool_use\"}]}]}]}",
		 "messages.0.content.0.content.0.type: 'tool_use' blocks are not allowed in tool_result messages"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
		 "\"tool_use_id\":\"a\",\"is_error\":\"yes\"}]}]}",
		 "messages.0.content.0.is_error: Input should be a valid boolean"},
		{"{\"model\":\"m\",\"max_tokens\":\"8\"}", "max_tokens: Input should be a valid integer"},
		{"{\"model\":\"m\",\"max_tokens\":0}", "max_tokens: Input should be greater than or equal to 1"},
		{"{\"model\":\"m\",\"max_tokens\":1.5}", "max_tokens: Input should be a valid integer"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"temperature\":\"hot\"}", "temperature: Input should be a valid number"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"temperature\":1.5}", "temperature: Input should be between 0 and 1"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"top_p\":-0.1}", "top_p: Input should be between 0 and 1"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"top_k\":0.5}", "top_k: Input should be a valid integer"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"top_k\":-1}", "top_k: Input should be greater than or equal to 0"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"stop_sequences\":\"END\"}", "stop_sequences: Input should be a valid list"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"stop_sequences\":[\"a\",1]}", "stop_sequences.1: Input should be a valid string"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"stream\":\"yes\"}", "stream: Input should be a valid boolean"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"metadata\":[]}", "metadata: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"metadata\":{\"user_id\":5}}", "metadata.user_id: Input should be a valid string"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"metadata\":{\"team\":\"a\"}}", "metadata.team: Extra inputs are not permitted"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"system\":5}", "system: Input should be a valid string or a valid list"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"system\":[{\"type\":\"image\"}]}", "system.0.type: Input should be 'text'"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"system\":[\"x\"]}", "system.0: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":{}}", "tools: Input should be a valid list"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":[1]}", "tools.0: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"input_schema\":{}}]}", "tools.0.name: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"name\":\"f\"}]}", "tools.0.input_schema: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"name\":\"f\",\"input_schema\":[]}]}",
		 "tools.0.input_schema: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"name\":\"f\",\"input_schema\":{},\"description\":1}]}",
		 "tools.0.description: Input should be a valid string"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}",
		 "tools.0.type: 'web_search_20250305' tools (Anthropic's server tools) are not supported"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tools\":[{\"name\":\"f\",\"input_schema\":{},\"strict\":\"y\"}]}",
		 "tools.0.strict: Input should be a valid boolean"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":\"auto\"}", "tool_choice: Input should be a valid dictionary"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"tool\"}}", "tool_choice.name: Field required"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"maybe\"}}", "tool_choice.type: Input should be"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":1}}",
		 "tool_choice.disable_parallel_tool_use: Input should be a valid boolean"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"mcp_servers\":[]}", "mcp_servers: not supported by this server"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"container\":\"c\"}", "container: not supported by this server"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"n\":2}", "n: Extra inputs are not permitted"},
		{"{\"model\":\"m\",\"max_tokens\":1,\"frequency_penalty\":1}", "frequency_penalty: Extra inputs are not permitted"},
	};
	(void)M;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_refused(cases[i].body, IG_ANTH_MESSAGES, cases[i].prefix);
}
END_TEST

/* Hostile bodies: every member of a valid request replaced by each JSON
 * type in turn (and deeper members too) gives an answer or an error, and
 * never a crash or a leak (ASan runs this). */
static void mutate_all(json_t *root, json_t *node, int depth, size_t *runs)
{
	json_t *values[] = {json_null(), json_true(), json_integer(-1), json_real(1e308), json_string(""),
			    json_string("\xc3\xa9"), json_array(), json_object()};
	size_t nv = sizeof(values) / sizeof(values[0]);
	if (json_is_object(node)) {
		const char *key;
		json_t *v;
		void *tmp;
		json_object_foreach_safe(node, tmp, key, v) {
			json_t *keep = json_incref(v);
			for (size_t k = 0; k < nv; k++) {
				json_object_set(node, key, values[k]);
				for (int kind = 0; kind < 2; kind++) {
					char *err = NULL;
					json_t *chat = ig_anth_to_chat(root, (enum ig_anth_kind)kind, &err);
					ck_assert((chat == NULL) != (err == NULL));
					json_decref(chat);
					free(err);
					(*runs)++;
				}
			}
			json_object_set(node, key, keep);
			if (depth < 6)
				mutate_all(root, keep, depth + 1, runs);
			json_decref(keep);
		}
	} else if (json_is_array(node)) {
		for (size_t i = 0; i < json_array_size(node); i++) {
			json_t *keep = json_incref(json_array_get(node, i));
			for (size_t k = 0; k < nv; k++) {
				json_array_set(node, i, values[k]);
				char *err = NULL;
				json_t *chat = ig_anth_to_chat(root, IG_ANTH_MESSAGES, &err);
				ck_assert((chat == NULL) != (err == NULL));
				json_decref(chat);
				free(err);
				(*runs)++;
			}
			json_array_set(node, i, keep);
			if (depth < 6)
				mutate_all(root, keep, depth + 1, runs);
			json_decref(keep);
		}
	}
	for (size_t k = 0; k < nv; k++)
		json_decref(values[k]);
}

START_TEST(request_hostile)
{
	json_t *req = parse(
		"{\"model\":\"m\",\"max_tokens\":8,\"stream\":true,\"system\":[{\"type\":\"text\",\"text\":\"s\"}],"
		"\"metadata\":{\"user_id\":\"u\"},\"stop_sequences\":[\"x\"],\"temperature\":0.1,\"top_p\":0.5,\"top_k\":3,"
		"\"tools\":[{\"name\":\"f\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
		"\"tool_choice\":{\"type\":\"tool\",\"name\":\"f\"},"
		"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"q\"},"
		"{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AA\"}}]},"
		"{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":{\"k\":[1]}}]},"
		"{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\",\"content\":["
		"{\"type\":\"text\",\"text\":\"r\"},{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"u\"}}]}]}]}");
	char *err = NULL;
	json_t *chat = ig_anth_to_chat(req, IG_ANTH_MESSAGES, &err);
	ck_assert_ptr_nonnull(chat); /* the base request is valid */
	json_decref(chat);
	size_t runs = 0;
	mutate_all(req, req, 0, &runs);
	ck_assert_uint_gt(runs, 500);
	json_decref(req);
	/* not an object at all, and deep nesting */
	chat = ig_anth_to_chat(NULL, IG_ANTH_MESSAGES, &err);
	ck_assert_ptr_null(chat);
	free(err);
}
END_TEST

static json_t *from_chat(const char *completion, const char *stops)
{
	json_t *c = parse(completion), *s = stops ? parse(stops) : NULL;
	char *err = NULL;
	json_t *m = ig_anth_from_chat(c, s, &err);
	if (!m)
		ck_abort_msg("from_chat: %s", err);
	json_decref(c);
	json_decref(s);
	return m;
}

START_TEST(response_text)
{
	json_t *m = from_chat("{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion\",\"model\":\"qwen\",\"choices\":[{\"index\":0,"
			      "\"message\":{\"role\":\"assistant\",\"content\":\"Hello there\"},\"finish_reason\":\"stop\"}],"
			      "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15,"
			      "\"prompt_tokens_details\":{\"cached_tokens\":8}}}",
			      NULL);
	assert_json(m, "{\"id\":\"msg_abc\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"qwen\",\"content\":"
		       "[{\"type\":\"text\",\"text\":\"Hello there\"}],\"stop_reason\":\"end_turn\",\"stop_sequence\":null,"
		       "\"usage\":{\"input_tokens\":12,\"output_tokens\":3,\"cache_read_input_tokens\":8}}");
	json_decref(m);
	/* length -> max_tokens; no usage -> zeros; no cached -> no cache field */
	m = from_chat("{\"id\":\"x\",\"model\":\"q\",\"choices\":[{\"message\":{\"content\":\"Hel\"},\"finish_reason\":\"length\"}]}",
		      NULL);
	assert_json(m, "{\"id\":\"msg_x\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"q\",\"content\":"
		       "[{\"type\":\"text\",\"text\":\"Hel\"}],\"stop_reason\":\"max_tokens\",\"stop_sequence\":null,"
		       "\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}");
	json_decref(m);
}
END_TEST

/* A stop sequence is reported when the backend names the string it
 * matched (vLLM stop_reason, SGLang matched_stop) and the request had it;
 * a token id there is the end of the turn. */
START_TEST(response_stop_sequence)
{
	const char *fmt[] = {
		"{\"id\":\"x\",\"choices\":[{\"message\":{\"content\":\"a\"},\"finish_reason\":\"stop\",\"stop_reason\":\"END\"}]}",
		"{\"id\":\"x\",\"choices\":[{\"message\":{\"content\":\"a\"},\"finish_reason\":\"stop\",\"matched_stop\":\"END\"}]}",
	};
	for (int i = 0; i < 2; i++) {
		json_t *m = from_chat(fmt[i], "[\"STOP\",\"END\"]");
		ck_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "stop_sequence");
		ck_assert_str_eq(json_string_value(json_object_get(m, "stop_sequence")), "END");
		json_decref(m);
		m = from_chat(fmt[i], "[\"STOP\"]"); /* not one the request asked */
		ck_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "end_turn");
		ck_assert(json_is_null(json_object_get(m, "stop_sequence")));
		json_decref(m);
	}
	json_t *m = from_chat("{\"id\":\"x\",\"choices\":[{\"message\":{\"content\":\"a\"},\"finish_reason\":\"stop\","
			      "\"matched_stop\":151645}]}",
			      "[\"END\"]");
	ck_assert_str_eq(json_string_value(json_object_get(m, "stop_reason")), "end_turn");
	json_decref(m);
}
END_TEST

START_TEST(response_tool_calls)
{
	json_t *m = from_chat("{\"id\":\"chatcmpl-7\",\"model\":\"q\",\"choices\":[{\"message\":{\"content\":null,\"tool_calls\":["
			      "{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":"
			      "\"{\\\"city\\\": \\\"Paris\\\"}\"}},"
			      "{\"type\":\"function\",\"function\":{\"name\":\"noop\",\"arguments\":\"\"}}]},"
			      "\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":9}}",
			      NULL);
	assert_json(m, "{\"id\":\"msg_7\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"q\",\"content\":["
		       "{\"type\":\"tool_use\",\"id\":\"call_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}},"
		       "{\"type\":\"tool_use\",\"id\":\"toolu_7_1\",\"name\":\"noop\",\"input\":{}}],"
		       "\"stop_reason\":\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":5,\"output_tokens\":9}}");
	json_decref(m);
}
END_TEST

START_TEST(response_refused)
{
	const char *bad[] = {
		"[]", "{}", "{\"choices\":[]}", "{\"choices\":[1]}", "{\"choices\":[{}]}",
		"{\"choices\":[{\"message\":{\"content\":5}}]}",
		"{\"choices\":[{\"message\":{\"tool_calls\":{}}}]}",
		"{\"choices\":[{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}}]}",
		"{\"choices\":[{\"message\":{\"tool_calls\":[{\"function\":{\"name\":\"f\",\"arguments\":\"{bad\"}}]}}]}",
		"{\"choices\":[{\"message\":{\"tool_calls\":[{\"function\":{\"arguments\":\"{}\"}}]}}]}",
		"{\"choices\":[{\"message\":{\"tool_calls\":[7]}}]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *c = parse(bad[i]);
		char *err = NULL;
		json_t *m = ig_anth_from_chat(c, NULL, &err);
		ck_assert_msg(m == NULL && err != NULL, "accepted %s", bad[i]);
		free(err);
		json_decref(c);
	}
	/* loose but valid: odd ids, models and usage types are read as absent */
	json_t *m = from_chat("{\"id\":5,\"model\":[],\"usage\":\"x\",\"choices\":[{\"message\":{},\"finish_reason\":7}]}", NULL);
	assert_json(m, "{\"id\":\"msg_\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"\",\"content\":[],"
		       "\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}");
	json_decref(m);
}
END_TEST

/* The events' names and data, as one JSON text, for comparing. */
static json_t *feed_all(const char *const *chunks, size_t n, const char *stops, bool done)
{
	json_t *s = stops ? parse(stops) : NULL;
	struct ig_anth_stream *st = ig_anth_stream_new("asked-model", s);
	json_decref(s);
	json_t *events = json_array();
	for (size_t i = 0; i < n; i++) {
		json_t *c = parse(chunks[i]);
		char *err = NULL;
		int rc = ig_anth_stream_feed(st, c, events, &err);
		if (rc < 0)
			ig_anth_stream_fail(st, 502, err, events);
		free(err);
		json_decref(c);
	}
	if (done)
		ig_anth_stream_done(st, events);
	ck_assert(ig_anth_stream_ended(st) || !done);
	ig_anth_stream_free(st);
	return events;
}

static void assert_names(json_t *events, const char *want)
{
	struct ig_buf b;
	ig_buf_init(&b);
	size_t i;
	json_t *ev;
	json_array_foreach(events, i, ev) {
		ig_buf_printf(&b, "%s%s", i ? " " : "", json_string_value(json_object_get(ev, "event")));
		/* the data's "type" is always the event's name */
		ck_assert_str_eq(json_string_value(json_object_get(json_object_get(ev, "data"), "type")),
				 json_string_value(json_object_get(ev, "event")));
	}
	ig_buf_append(&b, "", 1);
	ck_assert_str_eq(b.data, want);
	ig_buf_free(&b);
}

START_TEST(stream_text)
{
	const char *chunks[] = {
		"{\"id\":\"chatcmpl-s1\",\"object\":\"chat.completion.chunk\",\"model\":\"qwen\",\"choices\":[{\"index\":0,"
		"\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}",
		"{\"id\":\"chatcmpl-s1\",\"model\":\"qwen\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}",
		"{\"id\":\"chatcmpl-s1\",\"model\":\"qwen\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}",
		"{\"id\":\"chatcmpl-s1\",\"model\":\"qwen\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}",
		"{\"id\":\"chatcmpl-s1\",\"model\":\"qwen\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,"
		"\"prompt_tokens_details\":{\"cached_tokens\":4}}}",
	};
	json_t *ev = feed_all(chunks, 5, NULL, true);
	assert_names(ev, "message_start content_block_start content_block_delta content_block_delta content_block_stop "
			 "message_delta message_stop");
	assert_json(json_object_get(json_array_get(ev, 0), "data"),
		    "{\"type\":\"message_start\",\"message\":{\"id\":\"msg_s1\",\"type\":\"message\",\"role\":\"assistant\","
		    "\"model\":\"qwen\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,"
		    "\"output_tokens\":0}}}");
	assert_json(json_object_get(json_array_get(ev, 1), "data"),
		    "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}");
	assert_json(json_object_get(json_array_get(ev, 2), "data"),
		    "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}");
	assert_json(json_object_get(json_array_get(ev, 4), "data"), "{\"type\":\"content_block_stop\",\"index\":0}");
	assert_json(json_object_get(json_array_get(ev, 5), "data"),
		    "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},"
		    "\"usage\":{\"input_tokens\":7,\"output_tokens\":2,\"cache_read_input_tokens\":4}}");
	/* the SSE bytes */
	struct ig_buf b;
	ig_buf_init(&b);
	ck_assert_int_eq(ig_anth_sse_append(&b, ev), 0);
	ig_buf_append(&b, "", 1);
	ck_assert(strncmp(b.data, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_s1\"", 74) == 0);
	ck_assert(strstr(b.data, "\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") != NULL);
	ig_buf_free(&b);
	json_decref(ev);
}
END_TEST

/* Text, then two tool calls streamed as OpenAI streams them (the first
 * delta with id and name, arguments in pieces): three blocks, in order. */
START_TEST(stream_tools)
{
	const char *chunks[] = {
		"{\"id\":\"c\",\"model\":\"q\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me check.\"}}]}",
		"{\"id\":\"c\",\"model\":\"q\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\","
		"\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}",
		"{\"id\":\"c\",\"model\":\"q\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
		"{\"arguments\":\"{\\\"city\\\":\"}}]}}]}",
		"{\"id\":\"c\",\"model\":\"q\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":"
		"{\"arguments\":\" \\\"Paris\\\"}\"}}]}}]}",
		"{\"id\":\"c\",\"model\":\"q\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\","
		"\"function\":{\"name\":\"noop\",\"arguments\":\"{}\"}}]}}]}",
		"{\"id\":\"c\",\"model\":\"q\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}],"
		"\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":20}}",
	};
	json_t *ev = feed_all(chunks, 6, NULL, true);
	assert_names(ev, "message_start content_block_start content_block_delta content_block_stop content_block_start "
			 "content_block_delta content_block_delta content_block_stop content_block_start content_block_delta "
			 "content_block_stop message_delta message_stop");
	assert_json(json_object_get(json_array_get(ev, 4), "data"),
		    "{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"call_a\","
		    "\"name\":\"get_weather\",\"input\":{}}}");
	assert_json(json_object_get(json_array_get(ev, 5), "data"),
		    "{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
		    "\"partial_json\":\"{\\\"city\\\":\"}}");
	assert_json(json_object_get(json_array_get(ev, 8), "data"),
		    "{\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"call_b\","
		    "\"name\":\"noop\",\"input\":{}}}");
	assert_json(json_object_get(json_array_get(ev, 10), "data"), "{\"type\":\"content_block_stop\",\"index\":2}");
	assert_json(json_object_get(json_array_get(ev, 11), "data"),
		    "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},"
		    "\"usage\":{\"input_tokens\":3,\"output_tokens\":20}}");
	json_decref(ev);

	/* arguments of a call whose block was closed cannot be placed */
	const char *interleaved[] = {
		"{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"a\",\"function\":{\"name\":\"f\"}}]}}]}",
		"{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"b\",\"function\":{\"name\":\"g\"}}]}}]}",
		"{\"id\":\"c\",\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}",
	};
	ev = feed_all(interleaved, 3, NULL, true);
	assert_names(ev, "message_start content_block_start content_block_stop content_block_start error");
	json_decref(ev);
}
END_TEST

START_TEST(stream_stop_and_length)
{
	const char *stop[] = {
		"{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
		"{\"id\":\"c\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\",\"stop_reason\":\"###\"}]}",
	};
	json_t *ev = feed_all(stop, 2, "[\"###\"]", true);
	json_t *md = json_object_get(json_array_get(ev, 4), "data");
	assert_json(json_object_get(md, "delta"), "{\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"###\"}");
	json_decref(ev);
	const char *len[] = {"{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"length\"}]}"};
	ev = feed_all(len, 1, NULL, true);
	md = json_object_get(json_array_get(ev, 4), "data");
	assert_json(json_object_get(md, "delta"), "{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null}");
	json_decref(ev);
}
END_TEST

/* The ends: no chunk at all, the backend's error chunks in each shape,
 * chunks after the end, garbage chunks. */
START_TEST(stream_ends)
{
	json_t *ev = feed_all(NULL, 0, NULL, true);
	assert_names(ev, "message_start message_delta message_stop");
	json_decref(ev);

	const char *err_vllm[] = {
		"{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
		"{\"error\":{\"object\":\"error\",\"message\":\"Internal server error\",\"type\":\"InternalServerError\",\"code\":500}}",
		"{\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"late\"}}]}",
	};
	ev = feed_all(err_vllm, 3, NULL, true);
	assert_names(ev, "message_start content_block_start content_block_delta error");
	assert_json(json_object_get(json_array_get(ev, 3), "data"),
		    "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}");
	json_decref(ev);

	const char *err_flat[] = {"{\"object\":\"error\",\"message\":\"busy\",\"code\":503}"};
	ev = feed_all(err_flat, 1, NULL, true);
	assert_names(ev, "error");
	ck_assert_str_eq(json_string_value(json_object_get(
				 json_object_get(json_object_get(json_array_get(ev, 0), "data"), "error"), "type")),
			 "overloaded_error");
	json_decref(ev);

	const char *garbage[] = {"[1,2]"};
	ev = feed_all(garbage, 1, NULL, true);
	assert_names(ev, "error");
	json_decref(ev);

	/* the caller's count of the prompt, when the first chunk has no usage */
	struct ig_anth_stream *hinted = ig_anth_stream_new("m", NULL);
	ig_anth_stream_input_tokens(hinted, 42);
	ev = json_array();
	ig_anth_stream_done(hinted, ev);
	ck_assert_int_eq(json_integer_value(json_object_get(
				 json_object_get(json_object_get(json_object_get(json_array_get(ev, 0), "data"), "message"),
						 "usage"),
				 "input_tokens")),
			 42);
	json_decref(ev);
	ig_anth_stream_free(hinted);

	/* done twice, fail after done: nothing more */
	struct ig_anth_stream *st = ig_anth_stream_new(NULL, NULL);
	ev = json_array();
	ig_anth_stream_done(st, ev);
	ig_anth_stream_done(st, ev);
	ig_anth_stream_fail(st, 500, "x", ev);
	assert_names(ev, "message_start message_delta message_stop");
	json_decref(ev);
	ig_anth_stream_free(st);
	ig_anth_stream_free(NULL);
}
END_TEST

/* Chunks with members of every wrong type: an error or events, never a
 * crash; the events stay in a legal order whatever comes. */
START_TEST(stream_hostile)
{
	const char *chunks[] = {
		"{\"id\":5,\"model\":{},\"choices\":[{\"delta\":{\"content\":\"a\"}}]}",
		"{\"choices\":{}}",
		"{\"choices\":[7]}",
		"{\"choices\":[{\"delta\":[]}]}",
		"{\"choices\":[{\"delta\":{\"content\":7}}]}",
		"{\"choices\":[{\"delta\":{\"tool_calls\":{}}}]}",
		"{\"choices\":[{\"delta\":{\"tool_calls\":[5]}}]}",
		"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":\"x\",\"function\":7}]}}]}",
		"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":5,\"arguments\":[]}}]}}]}",
		"{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":-9223372036854775807,\"function\":{}}]}}]}",
		"{\"choices\":[{\"index\":3,\"delta\":{\"content\":\"other choice\"}}]}",
		"{\"choices\":[{\"delta\":null,\"finish_reason\":[]}]}",
		"{\"choices\":[],\"usage\":{\"prompt_tokens\":\"x\",\"completion_tokens\":null}}",
		"{\"error\":5}",
		"{\"error\":\"Unauthorized\"}",
	};
	size_t n = sizeof(chunks) / sizeof(chunks[0]);
	/* each alone after a good start, and all in a row */
	for (size_t i = 0; i <= n; i++) {
		struct ig_anth_stream *st = ig_anth_stream_new("m", NULL);
		json_t *ev = json_array();
		for (size_t k = (i == n ? 0 : i); k < (i == n ? n : i + 1); k++) {
			json_t *c = parse(chunks[k]);
			char *err = NULL;
			if (ig_anth_stream_feed(st, c, ev, &err) < 0) {
				ck_assert_ptr_nonnull(err);
				free(err);
			}
			json_decref(c);
		}
		ig_anth_stream_done(st, ev);
		ck_assert(ig_anth_stream_ended(st));
		/* starts and stops pair up, with the same index */
		long open = -1;
		size_t k;
		json_t *e;
		json_array_foreach(ev, k, e) {
			const char *name = json_string_value(json_object_get(e, "event"));
			json_t *idx = json_object_get(json_object_get(e, "data"), "index");
			if (strcmp(name, "content_block_start") == 0) {
				ck_assert_int_eq(open, -1);
				open = (long)json_integer_value(idx);
			} else if (strcmp(name, "content_block_delta") == 0) {
				ck_assert_int_eq(open, (long)json_integer_value(idx));
			} else if (strcmp(name, "content_block_stop") == 0) {
				ck_assert_int_eq(open, (long)json_integer_value(idx));
				open = -1;
			}
		}
		struct ig_buf b;
		ig_buf_init(&b);
		ck_assert_int_eq(ig_anth_sse_append(&b, ev), 0);
		ig_buf_free(&b);
		json_decref(ev);
		ig_anth_stream_free(st);
	}
}
END_TEST

START_TEST(errors)
{
	static const struct {
		unsigned status;
		const char *type;
	} map[] = {{400, "invalid_request_error"}, {401, "authentication_error"}, {402, "billing_error"},
		   {403, "permission_error"}, {404, "not_found_error"}, {405, "invalid_request_error"},
		   {413, "request_too_large"}, {422, "invalid_request_error"}, {429, "rate_limit_error"},
		   {500, "api_error"}, {502, "api_error"}, {503, "overloaded_error"}, {504, "timeout_error"},
		   {529, "overloaded_error"}};
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		ck_assert_str_eq(ig_anth_error_type(map[i].status), map[i].type);

	char *s = ig_anth_error_json(404, NULL, "model \"x\" \xff not found");
	json_t *j = parse(s);
	assert_json(j, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"model \\\"x\\\" ? not found\"}}");
	json_decref(j);
	free(s);
	s = ig_anth_error_json(400, "custom_error", NULL);
	j = parse(s);
	assert_json(j, "{\"type\":\"error\",\"error\":{\"type\":\"custom_error\",\"message\":\"\"}}");
	json_decref(j);
	free(s);

	/* a backend's errors in each shape keep their message */
	static const struct {
		unsigned status;
		const char *body, *want;
	} backend[] = {
		{400, "{\"object\":\"error\",\"message\":\"too long\",\"type\":\"BadRequestError\",\"param\":null,\"code\":400}",
		 "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"too long\"}}"},
		{404, "{\"error\":{\"message\":\"The model `x` does not exist.\",\"type\":\"NotFoundError\",\"code\":404}}",
		 "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\",\"message\":\"The model `x` does not exist.\"}}"},
		{503, "{\"detail\":\"Service Unavailable\"}",
		 "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Service Unavailable\"}}"},
		{502, "<html>bad gateway</html>",
		 "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"<html>bad gateway</html>\"}}"},
		{500, "", "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"\"}}"},
	};
	for (size_t i = 0; i < sizeof(backend) / sizeof(backend[0]); i++) {
		s = ig_anth_error_from_backend(backend[i].status, backend[i].body, strlen(backend[i].body));
		j = parse(s);
		assert_json(j, backend[i].want);
		json_decref(j);
		free(s);
	}
	s = ig_anth_error_from_backend(500, NULL, 0);
	free(s);
}
END_TEST

/* The payloads of `data:` lines as ig_sse hands them over, [DONE] and
 * garbage included. */
START_TEST(stream_data_lines)
{
	static const char *const lines[] = {
		"{\"id\":\"chatcmpl-1\",\"model\":\"q\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}",
		"{\"id\":\"chatcmpl-1\",\"model\":\"q\",\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}",
		"[DONE]",
	};
	struct ig_anth_stream *st = ig_anth_stream_new("q", NULL);
	json_t *ev = json_array();
	for (size_t i = 0; i < 3; i++)
		ig_anth_stream_data(st, lines[i], strlen(lines[i]), ev);
	assert_names(ev, "message_start content_block_start content_block_delta content_block_stop message_delta "
			 "message_stop");
	json_decref(ev);
	ig_anth_stream_free(st);

	st = ig_anth_stream_new("q", NULL);
	ev = json_array();
	ig_anth_stream_data(st, lines[0], strlen(lines[0]), ev);
	ig_anth_stream_data(st, "{not json", 9, ev);
	ig_anth_stream_data(st, "[DONE]", 6, ev);
	assert_names(ev, "message_start content_block_start content_block_delta error");
	json_t *e = json_object_get(json_object_get(json_array_get(ev, 3), "data"), "error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "api_error");
	ck_assert(strncmp(json_string_value(json_object_get(e, "message")), "the backend's stream has a chunk that is not JSON",
			  49) == 0);
	json_decref(ev);
	ig_anth_stream_free(st);
}
END_TEST

IG_CHECK_MAIN("anthropic", request_simple, request_stream_and_ignored, request_images, request_tools,
	      request_claude_code, request_count_tokens, request_refusals, request_hostile, response_text,
	      response_stop_sequence, response_tool_calls, response_refused, stream_text, stream_tools,
	      stream_stop_and_length, stream_ends, stream_hostile, stream_data_lines, errors)
