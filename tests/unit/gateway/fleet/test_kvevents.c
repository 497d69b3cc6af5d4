/* Unit tests for the KV events subscriber (src/gateway/fleet/kvevents.c):
 * a publisher in the test (an XPUB, so the test knows when the gateway's
 * subscription arrived, and a ROUTER answering replays as vLLM's
 * ZmqEventPublisher._service_replay does) on loopback ports, the events
 * thread feeding a sink that records what it was given; asserted through
 * what /health/backends shows and the backend's atomics. */
#include "config.h"
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "conf/conf.h"
#include "fleet/kvevents.h"
#include "infergate/util.h"
#include "../../check_main.h"

#define STALE_MS 300

/* ---- the sink: what the index would have been given ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static double applied[256]; /* each batch's ts: the test sets it to its seq */
static size_t napplied, nclears;

static void rec_apply(void *arg, size_t src, const struct ig_kv_batch *b)
{
	(void)arg;
	ck_assert_uint_eq(src, 0);
	pthread_mutex_lock(&mu);
	if (napplied < 256)
		applied[napplied++] = b->ts;
	pthread_mutex_unlock(&mu);
}

static void rec_clear(void *arg, size_t src)
{
	(void)arg;
	(void)src;
	pthread_mutex_lock(&mu);
	nclears++;
	pthread_mutex_unlock(&mu);
}

static uint64_t rec_blocks(void *arg, size_t src)
{
	(void)arg;
	(void)src;
	pthread_mutex_lock(&mu);
	uint64_t n = napplied;
	pthread_mutex_unlock(&mu);
	return n;
}

static const struct ig_kvevents_sink sink = {rec_apply, rec_clear, rec_blocks, NULL};

/* ---- the publisher ---- */
struct pub {
	void *ctx, *xpub, *router;
	char ep[64], rep[64];
	struct {
		uint64_t seq;
		char *data;
		size_t len;
	} buf[64];
	size_t nbuf;
	bool serve; /* answer replays */
	bool topic; /* ... with the topic before seq, as newer vLLMs do */
};

static void bind_any(void *z, char *ep, size_t n)
{
	ck_assert_int_eq(zmq_bind(z, "tcp://127.0.0.1:*"), 0);
	ck_assert_int_eq(zmq_getsockopt(z, ZMQ_LAST_ENDPOINT, ep, &n), 0);
}

static void pub_open(struct pub *p, bool replay)
{
	memset(p, 0, sizeof(*p));
	int zero = 0;
	p->ctx = zmq_ctx_new();
	p->xpub = zmq_socket(p->ctx, ZMQ_XPUB);
	zmq_setsockopt(p->xpub, ZMQ_LINGER, &zero, sizeof(zero));
	bind_any(p->xpub, p->ep, sizeof(p->ep));
	if (replay) {
		p->router = zmq_socket(p->ctx, ZMQ_ROUTER);
		zmq_setsockopt(p->router, ZMQ_LINGER, &zero, sizeof(zero));
		bind_any(p->router, p->rep, sizeof(p->rep));
		p->serve = true;
	}
}

static void pub_forget(struct pub *p)
{
	for (size_t i = 0; i < p->nbuf; i++)
		free(p->buf[i].data);
	p->nbuf = 0;
}

static void pub_close(struct pub *p)
{
	pub_forget(p);
	zmq_close(p->xpub);
	if (p->router)
		zmq_close(p->router);
	zmq_ctx_term(p->ctx);
}

/* Answers the replay requests waiting: [id, "", start] gets [id, "", seq,
 * batch] per buffered batch from start, then [id, "", -1, ""]. */
