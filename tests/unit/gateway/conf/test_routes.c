/* Unit tests for the route table (src/gateway/conf/routes.c): the built-in
 * table and its derived routes of stored responses, matching a path (and a
 * template with {id}) to a route, methods and their Allow list, "routes" in
 * the configuration with every problem named, and comparing and moving
 * tables (a reload keeps the running one). */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "conf/routes.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "../../check_main.h"

/* The route a path matches, -1 for none; its id, if any, in id. */
static int match(const struct ig_routes *t, const char *url, char *id, size_t idsize)
{
	const char *at = NULL;
	size_t n = 0;
	int r = ig_routes_match(t, url, &at, &n);
	id[0] = '\0';
	if (r >= 0 && at)
		snprintf(id, idsize, "%.*s", (int)n, at);
	return r;
}

static const char *path_of(const struct ig_routes *t, const char *url)
{
	char id[300];
	int r = match(t, url, id, sizeof(id));
	return r < 0 ? NULL : ig_routes_path(t, r);
}

/* Parses a "routes" value; the problems, joined by '\n' ("" for none). */
static char *parse(struct ig_routes *t, const char *json)
{
	struct ig_buf errs;
	ig_buf_init(&errs);
	json_error_t jerr;
	json_t *v = json_loads(json, 0, &jerr);
	ck_assert_msg(v != NULL, "bad test JSON: %s", jerr.text);
	ig_routes_parse_json(t, v, "cfg.json", &errs);
	json_decref(v);
	char *e = ig_flags_errors(&errs);
	return e ? e : strdup("");
}

START_TEST(the_built_in_table_and_its_derived_routes)
{
	struct ig_routes t = {0};
	char id[300];
	ig_routes_default(&t);
	ck_assert(!t.from_file);
	/* chat, completions, embeddings first: their metrics show before any request */
	ck_assert_str_eq(ig_routes_path(&t, 0), "/v1/chat/completions");
	ck_assert_str_eq(ig_routes_path(&t, 1), "/v1/completions");
	ck_assert_str_eq(ig_routes_path(&t, 2), "/v1/embeddings");
	ck_assert_uint_gt(t.n_conf, (size_t)IG_ROUTES_SHOWN);
	/* /v1/responses is the one responses route: three routes of stored
	 * responses are derived from it */
	ck_assert_uint_eq(t.n, t.n_conf + 3);

	int chat = match(&t, "/v1/chat/completions", id, sizeof(id));
	ck_assert_int_eq(chat, 0);
	ck_assert_str_eq(id, "");
	const struct ig_route *r = ig_routes_at(&t, chat);
	ck_assert(r->flags & IG_RT_POST);
	ck_assert(!(r->flags & (IG_RT_GET | IG_RT_PUT | IG_RT_DELETE)));
	ck_assert(r->flags & IG_RT_USAGE_OPTION);
	ck_assert(!(r->flags & IG_RT_MODEL_OPTIONAL));
	ck_assert_int_eq(r->usage, IG_USAGE_USAGE);
	/* embeddings do not stream; SGLang's /generate reports meta_info and
	 * takes PUT too */
	ck_assert(ig_routes_at(&t, match(&t, "/v1/embeddings", id, sizeof(id)))->flags & IG_RT_NO_STREAM);
	/* Anthropic's Messages API: its usage names, count_tokens not a generation */
	r = ig_routes_at(&t, match(&t, "/v1/messages", id, sizeof(id)));
	ck_assert((r->flags & (IG_RT_ANTHROPIC | IG_RT_OUTPUT)) == (IG_RT_ANTHROPIC | IG_RT_OUTPUT));
	ck_assert(!(r->flags & (IG_RT_USAGE_OPTION | IG_RT_NO_STREAM)));
	r = ig_routes_at(&t, match(&t, "/v1/messages/count_tokens", id, sizeof(id)));
	ck_assert((r->flags & (IG_RT_ANTHROPIC | IG_RT_NO_STREAM)) == (IG_RT_ANTHROPIC | IG_RT_NO_STREAM));
	ck_assert_int_eq(r->usage, IG_USAGE_NONE);
	r = ig_routes_at(&t, match(&t, "/generate", id, sizeof(id)));
	ck_assert_int_eq(r->usage, IG_USAGE_META_INFO);
	ck_assert((r->flags & (IG_RT_POST | IG_RT_PUT)) == (IG_RT_POST | IG_RT_PUT));
	ck_assert(r->flags & IG_RT_MODEL_OPTIONAL);

	/* only exact paths: no prefix, no trailing slash, no query string here */
	ck_assert_int_eq(match(&t, "/v1/chat/completions/", id, sizeof(id)), -1);
	ck_assert_int_eq(match(&t, "/v1/chat", id, sizeof(id)), -1);
	ck_assert_int_eq(match(&t, "/v1/models", id, sizeof(id)), -1);
	ck_assert_int_eq(match(&t, "/", id, sizeof(id)), -1);
	ig_routes_clear(&t);
}
END_TEST

