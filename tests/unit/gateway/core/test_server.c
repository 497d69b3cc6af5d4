/* Unit tests for the client side (src/gateway/core/server.c, included to reach
 * its MHD callbacks, and entry.c behind them): which code answers a path (the gateway's own GET
 * endpoints, the admin API, the Files and Batch APIs, a forwarded route),
 * the checks made before a body is read (ambiguous framing, a declared
 * body over the limit, a method a route does not take, a missing key), each
 * answered with the OpenAI-shaped error and its status. A gateway is set up
 * as the program does (ig_boot_init, no reactor running) and its access
 * handler is put behind a libmicrohttpd daemon of the test's own, on a
 * loopback port; requests are raw bytes, so what a client receives is what
 * is asserted. No backend answers: nothing here is forwarded. */
#include "../../../../src/gateway/core/server.c"

#include <check.h>
#include <jansson.h>
#include <sys/time.h>

#include "conf/conf.h"
#include "core/boot.h"
#include "core/conf_parts.h"
#include "infergate/oaerror.h"
#include "../../check_main.h"

/* The status page entry.c answers (generated at build time). */
extern const size_t ig_status_html_len;

/* The modules' rows and checks, as main.c registers them. */
__attribute__((constructor)) static void register_table(void)
{
	if (ig_conf_parts_register() < 0)
		abort();
}

#define ADMIN_KEY "admin-secret"
#define API_KEY "api-secret"

static struct ig_conf cfg;
static struct ig_gw gw;
static struct MHD_Daemon *mhd;
static int port;
static char dir[64];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

/* A gateway with an admin key and an API key, one backend that never
 * answers (nothing is forwarded), bodies up to 4096 bytes; its handler
 * served by a daemon of the test's own. */
static void setup(void)
{
	char admin[256], api[256], hex[2 * IG_DIGEST_LEN + 1], *err = NULL;
	snprintf(dir, sizeof(dir), "/tmp/ig-test-server-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(admin, sizeof(admin), "%s/admin.keys", dir);
	snprintf(api, sizeof(api), "%s/api.keys", dir);
	ig_keyset_hash(ADMIN_KEY, strlen(ADMIN_KEY), hex);
	write_file(admin, hex);
	ig_keyset_hash(API_KEY, strlen(API_KEY), hex);
	write_file(api, hex);
	char *argv[] = {"infergate", "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:9", "--workers", "1",
			"--max-body-bytes", "4096", "--admin-keys-file", admin, "--api-keys-file", api};
	ig_log_set_level(IG_LOG_ERROR);
	ck_assert_msg(ig_conf_from_args(&cfg, sizeof(argv) / sizeof(argv[0]), argv, &err) == 0, "%s", err);
	ck_assert_int_eq(ig_boot_init(&gw, &cfg), 0);

	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 16), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	/* the handler's argument: a daemon of the gateway's (its door: the listen address's) */
	mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL, handler,
			       &ig_gw_home(&gw)->httpd[0],
			       MHD_OPTION_NOTIFY_COMPLETED, completed, &gw, MHD_OPTION_LISTEN_SOCKET, fd,
			       MHD_OPTION_END);
	ck_assert_ptr_nonnull(mhd);
}

