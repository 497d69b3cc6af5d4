/* SIGHUP: re-read the configuration file and apply what can change without
 * a restart (backends, policy, limits, keys, the access log, discovery).
 * Every check runs first; on any problem the running configuration stays,
 * untouched. Also loads the key files and opens the access log at start.
 * SIGHUP reaches reactor 0 only, so a reload runs there, under the lock:
 * the probes it stops (backends removed) and discovery's event are that
 * reactor's own.
 * Not here: parsing the configuration (conf.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "core/reload.h"
#include "fleet/discover.h"
#include "fleet/health.h"
#include "fleet/kvevents.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/servertls.h"
#include "sched/dispatch.h"
#include "sched/policy.h"

/* Whether some key may read the status endpoints: an admin key, or an
 * API key with the status right (neither disabled). */
static bool status_readable(const struct ig_keyset *api, const struct ig_keyset *admin)
{
	for (size_t i = 0; i < admin->n; i++)
		if (!admin->v[i].disabled)
			return true;
	for (size_t i = 0; i < api->n; i++)
		if (api->v[i].status && !api->v[i].disabled)
			return true;
	return false;
}

/* Loads the key files cfg names and checks them against it; every
 * problem of both files is listed. Returns 0, or -1 with *err (both sets
 * then empty). */
static int load_keys(const struct ig_conf *cfg, struct ig_keyset *api, struct ig_keyset *admin, char **err)
{
	char *e1 = NULL, *e2 = NULL, *e3 = NULL;
	int r1 = ig_keyset_load(api, "api_keys_file", cfg->api_keys_file, true, &e1);
	int r2 = ig_keyset_load(admin, "admin_keys_file", cfg->admin_keys_file, false, &e2);
	if (r1 == 0 && api->json && cfg->n_keys > 0)
		e3 = ig_strdupf("api_key_settings: with a JSON keys file (%s) a key's priority, weight and "
				"max_inflight go in its entry; remove api_key_settings", cfg->api_keys_file);
	else if (r1 == 0 && r2 == 0 && cfg->auth_status && !status_readable(api, admin))
		/* the status endpoints would be closed to everyone */
		e3 = ig_strdupf("auth_status: 1, but no key may read /metrics, /status and /health/backends: set "
				"admin_keys_file (an admin key reads them), or give an API key \"status\": true in "
				"api_keys_file");
	if (!e1 && !e2 && !e3)
		return 0;
	*err = ig_strdupf("%s%s%s%s%s", e1 ? e1 : "", e1 && (e2 || e3) ? "\n" : "", e2 ? e2 : "",
			  e2 && e3 ? "\n" : "", e3 ? e3 : "");
	free(e1);
	free(e2);
	free(e3);
	ig_keyset_free(api);
	ig_keyset_free(admin);
	return -1;
}

int ig_reload_check_files(const struct ig_conf *cfg, char **err)
{
	struct ig_keyset api, admin;
	if (load_keys(cfg, &api, &admin, err) < 0)
		return -1;
	ig_keyset_free(&api);
	ig_keyset_free(&admin);
	return 0;
}

/* A string setting that needs a restart: the new configuration takes the
 * running one's (the running configuration is freed after). */
static void keep(char **next, char **running)
{
	free(*next);
	*next = *running;
	*running = NULL;
}

/* HTTPS for clients: the certificate, its key and the client CAs are read
 * again (a certificate renewed at the same path too); new connections get
 * them, those open keep theirs. A problem keeps the running ones, logged.
 * Turning HTTPS on or off and its priorities need a restart. With `next`
 * a new configuration, what it keeps is moved into it from the running one. */
static int reload_tls(struct ig_gw *gw, struct ig_conf *next)
{
	struct ig_conf *run = gw->cfg, *nc = next ? next : gw->cfg;
	if (next && (*nc->server_tls_cert != '\0') != (gw->tls != NULL)) {
		ig_log_warn("reload: turning server_tls %s needs a restart; keeping %s", gw->tls ? "off" : "on",
			    gw->tls ? "HTTPS" : "plain HTTP");
		keep(&nc->server_tls_cert, &run->server_tls_cert);
		keep(&nc->server_tls_key, &run->server_tls_key);
		keep(&nc->server_tls_client_ca, &run->server_tls_client_ca);
	}
	if (next && strcmp(nc->server_tls_priorities, run->server_tls_priorities) != 0) {
		ig_log_warn("reload: server_tls.priorities needs a restart; keeping '%s'", run->server_tls_priorities);
		keep(&nc->server_tls_priorities, &run->server_tls_priorities);
	}
	if (next && nc->server_tls_tickets != run->server_tls_tickets) {
		ig_log_warn("reload: server_tls.session_tickets needs a restart; keeping %ld", run->server_tls_tickets);
		nc->server_tls_tickets = run->server_tls_tickets;
	}
	if (!gw->tls)
		return 0;
	struct ig_servertls_files f = {nc->server_tls_cert, nc->server_tls_key, nc->server_tls_client_ca,
				       nc->server_tls_priorities, false};
	char *err = NULL;
	if (ig_servertls_reload(gw->tls, &f, &err) < 0) {
		for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
			ig_log_error("reload: %s; the running certificate kept", line);
		free(err);
		if (next) {
			keep(&nc->server_tls_cert, &run->server_tls_cert);
			keep(&nc->server_tls_key, &run->server_tls_key);
			keep(&nc->server_tls_client_ca, &run->server_tls_client_ca);
		}
		return -1;
	}
	struct ig_servertls_stats st;
	ig_servertls_stats(gw->tls, &st);
	ig_log_info("reload: server_tls certificate %s read: serial %s; new connections get it", nc->server_tls_cert,
		    st.serial);
	return 0;
}

