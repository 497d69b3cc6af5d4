/* A request's way in, once its head is read: the checks made before its
 * body (a client over max_connections_per_ip, ambiguous framing, a body
 * declared far over the limit), then routing it: the gateway's own
 * endpoints answered at once (health, models, metrics, the status page),
 * keys checked, admin bodies read for admin.c, the Files and Batch APIs
 * given their calls, and each proxied request its request object
 * (proxy.c). Errors decided before the body is read wait in *con_cls
 * (struct deferred) until MHD has dropped the body. Moved out of server.c,
 * which keeps the connections: accepting, the reactors' daemons, the
 * watch on each client's socket.
 * Not here: the MHD callbacks, the client's connection (server.c). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/admin.h"
#include "api/batches.h"
#include "api/files.h"
#include "api/metrics.h"
#include "conf/peer.h"
#include "core/entry.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "path/answer.h"
#include "path/proxy.h"

/* How far past max_body_bytes a declared body is still read (and dropped). */
#define DISCARD_BYTES (1024L * 1024)
/* Admin bodies are small JSON objects. */
#define MAX_ADMIN_BODY (64 * 1024)

/* server.c's: a new request object told of its client's hang-up. */
static void (*told_hangup)(struct MHD_Connection *conn, struct ig_call *call);

/* The status page, generated from src/gateway/api/status.html at build time. */
extern const unsigned char ig_status_html[];
extern const size_t ig_status_html_len;

/* Errors decided before the body was read; MHD may not answer mid-body,
 * so the body is dropped first and *con_cls points to one of these. */
struct deferred {
	struct ig_call call; /* answer_deferred */
	unsigned status;
	const char *message, *code;
	const char *allow; /* a 405's Allow header */
};
static enum MHD_Result answer_deferred(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
				       const char *url, const char *method, const char *upload_data,
				       size_t *upload_data_size, void **con_cls);
#define DEFERRED(status, message, code) {{answer_deferred, NULL, NULL}, status, message, code, NULL}
/* Made from the route table when the server starts (ig_server_start):
 * routes are fixed from then on. */
static char not_found_msg[4096];
static struct deferred not_found = DEFERRED(404, not_found_msg, "not_found");
static char wrong_method_msg[IG_MAX_ROUTES][96], wrong_method_allow[IG_MAX_ROUTES][40];
static struct deferred wrong_method[IG_MAX_ROUTES];
static const struct deferred get_only = {{answer_deferred, NULL, NULL}, 405, "this endpoint only answers GET",
					 "method_not_allowed", "GET, HEAD"};
static const struct deferred stopping = DEFERRED(503, "the gateway is shutting down", "shutting_down");
static const struct deferred no_key = DEFERRED(401, "missing or invalid API key (send Authorization: Bearer KEY, "
	"or x-api-key: KEY)", "invalid_api_key");
static const struct deferred disabled_key = DEFERRED(401, "this API key is disabled", "api_key_disabled");
static const struct deferred no_status_right = DEFERRED(403, "this API key may not read the status endpoints "
	"(auth_status): they take an admin key, or a key given \"status\": true in the keys file",
	"insufficient_permissions");
static const struct deferred no_admin_key = DEFERRED(401, "the admin API needs the admin key "
	"(Authorization: Bearer ADMIN_KEY)", "invalid_api_key");
static const struct deferred files_off = DEFERRED(404, "the Files API is off on this gateway (it needs data_dir)",
	"not_found");
static const struct deferred batches_off = DEFERRED(404, "the Batch API is off on this gateway (it needs data_dir)",
	"not_found");
static const struct deferred admin_off = DEFERRED(403, "the admin API is off: set admin_keys_file to enable it",
	"admin_disabled");
static const struct deferred not_public = DEFERRED(404, "not served on this address: the admin API, /metrics and the "
	"status page are on the admin listener (admin_listen)", "not_found");
static const struct deferred not_admin = DEFERRED(404, "the admin listener serves the admin API, /metrics, the status "
	"page and the health routes; the API is on the listen address", "not_found");
static const struct deferred over_ip_cap = DEFERRED(429, "too many requests at once from this client address "
	"(max_connections_per_ip)", "too_many_connections");

