/* The gateway's own answers (no backend involved: errors decided before
 * proxying, the Files and Batch APIs, the admin API): each is counted in
 * gw->stats.responses and written to the access log, then queued. On the
 * reactor that holds the connection, under the lock. */
#ifndef IG_ANSWER_H
#define IG_ANSWER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>
#include <microhttpd.h>

struct ig_gw;

/* Where an answer goes, and what its access-log line names. */
struct ig_answer_to {
	struct ig_gw *gw;
	struct MHD_Connection *conn;
	const char *method, *url;
};

/* Queues r (len: its body's bytes, for the log) and releases it. */
enum MHD_Result ig_answer(const struct ig_answer_to *to, unsigned status, struct MHD_Response *r, size_t len);
/* j as compact JSON, its members in order, not to be cached; j released. */
enum MHD_Result ig_answer_json(const struct ig_answer_to *to, unsigned status, json_t *j);
/* An OpenAI-shaped error (Anthropic's on its Messages API's routes:
 * ig_answer_anthropic); allow: a 405's methods (NULL: none); close: the
 * connection is closed after it. */
enum MHD_Result ig_answer_error(const struct ig_answer_to *to, unsigned status, const char *param, const char *code,
				const char *allow, bool close, const char *message);

/* Whether url is a route of Anthropic's Messages API (IG_RT_ANTHROPIC),
 * whose clients read the gateway's errors in Anthropic's shape. */
bool ig_answer_anthropic(const struct ig_gw *gw, const char *url);

#endif
