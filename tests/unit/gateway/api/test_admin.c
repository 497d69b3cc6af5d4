/* Unit tests for the admin API (src/gateway/api/admin.c) as an operator uses
 * it: backends added (probed before they serve), refused with a reason
 * (a duplicate, a bad URL, weight out of range, a model listed twice),
 * listed and shown, drained, enabled, their models set or learned, removed
 * (drained, then gone once reactor 0 reaps); unknown paths and methods.
 * A gateway set up as the program does (ig_boot_init, no reactor running)
 * answers through ig_admin_handle behind a daemon of the test's own. */
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

#include "api/admin.h"
#include "conf/conf.h"
#include "core/boot.h"
#include "core/conf_parts.h"
#include "fleet/backend.h"
#include "gateway.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "net/rx.h"
#include "../../check_main.h"

/* The modules' rows and checks, as main.c registers them. */
__attribute__((constructor)) static void register_table(void)
{
	if (ig_conf_parts_register() < 0)
		abort();
}

static struct ig_conf cfg;
static struct ig_gw gw;
static struct MHD_Daemon *mhd;
static int port;

struct body {
	struct ig_buf b;
};

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
			       const char *version, const char *upload, size_t *upload_len, void **ctx)
{
	(void)cls;
	(void)version;
	struct body *bd = *ctx;
	if (!bd) {
		bd = calloc(1, sizeof(*bd));
		ig_buf_init(&bd->b);
		*ctx = bd;
		return MHD_YES;
	}
	if (*upload_len) {
		ig_buf_append(&bd->b, upload, *upload_len);
		*upload_len = 0;
		return MHD_YES;
	}
	return ig_admin_handle(&gw, conn, method, url, ig_buf_head(&bd->b), ig_buf_pending(&bd->b));
}

static void completed(void *cls, struct MHD_Connection *conn, void **ctx, enum MHD_RequestTerminationCode why)
{
	(void)cls;
	(void)conn;
	(void)why;
	struct body *bd = *ctx;
	if (bd) {
		ig_buf_free(&bd->b);
		free(bd);
	}
}

static void setup(void)
{
	char *err = NULL;
	char *argv[] = {"infergate", "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:30001", "--workers", "1",
			"--max-inflight", "7"};
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
	mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, 0, NULL, NULL, handler, NULL, MHD_OPTION_NOTIFY_COMPLETED,
			       completed, NULL, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_END);
	ck_assert_ptr_nonnull(mhd);
}

static void teardown(void)
{
	MHD_stop_daemon(mhd);
	ig_boot_free(&gw);
	ig_conf_free(&cfg);
}

struct reply {
	unsigned status;
	json_t *j;
};

static struct reply ask(const char *method, const char *path, const char *body)
{
	struct reply a = {0, NULL};
	char req[2048];
	int n = snprintf(req, sizeof(req),
			 "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s", method, path,
			 body ? strlen(body) : 0, body ? body : "");
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
	a.j = json_loads(end + 4, 0, NULL);
	ck_assert_msg(a.j != NULL, "not JSON: %s", end + 4);
	ig_buf_free(&in);
	return a;
}

static const char *str(const struct reply *r, const char *k)
{
	return json_string_value(json_object_get(r->j, k));
}

static const char *err_str(const struct reply *r, const char *k)
{
	return json_string_value(json_object_get(json_object_get(r->j, "error"), k));
}

START_TEST(backends_are_added_or_refused_with_a_reason)
{
	setup();
	struct reply r = ask("POST", "/admin/backends",
			     "{\"url\": \"http://127.0.0.1:30005/\", \"weight\": 3, \"models\": [\"llama\", \"qwen\"]}");
	ck_assert_uint_eq(r.status, 201);
	ck_assert_str_eq(str(&r, "url"), "http://127.0.0.1:30005"); /* normalised */
	ck_assert_int_eq(json_integer_value(json_object_get(r.j, "weight")), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(r.j, "max_inflight")), 7); /* the gateway's default */
	ck_assert_str_eq(str(&r, "state"), "down");                                    /* probed before it serves */
	int id = (int)json_integer_value(json_object_get(r.j, "id"));
	json_decref(r.j);
	struct ig_backend *b = ig_backend_fleet_find_id(&gw.fleet, id);
	ck_assert_ptr_nonnull(b);
	ck_assert_ptr_nonnull(b->probe);
	ck_assert_int_eq(ig_backend_serves(b, "qwen"), IG_SERVES_YES);
	ck_assert(gw.models_dirty);

	r = ask("POST", "/admin/backends", "{\"url\": \"http://127.0.0.1:30005\"}");
	ck_assert_uint_eq(r.status, 409);
	ck_assert_str_eq(err_str(&r, "code"), "duplicate_backend");
	json_decref(r.j);
	r = ask("POST", "/admin/backends", "{\"url\": \"ftp://x\"}");
	ck_assert_uint_eq(r.status, 400);
	ck_assert_str_eq(err_str(&r, "code"), "invalid_url");
	ck_assert_str_eq(err_str(&r, "param"), "url");
	json_decref(r.j);
	r = ask("POST", "/admin/backends", "{\"url\": \"http://127.0.0.1:30006\", \"weight\": 0}");
	ck_assert_uint_eq(r.status, 400);
	ck_assert_str_eq(err_str(&r, "message"), "weight must be 1..1000 and max_inflight 0..1000000");
	json_decref(r.j);
	r = ask("POST", "/admin/backends", "{\"url\": \"http://127.0.0.1:30006\", \"models\": [\"a\", \"a\"]}");
	ck_assert_uint_eq(r.status, 400);
	ck_assert_str_eq(err_str(&r, "message"), "models[1]: listed twice");
	json_decref(r.j);
	r = ask("POST", "/admin/backends", "[1, 2]");
	ck_assert_uint_eq(r.status, 400);
	ck_assert_str_eq(err_str(&r, "code"), "invalid_body");
	json_decref(r.j);
	ck_assert_uint_eq(gw.fleet.n, 2);
	teardown();
}
END_TEST

