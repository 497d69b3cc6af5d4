/* Who a client is (peer.h): addresses, trusted_proxies' CIDRs, the client
 * believed from X-Forwarded-For, and the per-address counts of
 * max_connections_per_ip. Pure: no socket is read here.
 * Not here: accepting, refusing, or reading the headers (server.c). */
#include "config.h"
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/peer.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"

static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* An IPv6 address that is an IPv4 one (::ffff:a.b.c.d) becomes that. */
static void set_v6(struct ig_addr *a, const unsigned char *b16)
{
	memset(a, 0, sizeof(*a));
	if (memcmp(b16, v4mapped, sizeof(v4mapped)) == 0) {
		a->family = AF_INET;
		memcpy(a->b, b16 + 12, 4);
	} else {
		a->family = AF_INET6;
		memcpy(a->b, b16, 16);
	}
}

void ig_addr_from_sockaddr(struct ig_addr *a, const struct sockaddr *sa)
{
	memset(a, 0, sizeof(*a));
	if (sa && sa->sa_family == AF_INET) {
		a->family = AF_INET;
		memcpy(a->b, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, 4);
	} else if (sa && sa->sa_family == AF_INET6) {
		set_v6(a, (const unsigned char *)&((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr);
	}
}

int ig_addr_parse(struct ig_addr *a, const char *s, size_t n)
{
	char buf[INET6_ADDRSTRLEN + 8];
	unsigned char b[16];
	const char *end = s + n;
	if (n == 0 || n >= sizeof(buf))
		return -1;
	if (*s == '[') { /* [v6] or [v6]:port */
		const char *close = memchr(s, ']', n);
		if (!close || (close + 1 != end && (close[1] != ':' || close + 2 == end)))
			return -1;
		for (const char *p = close + 2; p < end; p++)
			if (*p < '0' || *p > '9')
				return -1;
		s++;
		n = (size_t)(close - s);
	} else {
		/* a.b.c.d:port: one colon only (more is IPv6) */
		const char *colon = memchr(s, ':', n);
		if (colon && !memchr(colon + 1, ':', (size_t)(end - colon - 1)) && memchr(s, '.', (size_t)(colon - s))) {
			if (colon + 1 == end)
				return -1;
			for (const char *p = colon + 1; p < end; p++)
				if (*p < '0' || *p > '9')
					return -1;
			n = (size_t)(colon - s);
		}
	}
	memcpy(buf, s, n);
	buf[n] = '\0';
	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, buf, b) == 1) {
		a->family = AF_INET;
		memcpy(a->b, b, 4);
		return 0;
	}
	if (inet_pton(AF_INET6, buf, b) == 1) {
		set_v6(a, b);
		return 0;
	}
	return -1;
}

void ig_addr_text(const struct ig_addr *a, char *out, size_t n)
{
	if (n)
		out[0] = '\0';
	if (a->family == AF_INET || a->family == AF_INET6)
		inet_ntop(a->family, a->b, out, (socklen_t)n);
}

bool ig_addr_equal(const struct ig_addr *a, const struct ig_addr *b)
{
	return a->family == b->family && memcmp(a->b, b->b, sizeof(a->b)) == 0;
}

/* Whether a is in the network of c. */
static bool in_net(const struct ig_cidr *c, const struct ig_addr *a)
{
	if (a->family != c->net.family)
		return false;
	int full = c->bits / 8, rest = c->bits % 8;
	if (memcmp(a->b, c->net.b, (size_t)full) != 0)
		return false;
	return !rest || ((a->b[full] ^ c->net.b[full]) & (0xff << (8 - rest))) == 0;
}

/* One entry "ADDR[/BITS]" of n bytes. Returns 0, or -1. */
static int parse_cidr(struct ig_cidr *c, const char *s, size_t n)
{
	const char *slash = memchr(s, '/', n);
	size_t alen = slash ? (size_t)(slash - s) : n;
	if (!alen || *s == '[' || memchr(s, ']', n))
		return -1;
	/* no port here: "1.2.3.4:80" is not a network */
	const char *colon = memchr(s, ':', alen);
	if (colon && memchr(s, '.', alen) && !memchr(colon + 1, ':', alen - (size_t)(colon - s) - 1))
		return -1;
	if (ig_addr_parse(&c->net, s, alen) < 0)
		return -1;
	bool mapped = c->net.family == AF_INET && memchr(s, ':', alen);
	int max = c->net.family == AF_INET && !mapped ? 32 : 128;
	c->bits = c->net.family == AF_INET ? 32 : 128;
	if (slash) {
		const char *p = slash + 1, *end = s + n;
		if (p == end || end - p > 3)
			return -1;
		int bits = 0;
		for (; p < end; p++) {
			if (*p < '0' || *p > '9')
				return -1;
			bits = bits * 10 + (*p - '0');
		}
		if (bits > max)
			return -1;
		/* an IPv4-mapped network names IPv4 addresses */
		if (mapped) {
			if (bits < 96)
				return -1;
			bits -= 96;
		}
		c->bits = bits;
	}
	for (int i = 0; i < 16; i++) { /* the host bits go */
		int keep = c->bits - 8 * i;
		c->net.b[i] &= keep >= 8 ? 0xff : keep <= 0 ? 0 : (unsigned char)(0xff << (8 - keep));
	}
	return 0;
}

