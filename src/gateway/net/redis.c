/* A Redis connection of our own on a reactor's epoll set (redis.h): a
 * non-blocking socket (OpenSSL on it for rediss://), a write buffer of
 * commands formatted by hiredis, hiredis's reader behind limits of ours,
 * and a FIFO of the callbacks of the replies awaited. Redis answers in
 * order, so the FIFO's head is what the next reply answers; on a
 * subscriber's connection every reply is a push, matched to its
 * subscription by channel. Whatever does not fit is told to the bad hook
 * and dropped (with the connection, unless it is one push): what Redis
 * sends is input, never trusted to be what we asked for.
 * The handshake (AUTH, SELECT, PING) runs before the connection counts as
 * up. The same code serves the blocking connection of the start and the
 * stop: poll instead of epoll. */
#include "config.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "net/redis.h"
#include "net/redismsg.h"
#include "net/rx.h"

#define BACKOFF_MIN_MS 250
#define BACKOFF_MAX_MS 5000
#define READ_CHUNK 16384      /* a TLS record's plaintext at most: read whole, none left in OpenSSL */
#define READS_PER_EVENT 64    /* then the loop's other work (level-triggered: it comes back) */
#define WRITE_CHUNK 65536
#define OBJ_COST 64           /* what one parsed element is charged, besides its string */

enum phase {
	PH_NONE,  /* no socket */
	PH_TCP,   /* connect() under way */
	PH_TLS,   /* SSL_connect under way */
	PH_OPEN,  /* commands and replies flow (the handshake's first) */
};

/* What the reply at the FIFO's head answers. */
enum cmd_kind { CMD_USER, CMD_AUTH, CMD_SELECT, CMD_PING, CMD_CALL };

struct cmd {
	ig_redis_reply_fn *fn;
	void *privdata;
	enum cmd_kind kind;
};

struct sub {
	char *channel;
	size_t len;
	ig_redis_reply_fn *fn;
	void *privdata;
};

struct ig_redis {
	struct ig_rx *rx;               /* NULL: blocking (the start and the stop), poll */
	char *addr;
	int port;
	long db;
	char *password;                 /* "USER\nPASSWORD" with an ACL user */
	struct ig_redis_tls *tls;       /* NULL: plain TCP; not ours */
	uint64_t timeout_ms;
	/* the connection (phase PH_NONE: none of it) */
	int fd;
	SSL *ssl;
	enum phase phase;
	struct ig_event ev;
	uint32_t events;                /* wanted; in rx's epoll set when registered */
	bool registered;
	bool read_wants_write;          /* SSL_read needs writability first */
	bool write_wants_read;          /* SSL_write needs readability first */
	redisReader *reader;
	redisReplyObjectFunctions fns;  /* hiredis's own, behind the limits */
	redisReplyObjectFunctions *hfns;
	size_t reply_bytes;             /* the reply being parsed, as charged */
	const char *refusal;            /* a limit refused the reply: its kind */
	char refusal_detail[128];
	char *out;                      /* formatted commands not written: out[outoff, outlen) */
	size_t outoff, outlen, outcap;
	struct cmd *q;                  /* replies awaited, oldest at qhead: a ring of qcap */
	size_t qhead, qlen, qcap;
	struct sub *subs;
	size_t nsubs;
	bool subscriber;
	uint64_t gen;                   /* bumped by each drop: a caller tells the connection went */
	/* its life */
	enum ig_redis_state state;
	bool freeing;                   /* ig_redis_free: no state callbacks */
	uint64_t retry_at_ms, backoff_ms, connect_at_ms;
	uint64_t pending_since_ms;      /* the oldest reply awaited was sent, or the last came */
	ig_redis_state_fn *on_state;
	void *arg;
	ig_redis_bad_fn *on_bad;
	void *bad_arg;
	char why[256];                  /* why it went down, last */
	bool refused;                   /* ... the handshake's error reply */
	redisReply *kept;               /* ig_redis_call's reply */
	bool got;
};

