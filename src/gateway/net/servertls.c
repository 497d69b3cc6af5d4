/* HTTPS for clients: credentials read, checked, handed to each new
 * connection and replaced on SIGHUP (servertls.h). */
#include "config.h"
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf/conf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "net/servertls.h"

/* One certificate (with its chain), its key and the client CAs: what a
 * connection's session uses from its start to its end. */
struct creds {
	gnutls_certificate_credentials_t cred;
	char *cert_pem, *key_pem;  /* the daemon's start wants them as text */
	bool client_ca;            /* clients must show a certificate these CAs signed */
	int64_t not_after;
	char serial[80];
	long users;                /* connections whose session uses them */
	struct creds *next;        /* retired ones still in use */
};

struct ig_servertls {
	struct creds *cur, *retired;
	char *priorities;
	gnutls_datum_t ticket_key; /* session tickets: resumption, and TLS 1.3's ticket after the handshake */
	struct MHD_OptionItem opts[4];
	_Atomic uint64_t ok, failed, not_tls;
	uint64_t reloads_ok, reloads_failed;
};

/* A connection's record (its socket context): the credentials it holds,
 * and how far its handshake went (the hook, on its reactor). */
struct conn {
	struct ig_servertls *t;
	struct creds *c;
	bool hello;       /* a ClientHello came in: it speaks TLS */
	bool handshaken;  /* the client's Finished came in */
};

/* A file's text, NUL-terminated; NULL with the problem said, named by key. */
static char *read_text(const char *key, const char *path, struct ig_buf *errs)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		ig_flags_problem(errs, "%s: %s: %s", key, path, strerror(errno));
		return NULL;
	}
	struct ig_buf b;
	ig_buf_init(&b);
	char chunk[4096];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		if (ig_buf_append(&b, chunk, n) < 0)
			break;
	int bad = ferror(f);
	fclose(f);
	if (bad || ig_buf_append(&b, "", 1) < 0) {
		ig_flags_problem(errs, "%s: %s: cannot be read", key, path);
		ig_buf_free(&b);
		return NULL;
	}
	char *s = strdup(ig_buf_head(&b));
	ig_buf_free(&b);
	return s;
}

static gnutls_datum_t datum(const char *s)
{
	return (gnutls_datum_t){(unsigned char *)s, (unsigned)strlen(s)};
}

static void utc(int64_t t, char *out, size_t n)
{
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	strftime(out, n, "%Y-%m-%d %H:%M:%S UTC", &tm);
}

static void creds_free(struct creds *c)
{
	if (!c)
		return;
	if (c->cred)
		gnutls_certificate_free_credentials(c->cred);
	free(c->cert_pem);
	free(c->key_pem);
	free(c);
}

/* The certificate's first entry checked for dates, and its serial and
 * expiry kept in c. */
static void check_cert(const struct ig_servertls_files *f, gnutls_x509_crt_t crt, struct creds *c,
		       struct ig_buf *errs)
{
	time_t now = time(NULL);
	time_t from = gnutls_x509_crt_get_activation_time(crt), to = gnutls_x509_crt_get_expiration_time(crt);
	char when[40];
	if (to != (time_t)-1 && to < now) {
		utc(to, when, sizeof(when));
		ig_flags_problem(errs, "server_tls.cert_file: %s expired on %s", f->cert_file, when);
	} else if (from != (time_t)-1 && from > now) {
		utc(from, when, sizeof(when));
		ig_flags_problem(errs, "server_tls.cert_file: %s is not valid before %s", f->cert_file, when);
	}
	c->not_after = to;
	unsigned char serial[40];
	size_t n = sizeof(serial);
	c->serial[0] = '\0';
	if (gnutls_x509_crt_get_serial(crt, serial, &n) == 0)
		for (size_t i = 0; i < n && 2 * i + 2 < sizeof(c->serial); i++)
			snprintf(c->serial + 2 * i, 3, "%02x", serial[i]);
}

/* Reads and checks f's files: the credentials, or NULL with every problem
 * in errs. */
static struct creds *creds_load(const struct ig_servertls_files *f, struct ig_buf *errs)
{
	size_t before = ig_buf_pending(errs);
	struct creds *c = calloc(1, sizeof(*c));
	char *ca = NULL;
	gnutls_x509_crt_t *crts = NULL;
	unsigned ncrts = 0;
	gnutls_x509_privkey_t key = NULL;
	int rc;

