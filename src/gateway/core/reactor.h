/* The reactors: the gateway's event loops (the top of its layers but the
 * bootstrap, boot.c, which sets them up and tears them down through the
 * calls below). */
#ifndef IG_REACTOR_H
#define IG_REACTOR_H

#include "gateway.h"

/* The reactors for gw->cfg (`workers`), each with its handlers and empty
 * lists, and reactor 0's signal handler; this thread is reactor 0.
 * Returns 0, or -1 (out of memory); ig_reactor_free either way. */
int ig_reactor_new(struct ig_gw *gw);
/* Each reactor's epoll set, tick, wake-up and curl multi handle, then the
 * signals on reactor 0's signalfd. Returns 0 or -1 (logged). */
int ig_reactor_open(struct ig_gw *gw);
/* Runs until a stop signal and the grace period, or a reactor's failure;
 * reactor 0 (this thread) ends last. Returns the exit code. */
int ig_reactor_run(struct ig_gw *gw);
/* Closes what ig_reactor_open opened (the multi handles: after every
 * transfer left them) / frees what ig_reactor_new made. */
void ig_reactor_close(struct ig_gw *gw);
void ig_reactor_free(struct ig_gw *gw);

#endif
