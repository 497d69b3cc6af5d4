/* Unit tests for src/common/kvwire.c, the KV-event codec: what the
 * simulator encodes decodes to the same events in both flavors; the shapes
 * vLLM and SGLang actually send (built here by hand with msgpack-c's packer,
 * as their msgspec Structs lay them out) decode to the blocks they name;
 * and whatever else arrives is refused with a message, never a crash. */
#include "config.h"
#include <check.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/kvwire.h"
#include "../check_main.h"

/* ---- building msgpack by hand ------------------------------------------ */

struct mp {
	msgpack_sbuffer sb;
	msgpack_packer pk;
};

static void mp_init(struct mp *m)
{
	msgpack_sbuffer_init(&m->sb);
	msgpack_packer_init(&m->pk, &m->sb, msgpack_sbuffer_write);
}

static void str(struct mp *m, const char *s)
{
	msgpack_pack_str(&m->pk, strlen(s));
	msgpack_pack_str_body(&m->pk, s, strlen(s));
}

static void bin(struct mp *m, const void *p, size_t n)
{
	msgpack_pack_bin(&m->pk, n);
	msgpack_pack_bin_body(&m->pk, p, n);
}

static void uints(struct mp *m, const uint64_t *v, size_t n)
{
	msgpack_pack_array(&m->pk, n);
	for (size_t i = 0; i < n; i++)
		msgpack_pack_uint64(&m->pk, v[i]);
}

static int decode_mp(struct mp *m, struct ig_kv_batch *b, char *err, size_t n)
{
	int r = ig_kv_decode(IG_KV_VLLM, m->sb.data, m->sb.size, b, err, n);
	msgpack_sbuffer_destroy(&m->sb);
	return r;
}

/* ---- round trips -------------------------------------------------------- */

static struct ig_kv_batch sample(void)
{
	static uint64_t h1[3] = {11, 0xfedcba9876543210ull, 13}, h2[2] = {11, 0x8000000000000000ull};
	static uint32_t t1[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0xffffffffu, 0};
	static struct ig_kv_event ev[3];
	ev[0] = (struct ig_kv_event){.kind = IG_KV_STORED, .hashes = h1, .nhashes = 3, .has_parent = true,
				     .parent = 99, .tokens = t1, .ntokens = 12, .block_size = 4, .lora_id = -1,
				     .gpu = true};
	ev[1] = (struct ig_kv_event){.kind = IG_KV_REMOVED, .hashes = h2, .nhashes = 2, .lora_id = -1, .gpu = true};
	ev[2] = (struct ig_kv_event){.kind = IG_KV_CLEARED, .lora_id = -1, .gpu = true};
	return (struct ig_kv_batch){.ts = 1712345678.25, .dp_rank = 2, .ev = ev, .nev = 3};
}

