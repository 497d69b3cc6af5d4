/* libFuzzer target: the key sync's reply (cluster_sync.c's keys_script) as RESP,
 * for as many keys as its elements but the last: its shape
 * (ig_redismsg_keys), each key's figures (ig_redismsg_key_figures: six
 * finite numbers from 0 to 1e13, the whole no less than this gateway's
 * part) and the active keys (digests); and the share a key gets from
 * figures taken (cluster_share.h's ig_cluster_share), always within (0, 1]. */
#include "config.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "cluster/cluster_share.h"
#include "fuzz_redis.h"
#include "net/redismsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	redisReply *r = fuzz_redis_reply(data, size);
	struct ig_redismsg_bad bad = {0};
	struct ig_key_figures f;
	if (!r)
		return 0;
	size_t nsent = r->type == REDIS_REPLY_ARRAY && r->elements ? r->elements - 1 : 0;
	if (ig_redismsg_keys(r, nsent, &bad) == 0) {
		for (size_t i = 0; i < nsent; i++) {
			const redisReply *e = r->element[i];
			if (ig_redismsg_key_figures(e->str, e->len, &f, &bad) < 0)
				continue;
			const double v[6] = {f.mreq, f.mtok, f.req, f.tok, f.lreq, f.ltok};
			for (int j = 0; j < 6; j++)
				if (!isfinite(v[j]) || v[j] < 0 || v[j] > IG_REDISMSG_FIGURE_MAX)
					abort();
			if (f.req < f.mreq || f.tok < f.mtok)
				abort();
			for (long live = 1; live <= 3; live++) {
				double s = ig_cluster_share(f.mreq, f.req - f.mreq, live);
				if (!isfinite(s) || s <= 0 || s > 1)
					abort();
			}
		}
		const redisReply *act = r->element[nsent];
		if (ig_redismsg_active(act, 1000, &bad) == 0)
			for (size_t i = 0; i < act->elements; i++)
				if (act->element[i]->len != 64 || strlen(act->element[i]->str) != 64)
					abort();
	} else if (!bad.kind || strcmp(bad.kind, IG_BAD_KEY_SYNC) != 0) {
		abort();
	}
	freeReplyObject(r);
	return 0;
}
