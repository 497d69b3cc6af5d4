/* DNS discovery: a backend entry {"discover": "http://name:port"} stands for
 * every address the name resolves to (a Kubernetes headless Service, a
 * round-robin DNS name, several lines in /etc/hosts). Names are resolved on
 * a thread of their own, because getaddrinfo blocks and the reactor must
 * not; results come back through an eventfd and are applied on reactor 0
 * (whose probes the removals stop), under the lock:
 * new addresses are added (and probed before they serve), vanished ones are
 * drained and then removed, so no request in flight is dropped. A failed
 * resolution changes nothing.
 * Not here: probing, and removal after draining (health.c). */
#include "config.h"
#include <curl/curl.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "conf/conf.h"
#include "fleet/discover.h"
#include "fleet/health.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"

struct entry {
	struct ig_backend_conf bc; /* a copy of its configuration entry; bc.url
				    * (the name, normalised) tags its backends */
	char *scheme, *host, *port, *path;
	int last_ok;        /* -1 unknown, so failures are logged once per change */
};

struct result {
	struct result *next;
	char *name_url;
	char **urls;        /* NULL with err set when resolution failed */
	size_t n;
	char err[160];
};

struct ig_discovery {
	struct entry *entries;
	size_t n;
	long interval_s;
	pthread_t thread;
	bool running;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool stop;
	struct result *results;     /* filled by the thread, taken by the reactor */
	int efd;
	struct ig_event ev;      /* the eventfd, handled by on_results */
};

static void result_free(struct result *r)
{
	for (size_t i = 0; i < r->n; i++)
		free(r->urls[i]);
	free(r->urls);
	free(r->name_url);
	free(r);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct result *resolve(const struct entry *e)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	struct addrinfo *res = NULL;
	struct result *r = calloc(1, sizeof(*r));

	r->name_url = strdup(e->bc.url);
	int rc = getaddrinfo(e->host, e->port, &hints, &res);
	if (rc != 0) {
		snprintf(r->err, sizeof(r->err), "%s", gai_strerror(rc));
		return r;
	}
	r->urls = calloc(1, sizeof(char *));
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		char addr[INET6_ADDRSTRLEN], *url;
		if (ai->ai_family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr, addr, sizeof(addr));
			url = ig_strdupf("%s://%s:%s%s", e->scheme, addr, e->port, e->path);
		} else if (ai->ai_family == AF_INET6) {
			inet_ntop(AF_INET6, &((struct sockaddr_in6 *)(void *)ai->ai_addr)->sin6_addr, addr, sizeof(addr));
			url = ig_strdupf("%s://[%s]:%s%s", e->scheme, addr, e->port, e->path);
		} else {
			continue;
		}
		int dup = 0;
		for (size_t i = 0; i < r->n && !dup; i++)
			dup = strcmp(r->urls[i], url) == 0;
		if (dup) {
			free(url);
			continue;
		}
		r->urls = realloc(r->urls, (r->n + 1) * sizeof(char *));
		r->urls[r->n++] = url;
	}
	freeaddrinfo(res);
	qsort(r->urls, r->n, sizeof(char *), cmp_str);
	return r;
}

