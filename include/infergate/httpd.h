/* What the gateway and the simulator both need around libmicrohttpd: its
 * log callback, a client's address, and OpenAI-shaped error answers. */
#ifndef IG_HTTPD_H
#define IG_HTTPD_H

#include <microhttpd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* MHD_OPTION_EXTERNAL_LOGGER: MHD's messages at debug level, one line each. */
void ig_httpd_log(void *cls, const char *fmt, va_list ap);
/* Queues an OpenAI-shaped error ({"error": {message, type, param, code}},
 * the type from the status), with X-Request-Id when request_id is not NULL,
 * Allow: GET, HEAD on a 405,
 * WWW-Authenticate on a 401; with close, MHD closes the connection after it
 * (the rest of the request cannot be trusted). Returns MHD's result. */
enum MHD_Result ig_httpd_error(struct MHD_Connection *conn, unsigned status, const char *message,
			       const char *param, const char *code, const char *request_id, bool close);
/* The same with the Allow header given (NULL: none). */
enum MHD_Result ig_httpd_error_allow(struct MHD_Connection *conn, unsigned status, const char *message,
				     const char *param, const char *code, const char *request_id, const char *allow,
				     bool close);

#endif
