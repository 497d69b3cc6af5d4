/* Runtime control: the admin API (list, add, drain, enable, remove
 * backends) and SIGHUP reloads. A removed backend is drained first: it takes
 * no new request, those in flight finish, then it leaves the table. Both run
 * on the reactor thread, so they change the table without locks.
 * Not here: the admin key check (server.c) or health (health.c). */
#include "config.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gateway.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"

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

static enum MHD_Result backend_answer(struct MHD_Connection *conn, unsigned status, struct ig_backend *b)
{
	return send_json(conn, status, ig_backend_to_json(b, ig_now_ms()));
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
		return ig_server_error(conn, 400, "expected a JSON object {\"url\": ..., \"weight\"?, \"max_inflight\"?}",
				       "url", "invalid_body", NULL);
	}
	json_t *w = json_object_get(root, "weight"), *m = json_object_get(root, "max_inflight");
	if ((w && (!json_is_integer(w) || json_integer_value(w) < 1 || json_integer_value(w) > 1000)) ||
	    (m && (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) > 1000000))) {
		json_decref(root);
		return ig_server_error(conn, 400, "weight must be 1..1000 and max_inflight 0..1000000", NULL,
				       "invalid_value", NULL);
	}
	char *url = ig_conf_normalise_url(json_string_value(json_object_get(root, "url")), &why);
	if (!url) {
		snprintf(msg, sizeof(msg), "'%s' is not a valid backend URL (%s)",
			 json_string_value(json_object_get(root, "url")), why);
		json_decref(root);
		return ig_server_error(conn, 400, msg, "url", "invalid_url", NULL);
	}
	struct ig_backend *b = ig_pool_find_url(&gw->pool, url);
	if (b && atomic_load(&b->admin) != IG_ADMIN_REMOVING) {
		snprintf(msg, sizeof(msg), "backend %s is already in the table (id %d)", url, b->id);
		free(url);
		json_decref(root);
		return ig_server_error(conn, 409, msg, "url", "duplicate_backend", NULL);
	}
	long weight = w ? (long)json_integer_value(w) : 1;
	long maxin = m ? (long)json_integer_value(m) : gw->cfg->max_inflight;
	json_decref(root);
	if (b) { /* being removed: keep it instead */
		b->weight = weight;
		b->max_inflight = maxin;
		atomic_store(&b->admin, IG_ADMIN_ENABLED);
		ig_log_info("admin: backend %s (id %d) kept and enabled", url, b->id);
		free(url);
		return backend_answer(conn, 200, b);
	}
	b = ig_pool_add(&gw->pool, url, weight, maxin);
	free(url);
	if (!b || ig_health_add(gw, b) < 0)
		return ig_server_error(conn, 500, "out of memory", NULL, "internal_error", NULL);
	ig_log_info("admin: backend %s added (id %d), probing", b->url, b->id);
	ret = backend_answer(conn, 201, b);
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
			return send_text(conn, 200, ig_backends_json(gw));
		if (strcmp(method, "POST") == 0)
			return add_backend(gw, conn, body, len);
		return ig_server_error(conn, 405, "GET or POST /admin/backends", NULL, "method_not_allowed", NULL);
	}
	if (strncmp(url, "/admin/backends/", 16) != 0)
		return ig_server_error(conn, 404, "unknown admin path", NULL, "not_found", NULL);
	rest = url + 16;
	if (sscanf(rest, "%d%n", &id, &n) != 1 || id < 0)
		return ig_server_error(conn, 404, "expected /admin/backends/{id}[/drain|/enable]", NULL, "not_found", NULL);
	rest += n;
	if (*rest == '/')
		snprintf(action, sizeof(action), "%s", rest + 1);
	else if (*rest)
		return ig_server_error(conn, 404, "expected /admin/backends/{id}[/drain|/enable]", NULL, "not_found", NULL);
	struct ig_backend *b = ig_pool_find_id(&gw->pool, id);
	if (!b) {
		char msg[96];
		snprintf(msg, sizeof(msg), "no backend with id %d", id);
		return ig_server_error(conn, 404, msg, NULL, "not_found", NULL);
	}
	if (!*action) {
		if (strcmp(method, "GET") == 0)
			return backend_answer(conn, 200, b);
		if (strcmp(method, "DELETE") == 0) {
			atomic_store(&b->admin, IG_ADMIN_REMOVING);
			ig_log_info("admin: backend %s (id %d) draining for removal, %ld in flight", b->url, b->id,
				    atomic_load(&b->inflight));
			ig_admin_tick(gw);
			return backend_answer(conn, 202, b);
		}
		return ig_server_error(conn, 405, "GET or DELETE /admin/backends/{id}", NULL, "method_not_allowed", NULL);
	}
	if (strcmp(method, "POST") != 0)
		return ig_server_error(conn, 405, "POST /admin/backends/{id}/drain or /enable", NULL,
				       "method_not_allowed", NULL);
	if (strcmp(action, "drain") == 0) {
		if (atomic_load(&b->admin) == IG_ADMIN_ENABLED)
			atomic_store(&b->admin, IG_ADMIN_DRAINING);
		ig_log_info("admin: backend %s (id %d) draining, %ld in flight", b->url, b->id,
			    atomic_load(&b->inflight));
		return backend_answer(conn, 200, b);
	}
	if (strcmp(action, "enable") == 0) {
		atomic_store(&b->admin, IG_ADMIN_ENABLED);
		ig_log_info("admin: backend %s (id %d) enabled", b->url, b->id);
		ig_proxy_drain_queue(gw);
		return backend_answer(conn, 200, b);
	}
	return ig_server_error(conn, 404, "unknown action (drain, enable)", NULL, "not_found", NULL);
}