START_TEST(vllm_round_trip_in_the_array_like_form)
{
	struct ig_kv_batch in = sample(), out;
	char *buf, err[200] = "";
	size_t len;
	ck_assert_int_eq(ig_kv_encode(IG_KV_VLLM, &in, &buf, &len), 0);

	/* the shape vLLM's kv_events_subscriber.py decodes: [ts, [events], rank],
	 * an event [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name] */
	msgpack_unpacked u;
	msgpack_unpacked_init(&u);
	ck_assert_int_eq(msgpack_unpack_next(&u, buf, len, NULL), MSGPACK_UNPACK_SUCCESS);
	ck_assert_int_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
	ck_assert_uint_eq(u.data.via.array.size, 3);
	msgpack_object st = u.data.via.array.ptr[1].via.array.ptr[0];
	ck_assert_uint_eq(st.via.array.size, 8);
	ck_assert(st.via.array.ptr[0].type == MSGPACK_OBJECT_STR && memcmp(st.via.array.ptr[0].via.str.ptr, "BlockStored", 11) == 0);
	ck_assert(st.via.array.ptr[6].type == MSGPACK_OBJECT_STR && memcmp(st.via.array.ptr[6].via.str.ptr, "GPU", 3) == 0);
	msgpack_unpacked_destroy(&u);

	ck_assert_int_eq(ig_kv_decode(IG_KV_VLLM, buf, len, &out, err, sizeof(err)), 0);
	ck_assert_double_eq(out.ts, in.ts);
	ck_assert_int_eq(out.dp_rank, 2);
	ck_assert_uint_eq(out.nev, 3);
	struct ig_kv_event *s = &out.ev[0];
	ck_assert_int_eq(s->kind, IG_KV_STORED);
	ck_assert_uint_eq(s->nhashes, 3);
	ck_assert(memcmp(s->hashes, in.ev[0].hashes, 3 * 8) == 0);
	ck_assert(s->has_parent && s->parent == 99);
	ck_assert_uint_eq(s->ntokens, 12);
	ck_assert(memcmp(s->tokens, in.ev[0].tokens, 12 * 4) == 0);
	ck_assert_uint_eq(s->block_size, 4);
	ck_assert_int_eq(s->lora_id, -1);
	ck_assert(s->gpu);
	ck_assert_int_eq(out.ev[1].kind, IG_KV_REMOVED);
	ck_assert_uint_eq(out.ev[1].nhashes, 2);
	ck_assert(out.ev[1].hashes[1] == 0x8000000000000000ull);
	ck_assert_int_eq(out.ev[2].kind, IG_KV_CLEARED);
	ig_kv_batch_free(&out);
	free(buf);

	/* no rank, a LoRA, a CPU block: all kept */
	in.dp_rank = -1;
	in.ev[0].lora_id = 7;
	in.ev[0].gpu = false;
	ck_assert_int_eq(ig_kv_encode(IG_KV_VLLM, &in, &buf, &len), 0);
	ck_assert_int_eq(ig_kv_decode(IG_KV_VLLM, buf, len, &out, err, sizeof(err)), 0);
	ck_assert_int_eq(out.dp_rank, -1);
	ck_assert_int_eq(out.ev[0].lora_id, 7);
	ck_assert(!out.ev[0].gpu);
	ig_kv_batch_free(&out);
	free(buf);
	in.ev[0].lora_id = -1;
	in.ev[0].gpu = true;
}
END_TEST

START_TEST(sglang_round_trip_sends_a_page_per_event)
{
	struct ig_kv_batch in = sample(), out;
	char *buf, err[200] = "";
	size_t len;
	ck_assert_int_eq(ig_kv_encode(IG_KV_SGLANG, &in, &buf, &len), 0);
	ck_assert_int_eq(ig_kv_decode(IG_KV_SGLANG, buf, len, &out, err, sizeof(err)), 0);
	ck_assert_int_eq(out.dp_rank, 2);
	/* SGLang's radix cache: one BlockStored per page, chained by parent */
	ck_assert_uint_eq(out.nev, 5);
	for (int i = 0; i < 3; i++) {
		struct ig_kv_event *e = &out.ev[i];
		ck_assert_int_eq(e->kind, IG_KV_STORED);
		ck_assert_uint_eq(e->nhashes, 1);
		ck_assert(e->hashes[0] == in.ev[0].hashes[i]);
		ck_assert(e->has_parent);
		ck_assert(e->parent == (i ? in.ev[0].hashes[i - 1] : 99));
		ck_assert_uint_eq(e->ntokens, 4);
		ck_assert(memcmp(e->tokens, in.ev[0].tokens + 4 * i, 16) == 0);
	}
	ck_assert_int_eq(out.ev[3].kind, IG_KV_REMOVED);
	ck_assert(out.ev[3].hashes[1] == 0x8000000000000000ull); /* sent as a negative int64 */
	ck_assert_int_eq(out.ev[4].kind, IG_KV_CLEARED);
	ig_kv_batch_free(&out);
	free(buf);
}
END_TEST

/* ---- the shapes the engines send --------------------------------------- */

