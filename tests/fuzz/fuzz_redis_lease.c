/* libFuzzer target: the batches' lease round's reply (batches_lease.c's
 * lease_script) as RESP, for as many batches as half its elements, through
 * ig_batch_lease_reply: refused, or every fencing token from 0 to 2^53 and
 * every cancel 0 or 1. */
#include "config.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "api/batch.h"
#include "fuzz_redis.h"
#include "net/redismsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReply *r = fuzz_redis_reply(data, size);
	struct ig_redismsg_bad bad = {0};
	if (!r)
		return 0;
	size_t n = r->type == REDIS_REPLY_ARRAY ? (r->elements + 1) / 2 : 1;
	uint64_t *tok = calloc(n ? n : 1, sizeof(*tok));
	bool *cancel = calloc(n ? n : 1, sizeof(*cancel));
	if (tok && cancel) {
		if (ig_batch_lease_reply(r, n, tok, cancel, &bad) == 0) {
			for (size_t i = 0; i < n; i++)
				if (tok[i] >= (1ull << 53) || r->element[2 * i + 1]->integer != (cancel[i] ? 1 : 0))
					abort();
		} else if (!bad.kind || strcmp(bad.kind, IG_BAD_BATCH_LEASE) != 0) {
			abort();
		}
	}
	free(tok);
	free(cancel);
	freeReplyObject(r);
	return 0;
}