int ig_cidrs_parse(struct ig_cidrs *c, const char *what, const char *list, char **err)
{
	struct ig_cidrs out = {NULL, 0};
	size_t cap = 0;
	for (const char *p = list ? list : ""; *p;) {
		p += strspn(p, ", \t");
		size_t n = strcspn(p, ", \t");
		if (!n)
			break;
		struct ig_cidr one;
		if (parse_cidr(&one, p, n) < 0) {
			*err = ig_strdupf("%s: '%.*s' is not an IP address or network (ADDR or ADDR/BITS, IPv4 or IPv6, "
					  "e.g. 10.0.0.0/8 or fd00::/8)", what, (int)n, p);
			free(out.v);
			return -1;
		}
		struct ig_cidr *v = ig_grow(out.v, &cap, out.n, sizeof(*v), 4);
		if (!v) {
			*err = ig_strdupf("%s: out of memory", what);
			free(out.v);
			return -1;
		}
		out.v = v;
		out.v[out.n++] = one;
		p += n;
	}
	ig_cidrs_free(c);
	*c = out;
	return 0;
}

void ig_cidrs_free(struct ig_cidrs *c)
{
	free(c->v);
	c->v = NULL;
	c->n = 0;
}

bool ig_cidrs_match(const struct ig_cidrs *c, const struct ig_addr *a)
{
	for (size_t i = 0; c && i < c->n; i++)
		if (in_net(&c->v[i], a))
			return true;
	return false;
}

void ig_peer_believe(const struct ig_cidrs *trusted, const struct ig_addr *sock, const char *xff,
		     struct ig_addr *out)
{
	*out = *sock;
	if (!xff)
		return;
	/* from the right: the entry a trusted hop added is its client */
	const char *end = xff + strlen(xff);
	while (end > xff && ig_cidrs_match(trusted, out)) {
		while (end > xff && (end[-1] == ',' || end[-1] == ' ' || end[-1] == '\t'))
			end--;
		const char *start = end;
		while (start > xff && start[-1] != ',' && start[-1] != ' ' && start[-1] != '\t')
			start--;
		struct ig_addr a;
		if (start == end || ig_addr_parse(&a, start, (size_t)(end - start)) < 0)
			return;
		*out = a;
		end = start;
	}
}

enum MHD_Result ig_peer_collect_xff(void *cls, enum MHD_ValueKind kind IG_UNUSED, const char *key, const char *value)
{
	struct ig_buf *b = cls;
	if (key && value && strcasecmp(key, "X-Forwarded-For") == 0)
		ig_buf_printf(b, "%s%s", b->len ? ", " : "", value);
	return MHD_YES;
}

const struct ig_peer *ig_peer_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		conn ? MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT) : NULL;
	return ci ? ci->socket_context : NULL;
}

const char *ig_peer_client(struct MHD_Connection *conn)
{
	const struct ig_peer *p = ig_peer_of(conn);
	return p ? p->client_text : "";
}

const char *ig_peer_sock(struct MHD_Connection *conn)
{
	const struct ig_peer *p = ig_peer_of(conn);
	return p ? p->sock_text : "";
}

struct ig_peer_count {
	struct ig_peer_count *next;
	struct ig_addr a;
	long n;
};

static size_t bucket(const struct ig_peer_counts *t, const struct ig_addr *a)
{
	uint64_t h = ig_hash64(a->b, a->family == AF_INET ? 4 : 16, t->seed ^ (uint64_t)a->family);
	return (size_t)(h ^ (h >> 29)) & (t->nb - 1);
}

static struct ig_peer_count **find(const struct ig_peer_counts *t, const struct ig_addr *a)
{
	struct ig_peer_count **pp = &t->b[bucket(t, a)];
	while (*pp && !ig_addr_equal(&(*pp)->a, a))
		pp = &(*pp)->next;
	return pp;
}

/* Twice the buckets once there are more entries than buckets. */
static void grow(struct ig_peer_counts *t)
{
	size_t nb = t->nb ? 2 * t->nb : 64;
	struct ig_peer_count **b = calloc(nb, sizeof(*b));
	if (!b)
		return; /* longer chains, no harm */
	struct ig_peer_counts nt = {b, nb, t->n, t->seed};
	for (size_t i = 0; i < t->nb; i++) {
		for (struct ig_peer_count *e = t->b[i], *next; e; e = next) {
			next = e->next;
			size_t k = bucket(&nt, &e->a);
			e->next = b[k];
			b[k] = e;
		}
	}
	free(t->b);
	*t = nt;
}

long ig_peer_counts_add(struct ig_peer_counts *t, const struct ig_addr *a, long delta)
{
	if (!t->seed)
		t->seed = ig_secret64() | 1;
	if (t->n >= t->nb)
		grow(t);
	if (!t->nb)
		return -1;
	struct ig_peer_count **pp = find(t, a), *e = *pp;
	if (!e) {
		if (delta <= 0)
			return 0;
		if (!(e = calloc(1, sizeof(*e))))
			return -1;
		e->a = *a;
		*pp = e;
		t->n++;
	}
	e->n += delta;
	long n = e->n;
	if (n <= 0) {
		*pp = e->next;
		free(e);
		t->n--;
		n = 0;
	}
	return n;
}

long ig_peer_counts_get(const struct ig_peer_counts *t, const struct ig_addr *a)
{
	if (!t->nb)
		return 0;
	struct ig_peer_count *e = *find(t, a);
	return e ? e->n : 0;
}

void ig_peer_counts_free(struct ig_peer_counts *t)
{
	for (size_t i = 0; i < t->nb; i++) {
		for (struct ig_peer_count *e = t->b[i], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	}
	free(t->b);
	*t = (struct ig_peer_counts){NULL, 0, 0, 0};
}