/* "Headers seen, not routed yet": kept in *con_cls between the first call
 * (answering then would make MHD close the connection) and the second;
 * one for each door the request came in by. */
static enum MHD_Result route(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
			     const char *url, const char *method, const char *upload_data, size_t *upload_data_size,
			     void **con_cls);
struct first_call {
	struct ig_call call; /* route */
	enum ig_door door;
};
static struct first_call first_calls[] = {
	[IG_DOOR_PUBLIC] = {{route, NULL, NULL}, IG_DOOR_PUBLIC},
	[IG_DOOR_ADMIN] = {{route, NULL, NULL}, IG_DOOR_ADMIN},
	[IG_DOOR_INTERNAL] = {{route, NULL, NULL}, IG_DOOR_INTERNAL},
};

/* An /admin request whose body is being read. */
struct admin_req {
	struct ig_call call; /* admin_body, admin_free */
	struct ig_buf body;
	bool too_large;
};

/* Access log line for an answer that did not involve a backend. */
static void log_local(struct ig_gw *gw, struct MHD_Connection *conn, const char *method, const char *url,
		      unsigned status, size_t bytes_out)
{
	ig_accesslog_local(&gw->alog, conn, method, url, status, bytes_out);
}

/* An error the gateway answers itself, before any proxying: counted and
 * logged like every local answer (answer.h). */
static enum MHD_Result local_error(struct ig_gw *gw, struct MHD_Connection *conn, const char *method,
				   const char *url, unsigned status, const char *message, const char *code,
				   const char *allow, bool close)
{
	return ig_answer_error(&(struct ig_answer_to){gw, conn, method, url}, status, NULL, code, allow, close, message);
}

/* Request framing that a proxy must refuse (RFC 9112 6.1, 6.3, 5): more
 * than one Content-Length, Content-Length with Transfer-Encoding, a
 * Transfer-Encoding other than "chunked", a folded header line (obs-fold,
 * 5.2), or a header name that is not a token or a value with control
 * characters. Refused before any body byte is read, with the connection
 * closed, so that no byte of an ambiguous message can be taken for a
 * request of its own. */
struct framing {
	int content_lengths, transfer_encodings, bad;
	const char *why;
};

