/* Runtime control: the admin API (list, add, drain, enable, remove
 * backends). A removed backend is drained first: it takes no new request,
 * those in flight finish, then it leaves the table (ig_health_reap). It runs
 * on whichever reactor holds the client's connection, under gw->lock; what
 * acts on reactor 0's own objects (a removed backend's probe transfer) is
 * posted to reactor 0, which runs it at the end of its turn.
 * Not here: reading the body and the admin key check (server.c), SIGHUP
 * reloads (reload.c), health (health.c). */
#include "config.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/admin.h"
#include "api/metrics.h"
#include "conf/conf.h"
#include "fleet/health.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/rx.h"

/* Queues a JSON text (malloc'd; MHD frees it). */
static enum MHD_Result send_text(struct MHD_Connection *conn, unsigned status, char *s)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	enum MHD_Result ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *conn, unsigned status, json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(j);
	return send_text(conn, status, s);
}

/* Reactor 0's job: the backends marked for removal that have nothing in
 * flight leave the table, and their probes (transfers in its multi) end. */
static void reap(struct ig_rx_job *job)
{
	ig_health_reap(IG_CONTAINER_OF(job, struct ig_gw, reap_job));
}

static enum MHD_Result backend_answer(const struct ig_gw *gw, struct MHD_Connection *conn, unsigned status,
				       struct ig_backend *b)
{
	return send_json(conn, status, ig_metrics_backend_json(gw->cluster_view, b, ig_now_ms()));
}

/* A "models" value: a non-empty list of distinct model names, or null /
 * absent (learn them). Returns the count, or -1 with msg set; *out holds
 * borrowed strings of v (free the array only). */
static long models_from_json(json_t *v, const char ***out, char *msg, size_t msglen)
{
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) == 0) {
		snprintf(msg, msglen, "models must be a non-empty list of model names, or null to learn them");
		return -1;
	}
	size_t n = json_array_size(v);
	const char **names = calloc(n, sizeof(*names));
	if (!names)
		abort();
	for (size_t i = 0; i < n; i++) {
		const char *m = json_string_value(json_array_get(v, i)), *why = m ? ig_conf_bad_model_name(m) : "not a string";
		for (size_t j = 0; j < i && !why; j++)
			if (strcmp(names[j], m) == 0)
				why = "listed twice";
		if (why) {
			snprintf(msg, msglen, "models[%zu]: %s", i, why);
			free(names);
			return -1;
		}
		names[i] = m;
	}
	*out = names;
	return (long)n;
}

/* PUT /admin/backends/{id}/models {"models": [...] | null}: the models it
 * serves from now on (null: learned from its /v1/models). Requests in
 * flight are not disturbed; queued ones are placed by the new lists. */
static enum MHD_Result set_models(struct ig_gw *gw, struct MHD_Connection *conn, struct ig_backend *b,
				  const char *body, size_t len)
{
	char msg[512];
	const char **names;
	json_t *root = json_loadb(body ? body : "", len, 0, NULL);
	if (!json_is_object(root) || !json_object_get(root, "models")) {
		json_decref(root);
		return ig_httpd_error(conn, 400, "expected a JSON object {\"models\": [...] or null}", "models",
				       "invalid_body", NULL, false);
	}
	long n = models_from_json(json_object_get(root, "models"), &names, msg, sizeof(msg));
	int rc = n < 0 ? -1 : 0;
	for (int r = 0; rc == 0 && r < b->server->nranks; r++) /* a server's ranks serve the same */
		rc = ig_backend_set_models(ig_backend_rank(b->server, r), (char *const *)names, (size_t)n);
	if (rc < 0) {
		json_decref(root);
		free(names);
		return ig_httpd_error(conn, 400, n < 0 ? msg : "out of memory", "models", "invalid_value", NULL, false);
	}
	json_decref(root);
	free(names);
	gw->models_dirty = true;
	ig_log_info("admin: backend %s (id %d) serves %s", b->url, b->id,
		    n ? "the models given" : "the models it lists (learned)");
	return backend_answer(gw, conn, 200, b);
}

