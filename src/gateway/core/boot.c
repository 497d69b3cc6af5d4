/* The process's bootstrap and teardown (nginx keeps ngx_init_cycle apart
 * from its event loop the same way): the key files and the access log,
 * the descriptor limit, the backend table and the scheduler's pools, the
 * Files and Batch API stores, the listening socket, the reactors' loops,
 * the HTTP server, health probes and DNS discovery, in that order; and
 * their release, in the order that lets every transfer leave its multi
 * handle before the handle goes. The top of the gateway's layers, under
 * main.c: it calls down into every module it sets up.
 * Not here: the loops themselves (reactor.c), SIGHUP's re-reading of the
 * configuration (reload.c). */
#include "config.h"
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "api/batches.h"
#include "api/files.h"
#include "api/metrics.h"
#include "cluster/cluster.h"
#include "core/boot.h"
#include "core/reactor.h"
#include "core/reload.h"
#include "core/server.h"
#include "fleet/discover.h"
#include "fleet/health.h"
#include "fleet/kvevents.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "keys/respstore.h"
#include "net/bio.h"
#include "net/rx.h"
#include "net/servertls.h"
#include "obs/trace.h"
#include "sched/prompt.h"
#include "path/idem.h"
#include "path/idem_share.h"
#include "path/proxy.h"
#include "sched/adapters.h"
#include "sched/dispatch.h"
#include "sched/kvindex.h"
#include "sched/policy.h"

/* The proxy's and the cluster's periodic work, registered here until their
 * modules (another branch rewrites both) have an init that does it: each
 * reactor's stalled transfers and deadlines (proxy.c), and on reactor 0
 * every turn Redis's events and the outbox (cluster.c). */
static void proxy_timer(struct ig_rx *rx, uint64_t now_ms, void *arg IG_UNUSED)
{
	ig_proxy_tick_rx(rx, now_ms);
}

static void cluster_timer(struct ig_rx *rx, uint64_t now_ms, void *arg IG_UNUSED)
{
	if (rx->gw->cluster)
		ig_cluster_tick(rx->gw, now_ms); /* Redis's events came this turn, or the outbox filled */
}

/* The engines' KV events feed the exact prefix index: the events thread
 * (fleet, below the scheduler) is handed the index's calls, as a lower
 * layer is handed a callback. (The index leaves out an offload tier's
 * blocks, which are not the GPU's cache a request is routed to.) */
static void kv_apply(void *arg, size_t src, const struct ig_kv_batch *b)
{
	ig_kvindex_apply_batch(arg, src, b);
}

static void kv_clear(void *arg, size_t src)
{
	ig_kvindex_clear(arg, src);
}

static uint64_t kv_blocks(void *arg, size_t src)
{
	struct ig_kvindex_stats st;
	ig_kvindex_stats(arg, src, &st);
	return st.blocks;
}

/* Reactor 0, every second: backends added or gone (a reload, discovery,
 * the admin API) are subscribed or let go. */
static void kv_timer(struct ig_rx *rx, uint64_t now_ms IG_UNUSED, void *arg IG_UNUSED)
{
	ig_kvevents_sync(rx->gw->fleet.kvevents, &rx->gw->fleet, rx->gw->cfg);
}

/* Starts the subscriptions when the configuration asks for any. Returns 0
 * or -1 (logged). */
static int kv_start(struct ig_gw *gw)
{
	struct ig_fleet *f = &gw->fleet;
	char *err = NULL;
	if (!ig_kvevents_wanted(gw->cfg))
		return 0;
	f->kv_nsrc = ig_kvevents_sources(gw->cfg);
	if (!(f->kvindex = ig_kvindex_new(f->kv_nsrc, (size_t)gw->cfg->kv_max_blocks))) {
		ig_log_error("kv_events: out of memory for the prefix index");
		return -1;
	}
	ig_cache_aware_use_index(f->kvindex, f->kv_nsrc); /* before any pick */
	struct ig_kvevents_sink sink = {kv_apply, kv_clear, kv_blocks, f->kvindex};
	if (!(f->kvevents = ig_kvevents_start(f->kv_nsrc, &sink, &err))) {
		ig_log_error("%s", err);
		free(err);
		return -1;
	}
	ig_kvevents_sync(f->kvevents, f, gw->cfg);
	if (ig_rx_every(gw, IG_RX_HOME, 1000, IG_RX_ORDER_REAP, kv_timer, NULL) < 0 ||
	    ig_stats_register_at(gw, &(struct ig_metrics_source){.name = "kv_events", .prom = ig_kvevents_prom,
								 .arg = f->kvevents}, IG_METRICS_ORDER_PROBES) < 0)
		return -1;
	return 0;
}

static void kv_stop(struct ig_gw *gw)
{
	struct ig_fleet *f = &gw->fleet;
	if (f->kvevents)
		ig_stats_unregister(gw, f->kvevents);
	ig_kvevents_stop(f->kvevents); /* its thread feeds the index and reads the backends */
	f->kvevents = NULL;
	ig_cache_aware_use_index(NULL, 0); /* the reactors have stopped */
	if (f->kvindex)
		ig_kvindex_free(f->kvindex);
	f->kvindex = NULL;
}

