/* The two objects through which the gateway's loops call back into the
 * module that owns a piece of work, each carrying its own handler (nginx's
 * ev->handler, Redis's aeFileProc): an event source of a reactor's epoll
 * set (struct ig_event) and whatever answers one client request on an MHD
 * connection (struct ig_call). Types only; the reactor's side of them
 * (adding an event to an epoll set) is rx.h's, the MHD side server.c's.
 * Not here: the reactors themselves (rx.h) or the shared state (gateway.h). */
#ifndef IG_EVENT_H
#define IG_EVENT_H

#include <microhttpd.h>
#include <stddef.h>
#include <stdint.h>

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
};

#endif
