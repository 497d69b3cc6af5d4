/* A proxied call's life, as the rest of the gateway sees it: made by
 * server.c's handler, told when its client leaves, ticked and handed work
 * by its reactor. The exchange itself (struct ig_req) is in exchange.h. */
#ifndef IG_PROXY_H
#define IG_PROXY_H

#include <stdbool.h>
#include <stdint.h>
#include <jansson.h>

#include "gateway.h"
#include "path/exchange.h"


/* A new request for a proxied route (method: its IG_RT_ method bit; id:
 * the stored response a BY_ID route names, idn bytes, else NULL); its call
 * (req->call) reads the body, then admits, dispatches and answers. NULL
 * when out of memory. On the reactor whose daemon holds conn. */
struct ig_req *ig_proxy_req_new(struct ig_gw *gw, struct MHD_Connection *conn, int route_idx, unsigned method,
				const char *id, size_t idn);
/* The client left or the gateway stops: abort everything, let MHD close
 * (a detached request is freed). On its reactor. */
void ig_proxy_req_client_gone(struct ig_req *req);
/* On each reactor's housekeeping tick: idle timeouts and deadlines of its
 * requests. */
void ig_proxy_tick_rx(struct ig_rx *rx, uint64_t now_ms);
/* Wakes the readers waiting for an Idempotency-Key entry (idem.h's hook,
 * set at start). Under the lock. */
struct ig_idem_entry;
void ig_proxy_idem_wake(struct ig_idem_entry *e);
/* Does what other reactors asked of rx's requests (IG_HAND_*). */
void ig_proxy_run_posted(struct ig_rx *rx);
/* The request path's part of the boot: its /metrics family registered
 * (proxy_metrics.c). 0, or -1 out of memory. */
int ig_proxy_init(struct ig_gw *gw);

#endif