static int is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Whether a header came from more than one line. libmicrohttpd 0.9.75
 * (Debian 12's) joins an obs-fold's continuation onto the header's NAME,
 * in a block of its own, and keeps the value of the first line:
 * "Transfer-Encoding: chunked\r\n x" becomes "Transfer-Encodingx: chunked",
 * a request with no body whose chunks would be read as the next request.
 * It cannot be told from the name; but a header parsed from one line keeps
 * its value in that line, right after the name's end (its colon, now a NUL)
 * and blanks: a value anywhere else, or a name starting with a blank (a
 * fold of the request line), is a fold. Later versions replace a fold by
 * spaces inside the value, as RFC 9112 5.2 allows, or refuse it. */
static bool folded(const char *key, size_t key_size, const char *value)
{
	if (*key == ' ' || *key == '\t')
		return true;
	/* as addresses: the two may lie in different blocks of MHD's pool */
	uintptr_t at = (uintptr_t)value, after_name = (uintptr_t)key + key_size + 1;
	if (at < after_name)
		return true;
	for (const char *p = key + key_size + 1; (uintptr_t)p < at; p++) /* stops at the first non-blank */
		if (*p != ' ' && *p != '\t')
			return true;
	return false;
}

static enum MHD_Result check_header(void *cls, enum MHD_ValueKind kind IG_UNUSED, const char *key,
				    size_t key_size, const char *value, size_t value_size IG_UNUSED)
{
	struct framing *f = cls;
	if (key && value && folded(key, key_size, value)) {
		f->bad = 1;
		f->why = "a folded header line (obs-fold)";
		return MHD_NO;
	}
	if (!key || !*key) {
		f->bad = 1;
		f->why = "empty header name";
		return MHD_YES;
	}
	for (const unsigned char *p = (const unsigned char *)key; *p; p++)
		if (!is_tchar(*p)) {
			f->bad = 1;
			f->why = "a header name that is not a token";
			return MHD_YES;
		}
	for (const unsigned char *p = (const unsigned char *)(value ? value : ""); *p; p++)
		if ((*p < 0x20 && *p != '\t') || *p == 0x7f) {
			f->bad = 1;
			f->why = "a control character in a header value";
			return MHD_YES;
		}
	if (strcasecmp(key, "Content-Length") == 0)
		f->content_lengths++;
	if (strcasecmp(key, "Transfer-Encoding") == 0) {
		f->transfer_encodings++;
		if (!value || strcasecmp(value, "chunked") != 0) {
			f->bad = 1;
			f->why = "a Transfer-Encoding other than chunked";
		}
	}
	return MHD_YES;
}

static const char *bad_framing(struct MHD_Connection *conn)
{
	struct framing f = {0, 0, 0, NULL};
	MHD_get_connection_values_n(conn, MHD_HEADER_KIND, check_header, &f);
	if (f.bad)
		return f.why;
	if (f.content_lengths > 1)
		return "more than one Content-Length";
	if (f.transfer_encodings > 1)
		return "more than one Transfer-Encoding";
	if (f.content_lengths && f.transfer_encodings)
		return "both Content-Length and Transfer-Encoding";
	return NULL;
}

/* Answers a deferred error once the body (if any) has been read. */
static enum MHD_Result answer_deferred(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
				       const char *url, const char *method, const char *upload_data IG_UNUSED,
				       size_t *upload_data_size, void **con_cls)
{
	const struct deferred *d = IG_CONTAINER_OF(call, const struct deferred, call);
	if (*upload_data_size) {
		*upload_data_size = 0;
		*con_cls = call;
		return MHD_YES;
	}
	*con_cls = NULL;
	return local_error(gw, conn, method, url, d->status, d->message, d->code, d->allow, false);
}

static enum MHD_Result defer(const struct deferred *d, struct ig_gw *gw, struct MHD_Connection *conn,
			     const char *url, const char *method, size_t *upload_data_size, void **con_cls)
{
	return answer_deferred((struct ig_call *)&d->call, gw, conn, url, method, NULL, upload_data_size, con_cls);
}

static enum MHD_Result send_body(struct ig_gw *gw, struct MHD_Connection *conn, const char *method,
				 const char *url, unsigned status, const char *ctype, void *body, size_t len,
				 enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	MHD_add_response_header(r, "Content-Type", ctype);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	return ig_answer(&(struct ig_answer_to){gw, conn, method, url}, status, r, len);
}

/* The entry of the connection's bearer key in ks, or NULL (a disabled
 * key too: *disabled says so). */
static const struct ig_keyent *key_of(const struct ig_keyset *ks, struct MHD_Connection *conn, bool *disabled)
{
	const struct ig_keyent *e = ig_keyset_check(ks, MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
										 "Authorization"));
	*disabled = e && e->disabled;
	return *disabled ? NULL : e;
}

/* What admin_listen moves off the listen address: the admin API,
 * /metrics and the status page (with its history). */
static bool admin_only(const char *url)
{
	return strncmp(url, "/admin/", 7) == 0 || strcmp(url, "/admin") == 0 || strcmp(url, "/metrics") == 0 ||
	       strcmp(url, "/") == 0 || strcmp(url, "/status") == 0 || strcmp(url, "/status/history") == 0;
}

/* The health routes, served at every door. */
static bool health_path(const char *url)
{
	return strcmp(url, "/health") == 0 || strcmp(url, "/health/backends") == 0 ||
	       strcmp(url, "/health/capacity") == 0;
}

/* With auth_status, who may read the status endpoints (every key's names,
 * limits and token counts): an admin key, or an API key given the status
 * right; a tenant's own key is not enough. 0 it may, 2 no key (or an
 * unknown one), 3 a disabled key, 4 a key without the right. */
static int status_reader(const struct ig_gw *gw, struct MHD_Connection *conn)
{
	bool admin_disabled, api_disabled;
	if (key_of(&gw->admin_keys, conn, &admin_disabled))
		return 0;
	const struct ig_keyent *e = key_of(&gw->api_keys, conn, &api_disabled);
	if (e)
		return e->status ? 0 : 4;
	return admin_disabled || api_disabled ? 3 : 2;
}

/* The gateway's own GET endpoints: 0 answered, 1 wrong method, 2 needs a
 * key, 3 the key is disabled, 4 the key may not read it, -1 not one of
 * them. */