	if (!c)
		return NULL;
	if (!*f->cert_file || !*f->key_file) {
		ig_flags_problem(errs, "%s: given without %s", *f->cert_file ? "server_tls.cert_file" : "server_tls.key_file",
				 *f->cert_file ? "server_tls.key_file" : "server_tls.cert_file");
		goto out;
	}
	c->cert_pem = read_text("server_tls.cert_file", f->cert_file, errs);
	c->key_pem = read_text("server_tls.key_file", f->key_file, errs);
	if (*f->client_ca_file)
		ca = read_text("server_tls.client_ca_file", f->client_ca_file, errs);
	if (c->cert_pem) {
		gnutls_datum_t d = datum(c->cert_pem);
		if ((rc = gnutls_x509_crt_list_import2(&crts, &ncrts, &d, GNUTLS_X509_FMT_PEM, 0)) < 0 || ncrts == 0)
			ig_flags_problem(errs, "server_tls.cert_file: %s: not a PEM certificate (%s)", f->cert_file,
					 rc < 0 ? gnutls_strerror(rc) : "none in it");
		else
			check_cert(f, crts[0], c, errs);
	}
	if (c->key_pem) {
		gnutls_datum_t d = datum(c->key_pem);
		if (gnutls_x509_privkey_init(&key) < 0 ||
		    (rc = gnutls_x509_privkey_import2(key, &d, GNUTLS_X509_FMT_PEM, NULL, 0)) < 0)
			ig_flags_problem(errs, "server_tls.key_file: %s: not a PEM private key, or it needs a passphrase",
					 f->key_file);
	}
	if (gnutls_certificate_allocate_credentials(&c->cred) < 0) {
		ig_flags_problem(errs, "server_tls: out of memory");
		goto out;
	}
	if (ig_buf_pending(errs) == before) {
		gnutls_datum_t cd = datum(c->cert_pem), kd = datum(c->key_pem);
		rc = gnutls_certificate_set_x509_key_mem2(c->cred, &cd, &kd, GNUTLS_X509_FMT_PEM, NULL, 0);
		if (rc == GNUTLS_E_CERTIFICATE_KEY_MISMATCH)
			ig_flags_problem(errs, "server_tls.key_file: %s is not the key of server_tls.cert_file %s",
					 f->key_file, f->cert_file);
		else if (rc < 0)
			ig_flags_problem(errs, "server_tls.cert_file: %s with server_tls.key_file %s: %s", f->cert_file,
					 f->key_file, gnutls_strerror(rc));
	}
	if (ca) {
		gnutls_datum_t d = datum(ca);
		rc = gnutls_certificate_set_x509_trust_mem(c->cred, &d, GNUTLS_X509_FMT_PEM);
		if (rc <= 0)
			ig_flags_problem(errs, "server_tls.client_ca_file: %s: no PEM certificate in it%s%s",
					 f->client_ca_file, rc < 0 ? ": " : "", rc < 0 ? gnutls_strerror(rc) : "");
		c->client_ca = true;
	}
out:
	for (unsigned i = 0; i < ncrts; i++)
		gnutls_x509_crt_deinit(crts[i]);
	gnutls_free(crts);
	if (key)
		gnutls_x509_privkey_deinit(key);
	free(ca);
	if (ig_buf_pending(errs) != before) {
		creds_free(c);
		return NULL;
	}
	return c;
}

static void check_priorities(const char *p, struct ig_buf *errs)
{
	gnutls_priority_t pc;
	const char *at = NULL;
	int rc = gnutls_priority_init(&pc, p, &at);
	if (rc < 0) {
		ig_flags_problem(errs, "server_tls.priorities: '%s': %s%s%s", p, gnutls_strerror(rc),
				 at ? " at " : "", at ? at : "");
		return;
	}
	gnutls_priority_deinit(pc);
}

void ig_servertls_check(const struct ig_servertls_files *f, struct ig_buf *errs)
{
	creds_free(creds_load(f, errs));
	check_priorities(f->priorities, errs);
}

static char *take(struct ig_buf *errs)
{
	ig_buf_append(errs, "", 1);
	char *s = strdup(ig_buf_head(errs));
	ig_buf_free(errs);
	return s;
}

static void set_options(struct ig_servertls *t)
{
	/* The daemon's own credentials are these texts (a connection's session
	 * is given the current ones at its start: conn_started). */
	t->opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, t->cur->cert_pem};
	t->opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, t->cur->key_pem};
	t->opts[2] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0, t->priorities};
	t->opts[3] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
}

