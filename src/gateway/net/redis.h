/* One connection to Redis, driven by a reactor's epoll loop, with what
 * Redis sends treated as untrusted input. hiredis does what it does well:
 * the RESP parser (redisReader) and the command formatter; the connection
 * itself is ours (a non-blocking socket on the reactor's epoll set, a
 * write buffer, a FIFO of callbacks, OpenSSL for rediss://), because
 * hiredis 0.14's async layer (Debian 12's) aborts the process on replies
 * it did not expect (its asserts on pub/sub pushes and on replies no
 * command asked for) and has no TLS.
 * Nothing here blocks on a reactor: the connect and the TLS handshake are
 * non-blocking (the host is resolved once, at start, by the caller),
 * replies come back through callbacks, and a command unanswered within the
 * timeout drops the connection, which is tried again with a backoff.
 * A reply no command asked for, a protocol error, a reply over
 * IG_REDIS_MAX_REPLY bytes or elements: the connection is dropped and
 * tried again; a pub/sub push that is not exactly a subscription's
 * confirmation or a message is dropped alone. Each is told to the bad
 * hook (ig_redis_set_bad_fn), nothing aborts.
 * Also a blocking connection for the start and the stop, when no loop
 * runs (ig_redis_connect_blocking, ig_redis_call): the same code, waited
 * on with poll.
 * The URL and the TLS context are set up once, in redis_link.c; the
 * connection (redis.c) takes them as they are.
 * Not here: what is kept in Redis (cluster.c). */
#ifndef IG_REDIS_H
#define IG_REDIS_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "net/redis_link.h"

struct ig_rx;

/* The most one reply may take, in bytes waiting to be parsed and in the
 * parsed reply (strings, and 64 bytes per element), and the most elements
 * one array may declare: far above what the cluster's scripts return
 * (the sync's states, a key sync of 100,000 keys), far below what would
 * hurt. hiredis 0.14's reader has no such limit: a "$2000000000" header
 * waits for 2 GB, a "*2000000000" allocates 16 GB at once. */
#define IG_REDIS_MAX_REPLY (16u << 20)
#define IG_REDIS_MAX_ELEMENTS (1 << 20)

enum ig_redis_state {
	IG_REDIS_DOWN,       /* not connected; tried again after a backoff */
	IG_REDIS_CONNECTING, /* connect, TLS, AUTH, SELECT, PING under way */
	IG_REDIS_UP,
};

struct ig_redis;

/* Called when the state changes (up: connected and authenticated; down:
 * why). On the reactor's thread. */
typedef void ig_redis_state_fn(void *arg, enum ig_redis_state state, const char *why);
/* A command's reply (NULL: the connection dropped first), or a
 * subscription's confirmation or message. The reply is freed after the
 * call. It must not free the connection. */
typedef void ig_redis_reply_fn(const redisReply *reply, void *privdata);
/* Something Redis sent that was dropped: kind is "protocol" (the parser
 * refused it: a bad type byte, arrays nested deeper than 7, a negative
 * count), "oversize" (over IG_REDIS_MAX_REPLY or IG_REDIS_MAX_ELEMENTS),
 * "unsolicited" (a reply no command asked for) or "pubsub_shape" (a push
 * on a subscriber's connection that is not ["subscribe", channel,
 * integer] or ["message", channel, payload] on a channel subscribed);
 * detail says what it was, short and printable. */
typedef void ig_redis_bad_fn(void *arg, const char *kind, const char *detail);

/* A connection to `addr` (a numeric address resolved at start) on rx's
 * epoll set; connects on the first ig_redis_tick, through TLS when tls is
 * not NULL (it must outlive the connection). `timeout_ms`: a command
 * unanswered that long drops the connection. NULL: out of memory. */
struct ig_redis *ig_redis_new(struct ig_rx *rx, const char *addr, const struct ig_redis_url *u,
			      struct ig_redis_tls *tls, uint64_t timeout_ms, ig_redis_state_fn *on_state, void *arg);
/* Where bad messages are told (none by default). */
void ig_redis_set_bad_fn(struct ig_redis *r, ig_redis_bad_fn *fn, void *arg);
/* Closes it; the callbacks of commands in flight and of subscriptions get
 * a NULL reply. */
void ig_redis_free(struct ig_redis *r);
/* Connects when down and its backoff is over; drops a connection whose
 * oldest unanswered command is older than the timeout. */
void ig_redis_tick(struct ig_redis *r, uint64_t now_ms);
enum ig_redis_state ig_redis_state(const struct ig_redis *r);
const char *ig_redis_state_name(enum ig_redis_state s);
/* Commands in flight (sent, not answered). */
long ig_redis_pending(const struct ig_redis *r);
/* Sends a command (hiredis's format; NULL fn: the reply is dropped); fn
 * gets NULL when the connection drops first. Written at the loop's next
 * turn. Returns 0, or -1 when not up or a subscriber's (fn is not
 * called). */
int ig_redis_command(struct ig_redis *r, ig_redis_reply_fn *fn, void *privdata, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int ig_redis_argv(struct ig_redis *r, ig_redis_reply_fn *fn, void *privdata, int argc, const char **argv,
		  const size_t *argvlen);
/* Subscribes to a channel: fn gets the subscription's confirmation and
 * then each message (an array: "message", channel, payload), and NULL
 * when the connection drops (the subscription ends with it). The
 * connection is a subscriber's from then on: it takes no other command,
 * and no timeout applies, as messages come when someone publishes.
 * Returns 0 or -1 (not up). */
int ig_redis_subscribe(struct ig_redis *r, const char *channel, ig_redis_reply_fn *fn, void *privdata);

/* Blocking, for the start and the stop (no loop runs; never on a
 * reactor): connected, TLS, authenticated and its database selected
 * within timeout_ms. NULL when not, with *why (malloc'd, when why is not
 * NULL) and *refused: Redis answered but refused the password, the
 * database or the PING (a configuration mistake). */
struct ig_redis *ig_redis_connect_blocking(const char *addr, const struct ig_redis_url *u, struct ig_redis_tls *tls,
					   uint64_t timeout_ms, char **why, bool *refused);
/* A command on such a connection and its reply (freeReplyObject), within
 * its timeout. NULL: no reply (the connection is dropped). */
redisReply *ig_redis_call(struct ig_redis *r, int argc, const char **argv, const size_t *argvlen);

#endif
