/* A model's chat template from its tokenizer_config.json, rendered with the
 * variables a chat request gives it (include/infergate/chattmpl.h). What the
 * template sees is what transformers.js's apply_chat_template passes
 * (@lenml/tokenizers, src/tokenizers/tokenizers.js): messages,
 * add_generation_prompt, tools (null when the request has none), documents
 * (null), and each special token that is set. Not here: Jinja itself
 * (jinja_parse.c, jinja_eval.c). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/buf.h"
#include "infergate/chattmpl.h"
#include "infergate/jinja.h"
#include "infergate/util.h"

struct ig_chattmpl {
	struct ig_jinja *tmpl;     /* the "default" template */
	struct ig_jinja *tool_use; /* the "tool_use" one, or NULL */
	json_t *bos, *eos;         /* JSON strings, or NULL: not set */
};

/* err + its prefix's length: a message written there follows the prefix. */
static size_t prefix(char *err, size_t errlen, const char *what)
{
	int k = snprintf(err, errlen, "%s: ", what);
	return k > 0 && (size_t)k < errlen ? (size_t)k : 0;
}

static struct ig_jinja *parse(const char *text, const char *which, char *err, size_t errlen)
{
	size_t k = prefix(err, errlen, which);
	return ig_jinja_parse(text, strlen(text), err + k, errlen - k);
}

struct ig_chattmpl *ig_chattmpl_new(const char *template_text, const char *bos, const char *eos, char *err,
                                    size_t errlen)
{
	struct ig_chattmpl *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (!(t->tmpl = parse(template_text, "chat template", err, errlen)))
		goto fail;
	/* transformers.js sets only the tokens that are truthy: "" is not passed */
	if (bos && *bos)
		t->bos = json_string(bos);
	if (eos && *eos)
		t->eos = json_string(eos);
	if ((bos && *bos && !t->bos) || (eos && *eos && !t->eos)) {
		snprintf(err, errlen, "bos_token or eos_token is not UTF-8");
		goto fail;
	}
	return t;
fail:
	ig_chattmpl_free(t);
	return NULL;
}

/* A special token: a string, or an AddedToken object's content. */
static const char *token(const json_t *cfg, const char *key)
{
	const json_t *v = json_object_get(cfg, key);
	if (json_is_object(v))
		v = json_object_get(v, "content");
	return json_string_value(v);
}

struct ig_chattmpl *ig_chattmpl_load(const char *path, char *err, size_t errlen)
{
	json_error_t je;
	struct ig_chattmpl *t = NULL;
	/* as reals: model_max_length may not fit 64 bits (Llama-3 has 1e30) */
	json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
	if (!cfg) {
		snprintf(err, errlen, "%s: %s (line %d)", path, je.text, je.line);
		return NULL;
	}
	const json_t *ct = json_object_get(cfg, "chat_template");
	const char *text = json_string_value(ct), *tool_use = NULL;
	if (json_is_array(ct)) {
		size_t i;
		const json_t *e;
		json_array_foreach(ct, i, e) {
			const char *name = json_string_value(json_object_get(e, "name"));
			const char *tt = json_string_value(json_object_get(e, "template"));
			if (!name || !tt) {
				snprintf(err, errlen, "%s: chat_template[%zu] is not a {name, template} of strings", path, i);
				goto done;
			}
			if (strcmp(name, "default") == 0)
				text = tt;
			else if (strcmp(name, "tool_use") == 0)
				tool_use = tt;
		}
	}
	if (!text) {
		snprintf(err, errlen, "%s: no chat_template (a string, or a list with a \"default\" entry)", path);
		goto done;
	}
	size_t k = prefix(err, errlen, path);
	t = ig_chattmpl_new(text, token(cfg, "bos_token"), token(cfg, "eos_token"), err + k, errlen - k);
	if (t && tool_use && !(t->tool_use = parse(tool_use, "tool_use template", err + k, errlen - k))) {
		ig_chattmpl_free(t);
		t = NULL;
	}
done:
	json_decref(cfg);
	return t;
}

void ig_chattmpl_free(struct ig_chattmpl *t)
{
	if (!t)
		return;
	ig_jinja_free(t->tmpl);
	ig_jinja_free(t->tool_use);
	json_decref(t->bos);
	json_decref(t->eos);
	free(t);
}

