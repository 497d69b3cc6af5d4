/* Unit tests for the Redis connection (src/gateway/net/redis.c): what
 * cluster.redis_url accepts, what it refuses and why, and how it is shown
 * (no password); hostile bytes from "Redis" on one end of a socketpair:
 * the connection dropped or the push dropped, each told to the bad hook,
 * never an abort. (The cluster's share of a key's limits and of a
 * backend's slots or a key's max_inflight are test_cluster_share.c's.)
 * redis.c is included, to hand the connection a socketpair (adopt) and
 * drive it with poll (pump), as its blocking connections are driven. */
#include "config.h"
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "net/redis.c"
#include "../../check_main.h"

static void refused(const char *url, const char *why)
{
	struct ig_redis_url u;
	char *err = NULL;
	ck_assert_int_eq(ig_redis_url_parse(url, &u, &err), -1);
	ck_assert_msg(err && strstr(err, why), "%s: %s", url, err ? err : "(no message)");
	free(err);
}

START_TEST(redis_urls)
{
	struct ig_redis_url u;
	char *err = NULL, *shown;
	ck_assert_int_eq(ig_redis_url_parse("redis://10.0.0.5", &u, &err), 0);
	ck_assert_str_eq(u.host, "10.0.0.5");
	ck_assert_int_eq(u.port, 6379);
	ck_assert_int_eq(u.db, 0);
	ck_assert_ptr_null(u.password);
	ig_redis_url_free(&u);

	ck_assert_int_eq(ig_redis_url_parse("redis://:s3cret@redis.internal:6380/2", &u, &err), 0);
	ck_assert_str_eq(u.host, "redis.internal");
	ck_assert_int_eq(u.port, 6380);
	ck_assert_int_eq(u.db, 2);
	ck_assert_str_eq(u.password, "s3cret");
	shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "redis://***@redis.internal:6380/2"); /* never the password */
	free(shown);
	ig_redis_url_free(&u);

	/* an ACL user: AUTH USER PASSWORD (kept as "USER\nPASSWORD") */
	ck_assert_int_eq(ig_redis_url_parse("redis://gw:p@ss@[::1]:7000/", &u, &err), 0);
	ck_assert_str_eq(u.host, "::1");
	ck_assert_int_eq(u.port, 7000);
	ck_assert_str_eq(u.password, "gw\np@ss");
	shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "redis://***@[::1]:7000/0");
	free(shown);
	ig_redis_url_free(&u);

	/* TLS: rediss://, an ACL user and password as over plain TCP */
	ck_assert_int_eq(ig_redis_url_parse("rediss://gw:pw@redis.internal:6380/1", &u, &err), 0);
	ck_assert(u.tls);
	ck_assert_str_eq(u.host, "redis.internal");
	ck_assert_str_eq(u.password, "gw\npw");
	shown = ig_redis_url_shown(&u);
	ck_assert_str_eq(shown, "rediss://***@redis.internal:6380/1");
	free(shown);
	ig_redis_url_free(&u);

	refused("http://127.0.0.1:6379", "is not a redis:// URL");
	refused("redis+tls://127.0.0.1:6379", "or rediss:// for TLS");
	refused("redis://", "no host");
	refused("redis://h:0", "the port must be 1..65535");
	refused("redis://h:70000", "the port must be 1..65535");
	refused("redis://h:12x", "the port must be 1..65535");
	refused("redis://h/db1", "the database after '/' must be a number");
	refused("redis://secret@h", "the part before '@' must be [USER]:PASSWORD");
}
END_TEST

/* ---- hostile bytes ---- */

struct seen {
	int replies, nulls, bad, states_down;
	char kind[32], detail[256], last[64];
};

static void on_reply(const redisReply *rep, void *privdata)
{
	struct seen *s = privdata;
	if (!rep) {
		s->nulls++;
		return;
	}
	s->replies++;
	if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 3 && rep->element[2]->type == REDIS_REPLY_STRING)
		snprintf(s->last, sizeof(s->last), "%s", rep->element[2]->str);
	else if (rep->type == REDIS_REPLY_STATUS || rep->type == REDIS_REPLY_STRING)
		snprintf(s->last, sizeof(s->last), "%s", rep->str);
}

static void on_bad_seen(void *arg, const char *kind, const char *detail)
{
	struct seen *s = arg;
	s->bad++;
	snprintf(s->kind, sizeof(s->kind), "%s", kind);
	snprintf(s->detail, sizeof(s->detail), "%s", detail);
}

static void on_state_seen(void *arg, enum ig_redis_state st, const char *why IG_UNUSED)
{
	struct seen *s = arg;
	if (st == IG_REDIS_DOWN)
		s->states_down++;
}

/* A connection on one end of a socketpair, the handshake answered: up.
 * *peer: the other end, "Redis". */
