/* Unit tests for src/common/kvpub.c, the KV-event publisher: a SUB socket
 * in the test receives [topic, seq, payload] as vLLM's subscriber expects;
 * a DEALER asking the replay socket gets every kept batch from its start
 * and the -1 end marker; held-back batches (a gap) are in the replay; a
 * restart numbers from 0 again with an empty buffer; the DP rank offsets
 * the ports as vLLM's offset_endpoint_port. */
#include "config.h"
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "infergate/kvpub.h"
#include "../check_main.h"

START_TEST(dp_rank_offsets_the_port)
{
	char out[64];
	ck_assert_int_eq(ig_kvpub_offset_endpoint("tcp://*:5557", 0, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "tcp://*:5557");
	ck_assert_int_eq(ig_kvpub_offset_endpoint("tcp://*:5557", 3, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "tcp://*:5560");
	ck_assert_int_eq(ig_kvpub_offset_endpoint("tcp://[::1]:6000", 1, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "tcp://[::1]:6001");
	ck_assert_int_eq(ig_kvpub_offset_endpoint("inproc://cache", 2, out, sizeof(out)), 0);
	ck_assert_str_eq(out, "inproc://cache_dp2");
	ck_assert_int_eq(ig_kvpub_offset_endpoint("tcp://*:65535", 1, out, sizeof(out)), -1);
	ck_assert_int_eq(ig_kvpub_offset_endpoint("tcp://host", 1, out, sizeof(out)), -1);
	ck_assert_int_eq(ig_kvpub_offset_endpoint("tcp://*:*", 1, out, sizeof(out)), -1);
	ck_assert_int_eq(ig_kvpub_offset_endpoint("udp://x:1", 1, out, sizeof(out)), -1);
	ck_assert_int_eq(ig_kvpub_offset_endpoint("tcp://*:5557", 1, out, 8), -1);
}
END_TEST

/* Receives one multipart message of up to 4 frames; returns the count. */
static int recv_parts(void *s, char parts[4][64], size_t lens[4], int timeout_ms)
{
	zmq_setsockopt(s, ZMQ_RCVTIMEO, &timeout_ms, sizeof(timeout_ms));
	int n = 0, more = 1;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, s, 0) < 0) {
			zmq_msg_close(&m);
			return n ? n : -1;
		}
		if (n < 4) {
			lens[n] = zmq_msg_size(&m);
			memcpy(parts[n], zmq_msg_data(&m), lens[n] < 64 ? lens[n] : 64);
		}
		n++;
		more = zmq_msg_more(&m);
		zmq_msg_close(&m);
	}
	return n;
}

static char *dup_payload(const char *s)
{
	return strdup(s);
}

static void wait_subscriber(struct ig_kvpub *p)
{
	for (int i = 0; i < 500 && ig_kvpub_subscribers(p) < 1; i++)
		usleep(10000);
	ck_assert_int_ge(ig_kvpub_subscribers(p), 1);
}

/* Asks for a replay from start; checks the seqs and payloads that come
 * back, then the end marker. */
static void replay_expect(void *dealer, uint64_t start, const uint64_t *seqs, const char *const *payloads, int n)
{
	unsigned char sb[8];
	ig_kv_seq_write(sb, start);
	ck_assert_int_eq(zmq_send(dealer, "", 0, ZMQ_SNDMORE), 0);
	ck_assert_int_eq(zmq_send(dealer, sb, 8, 0), 8);
	char parts[4][64];
	size_t lens[4];
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(recv_parts(dealer, parts, lens, 5000), 3);
		ck_assert_uint_eq(lens[0], 0);
		ck_assert_uint_eq(lens[1], 8);
		ck_assert_uint_eq(ig_kv_seq_read((unsigned char *)parts[1]), seqs[i]);
		ck_assert_uint_eq(lens[2], strlen(payloads[i]));
		ck_assert(memcmp(parts[2], payloads[i], lens[2]) == 0);
	}
	ck_assert_int_eq(recv_parts(dealer, parts, lens, 5000), 3);
	ck_assert_uint_eq(lens[1], 8);
	ck_assert(memcmp(parts[1], "\xff\xff\xff\xff\xff\xff\xff\xff", 8) == 0);
	ck_assert_uint_eq(lens[2], 0);
}

