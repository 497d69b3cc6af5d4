/* Unit tests for the gateway's side of systemd's readiness protocol
 * (src/gateway/core/notify.c): what the service manager receives on
 * $NOTIFY_SOCKET: READY=1, RELOADING=1 with MONOTONIC_USEC= (systemd 253's
 * Type=notify-reload) and STOPPING=1, each with a one-line STATUS=; nothing
 * without $NOTIFY_SOCKET or without libsystemd. The manager is a datagram
 * socket of the test's own. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/notify.h"
#include "../../check_main.h"

static char path[108];

static int manager(void)
{
	snprintf(path, sizeof(path), "/tmp/ig-test-notify-%d.sock", (int)getpid());
	unlink(path);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	struct timeval tv = {0, 200000}; /* what was not sent is not waited for long */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setenv("NOTIFY_SOCKET", path, 1);
	return fd;
}

/* The next message the manager got ("" none). */
static const char *received(int fd)
{
	static char buf[1024];
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	return buf;
}

START_TEST(the_manager_hears_each_state)
{
	int fd = manager();
	ig_notify_ready("serving on %s,\n%d reactors", "127.0.0.1:8080", 2);
#ifdef HAVE_SYSTEMD
	ck_assert_str_eq(received(fd), "READY=1\nSTATUS=serving on 127.0.0.1:8080, 2 reactors");

	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	unsigned long long before = (unsigned long long)ts.tv_sec * 1000000ull + (unsigned long long)ts.tv_nsec / 1000;
	ig_notify_reloading("reloading %s", "/etc/infergate/config.json");
	const char *m = received(fd);
	unsigned long long usec = 0;
	char status[256] = "";
	ck_assert_msg(sscanf(m, "RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=%255[^\n]", &usec, status) == 2, "%s", m);
	ck_assert_str_eq(status, "reloading /etc/infergate/config.json");
	ck_assert_uint_ge(usec, before); /* systemd compares it with its own monotonic clock */
	ck_assert_uint_lt(usec, before + 5000000ull);

	ig_notify_stopping("stopping: %d requests in flight", 3);
	ck_assert_str_eq(received(fd), "STOPPING=1\nSTATUS=stopping: 3 requests in flight");
#else
	ck_assert_str_eq(received(fd), ""); /* built without libsystemd: nothing is sent */
#endif

	/* not started by systemd: nothing is sent, nothing fails */
	unsetenv("NOTIFY_SOCKET");
	ig_notify_ready("alone");
	ck_assert_str_eq(received(fd), "");
	close(fd);
	unlink(path);
}
END_TEST

IG_CHECK_MAIN("notify", the_manager_hears_each_state)
