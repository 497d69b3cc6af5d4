/* Whether a request constrains its answer (structured.h).
 *
 * The fields, each set when present and not null (the servers' pydantic
 * models default them to None):
 * - OpenAI: response_format of any type but "text" (json_object,
 *   json_schema; SGLang adds structural_tag), in chat and completions
 *   bodies; the Responses API's text.format likewise.
 * - vLLM: guided_json, guided_regex, guided_choice, guided_grammar
 *   (vllm/entrypoints/openai/protocol.py), and structured_outputs, its
 *   StructuredOutputsParams (vllm/sampling_params.py: json, regex, choice,
 *   grammar, json_object, structural_tag), which
 *   vllm/entrypoints/openai/chat_completion/protocol.py takes.
 * - SGLang: json_schema, regex, ebnf in a chat or completions body
 *   (python/sglang/srt/entrypoints/openai/protocol.py), and in /generate's
 *   sampling_params json_schema, regex, ebnf, structural_tag
 *   (python/sglang/srt/sampling/sampling_params.py).
 * structured_outputs with only options set (disable_any_whitespace,
 * whitespace_pattern, ...) and no constraint does not constrain. A
 * tool_choice of "required" or a named function is also decoded under a
 * grammar by vLLM, but its stream carries tool calls, which cont.c never
 * continues anyway. */
#include "config.h"
#include <string.h>

#include "path/structured.h"

static bool set(const json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return v && !json_is_null(v) && !json_is_false(v);
}

/* A response format of any type but "text" (a format with no type is
 * taken as constraining: the server will refuse it or follow it). */
static bool constraining_format(const json_t *f)
{
	if (!f || json_is_null(f))
		return false;
	const char *type = json_string_value(json_object_get(f, "type"));
	return !type || strcmp(type, "text") != 0;
}

const char *ig_structured_field(const json_t *body)
{
	if (!json_is_object(body))
		return NULL;
	if (constraining_format(json_object_get(body, "response_format")))
		return "response_format";
	json_t *text = json_object_get(body, "text");
	if (json_is_object(text) && constraining_format(json_object_get(text, "format")))
		return "text.format";
	static const char *const top[] = {"guided_json", "guided_regex", "guided_choice", "guided_grammar",
					  "json_schema", "regex", "ebnf", "structural_tag"};
	for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
		if (set(body, top[i]))
			return top[i];
	json_t *so = json_object_get(body, "structured_outputs");
	static const char *const so_keys[] = {"json", "regex", "choice", "grammar", "json_object", "structural_tag"};
	if (json_is_object(so))
		for (size_t i = 0; i < sizeof(so_keys) / sizeof(so_keys[0]); i++)
			if (set(so, so_keys[i]))
				return "structured_outputs";
	json_t *sp = json_object_get(body, "sampling_params");
	static const char *const sp_keys[] = {"sampling_params.json_schema", "sampling_params.regex",
					      "sampling_params.ebnf", "sampling_params.structural_tag"};
	if (json_is_object(sp))
		for (size_t i = 0; i < sizeof(sp_keys) / sizeof(sp_keys[0]); i++)
			if (set(sp, sp_keys[i] + strlen("sampling_params.")))
				return sp_keys[i];
	return NULL;
}

bool ig_structured_output(const json_t *body)
{
	return ig_structured_field(body) != NULL;
}
