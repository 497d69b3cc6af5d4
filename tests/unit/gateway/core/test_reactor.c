/* Unit tests for the gateway's loops (src/gateway/core/reactor.c), run as the
 * program runs them (ig_boot_init, then ig_reactor_run on a thread of the
 * test, two reactors): client connections served by both reactors; the
 * signals an operator sends: SIGUSR1 reopens the access log after
 * logrotate moved it, SIGTERM stops within the grace period with exit
 * code 0. */
#include "config.h"
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "conf/conf.h"
#include "core/boot.h"
#include "core/conf_parts.h"
#include "core/reactor.h"
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
static pthread_t loop;
static int rc = -1, port;
static char dir[64], logpath[128];

static void *run(void *arg)
{
	(void)arg;
	rc = ig_reactor_run(&gw);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void start(void)
{
	snprintf(dir, sizeof(dir), "/tmp/ig-test-reactor-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(logpath, sizeof(logpath), "%s/access.log", dir);
	char *argv[] = {"infergate", "--listen", "127.0.0.1:0", "--backend", "http://127.0.0.1:9", "--workers", "2",
			"--shutdown-grace-s", "2", "--access-log", logpath, "--log-level", "error"};
	char *err = NULL;
	ig_log_set_level(IG_LOG_ERROR);
	ck_assert_msg(ig_conf_from_args(&cfg, sizeof(argv) / sizeof(argv[0]), argv, &err) == 0, "%s", err);
	ck_assert_int_eq(ig_boot_init(&gw, &cfg), 0); /* blocks the signals: the loops' threads inherit that */
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	ck_assert_int_eq(getsockname(gw.listen_fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	ck_assert_int_eq(pthread_create(&loop, NULL, run, NULL), 0);
}

static void finish(void)
{
	ig_boot_free(&gw);
	ig_conf_free(&cfg);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static unsigned get(const char *path)
{
	char req[256];
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {60, 0};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	ck_assert_int_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
	char buf[8192];
	ssize_t got, total = 0;
	while ((got = recv(fd, buf + total, sizeof(buf) - 1 - (size_t)total, 0)) > 0 && total < (ssize_t)sizeof(buf) - 1)
		total += got;
	close(fd);
	buf[total] = '\0';
	unsigned status = 0;
	ck_assert_msg(sscanf(buf, "HTTP/1.1 %u", &status) == 1, "'%s'", buf);
	return status;
}

static long lines_in(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long n = 0;
	for (int c; (c = fgetc(f)) != EOF;)
		n += c == '\n';
	fclose(f);
	return n;
}

START_TEST(two_reactors_serve_and_sigterm_stops_them)
{
	start();
	for (int i = 0; i < 20; i++)
		ck_assert_uint_eq(get("/v1/models"), 200);
	/* every answer logged, one line each */
	ck_assert_int_eq(lines_in(logpath), 20);

	double t0 = now_s();
	kill(getpid(), SIGTERM);
	pthread_join(loop, NULL);
	ck_assert_int_eq(rc, 0);
	ck_assert(now_s() - t0 < 2 + 3); /* nothing in flight: well within the grace */
	ck_assert_uint_eq(gw.rx[0].accepted + gw.rx[1].accepted, 20);
	ck_assert_uint_eq(gw.nrx, 2);
	finish();
}
END_TEST

START_TEST(sigusr1_reopens_the_access_log)
{
	start();
	ck_assert_uint_eq(get("/v1/models"), 200);
	char moved[160];
	snprintf(moved, sizeof(moved), "%s.1", logpath);
	ck_assert_int_eq(rename(logpath, moved), 0);
	kill(getpid(), SIGUSR1);
	/* the reopen is the loop's: once it ran, a new file takes the lines */
	double t0 = now_s();
	while (lines_in(logpath) < 1 && now_s() - t0 < 10) {
		get("/v1/models");
		usleep(20000);
	}
	ck_assert_int_ge(lines_in(logpath), 1);
	ck_assert_int_ge(lines_in(moved), 1);
	kill(getpid(), SIGTERM);
	pthread_join(loop, NULL);
	ck_assert_int_eq(rc, 0);
	finish();
}
END_TEST

IG_CHECK_MAIN("reactor", two_reactors_serve_and_sigterm_stops_them, sigusr1_reopens_the_access_log)
