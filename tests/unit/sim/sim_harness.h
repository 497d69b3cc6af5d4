/* A simulator started as infergate-sim's main does (flags, engine, reactor)
 * on a loopback port, its loop on a thread of the test, stopped by SIGTERM
 * as a service manager stops it; and raw HTTP requests to it. Shared by
 * tests/unit/sim/test_server.c and test_reactor.c. */
#ifndef IG_SIM_HARNESS_H
#define IG_SIM_HARNESS_H

#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "conf.h"
#include "engine.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "reactor.h"
#include "server.h"
#include "sim.h"

struct harness {
	struct sim_conf conf;
	struct sim sim;
	pthread_t loop;
	int port;
	int rc;
};

static void *harness_loop(void *arg)
{
	struct harness *h = arg;
	h->rc = sim_reactor_run(&h->sim);
	return NULL;
}

/* Starts a simulator with the flags given (NULL-terminated) after
 * --listen 127.0.0.1:0. */
static void harness_start(struct harness *h, ...)
{
	char *argv[40] = {"infergate-sim", "--listen", "127.0.0.1:0", "--log-level", "error"};
	int argc = 5;
	va_list ap;
	va_start(ap, h);
	for (char *a; (a = va_arg(ap, char *)) != NULL;)
		argv[argc++] = a;
	va_end(ap);
	char *err = NULL;
	memset(h, 0, sizeof(*h));
	ck_assert_msg(sim_conf_from_args(&h->conf, argc, argv, &err) == 0, "%s", err);
	ig_log_set_level(IG_LOG_ERROR);
	h->sim.conf = &h->conf;
	h->sim.epfd = h->sim.signal_fd = -1;
	sim_server_init(&h->sim);
	ck_assert_int_eq(sim_engine_init(&h->sim.eng, &h->conf), 0);
	ck_assert_int_eq(sim_reactor_init(&h->sim), 0); /* blocks SIGTERM: the loop's thread inherits it */
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->sim.mhd, MHD_DAEMON_INFO_BIND_PORT);
	ck_assert_ptr_nonnull(di);
	h->port = di->port;
	ck_assert_int_eq(pthread_create(&h->loop, NULL, harness_loop, h), 0);
}

/* SIGTERM, as systemd sends it: the loop ends its work and returns. */
static void harness_stop(struct harness *h)
{
	kill(getpid(), SIGTERM);
	pthread_join(h->loop, NULL);
	sim_reactor_free(&h->sim);
	sim_engine_free(&h->sim.eng);
	free(h->sim.stored);
	sim_conf_free(&h->conf);
}

static int harness_connect(const struct harness *h)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)h->port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct timeval tv = {60, 0}; /* a guard against a hang, not a limit on speed */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	ck_assert_int_eq(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	return fd;
}

/* Sends one request (extra: more header lines, each ending in \r\n). */
static int harness_send(const struct harness *h, const char *method, const char *path, const char *extra,
			const char *body)
{
	char req[8192];
	int n = snprintf(req, sizeof(req),
			 "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\n%s\r\n%s",
			 method, path, body ? strlen(body) : 0, extra ? extra : "", body ? body : "");
	int fd = harness_connect(h);
	ck_assert_int_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
	return fd;
}

struct reply {
	unsigned status;
	char head[2048];
	char *body; /* malloc'd, the transfer's chunks joined */
};

/* Reads the answer to its end (the connection closes). */
static struct reply harness_read(int fd)
{
	struct reply r;
	memset(&r, 0, sizeof(r));
	struct ig_buf in;
	ig_buf_init(&in);
	char chunk[4096];
	ssize_t got;
	while ((got = recv(fd, chunk, sizeof(chunk), 0)) > 0)
		ig_buf_append(&in, chunk, (size_t)got);
	close(fd);
	ig_buf_append(&in, "", 1);
	const char *all = ig_buf_head(&in);
	ck_assert_msg(sscanf(all, "HTTP/1.1 %u", &r.status) == 1, "no status line: '%s'", all);
	const char *end = strstr(all, "\r\n\r\n");
	ck_assert_ptr_nonnull(end);
	snprintf(r.head, sizeof(r.head), "%.*s\r\n", (int)(end - all), all);
	const char *p = end + 4;
	if (strcasestr(r.head, "\r\nTransfer-Encoding: chunked\r\n")) { /* the chunks joined */
		struct ig_buf b;
		ig_buf_init(&b);
		unsigned long n;
		while (sscanf(p, "%lx", &n) == 1 && n > 0) {
			p = strstr(p, "\r\n") + 2;
			ig_buf_append(&b, p, n);
			p += n + 2;
		}
		ig_buf_append(&b, "", 1);
		r.body = strdup(ig_buf_head(&b));
		ig_buf_free(&b);
	} else {
		r.body = strdup(p);
	}
	ig_buf_free(&in);
	return r;
}

static struct reply harness_ask(const struct harness *h, const char *method, const char *path, const char *extra,
				const char *body)
{
	return harness_read(harness_send(h, method, path, extra, body));
}

#endif
