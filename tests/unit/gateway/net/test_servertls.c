/* Unit tests for HTTPS for clients (src/gateway/net/servertls.c): the
 * certificate and key read and checked, each problem named by its key
 * (a missing file, an expired or not yet valid certificate, a key of
 * another certificate, a file that is not PEM, bad priorities); what
 * /metrics shows of the certificate (serial, expiry); a reload that
 * replaces them, and one that fails and keeps the running ones. The
 * certificates are made here with GnuTLS, each with its own dates. */
#include "config.h"
#include <check.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "infergate/buf.h"
#include "net/servertls.h"
#include "../../check_main.h"

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

/* A self-signed certificate NAME.pem with its key NAME.key, valid from
 * `from` to `to` (Unix seconds), its serial the bytes {serial, 0x5a}. */
static void make_cert(const char *name, unsigned char serial, time_t from, time_t to)
{
	gnutls_x509_privkey_t key;
	gnutls_x509_crt_t crt;
	gnutls_datum_t d;
	ck_assert_int_eq(gnutls_x509_privkey_init(&key), 0);
	ck_assert_int_eq(gnutls_x509_privkey_generate(key, GNUTLS_PK_ECDSA,
						      GNUTLS_CURVE_TO_BITS(GNUTLS_ECC_CURVE_SECP256R1), 0), 0);
	ck_assert_int_eq(gnutls_x509_crt_init(&crt), 0);
	unsigned char sn[2] = {serial, 0x5a};
	ck_assert_int_eq(gnutls_x509_crt_set_version(crt, 3), 0);
	ck_assert_int_eq(gnutls_x509_crt_set_serial(crt, sn, sizeof(sn)), 0);
	ck_assert_int_eq(gnutls_x509_crt_set_activation_time(crt, from), 0);
	ck_assert_int_eq(gnutls_x509_crt_set_expiration_time(crt, to), 0);
	ck_assert_int_eq(gnutls_x509_crt_set_dn_by_oid(crt, GNUTLS_OID_X520_COMMON_NAME, 0, "localhost", 9), 0);
	ck_assert_int_eq(gnutls_x509_crt_set_key(crt, key), 0);
	ck_assert_int_eq(gnutls_x509_crt_sign2(crt, crt, key, GNUTLS_DIG_SHA256, 0), 0);
	char file[64];
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

static const char *names[] = {"a.pem", "a.key", "b.pem", "b.key", "old.pem", "old.key", "soon.pem", "soon.key",
			      "junk.pem", NULL};

static void setup(void)
{
	strcpy(dir, "/tmp/ig-test-servertls-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	time_t now = time(NULL);
	make_cert("a", 0x01, now - 3600, now + 86400 * 30);
	make_cert("b", 0x02, now - 3600, now + 86400 * 60);
	make_cert("old", 0x03, now - 86400 * 60, now - 86400);
	make_cert("soon", 0x04, now + 86400, now + 86400 * 60);
	char *p = in_dir("junk.pem");
	FILE *f = fopen(p, "w");
	fputs("not a certificate\n", f);
	fclose(f);
	free(p);
}

static void teardown(void)
{
	for (const char **n = names; *n; n++) {
		char *p = in_dir(*n);
		unlink(p);
		free(p);
	}
	rmdir(dir);
}

/* The files of certificate `c` with the key of `k`. */
struct files {
	char cert[128], key[128];
	struct ig_servertls_files f;
};

static struct files *files_of(struct files *fs, const char *c, const char *k)
{
	snprintf(fs->cert, sizeof(fs->cert), "%s/%s", dir, c);
	snprintf(fs->key, sizeof(fs->key), "%s/%s", dir, k);
	fs->f = (struct ig_servertls_files){fs->cert, fs->key, "", IG_SERVERTLS_DEFAULT_PRIORITIES, false};
	return fs;
}

/* What ig_servertls_open says of these files: "" when it opens them. */
static char *problems(const struct ig_servertls_files *f)
{
	static char out[2048];
	char *err = NULL;
	struct ig_servertls *t = ig_servertls_open(f, &err);
	if (t) {
		ig_servertls_free(t);
		return strcpy(out, "");
	}
	ck_assert_ptr_nonnull(err);
	snprintf(out, sizeof(out), "%s", err);
	free(err);
	/* the configuration check says the same */
	struct ig_buf errs;
	ig_buf_init(&errs);
	ig_servertls_check(f, &errs);
	ck_assert_uint_gt(ig_buf_pending(&errs), 0);
	ig_buf_free(&errs);
	return out;
}

START_TEST(a_good_pair_opens_and_is_shown)
{
	setup();
	struct files fs;
	char *err = NULL;
	struct ig_servertls *t = ig_servertls_open(&files_of(&fs, "a.pem", "a.key")->f, &err);
	ck_assert_msg(t != NULL, "%s", err);
	struct ig_servertls_stats st;
	ig_servertls_stats(t, &st);
	ck_assert_str_eq(st.serial, "015a");
	ck_assert_int_gt(st.not_after, (int64_t)time(NULL) + 86400 * 29);
	ck_assert_int_lt(st.not_after, (int64_t)time(NULL) + 86400 * 31);
	ck_assert(!st.client_certs);
	ck_assert_uint_eq(st.handshakes_ok + st.handshakes_failed + st.not_tls, 0);
	/* the daemon starts with the certificate's text and the priorities */
	const struct MHD_OptionItem *o = ig_servertls_mhd_options(t);
	ck_assert_int_eq(o[0].option, MHD_OPTION_HTTPS_MEM_CERT);
	ck_assert_ptr_nonnull(strstr(o[0].ptr_value, "-----BEGIN CERTIFICATE-----"));
	ck_assert_int_eq(o[1].option, MHD_OPTION_HTTPS_MEM_KEY);
	ck_assert_int_eq(o[2].option, MHD_OPTION_HTTPS_PRIORITIES);
	ck_assert_str_eq(o[2].ptr_value, IG_SERVERTLS_DEFAULT_PRIORITIES);
	ck_assert_int_eq(o[3].option, MHD_OPTION_END);
	ig_servertls_free(t);

	/* client certificates required: a CA file (here, b's certificate) */
	files_of(&fs, "a.pem", "a.key");
	char ca[128];
	snprintf(ca, sizeof(ca), "%s/b.pem", dir);
	fs.f.client_ca_file = ca;
	t = ig_servertls_open(&fs.f, &err);
	ck_assert_ptr_nonnull(t);
	ig_servertls_stats(t, &st);
	ck_assert(st.client_certs);
	ig_servertls_free(t);
	teardown();
}
END_TEST

START_TEST(each_problem_is_named_by_its_key)
{
	setup();
	struct files fs;
	char *p;

	p = problems(&files_of(&fs, "a.pem", "b.key")->f);
	ck_assert_ptr_nonnull(strstr(p, "server_tls.key_file: "));
	ck_assert_ptr_nonnull(strstr(p, "b.key is not the key of server_tls.cert_file "));

	p = problems(&files_of(&fs, "old.pem", "old.key")->f);
	ck_assert_ptr_nonnull(strstr(p, "server_tls.cert_file: "));
	ck_assert_ptr_nonnull(strstr(p, "old.pem expired on "));

	p = problems(&files_of(&fs, "soon.pem", "soon.key")->f);
	ck_assert_ptr_nonnull(strstr(p, "soon.pem is not valid before "));

	p = problems(&files_of(&fs, "junk.pem", "a.key")->f);
	ck_assert_ptr_nonnull(strstr(p, "junk.pem: not a PEM certificate"));

	p = problems(&files_of(&fs, "a.pem", "a.pem")->f); /* a certificate where the key goes */
	ck_assert_ptr_nonnull(strstr(p, "server_tls.key_file: "));
	ck_assert_ptr_nonnull(strstr(p, "not a PEM private key"));

	p = problems(&files_of(&fs, "missing.pem", "a.key")->f);
	ck_assert_ptr_nonnull(strstr(p, "server_tls.cert_file: "));
	ck_assert_ptr_nonnull(strstr(p, "missing.pem: No such file or directory"));

	files_of(&fs, "a.pem", "a.key");
	fs.f.key_file = "";
	p = problems(&fs.f);
	ck_assert_ptr_nonnull(strstr(p, "server_tls.cert_file: given without server_tls.key_file"));

	files_of(&fs, "a.pem", "a.key");
	fs.f.priorities = "NORMAL:+NO-SUCH-THING";
	p = problems(&fs.f);
	ck_assert_ptr_nonnull(strstr(p, "server_tls.priorities: 'NORMAL:+NO-SUCH-THING': "));

	/* two problems at once: both told */
	files_of(&fs, "old.pem", "missing.key");
	p = problems(&fs.f);
	ck_assert_ptr_nonnull(strstr(p, "expired on"));
	ck_assert_ptr_nonnull(strstr(p, "missing.key"));
	teardown();
}
END_TEST

START_TEST(a_reload_replaces_them_or_keeps_the_running_ones)
{
	setup();
	struct files fs;
	char *err = NULL;
	struct ig_servertls *t = ig_servertls_open(&files_of(&fs, "a.pem", "a.key")->f, &err);
	ck_assert_ptr_nonnull(t);
	struct ig_servertls_stats st;

	/* SIGHUP after the certificate was renewed */
	ck_assert_int_eq(ig_servertls_reload(t, &files_of(&fs, "b.pem", "b.key")->f, &err), 0);
	ig_servertls_stats(t, &st);
	ck_assert_str_eq(st.serial, "025a");
	ck_assert_uint_eq(st.reloads_ok, 1);
	ck_assert_uint_eq(st.reloads_failed, 0);
	char *b_text = NULL;
	{
		char *p = in_dir("b.pem");
		FILE *f = fopen(p, "r");
		char buf[4096];
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = '\0';
		fclose(f);
		free(p);
		b_text = strdup(buf);
	}
	ck_assert_str_eq(ig_servertls_mhd_options(t)[0].ptr_value, b_text);

	/* a renewal gone wrong (an expired one): refused, b still served */
	ck_assert_int_eq(ig_servertls_reload(t, &files_of(&fs, "old.pem", "old.key")->f, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "expired on"));
	free(err);
	ig_servertls_stats(t, &st);
	ck_assert_str_eq(st.serial, "025a");
	ck_assert_uint_eq(st.reloads_failed, 1);
	ck_assert_str_eq(ig_servertls_mhd_options(t)[0].ptr_value, b_text);

	/* refused before the files (the configuration names bad ones) */
	ig_servertls_reload_refused(t);
	ig_servertls_stats(t, &st);
	ck_assert_uint_eq(st.reloads_failed, 2);
	ck_assert_uint_eq(st.reloads_ok, 1);
	free(b_text);
	ig_servertls_free(t);
	teardown();
}
END_TEST

IG_CHECK_MAIN("servertls", a_good_pair_opens_and_is_shown, each_problem_is_named_by_its_key,
	      a_reload_replaces_them_or_keeps_the_running_ones)