/* Binds the listening socket ourselves, so a busy port is reported with
 * its cause. Returns the fd or -1 (logged). */
static int bind_listen(const char *what, const char *host, int port)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char portstr[16];
	int fd = -1, one = 1;

	snprintf(portstr, sizeof(portstr), "%d", port);
	int rc = getaddrinfo(host, portstr, &hints, &res);
	if (rc != 0) {
		ig_log_error("%s: cannot resolve '%s': %s", what, host, gai_strerror(rc));
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ig_log_error("%s: socket: %s", what, strerror(errno));
		goto fail;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, res->ai_addr, res->ai_addrlen) < 0) {
		ig_log_error("%s: cannot bind %s:%d: %s", what, host, port, strerror(errno));
		goto fail;
	}
	if (listen(fd, 4096) < 0) {
		ig_log_error("%s: %s:%d: %s", what, host, port, strerror(errno));
		goto fail;
	}
	freeaddrinfo(res);
	return fd;
fail:
	if (fd >= 0)
		close(fd);
	freeaddrinfo(res);
	return -1;
}

/* The gateway's own socket, for a batch's lines (batches_run.c): a Unix
 * socket in data_dir, named by the listen port (two gateways may share a
 * data_dir, never a port), that only this user may open (umask 077 while
 * it is made). Returns the fd or -1 (logged). */
