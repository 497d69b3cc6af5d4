/* Re-reading the configuration on SIGHUP, and the files it names (keys,
 * access log), which are also loaded at start. */
#ifndef IG_RELOAD_H
#define IG_RELOAD_H

#include "gateway.h"

/* Loads the key files and opens the access log that cfg names, replacing
 * gw's only when all succeed (then the scheduler takes the keys' settings
 * and cfg's). Returns 0, or -1 with *err (malloc'd, a problem per line)
 * naming the file, the entry and the field. */
int ig_reload_files(struct ig_gw *gw, const struct ig_conf *cfg, char **err);
/* Only checks the key files cfg names (--check-config). Returns 0 or -1
 * with *err as above. */
int ig_reload_check_files(const struct ig_conf *cfg, char **err);
/* SIGHUP: re-reads the configuration; on any problem keeps the running one
 * (logged). Returns 0 when the new one was applied, -1 when refused. */
int ig_reload(struct ig_gw *gw);

#endif