static enum MHD_Result add_backend(struct ig_gw *gw, struct MHD_Connection *conn, const char *body, size_t len)
{
	json_error_t jerr;
	json_t *root = json_loadb(body ? body : "", len, 0, &jerr);
	const char *why = NULL;
	char msg[512];
	enum MHD_Result ret;

	if (!json_is_object(root) || !json_is_string(json_object_get(root, "url"))) {
		json_decref(root);
		return ig_httpd_error(conn, 400,
				       "expected a JSON object {\"url\": ..., \"weight\"?, \"max_inflight\"?, \"models\"?}",
				       "url", "invalid_body", NULL, false);
	}
	json_t *w = json_object_get(root, "weight"), *m = json_object_get(root, "max_inflight");
	if ((w && (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > 1000)) ||
	    (m && (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) > 1000000))) {
		json_decref(root);
		return ig_httpd_error(conn, 400, "weight must be 1..1000 and max_inflight 0..1000000", NULL,
				       "invalid_value", NULL, false);
	}
	char *url = ig_conf_normalise_url(json_string_value(json_object_get(root, "url")), &why);
	if (!url) {
		snprintf(msg, sizeof(msg), "'%s' is not a valid backend URL (%s)",
			 json_string_value(json_object_get(root, "url")), why);
		json_decref(root);
		return ig_httpd_error(conn, 400, msg, "url", "invalid_url", NULL, false);
	}
	struct ig_backend *b = ig_backend_fleet_find_url(&gw->fleet, url);
	if (b && atomic_load(&b->admin) != IG_ADMIN_REMOVING) {
		snprintf(msg, sizeof(msg), "backend %s is already in the table (id %d)", url, b->id);
		free(url);
		json_decref(root);
		return ig_httpd_error(conn, 409, msg, "url", "duplicate_backend", NULL, false);
	}
	const char **names;
	long nm = models_from_json(json_object_get(root, "models"), &names, msg, sizeof(msg));
	if (nm < 0) {
		free(url);
		json_decref(root);
		return ig_httpd_error(conn, 400, msg, "models", "invalid_value", NULL, false);
	}
	long weight = w ? (long)json_integer_value(w) : 1;
	long maxin = m ? (long)json_integer_value(m) : gw->cfg->max_inflight;
	if (b) { /* being removed: keep it instead */
		b->weight = weight;
		b->max_inflight = maxin;
		for (int r = 0; r < b->nranks; r++)
			ig_backend_set_models(ig_backend_rank(b, r), (char *const *)names, (size_t)nm);
		free(names);
		json_decref(root);
		gw->models_dirty = true;
		ig_backend_server_admin(b, IG_ADMIN_ENABLED);
		ig_log_info("admin: backend %s (id %d) kept and enabled", url, b->id);
		free(url);
		return backend_answer(gw, conn, 200, b);
	}
	b = ig_backend_fleet_add(&gw->fleet, url, weight, maxin);
	free(url);
	int rc = b ? ig_backend_set_models(b, (char *const *)names, (size_t)nm) : -1;
	free(names);
	json_decref(root);
	if (rc < 0 || ig_health_add(gw, b) < 0)
		return ig_httpd_error(conn, 500, "out of memory", NULL, "internal_error", NULL, false);
	ig_log_info("admin: backend %s added (id %d), probing", b->url, b->id);
	ret = backend_answer(gw, conn, 201, b);
	return ret;
}