START_TEST(a_backend_is_drained_enabled_and_removed)
{
	setup();
	struct ig_backend *b = gw.fleet.v[0];
	char path[64];
	snprintf(path, sizeof(path), "/admin/backends/%d", b->id);
	struct reply r = ask("GET", path, NULL);
	ck_assert_uint_eq(r.status, 200);
	ck_assert_str_eq(str(&r, "url"), "http://127.0.0.1:30001");
	ck_assert_str_eq(str(&r, "admin"), "enabled");
	json_decref(r.j);
	r = ask("GET", "/admin/backends", NULL);
	ck_assert_uint_eq(r.status, 200);
	json_decref(r.j);

	snprintf(path, sizeof(path), "/admin/backends/%d/drain", b->id);
	r = ask("POST", path, NULL);
	ck_assert_uint_eq(r.status, 200);
	ck_assert_str_eq(str(&r, "admin"), "draining");
	json_decref(r.j);
	ck_assert_int_eq(atomic_load(&b->admin), IG_ADMIN_DRAINING);

	snprintf(path, sizeof(path), "/admin/backends/%d/enable", b->id);
	gw.drain_pending = false;
	r = ask("POST", path, NULL);
	ck_assert_str_eq(str(&r, "admin"), "enabled");
	json_decref(r.j);
	ck_assert(gw.drain_pending); /* queued requests may go there again */

	snprintf(path, sizeof(path), "/admin/backends/%d/models", b->id);
	r = ask("PUT", path, "{\"models\": [\"phi\"]}");
	ck_assert_uint_eq(r.status, 200);
	json_decref(r.j);
	ck_assert_int_eq(ig_backend_serves(b, "phi"), IG_SERVES_YES);
	ck_assert_int_eq(ig_backend_serves(b, "llama"), IG_SERVES_NO);
	r = ask("PUT", path, "{\"models\": null}"); /* learned from its /v1/models again */
	ck_assert_uint_eq(r.status, 200);
	json_decref(r.j);
	ck_assert_int_eq(ig_backend_serves(b, "llama"), IG_SERVES_UNKNOWN);
	r = ask("GET", path, NULL);
	ck_assert_uint_eq(r.status, 405);
	json_decref(r.j);

	/* removed: drained first (a request runs there), gone once reactor 0 reaps */
	int id = b->id;
	atomic_store(&b->inflight, 1);
	snprintf(path, sizeof(path), "/admin/backends/%d", id);
	r = ask("DELETE", path, NULL);
	ck_assert_uint_eq(r.status, 202);
	ck_assert_str_eq(str(&r, "admin"), "removing");
	json_decref(r.j);
	ig_rx_run_jobs(ig_gw_home(&gw));
	ck_assert_ptr_eq(ig_backend_fleet_find_id(&gw.fleet, id), b);
	atomic_store(&b->inflight, 0);
	r = ask("DELETE", path, NULL);
	json_decref(r.j);
	ig_rx_run_jobs(ig_gw_home(&gw));
	ck_assert_ptr_null(ig_backend_fleet_find_id(&gw.fleet, id));
	r = ask("GET", path, NULL);
	ck_assert_uint_eq(r.status, 404);
	json_decref(r.j);
	teardown();
}
END_TEST

START_TEST(unknown_paths_and_methods)
{
	setup();
	const char *paths[][3] = {
		{"GET", "/admin/nothing", "404"},
		{"GET", "/admin/backends/abc", "404"},
		{"GET", "/admin/backends/0x", "404"},
		{"GET", "/admin/backends/999", "404"},
		{"PUT", "/admin/backends", "405"},
		{"POST", "/admin/backends/0", "405"},
		{"GET", "/admin/backends/0/drain", "405"},
		{"POST", "/admin/backends/0/reboot", "404"},
		{"POST", "/admin/keys", "405"},
		{"GET", "/admin/keys", "404"}, /* no api_keys_file: every request is let in */
	};
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		struct reply r = ask(paths[i][0], paths[i][1], NULL);
		ck_assert_msg(r.status == (unsigned)atoi(paths[i][2]), "%s %s: %u", paths[i][0], paths[i][1], r.status);
		ck_assert_ptr_nonnull(err_str(&r, "message"));
		json_decref(r.j);
	}
	struct reply r = ask("GET", "/admin/backends/999", NULL);
	ck_assert_str_eq(err_str(&r, "message"), "no backend with id 999");
	json_decref(r.j);
	teardown();
}
END_TEST

IG_CHECK_MAIN("admin", backends_are_added_or_refused_with_a_reason, a_backend_is_drained_enabled_and_removed,
	      unknown_paths_and_methods)
