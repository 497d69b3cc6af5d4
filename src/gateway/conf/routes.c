/* The route table (routes.h): the built-in routes, "routes" in the
 * configuration, the derived routes of stored responses, and matching. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/routes.h"
#include "infergate/buf.h"
#include "infergate/flags.h"

/* The built-in table, after sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py and vllm-project/vllm
 * vllm/entrypoints/openai/api_server.py (and the pooling and responses
 * routers beside it): the native routes' requests have "model" optional
 * (SGLang's have none); SGLang takes PUT as well as POST on /generate,
 * /v1/rerank and /classify; only generation streams. */
static const struct builtin {
	const char *path;
	unsigned flags;
	int usage;
} builtins[] = {
	{"/v1/chat/completions", IG_RT_POST | IG_RT_USAGE_OPTION | IG_RT_OUTPUT, IG_USAGE_USAGE},
	{"/v1/completions", IG_RT_POST | IG_RT_USAGE_OPTION | IG_RT_OUTPUT, IG_USAGE_USAGE},
	{"/v1/embeddings", IG_RT_POST | IG_RT_NO_STREAM, IG_USAGE_USAGE},
	{"/v1/responses", IG_RT_POST | IG_RT_OUTPUT | IG_RT_RESPONSES, IG_USAGE_USAGE},
	{"/v1/rerank", IG_RT_POST | IG_RT_PUT | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM, IG_USAGE_USAGE},
	{"/v1/score", IG_RT_POST | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM, IG_USAGE_USAGE},
	{"/tokenize", IG_RT_POST | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM, IG_USAGE_NONE},
	{"/detokenize", IG_RT_POST | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM, IG_USAGE_NONE},
	{"/generate", IG_RT_POST | IG_RT_PUT | IG_RT_MODEL_OPTIONAL | IG_RT_OUTPUT, IG_USAGE_META_INFO},
	{"/pooling", IG_RT_POST | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM, IG_USAGE_USAGE},
	{"/classify", IG_RT_POST | IG_RT_PUT | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM, IG_USAGE_USAGE},
	/* Anthropic's Messages API, which SGLang and vLLM serve
	 * (python/sglang/srt/entrypoints/anthropic/, vllm/entrypoints/anthropic/):
	 * usage as input_tokens and output_tokens, count_tokens' answer
	 * {"input_tokens"} is not a generation's. */
	{"/v1/messages", IG_RT_POST | IG_RT_OUTPUT | IG_RT_ANTHROPIC, IG_USAGE_USAGE},
	{"/v1/messages/count_tokens", IG_RT_POST | IG_RT_NO_STREAM | IG_RT_ANTHROPIC, IG_USAGE_NONE},
};
#define NBUILTIN (sizeof(builtins) / sizeof(builtins[0]))

/* The routes of a stored response, after OpenAI's API reference: GET and
 * DELETE PATH/{id}, POST PATH/{id}/cancel, GET PATH/{id}/input_items
 * (SGLang and vLLM serve GET and cancel: sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py v1_retrieve_responses,
 * v1_cancel_responses; vllm-project/vllm
 * vllm/entrypoints/openai/responses/api_router.py). */
static const struct {
	const char *suffix;
	unsigned methods;
} by_id[] = {
	{"/{id}", IG_RT_GET | IG_RT_DELETE},
	{"/{id}/cancel", IG_RT_POST},
	{"/{id}/input_items", IG_RT_GET},
};

static const char *const usage_names[] = {"usage", "meta_info", "none"};
static const char *const method_names[] = {"POST", "PUT", "GET", "DELETE"};

/* Configured routes at most: the derived ones need room too. */
#define MAX_CONF 48

static void add(struct ig_routes *t, const char *path, unsigned flags, int usage)
{
	char *p = strdup(path);
	if (!p)
		abort();
	t->v[t->n++] = (struct ig_route){p, flags, usage, -1, -1};
}

void ig_routes_clear(struct ig_routes *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].path);
	t->n = t->n_conf = 0;
	t->from_file = false;
}

void ig_routes_default(struct ig_routes *t)
{
	ig_routes_clear(t);
	for (size_t i = 0; i < NBUILTIN; i++)
		add(t, builtins[i].path, builtins[i].flags, builtins[i].usage);
	t->n_conf = t->n;
	ig_routes_derive(t);
}

