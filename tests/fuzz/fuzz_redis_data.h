/* The body of the redis_data_* targets, one per kind of infergate:data's
 * messages (FUZZ_DATA_KIND, defined by each target's file): the input is
 * what follows "KIND " in a message frame (RESP, read by hiredis's reader),
 * through cluster.c's checks (ig_redismsg_pubsub, ig_redismsg_data) and
 * batches_lease.c's (ig_batch_lease_parse). Refused with the kind's own
 * label, or taken with an id the Batch or Files API would take from a
 * client (so never a path out of data_dir) and counts in range. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "api/batch.h"
#include "api/files.h"
#include "fuzz_redis.h"
#include "net/redismsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char head[] = {FUZZ_DATA_KIND, ' ', '\0'};
	redisReply *r = fuzz_redis_message("infergate:data", head, data, size);
	struct ig_redismsg_bad bad = {0};
	struct ig_data_msg d;
	struct ig_batch_msg m;
	const char *p;
	size_t n;
	if (!r)
		return 0;
	if (ig_redismsg_pubsub(r, IG_BAD_DATA, &p, &n, &bad) != 1 || ig_redismsg_data(p, n, &d, &bad) < 0) {
		if (!bad.kind)
			abort();
		freeReplyObject(r);
		return 0;
	}
	if (d.kind != FUZZ_DATA_KIND || !ig_redismsg_name_ok(d.name, strlen(d.name)) || d.restlen == 0 ||
	    d.restlen > IG_REDISMSG_DATA_REST_MAX || strlen(d.rest) != d.restlen)
		abort();
	bad.kind = NULL;
	if (ig_batch_lease_parse(d.kind, d.rest, d.restlen, &m, &bad) < 0) {
		if (!bad.kind || strcmp(bad.kind, ig_redismsg_data_kind(FUZZ_DATA_KIND)) != 0)
			abort();
		freeReplyObject(r);
		return 0;
	}
	if (strchr(m.id, '/') || strstr(m.id, ".."))
		abort();
	if (FUZZ_DATA_KIND == 'f' || FUZZ_DATA_KIND == 'd' ? !ig_files_id_valid(m.id) : !ig_batch_id_valid(m.id))
		abort();
	if (FUZZ_DATA_KIND == 'p' && (m.completed < 0 || m.failed < 0 || m.inflight < 0 ||
				      m.completed > IG_BATCH_LINES_MAX || m.failed > IG_BATCH_LINES_MAX ||
				      m.inflight > IG_BATCH_LINES_MAX))
		abort();
	freeReplyObject(r);
	return 0;
}
