/* Anthropic's Messages API over an OpenAI chat backend (anthropic.h says
 * what is translated, ignored and refused). The request side checks every
 * member it reads, since a client's body can hold anything; the response
 * side reads a backend's answer as loosely as the chat clients do. Not
 * here: HTTP, reading or writing sockets, choosing backends. */
#include "config.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/anthropic.h"
#include "infergate/buf.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"

/* ---- request: Anthropic -> chat ---- */

/* Paths are Anthropic's own ("messages.0.content.1.type"), so a client
 * reads the same message it would get from Anthropic's API. */
#define PATH_MAX_LEN 128

/* base "." key into out, cut at PATH_MAX_LEN - 1 bytes (a path that long
 * is already deep in a hostile body; the message only has to name it). */
static void join(char *out, const char *base, const char *key)
{
	size_t n = 0;
	for (const char *s = base; *s && n < PATH_MAX_LEN - 1; s++)
		out[n++] = *s;
	if (*base && n < PATH_MAX_LEN - 1)
		out[n++] = '.';
	for (const char *s = key; *s && n < PATH_MAX_LEN - 1; s++)
		out[n++] = *s;
	out[n] = '\0';
}

static void joini(char *out, const char *base, size_t i)
{
	char num[24];
	int k = sizeof(num) - 1;
	num[k] = '\0';
	do
		num[--k] = (char)('0' + i % 10);
	while ((i /= 10) && k > 0);
	join(out, base, num + k);
}

static int fail(char **err, const char *path, const char *what)
{
	*err = ig_strdupf("%s: %s", path, what);
	if (!*err)
		abort();
	return -1;
}

/* The members an object may have. known: translated or checked by the
 * caller; ignored: accepted and dropped (anthropic.h says why); refused:
 * Anthropic's, but nothing a chat backend can do. Anything else is an
 * extra input, as Anthropic's API calls it. */
static int check_keys(json_t *obj, const char *path, const char *const *known, const char *const *ignored,
		      const char *const *refused, char **err)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		bool ok = false;
		for (const char *const *k = known; k && *k && !ok; k++)
			ok = strcmp(*k, key) == 0;
		for (const char *const *k = ignored; k && *k && !ok; k++)
			ok = strcmp(*k, key) == 0;
		char p[PATH_MAX_LEN];
		join(p, path, key);
		for (const char *const *k = refused; k && *k && !ok; k++)
			if (strcmp(*k, key) == 0)
				return fail(err, p, "not supported by this server");
		if (!ok)
			return fail(err, p, "Extra inputs are not permitted");
	}
	return 0;
}

/* A member that must be a string when present (and not null). */
static int opt_string(json_t *obj, const char *key, const char *path, json_t **out, char **err)
{
	json_t *v = json_object_get(obj, key);
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v)) {
		char p[PATH_MAX_LEN];
		join(p, path, key);
		return fail(err, p, "Input should be a valid string");
	}
	*out = v;
	return 0;
}

static int need_string(json_t *obj, const char *key, const char *path, json_t **out, char **err)
{
	char p[PATH_MAX_LEN];
	join(p, path, key);
	if (!json_object_get(obj, key))
		return fail(err, p, "Field required");
	if (opt_string(obj, key, path, out, err) < 0)
		return -1;
	if (!*out)
		return fail(err, p, "Input should be a valid string");
	return 0;
}

static const char *const TEXT_KEYS[] = {"type", "text", NULL};
static const char *const TEXT_IGNORED[] = {"cache_control", "citations", NULL};
static const char *const CACHE_ONLY[] = {"cache_control", NULL};

/* A text block: {"type": "text", "text": string}. */
static int text_block(json_t *b, const char *path, json_t **text, char **err)
{
	if (check_keys(b, path, TEXT_KEYS, TEXT_IGNORED, NULL, err) < 0)
		return -1;
	return need_string(b, "text", path, text, err);
}

/* The type of a block: an object with a string "type". */
static const char *block_type(json_t *b, const char *path, char **err)
{
	if (!json_is_object(b)) {
		fail(err, path, "Input should be a valid dictionary or object");
		return NULL;
	}
	json_t *t;
	if (need_string(b, "type", path, &t, err) < 0)
		return NULL;
	return json_string_value(t);
}

/* An image block's source as an OpenAI image_url part (after vLLM
 * serving.py _convert_image_source_to_url: base64 becomes a data URL). */
static json_t *image_part(json_t *b, const char *path, char **err)
{
	static const char *const keys[] = {"type", "source", NULL};
	char p[PATH_MAX_LEN];
	if (check_keys(b, path, keys, CACHE_ONLY, NULL, err) < 0)
		return NULL;
	json_t *src = json_object_get(b, "source");
	join(p, path, "source");
	if (!json_is_object(src)) {
		fail(err, p, src ? "Input should be a valid dictionary or object" : "Field required");
		return NULL;
	}
	const char *st = block_type(src, p, err);
	if (!st)
		return NULL;
	char *url = NULL;
	if (strcmp(st, "base64") == 0) {
		static const char *const bkeys[] = {"type", "media_type", "data", NULL};
		json_t *mt, *data;
		if (check_keys(src, p, bkeys, NULL, NULL, err) < 0 || need_string(src, "media_type", p, &mt, err) < 0 ||
		    need_string(src, "data", p, &data, err) < 0)
			return NULL;
		url = ig_strdupf("data:%s;base64,%s", json_string_value(mt), json_string_value(data));
	} else if (strcmp(st, "url") == 0) {
		static const char *const ukeys[] = {"type", "url", NULL};
		json_t *u;
		if (check_keys(src, p, ukeys, NULL, NULL, err) < 0 || need_string(src, "url", p, &u, err) < 0)
			return NULL;
		url = strdup(json_string_value(u));
	} else {
		char q[PATH_MAX_LEN];
		join(q, p, "type");
		fail(err, q, strcmp(st, "file") == 0 ? "file sources are not supported by this server"
						     : "Input should be 'base64' or 'url'");
		return NULL;
	}
	if (!url)
		abort();
	json_t *part = json_pack("{s:s, s:{s:s}}", "type", "image_url", "image_url", "url", url);
	free(url);
	return part;
}