static void teardown(void)
{
	MHD_stop_daemon(mhd);
	ig_boot_free(&gw);
	ig_conf_free(&cfg);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

/* What a client receives for one request (sent as is, "Connection: close"
 * added to its headers by the caller): the status, one header's value, the
 * body. */
struct answer {
	unsigned status;
	char head[4096];
	char *body;
};

static struct answer ask(const char *request, size_t len)
{
	struct answer a = {0};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {60, 0}; /* a guard against a hang, not a limit on speed */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	ck_assert_int_eq(send(fd, request, len, MSG_NOSIGNAL), (ssize_t)len);
	struct ig_buf in;
	ig_buf_init(&in);
	char chunk[4096];
	ssize_t n;
	while ((n = recv(fd, chunk, sizeof(chunk), 0)) > 0)
		ck_assert_int_eq(ig_buf_append(&in, chunk, (size_t)n), 0);
	close(fd);
	ig_buf_append(&in, "", 1);
	const char *all = ig_buf_head(&in);
	ck_assert_msg(sscanf(all, "HTTP/1.1 %u", &a.status) == 1, "no status line in '%s'", all);
	const char *end = strstr(all, "\r\n\r\n");
	ck_assert_ptr_nonnull(end);
	snprintf(a.head, sizeof(a.head), "%.*s", (int)(end - all), all);
	a.body = strdup(end + 4);
	ig_buf_free(&in);
	return a;
}

static struct answer ask_str(const char *request)
{
	return ask(request, strlen(request));
}

/* The value of header name in a's head, "" when absent. */
static const char *header(const struct answer *a, const char *name, char *out, size_t size)
{
	char key[128];
	snprintf(key, sizeof(key), "\r\n%s: ", name);
	const char *p = strcasestr(a->head, key);
	out[0] = '\0';
	if (p) {
		p += strlen(key);
		snprintf(out, size, "%.*s", (int)strcspn(p, "\r\n"), p);
	}
	return out;
}

/* a is the OpenAI-shaped error {"error": {"message", "type", "param",
 * "code"}} with this status and code, its message holding `says`. */
static void assert_error(struct answer *a, unsigned status, const char *code, const char *says)
{
	ck_assert_msg(a->status == status, "status %u, not %u: %s", a->status, status, a->body);
	json_t *j = json_loads(a->body, 0, NULL);
	ck_assert_msg(j != NULL, "not JSON: %s", a->body);
	json_t *e = json_object_get(j, "error");
	ck_assert_msg(json_is_object(e), "no error object: %s", a->body);
	ck_assert_str_eq(json_string_value(json_object_get(e, "code")), code);
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), ig_oaerror_type_for_status(status));
	ck_assert_ptr_nonnull(json_object_get(e, "param"));
	const char *msg = json_string_value(json_object_get(e, "message"));
	ck_assert_msg(msg && strstr(msg, says), "message '%s' does not say '%s'", msg, says);
	json_decref(j);
	free(a->body);
	a->body = NULL;
}

