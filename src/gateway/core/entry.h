/* A request's way in, once its head is read (entry.c): the checks made
 * before its body, then which code answers it. server.c calls it from its
 * access handler; on the reactor holding the connection, under the lock. */
#ifndef IG_ENTRY_H
#define IG_ENTRY_H

#include <microhttpd.h>
#include <stdbool.h>

#include "net/event.h"
#include "net/rx.h"

struct ig_conf;

/* At the server's start: the answers made from the route table (routes
 * are fixed from then on), and hangup, which tells a new request object
 * of its client's hang-up when one came before it (server.c's watch). */
void ig_entry_start(const struct ig_conf *cfg, void (*hangup)(struct MHD_Connection *conn, struct ig_call *call));

/* The first call of a request on conn (its head read, *con_cls NULL),
 * by door: refused at once (over_ip_cap: its client is over
 * max_connections_per_ip; its framing; its declared length), else
 * *con_cls set to the call that routes it when MHD calls again. */
enum MHD_Result ig_entry_head(struct ig_gw *gw, enum ig_door door, struct MHD_Connection *conn, const char *url,
			      const char *method, bool over_ip_cap, void **con_cls);

#endif