void ig_admin_tick(struct ig_gw *gw)
{
	for (size_t i = gw->pool.n; i-- > 0;) {
		struct ig_backend *b = gw->pool.v[i];
		if (atomic_load(&b->admin) != IG_ADMIN_REMOVING || atomic_load(&b->inflight) > 0)
			continue;
		ig_log_info("backend %s (id %d) removed", b->url, b->id);
		ig_health_remove(gw, b);
		ig_pool_remove(&gw->pool, b);
	}
}

int ig_gw_load_files(struct ig_gw *gw, const struct ig_conf *cfg, char **err)
{
	struct ig_keyset api, admin;
	struct ig_accesslog alog = {-1, NULL};
	int new_log = !gw->alog.path != !*cfg->access_log ||
		      (gw->alog.path && strcmp(gw->alog.path, cfg->access_log) != 0);

	if (ig_keyset_load(&api, "api_keys_file", cfg->api_keys_file, err) < 0)
		return -1;
	if (ig_keyset_load(&admin, "admin_keys_file", cfg->admin_keys_file, err) < 0) {
		ig_keyset_free(&api);
		return -1;
	}
	if (new_log && ig_accesslog_open(&alog, cfg->access_log, err) < 0) {
		ig_keyset_free(&api);
		ig_keyset_free(&admin);
		return -1;
	}
	ig_keyset_free(&gw->api_keys);
	ig_keyset_free(&gw->admin_keys);
	gw->api_keys = api;
	gw->admin_keys = admin;
	if (new_log) {
		ig_accesslog_close(&gw->alog);
		gw->alog = alog;
	}
	return 0;
}

void ig_gw_reload(struct ig_gw *gw)
{
	struct ig_conf nc;
	char *err = NULL;
	int check = 0, added = 0, removed = 0;

	if (!gw->cfg->config_path) {
		ig_log_warn("reload: started without --config, nothing to re-read");
		return;
	}
	if (ig_conf_from_args(&nc, gw->argc, gw->argv, &check, &err) != 0 ||
	    ig_gw_load_files(gw, &nc, &err) < 0) {
		for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
			ig_log_error("reload rejected, running configuration kept: %s", line);
		free(err);
		ig_conf_free(&nc);
		return;
	}
	if (strcmp(nc.listen, gw->cfg->listen) != 0 || nc.max_connections != gw->cfg->max_connections)
		ig_log_warn("reload: listen and max_connections need a restart; keeping %s", gw->cfg->listen);
	/* Backends: the file is the source of truth. */
	for (size_t i = 0; i < nc.n_backends; i++) {
		struct ig_backend_conf *bc = &nc.backends[i];
		if (bc->discover)
			continue;
		struct ig_backend *b = ig_pool_find_url(&gw->pool, bc->url);
		if (b) {
			b->weight = bc->weight;
			b->max_inflight = bc->max_inflight;
			if (atomic_load(&b->admin) == IG_ADMIN_REMOVING)
				atomic_store(&b->admin, IG_ADMIN_ENABLED);
			continue;
		}
		b = ig_pool_add(&gw->pool, bc->url, bc->weight, bc->max_inflight);
		if (b && ig_health_add(gw, b) == 0) {
			added++;
			ig_log_info("reload: backend %s added (id %d)", b->url, b->id);
		}
	}
	for (size_t i = 0; i < gw->pool.n; i++) {
		struct ig_backend *b = gw->pool.v[i];
		int keep = 0;
		for (size_t j = 0; j < nc.n_backends && !keep; j++)
			keep = strcmp(nc.backends[j].url, b->discover ? b->discover : b->url) == 0 &&
			       nc.backends[j].discover == (b->discover != NULL);
		if (!keep && atomic_load(&b->admin) != IG_ADMIN_REMOVING) {
			atomic_store(&b->admin, IG_ADMIN_REMOVING);
			removed++;
			ig_log_info("reload: backend %s (id %d) draining for removal, %ld in flight", b->url, b->id,
				    atomic_load(&b->inflight));
		}
	}
	/* Keep what cannot change without a restart. */
	free(nc.listen);
	nc.listen = gw->cfg->listen;
	gw->cfg->listen = NULL;
	free(nc.listen_host);
	nc.listen_host = gw->cfg->listen_host;
	gw->cfg->listen_host = NULL;
	nc.listen_port = gw->cfg->listen_port;
	nc.max_connections = gw->cfg->max_connections;
	struct ig_conf old = *gw->cfg;
	*gw->cfg = nc;
	ig_conf_free(&old);
	/* Discovery restarts with the new names and interval. */
	ig_discovery_stop(gw);
	if (ig_discovery_start(gw) < 0)
		ig_log_error("reload: DNS discovery could not restart");
	enum ig_log_level level;
	if (ig_log_level_parse(gw->cfg->log_level, &level) == 0)
		ig_log_set_level(level);
	ig_log_info("reload: configuration from %s applied (%d backends added, %d removed, policy %s)",
		    gw->cfg->config_path, added, removed, ig_policy_name(gw->cfg->policy));
	ig_admin_tick(gw);
	ig_proxy_drain_queue(gw);
}
