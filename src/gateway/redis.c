/* An async Redis connection on a reactor's epoll set (redis.h). hiredis
 * calls the ev hooks when it wants to read or write; the reactor calls
 * on_event, which hands the readiness back to hiredis. The handshake (AUTH,
 * SELECT, PING) runs before the connection counts as up. */
#include "config.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "redis.h"
#include "rx.h"

#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 5000

struct ig_redis {
	struct ig_rx *rx;
	char *addr;
	int port;
	long db;
	char *user, *password;
	uint64_t timeout_ms;
	redisAsyncContext *ac;
	struct ig_event ev;
	uint32_t events;        /* registered in the epoll set */
	bool registered;
	bool freeing;           /* ig_redis_free: no state callbacks */
	bool subscriber;
	enum ig_redis_state state;
	uint64_t retry_at_ms, backoff_ms, connect_at_ms;
	long pending;           /* commands sent, not answered */
	uint64_t pending_since_ms;
	ig_redis_state_fn *on_state;
	void *arg;
};

/* ---- the URL ---- */

int ig_redis_url_parse(const char *url, struct ig_redis_url *u, char **err)
{
	char *user = NULL;
	memset(u, 0, sizeof(*u));
	u->port = 6379;
	if (strncmp(url, "redis://", 8) != 0) {
		*err = ig_strdupf("'%s' is not a redis:// URL (redis://[:PASSWORD@]HOST[:PORT][/DB])%s", url,
				  strncmp(url, "rediss://", 9) == 0 ? "; TLS (rediss://) is not supported: hiredis 0.14 has none"
								     : "");
		return -1;
	}
	const char *p = url + 8, *at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		if (!colon) {
			*err = ig_strdupf("'%s': the part before '@' must be [USER]:PASSWORD", url);
			return -1;
		}
		user = strndup(p, (size_t)(colon - p));
		u->password = strndup(colon + 1, (size_t)(at - colon - 1));
		p = at + 1;
	}
	const char *slash = strchr(p, '/'), *colon = NULL;
	size_t hlen = slash ? (size_t)(slash - p) : strlen(p);
	if (hlen && p[0] == '[') { /* [v6]:port */
		const char *close = memchr(p, ']', hlen);
		if (close && close + 1 < p + hlen && close[1] == ':')
			colon = close + 1;
		u->host = close ? strndup(p + 1, (size_t)(close - p - 1)) : NULL;
	} else {
		colon = memchr(p, ':', hlen);
		u->host = strndup(p, colon ? (size_t)(colon - p) : hlen);
	}
	if (!u->host || !*u->host) {
		*err = ig_strdupf("'%s': no host", url);
		goto fail;
	}
	if (colon) {
		char *end;
		errno = 0;
		long port = strtol(colon + 1, &end, 10);
		if (end != p + hlen || end == colon + 1 || errno || port < 1 || port > 65535) {
			*err = ig_strdupf("'%s': the port must be 1..65535", url);
			goto fail;
		}
		u->port = (int)port;
	}
	if (slash && slash[1]) {
		char *end;
		errno = 0;
		u->db = strtol(slash + 1, &end, 10);
		if (*end || errno || u->db < 0 || u->db > 1000000) {
			*err = ig_strdupf("'%s': the database after '/' must be a number", url);
			goto fail;
		}
	}
	if (user && *user) { /* an ACL user (Redis 6+): AUTH USER PASSWORD */
		char *both = ig_strdupf("%s\n%s", user, u->password);
		free(u->password);
		u->password = both;
	}
	free(user);
	return 0;
fail:
	free(user);
	ig_redis_url_free(u);
	return -1;
}

void ig_redis_url_free(struct ig_redis_url *u)
{
	free(u->host);
	free(u->password);
	u->host = u->password = NULL;
}

char *ig_redis_url_shown(const struct ig_redis_url *u)
{
	bool v6 = strchr(u->host, ':') != NULL;
	return ig_strdupf("redis://%s%s%s%s:%d/%ld", u->password ? "***@" : "", v6 ? "[" : "", u->host, v6 ? "]" : "",
			  u->port, u->db);
}

/* ---- the event hooks ---- */

static void want(struct ig_redis *r, uint32_t events)
{
	if (events == r->events && (r->registered || !events))
		return;
	struct epoll_event e = {.events = events, .data.ptr = &r->ev};
	int rc = 0;
	if (!r->registered && events) {
		if ((rc = epoll_ctl(r->rx->epfd, EPOLL_CTL_ADD, r->ev.fd, &e)) == 0)
			r->registered = true;
	} else if (r->registered && events) {
		rc = epoll_ctl(r->rx->epfd, EPOLL_CTL_MOD, r->ev.fd, &e);
	} else if (r->registered) {
		rc = epoll_ctl(r->rx->epfd, EPOLL_CTL_DEL, r->ev.fd, NULL);
		r->registered = false;
	}
	if (rc)
		ig_log_warn("redis: epoll_ctl on fd %d: %s", r->ev.fd, strerror(errno));
	r->events = events;
}

static void add_read(void *p)
{
	struct ig_redis *r = p;
	want(r, r->events | EPOLLIN);
}