int ig_chattmpl_render_kw(const struct ig_chattmpl *t, const json_t *messages, const json_t *tools,
                          bool add_generation_prompt, const json_t *template_kwargs, char **out, size_t *len,
                          char *err, size_t errlen)
{
	static const char *const fixed[] = {"messages", "add_generation_prompt", "tools", "documents"};
	*out = NULL;
	*len = 0;
	if (template_kwargs && !json_is_object(template_kwargs)) {
		snprintf(err, errlen, "chat_template_kwargs is not an object");
		return -1;
	}
	size_t nkw = json_object_size(template_kwargs), n = 0;
	struct ig_jinja_var *vars = calloc(6 + nkw, sizeof(*vars));
	if (!vars) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	json_t *null = json_null(), *gen = json_boolean(add_generation_prompt);
	vars[n++] = (struct ig_jinja_var){"messages", messages};
	vars[n++] = (struct ig_jinja_var){"add_generation_prompt", gen};
	vars[n++] = (struct ig_jinja_var){"tools", tools ? tools : null};
	vars[n++] = (struct ig_jinja_var){"documents", null};
	vars[n++] = (struct ig_jinja_var){"bos_token", t->bos};
	vars[n++] = (struct ig_jinja_var){"eos_token", t->eos};
	const char *k;
	json_t *v;
	int rc = -1;
	json_object_foreach((json_t *)template_kwargs, k, v) {
		for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
			if (strcmp(k, fixed[i]) == 0) {
				snprintf(err, errlen, "chat_template_kwargs may not set %s", k);
				goto done;
			}
		vars[n++] = (struct ig_jinja_var){k, v};
	}
	const struct ig_jinja *j = tools && t->tool_use ? t->tool_use : t->tmpl;
	rc = ig_jinja_render(j, vars, n, out, len, err, errlen);
done:
	json_decref(gen);
	free(vars);
	return rc;
}

int ig_chattmpl_render(const struct ig_chattmpl *t, const json_t *messages, const json_t *tools,
                       bool add_generation_prompt, char **out, size_t *len, char *err, size_t errlen)
{
	return ig_chattmpl_render_kw(t, messages, tools, add_generation_prompt, NULL, out, len, err, errlen);
}

/* A tool call's arguments as a template expects them: vLLM parses the
 * JSON string a client sends into an object before rendering
 * (vllm/entrypoints/chat_utils.py _postprocess_messages), so a template's
 * `arguments | tojson` prints it as an object. */
static void parse_arguments(json_t *m)
{
	size_t i;
	json_t *tc;
	json_array_foreach(json_object_get(m, "tool_calls"), i, tc) {
		json_t *fn = json_object_get(tc, "function"), *args = json_object_get(fn, "arguments");
		json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
		if (json_is_object(parsed))
			json_object_set(fn, "arguments", parsed);
		json_decref(parsed);
	}
}

/* The messages as vLLM hands them to the template: a message's content
 * parts as one string, the texts joined by newlines (vllm/entrypoints/
 * chat_utils.py, _parse_chat_message_content_parts with the "string"
 * content format), a null content as "", tool calls' arguments parsed. */
static json_t *flat_messages(json_t *msgs)
{
	json_t *out = json_array(), *m;
	size_t i;
	json_array_foreach(msgs, i, m) {
		json_t *c = json_object_get(m, "content");
		if (!json_is_object(m)) {
			json_array_append(out, m);
			continue;
		}
		if (!json_is_array(c)) {
			json_t *copy = json_deep_copy(m);
			if (!c || json_is_null(c))
				json_object_set_new(copy, "content", json_string(""));
			parse_arguments(copy);
			json_array_append_new(out, copy);
			continue;
		}
		struct ig_buf t;
		ig_buf_init(&t);
		size_t j, k = 0;
		json_t *part;
		json_array_foreach(c, j, part) {
			json_t *txt = json_object_get(part, "text");
			if (!json_is_string(txt))
				continue;
			if (k++)
				ig_buf_append(&t, "\n", 1);
			ig_buf_append(&t, json_string_value(txt), json_string_length(txt));
		}
		json_t *copy = json_deep_copy(m);
		json_object_set_new(copy, "content", json_stringn(t.data ? t.data : "", t.len));
		parse_arguments(copy);
		ig_buf_free(&t);
		json_array_append_new(out, copy);
	}
	return out;
}

int ig_chattmpl_render_request(const struct ig_chattmpl *t, const json_t *req, char **out, size_t *len, char *err,
			       size_t errlen)
{
	json_t *msgs = json_object_get(req, "messages"), *tools = json_object_get(req, "tools");
	json_t *agp = json_object_get(req, "add_generation_prompt");
	json_t *kw = json_object_get(req, "chat_template_kwargs"); /* Qwen3's enable_thinking */
	if (!json_is_array(msgs)) {
		snprintf(err, errlen, "'messages' must be a list");
		return -1;
	}
	json_t *flat = flat_messages(msgs);
	int rc = ig_chattmpl_render_kw(t, flat, json_is_array(tools) ? tools : NULL, !json_is_false(agp),
				       json_is_object(kw) ? kw : NULL, out, len, err, errlen);
	json_decref(flat);
	return rc;
}

char *ig_chattmpl_beside(const char *tokenizer_path)
{
	const char *slash = strrchr(tokenizer_path, '/');
	char *path = ig_strdupf("%.*stokenizer_config.json", slash ? (int)(slash - tokenizer_path + 1) : 0,
				tokenizer_path);
	json_t *c = path ? json_load_file(path, 0, NULL) : NULL;
	bool has = c && json_object_get(c, "chat_template");
	json_decref(c);
	if (!has) {
		free(path);
		return NULL;
	}
	return path;
}
