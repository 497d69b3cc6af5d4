/* kvsub: a KV-event subscriber for the tests. Connects a SUB socket to a
 * publisher (infergate-sim --kv-events, tests/tools/kvpub, an engine),
 * decodes each batch with ig_kv_decode and prints it as one JSON line:
 *
 *   {"seq": 3, "ts": 1.5, "dp_rank": 0, "events": [{"type": "BlockStored",
 *    "block_hashes": ["00000000000000ab", ...], "parent_block_hash": null,
 *    "token_ids": [..], "block_size": 16, "lora_id": null, "medium": "GPU"}]}
 *   {"seq": 4, "error": "event 0: unknown event tag 'X'"}
 *   {"gap": [5, 9]}     seqs 5..8 were lost and the replay no longer had them
 *
 * Hashes are 16 hex digits (all 64 bits, which JSON numbers would not keep).
 *
 *   kvsub --connect EP [--replay EP] [--from SEQ] [--replay-only]
 *         [--count N] [--idle-ms MS] [--flavor vllm|sglang] [--topic T]
 *
 * With --replay, it asks for every batch from --from (default 0) at once
 * and again whenever a seq jumps, as vLLM's
 * examples/online_serving/kv_events_subscriber.py does, and prints each seq
 * once, in order: nothing published is missed, even before its
 * subscription reached the publisher (PUB/SUB's slow joiner), as long as
 * the publisher still keeps it. --replay-only asks once and exits at the
 * end marker. It exits 0 after --count batches, or when nothing arrived for
 * --idle-ms (default 5000; exit 1 then if --count was not reached). */
#include "config.h"
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "infergate/kvwire.h"
#include "infergate/util.h"

static enum ig_kv_flavor flavor = IG_KV_VLLM;
static long printed, count = -1;

static json_t *hash_json(uint64_t h)
{
	char s[17];
	snprintf(s, sizeof(s), "%016llx", (unsigned long long)h);
	return json_string(s);
}

static void print_batch(uint64_t seq, const void *p, size_t n)
{
	struct ig_kv_batch b;
	char err[256];
	json_t *o = json_object();
	json_object_set_new(o, "seq", json_integer((json_int_t)seq));
	if (ig_kv_decode(flavor, p, n, &b, err, sizeof(err)) < 0) {
		json_object_set_new(o, "error", json_string(err));
	} else {
		json_object_set_new(o, "ts", json_real(b.ts));
		json_object_set_new(o, "dp_rank", b.dp_rank < 0 ? json_null() : json_integer(b.dp_rank));
		json_t *evs = json_array();
		static const char *const names[] = {"BlockStored", "BlockRemoved", "AllBlocksCleared"};
		for (size_t i = 0; i < b.nev; i++) {
			struct ig_kv_event *e = &b.ev[i];
			json_t *ej = json_object();
			json_object_set_new(ej, "type", json_string(names[e->kind]));
			if (e->kind != IG_KV_CLEARED) {
				json_t *h = json_array();
				for (size_t k = 0; k < e->nhashes; k++)
					json_array_append_new(h, hash_json(e->hashes[k]));
				json_object_set_new(ej, "block_hashes", h);
				json_object_set_new(ej, "medium", json_string(e->gpu ? "GPU" : "other"));
			}
			if (e->kind == IG_KV_STORED) {
				json_object_set_new(ej, "parent_block_hash", e->has_parent ? hash_json(e->parent) : json_null());
				json_t *t = json_array();
				for (size_t k = 0; k < e->ntokens; k++)
					json_array_append_new(t, json_integer(e->tokens[k]));
				json_object_set_new(ej, "token_ids", t);
				json_object_set_new(ej, "block_size", json_integer(e->block_size));
				json_object_set_new(ej, "lora_id", e->lora_id < 0 ? json_null() : json_integer(e->lora_id));
			}
			json_array_append_new(evs, ej);
		}
		json_object_set_new(o, "events", evs);
		ig_kv_batch_free(&b);
	}
	char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	printf("%s\n", s);
	free(s);
	json_decref(o);
	printed++;
}

static void ask_replay(void *dealer, uint64_t from)
{
	unsigned char sb[8];
	ig_kv_seq_write(sb, from);
	zmq_send(dealer, "", 0, ZMQ_SNDMORE);
	zmq_send(dealer, sb, 8, 0);
}

/* Reads one multipart message into up to 3 frames; returns the number. */
static int recv_frames(void *s, zmq_msg_t f[3])
{
	int n = 0, more = 1;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			break;
		}
		more = zmq_msg_more(&m);
		if (n < 3)
			f[n++] = m;
		else
			zmq_msg_close(&m);
	}
	return n;
}

static void close_frames(zmq_msg_t f[3], int n)
{
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
}

static uint64_t next;
static bool in_flight;

static void ask_or_gap(uint64_t seq, const void *p, size_t n, void *dealer);

/* PUB batches that came while a replay was answered: the replay may have
 * been served before they were published, so they wait for its end. */
static struct held {
	uint64_t seq;
	void *p;
	size_t n;
} *held;
static size_t nheld, capheld;

static void on_pub(uint64_t seq, const void *p, size_t n, void *dealer)
{
	if (in_flight) {
		if (nheld == capheld) {
			capheld = capheld ? 2 * capheld : 16;
			held = realloc(held, capheld * sizeof(*held));
		}
		held[nheld].p = malloc(n ? n : 1);
		memcpy(held[nheld].p, p, n);
		held[nheld].seq = seq, held[nheld].n = n;
		nheld++;
		return;
	}
	if (seq == next) {
		print_batch(seq, p, n);
		next++;
	} else if (seq > next)
		ask_or_gap(seq, p, n, dealer);
	else if (seq == 0) {
		/* the publisher restarted */
		printf("{\"restart\":true}\n");
		print_batch(seq, p, n);
		next = 1;
	}
	/* else: had it already from a replay */
}

