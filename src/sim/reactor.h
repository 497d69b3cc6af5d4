/* infergate-sim's one loop (reactor.c). */
#ifndef IG_SIM_REACTOR_H
#define IG_SIM_REACTOR_H

#include "sim.h"

/* Starts MHD, epoll and signals. Returns 0 or -1 (logged). */
int sim_reactor_init(struct sim *s);
/* Runs until SIGINT/SIGTERM; returns the exit code. */
int sim_reactor_run(struct sim *s);
void sim_reactor_free(struct sim *s);

#endif
