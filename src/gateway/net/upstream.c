/* libcurl multi glue, after curl's docs/examples/ephiperfifo.c: curl tells us
 * which sockets to watch (socket callback) and when to wake it (timer
 * callback); we call curl_multi_socket_action from the reactor.
 * Keep-alive connections to each backend live in the multi's connection
 * cache and are reused across requests. A socket stays in our epoll set
 * while its connection idles in that cache, so a reused connection costs
 * no epoll_ctl at all; it leaves the set when curl closes it (close
 * callback) or when it stirs while idle (the backend closed it).
 * Each reactor has its own multi handle (struct ig_rx); a transfer is
 * started, run and stopped by that reactor's thread only. The reactor
 * calls curl's actions with the gateway's lock let go (a transfer's write
 * and header callbacks touch only the object that started it) and the
 * done callbacks with it taken (ig_upstream_check_done).
 * Not here: building a request's transfer (proxy.c) or a probe (health.c);
 * those hand a `struct ig_xfer` with their completion callback. */
#include "config.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conf/conf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "net/upstream.h"

void ig_upstream_check_done(struct ig_rx *rx)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(rx->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		/* The message is invalid once the handle is removed: copy first. */
		CURL *easy = msg->easy_handle;
		CURLcode result = msg->data.result;
		struct ig_xfer *x = NULL;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&x);
		curl_multi_remove_handle(rx->multi, easy);
		x->running = false;
		if (x->unpause_link.next)
			ig_list_del(&x->unpause_link);
		x->done(x, result);
	}
}

/* Registration state of curl's sockets, by fd. */
enum {
	FD_TRANSIENT = 1u << 29,  /* not a connection (the resolver's socketpair):
				   * curl closes it without the close callback */
	FD_REGISTERED = 1u << 30, /* in our epoll set, with the events below */
	FD_WANTED = 1u << 31,     /* curl watches it now (else: idle in the cache) */
};
#define FD_EVENTS(st) ((st) & (EPOLLIN | EPOLLOUT))

static uint32_t *fd_slot(struct ig_rx *rx, int fd)
{
	if (fd < 0)
		return NULL;
	if ((size_t)fd >= rx->ncurl_fds) {
		size_t n = rx->ncurl_fds ? rx->ncurl_fds : 1024;
		while (n <= (size_t)fd)
			n *= 2;
		uint32_t *v = realloc(rx->curl_fds, n * sizeof(*v));
		if (!v)
			return NULL;
		memset(v + rx->ncurl_fds, 0, (n - rx->ncurl_fds) * sizeof(*v));
		rx->curl_fds = v;
		rx->ncurl_fds = n;
	}
	return &rx->curl_fds[fd];
}

static void unregister(struct ig_rx *rx, int fd)
{
	uint32_t *st = fd_slot(rx, fd);
	if (st && (*st & FD_REGISTERED))
		epoll_ctl(rx->epfd, EPOLL_CTL_DEL, fd, NULL);
	if (st)
		*st = 0;
}

static int on_curl_socket(CURL *easy IG_UNUSED, curl_socket_t s, int what, void *userp,
			  void *socketp IG_UNUSED)
{
	struct ig_rx *rx = userp;
	uint32_t *st = fd_slot(rx, s);

	if (!st) { /* out of memory: plain add/remove */
		if (what == CURL_POLL_REMOVE)
			epoll_ctl(rx->epfd, EPOLL_CTL_DEL, s, NULL);
		return 0;
	}
	if (what == CURL_POLL_REMOVE) {
		if (*st & FD_TRANSIENT)
			unregister(rx, s);
		else
			*st &= ~FD_WANTED; /* a connection: stays registered while it idles */
		return 0;
	}
	uint32_t events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
	struct epoll_event ev = {.events = events, .data.u64 = IG_EV_CURL_BIT | (uint32_t)s};
	if (!(*st & FD_REGISTERED)) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		uint32_t transient = getsockname(s, (struct sockaddr *)&ss, &len) < 0 ||
				     (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) ? FD_TRANSIENT : 0;
		if (epoll_ctl(rx->epfd, EPOLL_CTL_ADD, s, &ev) < 0 && errno == EEXIST)
			epoll_ctl(rx->epfd, EPOLL_CTL_MOD, s, &ev);
		*st = FD_REGISTERED | FD_WANTED | transient | events;
		return 0;
	}
	if (FD_EVENTS(*st) != events)
		epoll_ctl(rx->epfd, EPOLL_CTL_MOD, s, &ev);
	*st = FD_REGISTERED | FD_WANTED | (*st & FD_TRANSIENT) | events;
	return 0;
}