/* ---- what went wrong, said ---- */

static void bad(struct ig_redis *r, const char *kind, const char *detail)
{
	ig_log_debug("redis %s:%d: dropped a bad message (%s: %s)", r->addr, r->port, kind, detail);
	if (r->on_bad)
		r->on_bad(r->bad_arg, kind, detail);
}

/* ---- the epoll set ---- */

static void want(struct ig_redis *r, uint32_t events)
{
	if (!r->rx) { /* blocking: pump() polls for these */
		r->events = events;
		return;
	}
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

/* Readable always; writable while something waits to be written (and
 * OpenSSL does not wait to read first), or OpenSSL's read needs it. */
static void interest(struct ig_redis *r)
{
	bool out = (r->outlen > r->outoff && !r->write_wants_read) || r->read_wants_write;
	want(r, EPOLLIN | (out ? EPOLLOUT : 0));
}

/* ---- state ---- */

static void set_state(struct ig_redis *r, enum ig_redis_state s, const char *why)
{
	if (s == IG_REDIS_DOWN) {
		r->retry_at_ms = ig_now_ms() + r->backoff_ms;
		r->backoff_ms = r->backoff_ms * 2 < BACKOFF_MAX_MS ? r->backoff_ms * 2 : BACKOFF_MAX_MS;
		snprintf(r->why, sizeof(r->why), "%s", why);
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

/* Ends the connection now: every callback in flight, and every
 * subscription's, gets NULL; then the state goes down. */
static void drop(struct ig_redis *r, const char *why)
{
	if (r->phase == PH_NONE)
		return;
	want(r, 0);
	SSL_free(r->ssl);
	r->ssl = NULL;
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	if (r->reader)
		redisReaderFree(r->reader);
	r->reader = NULL;
	r->phase = PH_NONE;
	r->outoff = r->outlen = 0;
	r->read_wants_write = r->write_wants_read = false;
	r->gen++;
	/* taken apart first: a callback may look at (not use) the connection */
	struct cmd *q = r->q;
	size_t head = r->qhead, n = r->qlen, cap = r->qcap;
	struct sub *subs = r->subs;
	size_t nsubs = r->nsubs;
	r->q = NULL;
	r->qhead = r->qlen = r->qcap = 0;
	r->subs = NULL;
	r->nsubs = 0;
	r->subscriber = false;
	for (size_t i = 0; i < n; i++) {
		const struct cmd *c = &q[(head + i) % cap];
		if (c->kind == CMD_USER && c->fn)
			c->fn(NULL, c->privdata);
	}
	free(q);
	for (size_t i = 0; i < nsubs; i++) {
		if (subs[i].fn)
			subs[i].fn(NULL, subs[i].privdata);
		free(subs[i].channel);
	}
	free(subs);
	set_state(r, IG_REDIS_DOWN, why);
}

/* ---- commands out ---- */

static int out_append(struct ig_redis *r, const char *s, size_t n)
{
	if (r->outlen + n > r->outcap) {
		if (r->outoff > 0) { /* what was written makes room */
			memmove(r->out, r->out + r->outoff, r->outlen - r->outoff);
			r->outlen -= r->outoff;
			r->outoff = 0;
		}
		if (r->outlen + n > r->outcap) {
			size_t cap = r->outcap ? r->outcap : 1024;
			while (cap < r->outlen + n)
				cap *= 2;
			char *o = realloc(r->out, cap);
			if (!o)
				return -1;
			r->out = o;
			r->outcap = cap;
		}
	}
	memcpy(r->out + r->outlen, s, n);
	r->outlen += n;
	return 0;
}

static int q_push(struct ig_redis *r, const struct cmd *c)
{
	if (r->qlen == r->qcap) {
		size_t cap = r->qcap ? 2 * r->qcap : 8;
		struct cmd *q = malloc(cap * sizeof(*q));
		if (!q)
			return -1;
		for (size_t i = 0; i < r->qlen; i++)
			q[i] = r->q[(r->qhead + i) % r->qcap];
		free(r->q);
		r->q = q;
		r->qhead = 0;
		r->qcap = cap;
	}
	r->q[(r->qhead + r->qlen) % r->qcap] = *c;
	if (r->qlen++ == 0)
		r->pending_since_ms = ig_now_ms();
	return 0;
}

/* A formatted command (len bytes, or -1: it could not be formatted) and
 * what its reply goes to. Written at the loop's next turn (never from
 * inside the caller: a failed write would call callbacks back into it).
 * Returns 0 or -1. */
static int send_formatted(struct ig_redis *r, const struct cmd *c, char *cmd, int len)
{
	int rc = -1;
	if (len < 0 || !cmd)
		goto out;
	if (q_push(r, c) < 0)
		goto out;
	if (out_append(r, cmd, (size_t)len) < 0) {
		r->qlen--; /* taken back: its reply is not awaited */
		goto out;
	}
	if (r->phase == PH_OPEN)
		interest(r);
	rc = 0;
out:
	redisFreeCommand(cmd);
	return rc;
}

static int send_argv(struct ig_redis *r, enum cmd_kind kind, ig_redis_reply_fn *fn, void *privdata, int argc,
		     const char **argv, const size_t *argvlen)
{
	char *cmd = NULL;
	int len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
	return send_formatted(r, &(struct cmd){fn, privdata, kind}, cmd, len);
}

/* ---- replies in ---- */

/* The handshake: each reply must not be an error; PING's PONG makes the
 * connection up. */
static void handshake(struct ig_redis *r, enum cmd_kind kind, const redisReply *rep)
{
	char text[160], why[300];
	if (r->state != IG_REDIS_CONNECTING)
		return;
	if (rep->type == REDIS_REPLY_ERROR) {
		ig_redismsg_quoted(text, sizeof(text), 150, rep->str, rep->len);
		if (kind == CMD_AUTH)
			snprintf(why, sizeof(why), "refused the password: %s", text);
		else if (kind == CMD_SELECT)
			snprintf(why, sizeof(why), "refused SELECT %ld: %s", r->db, text);
		else
			snprintf(why, sizeof(why), "refused PING: %s", text);
		r->refused = true;
		drop(r, why);
		return;
	}
	if (kind != CMD_PING)
		return;
	if (rep->type == REDIS_REPLY_STATUS && rep->len == 4 && memcmp(rep->str, "PONG", 4) == 0) {
		set_state(r, IG_REDIS_UP, "connected");
		return;
	}
	ig_redismsg_describe(rep, text, sizeof(text));
	snprintf(why, sizeof(why), "handshake: PING answered with %s", text);
	drop(r, why);
}

static const struct sub *find_sub(const struct ig_redis *r, const char *channel, size_t len)
{
	for (size_t i = 0; i < r->nsubs; i++)
		if (r->subs[i].len == len && memcmp(r->subs[i].channel, channel, len) == 0)
			return &r->subs[i];
	return NULL;
}

/* A push on a subscriber's connection: ["subscribe", CHANNEL, N] or
 * ["message", CHANNEL, PAYLOAD] on a channel subscribed, and nothing else
 * (hiredis 0.14 asserts these shapes: what aborted the process). */
static void push(struct ig_redis *r, const redisReply *rep)
{
	const char *but = "";
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 && rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[1]->type == REDIS_REPLY_STRING) {
		const redisReply *k = rep->element[0], *ch = rep->element[1], *x = rep->element[2];
		bool confirm = k->len == 9 && memcmp(k->str, "subscribe", 9) == 0 && x->type == REDIS_REPLY_INTEGER;
		bool message = k->len == 7 && memcmp(k->str, "message", 7) == 0 && x->type == REDIS_REPLY_STRING;
		if (confirm || message) {
			const struct sub *s = find_sub(r, ch->str, ch->len);
			if (s) {
				if (s->fn)
					s->fn(rep, s->privdata);
				return;
			}
			but = ", on a channel not subscribed to";
		}
	}
	char shape[200], detail[240];
	ig_redismsg_describe(rep, shape, sizeof(shape));
	snprintf(detail, sizeof(detail), "%s%s", shape, but);
	bad(r, "pubsub_shape", detail);
}

/* One whole reply (ours now). */
static void dispatch(struct ig_redis *r, redisReply *rep)
{
	if (r->qlen == 0) {
		if (r->subscriber) {
			push(r, rep);
		} else {
			char detail[200];
			ig_redismsg_describe(rep, detail, sizeof(detail));
			bad(r, "unsolicited", detail);
			drop(r, "a reply no command asked for");
		}
		freeReplyObject(rep);
		return;
	}
	struct cmd c = r->q[r->qhead];
	r->qhead = (r->qhead + 1) % r->qcap;
	r->qlen--;
	r->pending_since_ms = ig_now_ms();
	if (c.kind == CMD_CALL) {
		r->kept = rep;
		r->got = true;
		return;
	}
	if (c.kind == CMD_USER) {
		if (c.fn)
			c.fn(rep, c.privdata);
	} else {
		handshake(r, c.kind, rep);
	}
	freeReplyObject(rep);
}

/* The limits, in front of hiredis's own object functions (the reader
 * calls these as it parses; NULL makes it fail). */
static bool refuse(struct ig_redis *r, const char *kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool refuse(struct ig_redis *r, const char *kind, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->refusal_detail, sizeof(r->refusal_detail), fmt, ap);
	va_end(ap);
	r->refusal = kind;
	return true;
}

static bool charge(struct ig_redis *r, size_t n)
{
	r->reply_bytes += n;
	return r->reply_bytes > IG_REDIS_MAX_REPLY &&
	       refuse(r, "oversize", "a reply over %u bytes", (unsigned)IG_REDIS_MAX_REPLY);
}

static void *limit_string(const redisReadTask *t, char *s, size_t len)
{
	struct ig_redis *r = t->privdata;
	return charge(r, len + OBJ_COST) ? NULL : r->hfns->createString(t, s, len);
}

static void *limit_array(const redisReadTask *t, int n)
{
	struct ig_redis *r = t->privdata;
	if (n < 0) { /* hiredis 0.14 would keep it as (size_t)n elements */
		refuse(r, "protocol", "an array of %d elements", n);
		return NULL;
	}
	if (n > IG_REDIS_MAX_ELEMENTS) {
		refuse(r, "oversize", "an array of %d elements (at most %d)", n, IG_REDIS_MAX_ELEMENTS);
		return NULL;
	}
	return charge(r, (size_t)n * sizeof(void *) + OBJ_COST) ? NULL : r->hfns->createArray(t, n);
}

static void *limit_integer(const redisReadTask *t, long long v)
{
	struct ig_redis *r = t->privdata;
	return charge(r, OBJ_COST) ? NULL : r->hfns->createInteger(t, v);
}

static void *limit_nil(const redisReadTask *t)
{
	struct ig_redis *r = t->privdata;
	return charge(r, OBJ_COST) ? NULL : r->hfns->createNil(t);
}

/* Bytes read from Redis: parsed, and each whole reply dispatched.
 * Returns 0, or -1 when the connection was dropped. */
static int take_bytes(struct ig_redis *r, const char *buf, size_t n)
{
	redisReader *rd = r->reader;
	uint64_t gen = r->gen;
	char detail[200];
	if (rd->len - rd->pos + n > IG_REDIS_MAX_REPLY) { /* a reply that never ends: "$2000000000" */
		snprintf(detail, sizeof(detail), "more than %u bytes and no whole reply", (unsigned)IG_REDIS_MAX_REPLY);
		bad(r, "oversize", detail);
		drop(r, "a reply over the size limit");
		return -1;
	}
	int rc = redisReaderFeed(rd, buf, n);
	for (;;) {
		void *reply = NULL;
		if (rc == REDIS_OK)
			rc = redisReaderGetReply(rd, &reply);
		if (rc != REDIS_OK) {
			const char *kind = r->refusal ? r->refusal : "protocol";
			if (r->refusal)
				snprintf(detail, sizeof(detail), "%s", r->refusal_detail);
			else
				ig_redismsg_quoted(detail, sizeof(detail), 150, rd->errstr, strlen(rd->errstr));
			bad(r, kind, detail);
			if (r->gen == gen) {
				char why[240];
				snprintf(why, sizeof(why), "a bad reply (%s: %s)", kind, detail);
				drop(r, why);
			}
			return -1;
		}
		if (!reply)
			return 0;
		r->reply_bytes = 0;
		dispatch(r, reply);
		if (r->gen != gen)
			return -1;
	}
}

/* ---- the socket ---- */

/* Why OpenSSL failed (e: SSL_get_error's), in why. */
static void tls_why(struct ig_redis *r, int e, const char *what, char *why, size_t size)
{
	long v = r->ssl ? SSL_get_verify_result(r->ssl) : X509_V_OK;
	unsigned long le = ERR_peek_last_error();
	if (v != X509_V_OK)
		snprintf(why, size, "TLS: the server's certificate: %s", X509_verify_cert_error_string(v));
	else if (le)
		snprintf(why, size, "TLS: %s: %s", what, ERR_reason_error_string(le) ? ERR_reason_error_string(le) : "error");
	else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0))
		snprintf(why, size, "TLS: %s: the connection closed", what);
	else
		snprintf(why, size, "TLS: %s: %s", what, strerror(errno));
	ERR_clear_error();
}

