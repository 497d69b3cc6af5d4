/* What a Redis link is set up with (redis_link.c): its URL and, for
 * rediss://, its TLS context. Set up once, at start or at reload; the
 * connection (redis.h) takes them as they are. */
#ifndef IG_REDIS_LINK_H
#define IG_REDIS_LINK_H

#include <stdbool.h>
#include <stddef.h>

/* redis[s]://[[USER]:PASSWORD@]HOST[:PORT][/DB] */
struct ig_redis_url {
	char *host;      /* as written */
	int port;        /* 6379 by default */
	long db;         /* 0 by default */
	char *password;  /* NULL: none; "USER\nPASSWORD" with an ACL user */
	bool tls;        /* rediss:// */
};

/* Parses url into *u. Returns 0, or -1 with *err (malloc'd) saying why. */
int ig_redis_url_parse(const char *url, struct ig_redis_url *u, char **err);
void ig_redis_url_free(struct ig_redis_url *u);
/* The URL without its password, for logs and status (malloc'd). */
char *ig_redis_url_shown(const struct ig_redis_url *u);

/* TLS for rediss://: the server's certificate is verified against ca_file
 * (NULL or "": the system's store) and must name server_name (NULL or "":
 * the URL's host; a DNS name or an IP address); cert_file and key_file
 * (both or neither) are shown when Redis asks for a client certificate
 * (tls-auth-clients). */
struct ig_redis_tls_files {
	const char *ca_file, *cert_file, *key_file, *server_name;
};
struct ig_redis_tls;
/* The TLS settings of connections to `host`, files read now. Returns
 * NULL with *err (malloc'd) naming the file and the problem. */
struct ig_redis_tls *ig_redis_tls_new(const struct ig_redis_tls_files *f, const char *host, char **err);
void ig_redis_tls_free(struct ig_redis_tls *t);
/* A client session on connected socket fd, set to check the server's
 * name (or address) and to start the handshake. Returns NULL with why
 * (size bytes) saying what failed. */
typedef struct ssl_st SSL;
SSL *ig_redis_tls_session(const struct ig_redis_tls *t, int fd, char *why, size_t size);

#endif