static void pub_serve(struct pub *p)
{
	zmq_msg_t fr[3];
	while (p->router && p->serve) {
		int n = 0;
		for (int more = 1; more; n++) {
			zmq_msg_init(&fr[n < 3 ? n : 2]);
			if (zmq_msg_recv(&fr[n < 3 ? n : 2], p->router, n ? 0 : ZMQ_DONTWAIT) < 0)
				return;
			more = zmq_msg_more(&fr[n < 3 ? n : 2]);
		}
		ck_assert_int_eq(n, 3);
		ck_assert_uint_eq(zmq_msg_size(&fr[2]), 8);
		uint64_t start = ig_kv_seq_read(zmq_msg_data(&fr[2]));
		unsigned char seq[8];
		for (size_t i = 0; i < p->nbuf; i++) {
			if (p->buf[i].seq < start)
				continue;
			ig_kv_seq_write(seq, p->buf[i].seq);
			zmq_send(p->router, zmq_msg_data(&fr[0]), zmq_msg_size(&fr[0]), ZMQ_SNDMORE);
			zmq_send(p->router, "", 0, ZMQ_SNDMORE);
			if (p->topic)
				zmq_send(p->router, "kv", 2, ZMQ_SNDMORE);
			zmq_send(p->router, seq, 8, ZMQ_SNDMORE);
			zmq_send(p->router, p->buf[i].data, p->buf[i].len, 0);
		}
		ig_kv_seq_write(seq, UINT64_MAX);
		zmq_send(p->router, zmq_msg_data(&fr[0]), zmq_msg_size(&fr[0]), ZMQ_SNDMORE);
		zmq_send(p->router, "", 0, ZMQ_SNDMORE);
		if (p->topic)
			zmq_send(p->router, "", 0, ZMQ_SNDMORE);
		zmq_send(p->router, seq, 8, ZMQ_SNDMORE);
		zmq_send(p->router, "", 0, 0);
		for (int i = 0; i < 3; i++)
			zmq_msg_close(&fr[i]);
	}
}

/* The gateway's subscription arrived (XPUB hands it over). */
static void pub_wait_subscribed(struct pub *p)
{
	zmq_pollitem_t it = {.socket = p->xpub, .events = ZMQ_POLLIN};
	ck_assert_int_eq(zmq_poll(&it, 1, 10000), 1);
	char sub[16];
	ck_assert_int_ge(zmq_recv(p->xpub, sub, sizeof(sub), 0), 1);
	ck_assert_int_eq(sub[0], 1);
}

/* Batch seq (one block stored, ts = seq), buffered for replays, and sent
 * unless `skip` (a batch lost on the way). */
static void pub_batch(struct pub *p, uint64_t seq, bool skip)
{
	uint64_t hash = 1000 + seq;
	uint32_t tokens[16];
	for (int i = 0; i < 16; i++)
		tokens[i] = (uint32_t)(seq * 16 + (uint64_t)i);
	struct ig_kv_event ev = {.kind = IG_KV_STORED, .hashes = &hash, .nhashes = 1, .tokens = tokens,
				 .ntokens = 16, .block_size = 16, .lora_id = -1, .gpu = true};
	struct ig_kv_batch b = {.ts = (double)seq, .dp_rank = -1, .ev = &ev, .nev = 1};
	char *data;
	size_t len;
	ck_assert_int_eq(ig_kv_encode(IG_KV_VLLM, &b, &data, &len), 0);
	ck_assert_uint_lt(p->nbuf, 64);
	p->buf[p->nbuf].seq = seq;
	p->buf[p->nbuf].data = data;
	p->buf[p->nbuf++].len = len;
	if (skip)
		return;
	unsigned char s[8];
	ig_kv_seq_write(s, seq);
	zmq_send(p->xpub, "", 0, ZMQ_SNDMORE);
	zmq_send(p->xpub, s, 8, ZMQ_SNDMORE);
	zmq_send(p->xpub, data, len, 0);
}

/* A message of n frames as given (NULL: empty). */
static void pub_raw(struct pub *p, int n, const char *const *frames, const size_t *lens)
{
	for (int i = 0; i < n; i++)
		zmq_send(p->xpub, frames[i] ? frames[i] : "", frames[i] ? lens[i] : 0, i + 1 < n ? ZMQ_SNDMORE : 0);
}