START_TEST(templates_with_an_id)
{
	struct ig_routes t = {0};
	char id[300];
	ig_routes_default(&t);

	int get = match(&t, "/v1/responses/resp_abc123", id, sizeof(id));
	ck_assert_int_ge(get, 0);
	ck_assert_str_eq(id, "resp_abc123");
	ck_assert_str_eq(ig_routes_path(&t, get), "/v1/responses/{id}");
	const struct ig_route *r = ig_routes_at(&t, get);
	ck_assert(r->flags & IG_RT_BY_ID);
	ck_assert((r->flags & IG_RT_METHODS) == (IG_RT_GET | IG_RT_DELETE));
	ck_assert(r->flags & IG_RT_NO_STREAM);

	int cancel = match(&t, "/v1/responses/resp_abc123/cancel", id, sizeof(id));
	ck_assert_str_eq(ig_routes_path(&t, cancel), "/v1/responses/{id}/cancel");
	ck_assert_str_eq(id, "resp_abc123");
	ck_assert((ig_routes_at(&t, cancel)->flags & IG_RT_METHODS) == IG_RT_POST);
	ck_assert_str_eq(path_of(&t, "/v1/responses/r-1.x_Y/input_items"), "/v1/responses/{id}/input_items");

	/* the plain route is still its own; an empty id, a bad character, an
	 * unknown tail or an id over 256 bytes match nothing */
	ck_assert_str_eq(path_of(&t, "/v1/responses"), "/v1/responses");
	ck_assert_ptr_null(path_of(&t, "/v1/responses/"));
	ck_assert_ptr_null(path_of(&t, "/v1/responses//cancel"));
	ck_assert_ptr_null(path_of(&t, "/v1/responses/a%20b"));
	ck_assert_ptr_null(path_of(&t, "/v1/responses/abc/other"));
	ck_assert_ptr_null(path_of(&t, "/v1/responses/abc/cancel/x"));
	char longid[300] = "/v1/responses/";
	memset(longid + strlen(longid), 'a', 257);
	longid[14 + 257] = '\0';
	ck_assert_ptr_null(path_of(&t, longid));
	longid[14 + 256] = '\0';
	ck_assert_str_eq(path_of(&t, longid), "/v1/responses/{id}");

	/* an index out of range reads as the first route and an empty path */
	ck_assert_ptr_eq(ig_routes_at(&t, -1), &t.v[0]);
	ck_assert_ptr_eq(ig_routes_at(&t, (int)t.n), &t.v[0]);
	int far = (int)t.n + 100;
	ck_assert_str_eq(ig_routes_path(&t, far), "");
	ig_routes_clear(&t);
}
END_TEST

START_TEST(methods_and_allow)
{
	ck_assert_uint_eq(ig_routes_method("POST"), IG_RT_POST);
	ck_assert_uint_eq(ig_routes_method("PUT"), IG_RT_PUT);
	ck_assert_uint_eq(ig_routes_method("GET"), IG_RT_GET);
	ck_assert_uint_eq(ig_routes_method("DELETE"), IG_RT_DELETE);
	ck_assert_uint_eq(ig_routes_method("post"), 0); /* methods are case-sensitive (RFC 9110 9.1) */
	ck_assert_uint_eq(ig_routes_method("PATCH"), 0);
	ck_assert_uint_eq(ig_routes_method("HEAD"), 0);
	ck_assert_str_eq(ig_routes_method_name(IG_RT_DELETE), "DELETE");
	ck_assert_str_eq(ig_routes_method_name(0), "?");

	char buf[40];
	struct ig_route r = {"/x", IG_RT_GET | IG_RT_DELETE, IG_USAGE_NONE, -1, -1};
	ck_assert_str_eq(ig_routes_allow(&r, buf, sizeof(buf)), "GET, DELETE");
	r.flags = IG_RT_POST | IG_RT_PUT | IG_RT_NO_STREAM;
	ck_assert_str_eq(ig_routes_allow(&r, buf, sizeof(buf)), "POST, PUT");
	/* a small buffer is cut, never overrun */
	char small[6];
	ck_assert_str_eq(ig_routes_allow(&r, small, sizeof(small)), "POST,");
}
END_TEST