static void read_some(struct ig_redis *r)
{
	char buf[READ_CHUNK];
	uint64_t gen = r->gen;
	for (int i = 0; i < READS_PER_EVENT || (r->ssl && SSL_pending(r->ssl) > 0); i++) {
		ssize_t n;
		if (r->ssl) {
			ERR_clear_error();
			int rc = SSL_read(r->ssl, buf, sizeof(buf));
			if (rc <= 0) {
				int e = SSL_get_error(r->ssl, rc);
				if (e == SSL_ERROR_WANT_READ)
					return;
				if (e == SSL_ERROR_WANT_WRITE) {
					r->read_wants_write = true;
					return;
				}
				char why[300];
				tls_why(r, e, "read", why, sizeof(why));
				drop(r, e == SSL_ERROR_ZERO_RETURN ? "connection closed" : why);
				return;
			}
			r->read_wants_write = false;
			n = rc;
		} else {
			n = recv(r->fd, buf, sizeof(buf), 0);
			if (n == 0) {
				drop(r, "connection closed");
				return;
			}
			if (n < 0) {
				if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
					char why[160];
					snprintf(why, sizeof(why), "read: %s", strerror(errno));
					drop(r, why);
				}
				return;
			}
		}
		r->write_wants_read = false;
		if (take_bytes(r, buf, (size_t)n) < 0 || r->gen != gen)
			return;
	}
}