/* Blocks Anthropic has that no chat backend can take. */
static bool unsupported_block(const char *type)
{
	static const char *const names[] = {"document", "search_result", "server_tool_use", "web_search_tool_result",
					    "web_fetch_tool_result", "code_execution_tool_result",
					    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
					    "mcp_tool_use", "mcp_tool_result", "container_upload", "tool_reference",
					    NULL};
	for (const char *const *n = names; *n; n++)
		if (strcmp(*n, type) == 0)
			return true;
	return false;
}

static int bad_block(const char *type, const char *path, const char *role, char **err)
{
	char p[PATH_MAX_LEN], *msg;
	join(p, path, "type");
	if (unsupported_block(type))
		msg = ig_strdupf("'%s' blocks are not supported by this server", type);
	else if (strcmp(type, "text") == 0 || strcmp(type, "image") == 0 || strcmp(type, "tool_use") == 0 ||
		 strcmp(type, "tool_result") == 0 || strcmp(type, "thinking") == 0 ||
		 strcmp(type, "redacted_thinking") == 0)
		msg = ig_strdupf("'%s' blocks are not allowed in %s messages", type, role);
	else
		msg = ig_strdupf("Input tag '%s' found using 'type' does not match any of the expected tags", type);
	if (!msg)
		abort();
	fail(err, p, msg);
	free(msg);
	return -1;
}

/* A tool_result's content: a string, or text and image blocks. The text
 * goes in the tool message (blocks joined with "\n", after SGLang
 * serving.py _convert_tool_result_content), the images to *images. */
static int tool_result(json_t *b, const char *path, json_t *out_msgs, json_t *images, char **err)
{
	static const char *const keys[] = {"type", "tool_use_id", "content", NULL};
	static const char *const ignored[] = {"cache_control", "is_error", NULL};
	json_t *id, *content = json_object_get(b, "content"), *ie = json_object_get(b, "is_error");
	char p[PATH_MAX_LEN];
	if (check_keys(b, path, keys, ignored, NULL, err) < 0 || need_string(b, "tool_use_id", path, &id, err) < 0)
		return -1;
	if (ie && !json_is_null(ie) && !json_is_boolean(ie)) {
		join(p, path, "is_error");
		return fail(err, p, "Input should be a valid boolean");
	}
	join(p, path, "content");
	struct ig_buf text;
	ig_buf_init(&text);
	if (json_is_string(content)) {
		ig_buf_append(&text, json_string_value(content), json_string_length(content));
	} else if (json_is_array(content)) {
		size_t i;
		json_t *c;
		int n = 0;
		json_array_foreach(content, i, c) {
			char q[PATH_MAX_LEN];
			joini(q, p, i);
			const char *t = block_type(c, q, err);
			json_t *s, *img;
			if (!t)
				goto fail;
			if (strcmp(t, "text") == 0) {
				if (text_block(c, q, &s, err) < 0)
					goto fail;
				if (n++)
					ig_buf_append(&text, "\n", 1);
				ig_buf_append(&text, json_string_value(s), json_string_length(s));
			} else if (strcmp(t, "image") == 0) {
				if (!(img = image_part(c, q, err)))
					goto fail;
				json_array_append_new(images, img);
			} else {
				bad_block(t, q, "tool_result", err);
				goto fail;
			}
		}
	} else if (content && !json_is_null(content)) {
		fail(err, p, "Input should be a valid string or a valid list");
		goto fail;
	}
	json_array_append_new(out_msgs, json_pack("{s:s, s:O, s:s%}", "role", "tool", "tool_call_id", id, "content",
						  text.data ? text.data : "", text.len));
	ig_buf_free(&text);
	return 0;
fail:
	ig_buf_free(&text);
	return -1;
}

/* An assistant's tool_use block as an OpenAI tool call. */
static json_t *tool_call(json_t *b, const char *path, char **err)
{
	static const char *const keys[] = {"type", "id", "name", "input", NULL};
	json_t *id, *name, *input = json_object_get(b, "input");
	char p[PATH_MAX_LEN];
	if (check_keys(b, path, keys, CACHE_ONLY, NULL, err) < 0 || need_string(b, "id", path, &id, err) < 0 ||
	    need_string(b, "name", path, &name, err) < 0)
		return NULL;
	join(p, path, "input");
	if (!json_is_object(input)) {
		fail(err, p, input ? "Input should be a valid dictionary" : "Field required");
		return NULL;
	}
	char *args = json_dumps(input, JSON_COMPACT);
	if (!args)
		abort();
	json_t *tc = json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name", name,
			       "arguments", args);
	free(args);
	return tc;
}

/* One message's content blocks into chat messages: for a user, its tool
 * results first (tool messages must follow the assistant's tool_calls),
 * then one user message with the rest; for an assistant, one message with
 * its text and tool_calls. */
