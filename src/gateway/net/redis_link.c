/* What a Redis link is set up with, once, at start or at reload: its URL
 * (redis:// or rediss://, user, password, database) and, for rediss://,
 * its TLS context (the CA, a client certificate, the name the server's
 * certificate must carry). Checked whole here, with messages naming the
 * file and what is wrong with it. Not here: the connection itself
 * (redis.c), which takes one session from ig_redis_tls_session per
 * connect. */
#include "config.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "net/redis_link.h"

struct ig_redis_tls {
	SSL_CTX *ctx;
	char *name;   /* what the server's certificate must name */
	bool ip;      /* name is an IP address (no SNI then) */
};

/* ---- the URL ---- */

int ig_redis_url_parse(const char *url, struct ig_redis_url *u, char **err)
{
	char *user = NULL;
	memset(u, 0, sizeof(*u));
	u->port = 6379;
	u->tls = strncmp(url, "rediss://", 9) == 0;
	if (!u->tls && strncmp(url, "redis://", 8) != 0) {
		*err = ig_strdupf("'%s' is not a redis:// URL (redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], or rediss:// "
				  "for TLS)", url);
		return -1;
	}
	const char *p = url + (u->tls ? 9 : 8), *at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (!colon) {
			*err = ig_strdupf("'%s': the part before '@' must be [USER]:PASSWORD", url);
			return -1;
		}
		user = strndup(p, (size_t)(colon - p));
		u->password = strndup(colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	const char *slash = strchr(p, '/'), *colon = NULL;
	size_t hlen = slash ? (size_t)(slash - p) : strlen(p);
	if (hlen && p[0] == '[') { /* [v6]:port */
		const char *close = memchr(p, ']', hlen);
		if (close && close + 1 < p + hlen && close[1] == ':')
			colon = close + 1;
		u->host = close ? strndup(p + 1, (size_t)(close - p - 1)) : NULL;
	} else {
		colon = memchr(p, ':', hlen);
		u->host = strndup(p, colon ? (size_t)(colon - p) : hlen);
	}
	if (!u->host || !*u->host) {
		*err = ig_strdupf("'%s': no host", url);
		goto fail;
	}
	if (colon) {
		char *end;
		errno = 0;
		long port = strtol(colon + 1, &end, 10);
		if (end != p + hlen || end == colon + 1 || errno || port < 1 || port > 65535) {
			*err = ig_strdupf("'%s': the port must be 1..65535", url);
			goto fail;
		}
		u->port = (int)port;
	}
	if (slash && slash[1]) {
		char *end;
		errno = 0;
		u->db = strtol(slash + 1, &end, 10);
		if (*end || errno || u->db < 0 || u->db > 1000000) {
			*err = ig_strdupf("'%s': the database after '/' must be a number", url);
			goto fail;
		}
	}
	if (user && *user) { /* an ACL user (Redis 6+): AUTH USER PASSWORD */
		char *both = ig_strdupf("%s\n%s", user, u->password);
		free(u->password);
		u->password = both;
	}
	free(user);
	return 0;
fail:
	free(user);
	ig_redis_url_free(u);
	return -1;
}

void ig_redis_url_free(struct ig_redis_url *u)
{
	free(u->host);
	free(u->password);
	u->host = u->password = NULL;
}

char *ig_redis_url_shown(const struct ig_redis_url *u)
{
	bool v6 = strchr(u->host, ':') != NULL;
	return ig_strdupf("%s://%s%s%s%s:%d/%ld", u->tls ? "rediss" : "redis", u->password ? "***@" : "", v6 ? "[" : "",
			  u->host, v6 ? "]" : "", u->port, u->db);
}

/* ---- TLS settings ---- */

/* A key that needs a passphrase fails to load rather than asking the
 * terminal for one. */
static int no_passphrase(char *buf IG_UNUSED, int size IG_UNUSED, int rw IG_UNUSED, void *u IG_UNUSED)
{
	return 0;
}

/* OpenSSL's last error, said short (its queue emptied). */
static const char *ssl_reason(void)
{
	unsigned long e = ERR_peek_last_error();
	const char *s = e ? ERR_reason_error_string(e) : NULL;
	ERR_clear_error();
	return s ? s : "unreadable";
}

struct ig_redis_tls *ig_redis_tls_new(const struct ig_redis_tls_files *f, const char *host, char **err)
{
	struct ig_redis_tls *t = calloc(1, sizeof(*t));
	const char *name = f->server_name && *f->server_name ? f->server_name : host;
	bool cert = f->cert_file && *f->cert_file, key = f->key_file && *f->key_file;
	unsigned char bin[sizeof(struct in6_addr)];
	ERR_clear_error();
	if (!t || !(t->name = strdup(name)) || !(t->ctx = SSL_CTX_new(TLS_client_method()))) {
		*err = ig_strdupf("out of memory");
		goto fail;
	}
	t->ip = inet_pton(AF_INET, name, bin) == 1 || inet_pton(AF_INET6, name, bin) == 1;
	SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
	/* write_some() writes what it can and retries from a buffer that may have
	 * moved (grown) meanwhile */
	SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_default_passwd_cb(t->ctx, no_passphrase);
	if (f->ca_file && *f->ca_file) {
		if (SSL_CTX_load_verify_locations(t->ctx, f->ca_file, NULL) != 1) {
			*err = ig_strdupf("the CA file %s: %s", f->ca_file, ssl_reason());
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
		*err = ig_strdupf("the system's CA certificates: %s", ssl_reason());
		goto fail;
	}
	if (cert != key) {
		*err = ig_strdupf("a client certificate needs its key, and a key its certificate");
		goto fail;
	}
	if (cert && SSL_CTX_use_certificate_chain_file(t->ctx, f->cert_file) != 1) {
		*err = ig_strdupf("the client certificate %s: %s", f->cert_file, ssl_reason());
		goto fail;
	}
	if (key && SSL_CTX_use_PrivateKey_file(t->ctx, f->key_file, SSL_FILETYPE_PEM) != 1) {
		*err = ig_strdupf("the client key %s: %s (or it needs a passphrase)", f->key_file, ssl_reason());
		goto fail;
	}
	if (cert && SSL_CTX_check_private_key(t->ctx) != 1) {
		*err = ig_strdupf("the client key %s is not the key of the certificate %s", f->key_file, f->cert_file);
		goto fail;
	}
	ERR_clear_error();
	return t;
fail:
	ERR_clear_error();
	ig_redis_tls_free(t);
	return NULL;
}

void ig_redis_tls_free(struct ig_redis_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	free(t->name);
	free(t);
}

SSL *ig_redis_tls_session(const struct ig_redis_tls *t, int fd, char *why, size_t size)
{
	SSL *ssl = SSL_new(t->ctx);
	/* an address is checked as one (no SNI for it); a name as a host name */
	if (!ssl || SSL_set_fd(ssl, fd) != 1 ||
	    (t->ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), t->name) != 1
		   : SSL_set_tlsext_host_name(ssl, t->name) != 1 || SSL_set1_host(ssl, t->name) != 1)) {
		snprintf(why, size, "TLS: cannot set up (%s)", ssl_reason());
		SSL_free(ssl);
		return NULL;
	}
	SSL_set_connect_state(ssl);
	return ssl;
}