static int local_endpoint(struct ig_gw *gw, struct MHD_Connection *conn, const char *path,
			  const char *method, enum MHD_Result *ret)
{
	unsigned status = 200;
	char *body;
	const char *ctype = "application/json";
	int is_status = strcmp(path, "/") == 0 || strcmp(path, "/status") == 0;
	int watch = is_status || strcmp(path, "/health/backends") == 0 || strcmp(path, "/health/capacity") == 0 ||
		    strcmp(path, "/metrics") == 0 || strcmp(path, "/status/history") == 0;

	if (!watch && strcmp(path, "/health") != 0 && strcmp(path, "/v1/models") != 0)
		return -1;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return 1;
	/* /health stays open for load balancers; the model list is API, and
	 * shows a key the models it may use. */
	const struct ig_keyent *key = NULL;
	if (gw->api_keys.enabled && strcmp(path, "/v1/models") == 0) {
		bool disabled;
		if (!(key = key_of(&gw->api_keys, conn, &disabled)))
			return disabled ? 3 : 2;
	}
	int who;
	if (watch && gw->cfg->auth_status && (who = status_reader(gw, conn)) != 0)
		return who;
	if (is_status) {
		*ret = send_body(gw, conn, method, path, 200, "text/html; charset=utf-8", (void *)ig_status_html,
				 ig_status_html_len, MHD_RESPMEM_PERSISTENT);
		return 0;
	}
	if (strcmp(path, "/health") == 0) {
		body = ig_metrics_health_json(gw, &status);
	} else if (strcmp(path, "/health/backends") == 0) {
		body = ig_metrics_backends_json(gw);
	} else if (strcmp(path, "/health/capacity") == 0) {
		body = ig_metrics_capacity_json(gw);
	} else if (strcmp(path, "/status/history") == 0) {
		body = ig_metrics_history_json(gw);
	} else if (strcmp(path, "/v1/models") == 0) {
		body = ig_metrics_models_json(gw, key);
	} else {
		body = ig_metrics_text(gw);
		ctype = "text/plain; version=0.0.4; charset=utf-8";
	}
	*ret = send_body(gw, conn, method, path, status, ctype, body, strlen(body), MHD_RESPMEM_MUST_FREE);
	return 0;
}

static enum MHD_Result admin_body(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
				  const char *url, const char *method, const char *upload_data,
				  size_t *upload_data_size, void **con_cls IG_UNUSED)
{
	struct admin_req *ar = IG_CONTAINER_OF(call, struct admin_req, call);
	if (*upload_data_size) {
		if (ar->body.len + *upload_data_size > MAX_ADMIN_BODY)
			ar->too_large = true;
		else if (ig_buf_append(&ar->body, upload_data, *upload_data_size) < 0)
			return MHD_NO;
		*upload_data_size = 0;
		return MHD_YES;
	}
	enum MHD_Result ret;
	if (ar->too_large)
		ret = ig_httpd_error(conn, 413, "admin bodies are small JSON objects", NULL, "request_too_large", NULL,
				     false);
	else
		ret = ig_admin_handle(gw, conn, method, url, ar->body.data, ar->body.len);
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_HTTP_STATUS);
	unsigned status = ci ? ci->http_status : 0;
	if (status >= 100 && status < 600)
		gw->stats.responses[status / 100]++;
	log_local(gw, conn, method, url, status, 0);
	return ret;
}

static void admin_free(struct ig_call *call, enum MHD_RequestTerminationCode toe IG_UNUSED)
{
	struct admin_req *ar = IG_CONTAINER_OF(call, struct admin_req, call);
	ig_buf_free(&ar->body);
	free(ar);
}

/* The admin API's paths, and the Batch API's. */
static bool admin_path(const char *url)
{
	return strncmp(url, "/admin/", 7) == 0 || strcmp(url, "/admin") == 0;
}

/* With admin_listen, each listener answers its own part: 404 for the
 * other's (the health routes at both). The gateway's own connection to
 * itself is the listen address's. */