void ig_routes_derive(struct ig_routes *t)
{
	for (size_t i = t->n_conf; i < t->n; i++)
		free(t->v[i].path);
	t->n = t->n_conf;
	for (size_t i = 0; i < t->n_conf; i++) {
		if (!(t->v[i].flags & IG_RT_RESPONSES))
			continue;
		for (size_t k = 0; k < sizeof(by_id) / sizeof(by_id[0]) && t->n < IG_MAX_ROUTES; k++) {
			char path[320];
			snprintf(path, sizeof(path), "%s%s", t->v[i].path, by_id[k].suffix);
			add(t, path, IG_RT_BY_ID | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM | by_id[k].methods,
			    IG_USAGE_NONE);
		}
	}
}

void ig_routes_move(struct ig_routes *dst, struct ig_routes *src)
{
	ig_routes_clear(dst);
	*dst = *src;
	src->n = src->n_conf = 0;
	src->from_file = false;
}

/* Why a configured path is refused, or NULL. */
static const char *bad_path(const char *p)
{
	static const char *const own[] = {"/health", "/metrics", "/status", "/admin", "/v1/models"};
	size_t n = strlen(p);
	if (p[0] != '/' || n < 2)
		return "must start with '/' and name something";
	if (n > 200)
		return "is longer than 200 bytes";
	if (strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/_.-~") != n)
		return "may hold only letters, digits and / _ . - ~";
	if (strstr(p, "//") || p[n - 1] == '/')
		return "has an empty segment";
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		size_t k = strlen(own[i]);
		if (strncmp(p, own[i], k) == 0 && (p[k] == '\0' || p[k] == '/'))
			return "is one of the gateway's own endpoints";
	}
	return NULL;
}

static const struct builtin *builtin(const char *path)
{
	for (size_t i = 0; i < NBUILTIN; i++)
		if (strcmp(builtins[i].path, path) == 0)
			return &builtins[i];
	return NULL;
}

/* A boolean member: *flags gets `bit` when it says yes (def when absent). */
static void flag_member(json_t *o, const char *key, unsigned bit, bool def, unsigned *flags, const char *ctx,
			struct ig_buf *errs)
{
	json_t *v = json_object_get(o, key);
	if (v && !json_is_boolean(v))
		ig_flags_problem(errs, "%s.%s: must be true or false", ctx, key);
	if (v ? json_is_true(v) : def)
		*flags |= bit;
}

/* A timeout member: *ms gets it (-1 when absent). */
static void ms_member(json_t *o, const char *key, long *ms, const char *ctx, struct ig_buf *errs)
{
	json_t *v = json_object_get(o, key);
	*ms = -1;
	if (!v)
		return;
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 86400000)
		ig_flags_problem(errs, "%s.%s: must be a whole number of milliseconds from 0 (no limit) to 86400000", ctx,
				 key);
	else
		*ms = (long)json_integer_value(v);
}

/* One object entry; returns 0 with the route's flags, usage and timeouts,
 * or -1. */
