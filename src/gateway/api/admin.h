/* The admin API: list, add, drain, enable and remove backends at run time. */
#ifndef IG_ADMIN_H
#define IG_ADMIN_H

#include <stddef.h>

#include "gateway.h"

/* Answers an /admin request whose key was checked and whose body (may be
 * empty) was read. Returns MHD's result. */
enum MHD_Result ig_admin_handle(struct ig_gw *gw, struct MHD_Connection *conn, const char *method,
				const char *url, const char *body, size_t len);

#endif
