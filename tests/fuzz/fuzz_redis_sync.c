/* libFuzzer target: the sync's reply (cluster_sync.c's sync_script) as RESP,
 * through ig_redismsg_sync for gateway "gw-a" with a 300 ms live window.
 * Refused, or taken with every value within its rule: 1 to 1024 members,
 * valid names once each and sorted, this gateway among them, scores in the
 * window, no more states than other members, each named by a member other
 * than this one, its lines of a known kind with their numbers in range. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "fuzz_redis.h"
#include "net/redismsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReply *r = fuzz_redis_reply(data, size);
	struct ig_sync s;
	struct ig_redismsg_bad bad = {0};
	if (!r)
		return 0;
	if (ig_redismsg_sync(r, "gw-a", 300, &s, &bad) < 0) {
		if (!bad.kind || (strcmp(bad.kind, IG_BAD_SYNC) != 0 && strcmp(bad.kind, IG_BAD_SYNC_STATE) != 0) ||
		    !bad.why[0])
			abort();
		for (const char *p = bad.why; *p; p++)
			if (*p < 0x20 || *p > 0x7e)
				abort(); /* what is logged is printable */
		freeReplyObject(r);
		return 0;
	}
	if (!s.taken) {
		int me = 0;
		if (s.nmembers < 1 || s.nmembers > IG_REDISMSG_MEMBERS_MAX || s.now < 1 || s.nstates >= s.nmembers)
			abort();
		for (size_t i = 0; i < s.nmembers; i++) {
			if (!ig_redismsg_name_ok(s.members[i].name, strlen(s.members[i].name)) ||
			    s.members[i].score > s.now + IG_REDISMSG_CLOCK_SLACK_MS || s.members[i].score < s.now - 300 ||
			    (i && strcmp(s.members[i - 1].name, s.members[i].name) >= 0))
				abort();
			me += strcmp(s.members[i].name, "gw-a") == 0;
		}
		if (me != 1)
			abort();
		for (size_t i = 0; i < s.nstates; i++) {
			const struct ig_state *st = &s.states[i];
			if (strcmp(st->name, "gw-a") == 0 || !ig_redismsg_name_ok(st->name, strlen(st->name)))
				abort();
			struct ig_state_line line, *l = &line;
			for (size_t at = 0; ig_redismsg_state_next(st, &at, l);) {
				if (!l->name || !*l->name || strchr(l->name, ' ') || strchr(l->name, '\n'))
					abort();
				if (l->what == 'k') {
					if (l->v[0] < 0 || l->v[1] < 0 || l->v[1] > 1000 || l->v[2] < 0 ||
					    l->v[0] > IG_REDISMSG_CLAIM_MAX || l->v[2] > IG_REDISMSG_CLAIM_MAX ||
					    (strcmp(l->name, "-") != 0 && !ig_redismsg_digest_ok(l->name, strlen(l->name))))
						abort();
				} else if (!strchr("bmh", l->what) || l->v[0] < 1 || l->v[0] > IG_REDISMSG_CLAIM_MAX ||
					   strlen(l->name) > IG_REDISMSG_URL_MAX) {
					abort();
				}
			}
		}
	}
	ig_redismsg_sync_free(&s);
	freeReplyObject(r);
	return 0;
}