START_TEST(vllm_map_form_with_bytes_hashes_and_newer_fields)
{
	/* current vllm/distributed/kv_events.py: Structs as maps, tag "type",
	 * sha256 block hashes as bytes, fields a decoder must skip */
	unsigned char d1[32], d2[32];
	for (int i = 0; i < 32; i++)
		d1[i] = (unsigned char)i, d2[i] = (unsigned char)(255 - i);
	struct mp m;
	mp_init(&m);
	msgpack_pack_map(&m.pk, 4);
	str(&m, "ts");
	msgpack_pack_double(&m.pk, 5.5);
	str(&m, "unknown_future_key"), msgpack_pack_array(&m.pk, 0);
	str(&m, "events");
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_map(&m.pk, 10);
	str(&m, "type"), str(&m, "BlockStored");
	str(&m, "block_hashes"), msgpack_pack_array(&m.pk, 2), bin(&m, d1, 32), bin(&m, d2, 32);
	str(&m, "parent_block_hash"), msgpack_pack_nil(&m.pk);
	str(&m, "token_ids"), uints(&m, (uint64_t[]){5, 6, 7, 8}, 4);
	str(&m, "block_size"), msgpack_pack_uint8(&m.pk, 2);
	str(&m, "lora_id"), msgpack_pack_nil(&m.pk);
	str(&m, "medium"), str(&m, "GPU");
	str(&m, "extra_keys"), msgpack_pack_array(&m.pk, 2), msgpack_pack_nil(&m.pk), msgpack_pack_array(&m.pk, 1), str(&m, "salt");
	str(&m, "group_idx"), msgpack_pack_uint8(&m.pk, 0);
	str(&m, "kv_cache_spec_kind"), str(&m, "full_attention");
	msgpack_pack_map(&m.pk, 5);
	str(&m, "type"), str(&m, "BlockStored");
	str(&m, "block_hashes"), msgpack_pack_array(&m.pk, 1), msgpack_pack_int64(&m.pk, -3);
	str(&m, "parent_block_hash"), bin(&m, d2, 32);
	str(&m, "token_ids"), uints(&m, (uint64_t[]){9, 10}, 2);
	str(&m, "block_size"), msgpack_pack_uint8(&m.pk, 2);
	msgpack_pack_map(&m.pk, 3);
	str(&m, "type"), str(&m, "BlockRemoved");
	str(&m, "block_hashes"), msgpack_pack_array(&m.pk, 1), bin(&m, d1, 32);
	str(&m, "medium"), str(&m, "CPU");
	msgpack_pack_map(&m.pk, 1);
	str(&m, "type"), str(&m, "AllBlocksCleared");
	str(&m, "data_parallel_rank"), msgpack_pack_uint8(&m.pk, 1);

	struct ig_kv_batch b;
	char err[200] = "";
	ck_assert_msg(decode_mp(&m, &b, err, sizeof(err)) == 0, "%s", err);
	ck_assert_double_eq(b.ts, 5.5);
	ck_assert_int_eq(b.dp_rank, 1);
	ck_assert_uint_eq(b.nev, 4);
	uint64_t f1 = b.ev[0].hashes[0], f2 = b.ev[0].hashes[1];
	ck_assert(f1 != f2);
	ck_assert(!b.ev[0].has_parent);
	ck_assert_uint_eq(b.ev[0].ntokens, 4);
	ck_assert_uint_eq(b.ev[0].tokens[3], 8);
	ck_assert_int_eq(b.ev[0].lora_id, -1);
	/* the same bytes fold to the same 64 bits wherever they appear */
	ck_assert(b.ev[1].has_parent && b.ev[1].parent == f2);
	ck_assert(b.ev[1].hashes[0] == (uint64_t)-3);
	ck_assert(b.ev[1].gpu); /* medium left out: the GPU */
	ck_assert_int_eq(b.ev[2].kind, IG_KV_REMOVED);
	ck_assert(b.ev[2].hashes[0] == f1);
	ck_assert(!b.ev[2].gpu); /* vLLM's CPU offload tier */
	ck_assert_int_eq(b.ev[3].kind, IG_KV_CLEARED);
	ig_kv_batch_free(&b);
}
END_TEST

