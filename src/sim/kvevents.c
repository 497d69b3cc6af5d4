/* The simulator's KV events (kvevents.h): a rank's recorded cache changes
 * encoded as --kv-events-format says (common/kvwire.c) and queued to its
 * publisher (common/kvpub.c). Not the recording (kvcache.c). */
#include "config.h"
#include <stdlib.h>
#include <time.h>

#include "infergate/kvpub.h"
#include "infergate/log.h"
#include "kvevents.h"

struct ig_kvpub *sim_kvevents_open(const struct sim_conf *c, struct sim_kv *kv, int rank)
{
	char err[512];
	struct ig_kvpub_opts o = {.endpoint = c->kv_events, .replay_endpoint = c->kv_events_replay, .dp_rank = rank};
	if (sim_kv_log_start(kv) < 0) {
		ig_log_error("%s: out of memory", __func__);
		return NULL;
	}
	struct ig_kvpub *p = ig_kvpub_new(&o, err, sizeof(err));
	if (!p) {
		ig_log_error("--kv-events: rank %d: %s", rank, err);
		return NULL;
	}
	/* the bound endpoints: a "*" port resolved, for whoever subscribes */
	ig_log_info("kv events of rank %d on %s%s%s (%s format, blocks of %d tokens)", rank, ig_kvpub_endpoint(p, 0),
		    c->kv_events_replay ? ", replay on " : "", c->kv_events_replay ? ig_kvpub_endpoint(p, 1) : "",
		    c->kv_events_format == SIM_KV_FORMAT_SGLANG ? "sglang" : "vllm", IG_BLOCK_TOKENS);
	return p;
}

void sim_kvevents_publish(const struct sim_conf *c, struct ig_kvpub *pub, struct sim_kv *kv, int rank)
{
	struct ig_kv_event *ev;
	size_t n = sim_kv_log_take(kv, &ev);
	if (n == 0)
		return;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct ig_kv_batch b = {.ts = (double)now.tv_sec + now.tv_nsec / 1e9, .dp_rank = rank, .ev = ev, .nev = n};
	/* a full queue drops the batch, counted by the publisher: the
	 * subscriber sees the gap in the seqs */
	ig_kvpub_publish_batch(pub, c->kv_events_format == SIM_KV_FORMAT_SGLANG ? IG_KV_SGLANG : IG_KV_VLLM, &b);
	ig_kv_batch_free(&b);
}

void sim_kvevents_close(struct ig_kvpub *pub)
{
	ig_kvpub_free(pub);
}
