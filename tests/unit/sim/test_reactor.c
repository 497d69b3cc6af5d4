/* Unit tests for infergate-sim's loop (src/sim/reactor.c): one thread
 * serves a slow stream and other requests at once (a delayed health probe
 * waits on the loop's timer, not the thread); SIGTERM, as a service manager
 * sends it, ends the loop with a stream in flight: the client's stream
 * ends, the loop returns 0, nothing hangs. */
#include "config.h"
#include <jansson.h>
#include <time.h>

#include "sim_harness.h"
#include "../check_main.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

START_TEST(one_thread_serves_a_slow_probe_and_others_meanwhile)
{
	struct harness h;
	harness_start(&h, "--health-delay-ms", "700", NULL);
	double t0 = now_s();
	int probe = harness_send(&h, "GET", "/health", NULL, NULL);
	/* while the probe waits, a listing is answered at once */
	struct reply r = harness_ask(&h, "GET", "/v1/models", NULL, NULL);
	ck_assert_uint_eq(r.status, 200);
	ck_assert(now_s() - t0 < 0.6);
	free(r.body);
	r = harness_read(probe);
	ck_assert_uint_eq(r.status, 200);
	ck_assert(now_s() - t0 >= 0.69);
	free(r.body);
	harness_stop(&h);
	ck_assert_int_eq(h.rc, 0);
}
END_TEST

START_TEST(sigterm_ends_the_loop_with_a_stream_in_flight)
{
	struct harness h;
	harness_start(&h, "--tokens-per-second", "5", "--ttft-ms", "0", NULL);
	/* 200 tokens at 5 a second: 40 s if nothing stopped it */
	int fd = harness_send(&h, "POST", "/v1/chat/completions", NULL,
			      "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
			      " \"max_tokens\": 200, \"stream\": true}");
	char first[512];
	ck_assert_int_gt(recv(fd, first, sizeof(first) - 1, 0), 0); /* it runs */
	double t0 = now_s();
	kill(getpid(), SIGTERM);
	pthread_join(h.loop, NULL);
	ck_assert_int_eq(h.rc, 0);
	ck_assert(h.sim.stopping);
	/* the client's stream ends: the connection closes, long before 40 s */
	char buf[4096];
	ssize_t n;
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
		;
	ck_assert_int_eq(n, 0);
	close(fd);
	ck_assert(now_s() - t0 < 10);
	sim_reactor_free(&h.sim);
	ck_assert_int_eq(h.sim.epfd, -1);
	sim_engine_free(&h.sim.eng);
	free(h.sim.stored);
	sim_conf_free(&h.conf);
}
END_TEST

IG_CHECK_MAIN("sim_reactor", one_thread_serves_a_slow_probe_and_others_meanwhile,
	      sigterm_ends_the_loop_with_a_stream_in_flight)
