/* The engines' KV events, subscribed to off the reactors: one thread for
 * every source (a backend's data-parallel rank) polls a SUB socket on the
 * engine's publisher per source, and a DEALER on its replay ROUTER when it
 * has one; each batch is checked, decoded (infergate/kvwire.h) and handed
 * to the sink (the exact prefix index, sched/kvindex.h, which boot.c
 * wires in: this layer does not call up), in sequence: a gap is filled
 * from the replay, else the source is cleared and counted lost; a sequence
 * that starts again is an engine restarted. A backend's atomics (backend.h:
 * kv_exact, kv_src, kv_ranks) tell the routing policy whether to believe
 * the index for it.
 * Not here: the codec (src/common/kvwire.c), the index, the policy. */
#ifndef IG_KVEVENTS_H
#define IG_KVEVENTS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "fleet/backend.h"
#include "infergate/buf.h"
#include "infergate/kvwire.h"

struct ig_kvevents;

/* What the events feed, called on the events thread (blocks: from any). */
struct ig_kvevents_sink {
	void (*apply)(void *arg, size_t src, const struct ig_kv_batch *b);
	void (*clear)(void *arg, size_t src);     /* forget every block of src */
	uint64_t (*blocks)(void *arg, size_t src); /* (src, block) pairs held now */
	void *arg;
};

/* A replay that has not ended within this is given up (the gap lost). */
#define IG_KVEV_REPLAY_TIMEOUT_MS 1000

/* Whether cfg subscribes to any engine's events (kv_events.port, or a
 * backend's kv_events). */
bool ig_kvevents_wanted(const struct ig_conf *cfg);
/* The sources an index for cfg must hold: every configured backend's
 * ranks, and room for as many again that discovery or a reload add. */
size_t ig_kvevents_sources(const struct ig_conf *cfg);

/* Starts the events thread for nsrc sources feeding sink. Returns it, or
 * NULL with *err (malloc'd). */
struct ig_kvevents *ig_kvevents_start(size_t nsrc, const struct ig_kvevents_sink *sink, char **err);
/* Subscribes every backend of the fleet that cfg gives events to, and
 * drops the subscriptions of backends gone or whose endpoints changed
 * (their sources cleared): at boot, and then every second on reactor 0,
 * under the gateway's lock. Takes stale_after_ms from cfg. */
void ig_kvevents_sync(struct ig_kvevents *kv, const struct ig_fleet *fleet, const struct ig_conf *cfg);
/* Stops the thread (joined), closes the sockets, frees kv. NULL: nothing. */
void ig_kvevents_stop(struct ig_kvevents *kv);

/* b's "kv_events" object for /health/backends (nothing when it has no
 * subscription): endpoint, state, counters summed over its ranks. */
void ig_kvevents_report(struct ig_kvevents *kv, const struct ig_backend *b, json_t *entry);
/* The Prometheus families (infergate_kv_events_total{backend,what},
 * infergate_kv_event_errors_total{backend,kind}, infergate_kv_events_exact
 * {backend}); arg: the struct ig_kvevents. */
void ig_kvevents_prom(void *arg, struct ig_buf *out);

/* A source's endpoint: ep for rank 0, then tcp port + rank, or ipc path
 * "_dpR" (vLLM's offset_endpoint_port). Malloc'd. */
char *ig_kvevents_rank_endpoint(const char *ep, int rank);

#endif