struct ig_servertls *ig_servertls_open(const struct ig_servertls_files *f, char **err)
{
	struct ig_buf errs;
	ig_buf_init(&errs);
	struct creds *c = creds_load(f, &errs);
	check_priorities(f->priorities, &errs);
	struct ig_servertls *t = c && ig_buf_pending(&errs) == 0 ? calloc(1, sizeof(*t)) : NULL;
	if (!t || !(t->priorities = strdup(f->priorities))) {
		if (ig_buf_pending(&errs) == 0)
			ig_flags_problem(&errs, "server_tls: out of memory");
		*err = take(&errs);
		creds_free(c);
		free(t);
		return NULL;
	}
	ig_buf_free(&errs);
	t->cur = c;
	set_options(t);
	if (f->tickets && gnutls_session_ticket_key_generate(&t->ticket_key) < 0)
		t->ticket_key = (gnutls_datum_t){NULL, 0};
	return t;
}

/* Retired credentials no connection uses any more are freed. */
static void reap(struct ig_servertls *t)
{
	for (struct creds **p = &t->retired; *p;) {
		struct creds *c = *p;
		if (c->users > 0) {
			p = &c->next;
			continue;
		}
		*p = c->next;
		creds_free(c);
	}
}

void ig_servertls_reload_refused(struct ig_servertls *t)
{
	t->reloads_failed++;
}

int ig_servertls_reload(struct ig_servertls *t, const struct ig_servertls_files *f, char **err)
{
	struct ig_buf errs;
	ig_buf_init(&errs);
	struct creds *c = creds_load(f, &errs);
	if (!c) {
		t->reloads_failed++;
		if (ig_buf_pending(&errs) == 0)
			ig_flags_problem(&errs, "server_tls: out of memory");
		*err = take(&errs);
		return -1;
	}
	ig_buf_free(&errs);
	t->cur->next = t->retired;
	t->retired = t->cur;
	t->cur = c;
	set_options(t);
	t->reloads_ok++;
	reap(t);
	return 0;
}

void ig_servertls_free(struct ig_servertls *t)
{
	if (!t)
		return;
	creds_free(t->cur);
	while (t->retired) {
		struct creds *c = t->retired;
		t->retired = c->next;
		creds_free(c);
	}
	free(t->priorities);
	if (t->ticket_key.data) {
		gnutls_memset(t->ticket_key.data, 0, t->ticket_key.size);
		gnutls_free(t->ticket_key.data);
	}
	free(t);
}

const struct MHD_OptionItem *ig_servertls_mhd_options(struct ig_servertls *t)
{
	return t->opts;
}

/* A handshake message was processed: a ClientHello says the client
 * speaks TLS; its Finished, that it finished its side of the handshake
 * (the last message it sends in TLS 1.2 and 1.3 alike). */
static int on_message(gnutls_session_t s, unsigned htype, unsigned when IG_UNUSED, unsigned incoming,
		      const gnutls_datum_t *msg IG_UNUSED)
{
	struct conn *r = gnutls_db_get_ptr(s);
	if (!incoming || !r)
		return 0;
	if (htype == GNUTLS_HANDSHAKE_CLIENT_HELLO)
		r->hello = true;
	else if (htype == GNUTLS_HANDSHAKE_FINISHED && !r->handshaken) {
		r->handshaken = true;
		atomic_fetch_add(&r->t->ok, 1);
		/* Acknowledge the client's last flight now: GnuTLS has sent its
		 * session tickets already (TLS 1.3 lets it, before the client's
		 * Finished) and has nothing more to send, so the ACK would wait
		 * for the kernel's delayed-ACK timer, and a client with Nagle on
		 * holds its first request until then (40 ms a new connection;
		 * bench/tls.py's probe, strace). */
		int one = 1;
		setsockopt(gnutls_transport_get_int(s), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof(one));
	}
	return 0;
}