static int blocks(json_t *content, const char *role, const char *path, json_t *out, char **err)
{
	bool user = strcmp(role, "user") == 0;
	json_t *parts = json_array(), *calls = json_array(), *images = json_array();
	size_t i;
	json_t *b;
	int ret = -1;

	if (json_array_size(content) == 0) {
		fail(err, path, "List should have at least 1 item after validation, not 0");
		goto out;
	}
	json_array_foreach(content, i, b) {
		char p[PATH_MAX_LEN];
		joini(p, path, i);
		const char *t = block_type(b, p, err);
		json_t *s, *x;
		if (!t)
			goto out;
		if (strcmp(t, "text") == 0) {
			if (text_block(b, p, &s, err) < 0)
				goto out;
			json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", s));
		} else if (user && strcmp(t, "image") == 0) {
			if (!(x = image_part(b, p, err)))
				goto out;
			json_array_append_new(parts, x);
		} else if (user && strcmp(t, "tool_result") == 0) {
			if (tool_result(b, p, out, images, err) < 0)
				goto out;
		} else if (!user && strcmp(t, "tool_use") == 0) {
			if (!(x = tool_call(b, p, err)))
				goto out;
			json_array_append_new(calls, x);
		} else if (!user && (strcmp(t, "thinking") == 0 || strcmp(t, "redacted_thinking") == 0)) {
			static const char *const th[] = {"type", "thinking", "signature", NULL};
			static const char *const rth[] = {"type", "data", NULL};
			if (check_keys(b, p, t[0] == 't' ? th : rth, NULL, NULL, err) < 0)
				goto out;
		} else {
			bad_block(t, p, role, err);
			goto out;
		}
	}
	/* the tool results' images, then the turn's own parts */
	json_array_extend(images, parts);
	json_decref(parts);
	parts = images;
	images = NULL;
	json_t *msg = json_pack("{s:s}", "role", role);
	size_t n = json_array_size(parts);
	if (n == 1 && strcmp(json_string_value(json_object_get(json_array_get(parts, 0), "type")), "text") == 0)
		json_object_set(msg, "content", json_object_get(json_array_get(parts, 0), "text"));
	else if (n > 0)
		json_object_set(msg, "content", parts);
	else /* null beside tool calls, as OpenAI's assistant messages have it */
		json_object_set_new(msg, "content", json_array_size(calls) ? json_null() : json_string(""));
	if (json_array_size(calls))
		json_object_set(msg, "tool_calls", calls);
	/* a user turn of tool results alone is those tool messages */
	if (user && n == 0)
		json_decref(msg);
	else
		json_array_append_new(out, msg);
	ret = 0;
out:
	json_decref(parts);
	json_decref(calls);
	json_decref(images);
	return ret;
}

static int messages(json_t *req, json_t *out, char **err)
{
	static const char *const keys[] = {"role", "content", NULL};
	json_t *msgs = json_object_get(req, "messages"), *m;
	size_t i;

	if (!msgs)
		return fail(err, "messages", "Field required");
	if (!json_is_array(msgs))
		return fail(err, "messages", "Input should be a valid list");
	if (json_array_size(msgs) == 0)
		return fail(err, "messages", "List should have at least 1 item after validation, not 0");
	json_array_foreach(msgs, i, m) {
		char p[PATH_MAX_LEN], q[PATH_MAX_LEN];
		joini(p, "messages", i);
		if (!json_is_object(m))
			return fail(err, p, "Input should be a valid dictionary or object");
		json_t *role, *content = json_object_get(m, "content");
		if (check_keys(m, p, keys, NULL, NULL, err) < 0 || need_string(m, "role", p, &role, err) < 0)
			return -1;
		const char *r = json_string_value(role);
		if (strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) {
			join(q, p, "role");
			return fail(err, q, "Input should be 'user' or 'assistant'");
		}
		join(q, p, "content");
		if (json_is_string(content))
			json_array_append_new(out, json_pack("{s:s, s:O}", "role", r, "content", content));
		else if (json_is_array(content)) {
			if (blocks(content, r, q, out, err) < 0)
				return -1;
		} else
			return fail(err, q, content ? "Input should be a valid string or a valid list" : "Field required");
	}
	return 0;
}

/* "system": a string, or text blocks joined with "\n" (SGLang serving.py;
 * vLLM joins them with nothing, which glues sentences together). */
static int system_prompt(json_t *req, json_t *out, char **err)
{
	json_t *sys = json_object_get(req, "system");
	if (!sys || json_is_null(sys))
		return 0;
	if (json_is_string(sys)) {
		json_array_append_new(out, json_pack("{s:s, s:O}", "role", "system", "content", sys));
		return 0;
	}
	if (!json_is_array(sys))
		return fail(err, "system", "Input should be a valid string or a valid list");
	struct ig_buf text;
	ig_buf_init(&text);
	size_t i;
	json_t *b;
	json_array_foreach(sys, i, b) {
		char p[PATH_MAX_LEN];
		joini(p, "system", i);
		const char *t = block_type(b, p, err);
		json_t *s;
		if (t && strcmp(t, "text") != 0) {
			char q[PATH_MAX_LEN];
			join(q, p, "type");
			fail(err, q, "Input should be 'text'");
			t = NULL;
		}
		if (!t || text_block(b, p, &s, err) < 0) {
			ig_buf_free(&text);
			return -1;
		}
		if (i)
			ig_buf_append(&text, "\n", 1);
		ig_buf_append(&text, json_string_value(s), json_string_length(s));
	}
	if (json_array_size(sys))
		json_array_append_new(out, json_pack("{s:s, s:s%}", "role", "system", "content",
						     text.data ? text.data : "", text.len));
	ig_buf_free(&text);
	return 0;
}

