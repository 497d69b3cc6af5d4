/* Unit tests for who a client is (src/gateway/conf/peer.c): addresses as
 * X-Forwarded-For writes them, trusted_proxies' networks and their
 * problems named, the client believed from the header (nginx's realip
 * with real_ip_recursive), and the per-address counts of
 * max_connections_per_ip. */
#include "config.h"
#include <arpa/inet.h>
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "conf/peer.h"
#include "../../check_main.h"

static struct ig_addr addr(const char *s)
{
	struct ig_addr a;
	ck_assert_msg(ig_addr_parse(&a, s, strlen(s)) == 0, "'%s' did not parse", s);
	return a;
}

static const char *text(const struct ig_addr *a)
{
	static char out[INET6_ADDRSTRLEN];
	ig_addr_text(a, out, sizeof(out));
	return out;
}

START_TEST(addresses_as_forwarded_for_writes_them)
{
	const char *good[][2] = {
		{"192.0.2.1", "192.0.2.1"},     {"192.0.2.1:8080", "192.0.2.1"}, {"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"}, {"[2001:db8::1]:443", "2001:db8::1"}, {"::1", "::1"},
		{"::ffff:192.0.2.7", "192.0.2.7"}, /* a dual-stack listener's IPv4 client */
	};
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct ig_addr a = addr(good[i][0]);
		ck_assert_str_eq(text(&a), good[i][1]);
	}
	ck_assert_int_eq(addr("::ffff:192.0.2.7").family, AF_INET);
	const char *bad[] = {"", "unknown", "192.0.2.300", "192.0.2.1:", "192.0.2.1:x", "[2001:db8::1",
			     "[2001:db8::1]x", "[2001:db8::1]:", "2001:db8::g", "_hidden", "1.2.3.4 5"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ig_addr a;
		ck_assert_msg(ig_addr_parse(&a, bad[i], strlen(bad[i])) < 0, "'%s' parsed", bad[i]);
	}
	/* from a socket address */
	struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
	inet_pton(AF_INET6, "::ffff:10.1.2.3", &s6.sin6_addr);
	struct ig_addr a;
	ig_addr_from_sockaddr(&a, (struct sockaddr *)&s6);
	ck_assert_str_eq(text(&a), "10.1.2.3");
	ck_assert(ig_addr_equal(&a, &(struct ig_addr){0}) == false);
	struct sockaddr un = {.sa_family = AF_UNIX};
	ig_addr_from_sockaddr(&a, &un);
	ck_assert_int_eq(a.family, 0);
	ck_assert_str_eq(text(&a), "");
}
END_TEST

START_TEST(networks_and_their_problems)
{
	struct ig_cidrs c = {NULL, 0};
	char *err = NULL;
	ck_assert_int_eq(ig_cidrs_parse(&c, "trusted_proxies", "10.0.0.0/8, 192.168.1.7/24,fd00::/8 ::1 "
					"::ffff:198.51.100.0/120", &err), 0);
	ck_assert_uint_eq(c.n, 5);
	ck_assert_int_eq(c.v[1].bits, 24);
	ck_assert_str_eq(text(&c.v[1].net), "192.168.1.0"); /* the host bits dropped, as nginx does */
	ck_assert_int_eq(c.v[3].bits, 128);
	ck_assert_int_eq(c.v[4].net.family, AF_INET);
	ck_assert_int_eq(c.v[4].bits, 24);
	const char *in[] = {"10.255.0.1", "192.168.1.200", "fd12::5", "::1", "198.51.100.9", "::ffff:10.0.0.1"};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		struct ig_addr a = addr(in[i]);
		ck_assert_msg(ig_cidrs_match(&c, &a), "%s not matched", in[i]);
	}
	const char *out[] = {"11.0.0.1", "192.168.2.1", "fe00::1", "::2", "198.51.101.1"};
	for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++) {
		struct ig_addr a = addr(out[i]);
		ck_assert_msg(!ig_cidrs_match(&c, &a), "%s matched", out[i]);
	}
	/* /0 takes its whole family */
	ck_assert_int_eq(ig_cidrs_parse(&c, "trusted_proxies", "0.0.0.0/0", &err), 0);
	struct ig_addr a = addr("203.0.113.9"), b = addr("2001:db8::9");
	ck_assert(ig_cidrs_match(&c, &a) && !ig_cidrs_match(&c, &b));
	ck_assert_int_eq(ig_cidrs_parse(&c, "trusted_proxies", "", &err), 0);
	ck_assert_uint_eq(c.n, 0);
	ck_assert(!ig_cidrs_match(&c, &a));

	const char *bad[] = {"10.0.0.0/33", "10.0.0.0/", "10.0.0.0/8/8", "10.0.0.0/-1", "10.0.0.0/0x8", "fd00::/129",
			     "10.0.0.300", "127.0.0.1:80", "[::1]", "proxy.example", "::ffff:10.0.0.0/95", "10.0.0.0/1234"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(ig_cidrs_parse(&c, "trusted_proxies", bad[i], &err), -1);
		char want[80];
		snprintf(want, sizeof(want), "trusted_proxies: '%s' is not", bad[i]);
		ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s: %s", bad[i], err);
		free(err);
		err = NULL;
	}
	/* a bad entry leaves the list as it was */
	ck_assert_int_eq(ig_cidrs_parse(&c, "k", "10.0.0.0/8", &err), 0);
	ck_assert_int_eq(ig_cidrs_parse(&c, "k", "10.0.0.0/8, x", &err), -1);
	ck_assert_str_eq(err, "k: 'x' is not an IP address or network (ADDR or ADDR/BITS, IPv4 or IPv6, e.g. "
			 "10.0.0.0/8 or fd00::/8)");
	free(err);
	ck_assert_uint_eq(c.n, 1);
	ig_cidrs_free(&c);
	ig_cidrs_free(&c);
}
END_TEST

