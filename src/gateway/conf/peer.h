/* Who a client is: a connection's socket address, the client believed for
 * each of its requests (the last X-Forwarded-For entry not in
 * trusted_proxies, read only when the socket's peer is one of them: nginx's
 * set_real_ip_from with real_ip_recursive on), the CIDR lists that say so,
 * and the count of open connections per client address that
 * max_connections_per_ip caps. Addresses and arithmetic only: the socket
 * side (counting at accept, refusing) is server.c's. */
#ifndef IG_PEER_H
#define IG_PEER_H

#include <microhttpd.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An IP address; an IPv4-mapped IPv6 one (a dual-stack listener's IPv4
 * client) is kept as the IPv4 address it is. */
struct ig_addr {
	int family;              /* AF_INET or AF_INET6; 0: none (a Unix socket) */
	unsigned char b[16];     /* network order; IPv4 in the first 4 bytes, the rest 0 */
};

/* A network: the address with its host bits cleared, and the prefix length. */
struct ig_cidr {
	struct ig_addr net;
	int bits;
};

struct ig_cidrs {
	struct ig_cidr *v;
	size_t n;
};

/* The address of sa (AF_INET, AF_INET6; anything else gives family 0). */
void ig_addr_from_sockaddr(struct ig_addr *a, const struct sockaddr *sa);
/* Parses one address of n bytes: IPv4, IPv6, [IPv6], and either with a
 * :port after it (as some proxies write X-Forwarded-For). Returns 0, or -1. */
int ig_addr_parse(struct ig_addr *a, const char *s, size_t n);
/* As text ("" for family 0). out holds INET6_ADDRSTRLEN bytes at least. */
void ig_addr_text(const struct ig_addr *a, char *out, size_t n);
bool ig_addr_equal(const struct ig_addr *a, const struct ig_addr *b);

/* Parses "ADDR[/BITS], ..." (commas and spaces between entries; IPv4 and
 * IPv6; BITS up to 32 or 128, the whole address without it; host bits past
 * BITS are dropped, as nginx does). Returns 0, or -1 with *err (malloc'd)
 * naming `what` and the bad entry. */
int ig_cidrs_parse(struct ig_cidrs *c, const char *what, const char *list, char **err);
void ig_cidrs_free(struct ig_cidrs *c);
bool ig_cidrs_match(const struct ig_cidrs *c, const struct ig_addr *a);

/* The client a request is believed to come from: the socket's peer,
 * unless that is trusted; then X-Forwarded-For (xff: its values joined
 * with commas in the order received, or NULL) is read from its right end,
 * each entry taken while the one after it is trusted. It stops at the
 * first untrusted address, and at an entry that is no address (the
 * trusted one before it is believed). */
void ig_peer_believe(const struct ig_cidrs *trusted, const struct ig_addr *sock, const char *xff,
		     struct ig_addr *out);
/* X-Forwarded-For's values, for MHD_get_connection_values (cls: a
 * struct ig_buf): each appended, joined with ", " in the order received:
 * the chain ig_peer_believe reads and the gateway passes upstream. Other
 * headers are passed over. */
enum MHD_Result ig_peer_collect_xff(void *cls, enum MHD_ValueKind kind, const char *key, const char *value);

/* What the gateway knows of one client connection beside libmicrohttpd:
 * its socket context (MHD_CONNECTION_INFO_SOCKET_CONTEXT) points here, so
 * whoever holds the MHD connection can read it. server.c fills it: the
 * socket's address at accept, the believed client at each request's
 * headers. */
struct ig_peer {
	struct ig_addr sock;
	struct ig_addr client;               /* the believed client of its request now */
	char sock_text[INET6_ADDRSTRLEN];
	char client_text[INET6_ADDRSTRLEN];
};

/* conn's, or NULL (a connection the server has not seen start). */
const struct ig_peer *ig_peer_of(struct MHD_Connection *conn);
/* The believed client address of conn's request as text; "" when unknown
 * (the gateway's own Unix socket). */
const char *ig_peer_client(struct MHD_Connection *conn);
/* The socket's peer address as text; "" when unknown. */
const char *ig_peer_sock(struct MHD_Connection *conn);

/* Open connections (and requests through trusted proxies) by client
 * address, for max_connections_per_ip: a hash table keyed with a secret
 * (addresses behind a trusted proxy are the client's to choose). Under the
 * gateway's lock. */
struct ig_peer_count;
struct ig_peer_counts {
	struct ig_peer_count **b;    /* chained buckets, a power of two of them */
	size_t nb, n;
	uint64_t seed;
};

/* Adds delta to a's count and returns the new count (an entry that falls
 * to 0 is removed); -1 when out of memory (nothing counted). */
long ig_peer_counts_add(struct ig_peer_counts *t, const struct ig_addr *a, long delta);
/* a's count now (0: none). */
long ig_peer_counts_get(const struct ig_peer_counts *t, const struct ig_addr *a);
void ig_peer_counts_free(struct ig_peer_counts *t);

#endif