/* ---- the gateway's side ---- */
struct gw {
	struct pub pub;
	struct ig_backend *b;
	struct ig_backend_conf bc;
	struct ig_conf cfg;
	struct ig_fleet fleet;
	struct ig_kvevents *kv;
};

static void gw_start(struct gw *g, bool replay)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_lock(&mu);
	napplied = nclears = 0;
	pthread_mutex_unlock(&mu);
	pub_open(&g->pub, replay);
	g->b = calloc(1, sizeof(*g->b));
	g->b->id = 7;
	g->b->url = "http://127.0.0.1:1";
	g->b->dp_rank = -1; /* a server without ranks, as ig_backend_fleet_add makes it */
	g->b->server = g->b;
	g->b->nranks = 1;
	g->bc = (struct ig_backend_conf){.url = "http://127.0.0.1:1", .kv_events = g->pub.ep,
					 .kv_events_replay = replay ? g->pub.rep : NULL};
	g->cfg.backends = &g->bc;
	g->cfg.n_backends = 1;
	g->cfg.kv_stale_after_ms = STALE_MS;
	g->fleet.v = &g->b;
	g->fleet.n = 1;
	char *err = NULL;
	g->kv = ig_kvevents_start(4, &sink, &err);
	ck_assert_ptr_nonnull(g->kv);
	ig_kvevents_sync(g->kv, &g->fleet, &g->cfg);
	ck_assert_int_eq(atomic_load(&g->b->kv_src), 1);
	ck_assert_int_eq(atomic_load(&g->b->kv_ranks), 1);
	pub_wait_subscribed(&g->pub);
}

static void gw_stop(struct gw *g)
{
	ig_kvevents_stop(g->kv);
	pub_close(&g->pub);
	free(g->b);
}

/* b's "kv_events" object now (a new reference), NULL when it has none. */
static json_t *report(struct gw *g)
{
	json_t *e = json_object();
	ig_kvevents_report(g->kv, g->b, e);
	json_t *o = json_incref(json_object_get(e, "kv_events"));
	json_decref(e);
	return o;
}

static json_int_t num(struct gw *g, const char *key)
{
	json_t *o = report(g);
	json_int_t v = json_integer_value(json_object_get(o, key));
	json_decref(o);
	return v;
}

static bool state_is(struct gw *g, const char *st)
{
	json_t *o = report(g);
	bool yes = strcmp(json_string_value(json_object_get(o, "state")), st) == 0;
	json_decref(o);
	return yes;
}

/* Waits (serving replays) until key reaches want, or fails after 10 s. */
static void wait_num(struct gw *g, const char *key, json_int_t want)
{
	for (int i = 0; i < 1000 && num(g, key) != want; i++) {
		pub_serve(&g->pub);
		usleep(10000);
	}
	ck_assert_int_eq(num(g, key), want);
}

static void wait_state(struct gw *g, const char *st)
{
	for (int i = 0; i < 1000 && !state_is(g, st); i++) {
		pub_serve(&g->pub);
		usleep(10000);
	}
	json_t *o = report(g);
	ck_assert_str_eq(json_string_value(json_object_get(o, "state")), st);
	json_decref(o);
}

