/* Telling the service manager (systemd, Type=notify) where the gateway is
 * in its life: ready, reloading, stopping. */
#ifndef IG_NOTIFY_H
#define IG_NOTIFY_H

/* Each sends its state with a STATUS= line (a printf format) through
 * sd_notify(3) when $NOTIFY_SOCKET is set and the build found libsystemd;
 * otherwise it does nothing. A failure to send is logged (debug) and
 * otherwise ignored: the gateway serves the same either way. */

/* The configuration is valid, the port bound and the HTTP server started:
 * READY=1. Also the end of a reload, taken or refused. */
void ig_notify_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* SIGHUP: a reload begins (RELOADING=1 and MONOTONIC_USEC=, which systemd
 * 253's Type=notify-reload wants). */
void ig_notify_reloading(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A graceful stop begins: STOPPING=1. */
void ig_notify_stopping(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
