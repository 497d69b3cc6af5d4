/* The KV-event codec (include/infergate/kvwire.h): one msgpack batch of
 * BlockStored / BlockRemoved / AllBlocksCleared events, in every shape the
 * engines have sent, read through msgpack-c and checked field by field.
 * Not the sockets (src/common/kvpub.c publishes; the gateway subscribes).
 *
 * The shapes (msgspec Structs, tagged by class name):
 *  - vLLM, vllm/distributed/kv_events.py: EventBatch(ts, events,
 *    data_parallel_rank) and KVCacheEvent(tag=True, omit_defaults=True).
 *    Releases up to mid-2025 declared both array_like=True: a batch is
 *    [ts, [event...], dp_rank], an event ["BlockStored", block_hashes,
 *    parent_block_hash, token_ids, block_size, lora_id, medium, ...]; the
 *    current source dropped array_like, so both are maps: {"ts": ..,
 *    "events": [{"type": "BlockStored", "block_hashes": ..}],
 *    "data_parallel_rank": 0}. A block hash is ExternalBlockHash = bytes |
 *    int (bytes with the sha256 hashes). Fields with a default are left out
 *    when at it (omit_defaults); newer releases add fields (lora_name,
 *    extra_keys, group_idx, kv_cache_spec_kind, ...) this decoder skips.
 *  - SGLang, python/sglang/srt/disaggregation/kv_events.py: the same tags;
 *    EventBatch is array_like [ts, events, attn_dp_rank] (the rank's name
 *    differs from vLLM's); events array_like in older releases, maps in
 *    newer ones. Its radix cache (python/sglang/srt/mem_cache/radix_cache.py,
 *    later mem_cache/events.py, _record_store_event) sends ONE BlockStored
 *    per page of page_size tokens, block_hashes one long, block_size the
 *    page's token count (so with page_size 1, one event per token), the
 *    hash hash_str_to_int64 of the page's sha256: a signed 64-bit integer,
 *    often negative. _record_remove_event sends one BlockRemoved per radix
 *    node with all its pages' hashes. medium is "GPU", "CPU_PINNED", "DISK"
 *    or "EXTERNAL" (StorageMedium). EAGLE's bigram keys make token ids
 *    pairs: refused here (no single id to key a block by).
 * Both flavors decode with one reader: every batch and event form is
 * accepted from either. They differ when encoding (see ig_kv_encode).
 *
 * msgpack-c allocates an array's or map's declared element count before it
 * reads the elements (unpack.c, template_callback_array), so five bytes
 * can ask it for 64 GB: precheck() walks the headers first (a bound check,
 * not a reader: msgpack-c still parses) and refuses any count that the
 * bytes left cannot hold. msgpack-c's own stack bounds the nesting (32). */
#include "config.h"
#include <math.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/kvwire.h"

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* ---- the header walk -------------------------------------------------- */

static uint64_t be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* Checks that buf holds exactly one msgpack object whose every container
 * count fits in the bytes that follow it (each element takes one byte at
 * least). Returns 0 or -1 with err. */
