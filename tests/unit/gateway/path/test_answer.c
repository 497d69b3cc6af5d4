/* Unit tests for the gateway's own answers (src/gateway/path/answer.c): what a
 * client receives (status, body, Content-Type, Cache-Control, a 405's
 * Allow, a 401's WWW-Authenticate, Connection: close when asked), each
 * answer counted by its status class for /metrics and written to the
 * access log with its method, path, status and bytes. Served by a
 * libmicrohttpd daemon of the test's own on a loopback port. */
#include "config.h"
#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "gateway.h"
#include "infergate/buf.h"
#include "obs/accesslog.h"
#include "path/answer.h"
#include "../../check_main.h"

static struct ig_gw gw;
static struct ig_conf cfg; /* the built-in routes: /v1/messages is Anthropic's */
static struct MHD_Daemon *mhd;
static int port;
static char dir[64], logpath[128];

/* The path says what to answer. */
static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			       const char *version, const char *upload, size_t *upload_len, void **ctx)
{
	(void)cls;
	(void)version;
	(void)upload;
	(void)upload_len;
	if (!*ctx) { /* the head only: answered at the next call */
		*ctx = conn;
		return MHD_YES;
	}
	struct ig_answer_to to = {&gw, conn, method, url};
	if (strcmp(url, "/json") == 0)
		return ig_answer_json(&to, 200, json_pack("{s:s, s:i, s:s}", "object", "list", "n", 2, "a", "b"));
	if (strcmp(url, "/wrong-method") == 0)
		return ig_answer_error(&to, 405, NULL, "method_not_allowed", "GET, DELETE", false, "this endpoint takes GET, DELETE");
	if (strcmp(url, "/no-key") == 0)
		return ig_answer_error(&to, 401, NULL, "invalid_api_key", NULL, true, "Incorrect API key provided.");
	if (strcmp(url, "/bad") == 0)
		return ig_answer_error(&to, 400, "purpose", NULL, NULL, false, "purpose must be \"batch\"");
	if (strcmp(url, "/v1/messages") == 0) /* an Anthropic route's error */
		return ig_answer_error(&to, strcmp(method, "GET") == 0 ? 405 : 429, NULL, "rate_limit_exceeded",
				       strcmp(method, "GET") == 0 ? "POST" : NULL, false, "slow down");
	static char text[] = "plain words";
	struct MHD_Response *r = MHD_create_response_from_buffer(sizeof(text) - 1, text, MHD_RESPMEM_PERSISTENT);
	return ig_answer(&to, 204, r, 0);
}

static void setup(void)
{
	memset(&gw, 0, sizeof(gw));
	ig_routes_clear(&cfg.routes);
	ig_routes_default(&cfg.routes);
	gw.cfg = &cfg;
	snprintf(dir, sizeof(dir), "/tmp/ig-test-answer-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(logpath, sizeof(logpath), "%s/access.log", dir);
	char *err = NULL;
	ck_assert_int_eq(ig_accesslog_open(&gw.alog, logpath, &err), 0);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, handler, NULL,
			       MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_END);
	ck_assert_ptr_nonnull(mhd);
}

static void teardown(void)
{
	MHD_stop_daemon(mhd);
	ig_accesslog_close(&gw.alog);
	unlink(logpath);
	rmdir(dir);
}

struct reply {
	unsigned status;
	char head[2048];
	char body[2048];
};

static struct reply ask(const char *method, const char *path)
{
	struct reply a;
	memset(&a, 0, sizeof(a));
	char req[256];
	int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", method, path);
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
	snprintf(a.body, sizeof(a.body), "%s", end + 4);
	ig_buf_free(&in);
	return a;
}

static bool has(const struct reply *r, const char *line)
{
	char want[256];
	snprintf(want, sizeof(want), "\r\n%s\r\n", line);
	return strcasestr(r->head, want) != NULL;
}

