/* The client side: libmicrohttpd in external epoll mode (the reactor runs
 * it), paths, keys, and the gateway's own endpoints. */
#ifndef IG_SERVER_H
#define IG_SERVER_H

#include <stdint.h>

/* The client connections' counters (server.c writes them, its family of
 * /metrics prints them). Before gateway.h, which embeds them in struct
 * ig_gw (gw->server_stats). */
struct ig_server_stats {
	uint64_t client_hangups;    /* client connections seen closing their side (the watch) */
	uint64_t header_timeouts;   /* client connections cut for client_header_timeout_s */
	uint64_t per_ip_refused[2]; /* max_connections_per_ip: connections refused at accept,
				     * requests through a trusted proxy at their headers */
};

struct ig_gw;
struct ig_rx;

#include "gateway.h"

/* Starts the HTTP server: one libmicrohttpd daemon in each reactor now,
 * more (up to IG_HTTPD_SHARDS, gateway.h) as the connections accepted on
 * gw->listen_fd need them, at most conn_limit connections at once, all
 * reactors together. Returns 0, or -1 (logged). */
int ig_server_start(struct ig_gw *gw, unsigned conn_limit);
/* Every daemon with connections runs this turn, and accepting resumes if
 * it had paused for want of descriptors. The tick calls it: each daemon
 * runs at least once a tick, as the one daemon of before ran at least
 * every turn, for its client timeouts and for any work libmicrohttpd keeps
 * without signalling it (ig_server_run), which then waits at most a tick. */
void ig_server_wake_all(struct ig_rx *rx);
/* The tick's: client connections whose request head is later than
 * client_header_timeout_s are cut (a 408, or closed), and those kept alive
 * a while watch for their next request's first byte. */
void ig_server_tick(struct ig_rx *rx, uint64_t now_ms);
/* Whether a daemon of rx has work now (the reactor must not sleep). */
bool ig_server_busy(struct ig_rx *rx);
/* MHD_run for each daemon of rx with work. */
void ig_server_run(struct ig_rx *rx);
/* Reactor 0 watches the listening socket again if accepting had paused
 * and a connection has closed since (on any reactor). */
void ig_server_resume_accept(struct ig_gw *gw);
/* rx's daemons take the client sockets reactor 0 handed to it. */
void ig_server_take_handed(struct ig_rx *rx);
/* Closes the listening socket: no new clients (SIGTERM). */
void ig_server_stop_accepting(struct ig_gw *gw);
/* Stops rx's daemons; their completion callbacks free the requests. */
void ig_server_stop(struct ig_rx *rx);

#endif