static int precheck(const unsigned char *p, size_t len, char *err, size_t errlen)
{
	size_t pos = 0, pending = 1;
	while (pending) {
		if (pos >= len)
			return fail(err, errlen, "truncated at byte %zu", pos);
		unsigned c = p[pos++];
		pending--;
		int lenbytes = 0, kind = 0; /* kind 1: array, 2: map */
		uint64_t skip = 0, n = 0;
		if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3)
			;
		else if (c <= 0x8f)
			kind = 2, n = c & 0x0f;
		else if (c <= 0x9f)
			kind = 1, n = c & 0x0f;
		else if (c <= 0xbf)
			skip = c & 0x1f;
		else
			switch (c) {
			case 0xc4: case 0xd9: lenbytes = 1; break; /* bin8, str8 */
			case 0xc5: case 0xda: lenbytes = 2; break;
			case 0xc6: case 0xdb: lenbytes = 4; break;
			case 0xc7: lenbytes = 1, skip = 1; break;   /* ext: + the type byte */
			case 0xc8: lenbytes = 2, skip = 1; break;
			case 0xc9: lenbytes = 4, skip = 1; break;
			case 0xcc: case 0xd0: skip = 1; break;
			case 0xcd: case 0xd1: skip = 2; break;
			case 0xca: case 0xce: case 0xd2: skip = 4; break;
			case 0xcb: case 0xcf: case 0xd3: skip = 8; break;
			case 0xd4: skip = 2; break;                 /* fixext: type + data */
			case 0xd5: skip = 3; break;
			case 0xd6: skip = 5; break;
			case 0xd7: skip = 9; break;
			case 0xd8: skip = 17; break;
			case 0xdc: kind = 1, lenbytes = 2; break;
			case 0xdd: kind = 1, lenbytes = 4; break;
			case 0xde: kind = 2, lenbytes = 2; break;
			case 0xdf: kind = 2, lenbytes = 4; break;
			default: return fail(err, errlen, "byte 0x%02x at %zu is not msgpack", c, pos - 1);
			}
		if (lenbytes) {
			if ((size_t)lenbytes > len - pos)
				return fail(err, errlen, "truncated at byte %zu", pos);
			uint64_t l = be(p + pos, lenbytes);
			pos += (size_t)lenbytes;
			if (kind)
				n = l;
			else
				skip += l;
		}
		if (skip > len - pos)
			return fail(err, errlen, "a value of %llu bytes at %zu runs past the end (%zu bytes)",
				    (unsigned long long)skip, pos, len);
		pos += (size_t)skip;
		if (kind) {
			uint64_t objs = kind == 2 ? 2 * n : n;
			if (objs > len - pos || pending + objs > len - pos)
				return fail(err, errlen, "a container of %llu elements at %zu cannot fit in %zu bytes",
					    (unsigned long long)n, pos, len - pos);
			pending += (size_t)objs;
		}
	}
	if (pos != len)
		return fail(err, errlen, "%zu bytes after the batch", len - pos);
	return 0;
}

/* ---- fields ----------------------------------------------------------- */

/* An array's elements and one entry of a map, as this file walks them. */
struct items {
	const msgpack_object *at;
	size_t size;
};
struct pair {
	const msgpack_object *key, *val;
};

static struct items items_of(const msgpack_object *o)
{
	return (struct items){o->via.array.ptr, o->via.array.size};
}

static struct pair entry(const msgpack_object *o, uint32_t i)
{
	return (struct pair){&o->via.map.ptr[i].key, &o->via.map.ptr[i].val};
}

static bool is_str(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n && memcmp(o->via.str.ptr, s, n) == 0;
}

/* An engine's block hash: an integer (vLLM's 64-bit ints, SGLang's signed
 * int64, both kept as their 64 bits) or bytes (vLLM's sha256 digests),
 * folded with FNV-1a 64 over all of them: the same bytes fold the same way
 * in a BlockStored, its children's parent_block_hash and a BlockRemoved. */
static int get_hash(const msgpack_object *o, uint64_t *out)
{
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
		*out = o->via.u64;
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*out = (uint64_t)o->via.i64;
		return 0;
	}
	if (o->type == MSGPACK_OBJECT_BIN && o->via.bin.size > 0) {
		uint64_t h = 0xcbf29ce484222325ull;
		for (uint32_t i = 0; i < o->via.bin.size; i++)
			h = (h ^ (unsigned char)o->via.bin.ptr[i]) * 0x100000001b3ull;
		*out = h;
		return 0;
	}
	return -1;
}

/* What a batch has used so far of the IG_KV_MAX_* budgets. */
struct budget {
	size_t hashes, tokens;
};

static int get_hashes(const msgpack_object *o, struct ig_kv_event *ev, struct budget *bu, char *err,
		      size_t errlen)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return fail(err, errlen, "block_hashes is not an array");
	struct items a = items_of(o);
	size_t n = a.size;
	if (n > IG_KV_MAX_HASHES - bu->hashes)
		return fail(err, errlen, "more than %u block hashes in a batch", IG_KV_MAX_HASHES);
	bu->hashes += n;
	ev->hashes = malloc((n ? n : 1) * sizeof(*ev->hashes));
	if (!ev->hashes)
		return fail(err, errlen, "out of memory");
	for (size_t i = 0; i < n; i++)
		if (get_hash(&a.at[i], &ev->hashes[i]) < 0)
			return fail(err, errlen, "block_hashes[%zu] is not an integer or bytes", i);
	ev->nhashes = n;
	return 0;
}

