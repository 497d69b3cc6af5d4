/* HTTPS for the gateway's clients (server_tls): the certificate, its key
 * and the client CAs, read and checked; each new client connection gets
 * the credentials current when it was accepted, so a SIGHUP that replaces
 * them changes new connections only; handshakes counted.
 *
 * libmicrohttpd does the TLS through GnuTLS (Debian's build links it).
 * The daemon is started with the certificate as text (it wants one); each
 * connection's session then gets this module's credentials instead, at
 * its start (before its handshake), and keeps them until it closes: the
 * credentials are counted by the sessions that use them and freed when
 * the last one closes after a replacement.
 *
 * Threads: open, reload and free on reactor 0 under the gateway's lock;
 * conn_started and conn_closed under the lock on the connection's own
 * reactor; the handshake hook on that reactor without the lock (it
 * touches only its connection's record). */
#ifndef IG_SERVERTLS_H
#define IG_SERVERTLS_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

#include "infergate/util.h"

#define IG_SERVERTLS_DEFAULT_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

struct ig_servertls;

/* What server_tls says, by file. */
struct ig_servertls_files {
	const char *cert_file, *key_file, *client_ca_file, *priorities;
	bool tickets;   /* session tickets (server_tls.session_tickets), taken at open */
};

/* Every problem of the files and settings, each named by its key, added
 * to errs (ig_flags_problem); nothing kept. */
void ig_servertls_check(const struct ig_servertls_files *f, struct ig_buf *errs);

/* The credentials f names, read and checked. NULL with *err (the problems,
 * one per line) when they cannot be used. */
struct ig_servertls *ig_servertls_open(const struct ig_servertls_files *f, char **err);

/* Reads f's files again (SIGHUP): new connections get the new credentials.
 * On any problem the running ones stay; -1 with *err. The priorities are
 * the daemon's and stay those it started with. */
int ig_servertls_reload(struct ig_servertls *t, const struct ig_servertls_files *f, char **err);

/* A reload refused before it got to the files (the new configuration
 * names bad ones: conf.c checked them): counted as a failed one. */
void ig_servertls_reload_refused(struct ig_servertls *t);

void ig_servertls_free(struct ig_servertls *t);

/* libmicrohttpd's options for a TLS daemon (MHD_OPTION_ARRAY's items, END
 * included); the texts stay valid until the next reload. */
const struct MHD_OptionItem *ig_servertls_mhd_options(struct ig_servertls *t);

/* A connection of a TLS daemon starts and ends (MHD_NOTIFY_CONNECTION);
 * *socket_context is this module's from started to closed. */
void ig_servertls_conn_started(struct ig_servertls *t, struct MHD_Connection *conn, void **socket_context);
void ig_servertls_conn_closed(struct ig_servertls *t, void **socket_context);

struct ig_servertls_stats {
	uint64_t handshakes_ok;
	uint64_t handshakes_failed; /* connections closed after a ClientHello, before their handshake ended */
	uint64_t not_tls;           /* closed before a ClientHello: plain HTTP, garbage, a TCP check */
	uint64_t reloads_ok, reloads_failed;
	int64_t not_after;      /* the current certificate's expiry, Unix seconds */
	char serial[80];        /* its serial number, hex */
	bool client_certs;      /* a client certificate is required */
};
void ig_servertls_stats(const struct ig_servertls *t, struct ig_servertls_stats *out);

#endif