/* curl closes a connection: leave the set first (the fd number will be
 * reused by the next socket, ours or MHD's). */
static int on_curl_close(void *clientp, curl_socket_t s)
{
	unregister(clientp, s);
	return close(s);
}

/* https backends: the TLS settings, on every transfer (handles are reset
 * between uses). Connection reuse is curl's as for plain HTTP: the settings
 * are the same for every transfer, so pooled connections match. */
static void tls_options(const struct ig_conf *cfg, CURL *e)
{
	if (cfg->tls_ca_file && *cfg->tls_ca_file) /* NULL only in a configuration made by hand (tests) */
		curl_easy_setopt(e, CURLOPT_CAINFO, cfg->tls_ca_file);
	if (cfg->tls_client_cert && *cfg->tls_client_cert) {
		curl_easy_setopt(e, CURLOPT_SSLCERT, cfg->tls_client_cert);
		curl_easy_setopt(e, CURLOPT_SSLKEY, cfg->tls_client_key);
	}
	if (!cfg->tls_verify) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	}
}

struct curl_slist *ig_upstream_backend_key(struct curl_slist *headers, const struct ig_conf *cfg)
{
	if (!*cfg->backend_api_key)
		return headers;
	char *line = ig_strdupf("Authorization: Bearer %s", cfg->backend_api_key);
	struct curl_slist *l = curl_slist_append(headers, line);
	free(line);
	return l;
}

CURLMcode ig_upstream_start(struct ig_rx *rx, struct ig_xfer *x)
{
	tls_options(rx->gw->cfg, x->easy);
	curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
	/* curl's socket closes are how sockets leave our epoll set. */
	curl_easy_setopt(x->easy, CURLOPT_CLOSESOCKETFUNCTION, on_curl_close);
	curl_easy_setopt(x->easy, CURLOPT_CLOSESOCKETDATA, rx);
	CURLMcode mc = curl_multi_add_handle(rx->multi, x->easy);
	x->running = mc == CURLM_OK;
	x->rx = rx;
	return mc;
}

void ig_upstream_stop(struct ig_xfer *x)
{
	if (x->running && x->rx->multi)
		curl_multi_remove_handle(x->rx->multi, x->easy);
	x->running = false;
	if (x->unpause_link.next)
		ig_list_del(&x->unpause_link);
}

void ig_upstream_unpause(struct ig_xfer *x)
{
	if (!x->running)
		return;
	if (!x->unpause_link.next)
		ig_list_init(&x->unpause_link);
	if (!ig_list_linked(&x->unpause_link))
		ig_list_append(&x->rx->unpause, &x->unpause_link);
}

void ig_upstream_run_unpauses(struct ig_rx *rx)
{
	struct ig_xfer *x;
	while ((x = IG_LIST_FIRST(&rx->unpause, struct ig_xfer, unpause_link))) {
		ig_list_del(&x->unpause_link);
		if (x->running)
			curl_easy_pause(x->easy, CURLPAUSE_CONT); /* may call the write callback */
	}
}

/* curl asks to be called back in timeout_ms (0: at once, -1: never). We
 * only note the deadline; the reactor's epoll_wait timeout honours it. A
 * timerfd re-armed here cost a syscall per request (a third of the
 * gateway's CPU in bench/results/profile-notes.md). */
static int on_curl_timer(CURLM *multi IG_UNUSED, long timeout_ms, void *userp)
{
	struct ig_rx *rx = userp; /* its own thread's: no lock needed */
	rx->curl_deadline_us = timeout_ms < 0 ? UINT64_MAX : ig_now_us() + (uint64_t)timeout_ms * 1000u;
	return 0;
}