static int get_parent(const msgpack_object *o, struct ig_kv_event *ev, char *err, size_t errlen)
{
	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (get_hash(o, &ev->parent) < 0)
		return fail(err, errlen, "parent_block_hash is not an integer, bytes or null");
	ev->has_parent = true;
	return 0;
}

static int get_tokens(const msgpack_object *o, struct ig_kv_event *ev, struct budget *bu, char *err,
		      size_t errlen)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return fail(err, errlen, "token_ids is not an array");
	struct items a = items_of(o);
	size_t n = a.size;
	if (n > IG_KV_MAX_TOKENS - bu->tokens)
		return fail(err, errlen, "more than %u token ids in a batch", IG_KV_MAX_TOKENS);
	bu->tokens += n;
	ev->tokens = malloc((n ? n : 1) * sizeof(*ev->tokens));
	if (!ev->tokens)
		return fail(err, errlen, "out of memory");
	for (size_t i = 0; i < n; i++) {
		const msgpack_object *t = &a.at[i];
		if (t->type != MSGPACK_OBJECT_POSITIVE_INTEGER || t->via.u64 > UINT32_MAX)
			return fail(err, errlen, "token_ids[%zu] is not a token id (0..4294967295)", i);
		ev->tokens[i] = (uint32_t)t->via.u64;
	}
	ev->ntokens = n;
	return 0;
}

static int get_block_size(const msgpack_object *o, struct ig_kv_event *ev, char *err, size_t errlen)
{
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 == 0 || o->via.u64 > IG_KV_MAX_BLOCK_SIZE)
		return fail(err, errlen, "block_size is not an integer in 1..%u", IG_KV_MAX_BLOCK_SIZE);
	ev->block_size = (uint32_t)o->via.u64;
	return 0;
}

static int get_lora(const msgpack_object *o, struct ig_kv_event *ev, char *err, size_t errlen)
{
	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > INT64_MAX)
		return fail(err, errlen, "lora_id is not a non-negative integer or null");
	ev->lora_id = (int64_t)o->via.u64;
	return 0;
}

/* medium: absent or null is the GPU (releases before the field); vLLM says
 * "GPU" or "CPU", SGLang "GPU", "CPU_PINNED", "DISK", "EXTERNAL". */
static int get_medium(const msgpack_object *o, struct ig_kv_event *ev, char *err, size_t errlen)
{
	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type != MSGPACK_OBJECT_STR)
		return fail(err, errlen, "medium is not a string or null");
	ev->gpu = is_str(o, "GPU");
	return 0;
}

/* ---- events ----------------------------------------------------------- */

/* The fields of one event, from either form: NULL when not given. */
struct fields {
	const msgpack_object *hashes, *parent, *tokens, *block_size, *lora_id, *medium;
	bool has_parent_slot; /* positional form: parent given, possibly nil */
};

static const char *const tags[] = {"BlockStored", "BlockRemoved", "AllBlocksCleared"};

static int event_kind(const msgpack_object *tag, enum ig_kv_kind *k)
{
	for (int i = 0; i < 3; i++)
		if (is_str(tag, tags[i])) {
			*k = (enum ig_kv_kind)i;
			return 0;
		}
	return -1;
}

