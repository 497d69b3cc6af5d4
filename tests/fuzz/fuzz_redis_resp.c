/* libFuzzer target: a frame on the subscription to infergate:resp as RESP
 * (ig_redismsg_pubsub) and its message "NAME OWNER URL ID"
 * (ig_redismsg_resp): refused, or a valid name, an owner that fits 32
 * bits, a URL and an id of bounded length with no space or control byte. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "fuzz_redis.h"
#include "net/redismsg.h"

static void check(const char *p, size_t n)
{
	struct ig_resp_msg m;
	struct ig_redismsg_bad bad = {0};
	if (ig_redismsg_resp(p, n, &m, &bad) < 0) {
		if (!bad.kind || strcmp(bad.kind, IG_BAD_RESP) != 0)
			abort();
		return;
	}
	if (!ig_redismsg_name_ok(m.name, strlen(m.name)) || !*m.url || strlen(m.url) > IG_REDISMSG_URL_MAX ||
	    !*m.id || strlen(m.id) > IG_REDISMSG_RESP_ID_MAX || strchr(m.url, ' ') || strchr(m.id, ' '))
		abort();
	for (const char *q = m.id; *q; q++)
		if (*q < 0x21 || *q > 0x7e)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p;
	size_t n;
	struct ig_redismsg_bad bad = {0};
	/* as a whole frame, and as the payload of a well-formed one */
	redisReply *r = fuzz_redis_reply(data, size), *m = fuzz_redis_message("infergate:resp", "", data, size);
	if (r) {
		int got = ig_redismsg_pubsub(r, IG_BAD_RESP, &p, &n, &bad);
		if (got == 1) {
			if (strlen(p) != n)
				abort(); /* no NUL inside */
			check(p, n);
		} else if (got < 0 && (!bad.kind || strcmp(bad.kind, IG_BAD_RESP) != 0)) {
			abort();
		}
		freeReplyObject(r);
	}
	if (m) {
		if (ig_redismsg_pubsub(m, IG_BAD_RESP, &p, &n, &bad) == 1)
			check(p, n);
		freeReplyObject(m);
	}
	return 0;
}