START_TEST(what_the_client_receives)
{
	setup();
	struct reply r = ask("GET", "/json");
	ck_assert_uint_eq(r.status, 200);
	ck_assert_str_eq(r.body, "{\"object\":\"list\",\"n\":2,\"a\":\"b\"}"); /* compact, members in order */
	ck_assert(has(&r, "Content-Type: application/json"));
	ck_assert(has(&r, "Cache-Control: no-store"));

	r = ask("POST", "/wrong-method");
	ck_assert_uint_eq(r.status, 405);
	ck_assert(has(&r, "Allow: GET, DELETE"));
	json_t *j = json_loads(r.body, 0, NULL);
	json_t *e = json_object_get(j, "error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "this endpoint takes GET, DELETE");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "code")), "method_not_allowed");
	json_decref(j);

	r = ask("GET", "/no-key");
	ck_assert_uint_eq(r.status, 401);
	ck_assert(has(&r, "WWW-Authenticate: Bearer"));
	ck_assert(has(&r, "Connection: close"));
	j = json_loads(r.body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")), "authentication_error");
	json_decref(j);

	r = ask("POST", "/bad");
	ck_assert_uint_eq(r.status, 400);
	j = json_loads(r.body, 0, NULL);
	e = json_object_get(j, "error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "param")), "purpose");
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "purpose must be \"batch\"");
	ck_assert(json_is_null(json_object_get(e, "code")));
	json_decref(j);

	r = ask("DELETE", "/other");
	ck_assert_uint_eq(r.status, 204);
	teardown();
}
END_TEST

START_TEST(an_anthropic_routes_errors_are_in_its_shape)
{
	setup();
	struct reply r = ask("POST", "/v1/messages");
	ck_assert_uint_eq(r.status, 429);
	json_t *j = json_loads(r.body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "type")), "error");
	json_t *e = json_object_get(j, "error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "rate_limit_error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "slow down");
	ck_assert_uint_eq(json_object_size(e), 2); /* no OpenAI param or code */
	ck_assert(has(&r, "retry-after: 1"));
	json_decref(j);
	r = ask("GET", "/v1/messages");
	ck_assert_uint_eq(r.status, 405);
	ck_assert(has(&r, "Allow: POST"));
	j = json_loads(r.body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "error"), "type")),
			 "invalid_request_error");
	json_decref(j);
	ck_assert(ig_answer_anthropic(&gw, "/v1/messages/count_tokens"));
	ck_assert(!ig_answer_anthropic(&gw, "/v1/chat/completions"));
	ck_assert(!ig_answer_anthropic(&gw, "/nowhere"));
	teardown();
}
END_TEST

START_TEST(each_answer_is_counted_and_logged)
{
	setup();
	ask("GET", "/json");
	ask("GET", "/json");
	ask("POST", "/wrong-method");
	ask("GET", "/no-key");
	ask("DELETE", "/other");
	ck_assert_uint_eq(gw.stats.responses[2], 3);
	ck_assert_uint_eq(gw.stats.responses[4], 2);
	ck_assert_uint_eq(gw.stats.responses[5], 0);

	FILE *f = fopen(logpath, "r");
	ck_assert_ptr_nonnull(f);
	char line[1024];
	const char *want_method[] = {"GET", "GET", "POST", "GET", "DELETE"};
	const char *want_path[] = {"/json", "/json", "/wrong-method", "/no-key", "/other"};
	int want_status[] = {200, 200, 405, 401, 204};
	int k = 0;
	while (fgets(line, sizeof(line), f)) {
		ck_assert_int_lt(k, 5);
		json_t *j = json_loads(line, 0, NULL);
		ck_assert_msg(j != NULL, "not one JSON object: %s", line);
		ck_assert_str_eq(json_string_value(json_object_get(j, "method")), want_method[k]);
		ck_assert_str_eq(json_string_value(json_object_get(j, "path")), want_path[k]);
		ck_assert_int_eq(json_integer_value(json_object_get(j, "status")), want_status[k]);
		ck_assert(json_is_string(json_object_get(j, "time")));
		if (k == 0) /* the body's bytes: {"object":"list","n":2,"a":"b"} */
			ck_assert_int_eq(json_integer_value(json_object_get(j, "bytes_out")), 31);
		json_decref(j);
		k++;
	}
	fclose(f);
	ck_assert_int_eq(k, 5);
	teardown();
}
END_TEST

IG_CHECK_MAIN("answer", what_the_client_receives, an_anthropic_routes_errors_are_in_its_shape, each_answer_is_counted_and_logged)