/* The client believed for a request from sock with X-Forwarded-For xff. */
static const char *believed(const char *trusted, const char *sock, const char *xff)
{
	struct ig_cidrs c = {NULL, 0};
	char *err = NULL;
	ck_assert_int_eq(ig_cidrs_parse(&c, "t", trusted, &err), 0);
	struct ig_addr s = addr(sock), out;
	ig_peer_believe(&c, &s, xff, &out);
	ig_cidrs_free(&c);
	return text(&out);
}

START_TEST(the_client_believed)
{
	/* an untrusted peer is the client, whatever it writes */
	ck_assert_str_eq(believed("", "127.0.0.1", "203.0.113.7"), "127.0.0.1");
	ck_assert_str_eq(believed("10.0.0.0/8", "127.0.0.1", "203.0.113.7"), "127.0.0.1");
	/* a trusted one: the last address it names */
	ck_assert_str_eq(believed("127.0.0.1", "127.0.0.1", "203.0.113.7"), "203.0.113.7");
	ck_assert_str_eq(believed("127.0.0.1", "127.0.0.1", NULL), "127.0.0.1");
	ck_assert_str_eq(believed("127.0.0.1", "127.0.0.1", ""), "127.0.0.1");
	/* recursive: trusted hops are walked past, the first untrusted one from
	 * the right is the client; what a client wrote before it is not read */
	ck_assert_str_eq(believed("127.0.0.1, 10.0.0.0/8", "127.0.0.1", "1.1.1.1, 198.51.100.9, 10.1.2.3"),
			 "198.51.100.9");
	ck_assert_str_eq(believed("127.0.0.1, 10.0.0.0/8", "127.0.0.1", "  10.9.9.9 ,10.1.2.3,  "), "10.9.9.9");
	ck_assert_str_eq(believed("127.0.0.1", "127.0.0.1", "[2001:db8::7]:1234"), "2001:db8::7");
	ck_assert_str_eq(believed("127.0.0.1", "127.0.0.1", "198.51.100.9:5555, 203.0.113.7"), "203.0.113.7");
	/* an entry that is no address: the trusted hop before it is believed */
	ck_assert_str_eq(believed("127.0.0.1", "127.0.0.1", "203.0.113.7, unknown"), "127.0.0.1");
	ck_assert_str_eq(believed("127.0.0.1, 10.0.0.0/8", "127.0.0.1", "203.0.113.7, garbage, 10.1.2.3"),
			 "10.1.2.3");
	ck_assert_str_eq(believed("::1", "::1", "2001:db8::1"), "2001:db8::1");
}
END_TEST

START_TEST(counts_by_address)
{
	struct ig_peer_counts t = {NULL, 0, 0, 0};
	struct ig_addr a = addr("192.0.2.1"), b = addr("2001:db8::1"), mapped = addr("::ffff:192.0.2.1");
	ck_assert_int_eq(ig_peer_counts_get(&t, &a), 0);
	ck_assert_int_eq(ig_peer_counts_add(&t, &a, 1), 1);
	ck_assert_int_eq(ig_peer_counts_add(&t, &mapped, 1), 2); /* the same client */
	ck_assert_int_eq(ig_peer_counts_add(&t, &b, 1), 1);
	ck_assert_int_eq(ig_peer_counts_get(&t, &a), 2);
	ck_assert_int_eq(ig_peer_counts_add(&t, &a, -1), 1);
	ck_assert_int_eq(ig_peer_counts_add(&t, &a, -1), 0);
	ck_assert_uint_eq(t.n, 1); /* at 0 it is gone */
	ck_assert_int_eq(ig_peer_counts_add(&t, &a, -1), 0);
	ck_assert_uint_eq(t.n, 1);
	/* many addresses: the table grows and each keeps its own count */
	for (int i = 0; i < 5000; i++) {
		struct ig_addr x = {.family = AF_INET6};
		memcpy(x.b, &i, sizeof(i));
		ck_assert_int_eq(ig_peer_counts_add(&t, &x, 1 + i % 3), 1 + i % 3);
	}
	ck_assert_uint_eq(t.n, 5001);
	ck_assert_uint_ge(t.nb, 4096);
	for (int i = 0; i < 5000; i++) {
		struct ig_addr x = {.family = AF_INET6};
		memcpy(x.b, &i, sizeof(i));
		ck_assert_int_eq(ig_peer_counts_get(&t, &x), 1 + i % 3);
		ck_assert_int_eq(ig_peer_counts_add(&t, &x, -(1 + i % 3)), 0);
	}
	ck_assert_uint_eq(t.n, 1);
	ck_assert_int_eq(ig_peer_counts_get(&t, &b), 1);
	ig_peer_counts_free(&t);
	ck_assert_uint_eq(t.n, 0);
	ig_peer_counts_free(&t);
}
END_TEST

IG_CHECK_MAIN("peer", addresses_as_forwarded_for_writes_them, networks_and_their_problems, the_client_believed,
	      counts_by_address)