static void write_some(struct ig_redis *r)
{
	while (r->outoff < r->outlen) {
		size_t len = r->outlen - r->outoff;
		ssize_t n;
		if (r->ssl) {
			ERR_clear_error();
			int rc = SSL_write(r->ssl, r->out + r->outoff, len > WRITE_CHUNK ? WRITE_CHUNK : (int)len);
			if (rc <= 0) {
				int e = SSL_get_error(r->ssl, rc);
				if (e == SSL_ERROR_WANT_WRITE)
					return;
				if (e == SSL_ERROR_WANT_READ) {
					r->write_wants_read = true;
					return;
				}
				char why[300];
				tls_why(r, e, "write", why, sizeof(why));
				drop(r, why);
				return;
			}
			n = rc;
		} else {
			n = send(r->fd, r->out + r->outoff, len, MSG_NOSIGNAL);
			if (n < 0) {
				if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
					char why[160];
					snprintf(why, sizeof(why), "write: %s", strerror(errno));
					drop(r, why);
				}
				return;
			}
		}
		r->outoff += (size_t)n;
	}
	r->outoff = r->outlen = 0;
	if (r->outcap > 4 * WRITE_CHUNK) { /* a burst's buffer is not kept */
		free(r->out);
		r->out = NULL;
		r->outcap = 0;
	}
}

