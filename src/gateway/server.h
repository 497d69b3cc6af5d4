/* The client side: libmicrohttpd in external epoll mode (the reactor runs
 * it), paths, keys, and the gateway's own endpoints. */
#ifndef IG_SERVER_H
#define IG_SERVER_H

#include "gateway.h"

/* Starts the HTTP server on gw->listen_fd, at most conn_limit connections.
 * Returns 0, or -1 (logged). */
int ig_server_start(struct ig_gw *gw, unsigned conn_limit);

#endif