/* The batches the sink was given, in order, as their seqs. */
static void assert_applied(const double *want, size_t n)
{
	pthread_mutex_lock(&mu);
	size_t got = napplied;
	double copy[256];
	memcpy(copy, applied, sizeof(copy));
	pthread_mutex_unlock(&mu);
	ck_assert_uint_eq(got, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_double_eq(copy[i], want[i]);
}

static size_t clears(void)
{
	pthread_mutex_lock(&mu);
	size_t n = nclears;
	pthread_mutex_unlock(&mu);
	return n;
}

START_TEST(batches_in_order_then_a_gap_filled_by_the_replay)
{
	struct gw g;
	gw_start(&g, true);
	ck_assert(state_is(&g, "waiting"));
	ck_assert_int_eq(atomic_load(&g.b->kv_exact), 0);
	for (uint64_t s = 0; s < 3; s++)
		pub_batch(&g.pub, s, false);
	wait_num(&g, "batches", 3);
	wait_state(&g, "flowing");
	ck_assert_int_eq(num(&g, "events"), 3);
	for (int i = 0; i < 100 && !atomic_load(&g.b->kv_exact); i++)
		usleep(10000);
	ck_assert_int_eq(atomic_load(&g.b->kv_exact), 1);
	/* 3 lost on the way: asked from the replay, applied before 4 */
	pub_batch(&g.pub, 3, true);
	pub_batch(&g.pub, 4, false);
	wait_num(&g, "batches", 5);
	ck_assert_int_eq(num(&g, "gaps"), 1);
	ck_assert_int_eq(num(&g, "gaps_filled"), 1);
	ck_assert_int_eq(num(&g, "gaps_lost"), 0);
	ck_assert_int_eq(num(&g, "replayed"), 2); /* 3, and 4: the replay runs to the buffer's end */
	assert_applied((double[]){0, 1, 2, 3, 4}, 5);
	ck_assert_uint_eq(clears(), 0);
	ck_assert(state_is(&g, "flowing"));
	gw_stop(&g);
}
END_TEST

/* Joining an engine that ran before: its buffer from 0 first. */
START_TEST(a_late_join_asks_the_replay_from_0)
{
	struct gw g;
	gw_start(&g, true);
	pub_batch(&g.pub, 0, true);
	pub_batch(&g.pub, 1, true);
	pub_batch(&g.pub, 2, false);
	wait_num(&g, "batches", 3);
	assert_applied((double[]){0, 1, 2}, 3);
	ck_assert_int_eq(num(&g, "gaps"), 0);
	ck_assert_int_eq(num(&g, "gaps_lost"), 0);
	ck_assert_int_eq(num(&g, "replayed"), 3);
	gw_stop(&g);
}
END_TEST

/* No replay endpoint: the source is cleared, approximate for a while, and
 * exact again with the batches that follow. */
START_TEST(a_gap_without_replay_is_lost_then_flowing_again)
{
	struct gw g;
	gw_start(&g, false);
	pub_batch(&g.pub, 0, false);
	wait_num(&g, "batches", 1);
	pub_batch(&g.pub, 2, false);
	wait_num(&g, "batches", 2);
	ck_assert_int_eq(num(&g, "gaps"), 1);
	ck_assert_int_eq(num(&g, "gaps_lost"), 1);
	ck_assert_int_eq(num(&g, "fallbacks"), 1);
	ck_assert(state_is(&g, "lost"));
	ck_assert_uint_eq(clears(), 1);
	usleep(100000);
	ck_assert_int_eq(atomic_load(&g.b->kv_exact), 0);
	pub_batch(&g.pub, 3, false);
	wait_state(&g, "flowing");
	assert_applied((double[]){0, 2, 3}, 3);
	gw_stop(&g);
}
END_TEST

/* A replay endpoint that never answers: given up after its timeout. */
START_TEST(a_replay_without_answer_is_given_up)
{
	struct gw g;
	gw_start(&g, true);
	pub_batch(&g.pub, 0, false);
	wait_num(&g, "batches", 1);
	g.pub.serve = false;
	pub_batch(&g.pub, 1, true);
	pub_batch(&g.pub, 2, false);
	usleep(300000);
	ck_assert_int_eq(num(&g, "batches"), 1); /* 2 waits for the replay */
	wait_num(&g, "gaps_lost", 1);
	wait_num(&g, "batches", 2);
	ck_assert_int_eq(num(&g, "gaps_filled"), 0);
	assert_applied((double[]){0, 2}, 2);
	ck_assert_uint_eq(clears(), 1);
	gw_stop(&g);
}
END_TEST

/* vLLM's later replay framing: [empty, topic, seq, batch], the end
 * [empty, "", -1, ""] (vllm/distributed/kv_events.py). */
START_TEST(a_replay_with_the_topic_frame_fills_the_gap_too)
{
	struct gw g;
	gw_start(&g, true);
	g.pub.topic = true;
	pub_batch(&g.pub, 0, false);
	wait_num(&g, "batches", 1);
	pub_batch(&g.pub, 1, true);
	pub_batch(&g.pub, 2, true);
	pub_batch(&g.pub, 3, false);
	wait_num(&g, "batches", 4);
	ck_assert_int_eq(num(&g, "gaps_filled"), 1);
	ck_assert_int_eq(num(&g, "malformed"), 0);
	assert_applied((double[]){0, 1, 2, 3}, 4);
	gw_stop(&g);
}
END_TEST

START_TEST(a_sequence_from_0_again_is_a_restart)
{
	struct gw g;
	gw_start(&g, false);
	for (uint64_t s = 0; s < 3; s++)
		pub_batch(&g.pub, s, false);
	wait_num(&g, "batches", 3);
	pub_forget(&g.pub); /* a new engine's buffer */
	pub_batch(&g.pub, 0, false);
	pub_batch(&g.pub, 1, false);
	wait_num(&g, "batches", 5);
	ck_assert_int_eq(num(&g, "restarts"), 1);
	ck_assert_int_eq(num(&g, "gaps"), 0);
	ck_assert_uint_eq(clears(), 1);
	assert_applied((double[]){0, 1, 2, 0, 1}, 5);
	ck_assert(state_is(&g, "flowing"));
	gw_stop(&g);
}
END_TEST

START_TEST(malformed_messages_are_dropped_and_counted)
{
	struct gw g;
	gw_start(&g, false);
	pub_batch(&g.pub, 0, false);
	wait_num(&g, "batches", 1);
	unsigned char seq1[8];
	ig_kv_seq_write(seq1, 1);
	pub_raw(&g.pub, 2, (const char *[]){NULL, "x"}, (size_t[]){0, 1});                    /* two frames */
	pub_raw(&g.pub, 3, (const char *[]){NULL, "1234", "x"}, (size_t[]){0, 4, 1});         /* a short seq */
	pub_raw(&g.pub, 3, (const char *[]){NULL, (char *)seq1, "\xc1\xff"}, (size_t[]){0, 8, 2}); /* not msgpack */
	pub_raw(&g.pub, 5, (const char *[]){NULL, NULL, NULL, NULL, NULL}, (size_t[]){0, 0, 0, 0, 0});
	wait_num(&g, "malformed", 4);
	/* seq 1 was taken (its batch unreadable): 2 follows without a gap */
	pub_batch(&g.pub, 2, false);
	wait_num(&g, "batches", 2);
	ck_assert_int_eq(num(&g, "gaps"), 0);
	ck_assert(state_is(&g, "flowing"));
	gw_stop(&g);
}
END_TEST

/* Requests sent, no batch for stale_after_ms: stale; a batch: exact again. */
START_TEST(requests_without_events_make_it_stale)
{
	struct gw g;
	gw_start(&g, false);
	pub_batch(&g.pub, 0, false);
	wait_state(&g, "flowing");
	usleep(2 * STALE_MS * 1000); /* idle: silence alone is not staleness */
	ck_assert(state_is(&g, "flowing"));
	atomic_store(&g.b->last_sent_ms, ig_now_ms());
	usleep(STALE_MS / 2 * 1000);
	ck_assert(state_is(&g, "flowing"));
	wait_state(&g, "stale");
	ck_assert_int_eq(num(&g, "fallbacks"), 1);
	for (int i = 0; i < 100 && atomic_load(&g.b->kv_exact); i++)
		usleep(10000);
	ck_assert_int_eq(atomic_load(&g.b->kv_exact), 0);
	pub_batch(&g.pub, 1, false);
	wait_state(&g, "flowing");
	for (int i = 0; i < 100 && !atomic_load(&g.b->kv_exact); i++)
		usleep(10000);
	ck_assert_int_eq(atomic_load(&g.b->kv_exact), 1);
	ck_assert_int_eq(num(&g, "fallbacks"), 1);
	gw_stop(&g);
}
END_TEST

/* A backend that leaves the fleet is unsubscribed, its source cleared; one
 * whose endpoint changes is subscribed again. */
START_TEST(a_backend_gone_is_cleared)
{
	struct gw g;
	gw_start(&g, false);
	pub_batch(&g.pub, 0, false);
	wait_num(&g, "batches", 1);
	g.fleet.n = 0;
	ig_kvevents_sync(g.kv, &g.fleet, &g.cfg);
	ck_assert_int_eq(atomic_load(&g.b->kv_src), 0);
	json_t *o = report(&g);
	ck_assert_ptr_null(o);
	for (int i = 0; i < 100 && clears() == 0; i++)
		usleep(10000);
	ck_assert_uint_eq(clears(), 1);
	/* back, with no events configured: not subscribed */
	g.fleet.n = 1;
	g.bc.kv_events = NULL;
	ig_kvevents_sync(g.kv, &g.fleet, &g.cfg);
	ck_assert_int_eq(atomic_load(&g.b->kv_src), 0);
	/* and with kv_events.port: tcp://ITS_HOST:PORT */
	g.cfg.kv_port = atoi(strrchr(g.pub.ep, ':') + 1);
	g.b->url = g.bc.url = "http://127.0.0.1:1";
	ig_kvevents_sync(g.kv, &g.fleet, &g.cfg);
	ck_assert_int_eq(atomic_load(&g.b->kv_src), 1);
	o = report(&g);
	ck_assert_str_eq(json_string_value(json_object_get(o, "endpoint")), g.pub.ep);
	json_decref(o);
	gw_stop(&g);
}
END_TEST

START_TEST(endpoints_of_ranks_and_their_checks)
{
	char *e = ig_kvevents_rank_endpoint("tcp://10.0.0.5:5557", 2);
	ck_assert_str_eq(e, "tcp://10.0.0.5:5559");
	free(e);
	e = ig_kvevents_rank_endpoint("tcp://[::1]:5557", 0);
	ck_assert_str_eq(e, "tcp://[::1]:5557");
	free(e);
	e = ig_kvevents_rank_endpoint("ipc:///run/kv", 1);
	ck_assert_str_eq(e, "ipc:///run/kv_dp1");
	free(e);
	ck_assert_ptr_null(ig_conf_kv_endpoint_bad("tcp://vllm-0.internal:5557", 1));
	ck_assert_ptr_null(ig_conf_kv_endpoint_bad("tcp://[fe80::1]:5557", 8));
	ck_assert_ptr_null(ig_conf_kv_endpoint_bad("ipc:///tmp/kv", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("http://h:5557", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://h", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://:5557", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://h:0", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://h:65536", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://h:65535", 2)); /* rank 1 past the last port */
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://h o:5557", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://*:5557", 1)); /* bind's form, not connect's */
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("tcp://h:55x7", 1));
	ck_assert_ptr_nonnull(ig_conf_kv_endpoint_bad("ipc://", 1));
}
END_TEST

IG_CHECK_MAIN("kvevents", batches_in_order_then_a_gap_filled_by_the_replay, a_late_join_asks_the_replay_from_0,
	      a_gap_without_replay_is_lost_then_flowing_again, a_replay_without_answer_is_given_up,
	      a_replay_with_the_topic_frame_fills_the_gap_too, a_sequence_from_0_again_is_a_restart, malformed_messages_are_dropped_and_counted,
	      requests_without_events_make_it_stale, a_backend_gone_is_cleared, endpoints_of_ranks_and_their_checks)
