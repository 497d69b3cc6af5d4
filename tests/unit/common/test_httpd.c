/* Unit tests for src/common/httpd.c: the OpenAI-shaped error answers the
 * gateway and the simulator queue on a libmicrohttpd connection, as a
 * client receives them (status, body, type from the status, X-Request-Id,
 * a 405's Allow, a 401's WWW-Authenticate, Connection: close), behind a
 * daemon of the test's own on a loopback port; and MHD's own messages,
 * logged at debug level only. */
#include "config.h"
#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "infergate/buf.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "../check_main.h"

static struct MHD_Daemon *mhd;
static int port;

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			       const char *version, const char *upload, size_t *upload_len, void **ctx)
{
	(void)cls;
	(void)method;
	(void)version;
	(void)upload;
	(void)upload_len;
	if (!*ctx) {
		*ctx = conn;
		return MHD_YES;
	}
	if (strcmp(url, "/405") == 0)
		return ig_httpd_error(conn, 405, "use GET", NULL, "method_not_allowed", NULL, false);
	if (strcmp(url, "/401") == 0)
		return ig_httpd_error(conn, 401, "no key", NULL, "invalid_api_key", "req-1", true);
	if (strcmp(url, "/allow") == 0)
		return ig_httpd_error_allow(conn, 405, "use POST", NULL, NULL, NULL, "POST", false);
	return ig_httpd_error(conn, 429, "slow down \xff", "model", "rate_limited", "req-2", false);
}

static void start(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler, NULL, MHD_OPTION_LISTEN_SOCKET,
			       fd, MHD_OPTION_END);
	ck_assert_ptr_nonnull(mhd);
}

struct reply {
	unsigned status;
	char head[2048];
	json_t *error;
};

static struct reply ask(const char *path)
{
	struct reply a;
	memset(&a, 0, sizeof(a));
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {60, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	ck_assert_int_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
	struct ig_buf in;
	ig_buf_init(&in);
	char chunk[4096];
	ssize_t got;
	while ((got = recv(fd, chunk, sizeof(chunk), 0)) > 0)
		ig_buf_append(&in, chunk, (size_t)got);
	close(fd);
	ig_buf_append(&in, "", 1);
	const char *all = ig_buf_head(&in);
	ck_assert_int_eq(sscanf(all, "HTTP/1.1 %u", &a.status), 1);
	const char *end = strstr(all, "\r\n\r\n");
	ck_assert_ptr_nonnull(end);
	snprintf(a.head, sizeof(a.head), "%.*s\r\n", (int)(end - all), all);
	json_t *j = json_loads(end + 4, 0, NULL);
	ck_assert_ptr_nonnull(j);
	a.error = json_incref(json_object_get(j, "error"));
	json_decref(j);
	ig_buf_free(&in);
	return a;
}

static bool has(const struct reply *r, const char *line)
{
	char want[256];
	snprintf(want, sizeof(want), "\r\n%s\r\n", line);
	return strcasestr(r->head, want) != NULL;
}

static const char *member(const struct reply *r, const char *k)
{
	return json_string_value(json_object_get(r->error, k));
}

START_TEST(errors_as_a_client_receives_them)
{
	start();
	struct reply r = ask("/405");
	ck_assert_uint_eq(r.status, 405);
	ck_assert(has(&r, "Allow: GET, HEAD"));
	ck_assert(has(&r, "Content-Type: application/json"));
	ck_assert_str_eq(member(&r, "message"), "use GET");
	ck_assert_str_eq(member(&r, "type"), "invalid_request_error");
	ck_assert_str_eq(member(&r, "code"), "method_not_allowed");
	ck_assert(json_is_null(json_object_get(r.error, "param")));
	json_decref(r.error);

	r = ask("/401");
	ck_assert_uint_eq(r.status, 401);
	ck_assert(has(&r, "WWW-Authenticate: Bearer"));
	ck_assert(has(&r, "X-Request-Id: req-1"));
	ck_assert(has(&r, "Connection: close"));
	ck_assert_str_eq(member(&r, "type"), "authentication_error");
	json_decref(r.error);

	r = ask("/allow");
	ck_assert(has(&r, "Allow: POST"));
	ck_assert(!has(&r, "Allow: GET, HEAD"));
	json_decref(r.error);

	r = ask("/other");
	ck_assert_uint_eq(r.status, 429);
	ck_assert(has(&r, "X-Request-Id: req-2"));
	ck_assert(!has(&r, "Allow: GET, HEAD"));
	ck_assert(!has(&r, "WWW-Authenticate: Bearer"));
	ck_assert_str_eq(member(&r, "type"), "rate_limit_error");
	ck_assert_str_eq(member(&r, "param"), "model");
	ck_assert_str_eq(member(&r, "message"), "slow down ?"); /* a byte that is not UTF-8 cannot break it */
	json_decref(r.error);
	MHD_stop_daemon(mhd);
}
END_TEST

static void mhd_says(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ig_httpd_log(NULL, fmt, ap);
	va_end(ap);
}

START_TEST(mhd_messages_are_debug_lines)
{
	char path[] = "/tmp/ig-test-httpd-XXXXXX";
	int fd = mkstemp(path);
	int saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	ig_log_set_level(IG_LOG_INFO);
	mhd_says("Failed to send data: %s\n", "reset");
	ig_log_set_level(IG_LOG_DEBUG);
	mhd_says("Failed to send data: %s\n", "broken pipe");
	ig_log_set_level(IG_LOG_INFO);
	dup2(saved, STDERR_FILENO);
	close(saved);
	char buf[1024] = "";
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	close(fd);
	unlink(path);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	ck_assert_ptr_null(strstr(buf, "reset"));             /* not at info */
	ck_assert_ptr_nonnull(strstr(buf, " debug: "));
	ck_assert_ptr_nonnull(strstr(buf, "Failed to send data: broken pipe"));
	char *nl = strchr(buf, '\n');
	ck_assert_ptr_eq(nl, buf + n - 1); /* MHD's own newline: one line, not two */
}
END_TEST

IG_CHECK_MAIN("httpd", errors_as_a_client_receives_them, mhd_messages_are_debug_lines)
