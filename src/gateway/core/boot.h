/* The process's bootstrap: everything the reactors' loops run on, set up
 * from a checked configuration, and released. */
#ifndef IG_BOOT_H
#define IG_BOOT_H

#include "gateway.h"

/* Sets up the key files, the access log, the fleet (backend table), the Files and
 * Batch API stores, the listening socket, the reactors (epoll, timers,
 * signals, curl), the HTTP server, health checks and discovery for cfg.
 * Returns 0 or -1 (logged); ig_boot_free either way. */
int ig_boot_init(struct ig_gw *gw, struct ig_conf *cfg);
void ig_boot_free(struct ig_gw *gw);

#endif