static void del_read(void *p)
{
	struct ig_redis *r = p;
	want(r, r->events & ~(uint32_t)EPOLLIN);
}

static void add_write(void *p)
{
	struct ig_redis *r = p;
	want(r, r->events | EPOLLOUT);
}

static void del_write(void *p)
{
	struct ig_redis *r = p;
	want(r, r->events & ~(uint32_t)EPOLLOUT);
}

static void cleanup(void *p)
{
	struct ig_redis *r = p;
	want(r, 0);
}

static void on_event(struct ig_event *ev, uint32_t events)
{
	struct ig_redis *r = ev->data;
	if (r->ac && (events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
		redisAsyncHandleRead(r->ac);
	if (r->ac && (events & (EPOLLOUT | EPOLLERR)))
		redisAsyncHandleWrite(r->ac);
}

/* ---- state ---- */

static void set_state(struct ig_redis *r, enum ig_redis_state s, const char *why)
{
	if (s == IG_REDIS_DOWN) {
		r->retry_at_ms = ig_now_ms() + r->backoff_ms;
		r->backoff_ms = r->backoff_ms * 2 < BACKOFF_MAX_MS ? r->backoff_ms * 2 : BACKOFF_MAX_MS;
		r->pending = 0;
	}
	if (s == IG_REDIS_UP)
		r->backoff_ms = BACKOFF_MIN_MS;
	ig_log_debug("redis %s:%d: %s (%s), next try in %llu ms", r->addr, r->port, ig_redis_state_name(s), why,
		     (unsigned long long)(s == IG_REDIS_DOWN ? r->retry_at_ms - ig_now_ms() : 0));
	bool changed = s != r->state;
	r->state = s;
	if (changed && !r->freeing && r->on_state)
		r->on_state(r->arg, s, why);
}

/* Ends the connection now: every callback in flight gets NULL. */
static void drop(struct ig_redis *r, const char *why)
{
	redisAsyncContext *ac = r->ac;
	if (!ac)
		return;
	r->ac = NULL;
	ac->onDisconnect = NULL;
	redisAsyncFree(ac);
	set_state(r, IG_REDIS_DOWN, why);
}

static void on_disconnect(const redisAsyncContext *ac, int status)
{
	struct ig_redis *r = ac->ev.data;
	char why[256];
	snprintf(why, sizeof(why), "%s", status == REDIS_OK ? "connection closed" : ac->errstr);
	r->ac = NULL; /* hiredis frees it */
	set_state(r, IG_REDIS_DOWN, why);
}

static void on_connect(const redisAsyncContext *ac, int status)
{
	struct ig_redis *r = ac->ev.data;
	if (status == REDIS_OK)
		return; /* the handshake's replies decide */
	char why[256];
	snprintf(why, sizeof(why), "%s", ac->errstr);
	r->ac = NULL; /* hiredis frees it */
	set_state(r, IG_REDIS_DOWN, why);
}

/* A command's reply: counted, then handed on. */
struct cmd {
	struct ig_redis *r;
	redisCallbackFn *fn;
	void *privdata;
};

static void on_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
	struct cmd *c = privdata;
	struct ig_redis *r = c->r;
	if (r->pending > 0)
		r->pending--;
	r->pending_since_ms = ig_now_ms();
	if (c->fn)
		c->fn(ac, reply, c->privdata);
	free(c);
}

static int send_argv(struct ig_redis *r, redisCallbackFn *fn, void *privdata, int argc, const char **argv,
		     const size_t *argvlen)
{
	struct cmd *c = malloc(sizeof(*c));
	if (!c || !r->ac)
		goto fail;
	*c = (struct cmd){r, fn, privdata};
	if (redisAsyncCommandArgv(r->ac, on_reply, c, argc, argv, argvlen) != REDIS_OK)
		goto fail;
	if (r->pending++ == 0)
		r->pending_since_ms = ig_now_ms();
	return 0;
fail:
	free(c);
	return -1;
}

/* The handshake: each reply must not be an error; PING's makes it up. */
static void on_handshake(redisAsyncContext *ac IG_UNUSED, void *reply, void *privdata)
{
	struct ig_redis *r = privdata;
	redisReply *rep = reply;
	if (!rep || r->state != IG_REDIS_CONNECTING)
		return;
	if (rep->type == REDIS_REPLY_ERROR) {
		char why[300];
		snprintf(why, sizeof(why), "handshake: %s", rep->str);
		drop(r, why);
		return;
	}
	if (rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0)
		set_state(r, IG_REDIS_UP, "connected");
}

static void start_connect(struct ig_redis *r, uint64_t now)
{
	ig_log_debug("redis: connecting to %s:%d", r->addr, r->port);
	redisAsyncContext *ac = redisAsyncConnect(r->addr, r->port);
	if (!ac || ac->err) {
		char why[256];
		snprintf(why, sizeof(why), "connect: %s", ac ? ac->errstr : "out of memory");
		if (ac)
			redisAsyncFree(ac);
		r->state = IG_REDIS_CONNECTING; /* so that the change is told */
		set_state(r, IG_REDIS_DOWN, why);
		return;
	}
	r->ac = ac;
	/* The event source first: setting the connect callback already asks
	 * for writability (hiredis's _EL_ADD_WRITE), on this fd. */
	r->ev = (struct ig_event){ac->c.fd, on_event, r};
	r->events = 0;
	r->registered = false;
	ac->ev.data = r;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	r->connect_at_ms = now;
	r->state = IG_REDIS_CONNECTING;
	/* The first command starts the connect (hiredis waits for writability). */
	if (r->password) {
		const char *nl = strchr(r->password, '\n');
		if (nl) {
			size_t ulen = (size_t)(nl - r->password);
			const char *argv[] = {"AUTH", r->password, nl + 1};
			size_t lens[] = {4, ulen, strlen(nl + 1)};
			send_argv(r, on_handshake, r, 3, argv, lens);
		} else {
			const char *argv[] = {"AUTH", r->password};
			size_t lens[] = {4, strlen(r->password)};
			send_argv(r, on_handshake, r, 2, argv, lens);
		}
	}
	if (r->db) {
		char db[32];
		snprintf(db, sizeof(db), "%ld", r->db);
		const char *argv[] = {"SELECT", db};
		size_t lens[] = {6, strlen(db)};
		send_argv(r, on_handshake, r, 2, argv, lens);
	}
	const char *ping[] = {"PING"};
	size_t plen[] = {4};
	if (r->ac)
		send_argv(r, on_handshake, r, 1, ping, plen);
}

/* ---- the interface ---- */

struct ig_redis *ig_redis_new(struct ig_rx *rx, const char *addr, const struct ig_redis_url *u, uint64_t timeout_ms,
			      ig_redis_state_fn *on_state, void *arg)
{
	struct ig_redis *r = calloc(1, sizeof(*r));
	if (!r || !(r->addr = strdup(addr)) || (u->password && !(r->password = strdup(u->password)))) {
		if (r)
			free(r->addr);
		free(r);
		return NULL;
	}
	r->rx = rx;
	r->port = u->port;
	r->db = u->db;
	r->timeout_ms = timeout_ms;
	r->on_state = on_state;
	r->arg = arg;
	r->backoff_ms = BACKOFF_MIN_MS;
	r->state = IG_REDIS_DOWN;
	return r;
}

void ig_redis_free(struct ig_redis *r)
{
	if (!r)
		return;
	r->freeing = true;
	drop(r, "closed");
	free(r->addr);
	free(r->password);
	free(r);
}

void ig_redis_tick(struct ig_redis *r, uint64_t now)
{
	switch (r->state) {
	case IG_REDIS_DOWN:
		if (now >= r->retry_at_ms)
			start_connect(r, now);
		break;
	case IG_REDIS_CONNECTING:
		if (now - r->connect_at_ms > r->timeout_ms)
			drop(r, "connect: no answer in time");
		break;
	case IG_REDIS_UP:
		if (!r->subscriber && r->pending > 0 && now - r->pending_since_ms > r->timeout_ms) {
			char why[96];
			snprintf(why, sizeof(why), "no reply in %llu ms", (unsigned long long)r->timeout_ms);
			drop(r, why);
		}
		break;
	}
}

enum ig_redis_state ig_redis_state(const struct ig_redis *r)
{
	return r ? r->state : IG_REDIS_DOWN;
}

const char *ig_redis_state_name(enum ig_redis_state s)
{
	return s == IG_REDIS_UP ? "up" : s == IG_REDIS_CONNECTING ? "connecting" : "down";
}

long ig_redis_pending(const struct ig_redis *r)
{
	return r->pending;
}

int ig_redis_argv(struct ig_redis *r, redisCallbackFn *fn, void *privdata, int argc, const char **argv,
		  const size_t *argvlen)
{
	if (r->state != IG_REDIS_UP)
		return -1;
	return send_argv(r, fn, privdata, argc, argv, argvlen);
}

int ig_redis_command(struct ig_redis *r, redisCallbackFn *fn, void *privdata, const char *fmt, ...)
{
	if (r->state != IG_REDIS_UP || !r->ac)
		return -1;
	struct cmd *c = malloc(sizeof(*c));
	if (!c)
		return -1;
	*c = (struct cmd){r, fn, privdata};
	va_list ap;
	va_start(ap, fmt);
	int rc = redisvAsyncCommand(r->ac, on_reply, c, fmt, ap);
	va_end(ap);
	if (rc != REDIS_OK) {
		free(c);
		return -1;
	}
	if (r->pending++ == 0)
		r->pending_since_ms = ig_now_ms();
	return 0;
}

int ig_redis_subscribe(struct ig_redis *r, const char *channel, redisCallbackFn *fn, void *privdata)
{
	if (r->state != IG_REDIS_UP || !r->ac)
		return -1;
	r->subscriber = true;
	/* hiredis calls fn for the subscription and every message after it,
	 * with this privdata: no wrapper of ours to free. */
	return redisAsyncCommand(r->ac, fn, privdata, "SUBSCRIBE %s", channel) == REDIS_OK ? 0 : -1;
}
