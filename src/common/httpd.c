/* libmicrohttpd helpers shared by the gateway and the simulator
 * (include/infergate/httpd.h). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"

void ig_httpd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char msg[512];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	size_t n = strlen(msg);
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	ig_log_debug("mhd: %s", msg);
}

enum MHD_Result ig_httpd_error(struct MHD_Connection *conn, unsigned status, const char *message,
			       const char *param, const char *code, const char *request_id, bool close)
{
	return ig_httpd_error_allow(conn, status, message, param, code, request_id, status == 405 ? "GET, HEAD" : NULL,
				    close);
}

enum MHD_Result ig_httpd_error_allow(struct MHD_Connection *conn, unsigned status, const char *message,
				     const char *param, const char *code, const char *request_id, const char *allow,
				     bool close)
{
	char *body = ig_oaerror_json(message, ig_oaerror_type_for_status(status), param, code);
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (request_id)
		MHD_add_response_header(r, "X-Request-Id", request_id);
	if (allow)
		MHD_add_response_header(r, "Allow", allow);
	if (status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	if (close)
		MHD_add_response_header(r, "Connection", "close");
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}
