/* infergate-sim's HTTP side (server.c): routes, request parsing, the
 * answers of the GET endpoints, and the MHD responses that carry what the
 * engine writes into a request's `out`. */
#ifndef IG_SIM_SERVER_H
#define IG_SIM_SERVER_H

#include <microhttpd.h>
#include <stdbool.h>

#include "sim.h"

void sim_server_init(struct sim *s);
/* MHD's access handler and completion callback (cls is the struct sim). */
enum MHD_Result sim_server_handler(void *cls, struct MHD_Connection *conn, const char *url,
				   const char *method, const char *version,
				   const char *upload_data, size_t *upload_data_size,
				   void **con_cls);
void sim_server_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			  enum MHD_RequestTerminationCode toe);
/* Resumes every suspended connection, so it sees `stopping` and ends.
 * Returns false when none was suspended. */
bool sim_server_wake_all(struct sim *s);

#endif
