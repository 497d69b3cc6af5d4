/* The cluster's Redis I/O (cluster_sync.c): what other modules call of
 * it (through cluster.h, which includes this file), and what cluster.c
 * has it do: the sync and the key sync (their scripts and replies, read
 * with redismsg.c's validators), the subscriptions, the outbox of what is
 * published, the count of what Redis sent that was refused, and whether
 * this gateway shares or serves alone. All on reactor 0 but where said,
 * under the gateway's lock. */
#ifndef IG_CLUSTER_SYNC_H
#define IG_CLUSTER_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ig_gw;
struct ig_backend;
struct ig_cluster;
struct ig_redis;

/* Shares that backend b holds the stored response `id` (n bytes) of owner
 * (respstore.h's). Any reactor, under the lock. */
void ig_cluster_response_stored(struct ig_gw *gw, const char *id, size_t n, const struct ig_backend *b,
				uint32_t owner);
/* Tells the other gateways of a batch's or a file's change: PUBLISH "KIND
 * NAME REST" on infergate:data (REST from fmt), after SET key value PX
 * ttl_ms when key is not NULL. Any reactor, under the lock; sent by
 * reactor 0 at its next turn, dropped while Redis is down (a gateway that
 * joins again reads data_dir again). */
void ig_cluster_publish(struct ig_gw *gw, const char *key, const char *value, uint64_t ttl_ms, char kind,
			const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Something from Redis dropped as malformed: counted under kind (a string
 * literal, at most 31 characters of [a-z_]: IG_BAD_* of redismsg.h, or
 * redis.c's through its bad hook) in infergate_cluster_bad_messages_total,
 * logged the first time of each kind with detail (short; bytes outside
 * printable ASCII shown as '?'; never a whole message); the caller drops
 * the value. c may be NULL (logged only). Reactor 0 (or at the start),
 * under the lock. */
void ig_cluster_count_bad(struct ig_cluster *c, const char *kind, const char *detail);

/* ---- cluster.c's (reactor 0) ---- */

/* Redis's kinds of refused values at 0 from the start (their series). */
void ig_cluster_sync_bad_init(struct ig_cluster *c);
/* This gateway shares with the others (joined) or serves alone (why):
 * said once per change, the view made again when alone. */
void ig_cluster_sync_joined(struct ig_cluster *c, bool joined, const char *why);
/* Its two connections on reactor 0's loop (commands, subscriptions),
 * timeout_ms each. Returns 0 or -1 (out of memory). */
int ig_cluster_sync_connect(struct ig_cluster *c, uint64_t timeout_ms);
/* A blocking connection (at the start and the stop, when no loop runs):
 * connected, authenticated, its database selected, within timeout_ms.
 * NULL when not, with *why (malloc'd, when why is not NULL) and *refused:
 * Redis answered but refused the password or the database (a
 * configuration mistake). */
struct ig_redis *ig_cluster_sync_blocking(struct ig_cluster *c, uint64_t timeout_ms, char **why, bool *refused);
/* Subscribes to the channels when the connection is up and it is not yet. */
void ig_cluster_sync_subscribe(struct ig_cluster *c);
/* Sends the sync (its state, its name refreshed), the next at its period. */
void ig_cluster_sync_send(struct ig_cluster *c, uint64_t now);
/* Sends the key sync (the limited keys' demand), every half epoch. */
void ig_cluster_sync_keys(struct ig_cluster *c, uint64_t now);
/* Sends what waits in the outbox while Redis is up. */
void ig_cluster_sync_flush(struct ig_cluster *c);

#endif