START_TEST(the_gateways_own_endpoints)
{
	char v[256];
	struct answer a = ask_str("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	/* open to load balancers without a key; the backend is not up yet */
	ck_assert_uint_eq(a.status, 503);
	ck_assert_str_eq(header(&a, "Content-Type", v, sizeof(v)), "application/json");
	json_t *j = json_loads(a.body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "unavailable");
	ck_assert_int_eq(json_integer_value(json_object_get(j, "backends")), 1);
	json_decref(j);
	free(a.body);

	a = ask_str("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	ck_assert_uint_eq(a.status, 200);
	ck_assert(strncmp(header(&a, "Content-Type", v, sizeof(v)), "text/plain; version=0.0.4", 25) == 0);
	ck_assert_ptr_nonnull(strstr(a.body, "\ninfergate_"));
	free(a.body);

	a = ask_str("GET /status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	ck_assert_uint_eq(a.status, 200);
	ck_assert_str_eq(header(&a, "Content-Type", v, sizeof(v)), "text/html; charset=utf-8");
	ck_assert_uint_eq(strlen(a.body), ig_status_html_len);
	free(a.body);

	/* the model list is API: it needs a key */
	a = ask_str("GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_error(&a, 401, "invalid_api_key", "missing or invalid API key");
	a = ask_str("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " API_KEY "\r\nConnection: close\r\n\r\n");
	ck_assert_uint_eq(a.status, 200);
	j = json_loads(a.body, 0, NULL);
	ck_assert(json_is_array(json_object_get(j, "data")));
	json_decref(j);
	free(a.body);

	/* they answer GET (and HEAD) only; a body sent with another method
	 * is read and dropped first */
	a = ask_str("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
	ck_assert_str_eq(header(&a, "Allow", v, sizeof(v)), "GET, HEAD");
	assert_error(&a, 405, "method_not_allowed", "this endpoint only answers GET");

	/* a path nobody serves: the answer lists what is served */
	a = ask_str("GET /v2/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_error(&a, 404, "not_found", "/v1/chat/completions");
}
END_TEST

START_TEST(admin_paths_go_to_the_admin_api)
{
	struct answer a = ask_str("GET /admin/backends HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_error(&a, 401, "invalid_api_key", "the admin API needs the admin key");
	/* the API key is not the admin key */
	a = ask_str("GET /admin/backends HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " API_KEY
		    "\r\nConnection: close\r\n\r\n");
	ck_assert_uint_eq(a.status, 401);
	free(a.body);

	a = ask_str("GET /admin/backends HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ADMIN_KEY
		    "\r\nConnection: close\r\n\r\n");
	ck_assert_uint_eq(a.status, 200);
	json_t *j = json_loads(a.body, 0, NULL);
	json_t *b = json_array_get(json_object_get(j, "backends"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(b, "url")), "http://127.0.0.1:9");
	json_decref(j);
	free(a.body);

	/* an admin body over 64 KiB is refused once read */
	size_t big = 70 * 1024;
	char *req = malloc(big + 512);
	int h = snprintf(req, 512, "POST /admin/backends HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ADMIN_KEY
			 "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", big);
	memset(req + h, ' ', big);
	a = ask(req, (size_t)h + big);
	free(req);
	assert_error(&a, 413, "request_too_large", "admin bodies are small JSON objects");

	/* DELETE drains it for removal; the removal itself (its probe's
	 * transfer is reactor 0's) is posted to reactor 0, not done by the
	 * thread that answered */
	a = ask_str("DELETE /admin/backends/0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ADMIN_KEY
		    "\r\nConnection: close\r\n\r\n");
	ck_assert_uint_eq(a.status, 202);
	j = json_loads(a.body, 0, NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "admin")), "removing");
	json_decref(j);
	free(a.body);
	ck_assert_uint_eq(gw.fleet.n, 1);
	ck_assert(ig_list_linked(&gw.reap_job.link));
	ck_assert_ptr_eq(gw.rx[0].jobs.next, &gw.reap_job.link);
	ig_rx_run_jobs(&gw.rx[0]); /* reactor 0's turn */
	ck_assert_uint_eq(gw.fleet.n, 0);
	ck_assert(ig_list_empty(&gw.rx[0].jobs));
}
END_TEST

START_TEST(files_and_batches_paths_without_a_data_dir)
{
	struct answer a = ask_str("GET /v1/files HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_error(&a, 404, "not_found", "the Files API is off on this gateway");
	a = ask_str("GET /v1/files/file-1/content HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_error(&a, 404, "not_found", "the Files API is off");
	a = ask_str("POST /v1/batches HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
	assert_error(&a, 404, "not_found", "the Batch API is off on this gateway");
	a = ask_str("GET /v1/batches/batch_1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_error(&a, 404, "not_found", "the Batch API is off");
	/* not their prefix: an unknown path */
	a = ask_str("GET /v1/filesystem HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	assert_error(&a, 404, "not_found", "unknown path");
}
END_TEST

START_TEST(forwarded_routes_are_checked_before_anything_is_forwarded)
{
	char v[64];
	/* a route's wrong method: 405 with its methods */
	struct answer a = ask_str("GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	ck_assert_str_eq(header(&a, "Allow", v, sizeof(v)), "POST");
	assert_error(&a, 405, "method_not_allowed", "this endpoint takes POST");
	a = ask_str("PATCH /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	ck_assert_str_eq(header(&a, "Allow", v, sizeof(v)), "POST, PUT");
	assert_error(&a, 405, "method_not_allowed", "this endpoint takes POST, PUT");
	a = ask_str("POST /v1/responses/resp_1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}");
	ck_assert_str_eq(header(&a, "Allow", v, sizeof(v)), "GET, DELETE");
	assert_error(&a, 405, "method_not_allowed", "this endpoint takes GET, DELETE");

	/* the key: missing, or not one of the file's */
	const char *body = "{\"model\": \"m\", \"messages\": []}";
	char req[512];
	snprintf(req, sizeof(req), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n"
		 "Connection: close\r\n\r\n%s", strlen(body), body);
	a = ask_str(req);
	ck_assert_str_eq(header(&a, "WWW-Authenticate", v, sizeof(v)), "Bearer");
	assert_error(&a, 401, "invalid_api_key", "missing or invalid API key");
	snprintf(req, sizeof(req), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n"
		 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(body), body);
	a = ask_str(req);
	assert_error(&a, 401, "invalid_api_key", "missing or invalid API key");

	/* with a good key and method the request is the proxy's, which a
	 * stopping gateway does not start: the answer shows it got that far */
	gw.stopping = true;
	snprintf(req, sizeof(req), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " API_KEY
		 "\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(body), body);
	a = ask_str(req);
	assert_error(&a, 503, "shutting_down", "the gateway is shutting down");
	gw.stopping = false;
}
END_TEST

START_TEST(framing_and_size_are_refused_before_the_body)
{
	char v[64];
	/* ambiguous framing: refused, and the connection closed */
	struct answer a = ask_str("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
				  "Content-Length: 3\r\n\r\n{}");
	ck_assert_str_eq(header(&a, "Connection", v, sizeof(v)), "close");
	assert_error(&a, 400, "bad_request", "malformed request: more than one Content-Length");
	a = ask_str("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n");
	ck_assert_uint_eq(a.status, 400);
	free(a.body);
	a = ask_str("GET /health HTTP/1.1\r\nHost: x\r\nX-Bad: a\x01z\r\n\r\n");
	assert_error(&a, 400, "bad_request", "malformed request: a control character in a header value");

	/* a folded header line: refused, and the connection closed */
	a = ask_str("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n x\r\n\r\n"
		    "2\r\n{}\r\n0\r\n\r\n");
	ck_assert_str_eq(header(&a, "Connection", v, sizeof(v)), "close");
	assert_error(&a, 400, "bad_request", "malformed request: a folded header line (obs-fold)");

	/* a declared body far over max_body_bytes (4096): refused from its
	 * length, unread */
	a = ask_str("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " API_KEY
		    "\r\nContent-Length: 99999999\r\nConnection: close\r\n\r\n");
	assert_error(&a, 413, "request_too_large", "the request body is larger than 4096 bytes");
	/* uploads have their own limit (files.max_bytes) and say so */
	a = ask_str("POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999\r\nConnection: close\r\n\r\n");
	assert_error(&a, 413, "request_too_large", "(files.max_bytes)");
}
END_TEST

/* With auth_status 1 the status endpoints take the admin key; an API key
 * without the status right is a 403, none a 401; /health stays open. */
START_TEST(status_endpoints_with_auth_status)
{
	cfg.auth_status = 1;
	static const char *const paths[] = {"/metrics", "/status", "/health/backends", "/health/capacity",
					    "/status/history"};
	char req[512];
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", paths[i]);
		struct answer a = ask_str(req);
		assert_error(&a, 401, "invalid_api_key", "missing or invalid API key");
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " API_KEY
			 "\r\nConnection: close\r\n\r\n", paths[i]);
		a = ask_str(req);
		assert_error(&a, 403, "insufficient_permissions", "\"status\": true in the keys file");
		snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " ADMIN_KEY
			 "\r\nConnection: close\r\n\r\n", paths[i]);
		a = ask_str(req);
		ck_assert_msg(a.status == 200, "%s: %u", paths[i], a.status);
		free(a.body);
	}
	struct answer a = ask_str("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	ck_assert_uint_eq(a.status, 503); /* answered: no backend up */
	free(a.body);
	cfg.auth_status = 0;
}
END_TEST

int main(void)
{
	const TTest *const tests[] = {the_gateways_own_endpoints, admin_paths_go_to_the_admin_api,
				      files_and_batches_paths_without_a_data_dir,
				      forwarded_routes_are_checked_before_anything_is_forwarded,
				      framing_and_size_are_refused_before_the_body,
				      status_endpoints_with_auth_status};
	Suite *s = suite_create("server");
	TCase *tc = tcase_create("core");
	tcase_set_timeout(tc, 600);
	/* each test its own gateway (Check forks a process per test) */
	tcase_add_checked_fixture(tc, setup, teardown);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		tcase_add_test(tc, tests[i]);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_ENV);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
