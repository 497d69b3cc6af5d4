/* Unit tests for src/common/chattmpl.c: a model's chat template loaded from
 * its tokenizer_config.json (a string, or a list whose "default" entry is
 * used, and whose "tool_use" entry is used for a request with tools; the
 * special tokens as strings or {content} objects) and rendered with what a
 * chat request carries; every refusal says why (the file, the template's
 * line, the template's own raise_exception). Whole templates are compared
 * with the reference renderer in tests/integration/test_chattmpl_ref.py. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/chattmpl.h"
#include "../check_main.h"

static char path[64];

/* A tokenizer_config.json holding the given JSON. */
static const char *config(const char *json)
{
	snprintf(path, sizeof(path), "/tmp/test_chattmpl_XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert(write(fd, json, strlen(json)) == (ssize_t)strlen(json));
	close(fd);
	return path;
}

static char *render(const struct ig_chattmpl *t, const char *messages, const char *tools, bool gen, char *err,
                    size_t errlen)
{
	json_t *m = json_loads(messages, 0, NULL), *tl = tools ? json_loads(tools, 0, NULL) : NULL;
	ck_assert(m != NULL);
	char *out = NULL;
	size_t len = 0;
	int rc = ig_chattmpl_render(t, m, tl, gen, &out, &len, err, errlen);
	json_decref(m);
	json_decref(tl);
	if (rc != 0) {
		ck_assert(out == NULL);
		return NULL;
	}
	ck_assert_uint_eq(strlen(out), len);
	return out;
}

/* Llama-3's template as its tokenizer_config.json carries it: a bos_token
 * before the first message, content trimmed, the assistant header always. */
#define LLAMA3 "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = " \
	"'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + " \
	"'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}" \
	"{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"

START_TEST(loads_a_config_and_renders_a_chat)
{
	char err[512];
	struct ig_chattmpl *t = ig_chattmpl_load(
		config("{\"bos_token\": \"<|begin_of_text|>\", \"eos_token\": {\"__type\": \"AddedToken\", "
		       "\"content\": \"<|end_of_text|>\"}, \"model_max_length\": 1000000000000000019884624838656, "
		       "\"chat_template\": \"" LLAMA3 "\"}"),
		err, sizeof(err));
	unlink(path);
	ck_assert_msg(t != NULL, "%s", err);
	char *out = render(t, "[{\"role\": \"system\", \"content\": \" Be brief.\\n\"}, {\"role\": \"user\", \"content\": \"Hi\"}]",
	                   NULL, true, err, sizeof(err));
	ck_assert_msg(out != NULL, "%s", err);
	ck_assert_str_eq(out, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
	                      "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
	                      "<|start_header_id|>assistant<|end_header_id|>\n\n");
	free(out);
	/* a null content is no string to trim: refused, as the reference refuses it */
	ck_assert(render(t, "[{\"role\": \"user\", \"content\": null}]", NULL, true, err, sizeof(err)) == NULL);
	ck_assert_msg(strstr(err, "trim") != NULL, "%s", err);
	ig_chattmpl_free(t);
}
END_TEST

START_TEST(the_default_entry_and_tool_use_with_tools)
{
	char err[512];
	struct ig_chattmpl *t = ig_chattmpl_load(
		config("{\"eos_token\": \"</s>\", \"chat_template\": ["
		       "{\"name\": \"rag\", \"template\": \"rag\"},"
		       "{\"name\": \"default\", \"template\": \"{% for m in messages %}{{ m.content }}{% endfor %}"
		       "{% if add_generation_prompt %}>{% endif %}{{ eos_token }}{{ bos_token is defined }}\"},"
		       "{\"name\": \"tool_use\", \"template\": \"{{ tools|length }} tools {{ tools[0]|tojson }}\"}]}"),
		err, sizeof(err));
	unlink(path);
	ck_assert_msg(t != NULL, "%s", err);
	char *out = render(t, "[{\"role\": \"user\", \"content\": \"a\"}]", NULL, true, err, sizeof(err));
	ck_assert_str_eq(out, "a></s>false"); /* no bos_token in the config: undefined */
	free(out);
	out = render(t, "[{\"role\": \"user\", \"content\": \"a\"}]", NULL, false, err, sizeof(err));
	ck_assert_str_eq(out, "a</s>false");
	free(out);
	out = render(t, "[]", "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]", false, err,
	             sizeof(err));
	ck_assert_str_eq(out, "1 tools {\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}");
	free(out);
	ig_chattmpl_free(t);
}
END_TEST

START_TEST(raise_exception_reaches_the_caller)
{
	char err[512];
	struct ig_chattmpl *t = ig_chattmpl_new(
		"{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
		"{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
		"{% endif %}{{ m.content }}{% endfor %}",
		NULL, NULL, err, sizeof(err));
	ck_assert_msg(t != NULL, "%s", err);
	char *out = render(t, "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]",
	                   NULL, false, err, sizeof(err));
	ck_assert_str_eq(out, "ab");
	free(out);
	ck_assert(render(t, "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]", NULL,
	                 false, err, sizeof(err)) == NULL);
	ck_assert_str_eq(err, "Conversation roles must alternate user/assistant/user/assistant/...");
	ig_chattmpl_free(t);
}
END_TEST

START_TEST(chat_template_kwargs_are_variables)
{
	char err[512], *out = NULL;
	size_t len;
	struct ig_chattmpl *t = ig_chattmpl_new(
		"{% if add_generation_prompt %}<a>{% if enable_thinking is defined and enable_thinking is false %}"
		"<think></think>{% endif %}{% endif %}{{ eos_token }}",
		NULL, "</s>", err, sizeof(err));
	ck_assert_msg(t != NULL, "%s", err);
	json_t *msgs = json_array(), *off = json_pack("{sb}", "enable_thinking", 0), *on = json_pack("{sb}", "enable_thinking", 1);
	ck_assert_int_eq(ig_chattmpl_render_kw(t, msgs, NULL, true, off, &out, &len, err, sizeof(err)), 0);
	ck_assert_str_eq(out, "<a><think></think></s>");
	free(out);
	ck_assert_int_eq(ig_chattmpl_render_kw(t, msgs, NULL, true, on, &out, &len, err, sizeof(err)), 0);
	ck_assert_str_eq(out, "<a></s>");
	free(out);
	/* over a special token, as transformers.js spreads them last */
	json_t *eos = json_pack("{ss}", "eos_token", "<eos>");
	ck_assert_int_eq(ig_chattmpl_render_kw(t, msgs, NULL, false, eos, &out, &len, err, sizeof(err)), 0);
	ck_assert_str_eq(out, "<eos>");
	free(out);
	/* never over what the request itself gives the template */
	json_t *bad = json_pack("{s[]}", "messages");
	ck_assert_int_eq(ig_chattmpl_render_kw(t, msgs, NULL, false, bad, &out, &len, err, sizeof(err)), -1);
	ck_assert(out == NULL);
	ck_assert_str_eq(err, "chat_template_kwargs may not set messages");
	json_decref(bad);
	json_decref(eos);
	json_decref(on);
	json_decref(off);
	json_decref(msgs);
	ig_chattmpl_free(t);
}
END_TEST

START_TEST(refusals_say_why)
{
	char err[512];
	ck_assert(ig_chattmpl_load("/nonexistent/tokenizer_config.json", err, sizeof(err)) == NULL);
	ck_assert_msg(strstr(err, "/nonexistent/tokenizer_config.json") != NULL, "%s", err);

	ck_assert(ig_chattmpl_load(config("{\"bos_token\": \"<s>\"}"), err, sizeof(err)) == NULL);
	ck_assert_msg(strstr(err, path) && strstr(err, "no chat_template"), "%s", err);
	unlink(path);

	ck_assert(ig_chattmpl_load(config("{\"chat_template\": [{\"name\": \"rag\", \"template\": \"x\"}]}"), err,
	                           sizeof(err)) == NULL);
	ck_assert_msg(strstr(err, "\"default\""), "%s", err);
	unlink(path);

	ck_assert(ig_chattmpl_load(config("{\"chat_template\": \"{{ messages }}\\n{% macro m() %}{% endmacro %}\"}"), err,
	                           sizeof(err)) == NULL);
	ck_assert_msg(strstr(err, path) && strstr(err, "line 2: {% macro %} is not supported"), "%s", err);
	unlink(path);

	ck_assert(ig_chattmpl_load(config("{\"chat_template\": 42"), err, sizeof(err)) == NULL); /* not JSON */
	ck_assert_msg(strstr(err, path) != NULL, "%s", err);
	unlink(path);

	ck_assert(ig_chattmpl_new("{% if %}", NULL, NULL, err, sizeof(err)) == NULL);
	ck_assert_msg(strstr(err, "line 1"), "%s", err);
}
END_TEST

IG_CHECK_MAIN("chattmpl", loads_a_config_and_renders_a_chat, the_default_entry_and_tool_use_with_tools,
              raise_exception_reaches_the_caller, chat_template_kwargs_are_variables, refusals_say_why)
