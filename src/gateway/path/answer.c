/* The gateway's own answers, counted and logged alike (answer.h). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
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

enum MHD_Result ig_answer_error(const struct ig_answer_to *to, unsigned status, const char *param, const char *code,
				const char *allow, bool close, const char *message)
{
	counted(to, status, 0);
	return ig_httpd_error_allow(to->conn, status, message, param, code, NULL, allow, close);
}