static void *resolver(void *arg)
{
	struct ig_discovery *d = arg;
	pthread_mutex_lock(&d->mu);
	while (!d->stop) {
		pthread_mutex_unlock(&d->mu);
		for (size_t i = 0; i < d->n; i++) {
			struct result *r = resolve(&d->entries[i]);
			pthread_mutex_lock(&d->mu);
			r->next = d->results;
			d->results = r;
			pthread_mutex_unlock(&d->mu);
		}
		uint64_t one = 1;
		if (write(d->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
			break;
		pthread_mutex_lock(&d->mu);
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += d->interval_s;
		while (!d->stop && pthread_cond_timedwait(&d->cv, &d->mu, &until) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

static int split_url(struct entry *e)
{
	CURLU *u = curl_url();
	char *host = NULL, *port = NULL, *path = NULL, *scheme = NULL;
	int ok = curl_url_set(u, CURLUPART_URL, e->bc.url, 0) == CURLUE_OK &&
		 curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
		 curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
		 curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK;
	curl_url_get(u, CURLUPART_PATH, &path, 0);
	if (ok) {
		e->scheme = strdup(scheme);
		/* CURLU keeps IPv6 brackets; getaddrinfo wants them off. */
		size_t hl = strlen(host);
		e->host = host[0] == '[' && hl > 2 ? strndup(host + 1, hl - 2) : strdup(host);
		e->port = strdup(port);
		size_t pl = path ? strlen(path) : 0;
		while (pl > 0 && path[pl - 1] == '/')
			pl--;
		e->path = strndup(path ? path : "", pl);
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_url_cleanup(u);
	return ok ? 0 : -1;
}

static void on_results(struct ig_event *ev, uint32_t events);

int ig_discover_start(struct ig_gw *gw)
{
	const struct ig_conf *cfg = gw->cfg;
	size_t n = 0;
	for (size_t i = 0; i < cfg->n_backends; i++)
		n += (size_t)cfg->backends[i].discover;
	if (n == 0)
		return 0;
	struct ig_discovery *d = calloc(1, sizeof(*d));
	if (!d)
		return -1;
	d->entries = calloc(n, sizeof(*d->entries));
	d->interval_s = cfg->discover_interval_s;
	for (size_t i = 0; i < cfg->n_backends; i++) {
		if (!cfg->backends[i].discover)
			continue;
		struct entry *e = &d->entries[d->n++];
		e->last_ok = -1;
		if (ig_conf_backend_copy(&e->bc, &cfg->backends[i]) < 0 || split_url(e) < 0) {
			ig_log_error("discover: cannot parse '%s'", cfg->backends[i].url);
			gw->discovery = d;
			ig_discover_stop(gw);
			return -1;
		}
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_cond_init(&d->cv, NULL);
	d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	d->ev = (struct ig_event){d->efd, on_results, gw};
	ig_event_add(ig_gw_home(gw), &d->ev, EPOLLIN);
	gw->discovery = d;
	if (ig_thread_start(&d->thread, resolver, d) != 0) {
		ig_log_error("discover: cannot start the resolver thread");
		ig_discover_stop(gw);
		return -1;
	}
	d->running = true;
	ig_log_info("discover: resolving %zu name(s) every %lds", d->n, d->interval_s);
	return 0;
}

void ig_discover_stop(struct ig_gw *gw)
{
	struct ig_discovery *d = gw->discovery;
	if (!d)
		return;
	if (d->running) {
		pthread_mutex_lock(&d->mu);
		d->stop = true;
		pthread_cond_signal(&d->cv);
		pthread_mutex_unlock(&d->mu);
		pthread_join(d->thread, NULL);
		pthread_mutex_destroy(&d->mu);
		pthread_cond_destroy(&d->cv);
	}
	if (d->efd > 0) {
		ig_event_del(ig_gw_home(gw), &d->ev);
		close(d->efd);
	}
	while (d->results) {
		struct result *r = d->results;
		d->results = r->next;
		result_free(r);
	}
	for (size_t i = 0; i < d->n; i++) {
		struct entry *e = &d->entries[i];
		ig_conf_backend_clear(&e->bc);
		free(e->scheme);
		free(e->host);
		free(e->port);
		free(e->path);
	}
	free(d->entries);
	free(d);
	gw->discovery = NULL;
}

static struct entry *find_entry(struct ig_discovery *d, const char *name_url)
{
	for (size_t i = 0; i < d->n; i++)
		if (strcmp(d->entries[i].bc.url, name_url) == 0)
			return &d->entries[i];
	return NULL;
}

static void apply(struct ig_gw *gw, struct entry *e, struct result *r)
{
	if (!r->urls) {
		if (e->last_ok != 0)
			ig_log_warn("discover: %s: cannot resolve (%s); keeping its %s backends", e->bc.url, r->err,
				    e->last_ok < 0 ? "(no)" : "current");
		e->last_ok = 0;
		return;
	}
	if (e->last_ok == 0)
		ig_log_info("discover: %s resolves again", e->bc.url);
	e->last_ok = 1;
	for (size_t i = 0; i < r->n; i++) {
		struct ig_backend *b = ig_backend_fleet_find_url(&gw->fleet, r->urls[i]);
		if (b) {
			if (b->discover && atomic_load(&b->admin) == IG_ADMIN_REMOVING) {
				ig_backend_server_admin(b, IG_ADMIN_ENABLED);
				ig_log_info("discover: %s is back in %s", b->url, e->bc.url);
			}
			continue;
		}
		b = ig_backend_fleet_add_server(&gw->fleet, r->urls[i], &e->bc);
		if (!b) {
			ig_log_error("discover: %s: out of memory; not added", r->urls[i]);
			continue;
		}
		for (int k = 0; k < b->nranks; k++) {
			struct ig_backend *rb = ig_backend_rank(b, k);
			rb->discover = strdup(e->bc.url);
			ig_health_add(gw, rb);
		}
		ig_log_info("discover: backend %s added from %s (id %d), probing", b->url, e->bc.url, b->id);
	}
	for (size_t i = 0; i < gw->fleet.n; i++) {
		struct ig_backend *b = gw->fleet.v[i];
		if (!b->discover || strcmp(b->discover, e->bc.url) != 0 ||
		    atomic_load(&b->admin) == IG_ADMIN_REMOVING)
			continue;
		if (!bsearch(&b->url, r->urls, r->n, sizeof(char *), cmp_str)) {
			atomic_store(&b->admin, IG_ADMIN_REMOVING);
			ig_log_info("discover: %s no longer in %s: draining for removal, %ld in flight", b->url,
				    e->bc.url, atomic_load(&b->inflight));
		}
	}
}

/* The resolver thread posted results (its eventfd is readable). */
static void on_results(struct ig_event *ev, uint32_t events IG_UNUSED)
{
	struct ig_gw *gw = ev->data;
	struct ig_discovery *d = gw->discovery;
	uint64_t junk;
	if (!d)
		return;
	if (read(d->efd, &junk, sizeof(junk)) < 0 && errno != EAGAIN)
		ig_log_warn("discover: eventfd: %s", strerror(errno));
	pthread_mutex_lock(&d->mu);
	struct result *list = d->results;
	d->results = NULL;
	pthread_mutex_unlock(&d->mu);
	while (list) {
		struct result *r = list;
		list = r->next;
		struct entry *e = find_entry(d, r->name_url);
		if (e)
			apply(gw, e, r);
		result_free(r);
	}
	ig_health_reap(gw);
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag discover_rows[] = {
	{.name = "--discover-interval-s", .key = "discover_interval_s", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(discover_interval_s), .min = 1, .max = 86400, .def = "10", .metavar = "N",
	 .help = "how often discovered names are resolved again"},
};
const struct ig_conf_part ig_discover_conf = IG_CONF_PART(discover_rows);
