/* KV cache events as the engines publish them (vLLM:
 * vllm/distributed/kv_events.py; SGLang: see kvwire.c for its file): a ZMQ
 * PUB socket sends multipart [topic, 8-byte big-endian sequence, msgpack
 * batch]; a ROUTER socket answers [empty, 8-byte start sequence] with
 * [empty, seq, batch] frames for every buffered batch from there, then
 * [empty, seq -1, ""]. This is the codec both sides share: the gateway
 * decodes (src/gateway/fleet/kvevents.c), the simulator and the test
 * publisher encode (src/common/kvpub.c). Every decoded field is checked:
 * a batch is hostile input until then. */
#ifndef IG_KVWIRE_H
#define IG_KVWIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ig_kv_flavor { IG_KV_VLLM, IG_KV_SGLANG };

enum ig_kv_kind { IG_KV_STORED, IG_KV_REMOVED, IG_KV_CLEARED };

/* An event and a batch are values: whoever makes one fills its fields (the
 * decoder, the simulator's cache), hence "written by: any". */
struct ig_kv_event {
	enum ig_kv_kind kind;       /* written by: any */
	/* STORED and REMOVED: the engine's block hashes, in order; an engine
	 * hash given as bytes (vLLM's sha256 block hashes) is folded to 64
	 * bits, the same way every time. */
	uint64_t *hashes;           /* written by: any */
	size_t nhashes;             /* written by: any */
	/* STORED: the block before the first, when there is one. */
	bool has_parent;            /* written by: any */
	uint64_t parent;            /* written by: any */
	/* STORED: the token ids of the blocks, nhashes x block_size of them. */
	uint32_t *tokens;           /* written by: any */
	size_t ntokens;             /* written by: any */
	uint32_t block_size;        /* written by: any */
	int64_t lora_id;            /* -1: none; written by: any */
	bool gpu;                   /* medium GPU, or not given (an offload tier's blocks are not the GPU's); written by: any */
};

struct ig_kv_batch {
	double ts;                  /* written by: any */
	int32_t dp_rank;            /* -1: not given; written by: any */
	struct ig_kv_event *ev;     /* written by: any */
	size_t nev;                 /* written by: any */
};

/* What one batch may carry; past these it is refused whole (a hostile or
 * broken publisher must not make the decoder allocate without bound). */
#define IG_KV_MAX_EVENTS (1u << 20)      /* events in a batch */
#define IG_KV_MAX_HASHES (1u << 20)      /* block hashes, all events together */
#define IG_KV_MAX_TOKENS (1u << 22)      /* token ids, all events together */
#define IG_KV_MAX_BLOCK_SIZE (1u << 16)  /* tokens in a block */

/* Decodes one msgpack batch. Returns 0, or -1 with the reason in err
 * (nothing to free then). */
int ig_kv_decode(enum ig_kv_flavor f, const void *buf, size_t len, struct ig_kv_batch *out, char *err,
		 size_t errlen);
void ig_kv_batch_free(struct ig_kv_batch *b);
/* Encodes a batch as flavor f publishes it into a malloc'd buffer. Returns
 * 0 or -1 (out of memory). */
int ig_kv_encode(enum ig_kv_flavor f, const struct ig_kv_batch *b, char **out, size_t *len);

/* The sequence frame. */
static inline uint64_t ig_kv_seq_read(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}
static inline void ig_kv_seq_write(unsigned char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)v;
}

#endif
