/* The route table: the paths the gateway forwards to a backend and what it
 * reads of each (configuration key "routes", the built-in table by
 * default). Matching a request's path and method to a route is here;
 * forwarding is proxy.c's. The table is fixed at start (a reload keeps it:
 * requests and metrics hold route indexes). */
#ifndef IG_ROUTES_H
#define IG_ROUTES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct ig_buf;

enum ig_route_flag {
	IG_RT_MODEL_OPTIONAL = 1u << 0, /* without "model": the one served model, else 400 */
	IG_RT_USAGE_OPTION = 1u << 1,   /* streams take stream_options.include_usage */
	IG_RT_OUTPUT = 1u << 2,         /* generates: max_tokens and default_max_tokens count */
	IG_RT_RESPONSES = 1u << 3,      /* OpenAI Responses: previous_response_id, stored ids,
					 * typed SSE events and their error event */
	IG_RT_NO_STREAM = 1u << 4,      /* "stream": true is refused (400) */
	IG_RT_BY_ID = 1u << 5,          /* PATH/{id}...: a stored response's route, sent to
					 * the backend that holds it (derived, not configured) */
	IG_RT_ANTHROPIC = 1u << 6,      /* Anthropic's Messages API: the gateway's own errors
					 * in its shape, its usage names, x-api-key */
	IG_RT_POST = 1u << 8,           /* the methods it takes */
	IG_RT_PUT = 1u << 9,
	IG_RT_GET = 1u << 10,
	IG_RT_DELETE = 1u << 11,
};
#define IG_RT_METHODS (IG_RT_POST | IG_RT_PUT | IG_RT_GET | IG_RT_DELETE)

/* Where an answer's token counts are: "usage" (OpenAI, and the Responses
 * API's input/output_tokens), SGLang's native "meta_info", or nowhere. */
enum ig_route_usage { IG_USAGE_USAGE, IG_USAGE_META_INFO, IG_USAGE_NONE };

struct ig_route {
	char *path;          /* BY_ID: a template with "{id}" */
	unsigned flags;
	int usage;           /* enum ig_route_usage */
	long ttft_ms;        /* its own timeouts.ttft_ms, -1: the common one */
	long token_gap_ms;   /* its own timeouts.token_gap_ms, -1: the common one */
};

#define IG_MAX_ROUTES 64

struct ig_routes {
	struct ig_route v[IG_MAX_ROUTES];
	size_t n;
	size_t n_conf;       /* of them, configured (or built in); the rest derived */
	bool from_file;      /* "routes" was given */
};

/* Route i of table t; the first for an index out of range. Requests and
 * metrics hold a route's index: the table is fixed at start. */
static inline const struct ig_route *ig_routes_at(const struct ig_routes *t, int i)
{
	return &t->v[i >= 0 && (size_t)i < t->n ? i : 0];
}
/* Route i's path, "" for an index out of range. */
static inline const char *ig_routes_path(const struct ig_routes *t, int i)
{
	return i >= 0 && (size_t)i < t->n ? t->v[i].path : "";
}
/* The same from a configuration (struct ig_conf, conf.h: its `routes`),
 * as every caller holds one. */
#define ig_gw_route(cfg, i) ig_routes_at(&(cfg)->routes, (i))
#define ig_route_path(cfg, i) ig_routes_path(&(cfg)->routes, (i))
/* The first routes (chat, completions, embeddings in the built-in table)
 * show their metrics series before any request. */
#define IG_ROUTES_SHOWN 3

/* The built-in table (and its derived routes). */
void ig_routes_default(struct ig_routes *t);
/* "routes" in the configuration: a list of paths of built-in routes or
 * objects {"path", "methods", "model", "stream", "usage", "stream_options",
 * "output", "responses", "anthropic", "ttft_timeout_ms",
 * "token_gap_timeout_ms"}. Replaces the table; every problem named. */
void ig_routes_parse_json(struct ig_routes *t, json_t *v, const char *where, struct ig_buf *errs);
/* Adds the routes of the stored responses of each "responses" route
 * (PATH/{id}, PATH/{id}/cancel, PATH/{id}/input_items). */
void ig_routes_derive(struct ig_routes *t);
void ig_routes_clear(struct ig_routes *t);
/* Moves src's table into dst (src left empty). */
void ig_routes_move(struct ig_routes *dst, struct ig_routes *src);
/* The configured routes as the file writes them. */
json_t *ig_routes_to_json(const struct ig_routes *t);
/* Whether two tables forward the same paths the same way. */
bool ig_routes_equal(const struct ig_routes *a, const struct ig_routes *b);

/* The route a path names (no query string), or -1. For a BY_ID route the
 * id's place in url is set (*id, *id_len). */
int ig_routes_match(const struct ig_routes *t, const char *url, const char **id, size_t *id_len);
/* The flag of an HTTP method (0: none of ours). */
unsigned ig_routes_method(const char *method);
/* "POST", "PUT", "GET" or "DELETE" for a method flag. */
const char *ig_routes_method_name(unsigned method);
/* "GET, DELETE": the methods a route takes, for Allow and messages. */
const char *ig_routes_allow(const struct ig_route *r, char *buf, size_t size);

#endif