static int bind_self(struct ig_gw *gw)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	gw->self_path = ig_strdupf("%s/gateway-%d.sock", gw->cfg->data_dir, gw->cfg->listen_port);
	if (strlen(gw->self_path) >= sizeof(sa.sun_path)) {
		ig_log_error("data_dir: '%s' is too long for the gateway's own socket in it (%s: at most %zu bytes)",
			     gw->cfg->data_dir, gw->self_path, sizeof(sa.sun_path) - 1);
		return -1;
	}
	memcpy(sa.sun_path, gw->self_path, strlen(gw->self_path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		ig_log_error("data_dir: the gateway's own socket: %s", strerror(errno));
		return -1;
	}
	unlink(gw->self_path); /* a gateway on this port before that did not stop */
	mode_t old = umask(077);
	int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (rc < 0 || listen(fd, 256) < 0) {
		ig_log_error("data_dir: cannot make the gateway's own socket %s: %s", gw->self_path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* Each proxied request holds two descriptors (client and backend): raise
 * the soft limit to the hard one (root may raise the hard one too) and say
 * how many requests that allows. Returns the limit. */
static long raise_fd_limit(long want)
{
	long lim = ig_raise_nofile(want);
	if (lim < want)
		ig_log_info("open-file limit %ld: about %ld requests can be proxied at once", lim, (lim - 64) / 2);
	return lim;
}

int ig_boot_init(struct ig_gw *gw, struct ig_conf *cfg)
{
	memset(gw, 0, sizeof(*gw));
	gw->cfg = cfg;
	gw->listen_fd = -1;
	gw->admin_fd = -1;
	gw->self_fd = -1;
	gw->alog.fd = -1;
	if (ig_reactor_new(gw) < 0)
		return -1;
	/* Held for short stretches by every reactor: spin a little before
	 * sleeping (glibc's adaptive mutex), as a futex wait and wake per
	 * contended acquisition cost more than the stretch itself. */
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
	pthread_mutex_init(&gw->lock, &attr);
	pthread_mutexattr_destroy(&attr);
	pthread_cond_init(&gw->rx_ended, NULL);
	char *err = NULL;
	ig_sched_init(&gw->sched);
	ig_clients_init(&gw->clients);
	ig_idem_init(&gw->idem, (size_t)cfg->idem_max_bytes, (uint64_t)cfg->idem_ttl_s * 1000u);
	gw->idem.wake = ig_proxy_idem_wake;
	if (ig_reload_files(gw, cfg, &err) < 0) {
		for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
			ig_log_error("%s", line);
		free(err);
		return -1;
	}
	if (cfg->n_models) {
		struct ig_buf errs;
		ig_buf_init(&errs);
		if (!(gw->prompts = ig_prompts_load(cfg, &errs))) {
			for (char *line = strtok(errs.data, "\n"); line; line = strtok(NULL, "\n"))
				ig_log_error("%s", line);
			ig_buf_free(&errs);
			return -1;
		}
		ig_buf_free(&errs);
	}
	gw->started_ms = ig_now_ms();
	long fds = raise_fd_limit(2 * cfg->max_connections + 64);
	unsigned conn_limit = (unsigned)(cfg->max_connections < fds - 64 ? cfg->max_connections : fds - 64);
	signal(SIGPIPE, SIG_IGN);

	if (ig_backend_fleet_init(&gw->fleet, cfg) < 0)
		return -1;
	if (*cfg->data_dir) {
		char *dir = ig_strdupf("%s/files", cfg->data_dir);
		gw->files = ig_files_open(dir, ig_cluster_configured(gw), &err);
		free(dir);
		if (!gw->files) {
			ig_log_error("%s", err);
			free(err);
			return -1;
		}
	}
	gw->tracer = ig_tracer_start(cfg, &err);
	if (!gw->tracer && err) {
		ig_log_error("%s", err);
		free(err);
		return -1;
	}
	if (ig_dispatch_init(gw, &err) < 0) {
		ig_log_error("%s", err);
		free(err);
		return -1;
	}
	if (ig_adapters_init(gw) < 0) {
		ig_log_error("adapters: out of memory");
		return -1;
	}
	if (ig_proxy_init(gw) < 0) {
		ig_log_error("out of memory");
		return -1;
	}
	if (ig_sched_rebuild(&gw->sched, &gw->fleet) < 0)
		return -1;
	if (*cfg->server_tls_cert) {
		struct ig_servertls_files f = {cfg->server_tls_cert, cfg->server_tls_key, cfg->server_tls_client_ca,
					       cfg->server_tls_priorities, cfg->server_tls_tickets != 0};
		if (!(gw->tls = ig_servertls_open(&f, &err))) {
			for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
				ig_log_error("%s", line);
			free(err);
			return -1;
		}
	}
	gw->listen_fd = bind_listen("listen", cfg->listen_host, cfg->listen_port);
	if (gw->listen_fd < 0)
		return -1;
	if (cfg->admin_listen_host &&
	    (gw->admin_fd = bind_listen("admin_listen", cfg->admin_listen_host, cfg->admin_listen_port)) < 0)
		return -1;
	if (gw->files) {
		if ((gw->self_fd = bind_self(gw)) < 0)
			return -1;
		char *dir = ig_strdupf("%s/batches", cfg->data_dir);
		gw->batches = ig_batches_open(gw, dir, &err);
		free(dir);
		if (!gw->batches) {
			ig_log_error("%s", err);
			free(err);
			return -1;
		}
	}
	if (ig_reactor_open(gw) < 0) /* the loops' epoll sets, curl multis, signals */
		return -1;
	if (ig_cluster_start(gw) < 0) /* on reactor 0's epoll set; checks its name first */
		return -1;
	if (gw->cluster && (ig_rx_every(gw, IG_RX_HOME, 0, IG_RX_ORDER_CLUSTER, cluster_timer, NULL) < 0 ||
			    ig_idem_share_start(gw) < 0))
		return -1;
	if (ig_rx_every(gw, IG_RX_EACH, IG_RX_TICK_MS, IG_RX_ORDER_PROXY, proxy_timer, NULL) < 0 ||
	    ig_metrics_start(gw) < 0)
		return -1;

	if (ig_server_start(gw, conn_limit) < 0)
		return -1;

	if (ig_health_init(gw) < 0 || ig_discover_start(gw) < 0 || kv_start(gw) < 0)
		return -1;
	return 0;
}


void ig_boot_free(struct ig_gw *gw)
{
	ig_bio_free(gw->bio); /* first: its last dones touch connections and batches */
	gw->bio = NULL;
	for (size_t i = 0; gw->rx && i < gw->nrx; i++)
		ig_server_stop(&gw->rx[i]);
	ig_peer_counts_free(&gw->per_ip); /* the connections that held counts are closed */
	ig_discover_stop(gw);
	ig_batches_free(gw->batches); /* its transfers leave the multi first */
	gw->batches = NULL;
	ig_health_free(gw);
	ig_adapters_free(gw); /* its transfers leave the multi, as the probes' */
	ig_cluster_stop(gw);
	ig_reactor_close(gw);
	ig_tracer_stop(gw->tracer); /* after the requests: their last spans go */
	gw->tracer = NULL;
	ig_dispatch_free(gw);
	ig_sched_free(&gw->sched);
	ig_clients_free(&gw->clients);
	ig_respstore_free(gw->responses);
	ig_prompts_free(gw->prompts);
	gw->prompts = NULL;
	ig_idem_free(&gw->idem);
	kv_stop(gw);
	ig_files_free(gw->files);
	gw->files = NULL;
	gw->responses = NULL;
	ig_backend_fleet_free(&gw->fleet);
	ig_stats_free(gw);
	ig_keyset_free(&gw->api_keys);
	ig_keyset_free(&gw->admin_keys);
	ig_accesslog_close(&gw->alog);
	if (gw->listen_fd >= 0)
		close(gw->listen_fd);
	gw->listen_fd = -1;
	if (gw->admin_fd >= 0)
		close(gw->admin_fd);
	gw->admin_fd = -1;
	if (gw->self_fd >= 0) {
		close(gw->self_fd);
		unlink(gw->self_path);
	}
	gw->self_fd = -1;
	free(gw->self_path);
	gw->self_path = NULL;
	ig_servertls_free(gw->tls); /* after the daemons: their connections held its credentials */
	gw->tls = NULL;
	if (gw->rx) { /* the lock was made right after the reactors */
		pthread_mutex_destroy(&gw->lock);
		pthread_cond_destroy(&gw->rx_ended);
	}
	ig_reactor_free(gw);
}
