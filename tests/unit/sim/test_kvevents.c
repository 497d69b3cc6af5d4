/* Unit tests for src/sim/kvevents.c, --kv-events: what a rank's cache did
 * reaches a subscriber as one batch per publish, in the format asked for,
 * with the rank's dp_rank, on the port offset by the rank; nothing is sent
 * when nothing changed (the seqs have no holes). */
#include "config.h"
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "infergate/kvpub.h"
#include "kvevents.h"
#include "../check_main.h"

/* Receives [topic, seq, payload] and decodes the payload. */
static uint64_t recv_batch(void *sub, enum ig_kv_flavor f, struct ig_kv_batch *b)
{
	zmq_msg_t m[3];
	for (int i = 0; i < 3; i++) {
		zmq_msg_init(&m[i]);
		ck_assert_int_ge(zmq_msg_recv(&m[i], sub, 0), 0);
	}
	uint64_t seq = ig_kv_seq_read(zmq_msg_data(&m[1]));
	char err[256];
	ck_assert_msg(ig_kv_decode(f, zmq_msg_data(&m[2]), zmq_msg_size(&m[2]), b, err, sizeof(err)) == 0, "%s", err);
	for (int i = 0; i < 3; i++)
		zmq_msg_close(&m[i]);
	return seq;
}

/* A loopback port free a moment ago. */
static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t n = sizeof(a);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &n), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void cycle(enum sim_kv_format format, enum ig_kv_flavor flavor, int rank)
{
	struct sim_conf c;
	char ep[64], want_ep[64];
	memset(&c, 0, sizeof(c));
	/* rank 0: a port of ZMQ's choosing; others: the port given plus the rank */
	int port = rank ? free_port() : 0;
	snprintf(ep, sizeof(ep), rank ? "tcp://127.0.0.1:%d" : "tcp://127.0.0.1:*", port - rank);
	snprintf(want_ep, sizeof(want_ep), "tcp://127.0.0.1:%d", port);
	c.kv_events = ep;
	c.kv_events_format = format;
	struct sim_kv kv;
	ck_assert_int_eq(sim_kv_init(&kv, 100 * IG_BLOCK_TOKENS), 0);
	struct ig_kvpub *p = sim_kvevents_open(&c, &kv, rank);
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(kv.log);
	if (rank)
		ck_assert_str_eq(ig_kvpub_endpoint(p, 0), want_ep);

	void *ctx = zmq_ctx_new(), *sub = zmq_socket(ctx, ZMQ_SUB);
	int ms = 5000;
	zmq_setsockopt(sub, ZMQ_RCVTIMEO, &ms, sizeof(ms));
	ck_assert_int_eq(zmq_connect(sub, ig_kvpub_endpoint(p, 0)), 0);
	ck_assert_int_eq(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0), 0);
	for (int i = 0; i < 500 && ig_kvpub_subscribers(p) < 1; i++)
		usleep(10000);

	char text[3 * IG_BLOCK_BYTES];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (char)('A' + i % 26);
	uint64_t chain[3];
	uint32_t tokens[3 * IG_BLOCK_TOKENS];
	ig_block_chain(text, sizeof(text), chain, 3);
	sim_kv_text_tokens(text, 3, tokens);
	ck_assert_int_eq(sim_kv_admit(&kv, chain, 0, 3 * IG_BLOCK_TOKENS, 0), 0);
	sim_kvevents_publish(&c, p, &kv, rank); /* nothing changed yet: nothing sent */
	sim_kv_release(&kv, chain, tokens, 0, 3, 3 * IG_BLOCK_TOKENS);
	sim_kvevents_publish(&c, p, &kv, rank);
	sim_kv_flush(&kv);
	sim_kvevents_publish(&c, p, &kv, rank);

	struct ig_kv_batch b;
	ck_assert_uint_eq(recv_batch(sub, flavor, &b), 0);
	ck_assert_int_eq(b.dp_rank, rank);
	ck_assert(b.ts > 1.7e9);
	/* vLLM: one event of 3 blocks; SGLang: one per block */
	size_t want = flavor == IG_KV_SGLANG ? 3 : 1;
	ck_assert_uint_eq(b.nev, want);
	ck_assert_int_eq(b.ev[0].kind, IG_KV_STORED);
	ck_assert(b.ev[0].hashes[0] == chain[0]);
	ck_assert_uint_eq(b.ev[0].tokens[0], 'A' | 'B' << 8 | 'C' << 16 | 'D' << 24);
	ck_assert(b.ev[want - 1].hashes[b.ev[want - 1].nhashes - 1] == chain[2]);
	ig_kv_batch_free(&b);
	ck_assert_uint_eq(recv_batch(sub, flavor, &b), 1);
	ck_assert_uint_eq(b.nev, 1);
	ck_assert_int_eq(b.ev[0].kind, IG_KV_CLEARED);
	ig_kv_batch_free(&b);

	zmq_close(sub);
	zmq_ctx_term(ctx);
	sim_kvevents_close(p);
	sim_kv_free(&kv);
}

START_TEST(vllm_batches_reach_a_subscriber)
{
	cycle(SIM_KV_FORMAT_VLLM, IG_KV_VLLM, 0);
}
END_TEST

START_TEST(sglang_batches_of_rank_two)
{
	cycle(SIM_KV_FORMAT_SGLANG, IG_KV_SGLANG, 2);
}
END_TEST

START_TEST(a_bad_endpoint_is_refused)
{
	struct sim_conf c;
	memset(&c, 0, sizeof(c));
	c.kv_events = "tcp://127.0.0.1:notaport";
	struct sim_kv kv;
	ck_assert_int_eq(sim_kv_init(&kv, 100 * IG_BLOCK_TOKENS), 0);
	ck_assert_ptr_null(sim_kvevents_open(&c, &kv, 0));
	sim_kv_free(&kv);
}
END_TEST

IG_CHECK_MAIN("kvevents", vllm_batches_reach_a_subscriber, sglang_batches_of_rank_two, a_bad_endpoint_is_refused)
