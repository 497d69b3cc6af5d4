/* infergate-sim's shared state: the one `struct sim` the reactor and the
 * HTTP side are handed, and the event sources the reactor dispatches. Types
 * and inline helpers only: no module's functions are declared here.
 *
 * The layers, calls only going down (docs/how-it-is-built.md):
 *   main.c     startup
 *   reactor.c  the loop: MHD in external epoll mode, the engine's deadlines,
 *              signals and the hang-up watches of suspended clients
 *   server.c   the HTTP side: routes, answers, stream req->out through MHD
 *   anthropic.c  /v1/messages: its body into a chat request, the answer back
 *   parse.c    a generation request's body into a struct sim_req
 *   metrics.c  the bodies of /metrics, /v1/loads, /get_load, /sim/state
 *   pooling.c  embeddings, rerank, score, classify (answered at once)
 *   engine.c   slots, queues, the deadline heap, pacing (no HTTP)
 *   wire.c     the answers' bytes: JSON, SSE chunks, usage, error events
 *   stored.c  kvcache.c  text.c  conf.c
 * One thread owns everything, so MHD_resume_connection is always called on
 * MHD's own thread and nothing needs a lock. The engine reports through the
 * `wake` callback in each request; the server asks the reactor for another
 * MHD turn through `need_mhd_run`. */
#ifndef IG_SIM_H
#define IG_SIM_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "conf.h"
#include "engine.h"
#include "infergate/list.h"

#define SIM_MAX_BODY (16u * 1024 * 1024) /* larger request bodies get 413 */

/* A file descriptor in the reactor's epoll set, with what to do when it is
 * ready (NULL: nothing beyond the MHD turn every loop takes). */
struct sim_event {
	int fd;
	void (*handler)(struct sim_event *ev, uint32_t events);
	void *data;
};

struct sim_stored;
struct sim_pd;

/* Prefill/decode disaggregation's counts (pd.c writes, metrics.c reads). */
struct sim_pd_stats {
	uint64_t sent, received;    /* KV hand-overs completed, as prefill / as decode */
	uint64_t failed;            /* hand-overs that failed or timed out, either side */
	uint64_t bootstrap_failed;  /* of which SGLang prefills no decode took in time */
	uint64_t expired;           /* of which vLLM prefills' blocks no decode read in time */
	uint64_t bytes_sent, bytes_received;
	long held;                  /* rooms whose KV waits for its decode now */
	long asking;                /* decodes waiting at the listener for a room not ready */
};

struct sim {
	struct sim_conf *conf;
	struct sim_engine eng;
	struct MHD_Daemon *mhd;
	int epfd, signal_fd;
	struct sim_event ev_mhd, ev_signal;
	struct ig_list calls;       /* server.c: every live HTTP request object */
	size_t ncalls;
	bool need_mhd_run;          /* a connection was resumed: run MHD again at once */
	bool stopping;              /* SIGINT/SIGTERM: refuse new work, end the rest */
	bool load_warned;           /* /get_load's deprecation logged */
	long fault_probes;          /* server.c: /health answers left in this fault
				     * mode (POST /sim/fault "probes"); 0: no end */
	int fault_then;             /* enum sim_fault: the mode after them */
	struct sim_stored *stored;  /* stored.c: stored Responses, a ring */
	size_t nstored;             /* ids put so far */
	/* The traceparent headers of the last completion requests, newest
	 * last (a ring): a real engine continues the trace it is given, the
	 * tests read them from /sim/state. */
	char traceparents[16][64];
	size_t ntraceparents;       /* seen so far */
	struct sim_pd *pd;          /* pd.c: the listener, rooms and fetches; NULL: no PD role */
	struct sim_pd_stats pd_st;
};

static inline int sim_event_add(struct sim *s, struct sim_event *ev, uint32_t events)
{
	struct epoll_event e = {.events = events, .data.ptr = ev};
	return epoll_ctl(s->epfd, EPOLL_CTL_ADD, ev->fd, &e);
}

static inline void sim_event_del(struct sim *s, struct sim_event *ev)
{
	epoll_ctl(s->epfd, EPOLL_CTL_DEL, ev->fd, NULL);
}

#endif