/* "tools": custom tools as functions. A tool with another type is one of
 * Anthropic's server tools (web search, bash, the text editor...). */
static int tools(json_t *req, json_t *chat, char **err)
{
	static const char *const keys[] = {"name", "description", "input_schema", "type", "strict", NULL};
	json_t *tl = json_object_get(req, "tools"), *t;
	size_t i;
	if (!tl || json_is_null(tl))
		return 0;
	if (!json_is_array(tl))
		return fail(err, "tools", "Input should be a valid list");
	json_t *out = json_array();
	json_object_set_new(chat, "tools", out);
	json_array_foreach(tl, i, t) {
		char p[PATH_MAX_LEN], q[PATH_MAX_LEN];
		joini(p, "tools", i);
		if (!json_is_object(t))
			return fail(err, p, "Input should be a valid dictionary or object");
		json_t *type, *name, *desc, *schema = json_object_get(t, "input_schema"), *strict = json_object_get(t, "strict");
		if (opt_string(t, "type", p, &type, err) < 0)
			return -1;
		if (type && strcmp(json_string_value(type), "custom") != 0) {
			join(q, p, "type");
			char *m = ig_strdupf("'%s' tools (Anthropic's server tools) are not supported by this server",
					     json_string_value(type));
			fail(err, q, m);
			free(m);
			return -1;
		}
		if (check_keys(t, p, keys, CACHE_ONLY, NULL, err) < 0 || need_string(t, "name", p, &name, err) < 0 ||
		    opt_string(t, "description", p, &desc, err) < 0)
			return -1;
		join(q, p, "input_schema");
		if (!json_is_object(schema))
			return fail(err, q, schema ? "Input should be a valid dictionary" : "Field required");
		if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
			join(q, p, "strict");
			return fail(err, q, "Input should be a valid boolean");
		}
		json_t *fn = json_pack("{s:O}", "name", name);
		if (desc)
			json_object_set(fn, "description", desc);
		json_object_set(fn, "parameters", schema);
		if (json_is_boolean(strict))
			json_object_set(fn, "strict", strict);
		json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
	}
	return 0;
}

/* "tool_choice": auto, any (-> required), tool (-> that function), none;
 * disable_parallel_tool_use -> parallel_tool_calls false (vLLM serving.py
 * _convert_tool_choice maps the four alike). */
static int tool_choice(json_t *req, json_t *chat, char **err)
{
	static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
	json_t *tc = json_object_get(req, "tool_choice");
	if (!tc || json_is_null(tc))
		return 0;
	const char *t = block_type(tc, "tool_choice", err);
	json_t *name, *dp = json_object_get(tc, "disable_parallel_tool_use");
	if (!t || check_keys(tc, "tool_choice", keys, NULL, NULL, err) < 0 ||
	    opt_string(tc, "name", "tool_choice", &name, err) < 0)
		return -1;
	if (dp && !json_is_null(dp) && !json_is_boolean(dp))
		return fail(err, "tool_choice.disable_parallel_tool_use", "Input should be a valid boolean");
	if (strcmp(t, "auto") == 0)
		json_object_set_new(chat, "tool_choice", json_string("auto"));
	else if (strcmp(t, "any") == 0)
		json_object_set_new(chat, "tool_choice", json_string("required"));
	else if (strcmp(t, "none") == 0)
		json_object_set_new(chat, "tool_choice", json_string("none"));
	else if (strcmp(t, "tool") == 0) {
		if (!name)
			return fail(err, "tool_choice.name", "Field required");
		json_object_set_new(chat, "tool_choice",
				    json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name", name));
	} else
		return fail(err, "tool_choice.type", "Input should be 'auto', 'any', 'tool' or 'none'");
	if (json_is_true(dp))
		json_object_set_new(chat, "parallel_tool_calls", json_false());
	return 0;
}

static int number(json_t *req, const char *key, double lo, double hi, json_t *chat, char **err)
{
	json_t *v = json_object_get(req, key);
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v))
		return fail(err, key, "Input should be a valid number");
	double d = json_number_value(v);
	if (d < lo || d > hi) {
		char *m = ig_strdupf("Input should be between %g and %g", lo, hi);
		fail(err, key, m);
		free(m);
		return -1;
	}
	json_object_set(chat, key, v);
	return 0;
}

static int sampling(json_t *req, json_t *chat, char **err)
{
	json_t *mt = json_object_get(req, "max_tokens"), *tk = json_object_get(req, "top_k"),
	       *ss = json_object_get(req, "stop_sequences"), *st = json_object_get(req, "stream"),
	       *md = json_object_get(req, "metadata");
	if (!mt)
		return fail(err, "max_tokens", "Field required");
	if (!json_is_integer(mt))
		return fail(err, "max_tokens", "Input should be a valid integer");
	if (json_integer_value(mt) < 1)
		return fail(err, "max_tokens", "Input should be greater than or equal to 1");
	json_object_set(chat, "max_tokens", mt);
	if (number(req, "temperature", 0, 1, chat, err) < 0 || number(req, "top_p", 0, 1, chat, err) < 0)
		return -1;
	if (tk && !json_is_null(tk)) {
		if (!json_is_integer(tk))
			return fail(err, "top_k", "Input should be a valid integer");
		if (json_integer_value(tk) < 0)
			return fail(err, "top_k", "Input should be greater than or equal to 0");
		json_object_set(chat, "top_k", tk);
	}
	if (ss && !json_is_null(ss)) {
		size_t i;
		json_t *s;
		if (!json_is_array(ss))
			return fail(err, "stop_sequences", "Input should be a valid list");
		json_array_foreach(ss, i, s) {
			char p[PATH_MAX_LEN];
			joini(p, "stop_sequences", i);
			if (!json_is_string(s))
				return fail(err, p, "Input should be a valid string");
		}
		if (json_array_size(ss))
			json_object_set(chat, "stop", ss);
	}
	if (st && !json_is_null(st) && !json_is_boolean(st))
		return fail(err, "stream", "Input should be a valid boolean");
	if (json_is_true(st)) {
		json_object_set_new(chat, "stream", json_true());
		json_object_set_new(chat, "stream_options", json_pack("{s:b}", "include_usage", 1));
	}
	if (md && !json_is_null(md)) {
		static const char *const keys[] = {"user_id", NULL};
		json_t *uid;
		if (!json_is_object(md))
			return fail(err, "metadata", "Input should be a valid dictionary or object");
		if (check_keys(md, "metadata", keys, NULL, NULL, err) < 0 ||
		    opt_string(md, "user_id", "metadata", &uid, err) < 0)
			return -1;
		if (uid)
			json_object_set(chat, "user", uid);
	}
	return 0;
}

