/* Unit tests for what a Redis link is set up with (src/gateway/net/redis_link.c):
 * redis:// and rediss:// URLs (password, ACL user, IPv6, port, database)
 * and every malformed one told; the URL shown without its password; the TLS
 * settings of rediss:// (a CA file, a client certificate and its key, the
 * name checked: SNI for a name, none for an address), each problem naming
 * its file. Certificates are made here with GnuTLS. */
#include "config.h"
#include <check.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "infergate/util.h"
#include "net/redis_link.h"
#include "../../check_main.h"

static struct ig_redis_url parsed(const char *url)
{
	struct ig_redis_url u;
	char *err = NULL;
	ck_assert_msg(ig_redis_url_parse(url, &u, &err) == 0, "%s: %s", url, err);
	return u;
}

static char *refused(const char *url)
{
	static char out[512];
	struct ig_redis_url u;
	char *err = NULL;
	ck_assert_int_eq(ig_redis_url_parse(url, &u, &err), -1);
	ck_assert_ptr_nonnull(err);
	snprintf(out, sizeof(out), "%s", err);
	free(err);
	ck_assert_ptr_null(u.host); /* nothing kept */
	return out;
}

START_TEST(urls_are_read_as_redis_reads_them)
{
	struct ig_redis_url u = parsed("redis://cache.internal");
	ck_assert_str_eq(u.host, "cache.internal");
	ck_assert_int_eq(u.port, 6379);
	ck_assert_int_eq(u.db, 0);
	ck_assert_ptr_null(u.password);
	ck_assert(!u.tls);
	char *shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "redis://cache.internal:6379/0");
	free(shown);
	ig_redis_url_free(&u);

	u = parsed("rediss://:s3cr@t@10.0.0.5:6380/2"); /* the last '@' ends the password */
	ck_assert(u.tls);
	ck_assert_str_eq(u.host, "10.0.0.5");
	ck_assert_int_eq(u.port, 6380);
	ck_assert_int_eq(u.db, 2);
	ck_assert_str_eq(u.password, "s3cr@t");
	shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "rediss://***@10.0.0.5:6380/2"); /* logs never carry it */
	ck_assert_ptr_null(strstr(shown, "s3cr"));
	free(shown);
	ig_redis_url_free(&u);

	u = parsed("redis://gateway:pw@[::1]:7000/"); /* an ACL user: AUTH gateway pw */
	ck_assert_str_eq(u.host, "::1");
	ck_assert_int_eq(u.port, 7000);
	ck_assert_str_eq(u.password, "gateway\npw");
	shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "redis://***@[::1]:7000/0");
	free(shown);
	ig_redis_url_free(&u);

	u = parsed("redis://[fd00::7]");
	ck_assert_str_eq(u.host, "fd00::7");
	ck_assert_int_eq(u.port, 6379);
	ig_redis_url_free(&u);
}
END_TEST

START_TEST(malformed_urls_are_told)
{
	ck_assert_ptr_nonnull(strstr(refused("http://cache:6379"), "is not a redis:// URL"));
	ck_assert_ptr_nonnull(strstr(refused("redis://pw@cache"), "the part before '@' must be [USER]:PASSWORD"));
	ck_assert_ptr_nonnull(strstr(refused("redis://"), "no host"));
	ck_assert_ptr_nonnull(strstr(refused("redis://:pw@:6379"), "no host"));
	ck_assert_ptr_nonnull(strstr(refused("redis://cache:0"), "the port must be 1..65535"));
	ck_assert_ptr_nonnull(strstr(refused("redis://cache:65536"), "the port must be 1..65535"));
	ck_assert_ptr_nonnull(strstr(refused("redis://cache:"), "the port must be 1..65535"));
	ck_assert_ptr_nonnull(strstr(refused("redis://cache:63x9"), "the port must be 1..65535"));
	ck_assert_ptr_nonnull(strstr(refused("redis://cache/db1"), "the database after '/' must be a number"));
	ck_assert_ptr_nonnull(strstr(refused("redis://cache/-1"), "the database after '/' must be a number"));
}
END_TEST

/* ---- TLS ---- */

static char dir[64];

static char *in_dir(const char *name)
{
	return ig_strdupf("%s/%s", dir, name);
}

static void write_datum(const char *name, gnutls_datum_t d)
{
	char *p = in_dir(name);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(d.data, 1, d.size, f), d.size);
	fclose(f);
	free(p);
}