/* A jump in the seqs: ask the replay for what is missing (it has this one
 * too), or say so when there is no replay socket. */
static void ask_or_gap(uint64_t seq, const void *p, size_t n, void *dealer)
{
	if (dealer) {
		ask_replay(dealer, next);
		in_flight = true;
		return;
	}
	printf("{\"gap\":[%llu,%llu]}\n", (unsigned long long)next, (unsigned long long)seq);
	print_batch(seq, p, n);
	next = seq + 1;
}

static void drain_held(void *dealer)
{
	size_t i = 0;
	for (; i < nheld && !in_flight; i++)
		on_pub(held[i].seq, held[i].p, held[i].n, dealer);
	/* a new gap: the replay asked for brings the rest */
	for (size_t k = 0; k < nheld; k++)
		free(held[k].p);
	nheld = 0;
	(void)i;
}

static void usage(void)
{
	fprintf(stderr, "usage: kvsub --connect EP [--replay EP] [--from SEQ] [--replay-only] [--count N] "
			"[--idle-ms MS] [--flavor vllm|sglang] [--topic T]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *connect = NULL, *replay = NULL, *topic = "";
	long idle_ms = 5000;
	bool replay_only = false;
	static const struct option opts[] = {
		{"connect", 1, 0, 'c'}, {"replay", 1, 0, 'r'}, {"from", 1, 0, 'f'}, {"replay-only", 0, 0, 'o'},
		{"count", 1, 0, 'n'}, {"idle-ms", 1, 0, 'i'}, {"flavor", 1, 0, 'F'}, {"topic", 1, 0, 't'},
		{0, 0, 0, 0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c': connect = optarg; break;
		case 'r': replay = optarg; break;
		case 'f': next = strtoull(optarg, NULL, 10); break;
		case 'o': replay_only = true; break;
		case 'n': count = atol(optarg); break;
		case 'i': idle_ms = atol(optarg); break;
		case 'F':
			if (strcmp(optarg, "sglang") == 0)
				flavor = IG_KV_SGLANG;
			else if (strcmp(optarg, "vllm") != 0)
				usage();
			break;
		case 't': topic = optarg; break;
		default: usage();
		}
	}
	if ((!connect && !replay_only) || (replay_only && !replay))
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	void *ctx = zmq_ctx_new(), *sub = NULL, *dealer = NULL;
	if (!replay_only) {
		sub = zmq_socket(ctx, ZMQ_SUB);
		if (zmq_connect(sub, connect) < 0 || zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topic, strlen(topic)) < 0) {
			fprintf(stderr, "kvsub: %s: %s\n", connect, zmq_strerror(zmq_errno()));
			return 2;
		}
	}
	if (replay) {
		dealer = zmq_socket(ctx, ZMQ_DEALER);
		if (zmq_connect(dealer, replay) < 0) {
			fprintf(stderr, "kvsub: %s: %s\n", replay, zmq_strerror(zmq_errno()));
			return 2;
		}
		ask_replay(dealer, next);
		in_flight = true;
	}
	uint64_t last_msg = ig_now_ms();
	int rc = 0;
	while (count < 0 || printed < count) {
		zmq_pollitem_t items[2];
		int ni = 0;
		if (sub)
			items[ni++] = (zmq_pollitem_t){.socket = sub, .events = ZMQ_POLLIN};
		if (dealer)
			items[ni++] = (zmq_pollitem_t){.socket = dealer, .events = ZMQ_POLLIN};
		zmq_poll(items, ni, 100);
		bool got = false;
		zmq_msg_t f[3];
		int n;
		while (sub && (n = recv_frames(sub, f)) > 0) {
			got = true;
			if (n == 3 && zmq_msg_size(&f[1]) == 8)
				on_pub(ig_kv_seq_read(zmq_msg_data(&f[1])), zmq_msg_data(&f[2]), zmq_msg_size(&f[2]), dealer);
			close_frames(f, n);
		}
		while (dealer && (n = recv_frames(dealer, f)) > 0) {
			got = true;
			if (n == 3 && zmq_msg_size(&f[1]) == 8) {
				uint64_t seq = ig_kv_seq_read(zmq_msg_data(&f[1]));
				if (seq == UINT64_MAX) {
					in_flight = false;
					if (replay_only) {
						close_frames(f, n);
						goto out;
					}
					drain_held(dealer);
				} else if (seq >= next) {
					if (seq > next)
						printf("{\"gap\":[%llu,%llu]}\n", (unsigned long long)next,
						       (unsigned long long)seq);
					print_batch(seq, zmq_msg_data(&f[2]), zmq_msg_size(&f[2]));
					next = seq + 1;
				}
			}
			close_frames(f, n);
		}
		if (got)
			last_msg = ig_now_ms();
		else if (ig_now_ms() - last_msg >= (uint64_t)idle_ms) {
			/* a replay never answered (the publisher went away): what
			 * came on PUB meanwhile is printed after its gap line */
			in_flight = false;
			drain_held(NULL);
			rc = count >= 0 && printed < count;
			break;
		}
	}
out:
	if (sub)
		zmq_close(sub);
	if (dealer)
		zmq_close(dealer);
	zmq_ctx_term(ctx);
	return rc;
}