START_TEST(pub_frames_replay_gap_and_restart)
{
	void *ctx = zmq_ctx_new();
	char err[256] = "";
	struct ig_kvpub_opts o = {.endpoint = "inproc://kvpub-test", .replay_endpoint = "inproc://kvpub-replay",
				  .dp_rank = 1, .buffer_steps = 3, .topic = "kv", .zmq_ctx = ctx};
	struct ig_kvpub *p = ig_kvpub_new(&o, err, sizeof(err));
	ck_assert_msg(p != NULL, "%s", err);
	ck_assert_str_eq(ig_kvpub_endpoint(p, 0), "inproc://kvpub-test_dp1");
	ck_assert_str_eq(ig_kvpub_endpoint(p, 1), "inproc://kvpub-replay_dp1");

	void *sub = zmq_socket(ctx, ZMQ_SUB);
	ck_assert_int_eq(zmq_connect(sub, "inproc://kvpub-test_dp1"), 0);
	ck_assert_int_eq(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "kv", 2), 0);
	void *dealer = zmq_socket(ctx, ZMQ_DEALER);
	ck_assert_int_eq(zmq_connect(dealer, "inproc://kvpub-replay_dp1"), 0);
	wait_subscriber(p);

	/* seq 0 sent, seq 1 held back (a gap), seq 2 sent */
	ck_assert_int_eq(ig_kvpub_publish(p, dup_payload("zero"), 4, true), 0);
	ck_assert_int_eq(ig_kvpub_publish(p, dup_payload("one"), 3, false), 0);
	ck_assert_int_eq(ig_kvpub_publish(p, dup_payload("two"), 3, true), 0);
	char parts[4][64];
	size_t lens[4];
	ck_assert_int_eq(recv_parts(sub, parts, lens, 5000), 3);
	ck_assert(lens[0] == 2 && memcmp(parts[0], "kv", 2) == 0);
	ck_assert_uint_eq(lens[1], 8);
	ck_assert_uint_eq(ig_kv_seq_read((unsigned char *)parts[1]), 0);
	ck_assert(lens[2] == 4 && memcmp(parts[2], "zero", 4) == 0);
	ck_assert_int_eq(recv_parts(sub, parts, lens, 5000), 3);
	ck_assert_uint_eq(ig_kv_seq_read((unsigned char *)parts[1]), 2); /* 1 never came */
	ck_assert(lens[2] == 3 && memcmp(parts[2], "two", 3) == 0);

	/* the subscriber fills the gap by replay */
	replay_expect(dealer, 1, (uint64_t[]){1, 2}, (const char *[]){"one", "two"}, 2);
	/* a request of the wrong shape is ignored; the next one is served */
	ck_assert_int_eq(zmq_send(dealer, "junk", 4, 0), 4);
	replay_expect(dealer, 0, (uint64_t[]){0, 1, 2}, (const char *[]){"zero", "one", "two"}, 3);
	/* the ring keeps buffer_steps (3): seq 0 falls out */
	ck_assert_int_eq(ig_kvpub_publish(p, dup_payload("three"), 5, true), 0);
	ck_assert_int_eq(recv_parts(sub, parts, lens, 5000), 3);
	replay_expect(dealer, 0, (uint64_t[]){1, 2, 3}, (const char *[]){"one", "two", "three"}, 3);

	/* a restart: seq from 0, the buffer emptied */
	ig_kvpub_restart(p);
	ck_assert_int_eq(ig_kvpub_publish(p, dup_payload("again"), 5, true), 0);
	ck_assert_int_eq(recv_parts(sub, parts, lens, 5000), 3);
	ck_assert_uint_eq(ig_kv_seq_read((unsigned char *)parts[1]), 0);
	ck_assert(lens[2] == 5 && memcmp(parts[2], "again", 5) == 0);
	replay_expect(dealer, 0, (uint64_t[]){0}, (const char *[]){"again"}, 1);

	struct ig_kvpub_stats st;
	ck_assert_int_eq(ig_kvpub_flush(p, 5000), 0);
	ig_kvpub_stats(p, &st);
	ck_assert_uint_eq(st.published, 5);
	ck_assert_uint_eq(st.sent, 4);
	ck_assert_uint_eq(st.dropped, 0);
	ck_assert_uint_eq(st.replays, 4);
	ck_assert_uint_eq(st.bad_requests, 1);

	zmq_close(sub);
	zmq_close(dealer);
	ig_kvpub_free(p);
	zmq_ctx_term(ctx);
}
END_TEST