/* A self-signed certificate NAME.pem and its key NAME.key. */
static void make_cert(const char *name)
{
	gnutls_x509_privkey_t key;
	gnutls_x509_crt_t crt;
	gnutls_datum_t d;
	time_t now = time(NULL);
	unsigned char sn[1] = {7};
	char file[64];
	ck_assert_int_eq(gnutls_x509_privkey_init(&key), 0);
	ck_assert_int_eq(gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
						      GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0), 0);
	ck_assert_int_eq(gnutls_x509_crt_init(&crt), 0);
	gnutls_x509_crt_set_version(crt, 3);
	gnutls_x509_crt_set_serial(crt, sn, 1);
	gnutls_x509_crt_set_activation_time(crt, now - 60);
	gnutls_x509_crt_set_expiration_time(crt, now + 86400);
	gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, "redis", 5);
	gnutls_x509_crt_set_ca_status(crt, 1);
	ck_assert_int_eq(gnutls_x509_crt_set_key(crt, key), 0);
	ck_assert_int_eq(gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0), 0);
	ck_assert_int_eq(gnutls_x509_crt_export2(crt, GNUTLS_X509_FMT_PEM, &d), 0);
	snprintf(file, sizeof(file), "%s.pem", name);
	write_datum(file, d);
	gnutls_free(d.data);
	ck_assert_int_eq(gnutls_x509_privkey_export2(key, GNUTLS_X509_FMT_PEM, &d), 0);
	snprintf(file, sizeof(file), "%s.key", name);
	write_datum(file, d);
	gnutls_free(d.data);
	gnutls_x509_crt_deinit(crt);
	gnutls_x509_privkey_deinit(key);
}

static char *tls_refused(const char *ca, const char *cert, const char *key)
{
	static char out[512];
	char *pca = ca ? in_dir(ca) : NULL, *pcert = cert ? in_dir(cert) : NULL, *pkey = key ? in_dir(key) : NULL;
	struct ig_redis_tls_files f = {pca, pcert, pkey, NULL};
	char *err = NULL;
	struct ig_redis_tls *t = ig_redis_tls_new(&f, "redis", &err);
	ck_assert_ptr_null(t);
	ck_assert_ptr_nonnull(err);
	snprintf(out, sizeof(out), "%s", err);
	free(err);
	free(pca);
	free(pcert);
	free(pkey);
	return out;
}

START_TEST(tls_settings_name_the_file_at_fault)
{
	strcpy(dir, "/tmp/ig-test-redis-link-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	make_cert("ca");
	make_cert("client");
	make_cert("other");
	char *ca = in_dir("ca.pem"), *cert = in_dir("client.pem"), *key = in_dir("client.key");

	/* a CA, a client certificate and its key: fine */
	struct ig_redis_tls_files f = {ca, cert, key, NULL};
	char *err = NULL;
	struct ig_redis_tls *t = ig_redis_tls_new(&f, "redis.internal", &err);
	ck_assert_msg(t != NULL, "%s", err);

	/* a session checks the URL's host by name, sent as SNI */
	int sv[2];
	char why[200];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	SSL *ssl = ig_redis_tls_session(t, sv[0], why, sizeof(why));
	ck_assert_msg(ssl != NULL, "%s", why);
	ck_assert_str_eq(SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name), "redis.internal");
	SSL_free(ssl);
	ig_redis_tls_free(t);

	/* an address: checked as one, no SNI; server_name wins over the host */
	t = ig_redis_tls_new(&f, "10.0.0.5", &err);
	ck_assert_ptr_nonnull(t);
	ssl = ig_redis_tls_session(t, sv[0], why, sizeof(why));
	ck_assert_ptr_nonnull(ssl);
	ck_assert_ptr_null(SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name));
	SSL_free(ssl);
	ig_redis_tls_free(t);
	f.server_name = "redis.example";
	t = ig_redis_tls_new(&f, "10.0.0.5", &err);
	ssl = ig_redis_tls_session(t, sv[0], why, sizeof(why));
	ck_assert_str_eq(SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name), "redis.example");
	SSL_free(ssl);
	ig_redis_tls_free(t);
	close(sv[0]);
	close(sv[1]);

	char *p = tls_refused("missing-ca.pem", NULL, NULL);
	ck_assert_ptr_nonnull(strstr(p, "the CA file "));
	ck_assert_ptr_nonnull(strstr(p, "missing-ca.pem"));
	p = tls_refused("ca.pem", "client.pem", NULL);
	ck_assert_str_eq(p, "a client certificate needs its key, and a key its certificate");
	p = tls_refused("ca.pem", NULL, "client.key");
	ck_assert_str_eq(p, "a client certificate needs its key, and a key its certificate");
	p = tls_refused("ca.pem", "client.key", "client.key"); /* a key where the certificate goes */
	ck_assert_ptr_nonnull(strstr(p, "the client certificate "));
	ck_assert_ptr_nonnull(strstr(p, "client.key"));
	p = tls_refused("ca.pem", "client.pem", "client.pem");
	ck_assert_ptr_nonnull(strstr(p, "the client key "));
	ck_assert_ptr_nonnull(strstr(p, "needs a passphrase"));
	p = tls_refused("ca.pem", "client.pem", "other.key");
	ck_assert_msg(strstr(p, "other.key") != NULL, "%s", p);
	ck_assert_msg(strstr(p, "mismatch") != NULL || strstr(p, "is not the key of the certificate") != NULL, "%s", p);

	const char *names[] = {"ca.pem", "ca.key", "client.pem", "client.key", "other.pem", "other.key", NULL};
	for (const char **n = names; *n; n++) {
		char *q = in_dir(*n);
		unlink(q);
		free(q);
	}
	rmdir(dir);
	free(ca);
	free(cert);
	free(key);
}
END_TEST

IG_CHECK_MAIN("redis_link", urls_are_read_as_redis_reads_them, malformed_urls_are_told,
	      tls_settings_name_the_file_at_fault)
