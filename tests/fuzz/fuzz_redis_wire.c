/* libFuzzer target: what the gateway's Redis connection does with the bytes
 * Redis sends (src/gateway/net/redis.c, included for take_bytes and adopt): the
 * parser behind its limits, the FIFO of replies, pushes on a subscriber's
 * connection. Byte 0 chooses the connection (bit 0: a subscriber's, to two
 * channels; bits 1-3: the commands awaiting replies on a command
 * connection), byte 1 how the rest is cut into reads. Nothing may crash or
 * leak, a subscription's callback sees only ["subscribe", CHANNEL, N] or
 * ["message", CHANNEL, PAYLOAD] on a channel subscribed, and every command
 * gets exactly one callback: its reply, or NULL when the connection drops. */
#include "config.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/redis.c"

struct counts {
	long replies, nulls, bad;
};

static void on_bad_count(void *arg, const char *kind, const char *detail)
{
	struct counts *c = arg;
	if (!kind || !*kind || !detail)
		abort();
	for (const char *p = detail; *p; p++) /* printable, for a log line */
		if (*p < 0x20 || *p > 0x7e)
			abort();
	c->bad++;
}

static void on_command(const redisReply *rep, void *privdata)
{
	struct counts *c = privdata;
	if (rep)
		c->replies++;
	else
		c->nulls++;
}

static void on_push(const redisReply *rep, void *privdata)
{
	struct counts *c = privdata;
	if (!rep) {
		c->nulls++;
		return;
	}
	c->replies++;
	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3)
		abort();
	const redisReply *k = rep->element[0], *ch = rep->element[1], *x = rep->element[2];
	if (k->type != REDIS_REPLY_STRING || ch->type != REDIS_REPLY_STRING)
		abort();
	if (!(ch->len == 2 && memcmp(ch->str, "ch", 2) == 0) && !(ch->len == 5 && memcmp(ch->str, "other", 5) == 0))
		abort();
	if (strcmp(k->str, "subscribe") == 0 ? x->type != REDIS_REPLY_INTEGER
	    : strcmp(k->str, "message") == 0 ? x->type != REDIS_REPLY_STRING
					      : 1)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	struct counts bad = {0}, cmds = {0}, subs = {0};
	struct ig_redis_url u = {.host = "fuzz", .port = 6379};
	struct ig_redis *r = ig_redis_new(NULL, "127.0.0.1", &u, NULL, 1000, NULL, NULL);
	if (!r)
		return 0;
	ig_redis_set_bad_fn(r, on_bad_count, &bad);
	if (adopt(r, -1, PH_OPEN) < 0 || take_bytes(r, "+PONG\r\n", 7) < 0 || r->state != IG_REDIS_UP)
		abort();
	long sent = 0;
	if (data[0] & 1) {
		if (ig_redis_subscribe(r, "ch", on_push, &subs) < 0 || ig_redis_subscribe(r, "other", on_push, &subs) < 0)
			abort();
	} else {
		for (int i = 0; i < ((data[0] >> 1) & 7); i++)
			if (ig_redis_command(r, on_command, &cmds, "GET k%d", i) == 0)
				sent++;
	}
	size_t step = 1 + (size_t)data[1] * 64;
	for (size_t off = 2; off < size && r->phase == PH_OPEN;) {
		size_t k = size - off < step ? size - off : step;
		take_bytes(r, (const char *)data + off, k);
		off += k;
	}
	bool dropped = r->phase != PH_OPEN;
	if (dropped && (bad.bad == 0 || r->state != IG_REDIS_DOWN))
		abort(); /* dropped only for a bad message, and said */
	ig_redis_free(r);
	if (cmds.replies + cmds.nulls != sent) /* one callback each, whatever came */
		abort();
	if ((data[0] & 1) && subs.nulls != 2) /* both subscriptions told of the end */
		abort();
	return 0;
}