static int fields_of(const msgpack_object *o, enum ig_kv_kind *kind, struct fields *f, char *err, size_t errlen)
{
	memset(f, 0, sizeof(*f));
	if (o->type == MSGPACK_OBJECT_ARRAY) {
		/* ["BlockStored", hashes, parent, tokens, block_size, lora_id, medium, ...]
		 * ["BlockRemoved", hashes, medium, ...]; ["AllBlocksCleared", ...] */
		const msgpack_object *a = items_of(o).at;
		size_t n = items_of(o).size;
		if (n == 0 || a[0].type != MSGPACK_OBJECT_STR)
			return fail(err, errlen, "an event array without its tag");
		if (event_kind(&a[0], kind) < 0)
			return fail(err, errlen, "unknown event tag '%.*s'", (int)(a[0].via.str.size > 40 ? 40 : a[0].via.str.size),
				    a[0].via.str.ptr);
		if (*kind == IG_KV_STORED) {
			if (n < 5)
				return fail(err, errlen, "BlockStored with %zu fields (4 at least)", n - 1);
			f->hashes = &a[1], f->parent = &a[2], f->tokens = &a[3], f->block_size = &a[4];
			f->lora_id = n > 5 ? &a[5] : NULL;
			f->medium = n > 6 ? &a[6] : NULL;
		} else if (*kind == IG_KV_REMOVED) {
			if (n < 2)
				return fail(err, errlen, "BlockRemoved without block_hashes");
			f->hashes = &a[1];
			f->medium = n > 2 ? &a[2] : NULL;
		}
		return 0;
	}
	if (o->type != MSGPACK_OBJECT_MAP)
		return fail(err, errlen, "an event is neither an array nor a map");
	const msgpack_object *tag = NULL;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		struct pair e = entry(o, i);
		const msgpack_object *k = e.key, *v = e.val;
		if (is_str(k, "type"))
			tag = v;
		else if (is_str(k, "block_hashes"))
			f->hashes = v;
		else if (is_str(k, "parent_block_hash"))
			f->parent = v;
		else if (is_str(k, "token_ids"))
			f->tokens = v;
		else if (is_str(k, "block_size"))
			f->block_size = v;
		else if (is_str(k, "lora_id"))
			f->lora_id = v;
		else if (is_str(k, "medium"))
			f->medium = v;
		/* other keys: fields of newer releases, skipped */
	}
	if (!tag || tag->type != MSGPACK_OBJECT_STR)
		return fail(err, errlen, "an event map without its \"type\"");
	if (event_kind(tag, kind) < 0)
		return fail(err, errlen, "unknown event type '%.*s'", (int)(tag->via.str.size > 40 ? 40 : tag->via.str.size),
			    tag->via.str.ptr);
	if (*kind != IG_KV_CLEARED && !f->hashes)
		return fail(err, errlen, "%s without block_hashes", tags[*kind]);
	if (*kind == IG_KV_STORED && (!f->tokens || !f->block_size))
		return fail(err, errlen, "BlockStored without %s", f->tokens ? "block_size" : "token_ids");
	return 0;
}

static int decode_event(const msgpack_object *o, struct ig_kv_event *ev, struct budget *bu, char *err, size_t errlen)
{
	struct fields f;
	ev->lora_id = -1;
	ev->gpu = true;
	if (fields_of(o, &ev->kind, &f, err, errlen) < 0)
		return -1;
	if (ev->kind == IG_KV_CLEARED)
		return 0;
	if (get_hashes(f.hashes, ev, bu, err, errlen) < 0 || get_medium(f.medium, ev, err, errlen) < 0)
		return -1;
	if (ev->kind == IG_KV_REMOVED)
		return 0;
	if (get_parent(f.parent, ev, err, errlen) < 0 || get_tokens(f.tokens, ev, bu, err, errlen) < 0 ||
	    get_block_size(f.block_size, ev, err, errlen) < 0 || get_lora(f.lora_id, ev, err, errlen) < 0)
		return -1;
	/* Whole blocks only: vLLM stores full blocks, SGLang sends a page per
	 * event with block_size its token count. */
	if (ev->ntokens != (uint64_t)ev->nhashes * ev->block_size)
		return fail(err, errlen, "BlockStored with %zu token ids for %zu blocks of %u", ev->ntokens, ev->nhashes,
			    ev->block_size);
	return 0;
}

/* ---- batches ---------------------------------------------------------- */

static int get_ts(const msgpack_object *o, double *ts, char *err, size_t errlen)
{
	if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
		*ts = o->via.f64;
	else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		*ts = (double)o->via.u64;
	else
		return fail(err, errlen, "ts is not a number");
	if (!isfinite(*ts) || *ts < 0)
		return fail(err, errlen, "ts is not a finite time");
	return 0;
}

static int get_rank(const msgpack_object *o, int32_t *rank, char *err, size_t errlen)
{
	if (!o || o->type == MSGPACK_OBJECT_NIL)
		return 0;
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 > INT32_MAX)
		return fail(err, errlen, "the data parallel rank is not a non-negative integer or null");
	*rank = (int32_t)o->via.u64;
	return 0;
}