static bool wrong_door(const struct ig_gw *gw, enum ig_door door, const char *url)
{
	if (!gw->cfg->admin_listen_host) /* (its socket is closed at SIGTERM: the rule stays) */
		return false;
	if (door == IG_DOOR_ADMIN)
		return !admin_only(url) && !health_path(url);
	return admin_only(url);
}

static bool batches_path(const char *url)
{
	return strcmp(url, "/v1/batches") == 0 || strncmp(url, "/v1/batches/", 12) == 0;
}

/* The second call: the request's path and method decide who answers. */
static enum MHD_Result route(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
			     const char *url, const char *method, const char *upload_data, size_t *upload_data_size,
			     void **con_cls)
{
	enum MHD_Result ret;
	const char *id = NULL;
	size_t idn = 0;
	int route_idx = ig_routes_match(&gw->cfg->routes, url, &id, &idn);
	enum ig_door door = IG_CONTAINER_OF(call, struct first_call, call)->door;

	*con_cls = NULL;
	if (wrong_door(gw, door, url))
		return defer(door == IG_DOOR_ADMIN ? &not_admin : &not_public, gw, conn, url, method, upload_data_size,
			     con_cls);
	if (admin_path(url)) {
		if (!gw->admin_keys.enabled)
			return defer(&admin_off, gw, conn, url, method, upload_data_size, con_cls);
		bool disabled;
		if (!key_of(&gw->admin_keys, conn, &disabled))
			return defer(disabled ? &disabled_key : &no_admin_key, gw, conn, url, method, upload_data_size,
				     con_cls);
		struct admin_req *ar = calloc(1, sizeof(*ar));
		if (!ar)
			return MHD_NO;
		ar->call = (struct ig_call){admin_body, admin_free, NULL};
		ig_buf_init(&ar->body);
		*con_cls = &ar->call;
		return admin_body(&ar->call, gw, conn, url, method, upload_data, upload_data_size, con_cls);
	}
	bool batches = batches_path(url);
	if (batches || strcmp(url, "/v1/files") == 0 || strncmp(url, "/v1/files/", 10) == 0) {
		char owner[2 * IG_DIGEST_LEN + 1] = "";
		if (!gw->files)
			return defer(batches ? &batches_off : &files_off, gw, conn, url, method, upload_data_size, con_cls);
		if (gw->api_keys.enabled) { /* a file is its key's */
			bool disabled;
			const struct ig_keyent *e = key_of(&gw->api_keys, conn, &disabled);
			if (!e)
				return defer(disabled ? &disabled_key : &no_key, gw, conn, url, method, upload_data_size,
					     con_cls);
			ig_keyset_hex(e->digest, owner);
		}
		struct ig_call *fc = batches ? ig_batches_call(gw, conn, url, method, owner)
					     : ig_files_call(gw, conn, url, method, owner);
		if (!fc)
			return MHD_NO;
		*con_cls = fc;
		return fc->on_request(fc, gw, conn, url, method, upload_data, upload_data_size, con_cls);
	}
	if (route_idx < 0) {
		switch (local_endpoint(gw, conn, url, method, &ret)) {
		case 0:
			return ret;
		case 1:
			return defer(&get_only, gw, conn, url, method, upload_data_size, con_cls);
		case 2:
			return defer(&no_key, gw, conn, url, method, upload_data_size, con_cls);
		case 3:
			return defer(&disabled_key, gw, conn, url, method, upload_data_size, con_cls);
		case 4:
			return defer(&no_status_right, gw, conn, url, method, upload_data_size, con_cls);
		default:
			return defer(&not_found, gw, conn, url, method, upload_data_size, con_cls);
		}
	}
	unsigned m = ig_routes_method(method);
	if (!(m & ig_gw_route(gw->cfg, route_idx)->flags))
		return defer(&wrong_method[route_idx], gw, conn, url, method, upload_data_size, con_cls);
	/* The key is hashed once: the digest names it for the scheduler too.
	 * A batch's own request (batches.c) carries its owner's digest, and is
	 * believed only on the gateway's own socket: elsewhere the header is
	 * a client's, ignored here and not passed upstream (proxy.c). */
	unsigned char d[IG_DIGEST_LEN];
	char owner[2 * IG_DIGEST_LEN + 1];
	bool has_bearer;
	if (door == IG_DOOR_INTERNAL &&
	    ig_batches_internal(gw->batches, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, IG_BATCH_HEADER), owner))
		has_bearer = *owner && ig_keyset_unhex(owner, d) == 0;
	else
		has_bearer = ig_keyset_client_digest(MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
						     MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key"), d) == 0;
	if (gw->api_keys.enabled) {
		const struct ig_keyent *e = has_bearer ? ig_keyset_find(&gw->api_keys, d) : NULL;
		if (!e)
			return defer(&no_key, gw, conn, url, method, upload_data_size, con_cls);
		if (e->disabled)
			return defer(&disabled_key, gw, conn, url, method, upload_data_size, con_cls);
	}
	if (gw->stopping)
		return defer(&stopping, gw, conn, url, method, upload_data_size, con_cls);
	struct ig_req *req = ig_proxy_req_new(gw, conn, route_idx, m, id, idn);
	if (!req)
		return MHD_NO;
	if (has_bearer && (gw->api_keys.enabled || gw->cfg->scheduling == 0))
		ig_keyset_hex(d, req->adm.key_id);
	*con_cls = &req->call;
	/* its client may have hung up already, with the whole request sent:
	 * nothing is run for it (server.c's watch knows) */
	told_hangup(conn, &req->call);
	return req->call.on_request(&req->call, gw, conn, url, method, upload_data, upload_data_size, con_cls);
}