enum MHD_Result ig_admin_handle(struct ig_gw *gw, struct MHD_Connection *conn, const char *method,
				const char *url, const char *body, size_t len)
{
	const char *rest;
	char action[32] = "";
	int id = -1, n = 0;

	if (strcmp(url, "/admin/backends") == 0) {
		if (strcmp(method, "GET") == 0)
			return send_text(conn, 200, ig_metrics_backends_json(gw));
		if (strcmp(method, "POST") == 0)
			return add_backend(gw, conn, body, len);
		return ig_httpd_error(conn, 405, "GET or POST /admin/backends", NULL, "method_not_allowed", NULL, false);
	}
	if (strcmp(url, "/admin/keys") == 0) {
		if (strcmp(method, "GET") != 0)
			return ig_httpd_error(conn, 405, "GET /admin/keys", NULL, "method_not_allowed", NULL, false);
		if (!gw->api_keys.enabled)
			return ig_httpd_error(conn, 404, "no api_keys_file is configured: every request is let in", NULL,
					      "not_found", NULL, false);
		return send_json(conn, 200, ig_metrics_keys_json(gw));
	}
	if (strncmp(url, "/admin/backends/", 16) != 0)
		return ig_httpd_error(conn, 404, "unknown admin path (/admin/backends, /admin/keys)", NULL, "not_found",
				      NULL, false);
	rest = url + 16;
	if (sscanf(rest, "%d%n", &id, &n) != 1 || id < 0)
		return ig_httpd_error(conn, 404, "expected /admin/backends/{id}[/drain|/enable]", NULL, "not_found", NULL, false);
	rest += n;
	if (*rest == '/')
		snprintf(action, sizeof(action), "%s", rest + 1);
	else if (*rest)
		return ig_httpd_error(conn, 404, "expected /admin/backends/{id}[/drain|/enable]", NULL, "not_found", NULL, false);
	struct ig_backend *b = ig_backend_fleet_find_id(&gw->fleet, id);
	if (!b) {
		char msg[96];
		snprintf(msg, sizeof(msg), "no backend with id %d", id);
		return ig_httpd_error(conn, 404, msg, NULL, "not_found", NULL, false);
	}
	if (!*action) {
		if (strcmp(method, "GET") == 0)
			return backend_answer(gw, conn, 200, b);
		if (strcmp(method, "DELETE") == 0) {
			/* a rank's server leaves whole: its rank 0 probes for all */
			ig_backend_server_admin(b->server, IG_ADMIN_REMOVING);
			ig_log_info("admin: backend %s (id %d) draining for removal, %ld in flight", b->url, b->id,
				    atomic_load(&b->inflight));
			gw->reap_job.run = reap;
			ig_rx_post(ig_gw_home(gw), &gw->reap_job);
			return backend_answer(gw, conn, 202, b);
		}
		return ig_httpd_error(conn, 405, "GET or DELETE /admin/backends/{id}", NULL, "method_not_allowed", NULL, false);
	}
	if (strcmp(action, "models") == 0) {
		if (strcmp(method, "PUT") != 0)
			return ig_httpd_error(conn, 405, "PUT /admin/backends/{id}/models", NULL, "method_not_allowed",
					       NULL, false);
		return set_models(gw, conn, b, body, len);
	}
	if (strcmp(method, "POST") != 0)
		return ig_httpd_error(conn, 405, "POST /admin/backends/{id}/drain or /enable", NULL,
				       "method_not_allowed", NULL, false);
	if (strcmp(action, "drain") == 0) {
		if (atomic_load(&b->admin) == IG_ADMIN_ENABLED)
			atomic_store(&b->admin, IG_ADMIN_DRAINING);
		ig_log_info("admin: backend %s (id %d) draining, %ld in flight", b->url, b->id,
			    atomic_load(&b->inflight));
		return backend_answer(gw, conn, 200, b);
	}
	if (strcmp(action, "enable") == 0) {
		atomic_store(&b->admin, IG_ADMIN_ENABLED);
		ig_log_info("admin: backend %s (id %d) enabled", b->url, b->id);
		gw->drain_pending = true;
		return backend_answer(gw, conn, 200, b);
	}
	return ig_httpd_error(conn, 404, "unknown action (drain, enable, models)", NULL, "not_found", NULL, false);
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag admin_rows[] = {
	{.name = "--admin-keys-file", .key = "admin_keys_file", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(admin_keys_file),
	 .def = "", .metavar = "FILE", .help = "file of SHA-256 digests of admin keys; empty = admin API off"},
	{.name = "--auth-status", .key = "auth_status", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(auth_status), .min = 0,
	 .max = 1, .def = "0", .metavar = "0|1",
	 .help = "1 = /metrics, /status and /health/backends (every key's names and counts) need an admin key, "
		 "or an API key given \"status\": true in the keys file; a tenant's own key gets a 403"},
};
const struct ig_conf_part ig_admin_conf = IG_CONF_PART(admin_rows);
