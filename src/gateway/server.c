/* The client side: libmicrohttpd's access handler and completion callback.
 * It routes paths, answers the gateway's own endpoints at once, reads
 * proxied bodies (refusing oversized ones before reading them), and hands
 * complete bodies to proxy.c.
 * Not here: anything about backends or transfers. */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/gateway.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"

/* How far past max_body_bytes a declared body is still read (and dropped). */
#define DISCARD_BYTES (1024L * 1024)

/* A marker kept in *con_cls between calls: "headers seen, not routed yet"
 * (see handler). */
static struct ig_req first_call;

/* Errors decided before the body was read; MHD may not answer mid-body,
 * so the body is dropped first and *con_cls points to one of these. */
struct deferred {
	unsigned status;
	const char *message, *code;
};
static const struct deferred not_found = {404, "unknown path; this gateway serves /v1/chat/completions, "
	"/v1/completions, /v1/embeddings, /v1/models, /health, /health/backends, /metrics", "not_found"};
static const struct deferred post_only = {405, "this endpoint only accepts POST", "post_only"};
static const struct deferred get_only = {405, "this endpoint only answers GET", "method_not_allowed"};
static const struct deferred stopping = {503, "the gateway is shutting down", "shutting_down"};

static int is_deferred(const void *p)
{
	return p == &not_found || p == &post_only || p == &get_only || p == &stopping;
}

/* Answers d now, or once the body (if any) has been read. */
static enum MHD_Result answer_deferred(struct ig_gw *gw, struct MHD_Connection *conn, const struct deferred *d,
				       size_t *upload_data_size, void **con_cls)
{
	if (*upload_data_size) {
		*upload_data_size = 0;
		*con_cls = (void *)d;
		return MHD_YES;
	}
	*con_cls = NULL;
	gw->stats.responses[d->status / 100]++;
	return ig_server_error(conn, d->status, d->message, NULL, d->code, NULL);
}

/* Routes forwarded to a backend, path as sent upstream. */
static const char *const proxied[] = {"/v1/chat/completions", "/v1/completions", "/v1/embeddings"};

enum MHD_Result ig_server_error(struct MHD_Connection *conn, unsigned status, const char *message,
				const char *param, const char *code, const char *request_id)
{
	char *body = ig_oaerror_json(message, ig_oaerror_type_for_status(status), param, code);
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (request_id)
		MHD_add_response_header(r, "X-Request-Id", request_id);
	if (status == 405) {
		const char *allow = strcmp(code ? code : "", "post_only") == 0 ? "POST" : "GET, HEAD";
		MHD_add_response_header(r, "Allow", allow);
	}
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_text(struct ig_gw *gw, struct MHD_Connection *conn, unsigned status,
				 const char *ctype, char *body)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", ctype);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	gw->stats.responses[status / 100]++;
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* The gateway's own GET endpoints: 0 answered, 1 wrong method, -1 not one. */
static int local_endpoint(struct ig_gw *gw, struct MHD_Connection *conn, const char *path,
			  const char *method, enum MHD_Result *ret)
{
	unsigned status = 200;
	char *body;
	const char *ctype = "application/json";

	if (strcmp(path, "/health") == 0)
		body = NULL;
	else if (strcmp(path, "/health/backends") == 0 || strcmp(path, "/v1/models") == 0 ||
		 strcmp(path, "/metrics") == 0)
		body = NULL;
	else
		return -1;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return 1;
	if (strcmp(path, "/health") == 0) {
		body = ig_health_json(gw, &status);
	} else if (strcmp(path, "/health/backends") == 0) {
		body = ig_backends_json(gw);
	} else if (strcmp(path, "/v1/models") == 0) {
		body = ig_models_json(gw);
	} else {
		body = ig_metrics_text(gw);
		ctype = "text/plain; version=0.0.4; charset=utf-8";
	}
	*ret = send_text(gw, conn, status, ctype, body);
	return 0;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url,
			       const char *method, const char *version IG_UNUSED,
			       const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct ig_gw *gw = cls;
	struct ig_req *req = *con_cls;

	/* Answering on the first call makes MHD close the connection (it has
	 * not seen the end of the request yet); the second call keeps it alive. */
	if (!req) {
		/* A body far over the limit is refused from its declared length,
		 * unread; MHD then closes the connection. One only a little over
		 * is read and dropped (below), so the client is not reset while
		 * still sending and sees the 413. */
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
		if (cl && strtoll(cl, NULL, 10) > gw->cfg->max_body_bytes + DISCARD_BYTES &&
		    strcmp(method, "POST") == 0) {
			char msg[128];
			snprintf(msg, sizeof(msg), "the request body is larger than %ld bytes", gw->cfg->max_body_bytes);
			gw->stats.responses[4]++;
			return ig_server_error(conn, 413, msg, NULL, "request_too_large", NULL);
		}
		*con_cls = &first_call;
		return MHD_YES;
	}
	if (is_deferred(req))
		return answer_deferred(gw, conn, (const void *)req, upload_data_size, con_cls);
	if (req == &first_call) {
		*con_cls = NULL;
		enum MHD_Result ret;
		const char *route = NULL;
		for (size_t i = 0; i < sizeof(proxied) / sizeof(proxied[0]); i++)
			if (strcmp(url, proxied[i]) == 0)
				route = proxied[i];
		if (!route) {
			int local = local_endpoint(gw, conn, url, method, &ret);
			if (local == 0)
				return ret;
			if (local == 1)
				return answer_deferred(gw, conn, &get_only, upload_data_size, con_cls);
			return answer_deferred(gw, conn, &not_found, upload_data_size, con_cls);
		}
		if (strcmp(method, "POST") != 0)
			return answer_deferred(gw, conn, &post_only, upload_data_size, con_cls);
		if (gw->stopping)
			return answer_deferred(gw, conn, &stopping, upload_data_size, con_cls);
		req = ig_req_new(gw, conn, route);
		if (!req)
			return MHD_NO;
		*con_cls = req;
	}
	if (*upload_data_size) {
		if (!req->too_large) {
			if (req->body.len + *upload_data_size > (size_t)gw->cfg->max_body_bytes) {
				req->too_large = true;
				ig_buf_free(&req->body);
			} else if (ig_buf_append(&req->body, upload_data, *upload_data_size) < 0) {
				return MHD_NO;
			}
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (req->phase == IG_REQ_READING)
		return ig_req_start(req);
	return ig_req_respond(req);
}

MHD_AccessHandlerCallback ig_server_handler(void) { return handler; }

void ig_server_completed(void *cls IG_UNUSED, struct MHD_Connection *conn IG_UNUSED, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct ig_req *req = *con_cls;
	if (!req || req == &first_call || is_deferred(req)) {
		*con_cls = NULL;
		return;
	}
	if (!req->client_gone) {
		if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
			ig_log_debug("request %s: connection ended early (%d)", req->request_id, (int)toe);
		/* The connection is finishing: it must not be resumed again. */
		req->suspended = false;
		ig_req_client_gone(req);
	}
	ig_req_free(req);
	*con_cls = NULL;
}
