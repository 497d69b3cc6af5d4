/* The gateway's configuration table: the modules' parts, listed once
 * (conf_parts.c). */
#ifndef IG_CONF_PARTS_H
#define IG_CONF_PARTS_H

/* Registers the modules' rows and checks with conf.c (ig_conf_register):
 * before any other ig_conf_* call. Returns 0 or -1 (a table too long: a
 * bug, said on stderr). */
int ig_conf_parts_register(void);

#endif
