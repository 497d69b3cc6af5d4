/* The open loop of infergate-bulk replay (replay_run.c). */
#ifndef IG_BULK_REPLAY_RUN_H
#define IG_BULK_REPLAY_RUN_H

#include "replay_state.h"

/* Sends every request of r->t at its time. Returns 0 (ran to the end or
 * stopped: r->stopping, r->fatal say which), -1 when it could not start. */
int ig_replay_run(struct ig_replay *r);

#endif
