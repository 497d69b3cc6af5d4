/* libcurl multi glue, after curl's docs/examples/ephiperfifo.c: curl tells us
 * which sockets to watch (socket callback) and when to wake it (timer
 * callback, a timerfd); we call curl_multi_socket_action from the reactor.
 * Keep-alive connections to each backend live in the multi's connection
 * cache and are reused across requests.
 * Not here: building a request's transfer (proxy.c) or a probe (health.c). */
#include "config.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "infergate/gateway.h"
#include "infergate/log.h"
#include "infergate/util.h"

static void check_done(struct ig_gw *gw)
{
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(gw->multi, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		CURL *easy = msg->easy_handle;
		CURLcode result = msg->data.result;
		void *priv = NULL;
		curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&priv);
		/* The message is invalid once the handle is removed: copy first. */
		if (*(enum ig_xfer_kind *)priv == IG_XFER_REQUEST)
			ig_req_upstream_done(priv, result);
		else
			ig_health_probe_done(gw, priv, result);
	}
}

static int on_curl_socket(CURL *easy IG_UNUSED, curl_socket_t s, int what, void *userp,
			  void *socketp)
{
	struct ig_gw *gw = userp;
	struct epoll_event ev = {0};

	if (what == CURL_POLL_REMOVE) {
		epoll_ctl(gw->epfd, EPOLL_CTL_DEL, s, NULL);
		curl_multi_assign(gw->multi, s, NULL);
		return 0;
	}
	ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
	ev.data.u64 = IG_EV_CURL_BIT | (uint32_t)s;
	if (!socketp) {
		if (epoll_ctl(gw->epfd, EPOLL_CTL_ADD, s, &ev) < 0 && errno == EEXIST)
			epoll_ctl(gw->epfd, EPOLL_CTL_MOD, s, &ev);
		curl_multi_assign(gw->multi, s, gw); /* any non-NULL marks "added" */
	} else if (epoll_ctl(gw->epfd, EPOLL_CTL_MOD, s, &ev) < 0 && errno == ENOENT) {
		epoll_ctl(gw->epfd, EPOLL_CTL_ADD, s, &ev);
	}
	return 0;
}

/* curl asks to be called back in timeout_ms (0: at once, -1: never). We
 * only note the deadline; the reactor's epoll_wait timeout honours it. A
 * timerfd re-armed here cost a syscall per request (a third of the
 * gateway's CPU in bench/results/profile-notes.md). */
static int on_curl_timer(CURLM *multi IG_UNUSED, long timeout_ms, void *userp)
{
	struct ig_gw *gw = userp;
	gw->curl_deadline_us = timeout_ms < 0 ? UINT64_MAX : ig_now_us() + (uint64_t)timeout_ms * 1000u;
	return 0;
}

int ig_upstream_init(struct ig_gw *gw)
{
	gw->curl_deadline_us = UINT64_MAX;
	gw->multi = curl_multi_init();
	if (!gw->multi) {
		ig_log_error("%s: cannot create the curl multi handle", __func__);
		return -1;
	}
	curl_multi_setopt(gw->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(gw->multi, CURLMOPT_SOCKETDATA, gw);
	curl_multi_setopt(gw->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(gw->multi, CURLMOPT_TIMERDATA, gw);
	/* Keep enough idle connections to reuse one per in-flight request. */
	curl_multi_setopt(gw->multi, CURLMOPT_MAXCONNECTS, (long)gw->cfg->max_connections);
	return 0;
}

void ig_upstream_free(struct ig_gw *gw)
{
	for (size_t i = 0; i < gw->neasy_free; i++)
		curl_easy_cleanup(gw->easy_free[i]);
	free(gw->easy_free);
	gw->easy_free = NULL;
	gw->neasy_free = 0;
	if (gw->multi)
		curl_multi_cleanup(gw->multi);
	gw->multi = NULL;
}

void ig_upstream_on_socket(struct ig_gw *gw, int fd, uint32_t events)
{
	int running, flags = 0;
	if (events & (EPOLLIN | EPOLLHUP))
		flags |= CURL_CSELECT_IN;
	if (events & EPOLLOUT)
		flags |= CURL_CSELECT_OUT;
	if (events & EPOLLERR)
		flags |= CURL_CSELECT_ERR;
	curl_multi_socket_action(gw->multi, fd, flags, &running);
	check_done(gw);
}

void ig_upstream_on_timer(struct ig_gw *gw)
{
	int running;
	gw->curl_deadline_us = UINT64_MAX; /* the callback may set a new one */
	curl_multi_socket_action(gw->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	check_done(gw);
}

#define EASY_FREE_MAX 1024

CURL *ig_gw_easy_get(struct ig_gw *gw)
{
	if (gw->neasy_free > 0)
		return gw->easy_free[--gw->neasy_free];
	return curl_easy_init();
}

void ig_gw_easy_put(struct ig_gw *gw, CURL *easy)
{
	if (!easy)
		return;
	if (!gw->easy_free)
		gw->easy_free = calloc(EASY_FREE_MAX, sizeof(*gw->easy_free));
	if (gw->easy_free && gw->neasy_free < EASY_FREE_MAX) {
		curl_easy_reset(easy);
		gw->easy_free[gw->neasy_free++] = easy;
	} else {
		curl_easy_cleanup(easy);
	}
}
