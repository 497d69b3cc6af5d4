/* The reactor: the gateway's one event loop (the top of its layers). */
#ifndef IG_REACTOR_H
#define IG_REACTOR_H

#include "gateway.h"

/* Sets up epoll, timers, signals, the HTTP server, curl, health checks and
 * discovery for cfg. Returns 0 or -1 (logged); ig_reactor_free either way. */
int ig_reactor_init(struct ig_gw *gw, struct ig_conf *cfg);
/* Runs until a stop signal and the grace period; returns the exit code. */
int ig_reactor_run(struct ig_gw *gw);
void ig_reactor_free(struct ig_gw *gw);

#endif