json_t *ig_anth_to_chat(json_t *req, enum ig_anth_kind kind, char **err)
{
	static const char *const msg_keys[] = {"model", "max_tokens", "messages", "system", "metadata",
					       "stop_sequences", "stream", "temperature", "top_k", "top_p",
					       "tools", "tool_choice", NULL};
	static const char *const count_keys[] = {"model", "messages", "system", "tools", "tool_choice", NULL};
	static const char *const msg_ignored[] = {"service_tier", "thinking", "anthropic_version", "cache_control",
						  NULL};
	static const char *const count_ignored[] = {"thinking", "anthropic_version", "cache_control", NULL};
	static const char *const refused[] = {"container", "mcp_servers", "context_management", "output_config",
					      "output_format", "inference_geo", NULL};
	bool count = kind == IG_ANTH_COUNT_TOKENS;
	json_t *model, *chat = NULL, *msgs;

	*err = NULL;
	if (!json_is_object(req)) {
		fail(err, "body", "Input should be a valid dictionary or object");
		return NULL;
	}
	if (check_keys(req, "", count ? count_keys : msg_keys, count ? count_ignored : msg_ignored, refused, err) <
		    0 ||
	    need_string(req, "model", "", &model, err) < 0)
		return NULL;
	if (json_string_length(model) == 0) {
		fail(err, "model", "String should have at least 1 character");
		return NULL;
	}
	chat = json_pack("{s:O, s:[]}", "model", model, "messages");
	msgs = json_object_get(chat, "messages");
	if ((!count && sampling(req, chat, err) < 0) || tools(req, chat, err) < 0 || tool_choice(req, chat, err) < 0 ||
	    system_prompt(req, msgs, err) < 0 || messages(req, msgs, err) < 0) {
		json_decref(chat);
		return NULL;
	}
	return chat;
}

/* ---- response: chat -> Anthropic ---- */

/* "msg_" and the completion's id past its "chatcmpl-": the same answer
 * keeps one id across the two APIs, for logs. */
static char *message_id(const char *chat_id)
{
	if (!chat_id)
		chat_id = "";
	if (strncmp(chat_id, "chatcmpl-", 9) == 0)
		chat_id += 9;
	if (strncmp(chat_id, "msg_", 4) == 0)
		chat_id += 4;
	char *id = ig_strdupf("msg_%s", chat_id);
	if (!id)
		abort();
	return id;
}

/* The stop string the backend says it matched (vLLM's choice "stop_reason",
 * SGLang's "matched_stop"; a token id there is an end of sequence), when it
 * is one of the request's stop sequences. */
static const char *matched_stop(json_t *choice, json_t *stops)
{
	json_t *m = json_object_get(choice, "stop_reason");
	if (!json_is_string(m))
		m = json_object_get(choice, "matched_stop");
	if (!json_is_string(m) || !json_is_array(stops))
		return NULL;
	size_t i;
	json_t *s;
	json_array_foreach(stops, i, s)
		if (json_is_string(s) && json_equal(s, m))
			return json_string_value(m);
	return NULL;
}

/* Anthropic's stop_reason for a finish_reason (both servers' map:
 * stop -> end_turn, length -> max_tokens, tool_calls -> tool_use). */
static const char *stop_reason(const char *finish, const char *matched, bool tool_used)
{
	if (finish && strcmp(finish, "length") == 0)
		return "max_tokens";
	if (finish && strcmp(finish, "content_filter") == 0)
		return "refusal";
	if (tool_used || (finish && strcmp(finish, "tool_calls") == 0))
		return "tool_use";
	return matched ? "stop_sequence" : "end_turn";
}

/* usage: prompt_tokens, completion_tokens, cached_tokens. */
static json_t *usage_of(json_t *u, bool with_input)
{
	json_t *out = json_object();
	json_t *pt = json_object_get(u, "prompt_tokens"), *ct = json_object_get(u, "completion_tokens");
	json_t *cached = json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens");
	if (with_input)
		json_object_set_new(out, "input_tokens", json_integer(json_is_integer(pt) ? json_integer_value(pt) : 0));
	json_object_set_new(out, "output_tokens", json_integer(json_is_integer(ct) ? json_integer_value(ct) : 0));
	if (json_is_integer(cached))
		json_object_set(out, "cache_read_input_tokens", cached);
	return out;
}

/* A tool call's arguments as the tool_use input: a JSON object ("" is
 * none, as some servers send for a call without arguments). */