/* The TLS handshake, a step. Returns 1 (done), 0 (waits) or -1 (dropped). */
static int tls_step(struct ig_redis *r)
{
	ERR_clear_error();
	int rc = SSL_connect(r->ssl);
	if (rc == 1)
		return 1;
	int e = SSL_get_error(r->ssl, rc);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		want(r, e == SSL_ERROR_WANT_READ ? EPOLLIN : EPOLLOUT);
		return 0;
	}
	char why[300];
	tls_why(r, e, "handshake", why, sizeof(why));
	drop(r, why);
	return -1;
}

/* TCP is connected: TLS on it, checking the server's name. Returns 0 or
 * -1 (dropped). */
static int tls_start(struct ig_redis *r)
{
	char why[200];
	if (!(r->ssl = ig_redis_tls_session(r->tls, r->fd, why, sizeof(why)))) {
		drop(r, why);
		return -1;
	}
	r->phase = PH_TLS;
	return 0;
}

static void on_event(struct ig_event *ev, uint32_t events)
{
	struct ig_redis *r = ev->data;
	uint64_t gen = r->gen;
	if (r->phase == PH_TCP) {
		if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		int err = 0;
		socklen_t l = sizeof(err);
		if (getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &l) < 0)
			err = errno;
		if (err) {
			char why[160];
			snprintf(why, sizeof(why), "connect: %s", strerror(err));
			drop(r, why);
			return;
		}
		if (!r->tls)
			r->phase = PH_OPEN;
		else if (tls_start(r) < 0)
			return;
	}
	if (r->phase == PH_TLS) {
		if (tls_step(r) <= 0)
			return;
		r->phase = PH_OPEN;
		/* the handshake's commands wait to be written; read first what
		 * may have come (an alert: no client certificate) */
		events = EPOLLIN | EPOLLOUT;
	}
	if (r->phase != PH_OPEN)
		return;
	if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) || (r->read_wants_write && (events & EPOLLOUT))) {
		read_some(r);
		if (r->gen != gen)
			return;
	}
	if (r->outlen > r->outoff) {
		write_some(r);
		if (r->gen != gen)
			return;
	}
	interest(r);
}