/* The answers for a path no route takes and for a route's wrong method,
 * and the hook that tells a new request of a hang-up. */
void ig_entry_start(const struct ig_conf *cfg, void (*hangup)(struct MHD_Connection *conn, struct ig_call *call))
{
	told_hangup = hangup;
	size_t at = (size_t)snprintf(not_found_msg, sizeof(not_found_msg), "unknown path; this gateway serves");
	for (size_t i = 0; i < cfg->routes.n && at < sizeof(not_found_msg); i++)
		at += (size_t)snprintf(not_found_msg + at, sizeof(not_found_msg) - at, " %s,", cfg->routes.v[i].path);
	if (at < sizeof(not_found_msg))
		snprintf(not_found_msg + at, sizeof(not_found_msg) - at,
			 " /v1/models, /health, /health/backends, /health/capacity, /metrics, /status");
	for (size_t i = 0; i < cfg->routes.n; i++) {
		ig_routes_allow(&cfg->routes.v[i], wrong_method_allow[i], sizeof(wrong_method_allow[i]));
		snprintf(wrong_method_msg[i], sizeof(wrong_method_msg[i]), "this endpoint takes %.39s",
			 wrong_method_allow[i]);
		wrong_method[i] = (struct deferred)DEFERRED(405, wrong_method_msg[i], "method_not_allowed");
		wrong_method[i].allow = wrong_method_allow[i];
	}
}

enum MHD_Result ig_entry_head(struct ig_gw *gw, enum ig_door door, struct MHD_Connection *conn, const char *url,
			      const char *method, bool over_ip_cap_now, void **con_cls)
{
if (over_ip_cap_now) {
	*con_cls = (void *)&over_ip_cap.call;
	return MHD_YES;
}
	const char *why = bad_framing(conn);
	if (why) {
		char msg[160];
		snprintf(msg, sizeof(msg), "malformed request: %s", why);
		return local_error(gw, conn, method, url, 400, msg, "bad_request", NULL, true);
	}
	/* A body far over the limit is refused from its declared length,
	 * unread; MHD then closes the connection. One only a little over
	 * is read and dropped (proxy.c), so the client is not reset while
	 * still sending and sees the 413. */
	const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	bool upload = strcmp(url, "/v1/files") == 0; /* its own limit, checked as it is written */
	long limit = upload ? gw->cfg->files_max_bytes : gw->cfg->max_body_bytes;
	if (cl && strtoll(cl, NULL, 10) > limit + DISCARD_BYTES && strcmp(method, "POST") == 0) {
		char msg[128];
		snprintf(msg, sizeof(msg), "the request body is larger than %ld bytes%s", limit,
			 upload ? " (files.max_bytes)" : "");
		return local_error(gw, conn, method, url, 413, msg, "request_too_large", NULL, false);
	}
	*con_cls = &first_calls[door].call;
	return MHD_YES;
}
