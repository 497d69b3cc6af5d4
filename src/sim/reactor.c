/* The one loop of infergate-sim: an epoll set holding MHD's epoll fd (MHD in
 * external mode), a signalfd, and the sockets of suspended clients (watched
 * for hang-up, which MHD cannot see while a connection is suspended). The
 * timeout is the nearer of MHD's and the engine's next deadline. Everything
 * runs on this thread, so resuming a connection needs no lock and no ITC. */
#include "config.h"
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "pd.h"
#include "reactor.h"
#include "server.h"

#define SIM_MAX_CONNECTIONS 20000

/* 1,000 streams need more than the usual 1,024 descriptors: take what the
 * hard limit allows, and keep MHD's connection limit below it. */
static unsigned connection_limit(void)
{
	long cur = ig_raise_nofile(SIM_MAX_CONNECTIONS + 32);
	unsigned lim = cur > 64 ? (unsigned)(cur - 32) : 32;
	return lim > SIM_MAX_CONNECTIONS ? SIM_MAX_CONNECTIONS : lim;
}

/* SIGINT, SIGTERM: stop taking work; sim_reactor_run ends the rest. */
static void on_signal(struct sim_event *ev, uint32_t events IG_UNUSED)
{
	struct sim *s = ev->data;
	struct signalfd_siginfo si;
	while (read(s->signal_fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		ig_log_info("signal %u: stopping", si.ssi_signo);
		s->stopping = true;
	}
}

int sim_reactor_init(struct sim *s)
{
	struct sim_conf *c = s->conf;
	unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME;
	sigset_t sigs;

	if (c->addr.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;

	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	s->signal_fd = signalfd(-1, &sigs, SFD_CLOEXEC | SFD_NONBLOCK);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (s->signal_fd < 0 || s->epfd < 0) {
		ig_log_error("%s: epoll/signalfd: %s", __func__, strerror(errno));
		return -1;
	}

	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, sim_server_handler, s,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&c->addr,
				  MHD_OPTION_NOTIFY_COMPLETED, sim_server_completed, s,
				  MHD_OPTION_CONNECTION_LIMIT, connection_limit(),
				  MHD_OPTION_LISTEN_BACKLOG_SIZE, 4096u,
				  /* Idle keep-alive connections go after 10 minutes;
				   * suspended ones (long generations) never time out. */
				  MHD_OPTION_CONNECTION_TIMEOUT, 600u,
				  MHD_OPTION_EXTERNAL_LOGGER, ig_httpd_log, NULL,
				  MHD_OPTION_END);
	if (!s->mhd) {
		ig_log_error("cannot listen on %s (address in use, or not a local address?)", c->listen);
		return -1;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
	/* MHD's fd needs no handler: every loop turn ends with MHD_run. */
	s->ev_mhd = (struct sim_event){.fd = di ? di->epoll_fd : -1, .handler = NULL, .data = s};
	s->ev_signal = (struct sim_event){.fd = s->signal_fd, .handler = on_signal, .data = s};
	if (!di || sim_event_add(s, &s->ev_mhd, EPOLLIN) < 0 || sim_event_add(s, &s->ev_signal, EPOLLIN) < 0) {
		ig_log_error("%s: epoll_ctl: %s", __func__, strerror(errno));
		return -1;
	}
	if (sim_pd_init(s) < 0)
		return -1;
	di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
	char engine[256];
	if (sim_conf_steps(c))
		snprintf(engine, sizeof(engine), "decode steps of %g ms + %g us/request + %g ns/context token, %g tokens/step, "
			 "prefill %g tokens/s, KV %ld tokens, time x%g", c->steps.step_ms, c->steps.per_request_us,
			 c->steps.per_context_ns, c->steps.tokens_per_step, c->steps.prefill_tps, c->steps.kv_tokens,
			 c->time_scale);
	else
		snprintf(engine, sizeof(engine), "%g tokens/s, TTFT %ld ms", c->tokens_per_second, c->ttft_ms);
	ig_log_info("listening on http://%s%s%s:%u as %s, model %s, %s, %ld slots x %ld ranks",
		    flags & MHD_USE_IPv6 ? "[" : "", c->listen_host, flags & MHD_USE_IPv6 ? "]" : "",
		    di ? (unsigned)di->port : (unsigned)c->listen_port,
		    c->flavor == SIM_FLAVOR_VLLM ? "vllm" : "sglang", c->model, engine, c->max_running, c->dp_ranks);
	return 0;
}

static void wait_and_dispatch(struct sim *s)
{
	struct epoll_event evs[256];
	uint64_t now = ig_now_us();
	int timeout = -1;
	MHD_UNSIGNED_LONG_LONG mt;

	if (MHD_get_timeout(s->mhd, &mt) == MHD_YES)
		timeout = mt > 3600000 ? 3600000 : (int)mt;
	int et = sim_engine_timeout_ms(&s->eng, now);
	if (et >= 0 && (timeout < 0 || et < timeout))
		timeout = et;
	int pt = sim_pd_timeout_ms(s, now);
	if (pt >= 0 && (timeout < 0 || pt < timeout))
		timeout = pt;
	if (s->need_mhd_run)
		timeout = 0;
	int n = epoll_wait(s->epfd, evs, sizeof(evs) / sizeof(evs[0]), timeout);
	if (n < 0 && errno != EINTR)
		ig_log_warn("%s: epoll_wait: %s", __func__, strerror(errno));
	/* Requests are freed only inside MHD_run (completion callback), so every
	 * pointer in this batch is still valid here. */
	for (int i = 0; i < n; i++) {
		struct sim_event *ev = evs[i].data.ptr;
		if (ev->handler)
			ev->handler(ev, evs[i].events);
	}
	sim_engine_run(&s->eng, ig_now_us());
	s->need_mhd_run = false;
	MHD_run(s->mhd);
	sim_pd_run(s, ig_now_us());
}

int sim_reactor_run(struct sim *s)
{
	while (!s->stopping)
		wait_and_dispatch(s);
	/* MHD must not be stopped with suspended connections: wake them all;
	 * their reader or handler sees `stopping` and ends them. */
	for (int round = 0; round < 10 && sim_server_wake_all(s); round++)
		MHD_run(s->mhd);
	ig_log_info("stopped: %llu served, %llu aborted, %llu failed",
		    (unsigned long long)s->eng.st.served, (unsigned long long)s->eng.st.aborted,
		    (unsigned long long)s->eng.st.failed);
	return 0;
}

void sim_reactor_free(struct sim *s)
{
	sim_pd_free(s);
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	s->mhd = NULL;
	if (s->epfd >= 0)
		close(s->epfd);
	if (s->signal_fd >= 0)
		close(s->signal_fd);
	s->epfd = s->signal_fd = -1;
}