START_TEST(older_array_like_forms_and_trailing_fields)
{
	/* vLLM up to mid-2025: [ts, events] without a rank; BlockStored with
	 * and without medium; a future trailing field; BlockRemoved without medium */
	struct mp m;
	mp_init(&m);
	msgpack_pack_array(&m.pk, 2);
	msgpack_pack_uint32(&m.pk, 17); /* an integer ts is a time too */
	msgpack_pack_array(&m.pk, 4);
	msgpack_pack_array(&m.pk, 6);
	str(&m, "BlockStored"), uints(&m, (uint64_t[]){1, 2}, 2), msgpack_pack_uint8(&m.pk, 77);
	uints(&m, (uint64_t[]){1, 2, 3, 4, 5, 6}, 6), msgpack_pack_uint8(&m.pk, 3), msgpack_pack_uint8(&m.pk, 4);
	msgpack_pack_array(&m.pk, 9);
	str(&m, "BlockStored"), uints(&m, (uint64_t[]){3}, 1), msgpack_pack_uint8(&m.pk, 2);
	uints(&m, (uint64_t[]){7, 8, 9}, 3), msgpack_pack_uint8(&m.pk, 3), msgpack_pack_nil(&m.pk);
	str(&m, "CPU"), msgpack_pack_nil(&m.pk), msgpack_pack_map(&m.pk, 0);
	msgpack_pack_array(&m.pk, 2);
	str(&m, "BlockRemoved"), uints(&m, (uint64_t[]){1, 2, 3}, 3);
	msgpack_pack_array(&m.pk, 1);
	str(&m, "AllBlocksCleared");

	struct ig_kv_batch b;
	char err[200] = "";
	ck_assert_msg(decode_mp(&m, &b, err, sizeof(err)) == 0, "%s", err);
	ck_assert_double_eq(b.ts, 17);
	ck_assert_int_eq(b.dp_rank, -1);
	ck_assert_uint_eq(b.nev, 4);
	ck_assert(b.ev[0].has_parent && b.ev[0].parent == 77);
	ck_assert_int_eq(b.ev[0].lora_id, 4);
	ck_assert(b.ev[0].gpu);
	ck_assert_uint_eq(b.ev[1].tokens[2], 9);
	ck_assert(!b.ev[1].gpu);
	ck_assert_uint_eq(b.ev[2].nhashes, 3);
	ck_assert(b.ev[2].gpu);
	ig_kv_batch_free(&b);
}
END_TEST

START_TEST(sglang_pages_of_one_token_and_negative_hashes)
{
	/* python/sglang/srt/disaggregation/kv_events.py with page_size 1: one
	 * event per token, hash_str_to_int64's signed hashes, attn_dp_rank third */
	struct mp m;
	mp_init(&m);
	msgpack_pack_array(&m.pk, 3);
	msgpack_pack_double(&m.pk, 2.0);
	msgpack_pack_array(&m.pk, 3);
	msgpack_pack_array(&m.pk, 7);
	str(&m, "BlockStored"), msgpack_pack_array(&m.pk, 1), msgpack_pack_int64(&m.pk, INT64_MIN);
	msgpack_pack_nil(&m.pk), uints(&m, (uint64_t[]){42}, 1), msgpack_pack_uint8(&m.pk, 1), msgpack_pack_nil(&m.pk);
	str(&m, "GPU");
	msgpack_pack_array(&m.pk, 7);
	str(&m, "BlockStored"), msgpack_pack_array(&m.pk, 1), msgpack_pack_int64(&m.pk, -6);
	msgpack_pack_int64(&m.pk, INT64_MIN), uints(&m, (uint64_t[]){43}, 1), msgpack_pack_uint8(&m.pk, 1);
	msgpack_pack_nil(&m.pk), str(&m, "CPU_PINNED");
	msgpack_pack_array(&m.pk, 3);
	str(&m, "BlockRemoved"), msgpack_pack_array(&m.pk, 2), msgpack_pack_int64(&m.pk, INT64_MIN);
	msgpack_pack_int64(&m.pk, -6), str(&m, "GPU");
	msgpack_pack_uint8(&m.pk, 3);

	struct ig_kv_batch b;
	char err[200] = "";
	ck_assert_int_eq(ig_kv_decode(IG_KV_SGLANG, m.sb.data, m.sb.size, &b, err, sizeof(err)), 0);
	msgpack_sbuffer_destroy(&m.sb);
	ck_assert_int_eq(b.dp_rank, 3);
	ck_assert_uint_eq(b.nev, 3);
	ck_assert(b.ev[0].hashes[0] == 0x8000000000000000ull);
	ck_assert_uint_eq(b.ev[0].tokens[0], 42);
	ck_assert(b.ev[1].parent == 0x8000000000000000ull);
	ck_assert(b.ev[1].hashes[0] == (uint64_t)-6);
	ck_assert(!b.ev[1].gpu);
	ck_assert(b.ev[2].hashes[1] == (uint64_t)-6);
	ig_kv_batch_free(&b);
}
END_TEST

