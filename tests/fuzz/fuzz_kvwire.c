/* libFuzzer target: the KV-event codec (src/common/kvwire.c), the bytes a
 * gateway takes from any engine's ZMQ socket. Whatever decodes must hold
 * what the header promises (token ids = blocks x block size, a parent only
 * on a store) and must come back the same through the simulator's encoder;
 * whatever is refused must say why and leave nothing to free. */
#include "config.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/kvwire.h"

static void same(const struct ig_kv_batch *a, const struct ig_kv_batch *b)
{
	if (a->nev != b->nev || a->dp_rank != b->dp_rank || memcmp(&a->ts, &b->ts, sizeof(a->ts)) != 0)
		abort();
	for (size_t i = 0; i < a->nev; i++) {
		const struct ig_kv_event *x = &a->ev[i], *y = &b->ev[i];
		if (x->kind != y->kind || x->nhashes != y->nhashes || x->ntokens != y->ntokens ||
		    x->has_parent != y->has_parent || (x->has_parent && x->parent != y->parent) ||
		    x->block_size != y->block_size || x->lora_id != y->lora_id || x->gpu != y->gpu)
			abort();
		if (x->nhashes && memcmp(x->hashes, y->hashes, x->nhashes * sizeof(*x->hashes)) != 0)
			abort();
		if (x->ntokens && memcmp(x->tokens, y->tokens, x->ntokens * sizeof(*x->tokens)) != 0)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ig_kv_batch b, again, sg;
	char err[256] = "";
	if (ig_kv_decode(IG_KV_VLLM, data, size, &b, err, sizeof(err)) < 0) {
		if (!err[0] || b.ev || b.nev)
			abort();
		return 0;
	}
	for (size_t i = 0; i < b.nev; i++) {
		const struct ig_kv_event *e = &b.ev[i];
		if (e->kind == IG_KV_STORED && e->ntokens != e->nhashes * (size_t)e->block_size)
			abort();
		if (e->kind != IG_KV_STORED && (e->has_parent || e->ntokens))
			abort();
	}
	char *buf;
	size_t len;
	if (ig_kv_encode(IG_KV_VLLM, &b, &buf, &len) == 0) {
		if (ig_kv_decode(IG_KV_VLLM, buf, len, &again, err, sizeof(err)) < 0)
			abort();
		same(&b, &again);
		ig_kv_batch_free(&again);
		free(buf);
	}
	if (ig_kv_encode(IG_KV_SGLANG, &b, &buf, &len) == 0) {
		if (ig_kv_decode(IG_KV_SGLANG, buf, len, &sg, err, sizeof(err)) < 0)
			abort();
		ig_kv_batch_free(&sg);
		free(buf);
	}
	ig_kv_batch_free(&b);
	return 0;
}
