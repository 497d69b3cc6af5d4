/* DNS discovery of backends: `discover` entries of the configuration are
 * resolved on a thread of their own; results are applied on the reactor. */
#ifndef IG_DISCOVER_H
#define IG_DISCOVER_H

#include "gateway.h"

/* Starts resolving the configuration's discover entries (none: does
 * nothing). Returns 0, or -1 (logged). */
int ig_discover_start(struct ig_gw *gw);
void ig_discover_stop(struct ig_gw *gw);

#endif