static json_t *tool_input(json_t *args)
{
	if (!json_is_string(args) || json_string_length(args) == 0)
		return json_is_object(args) ? json_incref(args) : json_object();
	json_t *in = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
	if (!json_is_object(in)) {
		json_decref(in);
		return NULL;
	}
	return in;
}

static char *chat_error(const char *what)
{
	char *e = ig_strdupf("the backend's answer is not a chat completion: %s", what);
	if (!e)
		abort();
	return e;
}

json_t *ig_anth_from_chat(json_t *completion, json_t *stop_sequences, char **err)
{
	json_t *choices = json_object_get(completion, "choices"), *choice = json_array_get(choices, 0);
	json_t *msg = json_object_get(choice, "message"), *id = json_object_get(completion, "id");
	json_t *model = json_object_get(completion, "model"), *content = json_object_get(msg, "content");
	json_t *calls = json_object_get(msg, "tool_calls"), *finish = json_object_get(choice, "finish_reason");
	size_t i;
	json_t *tc;

	*err = NULL;
	if (!json_is_object(completion) || !json_is_object(choice) || !json_is_object(msg)) {
		*err = chat_error("no choices[0].message");
		return NULL;
	}
	if (content && !json_is_null(content) && !json_is_string(content)) {
		*err = chat_error("message.content is not a string");
		return NULL;
	}
	if (calls && !json_is_null(calls) && !json_is_array(calls)) {
		*err = chat_error("message.tool_calls is not a list");
		return NULL;
	}
	char *mid = message_id(json_string_value(id));
	json_t *blocks = json_array();
	if (json_is_string(content) && json_string_length(content) > 0)
		json_array_append_new(blocks, json_pack("{s:s, s:O}", "type", "text", "text", content));
	json_array_foreach(calls, i, tc) {
		json_t *fn = json_object_get(tc, "function"), *tid = json_object_get(tc, "id");
		json_t *name = json_object_get(fn, "name");
		json_t *input = json_is_string(name) ? tool_input(json_object_get(fn, "arguments")) : NULL;
		if (!input) {
			*err = ig_strdupf("the backend's tool call %zu has %s", i,
					  json_is_string(name) ? "arguments that are not a JSON object" : "no name");
			free(mid);
			json_decref(blocks);
			return NULL;
		}
		char *gen = json_is_string(tid) ? NULL : ig_strdupf("toolu_%s_%zu", mid + 4, i);
		json_array_append_new(blocks, json_pack("{s:s, s:s, s:O, s:o}", "type", "tool_use", "id",
							gen ? gen : json_string_value(tid), "name", name, "input", input));
		free(gen);
	}
	const char *matched = json_is_string(finish) && strcmp(json_string_value(finish), "stop") == 0
				      ? matched_stop(choice, stop_sequences)
				      : NULL;
	const char *sr = stop_reason(json_string_value(finish), matched, json_array_size(calls) > 0);
	json_t *out = json_pack("{s:s, s:s, s:s, s:s, s:o, s:s, s:o, s:o}", "id", mid, "type", "message", "role",
				"assistant", "model", json_is_string(model) ? json_string_value(model) : "", "content",
				blocks, "stop_reason", sr, "stop_sequence",
				strcmp(sr, "stop_sequence") == 0 ? json_string(matched) : json_null(), "usage",
				usage_of(json_object_get(completion, "usage"), true));
	free(mid);
	return out;
}

/* ---- the stream ---- */

enum blk { BLK_NONE, BLK_TEXT, BLK_TOOL };

struct ig_anth_stream {
	char *model;
	json_t *stops;      /* the request's stop_sequences, or NULL */
	char *id;           /* the Message's id, from the first chunk */
	bool started;       /* message_start went out */
	bool ended;         /* message_stop or an error went out */
	enum blk open;      /* the block open now */
	long index;         /* its index, or the next block's when none is open */
	long tool;          /* the chat tool call index of an open tool block */
	json_t *tools_seen; /* chat tool call indexes given a block, as keys */
	char *finish;       /* the finish_reason, when one came */
	char *matched;      /* the stop string matched, when the backend said */
	json_t *usage;      /* the last usage object seen */
	long input_hint;    /* the prompt's tokens as the caller counted them, or -1 */
	bool tool_used;
};

struct ig_anth_stream *ig_anth_stream_new(const char *model, json_t *stop_sequences)
{
	struct ig_anth_stream *st = calloc(1, sizeof(*st));
	if (!st)
		return NULL;
	st->model = strdup(model ? model : "");
	st->tools_seen = json_object();
	if (!st->model || !st->tools_seen) {
		ig_anth_stream_free(st);
		return NULL;
	}
	st->stops = json_incref(stop_sequences);
	st->input_hint = -1;
	return st;
}

void ig_anth_stream_input_tokens(struct ig_anth_stream *st, long n)
{
	st->input_hint = n;
}

void ig_anth_stream_free(struct ig_anth_stream *st)
{
	if (!st)
		return;
	free(st->model);
	free(st->id);
	free(st->finish);
	free(st->matched);
	json_decref(st->stops);
	json_decref(st->tools_seen);
	json_decref(st->usage);
	free(st);
}

bool ig_anth_stream_ended(const struct ig_anth_stream *st)
{
	return st->ended;
}

static void emit(json_t *events, const char *name, json_t *data)
{
	json_array_append_new(events, json_pack("{s:s, s:o}", "event", name, "data", data));
}