static int parse_entry(json_t *o, const char *ctx, unsigned *flags, int *usage, long ms[2], struct ig_buf *errs)
{
	static const char *const known[] = {"path", "methods", "model", "stream", "usage", "stream_options",
					    "output", "responses", "anthropic", "ttft_timeout_ms", "token_gap_timeout_ms"};
	size_t problems = ig_buf_pending(errs);
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v) {
		size_t i = 0;
		while (i < sizeof(known) / sizeof(known[0]) && strcmp(known[i], k) != 0)
			i++;
		if (i == sizeof(known) / sizeof(known[0]))
			ig_flags_problem(errs, "%s: unknown key '%s' (path, methods, model, stream, usage, stream_options, "
					 "output, responses, anthropic, ttft_timeout_ms, token_gap_timeout_ms)", ctx, k);
	}
	*flags = 0;
	v = json_object_get(o, "methods");
	if (!v) {
		*flags |= IG_RT_POST;
	} else if (!json_is_array(v) || json_array_size(v) == 0) {
		ig_flags_problem(errs, "%s.methods: must be a non-empty list of \"POST\", \"PUT\"", ctx);
	} else {
		size_t i;
		json_t *m;
		json_array_foreach(v, i, m) {
			const char *s = json_string_value(m);
			if (s && strcmp(s, "POST") == 0)
				*flags |= IG_RT_POST;
			else if (s && strcmp(s, "PUT") == 0)
				*flags |= IG_RT_PUT;
			else
				ig_flags_problem(errs, "%s.methods[%zu]: '%s' is not POST or PUT (a forwarded route reads a "
						 "JSON body; GET /v1/models is the gateway's own)", ctx, i, s ? s : "?");
		}
	}
	v = json_object_get(o, "model");
	if (v && json_is_string(v) && strcmp(json_string_value(v), "optional") == 0)
		*flags |= IG_RT_MODEL_OPTIONAL;
	else if (v && !(json_is_string(v) && strcmp(json_string_value(v), "required") == 0))
		ig_flags_problem(errs, "%s.model: must be \"required\" (routed by the body's model) or \"optional\" (without "
				 "one, the gateway's only model)", ctx);
	unsigned streams = 0, opt = 0;
	flag_member(o, "stream", 1, true, &streams, ctx, errs);
	if (!streams)
		*flags |= IG_RT_NO_STREAM;
	flag_member(o, "stream_options", 1, false, &opt, ctx, errs);
	flag_member(o, "output", IG_RT_OUTPUT, false, flags, ctx, errs);
	flag_member(o, "responses", IG_RT_RESPONSES, false, flags, ctx, errs);
	flag_member(o, "anthropic", IG_RT_ANTHROPIC, false, flags, ctx, errs);
	*usage = IG_USAGE_USAGE;
	v = json_object_get(o, "usage");
	if (v) {
		int u = 0;
		while (u < 3 && !(json_is_string(v) && strcmp(json_string_value(v), usage_names[u]) == 0))
			u++;
		if (u == 3)
			ig_flags_problem(errs, "%s.usage: must be \"usage\" (OpenAI's member, or the Responses API's), "
					 "\"meta_info\" (SGLang's native) or \"none\"", ctx);
		else
			*usage = u;
	}
	if (opt) {
		if (!streams || *usage != IG_USAGE_USAGE || (*flags & IG_RT_RESPONSES))
			ig_flags_problem(errs, "%s.stream_options: true needs \"stream\": true and \"usage\": \"usage\", "
					 "and is not the Responses API's", ctx);
		*flags |= IG_RT_USAGE_OPTION;
	}
	ms_member(o, "ttft_timeout_ms", &ms[0], ctx, errs);
	ms_member(o, "token_gap_timeout_ms", &ms[1], ctx, errs);
	if ((*flags & IG_RT_RESPONSES) && *usage != IG_USAGE_USAGE)
		ig_flags_problem(errs, "%s.responses: the Responses API's usage is in \"usage\"", ctx);
	if ((*flags & IG_RT_ANTHROPIC) && ((*flags & (IG_RT_RESPONSES | IG_RT_USAGE_OPTION)) || *usage == IG_USAGE_META_INFO))
		ig_flags_problem(errs, "%s.anthropic: Anthropic's Messages API has its usage in \"usage\" (or none), no "
				 "stream_options, and is not the Responses API", ctx);
	return ig_buf_pending(errs) == problems ? 0 : -1;
}

void ig_routes_parse_json(struct ig_routes *t, json_t *v, const char *where, struct ig_buf *errs)
{
	ig_routes_clear(t);
	t->from_file = true;
	if (!json_is_array(v) || json_array_size(v) == 0) {
		ig_flags_problem(errs, "%s: key 'routes' must be a non-empty list of paths of built-in routes or of "
				 "objects {\"path\", ...}", where);
		return;
	}
	if (json_array_size(v) > MAX_CONF) {
		ig_flags_problem(errs, "%s: routes: %zu routes; at most %d", where, json_array_size(v), MAX_CONF);
		return;
	}
	size_t i;
	json_t *e;
	json_array_foreach(v, i, e) {
		char ctx[600];
		snprintf(ctx, sizeof(ctx), "%s: routes[%zu]", where, i);
		json_t *jp = json_is_object(e) ? json_object_get(e, "path") : e;
		const char *path = json_string_value(jp);
		if (!path) {
			ig_flags_problem(errs, "%s must be a path (a built-in route) or an object with a string \"path\"", ctx);
			continue;
		}
		const char *why = bad_path(path);
		if (why) {
			ig_flags_problem(errs, "%s: '%.200s' %s", ctx, path, why);
			continue;
		}
		bool twice = false;
		for (size_t k = 0; k < t->n; k++)
			twice = twice || strcmp(t->v[k].path, path) == 0;
		if (twice) {
			ig_flags_problem(errs, "%s: '%s' is listed twice", ctx, path);
			continue;
		}
		unsigned flags;
		int usage;
		long ms[2] = {-1, -1};
		if (json_is_string(e)) {
			const struct builtin *b = builtin(path);
			if (!b) {
				struct ig_buf names;
				ig_buf_init(&names);
				for (size_t k = 0; k < NBUILTIN; k++)
					ig_buf_printf(&names, "%s%s", k ? ", " : "", builtins[k].path);
				ig_flags_problem(errs, "%s: '%s' is not a built-in route (%s); give an object {\"path\": "
						 "\"%s\", ...} to say how to forward it", ctx, path, names.data, path);
				ig_buf_free(&names);
				continue;
			}
			flags = b->flags;
			usage = b->usage;
		} else if (parse_entry(e, ctx, &flags, &usage, ms, errs) < 0) {
			continue;
		}
		add(t, path, flags, usage);
		t->v[t->n - 1].ttft_ms = ms[0];
		t->v[t->n - 1].token_gap_ms = ms[1];
	}
	t->n_conf = t->n;
	size_t derived = 0;
	for (size_t k = 0; k < t->n; k++)
		derived += t->v[k].flags & IG_RT_RESPONSES ? sizeof(by_id) / sizeof(by_id[0]) : 0;
	if (t->n + derived > IG_MAX_ROUTES)
		ig_flags_problem(errs, "%s: routes: %zu routes and the %zu of their stored responses; at most %d in all",
				 where, t->n, derived, IG_MAX_ROUTES);
	ig_routes_derive(t);
}