int ig_upstream_init(struct ig_rx *rx)
{
	rx->curl_deadline_us = UINT64_MAX;
	rx->multi = curl_multi_init();
	if (!rx->multi) {
		ig_log_error("%s: cannot create the curl multi handle", __func__);
		return -1;
	}
	curl_multi_setopt(rx->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(rx->multi, CURLMOPT_SOCKETDATA, rx);
	curl_multi_setopt(rx->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(rx->multi, CURLMOPT_TIMERDATA, rx);
	/* Keep enough idle connections to reuse one per in-flight request. */
	curl_multi_setopt(rx->multi, CURLMOPT_MAXCONNECTS, (long)rx->gw->cfg->max_connections);
	return 0;
}

void ig_upstream_free(struct ig_rx *rx)
{
	/* Cached connections are closed here, through on_curl_close. */
	for (size_t i = 0; i < rx->neasy_free; i++)
		curl_easy_cleanup(rx->easy_free[i]);
	free(rx->easy_free);
	rx->easy_free = NULL;
	rx->neasy_free = 0;
	if (rx->multi)
		curl_multi_cleanup(rx->multi);
	rx->multi = NULL;
	free(rx->curl_fds);
	rx->curl_fds = NULL;
	rx->ncurl_fds = 0;
}

void ig_upstream_on_socket(struct ig_rx *rx, int fd, uint32_t events)
{
	int running, flags = 0;
	uint32_t *st = fd_slot(rx, fd);
	if (st && !(*st & FD_WANTED)) {
		/* An idle cached connection stirred: the backend closed it or
		 * sent something unasked. Stop watching; curl finds it dead when
		 * it next tries to reuse it. */
		unregister(rx, fd);
		return;
	}
	if (events & (EPOLLIN | EPOLLHUP))
		flags |= CURL_CSELECT_IN;
	if (events & EPOLLOUT)
		flags |= CURL_CSELECT_OUT;
	if (events & EPOLLERR)
		flags |= CURL_CSELECT_ERR;
	curl_multi_socket_action(rx->multi, fd, flags, &running);
}

void ig_upstream_on_timer(struct ig_rx *rx)
{
	int running;
	rx->curl_deadline_us = UINT64_MAX; /* the callback may set a new one */
	curl_multi_socket_action(rx->multi, CURL_SOCKET_TIMEOUT, 0, &running);
}

#define EASY_FREE_MAX 1024

CURL *ig_upstream_easy_get(struct ig_rx *rx)
{
	if (rx->neasy_free > 0)
		return rx->easy_free[--rx->neasy_free];
	return curl_easy_init();
}

void ig_upstream_easy_put(struct ig_rx *rx, CURL *easy)
{
	if (!easy)
		return;
	if (!rx->easy_free)
		rx->easy_free = calloc(EASY_FREE_MAX, sizeof(*rx->easy_free));
	if (rx->easy_free && rx->neasy_free < EASY_FREE_MAX) {
		curl_easy_reset(easy);
		rx->easy_free[rx->neasy_free++] = easy;
	} else {
		curl_easy_cleanup(easy);
	}
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag timeout_rows[] = {
	{.name = "--connect-timeout-ms", .key = "timeouts.connect_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(connect_ms),
	 .min = 1, .max = 600000, .def = "2000", .metavar = "N", .help = "backend connect timeout"},
	{.name = "--idle-timeout-s", .key = "timeouts.idle_s", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(idle_s), .min = 1,
	 .max = 86400, .def = "600", .metavar = "N", .help = "a backend silent this long is abandoned (504)"},
};
const struct ig_conf_part ig_upstream_conf_timeouts = IG_CONF_PART(timeout_rows);
static const struct ig_flag upstream_rows[] = {
	{.name = "--backend-api-key", .key = "backend_api_key", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(backend_api_key),
	 .def = "", .metavar = "KEY",
	 .help = "bearer token sent to backends (the client's key is never forwarded when keys are on)"},
	{.name = "--tls-ca-file", .key = "tls.ca_file", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(tls_ca_file), .def = "",
	 .metavar = "FILE", .help = "https backends: PEM CA certificates to verify them with (default: the system's)"},
	{.name = "--tls-client-cert", .key = "tls.client_cert", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(tls_client_cert),
	 .def = "", .metavar = "FILE", .help = "https backends: PEM client certificate (mutual TLS), with tls.client_key"},
	{.name = "--tls-client-key", .key = "tls.client_key", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(tls_client_key),
	 .def = "", .metavar = "FILE", .help = "https backends: the PEM private key of tls.client_cert"},
	{.name = "--tls-verify", .key = "tls.verify", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(tls_verify), .min = 0, .max = 1,
	 .def = "1", .metavar = "0|1", .help = "https backends: 0 = accept any certificate and host name (tests only)"},
};
const struct ig_conf_part ig_upstream_conf = IG_CONF_PART(upstream_rows);

/* The backends' TLS files, at start and on reload, before any backend is
 * asked. */
void ig_upstream_conf_check(struct ig_conf *cfg, struct ig_buf *errs)
{
	static const char *const names[3] = {"tls.ca_file", "tls.client_cert", "tls.client_key"};
	ig_conf_check_tls_files(errs, names, cfg->tls_ca_file, cfg->tls_client_cert, cfg->tls_client_key);
}