/* fd (connecting, or connected when phase is PH_OPEN) becomes the
 * connection, the handshake's commands queued first. Returns 0, or -1
 * (out of memory: fd closed, state down). */
static int adopt(struct ig_redis *r, int fd, enum phase phase)
{
	r->fd = fd;
	r->phase = phase;
	r->ev = (struct ig_event){fd, on_event, r};
	r->events = 0;
	r->registered = false;
	r->refused = false;
	r->state = IG_REDIS_CONNECTING;
	if (!(r->reader = redisReaderCreate())) {
		drop(r, "out of memory");
		return -1;
	}
	r->hfns = r->reader->fn;
	r->fns = *r->hfns;
	r->fns.createString = limit_string;
	r->fns.createArray = limit_array;
	r->fns.createInteger = limit_integer;
	r->fns.createNil = limit_nil;
	r->reader->fn = &r->fns;
	r->reader->privdata = r; /* the reader hands it to each task */
	r->reply_bytes = 0;
	r->refusal = NULL;
	int rc = 0;
	if (r->password) {
		const char *nl = strchr(r->password, '\n');
		if (nl) {
			const char *argv[] = {"AUTH", r->password, nl + 1};
			size_t lens[] = {4, (size_t)(nl - r->password), strlen(nl + 1)};
			rc |= send_argv(r, CMD_AUTH, NULL, NULL, 3, argv, lens);
		} else {
			const char *argv[] = {"AUTH", r->password};
			size_t lens[] = {4, strlen(r->password)};
			rc |= send_argv(r, CMD_AUTH, NULL, NULL, 2, argv, lens);
		}
	}
	if (r->db) {
		char db[32];
		snprintf(db, sizeof(db), "%ld", r->db);
		const char *argv[] = {"SELECT", db};
		size_t lens[] = {6, strlen(db)};
		rc |= send_argv(r, CMD_SELECT, NULL, NULL, 2, argv, lens);
	}
	const char *ping[] = {"PING"};
	size_t plen[] = {4};
	rc |= send_argv(r, CMD_PING, NULL, NULL, 1, ping, plen);
	if (rc) {
		drop(r, "out of memory");
		return -1;
	}
	if (phase == PH_OPEN)
		interest(r);
	else
		want(r, EPOLLOUT); /* connect() is done when writable */
	return 0;
}