static void start(struct ig_anth_stream *st, json_t *events)
{
	if (st->started)
		return;
	st->started = true;
	if (!st->id)
		st->id = message_id(NULL);
	json_t *pt = json_object_get(st->usage, "prompt_tokens");
	json_int_t in = json_is_integer(pt) ? json_integer_value(pt) : st->input_hint > 0 ? st->input_hint : 0;
	json_t *u = json_pack("{s:I, s:i}", "input_tokens", in, "output_tokens", 0);
	emit(events, "message_start",
	     json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type", "message_start", "message", "id",
		       st->id, "type", "message", "role", "assistant", "model", st->model, "content", "stop_reason",
		       "stop_sequence", "usage", u));
}

static void close_block(struct ig_anth_stream *st, json_t *events)
{
	if (st->open == BLK_NONE)
		return;
	emit(events, "content_block_stop",
	     json_pack("{s:s, s:I}", "type", "content_block_stop", "index", (json_int_t)st->index));
	st->open = BLK_NONE;
	st->index++;
}

static void delta(struct ig_anth_stream *st, json_t *events, json_t *d)
{
	emit(events, "content_block_delta",
	     json_pack("{s:s, s:I, s:o}", "type", "content_block_delta", "index", (json_int_t)st->index, "delta", d));
}

static void text(struct ig_anth_stream *st, json_t *events, json_t *s)
{
	if (st->open != BLK_TEXT) {
		close_block(st, events);
		emit(events, "content_block_start",
		     json_pack("{s:s, s:I, s:{s:s, s:s}}", "type", "content_block_start", "index", (json_int_t)st->index,
			       "content_block", "type", "text", "text", ""));
		st->open = BLK_TEXT;
	}
	delta(st, events, json_pack("{s:s, s:O}", "type", "text_delta", "text", s));
}

/* One entry of a chunk's delta.tool_calls: a new call opens a tool_use
 * block; its arguments go out as input_json_delta as they come. A call's
 * arguments after another block began cannot be placed (Anthropic's blocks
 * do not interleave): an error, which no server here makes. */
static int tool_delta(struct ig_anth_stream *st, json_t *events, json_t *tc, size_t pos, char **err)
{
	json_t *idx = json_object_get(tc, "index"), *fn = json_object_get(tc, "function");
	json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
	json_t *id = json_object_get(tc, "id");
	long k = json_is_integer(idx) ? (long)json_integer_value(idx) : (long)pos;
	char key[32];

	if (!json_is_object(tc) || (fn && !json_is_null(fn) && !json_is_object(fn)) ||
	    (args && !json_is_null(args) && !json_is_string(args))) {
		*err = chat_error("a tool call delta of the wrong shape");
		return -1;
	}
	snprintf(key, sizeof(key), "%ld", k);
	if (st->open != BLK_TOOL || st->tool != k) {
		if (json_object_get(st->tools_seen, key)) {
			*err = ig_strdupf("the backend streamed tool call %ld's arguments after another block began", k);
			return -1;
		}
		close_block(st, events);
		char *gen = json_is_string(id) ? NULL : ig_strdupf("toolu_%s_%ld", st->id + 4, k);
		emit(events, "content_block_start",
		     json_pack("{s:s, s:I, s:{s:s, s:s, s:s, s:{}}}", "type", "content_block_start", "index",
			       (json_int_t)st->index, "content_block", "type", "tool_use", "id",
			       gen ? gen : json_string_value(id), "name", json_is_string(name) ? json_string_value(name) : "",
			       "input"));
		free(gen);
		json_object_set_new(st->tools_seen, key, json_true());
		st->open = BLK_TOOL;
		st->tool = k;
		st->tool_used = true;
	}
	if (json_is_string(args) && json_string_length(args) > 0)
		delta(st, events, json_pack("{s:s, s:O}", "type", "input_json_delta", "partial_json", args));
	return 0;
}

static void set_str(char **slot, const char *v)
{
	free(*slot);
	*slot = v ? strdup(v) : NULL;
}

/* An error chunk in any server's shape: {"error": {...}} (vLLM, OpenAI,
 * SGLang's nested one) or SGLang's flat {"object": "error", ...}. */
static bool error_chunk(json_t *chunk, unsigned *status, const char **msg)
{
	json_t *e = json_object_get(chunk, "error");
	if (!e && json_is_string(json_object_get(chunk, "object")) &&
	    strcmp(json_string_value(json_object_get(chunk, "object")), "error") == 0)
		e = chunk;
	if (!e)
		return false;
	json_t *code = json_object_get(e, "code"), *m = json_object_get(e, "message");
	*status = json_is_integer(code) && json_integer_value(code) >= 400 && json_integer_value(code) < 600
			  ? (unsigned)json_integer_value(code)
			  : 500;
	*msg = json_is_string(m) ? json_string_value(m) : json_is_string(e) ? json_string_value(e) : "backend error";
	return true;
}

