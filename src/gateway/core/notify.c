/* The gateway's side of systemd's readiness protocol (Type=notify): one
 * call per change of state, sent with libsystemd's sd_notify so the
 * protocol (the socket, abstract names, credentials) is libsystemd's, not
 * ours. Built without libsystemd (configure --with-systemd=no, or no
 * libsystemd-dev), every call does nothing. Not here: deciding when the
 * gateway is ready (the reactor calls these at the moments it knows). */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "core/notify.h"
#include "infergate/log.h"
#include "infergate/util.h"

#ifdef HAVE_SYSTEMD
/* head, then STATUS= with the formatted text (newlines would end it early:
 * they become spaces). */
static void send_state(const char *head, const char *fmt, va_list ap)
{
	char status[512], msg[640];
	vsnprintf(status, sizeof(status), fmt, ap);
	for (char *p = status; (p = strchr(p, '\n')) != NULL;)
		*p = ' ';
	snprintf(msg, sizeof(msg), "%s\nSTATUS=%s", head, status);
	int rc = sd_notify(0, msg);
	if (rc < 0)
		ig_log_debug("sd_notify: %s", strerror(-rc));
}
#else
static void send_state(const char *head IG_UNUSED, const char *fmt IG_UNUSED,
		       va_list ap IG_UNUSED) {}
#endif

void ig_notify_ready(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	send_state("READY=1", fmt, ap);
	va_end(ap);
}

void ig_notify_reloading(const char *fmt, ...)
{
	char head[64];
	va_list ap;
	snprintf(head, sizeof(head), "RELOADING=1\nMONOTONIC_USEC=%llu", (unsigned long long)ig_now_us());
	va_start(ap, fmt);
	send_state(head, fmt, ap);
	va_end(ap);
}

void ig_notify_stopping(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	send_state("STOPPING=1", fmt, ap);
	va_end(ap);
}