static int decode_batch(const msgpack_object *o, struct ig_kv_batch *out, char *err, size_t errlen)
{
	const msgpack_object *ts = NULL, *events = NULL, *rank = NULL;
	if (o->type == MSGPACK_OBJECT_ARRAY) {
		/* [ts, events, dp_rank, ...] */
		if (o->via.array.size < 2)
			return fail(err, errlen, "a batch array of %u elements (ts and events at least)", o->via.array.size);
		ts = &o->via.array.ptr[0];
		events = &o->via.array.ptr[1];
		rank = o->via.array.size > 2 ? &o->via.array.ptr[2] : NULL;
	} else if (o->type == MSGPACK_OBJECT_MAP) {
		for (uint32_t i = 0; i < o->via.map.size; i++) {
			struct pair e = entry(o, i);
		const msgpack_object *k = e.key, *v = e.val;
			if (is_str(k, "ts"))
				ts = v;
			else if (is_str(k, "events"))
				events = v;
			else if (is_str(k, "data_parallel_rank") || is_str(k, "attn_dp_rank"))
				rank = v;
		}
		if (!ts || !events)
			return fail(err, errlen, "a batch map without \"%s\"", ts ? "events" : "ts");
	} else
		return fail(err, errlen, "a batch is neither an array nor a map");
	if (get_ts(ts, &out->ts, err, errlen) < 0 || get_rank(rank, &out->dp_rank, err, errlen) < 0)
		return -1;
	if (events->type != MSGPACK_OBJECT_ARRAY)
		return fail(err, errlen, "events is not an array");
	size_t n = events->via.array.size;
	if (n > IG_KV_MAX_EVENTS)
		return fail(err, errlen, "%zu events in a batch (at most %u)", n, IG_KV_MAX_EVENTS);
	out->ev = calloc(n ? n : 1, sizeof(*out->ev));
	if (!out->ev)
		return fail(err, errlen, "out of memory");
	struct budget bu = {0, 0};
	for (size_t i = 0; i < n; i++) {
		out->nev = i + 1; /* so that a failure frees this one too */
		if (decode_event(&events->via.array.ptr[i], &out->ev[i], &bu, err, errlen) < 0) {
			/* name the event in the message */
			char why[160];
			snprintf(why, sizeof(why), "%s", err && errlen ? err : "");
			return fail(err, errlen, "event %zu: %s", i, why);
		}
	}
	out->nev = n;
	return 0;
}

int ig_kv_decode(enum ig_kv_flavor f, const void *buf, size_t len, struct ig_kv_batch *out, char *err,
		 size_t errlen)
{
	(void)f; /* one reader for both: see the top of this file */
	memset(out, 0, sizeof(*out));
	out->dp_rank = -1;
	if (!buf || len == 0)
		return fail(err, errlen, "an empty batch");
	if (precheck(buf, len, err, errlen) < 0)
		return -1;
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	size_t off = 0;
	int rc = msgpack_unpack_next(&u, buf, len, &off);
	int ret = -1;
	if (rc != MSGPACK_UNPACK_SUCCESS)
		fail(err, errlen, rc == MSGPACK_UNPACK_NOMEM_ERROR ? "out of memory" : "not msgpack (nested too deep?)");
	else
		ret = decode_batch(&u.data, out, err, errlen);
	msgpack_unpacked_destroy(&u);
	if (ret < 0) {
		ig_kv_batch_free(out);
		out->dp_rank = -1;
	}
	return ret;
}

void ig_kv_batch_free(struct ig_kv_batch *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->nev; i++) {
		free(b->ev[i].hashes);
		free(b->ev[i].tokens);
	}
	free(b->ev);
	b->ev = NULL;
	b->nev = 0;
}

/* ---- encoding --------------------------------------------------------- */

static int pack_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);
	return msgpack_pack_str(pk, n) | msgpack_pack_str_body(pk, s, n);
}

/* vLLM's hashes as unsigned 64-bit integers; SGLang's as the signed int64
 * its hash_str_to_int64 gives. Either decodes back to the same 64 bits. */
static int pack_hash(msgpack_packer *pk, enum ig_kv_flavor f, uint64_t h)
{
	return f == IG_KV_SGLANG ? msgpack_pack_int64(pk, (int64_t)h) : msgpack_pack_uint64(pk, h);
}