/* ---- hostile input ------------------------------------------------------ */

static void refused(const void *p, size_t n, const char *want)
{
	struct ig_kv_batch b;
	char err[200] = "";
	ck_assert_int_eq(ig_kv_decode(IG_KV_VLLM, p, n, &b, err, sizeof(err)), -1);
	ck_assert_msg(err[0] != 0, "no message");
	ck_assert_msg(!want || strstr(err, want), "message '%s' lacks '%s'", err, want);
	ck_assert_ptr_null(b.ev);
	ck_assert_uint_eq(b.nev, 0);
}

static void refused_mp(struct mp *m, const char *want)
{
	refused(m->sb.data, m->sb.size, want);
	msgpack_sbuffer_destroy(&m->sb);
}

START_TEST(every_truncation_is_refused)
{
	struct ig_kv_batch in = sample();
	char *buf;
	size_t len;
	ck_assert_int_eq(ig_kv_encode(IG_KV_VLLM, &in, &buf, &len), 0);
	for (size_t n = 0; n < len; n++)
		refused(buf, n, NULL);
	/* and a byte more is refused too */
	char *more = malloc(len + 1);
	memcpy(more, buf, len);
	more[len] = 0;
	refused(more, len + 1, "after the batch");
	free(more);
	free(buf);
}
END_TEST

/* A batch [1.0, [ev]] around one event built by f. */
static void one_event(struct mp *m, void (*f)(struct mp *))
{
	mp_init(m);
	msgpack_pack_array(&m->pk, 2);
	msgpack_pack_double(&m->pk, 1.0);
	msgpack_pack_array(&m->pk, 1);
	f(m);
}

