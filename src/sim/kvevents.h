/* --kv-events: a rank's prefix cache published as an engine's KV events
 * (kvevents.c). The cache records its changes (kvcache.h); this sends them,
 * one batch a step, through a publisher of its own per DP rank
 * (include/infergate/kvpub.h: its own thread, so the engine never waits). */
#ifndef IG_SIM_KVEVENTS_H
#define IG_SIM_KVEVENTS_H

#include "conf.h"
#include "kvcache.h"

struct ig_kvpub;

/* Binds rank's publisher on --kv-events (and --kv-events-replay), the
 * ports offset by the rank as vLLM's, and starts kv's log. Returns it, or
 * NULL (logged: the endpoint and why). */
struct ig_kvpub *sim_kvevents_open(const struct sim_conf *c, struct sim_kv *kv, int rank);
/* Sends what kv recorded since the last call as one batch (nothing when
 * nothing changed): vLLM's scheduler takes its events once a step
 * (vllm/v1/core/sched/scheduler.py, kv_cache_manager.take_events). */
void sim_kvevents_publish(const struct sim_conf *c, struct ig_kvpub *pub, struct sim_kv *kv, int rank);
void sim_kvevents_close(struct ig_kvpub *pub);

#endif