static int pack_stored(msgpack_packer *pk, enum ig_kv_flavor f, const struct ig_kv_event *e, size_t first,
		       size_t nblocks, bool has_parent, uint64_t parent)
{
	/* vLLM: [tag, hashes, parent, tokens, block_size, lora_id, medium,
	 * lora_name]; SGLang has no lora_name. A decoder of an older release
	 * skips the trailing fields it does not know. */
	int r = msgpack_pack_array(pk, f == IG_KV_SGLANG ? 7 : 8) | pack_str(pk, "BlockStored");
	r |= msgpack_pack_array(pk, nblocks);
	for (size_t i = 0; i < nblocks; i++)
		r |= pack_hash(pk, f, e->hashes[first + i]);
	r |= has_parent ? pack_hash(pk, f, parent) : msgpack_pack_nil(pk);
	size_t t0 = first * e->block_size, nt = nblocks * e->block_size;
	if (t0 > e->ntokens)
		t0 = nt = 0;
	else if (nt > e->ntokens - t0)
		nt = e->ntokens - t0;
	r |= msgpack_pack_array(pk, nt);
	for (size_t i = 0; i < nt; i++)
		r |= msgpack_pack_uint32(pk, e->tokens[t0 + i]);
	r |= msgpack_pack_uint32(pk, e->block_size);
	r |= e->lora_id >= 0 ? msgpack_pack_int64(pk, e->lora_id) : msgpack_pack_nil(pk);
	r |= pack_str(pk, e->gpu ? "GPU" : (f == IG_KV_SGLANG ? "CPU_PINNED" : "CPU"));
	if (f != IG_KV_SGLANG)
		r |= msgpack_pack_nil(pk);
	return r;
}

/* How many wire events e becomes: SGLang sends one BlockStored per page. */
static size_t wire_events(enum ig_kv_flavor f, const struct ig_kv_event *e)
{
	return f == IG_KV_SGLANG && e->kind == IG_KV_STORED ? e->nhashes : 1;
}

static int pack_event(msgpack_packer *pk, enum ig_kv_flavor f, const struct ig_kv_event *e)
{
	int r = 0;
	switch (e->kind) {
	case IG_KV_STORED:
		if (f != IG_KV_SGLANG)
			return pack_stored(pk, f, e, 0, e->nhashes, e->has_parent, e->parent);
		/* python/sglang/srt/mem_cache/radix_cache.py _record_store_event:
		 * page by page, each the next one's parent */
		for (size_t i = 0; i < e->nhashes; i++)
			r |= pack_stored(pk, f, e, i, 1, i ? true : e->has_parent, i ? e->hashes[i - 1] : e->parent);
		return r;
	case IG_KV_REMOVED:
		r = msgpack_pack_array(pk, 3) | pack_str(pk, "BlockRemoved") | msgpack_pack_array(pk, e->nhashes);
		for (size_t i = 0; i < e->nhashes; i++)
			r |= pack_hash(pk, f, e->hashes[i]);
		return r | pack_str(pk, e->gpu ? "GPU" : (f == IG_KV_SGLANG ? "CPU_PINNED" : "CPU"));
	case IG_KV_CLEARED:
		return msgpack_pack_array(pk, 1) | pack_str(pk, "AllBlocksCleared");
	}
	return -1;
}

/* The array_like form: what vLLM's examples/online_serving/
 * kv_events_subscriber.py, Dynamo and SGLang decode; [ts, events, rank],
 * the rank left out when not given (omit_defaults). */
int ig_kv_encode(enum ig_kv_flavor f, const struct ig_kv_batch *b, char **out, size_t *len)
{
	msgpack_sbuffer sb;
	msgpack_packer pk;
	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	size_t nev = 0;
	for (size_t i = 0; i < b->nev; i++)
		nev += wire_events(f, &b->ev[i]);
	int r = msgpack_pack_array(&pk, b->dp_rank >= 0 ? 3 : 2) | msgpack_pack_double(&pk, b->ts);
	r |= msgpack_pack_array(&pk, nev);
	for (size_t i = 0; i < b->nev && !r; i++)
		r |= pack_event(&pk, f, &b->ev[i]);
	if (b->dp_rank >= 0)
		r |= msgpack_pack_int32(&pk, b->dp_rank);
	if (r) {
		msgpack_sbuffer_destroy(&sb);
		return -1;
	}
	*len = sb.size;
	*out = msgpack_sbuffer_release(&sb);
	if (!*out) { /* an empty buffer is never produced, but be exact */
		*out = malloc(1);
		if (!*out)
			return -1;
	}
	return 0;
}
