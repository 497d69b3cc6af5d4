/* The objects through which the gateway's loops call back into the
 * module that owns a piece of work, each carrying its own handler (nginx's
 * ev->handler, Redis's aeFileProc): an event source of a reactor's epoll
 * set (struct ig_event), whatever answers one client request on an MHD
 * connection (struct ig_call), and work posted to a reactor (struct
 * ig_rx_job). Types only; the reactor's side of them (adding an event to
 * an epoll set, posting a job) is rx.h's, the MHD side server.c's.
 * Not here: the reactors themselves (rx.h) or the shared state (gateway.h). */
#ifndef IG_EVENT_H
#define IG_EVENT_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

#include "infergate/list.h"

struct ig_gw;

/* An event source of a reactor's epoll set: the loop calls its handler
 * with the epoll events, so it needs no switch over kinds. */
struct ig_event {
	int fd;
	void (*handler)(struct ig_event *ev, uint32_t events);
	void *data;
};

/* What the MHD access handler calls for one connection's request: *con_cls
 * always points to one of these, embedded in the object that answers (a
 * proxied request, an admin call, a Files or Batch API call, or a fixed
 * answer), so the server tells objects apart by the function they carry,
 * not by a tag. */
struct ig_call {
	enum MHD_Result (*on_request)(struct ig_call *call, struct ig_gw *gw, struct MHD_Connection *conn,
				      const char *url, const char *method, const char *upload_data,
				      size_t *upload_data_size, void **con_cls);
	/* The connection is done with the request (MHD_OPTION_NOTIFY_COMPLETED);
	 * frees what the call owns. NULL: nothing to do. */
	void (*on_completed)(struct ig_call *call, enum MHD_RequestTerminationCode toe);
	/* Its client closed its side while the call held the connection
	 * (server.c watches every client's socket): abort what runs for it and
	 * let MHD close the connection (a suspended one resumed). NULL: MHD
	 * sees the end itself, once it reads again. */
	void (*on_hangup)(struct ig_call *call);
};

/* Work handed to a reactor and run on its thread at the end of its turn
 * (nginx's posted events), embedded in the object it acts on: how one
 * reactor has another act on that one's library objects without touching
 * them. Nobody waits for it. All zero is a job not posted (rx.h:
 * ig_rx_post). */
struct ig_rx_job {
	void (*run)(struct ig_rx_job *job);
	struct ig_list link;           /* on its reactor's `jobs` while posted */
};

/* Periodic work a module registers at boot (rx.h: ig_rx_every), as Redis's
 * aeCreateTimeEvent: the reactors call it, the reactor knows it by no
 * name. */
struct ig_rx;
typedef void (*ig_rx_timer_fn)(struct ig_rx *rx, uint64_t now_ms, void *arg);
enum ig_rx_which {
	IG_RX_HOME, /* reactor 0 only (the control plane's: health, queues, batches) */
	IG_RX_EACH, /* every reactor, each on its own */
};
struct ig_rx_timer {
	ig_rx_timer_fn fn;
	void *arg;
	enum ig_rx_which which;
	unsigned period_ms;    /* 0: every loop turn; up to IG_RX_TICK_MS: every tick */
	int order;             /* lower first within a turn (enum ig_rx_order) */
};
#define IG_RX_MAX_TIMERS 24

#endif