static void start_connect(struct ig_redis *r, uint64_t now)
{
	struct sockaddr_storage ss = {0};
	socklen_t sl;
	struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
	char why[200];
	ig_log_debug("redis: connecting to %s:%d%s", r->addr, r->port, r->tls ? " (TLS)" : "");
	r->connect_at_ms = now;
	if (inet_pton(AF_INET, r->addr, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)r->port);
		sl = sizeof(*v4);
	} else if (inet_pton(AF_INET6, r->addr, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)r->port);
		sl = sizeof(*v6);
	} else {
		snprintf(why, sizeof(why), "connect: '%s' is not a numeric address", r->addr);
		goto fail;
	}
	int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(why, sizeof(why), "connect: %s", strerror(errno));
		goto fail;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&ss, sl) < 0 && errno != EINPROGRESS) {
		snprintf(why, sizeof(why), "connect: %s", strerror(errno));
		close(fd);
		goto fail;
	}
	adopt(r, fd, PH_TCP);
	return;
fail:
	r->state = IG_REDIS_CONNECTING; /* so that the change is told */
	set_state(r, IG_REDIS_DOWN, why);
}

/* ---- the interface ---- */

struct ig_redis *ig_redis_new(struct ig_rx *rx, const char *addr, const struct ig_redis_url *u,
			      struct ig_redis_tls *tls, uint64_t timeout_ms, ig_redis_state_fn *on_state, void *arg)
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
	r->tls = tls;
	r->timeout_ms = timeout_ms;
	r->on_state = on_state;
	r->arg = arg;
	r->fd = -1;
	r->backoff_ms = BACKOFF_MIN_MS;
	r->state = IG_REDIS_DOWN;
	return r;
}

void ig_redis_set_bad_fn(struct ig_redis *r, ig_redis_bad_fn *fn, void *arg)
{
	r->on_bad = fn;
	r->bad_arg = arg;
}