static struct ig_redis *connected(struct seen *s, int *peer, const char *password)
{
	struct ig_redis_url u = {.host = "test", .port = 1, .password = (char *)password};
	struct ig_redis *r = ig_redis_new(NULL, "127.0.0.1", &u, NULL, 2000, on_state_seen, s);
	int sv[2];
	ck_assert_ptr_nonnull(r);
	ig_redis_set_bad_fn(r, on_bad_seen, s);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
	ck_assert_int_eq(adopt(r, sv[0], PH_OPEN), 0);
	*peer = sv[1];
	if (!password) {
		ck_assert_int_eq(write(*peer, "+PONG\r\n", 7), 7);
		for (int i = 0; i < 50 && r->state != IG_REDIS_UP; i++)
			pump(r, ig_now_ms() + 100);
		ck_assert_int_eq(r->state, IG_REDIS_UP);
	}
	return r;
}

/* Writes bytes as Redis and lets the connection read them. */
static void say(struct ig_redis *r, int peer, const char *bytes, size_t n)
{
	ck_assert_int_eq(write(peer, bytes, n), (ssize_t)n);
	for (int i = 0; i < 5 && r->fd >= 0; i++)
		pump(r, ig_now_ms() + 50);
}

START_TEST(hostile_replies_drop_the_connection_and_are_told)
{
	static const struct {
		const char *bytes, *kind, *detail;
	} cases[] = {
		{"+OK\r\n+AGAIN\r\n", "unsolicited", "status \"AGAIN\""},        /* one reply too many */
		{"!x\r\n", "protocol", "Protocol error"},                          /* a bad type byte */
		{"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "protocol", "nested"}, /* depth 9 */
		{"*-5\r\n", "protocol", "out of range"},                          /* a negative count */
		{"*2000000000\r\n", "oversize", "an array of 2000000000 elements"}, /* 16 GB at once */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct seen s = {0};
		int peer;
		struct ig_redis *r = connected(&s, &peer, NULL);
		const char *argv[] = {"GET", "k"};
		size_t lens[] = {3, 1};
		ck_assert_int_eq(ig_redis_argv(r, on_reply, &s, 2, argv, lens), 0);
		ck_assert_int_eq(ig_redis_pending(r), 1);
		say(r, peer, cases[i].bytes, strlen(cases[i].bytes));
		ck_assert_msg(s.bad == 1 && strcmp(s.kind, cases[i].kind) == 0 && strstr(s.detail, cases[i].detail),
			      "case %zu: %d bad, %s: %s", i, s.bad, s.kind, s.detail);
		ck_assert_int_eq(r->state, IG_REDIS_DOWN); /* dropped, tried again after its backoff */
		ck_assert_int_eq(s.states_down, 1);
		ck_assert_int_eq(ig_redis_pending(r), 0);
		/* the command had its reply, or NULL when the bad bytes came first */
		ck_assert_int_eq(s.replies + s.nulls, 1);
		ck_assert_int_eq(s.replies, i == 0);
		ck_assert_int_eq(ig_redis_argv(r, on_reply, &s, 2, argv, lens), -1); /* down: refused */
		ig_redis_free(r);
		close(peer);
	}
}
END_TEST

/* The size limits, fed straight to the parser: a bulk that never ends, and
 * an array whose elements together are over the limit. */
START_TEST(replies_over_the_limits_are_dropped_before_they_grow)
{
	struct seen s = {0};
	int peer;
	struct ig_redis *r = connected(&s, &peer, NULL);
	ck_assert_int_eq(ig_redis_command(r, on_reply, &s, "GET %s", "k"), 0);
	static char chunk[READ_CHUNK];
	memset(chunk, 'x', sizeof(chunk));
	ck_assert_int_eq(take_bytes(r, "$2000000000\r\n", 13), 0);
	size_t fed = 13;
	while (r->fd >= 0 && take_bytes(r, chunk, sizeof(chunk)) == 0)
		fed += sizeof(chunk);
	ck_assert_str_eq(s.kind, "oversize");
	ck_assert_msg(fed <= IG_REDIS_MAX_REPLY && fed + sizeof(chunk) > IG_REDIS_MAX_REPLY, "%zu", fed);
	ck_assert_int_eq(s.nulls, 1);
	ig_redis_free(r);
	close(peer);

	memset(&s, 0, sizeof(s));
	r = connected(&s, &peer, NULL);
	ck_assert_int_eq(ig_redis_command(r, on_reply, &s, "KEYS *"), 0);
	ck_assert_int_eq(take_bytes(r, "*1000000\r\n", 10), 0);
	size_t n = 0;
	while (r->fd >= 0 && n < 1000000) {
		char el[16 * 7 + 1] = "";
		for (int j = 0; j < 16; j++)
			strcat(el, "$1\r\nx\r\n");
		n += 16;
		if (take_bytes(r, el, strlen(el)) < 0)
			break;
	}
	ck_assert_str_eq(s.kind, "oversize");
	ck_assert_str_eq(s.detail, "a reply over 16777216 bytes");
	ck_assert_msg(n < 1000000 / 2, "%zu elements parsed before the limit", n);
	ig_redis_free(r);
	close(peer);
}
END_TEST

START_TEST(a_subscriber_drops_bad_pushes_and_keeps_the_good)
{
	struct seen s = {0}, msgs = {0};
	int peer;
	struct ig_redis *r = connected(&s, &peer, NULL);
	ck_assert_int_eq(ig_redis_subscribe(r, "ch", on_reply, &msgs), 0);
	const char *argv[] = {"GET", "k"};
	size_t lens[] = {3, 1};
	ck_assert_int_eq(ig_redis_argv(r, on_reply, &s, 2, argv, lens), -1); /* a subscriber's */
	pump(r, ig_now_ms() + 100); /* SUBSCRIBE written */
	char buf[128];
	ck_assert_int_gt(read(peer, buf, sizeof(buf)), 0);
	say(r, peer, "*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n", 31);
	ck_assert_int_eq(msgs.replies, 1);
	static const char *const bad_pushes[] = {
		"*3\r\n$7\r\nmessage\r\n:5\r\n$3\r\nabc\r\n",                 /* an integer channel */
		"*1\r\n$7\r\nmessage\r\n",                                     /* one element */
		"*3\r\n$7\r\nmessage\r\n*1\r\n$2\r\nch\r\n$1\r\ny\r\n",        /* a nested array as channel */
		"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n*1\r\n$1\r\ny\r\n",        /* a nested array as payload */
		"*3\r\n:1\r\n$2\r\nch\r\n$1\r\ny\r\n",                         /* an integer first */
		"*3\r\n$7\r\nmessage\r\n$5\r\nother\r\n$1\r\ny\r\n",           /* a channel not subscribed */
		"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n$1\r\n1\r\n",            /* a confirmation's count as a string */
		"*4\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\ny\r\n$1\r\nz\r\n",   /* four elements */
		"+OK\r\n",                                                      /* not an array */
		":7\r\n",
	};
	size_t n = sizeof(bad_pushes) / sizeof(bad_pushes[0]);
	for (size_t i = 0; i < n; i++) {
		say(r, peer, bad_pushes[i], strlen(bad_pushes[i]));
		ck_assert_msg(s.bad == (int)i + 1 && strcmp(s.kind, "pubsub_shape") == 0, "push %zu: %d, %s", i, s.bad,
			      s.kind);
	}
	ck_assert_str_eq(s.detail, "integer");
	ck_assert_int_eq(msgs.replies, 1); /* none of them reached the subscription */
	ck_assert_int_eq(r->state, IG_REDIS_UP); /* a push alone is dropped: the connection stays */
	say(r, peer, "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nhello\r\n", 36);
	ck_assert_int_eq(msgs.replies, 2);
	ck_assert_str_eq(msgs.last, "hello");
	/* Redis goes: the subscription is told (NULL), the connection is down */
	close(peer);
	for (int i = 0; i < 5 && r->fd >= 0; i++)
		pump(r, ig_now_ms() + 50);
	ck_assert_int_eq(msgs.nulls, 1);
	ck_assert_int_eq(r->state, IG_REDIS_DOWN);
	ck_assert_str_eq(r->why, "connection closed");
	ig_redis_free(r);
}
END_TEST

/* The handshake: AUTH's error is a refusal, said with Redis's words (made
 * printable), and the connection does not come up. */
START_TEST(a_refused_password_is_said)
{
	struct seen s = {0};
	int peer;
	struct ig_redis *r = connected(&s, &peer, "gw\nsecret");
	pump(r, ig_now_ms() + 100);
	char buf[256];
	ssize_t got = read(peer, buf, sizeof(buf) - 1);
	ck_assert_int_gt(got, 0);
	buf[got] = '\0';
	ck_assert_ptr_nonnull(strstr(buf, "*3\r\n$4\r\nAUTH\r\n$2\r\ngw\r\n$6\r\nsecret\r\n*1\r\n$4\r\nPING\r\n"));
	say(r, peer, "-WRONGPASS invalid\x01 password\r\n", 30);
	ck_assert_int_eq(r->state, IG_REDIS_DOWN);
	ck_assert(r->refused);
	ck_assert_str_eq(r->why, "refused the password: WRONGPASS invalid? password");
	ck_assert_int_eq(s.bad, 0);
	ig_redis_free(r);
	close(peer);
}
END_TEST

IG_CHECK_MAIN("redis", redis_urls, hostile_replies_drop_the_connection_and_are_told,
	      replies_over_the_limits_are_dropped_before_they_grow, a_subscriber_drops_bad_pushes_and_keeps_the_good,
	      a_refused_password_is_said)
