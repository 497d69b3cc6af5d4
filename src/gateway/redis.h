/* One connection to Redis, driven by a reactor's epoll loop: hiredis's
 * async API with an adapter of our own (hiredis 0.14, Debian 12's, has
 * adapters for libevent, libev, libuv and ae, not for a bare epoll set),
 * the way its adapters/ae.h plugs into Redis's own loop. Nothing here
 * blocks: the connect is non-blocking (the host is resolved once, at start,
 * by ig_redis_url_parse's caller), replies come back through callbacks, and
 * a command that gets no reply within the timeout drops the connection,
 * which is tried again with a backoff.
 * Redis's own TLS is not supported (hiredis 0.14 has none); a password is
 * (AUTH), and a database number (SELECT).
 * Not here: what is kept in Redis (cluster.c). */
#ifndef IG_REDIS_H
#define IG_REDIS_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>

struct ig_rx;

/* redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] */
struct ig_redis_url {
	char *host;      /* as written */
	int port;        /* 6379 by default */
	long db;         /* 0 by default */
	char *password;  /* NULL: none */
};

/* Parses url into *u. Returns 0, or -1 with *err (malloc'd) saying why. */
int ig_redis_url_parse(const char *url, struct ig_redis_url *u, char **err);
void ig_redis_url_free(struct ig_redis_url *u);
/* The URL without its password, for logs and status (malloc'd). */
char *ig_redis_url_shown(const struct ig_redis_url *u);

enum ig_redis_state {
	IG_REDIS_DOWN,       /* not connected; tried again after a backoff */
	IG_REDIS_CONNECTING, /* connect, AUTH, SELECT under way */
	IG_REDIS_UP,
};

struct ig_redis;

/* Called when the state changes (up: connected and authenticated; down:
 * why). On the reactor's thread. */
typedef void ig_redis_state_fn(void *arg, enum ig_redis_state state, const char *why);

/* A connection to `addr` (a numeric address resolved at start) on rx's
 * epoll set; connects on the first ig_redis_tick. `timeout_ms`: a command
 * unanswered that long drops the connection. NULL: out of memory. */
struct ig_redis *ig_redis_new(struct ig_rx *rx, const char *addr, const struct ig_redis_url *u, uint64_t timeout_ms,
			      ig_redis_state_fn *on_state, void *arg);
/* Closes it; the callbacks of commands in flight get a NULL reply. */
void ig_redis_free(struct ig_redis *r);
/* Connects when down and its backoff is over; drops a connection whose
 * oldest unanswered command is older than the timeout. */
void ig_redis_tick(struct ig_redis *r, uint64_t now_ms);
enum ig_redis_state ig_redis_state(const struct ig_redis *r);
const char *ig_redis_state_name(enum ig_redis_state s);
/* Commands in flight (sent, not answered). */
long ig_redis_pending(const struct ig_redis *r);
/* Sends a command (hiredis's format; NULL fn: the reply is dropped); fn
 * gets NULL when the connection drops first. Returns 0, or -1 when not up
 * (fn is not called). */
int ig_redis_command(struct ig_redis *r, redisCallbackFn *fn, void *privdata, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
int ig_redis_argv(struct ig_redis *r, redisCallbackFn *fn, void *privdata, int argc, const char **argv,
		  const size_t *argvlen);
/* Subscribes to a channel: fn gets the subscription's reply and then each
 * message (an array: "message", channel, payload), and NULL when the
 * connection drops. The connection is a subscriber's from then on: no
 * timeout applies, as messages come when someone publishes. Returns 0 or
 * -1 (not up). */
int ig_redis_subscribe(struct ig_redis *r, const char *channel, redisCallbackFn *fn, void *privdata);

#endif