json_t *ig_routes_to_json(const struct ig_routes *t)
{
	json_t *a = json_array();
	for (size_t i = 0; i < t->n_conf; i++) {
		const struct ig_route *r = &t->v[i];
		json_t *methods = json_array();
		for (size_t k = 0; k < 4; k++)
			if (r->flags & ((unsigned)IG_RT_POST << k))
				json_array_append_new(methods, json_string(method_names[k]));
		json_t *o = json_pack("{s:s, s:o, s:s, s:b, s:s, s:b, s:b, s:b, s:b}", "path", r->path, "methods", methods,
				      "model", r->flags & IG_RT_MODEL_OPTIONAL ? "optional" : "required", "stream",
				      !(r->flags & IG_RT_NO_STREAM), "usage", usage_names[r->usage], "stream_options",
				      (r->flags & IG_RT_USAGE_OPTION) != 0, "output", (r->flags & IG_RT_OUTPUT) != 0,
				      "responses", (r->flags & IG_RT_RESPONSES) != 0, "anthropic",
				      (r->flags & IG_RT_ANTHROPIC) != 0);
		if (o && r->ttft_ms >= 0)
			json_object_set_new(o, "ttft_timeout_ms", json_integer(r->ttft_ms));
		if (o && r->token_gap_ms >= 0)
			json_object_set_new(o, "token_gap_timeout_ms", json_integer(r->token_gap_ms));
		json_array_append_new(a, o);
	}
	return a;
}

bool ig_routes_equal(const struct ig_routes *a, const struct ig_routes *b)
{
	if (a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (strcmp(a->v[i].path, b->v[i].path) != 0 || a->v[i].flags != b->v[i].flags ||
		    a->v[i].usage != b->v[i].usage || a->v[i].ttft_ms != b->v[i].ttft_ms ||
		    a->v[i].token_gap_ms != b->v[i].token_gap_ms)
			return false;
	return true;
}

/* A stored response's id as the servers make them ("resp_" + hex, OpenAI's
 * "resp_" + base62): letters, digits, '_', '-', '.', at most 256. */
static size_t id_len(const char *s)
{
	size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.");
	return n <= 256 ? n : 0;
}

int ig_routes_match(const struct ig_routes *t, const char *url, const char **id, size_t *idn)
{
	for (size_t i = 0; i < t->n; i++) {
		const char *p = t->v[i].path;
		if (!(t->v[i].flags & IG_RT_BY_ID)) {
			if (strcmp(url, p) == 0)
				return (int)i;
			continue;
		}
		const char *hole = strstr(p, "{id}");
		size_t pre = (size_t)(hole - p);
		if (strncmp(url, p, pre) != 0)
			continue;
		size_t n = id_len(url + pre);
		if (n && strcmp(url + pre + n, hole + 4) == 0) {
			*id = url + pre;
			*idn = n;
			return (int)i;
		}
	}
	return -1;
}

unsigned ig_routes_method(const char *method)
{
	for (size_t k = 0; k < 4; k++)
		if (strcmp(method, method_names[k]) == 0)
			return IG_RT_POST << k;
	return 0;
}

const char *ig_routes_method_name(unsigned method)
{
	for (size_t k = 0; k < 4; k++)
		if (method == ((unsigned)IG_RT_POST << k))
			return method_names[k];
	return "?";
}

const char *ig_routes_allow(const struct ig_route *r, char *buf, size_t size)
{
	size_t at = 0;
	buf[0] = '\0';
	for (size_t k = 0; k < 4; k++)
		if (r->flags & ((unsigned)IG_RT_POST << k))
			at += (size_t)snprintf(buf + at, at < size ? size - at : 0, "%s%s", at ? ", " : "", method_names[k]);
	return buf;
}
