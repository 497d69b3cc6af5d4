/* Re-reading the configuration on SIGHUP, and the files it names (keys,
 * access log), which are also loaded at start. */
#ifndef IG_RELOAD_H
#define IG_RELOAD_H

#include "gateway.h"

/* Loads the key files and opens the access log that cfg names, replacing
 * gw's only when all succeed. Returns 0, or -1 with *err (malloc'd) naming
 * the key and the problem. */
int ig_reload_files(struct ig_gw *gw, const struct ig_conf *cfg, char **err);
/* SIGHUP: re-reads the configuration; on any problem keeps the running one
 * (logged). */
void ig_reload(struct ig_gw *gw);

#endif
