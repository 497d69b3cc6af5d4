/* Several gateways acting as one, through Redis (the `cluster` section).
 * Each gateway has a name, unique among the live ones; every sync_ms it
 * tells Redis it is alive and learns who else is (Redis's clock decides who
 * is live: nothing depends on the gateways' clocks agreeing); what they
 * share goes through Redis too:
 * - keys' rpm and tpm: each gateway takes a share in proportion to its
 *   demand (cluster_share.h's ig_cluster_share);
 * - backends' slots and keys' max_inflight: each gateway states what it
 *   claims, and claims its part of what the others leave free, split by
 *   the weights of the keys waiting at each (cluster_share.h's
 *   ig_cluster_claim): no backend
 *   is sent more than it states by all of them together, a key's weight
 *   and cap hold across them, and a gateway holding only low work leaves
 *   the slots to another's high and normal requests;
 * - stored Responses: which backend holds each response id, published when
 *   a gateway relays it and kept under its key for the response's life, so
 *   that a follow-up or a GET through any gateway reaches it;
 * - files and batches: what batches_lease.c publishes (its hooks, below).
 * Nothing waits on Redis: a gateway whose Redis is down or slow serves
 * alone (and says so), and joins again when Redis answers.
 * Runs on reactor 0 (its Redis connections are on that reactor's epoll
 * set), under the gateway's lock; what other reactors hand it goes through
 * an outbox under the same lock.
 * What it learns of the others is one view per sync (cluster_view.h),
 * published whole in gw->cluster_view, that the scheduler and the rest
 * read and do not write; the arithmetic behind it is cluster_share.c's.
 * Not here: the connection itself (redis.c). */
#ifndef IG_CLUSTER_H
#define IG_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/cluster_sync.h"
#include "net/redis.h"

struct ig_gw;
struct ig_backend;
struct ig_cluster;

/* Whether the configuration names a cluster. */
bool ig_cluster_configured(const struct ig_gw *gw);
/* At start, before the reactors run (blocking is allowed there): resolves
 * Redis's host, and when Redis answers within a second, refuses a name a
 * live gateway holds. Returns 0, -1 (out of memory, logged) or -2 (the
 * name is taken: logged; exit 2). Redis unreachable is not an error: the
 * gateway serves alone until it answers. */
int ig_cluster_start(struct ig_gw *gw);
void ig_cluster_stop(struct ig_gw *gw);
/* On reactor 0's tick and after its events: connects, syncs, flushes the
 * outbox. */
void ig_cluster_tick(struct ig_gw *gw, uint64_t now_ms);
/* At the stop (after the loops): this gateway held batch id's lease with
 * this fencing token; ig_cluster_stop lets go of it, so that another
 * takes the batch over at once. */
void ig_cluster_lease_held(struct ig_gw *gw, const char *id, uint64_t fence);
/* What a module above (batches_lease.c) is told: a message of another
 * gateway on infergate:data (KIND 'b', 'p', 'c' for batches, 'f', 'd' for
 * files; rest "ID ..."); this gateway joining again after being alone (to
 * read data_dir again for what was said meanwhile); a gateway leaving (it
 * may have let go of batches). Reactor 0, under the lock. */
struct ig_cluster_hooks {
	void (*message)(struct ig_gw *gw, char kind, const char *rest);
	void (*joined)(struct ig_gw *gw);
	void (*left)(struct ig_gw *gw);
};
/* Sets them (a static table; a no-op without a cluster). */
void ig_cluster_hooks(struct ig_gw *gw, const struct ig_cluster_hooks *hooks);
/* Whether this gateway shares with the others now. */
bool ig_cluster_joined(const struct ig_gw *gw);
/* "NAME TOKEN": this process among the gateways (a batch's lease holds it). */
const char *ig_cluster_holder(const struct ig_gw *gw);
/* A command on the cluster's Redis connection (reactor 0, joined only):
 * fn gets the reply, NULL when the connection drops. Returns 0 or -1. */
int ig_cluster_command(struct ig_gw *gw, ig_redis_reply_fn *fn, void *privdata, int argc, const char **argv,
		       const size_t *lens);
/* The same from any reactor, under the lock: queued, sent at reactor 0's
 * next turn; fn gets the reply there (under the lock), or NULL when the
 * connection drops first, this gateway comes to serve alone, or it stops.
 * Returns 0, or -1 (alone now, or too many queued: fn is not called). */
int ig_cluster_ask(struct ig_gw *gw, ig_redis_reply_fn *fn, void *privdata, int argc, const char **argv,
		   const size_t *lens);
/* Its state is reported through metrics.h's sources: "cluster" in
 * /health/backends, infergate_cluster_* in /metrics. */

#endif