void ig_redis_free(struct ig_redis *r)
{
	if (!r)
		return;
	r->freeing = true;
	drop(r, "closed");
	if (r->kept)
		freeReplyObject(r->kept);
	free(r->out);
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
		if (!r->subscriber && r->qlen > 0 && now - r->pending_since_ms > r->timeout_ms) {
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
	return (long)r->qlen;
}

/* Whether a command may be sent now. */
static bool open_for_commands(const struct ig_redis *r)
{
	return r->state == IG_REDIS_UP && r->phase == PH_OPEN && !r->subscriber;
}

int ig_redis_argv(struct ig_redis *r, ig_redis_reply_fn *fn, void *privdata, int argc, const char **argv,
		  const size_t *argvlen)
{
	if (!open_for_commands(r))
		return -1;
	return send_argv(r, CMD_USER, fn, privdata, argc, argv, argvlen);
}

int ig_redis_command(struct ig_redis *r, ig_redis_reply_fn *fn, void *privdata, const char *fmt, ...)
{
	if (!open_for_commands(r))
		return -1;
	char *cmd = NULL;
	va_list ap;
	va_start(ap, fmt);
	int len = redisvFormatCommand(&cmd, fmt, ap);
	va_end(ap);
	return send_formatted(r, &(struct cmd){fn, privdata, CMD_USER}, cmd, len);
}

int ig_redis_subscribe(struct ig_redis *r, const char *channel, ig_redis_reply_fn *fn, void *privdata)
{
	/* with replies awaited, a push could not be told from a reply */
	if (r->state != IG_REDIS_UP || r->phase != PH_OPEN || r->qlen > 0)
		return -1;
	struct sub *v = realloc(r->subs, (r->nsubs + 1) * sizeof(*v));
	if (!v)
		return -1;
	r->subs = v;
	size_t len = strlen(channel);
	char *copy = strdup(channel), *cmd = NULL;
	const char *argv[] = {"SUBSCRIBE", channel};
	size_t lens[] = {9, len};
	int n = redisFormatCommandArgv(&cmd, 2, argv, lens);
	if (!copy || n < 0 || out_append(r, cmd, (size_t)n) < 0) {
		free(copy);
		redisFreeCommand(cmd);
		return -1;
	}
	redisFreeCommand(cmd);
	r->subs[r->nsubs] = (struct sub){copy, len, fn, privdata};
	r->nsubs++;
	r->subscriber = true;
	interest(r);
	return 0;
}

/* ---- blocking ---- */

/* Waits for r's socket (poll) until deadline, and handles what came. */
static void pump(struct ig_redis *r, uint64_t deadline)
{
	uint64_t now = ig_now_ms();
	if (r->fd < 0 || now >= deadline)
		return;
	struct pollfd p = {.fd = r->fd};
	if (r->events & EPOLLIN)
		p.events |= POLLIN;
	if (r->events & EPOLLOUT)
		p.events |= POLLOUT;
	if (poll(&p, 1, (int)(deadline - now)) <= 0)
		return;
	uint32_t ev = (p.revents & POLLIN ? EPOLLIN : 0) | (p.revents & POLLOUT ? EPOLLOUT : 0) |
		      (p.revents & POLLERR ? EPOLLERR : 0) | (p.revents & POLLHUP ? EPOLLHUP : 0);
	on_event(&r->ev, ev);
}

struct ig_redis *ig_redis_connect_blocking(const char *addr, const struct ig_redis_url *u, struct ig_redis_tls *tls,
					   uint64_t timeout_ms, char **why, bool *refused)
{
	struct ig_redis *r = ig_redis_new(NULL, addr, u, tls, timeout_ms, NULL, NULL);
	if (refused)
		*refused = false;
	if (!r) {
		if (why)
			*why = ig_strdupf("out of memory");
		return NULL;
	}
	uint64_t deadline = ig_now_ms() + timeout_ms;
	start_connect(r, ig_now_ms());
	while (r->state == IG_REDIS_CONNECTING && ig_now_ms() < deadline)
		pump(r, deadline);
	if (r->state == IG_REDIS_UP)
		return r;
	if (r->state == IG_REDIS_CONNECTING) {
		char w[96];
		snprintf(w, sizeof(w), "no answer within %llu ms", (unsigned long long)timeout_ms);
		drop(r, w);
	}
	if (why)
		*why = ig_strdupf("%s", r->why);
	if (refused)
		*refused = r->refused;
	ig_redis_free(r);
	return NULL;
}

redisReply *ig_redis_call(struct ig_redis *r, int argc, const char **argv, const size_t *argvlen)
{
	if (r->rx || !open_for_commands(r))
		return NULL;
	r->kept = NULL;
	r->got = false;
	if (send_argv(r, CMD_CALL, NULL, NULL, argc, argv, argvlen) < 0)
		return NULL;
	uint64_t deadline = ig_now_ms() + r->timeout_ms;
	while (!r->got && r->state == IG_REDIS_UP && ig_now_ms() < deadline)
		pump(r, deadline);
	if (r->got) {
		redisReply *rep = r->kept;
		r->kept = NULL;
		r->got = false;
		return rep;
	}
	drop(r, "no reply in time");
	return NULL;
}