static void ev_unknown_tag(struct mp *m) { msgpack_pack_array(&m->pk, 1), str(m, "BlockExploded"); }
static void ev_int(struct mp *m) { msgpack_pack_int8(&m->pk, 5); }
static void ev_no_tag(struct mp *m) { msgpack_pack_array(&m->pk, 0); }
static void ev_map_no_type(struct mp *m) { msgpack_pack_map(&m->pk, 1), str(m, "block_hashes"), uints(m, NULL, 0); }
static void ev_short_stored(struct mp *m)
{
	msgpack_pack_array(&m->pk, 3), str(m, "BlockStored"), uints(m, (uint64_t[]){1}, 1), msgpack_pack_nil(&m->pk);
}
static void stored(struct mp *m, int bad)
{
	msgpack_pack_array(&m->pk, 7);
	str(m, "BlockStored");
	if (bad == 1)
		str(m, "not a list");
	else if (bad == 2)
		msgpack_pack_array(&m->pk, 1), msgpack_pack_double(&m->pk, 1.5);
	else
		uints(m, (uint64_t[]){1, 2}, 2);
	if (bad == 3)
		str(m, "parent");
	else
		msgpack_pack_nil(&m->pk);
	if (bad == 4)
		msgpack_pack_array(&m->pk, 2), msgpack_pack_int8(&m->pk, -1), msgpack_pack_int8(&m->pk, 1);
	else if (bad == 5)
		uints(m, (uint64_t[]){1ull << 33, 1}, 2);
	else if (bad == 6)
		uints(m, (uint64_t[]){1, 2, 3}, 3); /* 3 tokens for 2 blocks of 1 */
	else if (bad == 9)
		msgpack_pack_array(&m->pk, 2), msgpack_pack_array(&m->pk, 2), msgpack_pack_uint8(&m->pk, 1),
			msgpack_pack_uint8(&m->pk, 2), msgpack_pack_uint8(&m->pk, 3); /* EAGLE's bigram pairs */
	else
		uints(m, (uint64_t[]){1, 2}, 2);
	if (bad == 7)
		msgpack_pack_uint8(&m->pk, 0);
	else
		msgpack_pack_uint8(&m->pk, 1);
	if (bad == 8)
		str(m, "lora");
	else
		msgpack_pack_nil(&m->pk);
	if (bad == 10)
		msgpack_pack_uint8(&m->pk, 1);
	else
		str(m, "GPU");
}
static void st1(struct mp *m) { stored(m, 1); }
static void st2(struct mp *m) { stored(m, 2); }
static void st3(struct mp *m) { stored(m, 3); }
static void st4(struct mp *m) { stored(m, 4); }
static void st5(struct mp *m) { stored(m, 5); }
static void st6(struct mp *m) { stored(m, 6); }
static void st7(struct mp *m) { stored(m, 7); }
static void st8(struct mp *m) { stored(m, 8); }
static void st9(struct mp *m) { stored(m, 9); }
static void st10(struct mp *m) { stored(m, 10); }

