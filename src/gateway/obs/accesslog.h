/* The access log: one JSON object per line, one write(2) per line, so lines
 * never interleave and a crash leaves at most one torn line. */
#ifndef IG_ACCESSLOG_H
#define IG_ACCESSLOG_H

#include <jansson.h>

struct ig_accesslog {
	int fd;       /* -1 when off */
	char *path;   /* NULL when off; "-" is stdout */
};

/* Opens path for appending ("" = off). Returns 0 or -1 with *err. */
int ig_accesslog_open(struct ig_accesslog *log, const char *path, char **err);
/* Reopens the same path (after logrotate moved it); logs and keeps the old
 * descriptor on failure. */
void ig_accesslog_reopen(struct ig_accesslog *log);
void ig_accesslog_close(struct ig_accesslog *log);
/* Writes entry as one line and releases it. */
void ig_accesslog_write(struct ig_accesslog *log, json_t *entry);
/* The line of an answer the gateway gave itself (no backend). */
struct MHD_Connection;
void ig_accesslog_local(struct ig_accesslog *log, struct MHD_Connection *conn, const char *method, const char *url,
			unsigned status, size_t bytes_out);

#endif