int ig_anth_stream_feed(struct ig_anth_stream *st, json_t *chunk, json_t *events, char **err)
{
	unsigned status;
	const char *emsg;

	*err = NULL;
	if (st->ended)
		return 0;
	if (!json_is_object(chunk)) {
		*err = chat_error("a chunk that is not an object");
		return -1;
	}
	if (error_chunk(chunk, &status, &emsg)) {
		ig_anth_stream_fail(st, status, emsg, events);
		return 0;
	}
	json_t *choices = json_object_get(chunk, "choices"), *u = json_object_get(chunk, "usage");
	if (!json_is_array(choices)) {
		*err = chat_error("a chunk without choices");
		return -1;
	}
	if (json_is_object(u)) {
		json_decref(st->usage);
		st->usage = json_incref(u);
	}
	if (!st->started) {
		json_t *id = json_object_get(chunk, "id"), *model = json_object_get(chunk, "model");
		st->id = message_id(json_string_value(id));
		if (json_is_string(model))
			set_str(&st->model, json_string_value(model));
		start(st, events);
	}
	json_t *choice = json_array_get(choices, 0);
	if (!choice)
		return 0; /* the usage chunk */
	json_t *ci = json_object_get(choice, "index");
	if (!json_is_object(choice)) {
		*err = chat_error("a choice that is not an object");
		return -1;
	}
	if (json_is_integer(ci) && json_integer_value(ci) != 0)
		return 0; /* n > 1: the Message is choice 0 */
	json_t *d = json_object_get(choice, "delta"), *content = json_object_get(d, "content");
	json_t *calls = json_object_get(d, "tool_calls"), *finish = json_object_get(choice, "finish_reason");
	if ((d && !json_is_null(d) && !json_is_object(d)) || (content && !json_is_null(content) && !json_is_string(content)) ||
	    (calls && !json_is_null(calls) && !json_is_array(calls))) {
		*err = chat_error("a delta of the wrong shape");
		return -1;
	}
	if (json_is_string(content) && json_string_length(content) > 0)
		text(st, events, content);
	size_t i;
	json_t *tc;
	json_array_foreach(calls, i, tc)
		if (tool_delta(st, events, tc, i, err) < 0)
			return -1;
	if (json_is_string(finish)) {
		set_str(&st->finish, json_string_value(finish));
		const char *m = matched_stop(choice, st->stops);
		if (m)
			set_str(&st->matched, m);
	}
	return 0;
}

void ig_anth_stream_done(struct ig_anth_stream *st, json_t *events)
{
	if (st->ended)
		return;
	start(st, events);
	close_block(st, events);
	const char *m = st->finish && strcmp(st->finish, "stop") == 0 ? st->matched : NULL;
	const char *sr = stop_reason(st->finish, m, st->tool_used);
	emit(events, "message_delta",
	     json_pack("{s:s, s:{s:s, s:o}, s:o}", "type", "message_delta", "delta", "stop_reason", sr,
		       "stop_sequence", strcmp(sr, "stop_sequence") == 0 ? json_string(m) : json_null(), "usage",
		       usage_of(st->usage, true)));
	emit(events, "message_stop", json_pack("{s:s}", "type", "message_stop"));
	st->ended = true;
}

static json_t *utf8_string(const char *s);

void ig_anth_stream_fail(struct ig_anth_stream *st, unsigned status, const char *message, json_t *events)
{
	if (st->ended)
		return;
	emit(events, "error",
	     json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type", ig_anth_error_type(status), "message",
		       utf8_string(message ? message : "")));
	st->ended = true;
}

void ig_anth_stream_data(struct ig_anth_stream *st, const char *data, size_t len, json_t *events)
{
	if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
		ig_anth_stream_done(st, events);
		return;
	}
	json_error_t jerr;
	json_t *c = json_loadb(data ? data : "", len, 0, &jerr);
	char *err = NULL;
	if (!c)
		err = ig_strdupf("the backend's stream has a chunk that is not JSON: %s", jerr.text);
	else
		ig_anth_stream_feed(st, c, events, &err);
	if (err)
		ig_anth_stream_fail(st, 502, err, events);
	free(err);
	json_decref(c);
}

int ig_anth_sse_append(struct ig_buf *out, json_t *events)
{
	size_t i;
	json_t *ev;
	json_array_foreach(events, i, ev) {
		char *data = json_dumps(json_object_get(ev, "data"), JSON_COMPACT);
		if (!data)
			return -1;
		int rc = ig_buf_printf(out, "event: %s\ndata: %s\n\n", json_string_value(json_object_get(ev, "event")),
				       data);
		free(data);
		if (rc < 0)
			return -1;
	}
	return 0;
}

/* ---- errors ---- */

const char *ig_anth_error_type(unsigned status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 402: return "billing_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 413: return "request_too_large";
	case 429: return "rate_limit_error";
	/* Anthropic's reference lists no 503; its SDK calls it
	 * ServiceUnavailableError, and the type that says "temporarily not
	 * serving, retry" is 529's */
	case 503:
	case 529: return "overloaded_error";
	case 504: return "timeout_error";
	default:  return status >= 500 ? "api_error" : "invalid_request_error";
	}
}

/* A JSON string even of bytes that are not UTF-8 (a backend's body): those
 * become '?'. */
static json_t *utf8_string(const char *s)
{
	json_t *j = json_string(s);
	if (j)
		return j;
	char *copy = strdup(s);
	if (!copy)
		abort();
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80)
			*p = '?';
	j = json_string(copy);
	free(copy);
	if (!j)
		abort();
	return j;
}

char *ig_anth_error_json(unsigned status, const char *type, const char *message)
{
	json_t *j = json_pack("{s:s, s:{s:s, s:o}}", "type", "error", "error", "type",
			      type ? type : ig_anth_error_type(status), "message", utf8_string(message ? message : ""));
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		abort();
	return s;
}

char *ig_anth_error_from_backend(unsigned status, const char *body, size_t len)
{
	json_t *root = json_loadb(body ? body : "", len, 0, NULL);
	struct ig_oaerror e = {0};
	char *out;
	if (root && ig_oaerror_read(root, &e) == 0 && e.message) {
		out = ig_anth_error_json(status, NULL, json_string_value(e.message));
	} else {
		/* a body that is not an error we know: its text, NUL-free */
		char *text = strndup(body ? body : "", len);
		if (!text)
			abort();
		out = ig_anth_error_json(status, NULL, text);
		free(text);
	}
	ig_oaerror_clear(&e);
	json_decref(root);
	return out;
}