START_TEST(encoded_batches_over_loopback_tcp)
{
	char err[256] = "";
	struct ig_kvpub_opts o = {.endpoint = "tcp://127.0.0.1:*"};
	struct ig_kvpub *p = ig_kvpub_new(&o, err, sizeof(err));
	ck_assert_msg(p != NULL, "%s", err);
	const char *ep = ig_kvpub_endpoint(p, 0);
	ck_assert_msg(strncmp(ep, "tcp://127.0.0.1:", 16) == 0 && strcmp(ep + 16, "*") != 0 && strcmp(ep + 16, "0") != 0,
		      "%s", ep);
	ck_assert_str_eq(ig_kvpub_endpoint(p, 1), "");

	void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB);
	ck_assert_int_eq(zmq_connect(sub, ep), 0);
	ck_assert_int_eq(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0), 0);
	wait_subscriber(p);

	uint64_t h[2] = {5, 6};
	uint32_t t[32];
	for (int i = 0; i < 32; i++)
		t[i] = (uint32_t)i * 3;
	struct ig_kv_event ev = {.kind = IG_KV_STORED, .hashes = h, .nhashes = 2, .tokens = t, .ntokens = 32,
				 .block_size = 16, .lora_id = -1, .gpu = true};
	struct ig_kv_batch b = {.ts = 3.5, .dp_rank = 0, .ev = &ev, .nev = 1};
	ck_assert_int_eq(ig_kvpub_publish_batch(p, IG_KV_VLLM, &b), 0);

	zmq_msg_t m[3];
	for (int i = 0; i < 3; i++) {
		zmq_msg_init(&m[i]);
		ck_assert_int_ge(zmq_msg_recv(&m[i], sub, 0), 0);
	}
	ck_assert(!zmq_msg_more(&m[2]));
	ck_assert_uint_eq(zmq_msg_size(&m[0]), 0); /* topic "" */
	struct ig_kv_batch got;
	ck_assert_int_eq(ig_kv_decode(IG_KV_VLLM, zmq_msg_data(&m[2]), zmq_msg_size(&m[2]), &got, err, sizeof(err)), 0);
	ck_assert_uint_eq(got.nev, 1);
	ck_assert_uint_eq(got.ev[0].ntokens, 32);
	ck_assert_uint_eq(got.ev[0].tokens[31], 93);
	ig_kv_batch_free(&got);
	for (int i = 0; i < 3; i++)
		zmq_msg_close(&m[i]);

	/* a bad endpoint names itself */
	struct ig_kvpub_opts bad = {.endpoint = "tcp://127.0.0.1:notaport"};
	ck_assert_ptr_null(ig_kvpub_new(&bad, err, sizeof(err)));
	ck_assert_msg(strstr(err, "tcp://127.0.0.1:notaport") != NULL, "%s", err);

	zmq_close(sub);
	zmq_ctx_term(ctx);
	ig_kvpub_free(p);
}
END_TEST

START_TEST(a_full_queue_drops_and_counts)
{
	char err[256] = "";
	struct ig_kvpub_opts o = {.endpoint = "inproc://kvpub-full", .max_queue = 1};
	struct ig_kvpub *p = ig_kvpub_new(&o, err, sizeof(err));
	ck_assert_msg(p != NULL, "%s", err);
	int refused = 0;
	for (int i = 0; i < 20000; i++)
		if (ig_kvpub_publish(p, dup_payload("x"), 1, true) < 0)
			refused++;
	ck_assert_int_eq(ig_kvpub_flush(p, 10000), 0);
	struct ig_kvpub_stats st;
	ig_kvpub_stats(p, &st);
	/* every batch either got a seq or was counted dropped */
	ck_assert_uint_eq(st.dropped, (uint64_t)refused);
	ck_assert_uint_eq(st.published + st.dropped, 20000);
	ig_kvpub_free(p);
}
END_TEST

IG_CHECK_MAIN("kvpub", dp_rank_offsets_the_port, pub_frames_replay_gap_and_restart, encoded_batches_over_loopback_tcp,
	      a_full_queue_drops_and_counts)