START_TEST(configured_routes)
{
	struct ig_routes t = {0};
	char *e = parse(&t, "[\"/v1/chat/completions\", {\"path\": \"/v1/audio/speech\", \"model\": \"optional\", "
			    "\"stream\": false, \"usage\": \"none\"}, {\"path\": \"/v2/resp\", \"responses\": true, "
			    "\"output\": true, \"methods\": [\"POST\", \"PUT\"]}]");
	ck_assert_str_eq(e, "");
	free(e);
	ck_assert(t.from_file);
	ck_assert_uint_eq(t.n_conf, 3);
	ck_assert_uint_eq(t.n, 6); /* and /v2/resp's three stored-response routes */
	const struct ig_route *r = ig_routes_at(&t, 1);
	ck_assert_str_eq(r->path, "/v1/audio/speech");
	ck_assert_uint_eq(r->flags, IG_RT_POST | IG_RT_MODEL_OPTIONAL | IG_RT_NO_STREAM);
	ck_assert_int_eq(r->usage, IG_USAGE_NONE);
	r = ig_routes_at(&t, 2);
	ck_assert_uint_eq(r->flags, IG_RT_POST | IG_RT_PUT | IG_RT_OUTPUT | IG_RT_RESPONSES);
	ck_assert_str_eq(path_of(&t, "/v2/resp/resp_1/cancel"), "/v2/resp/{id}/cancel");
	ck_assert_ptr_null(path_of(&t, "/v1/completions")); /* not configured: not forwarded */

	/* The file form round-trips: what to_json writes parses to the same table. */
	json_t *j = ig_routes_to_json(&t);
	char *text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	struct ig_routes back = {0};
	e = parse(&back, text);
	ck_assert_str_eq(e, "");
	free(e);
	free(text);
	ck_assert(ig_routes_equal(&t, &back));

	/* A table moved keeps its routes (a reload keeps the running table);
	 * the one moved from is empty. */
	struct ig_routes kept = {0};
	ig_routes_default(&kept);
	ck_assert(!ig_routes_equal(&kept, &t));
	ig_routes_move(&kept, &back);
	ck_assert_uint_eq(back.n, 0);
	ck_assert(ig_routes_equal(&kept, &t));
	ig_routes_clear(&kept);
	ig_routes_clear(&t);
}
END_TEST

START_TEST(bad_routes_are_named_every_one)
{
	struct ig_routes t = {0};
	char *e = parse(&t, "[\"/v1/chat/completions\", \"/v1/nope\", \"/v1/chat/completions\", \"/metrics\", "
			    "\"v1/x\", \"/a//b\", \"/a b\", {\"path\": \"/x\", \"methods\": [\"GET\"], \"colour\": 1}, "
			    "{\"path\": \"/y\", \"stream\": false, \"stream_options\": true}, "
			    "{\"path\": \"/z\", \"responses\": true, \"usage\": \"meta_info\"}, 7, "
			    "{\"path\": \"/w\", \"anthropic\": true, \"stream_options\": true}]");
	const char *want[] = {
		"cfg.json: routes[1]: '/v1/nope' is not a built-in route",
		"cfg.json: routes[2]: '/v1/chat/completions' is listed twice",
		"cfg.json: routes[3]: '/metrics' is one of the gateway's own endpoints",
		"cfg.json: routes[4]: 'v1/x' must start with '/' and name something",
		"cfg.json: routes[5]: '/a//b' has an empty segment",
		"cfg.json: routes[6]: '/a b' may hold only letters, digits and / _ . - ~",
		"cfg.json: routes[7]: unknown key 'colour'",
		"cfg.json: routes[7].methods[0]: 'GET' is not POST or PUT",
		"cfg.json: routes[8].stream_options: true needs \"stream\": true",
		"cfg.json: routes[9].responses: the Responses API's usage is in \"usage\"",
		"cfg.json: routes[10] must be a path (a built-in route) or an object with a string \"path\"",
		"cfg.json: routes[11].anthropic: Anthropic's Messages API has its usage in \"usage\" (or none), no "
		"stream_options",
	};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(strstr(e, want[i]) != NULL, "missing '%s' in:\n%s", want[i], e);
	free(e);
	/* only the good one is in the table */
	ck_assert_uint_eq(t.n_conf, 1);
	ig_routes_clear(&t);

	e = parse(&t, "[]");
	ck_assert_msg(strstr(e, "key 'routes' must be a non-empty list") != NULL, "%s", e);
	free(e);
	ig_routes_clear(&t);
}
END_TEST

IG_CHECK_MAIN("routes", the_built_in_table_and_its_derived_routes, templates_with_an_id, methods_and_allow,
	      configured_routes, bad_routes_are_named_every_one)
