/* Unit tests for src/sim/pd.c's pure parts: the transfer's time (KV bytes
 * over the bandwidth, in simulated time) and the listener's answer read
 * back by a decode. The hand-overs themselves run between two processes:
 * tests/integration/test_sim_pd.py. */
#include "config.h"
#include <check.h>
#include <string.h>

#include "pd.h"
#include "../check_main.h"

START_TEST(a_transfer_takes_bytes_over_bandwidth_in_simulated_time)
{
	/* 1,000 tokens of an 8B Llama (128 KiB each) at 25 GB/s: 5.24 ms */
	ck_assert_uint_eq(sim_pd_transfer_us(1000ull * 131072, 25, 1), 5243);
	ck_assert_uint_eq(sim_pd_transfer_us(1000ull * 131072, 25, 10), 525); /* --time-scale 10 */
	ck_assert_uint_eq(sim_pd_transfer_us(0, 25, 1), 1);                   /* never nothing */
	ck_assert_uint_eq(sim_pd_transfer_us(1000000000ull, 1, 1), 1000000);
}
END_TEST

START_TEST(the_listeners_answer_is_read_back)
{
	const char *a = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"bytes\":5}";
	unsigned st;
	const char *body;
	size_t n;
	ck_assert_int_eq(sim_pd_parse_reply(a, strlen(a), &st, &body, &n), 0);
	ck_assert_uint_eq(st, 200);
	ck_assert_uint_eq(n, 11);
	ck_assert_int_eq(memcmp(body, "{\"bytes\":5}", n), 0);
	const char *b = "HTTP/1.1 404 Not Found\r\n\r\n";
	ck_assert_int_eq(sim_pd_parse_reply(b, strlen(b), &st, &body, &n), 0);
	ck_assert_uint_eq(st, 404);
	ck_assert_uint_eq(n, 0);
	/* cut short, or not HTTP: no answer */
	ck_assert_int_eq(sim_pd_parse_reply(a, 30, &st, &body, &n), -1);
	ck_assert_int_eq(sim_pd_parse_reply("SSH-2.0-x\r\n\r\n", 13, &st, &body, &n), -1);
	ck_assert_int_eq(sim_pd_parse_reply("HTTP/1.0 2x0 OK\r\n\r\n", 19, &st, &body, &n), -1);
}
END_TEST

IG_CHECK_MAIN("sim pd", a_transfer_takes_bytes_over_bandwidth_in_simulated_time, the_listeners_answer_is_read_back)