int ig_reload_files(struct ig_gw *gw, const struct ig_conf *cfg, char **err)
{
	struct ig_keyset api, admin;
	struct ig_accesslog alog = {-1, NULL};
	int new_log = !gw->alog.path != !*cfg->access_log ||
		      (gw->alog.path && strcmp(gw->alog.path, cfg->access_log) != 0);

	if (load_keys(cfg, &api, &admin, err) < 0)
		return -1;
	if (new_log && ig_accesslog_open(&alog, cfg->access_log, err) < 0) {
		ig_keyset_free(&api);
		ig_keyset_free(&admin);
		return -1;
	}
	/* The scheduler's keys point into the key set: they follow it at once. */
	ig_keyset_free(&gw->api_keys);
	ig_keyset_free(&gw->admin_keys);
	gw->api_keys = api;
	gw->admin_keys = admin;
	ig_sched_configure(&gw->sched, cfg);
	if (ig_clients_configure(&gw->clients, cfg, &gw->api_keys, ig_now_ms()) < 0)
		ig_log_error("out of memory applying the keys' settings");
	if (new_log) {
		ig_accesslog_close(&gw->alog);
		gw->alog = alog;
	}
	return 0;
}

int ig_reload(struct ig_gw *gw)
{
	struct ig_conf nc;
	char *err = NULL;
	int added = 0, removed = 0;

	if (!gw->cfg->config_path) {
		/* Flags only: the files they name can still change. */
		if (ig_reload_files(gw, gw->cfg, &err) < 0) {
			for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
				ig_log_error("reload rejected, running keys kept: %s", line);
			free(err);
			return -1;
		}
		int tls = reload_tls(gw, NULL);
		ig_log_info("reload: started without --config; the key files re-read (%zu API keys)", gw->api_keys.n);
		gw->drain_pending = true;
		return tls; /* a certificate kept is a reload refused, for systemd's status */
	}
	if (ig_conf_from_args(&nc, gw->argc, gw->argv, &err) != 0 ||
	    ig_reload_files(gw, &nc, &err) < 0) {
		bool tls_refused = false;
		for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n")) {
			ig_log_error("reload rejected, running configuration kept: %s", line);
			tls_refused |= strncmp(line, "server_tls.", 11) == 0; /* conf.c names the key first */
		}
		if (tls_refused && gw->tls)
			ig_servertls_reload_refused(gw->tls);
		free(err);
		ig_conf_free(&nc);
		return -1;
	}
	if (strcmp(nc.listen, gw->cfg->listen) != 0 || nc.max_connections != gw->cfg->max_connections ||
	    nc.header_buffer_bytes != gw->cfg->header_buffer_bytes || nc.workers != gw->cfg->workers)
		ig_log_warn("reload: listen, max_connections, header_buffer_bytes and workers need a restart; keeping %s",
			    gw->cfg->listen);
	if (strcmp(nc.admin_listen, gw->cfg->admin_listen) != 0)
		ig_log_warn("reload: admin_listen needs a restart; keeping '%s'", gw->cfg->admin_listen);
	if (!gw->fleet.kvevents && ig_kvevents_wanted(&nc))
		ig_log_warn("reload: subscribing to KV events (kv_events) when none was at start needs a restart");
	if (gw->fleet.kvevents && nc.kv_max_blocks != gw->cfg->kv_max_blocks) {
		ig_log_warn("reload: kv_events.max_blocks needs a restart; keeping %ld", gw->cfg->kv_max_blocks);
		nc.kv_max_blocks = gw->cfg->kv_max_blocks;
	}
	if (strcmp(nc.data_dir, gw->cfg->data_dir) != 0)
		ig_log_warn("reload: data_dir needs a restart; keeping '%s'", gw->cfg->data_dir);
	if (!ig_routes_equal(&nc.routes, &gw->cfg->routes))
		ig_log_warn("reload: routes need a restart; keeping the %zu running", gw->cfg->routes.n_conf);
	if (strcmp(nc.cluster_redis, gw->cfg->cluster_redis) != 0 || strcmp(nc.cluster_name, gw->cfg->cluster_name) != 0 ||
	    strcmp(nc.cluster_redis_tls_ca, gw->cfg->cluster_redis_tls_ca) != 0 ||
	    strcmp(nc.cluster_redis_tls_cert, gw->cfg->cluster_redis_tls_cert) != 0 ||
	    strcmp(nc.cluster_redis_tls_key, gw->cfg->cluster_redis_tls_key) != 0 ||
	    strcmp(nc.cluster_redis_tls_name, gw->cfg->cluster_redis_tls_name) != 0 ||
	    nc.cluster_sync_ms != gw->cfg->cluster_sync_ms || nc.cluster_lease_s != gw->cfg->cluster_lease_s)
		ig_log_warn("reload: the cluster section needs a restart; keeping the running one");
	/* Backends: the file is the source of truth. */
	for (size_t i = 0; i < nc.n_backends; i++) {
		struct ig_backend_conf *bc = &nc.backends[i];
		if (bc->discover)
			continue;
		struct ig_backend *b = ig_backend_fleet_find_url(&gw->fleet, bc->url);
		if (b && b->nranks != (bc->dp_ranks > 1 ? bc->dp_ranks : 1)) {
			ig_log_warn("reload: backend %s: dp_ranks needs a restart; keeping %d", b->url, b->nranks);
			bc->dp_ranks = b->nranks; /* what kv_events reads of the entry */
		}
		if (b) {
			int changed = ig_backend_server_configure(b, bc);
			if (changed > 0)
				ig_log_info("reload: backend %s now serves %s", b->url,
					    bc->n_models ? "the models configured" : "the models it lists (learned)");
			if (changed != 0)
				gw->models_dirty = true;
			for (int r = 0; r < b->nranks; r++)
				if (atomic_load(&ig_backend_rank(b, r)->admin) == IG_ADMIN_REMOVING)
					atomic_store(&ig_backend_rank(b, r)->admin, IG_ADMIN_ENABLED);
			continue;
		}
		b = ig_backend_fleet_add_server(&gw->fleet, bc->url, bc);
		int ok = b != NULL;
		for (int r = 0; ok && r < b->nranks; r++)
			ok = ig_health_add(gw, ig_backend_rank(b, r)) == 0;
		if (ok) {
			added++;
			ig_log_info("reload: backend %s added (id %d%s)", b->url, b->id, b->nranks > 1 ? ", with its ranks" : "");
		}
	}
	for (size_t i = 0; i < gw->fleet.n; i++) {
		struct ig_backend *b = gw->fleet.v[i];
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
	keep(&nc.listen, &gw->cfg->listen);
	keep(&nc.listen_host, &gw->cfg->listen_host);
	nc.listen_port = gw->cfg->listen_port;
	nc.max_connections = gw->cfg->max_connections;
	nc.header_buffer_bytes = gw->cfg->header_buffer_bytes;
	nc.workers = gw->cfg->workers;
	keep(&nc.admin_listen, &gw->cfg->admin_listen);
	keep(&nc.admin_listen_host, &gw->cfg->admin_listen_host);
	nc.admin_listen_port = gw->cfg->admin_listen_port;
	reload_tls(gw, &nc);
	keep(&nc.data_dir, &gw->cfg->data_dir);
	keep(&nc.cluster_redis, &gw->cfg->cluster_redis);
	keep(&nc.cluster_name, &gw->cfg->cluster_name);
	keep(&nc.cluster_redis_tls_ca, &gw->cfg->cluster_redis_tls_ca);
	keep(&nc.cluster_redis_tls_cert, &gw->cfg->cluster_redis_tls_cert);
	keep(&nc.cluster_redis_tls_key, &gw->cfg->cluster_redis_tls_key);
	keep(&nc.cluster_redis_tls_name, &gw->cfg->cluster_redis_tls_name);
	nc.cluster_sync_ms = gw->cfg->cluster_sync_ms;
	nc.cluster_lease_s = gw->cfg->cluster_lease_s;
	/* The tokenizers loaded at start stay (loading one takes a fraction of
	 * a second under the lock): models[] changes with a restart. */
	{
		struct ig_model_conf *m = nc.models;
		size_t n = nc.n_models;
		nc.models = gw->cfg->models;
		nc.n_models = gw->cfg->n_models;
		gw->cfg->models = m;
		gw->cfg->n_models = n;
	}
	ig_routes_move(&nc.routes, &gw->cfg->routes); /* requests and metrics hold their indexes */
	struct ig_conf old = *gw->cfg;
	*gw->cfg = nc;
	/* The policy named now, or the same one's new settings (a new
	 * cache-aware size starts its records empty: they are a guess anyway). */
	if (ig_dispatch_configure(gw) < 0)
		ig_log_error("reload: out of memory for policy %s; the previous one kept",
			     ig_policy_name(gw->cfg->policy));
	ig_conf_free(&old);
	/* Discovery restarts with the new names and interval. */
	ig_discover_stop(gw);
	if (ig_discover_start(gw) < 0)
		ig_log_error("reload: DNS discovery could not restart");
	ig_log_set_level((enum ig_log_level)gw->cfg->log_level);
	ig_log_info("reload: configuration from %s applied (%d backends added, %d removed, policy %s)",
		    gw->cfg->config_path, added, removed, ig_policy_name(gw->cfg->policy));
	ig_health_reap(gw);
	gw->models_dirty = true; /* aliases may have changed too */
	gw->drain_pending = true;
	return 0;
}
