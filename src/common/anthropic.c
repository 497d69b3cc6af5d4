/* Anthropic's Messages API over an OpenAI chat backend, its request side:
 * an Anthropic request into a chat request (anthropic.h says what is
 * translated, ignored and refused). Every member read is checked, since a
 * client's body can hold anything. Not here: the answers, whole or
 * streamed, and the error bodies (anthropic_reply.c); HTTP, sockets,
 * choosing backends. */
#include "config.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/anthropic.h"
#include "infergate/buf.h"
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

/* A system text, a string or text blocks joined with "\n" (SGLang
 * serving.py; vLLM joins them with nothing, which glues sentences
 * together), as one chat system message appended to out. */
static int system_text(json_t *sys, const char *path, json_t *out, char **err)
{
	if (json_is_string(sys)) {
		json_array_append_new(out, json_pack("{s:s, s:O}", "role", "system", "content", sys));
		return 0;
	}
	if (!json_is_array(sys))
		return fail(err, path, sys ? "Input should be a valid string or a valid list" : "Field required");
	struct ig_buf text;
	ig_buf_init(&text);
	size_t i;
	json_t *b;
	json_array_foreach(sys, i, b) {
		char p[PATH_MAX_LEN];
		joini(p, path, i);
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

/* The top-level "system", first of the chat messages. */
static int system_prompt(json_t *req, json_t *out, char **err)
{
	json_t *sys = json_object_get(req, "system");
	if (!sys || json_is_null(sys))
		return 0;
	return system_text(sys, "system", out, err);
}

static int messages(json_t *req, json_t *out, char **err)
{
	static const char *const keys[] = {"role", "content", NULL};
	static const char *const turn_refused[] = {"clear_at", "output_config", NULL};
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
		if (check_keys(m, p, keys, NULL, turn_refused, err) < 0 || need_string(m, "role", p, &role, err) < 0)
			return -1;
		const char *r = json_string_value(role);
		join(q, p, "content");
		if (strcmp(r, "system") == 0) {
			/* A system turn amid the conversation (Claude Code sends one
			 * after the first user turn, beta mid-conversation-system-2026-04-07):
			 * a chat system message in its place, which chat templates
			 * render where it stands or refuse by themselves. Its text
			 * only: its other blocks (tool_addition) and members
			 * (clear_at, output_config) ask the server to change the
			 * tools or the context, which a chat backend cannot, and
			 * Claude Code answers their refusal by resending without
			 * system turns. */
			if (system_text(content, q, out, err) < 0)
				return -1;
			continue;
		}
		if (strcmp(r, "user") != 0 && strcmp(r, "assistant") != 0) {
			join(q, p, "role");
			return fail(err, q, "Input should be 'user', 'assistant' or 'system'");
		}
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

/* "tools": custom tools as functions. A tool with another type is one of
 * Anthropic's server tools (web search, bash, the text editor...).
 * defer_loading (tool search: the tool's definition stays out of the
 * prompt until a search finds it) is a saving of context the backend
 * cannot make: the function goes in whole, which costs prompt tokens and
 * changes no answer's shape. */
static const char *const TOOL_IGNORED[] = {"cache_control", "defer_loading", NULL};

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
		if (check_keys(t, p, keys, TOOL_IGNORED, NULL, err) < 0 || need_string(t, "name", p, &name, err) < 0 ||
		    opt_string(t, "description", p, &desc, err) < 0)
			return -1;
		json_t *defer = json_object_get(t, "defer_loading");
		if (defer && !json_is_null(defer) && !json_is_boolean(defer)) {
			join(q, p, "defer_loading");
			return fail(err, q, "Input should be a valid boolean");
		}
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

/* "context_management": edits the server makes to the context before
 * the model sees it. clear_thinking_20251015 is done already (earlier
 * turns' thinking blocks are dropped, keep or not); clear_tool_uses_20250919
 * would clear old tool results to save context, which a chat backend
 * cannot do: it sees them all, a longer prompt and the same conversation.
 * Any other edit is refused, as Anthropic's API refuses an unknown tag. */
static int context_management(json_t *req, char **err)
{
	static const char *const keys[] = {"edits", NULL};
	json_t *cm = json_object_get(req, "context_management"), *edits, *e;
	size_t i;
	if (!cm || json_is_null(cm))
		return 0;
	if (!json_is_object(cm))
		return fail(err, "context_management", "Input should be a valid dictionary or object");
	if (check_keys(cm, "context_management", keys, NULL, NULL, err) < 0)
		return -1;
	edits = json_object_get(cm, "edits");
	if (!edits || json_is_null(edits))
		return 0;
	if (!json_is_array(edits))
		return fail(err, "context_management.edits", "Input should be a valid list");
	json_array_foreach(edits, i, e) {
		char p[PATH_MAX_LEN], q[PATH_MAX_LEN];
		joini(p, "context_management.edits", i);
		const char *t = block_type(e, p, err);
		if (!t)
			return -1;
		if (strcmp(t, "clear_thinking_20251015") != 0 && strcmp(t, "clear_tool_uses_20250919") != 0) {
			join(q, p, "type");
			char *m = ig_strdupf("Input tag '%s' found using 'type' does not match any of the expected "
					     "tags: 'clear_thinking_20251015', 'clear_tool_uses_20250919'", t);
			fail(err, q, m);
			free(m);
			return -1;
		}
	}
	return 0;
}

/* "output_config": effort (how hard the model thinks; ignored as thinking
 * is: the backend reasons as its chat template says) and format
 * (structured output, not translated: refused). */
static int output_config(json_t *req, char **err)
{
	static const char *const keys[] = {"effort", NULL};
	static const char *const refused[] = {"format", NULL};
	json_t *oc = json_object_get(req, "output_config"), *effort;
	if (!oc || json_is_null(oc))
		return 0;
	if (!json_is_object(oc))
		return fail(err, "output_config", "Input should be a valid dictionary or object");
	return check_keys(oc, "output_config", keys, NULL, refused, err) < 0 ||
			       opt_string(oc, "effort", "output_config", &effort, err) < 0
		       ? -1
		       : 0;
}

json_t *ig_anth_to_chat(json_t *req, enum ig_anth_kind kind, char **err)
{
	static const char *const msg_keys[] = {"model", "max_tokens", "messages", "system", "metadata",
					       "stop_sequences", "stream", "temperature", "top_k", "top_p",
					       "tools", "tool_choice", NULL};
	static const char *const count_keys[] = {"model", "messages", "system", "tools", "tool_choice", NULL};
	static const char *const msg_ignored[] = {"service_tier", "thinking", "anthropic_version", "cache_control",
						  "context_management", "output_config", NULL};
	static const char *const count_ignored[] = {"thinking", "anthropic_version", "cache_control",
						    "context_management", "output_config", NULL};
	static const char *const refused[] = {"container", "mcp_servers", "output_format", "inference_geo", NULL};
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
	if ((!count && sampling(req, chat, err) < 0) || context_management(req, err) < 0 || output_config(req, err) < 0 ||
	    tools(req, chat, err) < 0 || tool_choice(req, chat, err) < 0 ||
	    system_prompt(req, msgs, err) < 0 || messages(req, msgs, err) < 0) {
		json_decref(chat);
		return NULL;
	}
	return chat;
}
