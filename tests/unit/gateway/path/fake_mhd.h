/* A fake client connection for the path's unit tests: libmicrohttpd's
 * per-connection calls (suspend, resume, a request header, queueing the
 * answer) defined here, in the test program, take the place of the
 * library's for the gateway's code linked into it; what the exchange did
 * to its connection is recorded. MHD's responses stay the library's own
 * (built, their headers read, destroyed). No daemon, no socket. */
#ifndef IG_TEST_FAKE_MHD_H
#define IG_TEST_FAKE_MHD_H

#include <stdio.h>
#include <string.h>

#include <microhttpd.h>

struct fake_conn {
	const char *idem_key;     /* its Idempotency-Key header, or NULL */
	const char *traceparent, *tracestate; /* its trace context headers, or NULL */
	int suspends, resumes;    /* MHD_suspend_connection / MHD_resume_connection calls */
	int queued;               /* answers queued */
	unsigned status;          /* the last one's */
	char headers[2048];       /* its headers, "Name: value\n" each */
	struct MHD_Response *resp; /* valid only inside MHD_queue_response */
};

#define FAKE_CONN(fc) ((struct MHD_Connection *)(void *)(fc))

void MHD_suspend_connection(struct MHD_Connection *connection)
{
	((struct fake_conn *)(void *)connection)->suspends++;
}

void MHD_resume_connection(struct MHD_Connection *connection)
{
	((struct fake_conn *)(void *)connection)->resumes++;
}

const union MHD_ConnectionInfo *MHD_get_connection_info(struct MHD_Connection *connection, enum MHD_ConnectionInfoType info_type,
							 ...)
{
	(void)connection;
	(void)info_type;
	return NULL;
}

const char *MHD_lookup_connection_value(struct MHD_Connection *connection, enum MHD_ValueKind kind, const char *key)
{
	struct fake_conn *fc = (struct fake_conn *)(void *)connection;
	if (!fc || kind != MHD_HEADER_KIND)
		return NULL;
	if (strcasecmp(key, "Idempotency-Key") == 0)
		return fc->idem_key;
	if (strcasecmp(key, "traceparent") == 0)
		return fc->traceparent;
	if (strcasecmp(key, "tracestate") == 0)
		return fc->tracestate;
	return NULL;
}

static enum MHD_Result fake_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	struct fake_conn *fc = cls;
	size_t n = strlen(fc->headers);
	(void)kind;
	snprintf(fc->headers + n, sizeof(fc->headers) - n, "%s: %s\n", key, value);
	return MHD_YES;
}

enum MHD_Result MHD_queue_response(struct MHD_Connection *connection, unsigned int status_code,
				   struct MHD_Response *response)
{
	struct fake_conn *fc = (struct fake_conn *)(void *)connection;
	fc->queued++;
	fc->status = status_code;
	fc->headers[0] = '\0';
	MHD_get_response_headers(response, fake_header, fc);
	return MHD_YES;
}

/* Whether the last answer queued had "Name: value". */
static inline int fake_has_header(const struct fake_conn *fc, const char *line)
{
	char want[256];
	snprintf(want, sizeof(want), "%s\n", line);
	return strstr(fc->headers, want) != NULL;
}

#endif