void ig_servertls_conn_started(struct ig_servertls *t, struct MHD_Connection *conn, void **socket_context)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
	struct conn *r = calloc(1, sizeof(*r));
	*socket_context = NULL;
	if (!ci || !r) { /* the daemon's own credentials serve it */
		free(r);
		return;
	}
	gnutls_session_t s = ci->tls_session;
	r->t = t;
	r->c = t->cur;
	r->c->users++;
	gnutls_credentials_set(s, GNUTLS_CRD_CERTIFICATE, r->c->cred);
	/* Session tickets, as nginx and HAProxy have them by default: a client
	 * that comes back resumes without a full handshake. The key is made at
	 * start and kept: tickets outlive a certificate reload, not a restart.
	 * Off with server_tls.session_tickets 0. */
	if (t->ticket_key.data)
		gnutls_session_ticket_enable_server(s, &t->ticket_key);
	if (r->c->client_ca) {
		/* The handshake fails without a certificate the CAs signed. */
		gnutls_certificate_server_set_request(s, GNUTLS_CERT_REQUIRE);
		gnutls_session_set_verify_cert(s, NULL, 0);
	}
	/* The session's database pointer is free (libmicrohttpd keeps no
	 * session cache): it carries the record to the hook. */
	gnutls_db_set_ptr(s, r);
	gnutls_handshake_set_hook_function(s, GNUTLS_HANDSHAKE_ANY, GNUTLS_HOOK_POST, on_message);
	*socket_context = r;
}

void ig_servertls_conn_closed(struct ig_servertls *t, void **socket_context)
{
	struct conn *r = *socket_context;
	*socket_context = NULL;
	if (!r)
		return;
	if (!r->handshaken)
		atomic_fetch_add(r->hello ? &t->failed : &t->not_tls, 1);
	r->c->users--;
	if (r->c != t->cur && r->c->users == 0)
		reap(t);
	free(r);
}

void ig_servertls_stats(const struct ig_servertls *t, struct ig_servertls_stats *out)
{
	out->handshakes_ok = atomic_load(&t->ok);
	out->handshakes_failed = atomic_load(&t->failed);
	out->not_tls = atomic_load(&t->not_tls);
	out->reloads_ok = t->reloads_ok;
	out->reloads_failed = t->reloads_failed;
	out->not_after = t->cur->not_after;
	snprintf(out->serial, sizeof(out->serial), "%s", t->cur->serial);
	out->client_certs = t->cur->client_ca;
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag servertls_rows[] = {
	{.name = "--server-tls-cert", .key = "server_tls.cert_file", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(server_tls_cert),
	 .def = "", .metavar = "FILE",
	 .help = "HTTPS for clients: the PEM certificate (then its chain), with server_tls.key_file; re-read on SIGHUP"},
	{.name = "--server-tls-key", .key = "server_tls.key_file", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(server_tls_key),
	 .def = "", .metavar = "FILE", .help = "HTTPS for clients: the PEM private key of server_tls.cert_file"},
	{.name = "--server-tls-client-ca", .key = "server_tls.client_ca_file", .type = IG_FLAG_STRING,
	 .off = IG_CONF_OFF(server_tls_client_ca), .def = "", .metavar = "FILE",
	 .help = "HTTPS for clients: PEM CA certificates; a client must show a certificate one of them signed "
		 "(mutual TLS), else its handshake fails"},
	{.name = "--server-tls-priorities", .key = "server_tls.priorities", .type = IG_FLAG_STRING,
	 .off = IG_CONF_OFF(server_tls_priorities), .def = IG_SERVERTLS_DEFAULT_PRIORITIES, .metavar = "STRING",
	 .help = "HTTPS for clients: GnuTLS priority string (protocol versions, cipher suites); the default allows "
		 "TLS 1.2 and 1.3 with GnuTLS's NORMAL suites"},
	{.name = "--server-tls-session-tickets", .key = "server_tls.session_tickets", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(server_tls_tickets), .min = 0, .max = 1, .def = "1", .metavar = "0|1",
	 .help = "HTTPS for clients: 1 gives clients session tickets, so one that comes back resumes without a "
		 "full handshake; 0: every connection a full handshake"},
};
const struct ig_conf_part ig_servertls_conf = IG_CONF_PART(servertls_rows);

/* HTTPS for clients: the files read and checked as they will be served
 * (servertls.c), every problem named by its key. */
void ig_servertls_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	if (!*cfg->server_tls_cert && !*cfg->server_tls_key) {
		if (*cfg->server_tls_client_ca)
			ig_flags_problem(errs, "server_tls.client_ca_file: given without server_tls.cert_file and key_file "
					 "(client certificates are asked for over HTTPS only)");
		return;
	}
	struct ig_servertls_files f = {cfg->server_tls_cert, cfg->server_tls_key, cfg->server_tls_client_ca,
				       cfg->server_tls_priorities, cfg->server_tls_tickets != 0};
	ig_servertls_check(&f, errs);
}
