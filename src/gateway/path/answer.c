/* The gateway's own answers, counted and logged alike (answer.h). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
#include "infergate/anthropic.h"
#include "infergate/httpd.h"
#include "obs/accesslog.h"
#include "path/answer.h"

static void counted(const struct ig_answer_to *to, unsigned status, size_t len)
{
	to->gw->stats.responses[status / 100]++;
	ig_accesslog_local(&to->gw->alog, to->conn, to->method, to->url, status, len);
}

enum MHD_Result ig_answer(const struct ig_answer_to *to, unsigned status, struct MHD_Response *r, size_t len)
{
	counted(to, status, len);
	enum MHD_Result ret = MHD_queue_response(to->conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

enum MHD_Result ig_answer_json(const struct ig_answer_to *to, unsigned status, json_t *j)
{
	char *body = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!body)
		return MHD_NO;
	size_t len = strlen(body);
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	return ig_answer(to, status, r, len);
}

bool ig_answer_anthropic(const struct ig_gw *gw, const char *url)
{
	const char *id;
	size_t idn;
	int i = url ? ig_routes_match(&gw->cfg->routes, url, &id, &idn) : -1;
	return i >= 0 && (ig_gw_route(gw->cfg, i)->flags & IG_RT_ANTHROPIC);
}

/* On a route of Anthropic's Messages API its clients read errors in its
 * shape, {"type": "error", "error": {"type", "message"}} (anthropic.h), and
 * a 401 without OpenAI's WWW-Authenticate: Bearer (the key came in
 * x-api-key). */
static enum MHD_Result anthropic_error(const struct ig_answer_to *to, unsigned status, const char *allow, bool close,
				       const char *message)
{
	char *body = ig_anth_error_json(status, NULL, message);
	if (!body)
		return MHD_NO;
	size_t len = strlen(body);
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (allow)
		MHD_add_response_header(r, "Allow", allow);
	if (close)
		MHD_add_response_header(r, "Connection", "close");
	if (status == 429 || status == 503 || status == 529)
		MHD_add_response_header(r, "retry-after", "1");
	enum MHD_Result ret = MHD_queue_response(to->conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

enum MHD_Result ig_answer_error(const struct ig_answer_to *to, unsigned status, const char *param, const char *code,
				const char *allow, bool close, const char *message)
{
	counted(to, status, 0);
	if (ig_answer_anthropic(to->gw, to->url))
		return anthropic_error(to, status, allow, close, message);
	return ig_httpd_error_allow(to->conn, status, message, param, code, NULL, allow, close);
}
