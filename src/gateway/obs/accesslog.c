/* Access log file handling. What goes into a line is decided by the caller
 * (server.c, proxy.c); secrets such as Authorization never reach here. */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "conf/conf.h"
#include "conf/peer.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "obs/accesslog.h"

static int open_path(const char *path)
{
	if (strcmp(path, "-") == 0)
		return dup(STDOUT_FILENO);
	return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

int ig_accesslog_open(struct ig_accesslog *log, const char *path, char **err)
{
	log->fd = -1;
	log->path = NULL;
	if (!path || !*path)
		return 0;
	log->fd = open_path(path);
	if (log->fd < 0) {
		*err = ig_strdupf("access_log: cannot open '%s': %s", path, strerror(errno));
		return -1;
	}
	log->path = strdup(path);
	return 0;
}

void ig_accesslog_reopen(struct ig_accesslog *log)
{
	if (!log->path)
		return;
	int fd = open_path(log->path);
	if (fd < 0) {
		ig_log_error("access_log: cannot reopen '%s': %s; still writing to the old file", log->path,
			     strerror(errno));
		return;
	}
	close(log->fd);
	log->fd = fd;
	ig_log_info("access_log: reopened %s", log->path);
}

void ig_accesslog_close(struct ig_accesslog *log)
{
	if (log->fd >= 0)
		close(log->fd);
	free(log->path);
	log->fd = -1;
	log->path = NULL;
}

void ig_accesslog_write(struct ig_accesslog *log, json_t *entry)
{
	if (log->fd >= 0) {
		char *s = json_dumps(entry, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
		if (s) {
			size_t n = strlen(s);
			s[n] = '\n'; /* overwrite the NUL: one write for the whole line */
			if (write(log->fd, s, n + 1) < 0 && errno != EAGAIN)
				ig_log_warn("access_log: write failed: %s", strerror(errno));
			free(s);
		}
	}
	json_decref(entry);
}

void ig_accesslog_local(struct ig_accesslog *log, struct MHD_Connection *conn, const char *method, const char *url,
			unsigned status, size_t bytes_out)
{
	char client[64], ts[40];
	if (log->fd < 0)
		return;
	snprintf(client, sizeof(client), "%s", ig_peer_client(conn)); /* the believed one (peer.h) */
	ig_iso_time(ts, sizeof(ts));
	ig_accesslog_write(log, json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "time", ts, "client", client, "method",
					  method, "path", url, "status", (json_int_t)status, "bytes_out",
					  (json_int_t)bytes_out));
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag accesslog_rows[] = {
	{.name = "--access-log", .key = "access_log", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(access_log), .def = "",
	 .metavar = "FILE", .help = "JSON line per request to this file ('-' = stdout; reopened on SIGUSR1)"},
};
const struct ig_conf_part ig_accesslog_conf = IG_CONF_PART(accesslog_rows);