START_TEST(wrong_types_and_unknown_tags_drop_the_batch)
{
	struct {
		void (*f)(struct mp *);
		const char *want;
	} cases[] = {
		{ev_unknown_tag, "unknown event tag 'BlockExploded'"},
		{ev_int, "neither an array nor a map"},
		{ev_no_tag, "without its tag"},
		{ev_map_no_type, "without its \"type\""},
		{ev_short_stored, "BlockStored with 2 fields"},
		{st1, "block_hashes is not an array"},
		{st2, "block_hashes[0]"},
		{st3, "parent_block_hash"},
		{st4, "token_ids[0]"},
		{st5, "token_ids[0]"},
		{st6, "3 token ids for 2 blocks of 1"},
		{st7, "block_size"},
		{st8, "lora_id"},
		{st9, "token_ids[0]"},
		{st10, "medium"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct mp m;
		one_event(&m, cases[i].f);
		refused_mp(&m, cases[i].want);
	}
	/* the good one of the family passes: the cases above fail for their reason */
	struct mp m;
	struct ig_kv_batch b;
	char err[200];
	mp_init(&m);
	msgpack_pack_array(&m.pk, 2), msgpack_pack_double(&m.pk, 1.0), msgpack_pack_array(&m.pk, 1), stored(&m, 0);
	ck_assert_msg(decode_mp(&m, &b, err, sizeof(err)) == 0, "%s", err);
	ig_kv_batch_free(&b);

	/* the batch itself */
	mp_init(&m), str(&m, "batch");
	refused_mp(&m, "neither an array nor a map");
	mp_init(&m), msgpack_pack_array(&m.pk, 1), msgpack_pack_double(&m.pk, 1);
	refused_mp(&m, "ts and events at least");
	mp_init(&m), msgpack_pack_array(&m.pk, 2), str(&m, "now"), msgpack_pack_array(&m.pk, 0);
	refused_mp(&m, "ts is not a number");
	mp_init(&m), msgpack_pack_array(&m.pk, 2), msgpack_pack_double(&m.pk, -1), msgpack_pack_array(&m.pk, 0);
	refused_mp(&m, "ts");
	mp_init(&m), msgpack_pack_array(&m.pk, 2), msgpack_pack_double(&m.pk, 1), msgpack_pack_map(&m.pk, 0);
	refused_mp(&m, "events is not an array");
	mp_init(&m), msgpack_pack_array(&m.pk, 3), msgpack_pack_double(&m.pk, 1), msgpack_pack_array(&m.pk, 0),
		msgpack_pack_int8(&m.pk, -1);
	refused_mp(&m, "rank");
	mp_init(&m), msgpack_pack_map(&m.pk, 1), str(&m, "ts"), msgpack_pack_double(&m.pk, 1);
	refused_mp(&m, "without \"events\"");
	/* an empty batch is fine */
	mp_init(&m), msgpack_pack_array(&m.pk, 2), msgpack_pack_double(&m.pk, 1), msgpack_pack_array(&m.pk, 0);
	ck_assert_int_eq(decode_mp(&m, &b, err, sizeof(err)), 0);
	ck_assert_uint_eq(b.nev, 0);
	ig_kv_batch_free(&b);
}
END_TEST

START_TEST(huge_counts_and_garbage_are_refused_without_allocating)
{
	/* an array claiming 4 G elements in 5 bytes; a map claiming 65535 pairs */
	refused("\xdd\xff\xff\xff\xff", 5, "cannot fit");
	refused("\x92\xcb\x3f\xf0\0\0\0\0\0\0\xdf\x7f\xff\xff\xff", 15, "cannot fit");
	refused("\xde\xff\xff", 3, "cannot fit");
	/* a string, bin or ext longer than the input */
	refused("\xdb\xff\xff\xff\xf0" "abc", 8, "runs past the end");
	refused("\xc6\x7f\xff\xff\xff", 5, "runs past the end");
	refused("\xc9\x00\x00\x10\x00\x01", 6, "runs past the end");
	refused("\xc1", 1, "not msgpack");
	refused("", 0, "empty");
	/* nesting deeper than msgpack-c's stack */
	unsigned char deep[200];
	memset(deep, 0x91, sizeof(deep) - 1);
	deep[sizeof(deep) - 1] = 0xc0;
	refused(deep, sizeof(deep), NULL);

	/* a million and one events, each a byte: past IG_KV_MAX_EVENTS */
	size_t n = IG_KV_MAX_EVENTS + 1;
	unsigned char *big = malloc(n + 20), *p = big;
	*p++ = 0x92, *p++ = 0x01, *p++ = 0xdd;
	*p++ = (unsigned char)(n >> 24), *p++ = (unsigned char)(n >> 16), *p++ = (unsigned char)(n >> 8), *p++ = (unsigned char)n;
	memset(p, 0xc0, n);
	refused(big, (size_t)(p - big) + n, "events in a batch");
	/* a BlockStored of a million and one hashes: past IG_KV_MAX_HASHES */
	n = IG_KV_MAX_HASHES + 1;
	p = big;
	*p++ = 0x92, *p++ = 0x01, *p++ = 0x91, *p++ = 0x95;
	*p++ = 0xab, memcpy(p, "BlockStored", 11), p += 11;
	*p++ = 0xdd;
	*p++ = (unsigned char)(n >> 24), *p++ = (unsigned char)(n >> 16), *p++ = (unsigned char)(n >> 8), *p++ = (unsigned char)n;
	size_t head = (size_t)(p - big);
	big = realloc(big, head + n + 8);
	p = big + head;
	memset(p, 0x01, n);
	p += n;
	*p++ = 0xc0, *p++ = 0x90, *p++ = 0x01;
	refused(big, (size_t)(p - big), "block hashes in a batch");
	free(big);
}
END_TEST

IG_CHECK_MAIN("kvwire", vllm_round_trip_in_the_array_like_form, sglang_round_trip_sends_a_page_per_event,
	      vllm_map_form_with_bytes_hashes_and_newer_fields, older_array_like_forms_and_trailing_fields,
	      sglang_pages_of_one_token_and_negative_hashes, every_truncation_is_refused,
	      wrong_types_and_unknown_tags_drop_the_batch, huge_counts_and_garbage_are_refused_without_allocating)
