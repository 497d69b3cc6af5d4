/* The KV-event publisher (include/infergate/kvpub.h), after vLLM's
 * ZmqEventPublisher (vllm/distributed/kv_events.py; SGLang's copy in
 * python/sglang/srt/disaggregation/kv_events.py is the same): a queue from
 * the callers, one thread that owns the sockets, a ring of the last
 * batches for replay. Not the encoding (kvwire.c).
 *
 * The thread sleeps in zmq_poll on the XPUB socket (subscriptions), the
 * ROUTER (replay requests) and an eventfd the callers ring when they queue:
 * a batch goes out as soon as it is queued, no polling period. */
#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "infergate/kvpub.h"

enum item_kind {
	ITEM_BATCH,   /* a payload to number, send and keep */
	ITEM_RESTART, /* seq back to 0, ring emptied */
};

struct item {
	struct item *next;
	enum item_kind kind;
	bool send;
	char *payload;
	size_t len;
};

struct kept {
	uint64_t seq;
	char *payload;
	size_t len;
};

struct ig_kvpub {
	/* the callers' side, under mu */
	pthread_mutex_t mu;
	pthread_cond_t done_cond;    /* processed moved on (flush) */
	struct item *head, *tail;
	size_t queued, max_queue;
	uint64_t enqueued, processed; /* items ever queued / handled by the thread */
	bool stop;
	struct ig_kvpub_stats st;
	int subscribers;

	int efd;                     /* rung by the callers */
	pthread_t thread;
	bool started;

	/* the thread's own */
	void *ctx;
	bool own_ctx;
	void *pub, *replay;
	char *topic;
	size_t topic_len;
	uint64_t next_seq;
	struct kept *ring;           /* buffer_steps slots; ring_n used from ring_head */
	size_t ring_cap, ring_head, ring_n;
	char ep[2][256];
};

int ig_kvpub_offset_endpoint(const char *endpoint, int rank, char *out, size_t n)
{
	int w;
	if (rank == 0)
		w = snprintf(out, n, "%s", endpoint);
	else if (strncmp(endpoint, "inproc://", 9) == 0)
		w = snprintf(out, n, "%s_dp%d", endpoint, rank);
	else if (strncmp(endpoint, "tcp://", 6) == 0) {
		const char *c = strrchr(endpoint, ':');
		char *end;
		if (c < endpoint + 6)
			return -1;
		long port = strtol(c + 1, &end, 10);
		if (end == c + 1 || *end || port < 0 || port + rank > 65535 || rank < 0)
			return -1;
		w = snprintf(out, n, "%.*s:%ld", (int)(c - endpoint), endpoint, port + rank);
	} else
		return -1;
	return w < 0 || (size_t)w >= n ? -1 : 0;
}

static void ring_clear(struct ig_kvpub *p)
{
	for (size_t i = 0; i < p->ring_n; i++)
		free(p->ring[(p->ring_head + i) % p->ring_cap].payload);
	p->ring_head = p->ring_n = 0;
}

static void ring_push(struct ig_kvpub *p, uint64_t seq, char *payload, size_t len)
{
	if (p->ring_n == p->ring_cap) {
		free(p->ring[p->ring_head].payload);
		p->ring_head = (p->ring_head + 1) % p->ring_cap;
		p->ring_n--;
	}
	p->ring[(p->ring_head + p->ring_n) % p->ring_cap] = (struct kept){seq, payload, len};
	p->ring_n++;
}

/* ---- the thread --------------------------------------------------------- */

static void handle(struct ig_kvpub *p, struct item *it)
{
	if (it->kind == ITEM_RESTART) {
		p->next_seq = 0;
		ring_clear(p);
		return;
	}
	uint64_t seq = p->next_seq++;
	unsigned char sb[8];
	ig_kv_seq_write(sb, seq);
	if (it->send) {
		/* XPUB drops at its high-water mark rather than block, as PUB */
		zmq_send(p->pub, p->topic, p->topic_len, ZMQ_SNDMORE | ZMQ_DONTWAIT);
		zmq_send(p->pub, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
		zmq_send(p->pub, it->payload, it->len, ZMQ_DONTWAIT);
	}
	ring_push(p, seq, it->payload, it->len);
	it->payload = NULL;
	pthread_mutex_lock(&p->mu);
	p->st.published++;
	if (it->send)
		p->st.sent++;
	pthread_mutex_unlock(&p->mu);
}

/* Reads the subscriptions XPUB passes up: "\1topic" subscribes, "\0topic"
 * unsubscribes (ZMQ_XPUB_VERBOSER: every one, repeats included). */
static void read_subscriptions(struct ig_kvpub *p)
{
	unsigned char buf[256];
	int n;
	while ((n = zmq_recv(p->pub, buf, sizeof(buf), ZMQ_DONTWAIT)) >= 0) {
		if (n < 1)
			continue;
		pthread_mutex_lock(&p->mu);
		p->subscribers += buf[0] == 1 ? 1 : (p->subscribers > 0 ? -1 : 0);
		pthread_mutex_unlock(&p->mu);
	}
}

/* One request: [identity, "", start seq (8 bytes)]; anything else is
 * drained and ignored, as vLLM's _service_replay does. */
static void serve_replay(struct ig_kvpub *p)
{
	for (;;) {
		zmq_msg_t f[3];
		int nf = 0, more = 1;
		bool got = false;
		while (more) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, p->replay, got ? 0 : ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&m);
				if (!got)
					return;
				break;
			}
			got = true;
			more = zmq_msg_more(&m);
			if (nf < 3)
				f[nf] = m;
			else
				zmq_msg_close(&m);
			nf++;
		}
		bool ok = nf == 3 && zmq_msg_size(&f[1]) == 0 && zmq_msg_size(&f[2]) == 8;
		if (ok) {
			uint64_t start = ig_kv_seq_read(zmq_msg_data(&f[2]));
			unsigned char sb[8];
			for (size_t i = 0; i < p->ring_n; i++) {
				struct kept *k = &p->ring[(p->ring_head + i) % p->ring_cap];
				if (k->seq < start)
					continue;
				ig_kv_seq_write(sb, k->seq);
				zmq_send(p->replay, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE | ZMQ_DONTWAIT);
				zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
				zmq_send(p->replay, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
				zmq_send(p->replay, k->payload, k->len, ZMQ_DONTWAIT);
			}
			ig_kv_seq_write(sb, UINT64_MAX); /* -1: the end */
			zmq_send(p->replay, zmq_msg_data(&f[0]), zmq_msg_size(&f[0]), ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(p->replay, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(p->replay, sb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
			zmq_send(p->replay, "", 0, ZMQ_DONTWAIT);
		}
		for (int i = 0; i < nf && i < 3; i++)
			zmq_msg_close(&f[i]);
		pthread_mutex_lock(&p->mu);
		if (ok)
			p->st.replays++;
		else
			p->st.bad_requests++;
		pthread_mutex_unlock(&p->mu);
	}
}

static void *run(void *arg)
{
	struct ig_kvpub *p = arg;
	zmq_pollitem_t items[3] = {
		{.socket = p->pub, .events = ZMQ_POLLIN},
		{.fd = p->efd, .events = ZMQ_POLLIN},
		{.socket = p->replay, .events = ZMQ_POLLIN},
	};
	int nitems = p->replay ? 3 : 2;
	for (;;) {
		if (zmq_poll(items, nitems, 1000) < 0 && errno != EINTR)
			break;
		uint64_t v;
		if (read(p->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			break;
		read_subscriptions(p);
		if (p->replay)
			serve_replay(p);
		pthread_mutex_lock(&p->mu);
		struct item *list = p->head;
		p->head = p->tail = NULL;
		p->queued = 0;
		bool stop = p->stop;
		pthread_mutex_unlock(&p->mu);
		uint64_t n = 0;
		while (list) {
			struct item *next = list->next;
			handle(p, list);
			free(list->payload);
			free(list);
			list = next;
			n++;
		}
		if (n) {
			pthread_mutex_lock(&p->mu);
			p->processed += n;
			pthread_cond_broadcast(&p->done_cond);
			pthread_mutex_unlock(&p->mu);
		}
		if (stop)
			break;
	}
	return NULL;
}

/* ---- the callers' side -------------------------------------------------- */

static int enqueue(struct ig_kvpub *p, struct item *it)
{
	pthread_mutex_lock(&p->mu);
	if (it->kind == ITEM_BATCH && p->queued >= p->max_queue) {
		p->st.dropped++;
		pthread_mutex_unlock(&p->mu);
		free(it->payload);
		free(it);
		return -1;
	}
	if (p->tail)
		p->tail->next = it;
	else
		p->head = it;
	p->tail = it;
	p->queued++;
	p->enqueued++;
	pthread_mutex_unlock(&p->mu);
	uint64_t one = 1;
	if (write(p->efd, &one, sizeof(one)) < 0) {
		/* the counter is full: the thread has wakeups pending anyway */
	}
	return 0;
}

int ig_kvpub_publish(struct ig_kvpub *p, char *payload, size_t len, bool send)
{
	struct item *it = calloc(1, sizeof(*it));
	if (!it) {
		free(payload);
		pthread_mutex_lock(&p->mu);
		p->st.dropped++;
		pthread_mutex_unlock(&p->mu);
		return -1;
	}
	*it = (struct item){.kind = ITEM_BATCH, .send = send, .payload = payload, .len = len};
	return enqueue(p, it);
}

int ig_kvpub_publish_batch(struct ig_kvpub *p, enum ig_kv_flavor f, const struct ig_kv_batch *b)
{
	char *buf;
	size_t len;
	if (ig_kv_encode(f, b, &buf, &len) < 0) {
		pthread_mutex_lock(&p->mu);
		p->st.dropped++;
		pthread_mutex_unlock(&p->mu);
		return -1;
	}
	return ig_kvpub_publish(p, buf, len, true);
}

void ig_kvpub_restart(struct ig_kvpub *p)
{
	struct item *it = calloc(1, sizeof(*it));
	if (!it)
		abort(); /* a few bytes; a lost restart would desynchronise the seqs */
	it->kind = ITEM_RESTART;
	enqueue(p, it);
}

int ig_kvpub_flush(struct ig_kvpub *p, int timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
		until.tv_sec++, until.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&p->mu);
	uint64_t want = p->enqueued;
	int rc = 0;
	while (p->processed < want && rc == 0)
		rc = pthread_cond_timedwait(&p->done_cond, &p->mu, &until);
	bool ok = p->processed >= want;
	pthread_mutex_unlock(&p->mu);
	return ok ? 0 : -1;
}

int ig_kvpub_subscribers(struct ig_kvpub *p)
{
	pthread_mutex_lock(&p->mu);
	int n = p->subscribers;
	pthread_mutex_unlock(&p->mu);
	return n;
}

void ig_kvpub_stats(struct ig_kvpub *p, struct ig_kvpub_stats *out)
{
	pthread_mutex_lock(&p->mu);
	*out = p->st;
	pthread_mutex_unlock(&p->mu);
}

const char *ig_kvpub_endpoint(struct ig_kvpub *p, int which)
{
	return p->ep[which ? 1 : 0];
}

static int bind_one(struct ig_kvpub *p, void *s, const char *ep, int rank, int which, char *err, size_t errlen)
{
	char where[256];
	if (ig_kvpub_offset_endpoint(ep, rank, where, sizeof(where)) < 0) {
		snprintf(err, errlen, "%s: not a tcp:// endpoint with a port or an inproc:// one (dp rank %d)", ep, rank);
		return -1;
	}
	if (zmq_bind(s, where) < 0) {
		snprintf(err, errlen, "%s: cannot bind: %s", where, zmq_strerror(errno));
		return -1;
	}
	size_t n = sizeof(p->ep[which]);
	if (zmq_getsockopt(s, ZMQ_LAST_ENDPOINT, p->ep[which], &n) < 0)
		snprintf(p->ep[which], sizeof(p->ep[which]), "%s", where);
	return 0;
}

struct ig_kvpub *ig_kvpub_new(const struct ig_kvpub_opts *o, char *err, size_t errlen)
{
	struct ig_kvpub *p = calloc(1, sizeof(*p));
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->done_cond, NULL);
	p->efd = -1;
	p->max_queue = o->max_queue ? o->max_queue : 100000;
	p->ring_cap = o->buffer_steps ? o->buffer_steps : 10000;
	p->ring = calloc(p->ring_cap, sizeof(*p->ring));
	p->topic = strdup(o->topic ? o->topic : "");
	if (!p->ring || !p->topic) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	p->topic_len = strlen(p->topic);
	p->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (p->efd < 0) {
		snprintf(err, errlen, "eventfd: %s", strerror(errno));
		goto fail;
	}
	p->ctx = o->zmq_ctx;
	if (!p->ctx) {
		p->ctx = zmq_ctx_new();
		p->own_ctx = true;
	}
	p->pub = p->ctx ? zmq_socket(p->ctx, ZMQ_XPUB) : NULL;
	if (!p->pub) {
		snprintf(err, errlen, "zmq: %s", zmq_strerror(errno));
		goto fail;
	}
	int hwm = o->hwm > 0 ? o->hwm : 100000, one = 1, linger = 500;
	zmq_setsockopt(p->pub, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(p->pub, ZMQ_XPUB_VERBOSER, &one, sizeof(one));
	/* the last batches still go out when the program ends, not forever */
	zmq_setsockopt(p->pub, ZMQ_LINGER, &linger, sizeof(linger));
	if (bind_one(p, p->pub, o->endpoint, o->dp_rank, 0, err, errlen) < 0)
		goto fail;
	if (o->replay_endpoint) {
		p->replay = zmq_socket(p->ctx, ZMQ_ROUTER);
		if (!p->replay) {
			snprintf(err, errlen, "zmq: %s", zmq_strerror(errno));
			goto fail;
		}
		zmq_setsockopt(p->replay, ZMQ_LINGER, &linger, sizeof(linger));
		if (bind_one(p, p->replay, o->replay_endpoint, o->dp_rank, 1, err, errlen) < 0)
			goto fail;
	}
	/* The thread takes no signal: the program's own (infergate-sim's
	 * signalfd, blocked in its main thread after this) must not land here
	 * and kill it. It inherits the mask in force at its creation. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int prc = pthread_create(&p->thread, NULL, run, p);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (prc != 0) {
		snprintf(err, errlen, "cannot start the publisher thread");
		goto fail;
	}
	p->started = true;
	return p;
fail:
	ig_kvpub_free(p);
	return NULL;
}

void ig_kvpub_free(struct ig_kvpub *p)
{
	if (!p)
		return;
	if (p->started) {
		ig_kvpub_flush(p, 1000);
		pthread_mutex_lock(&p->mu);
		p->stop = true;
		pthread_mutex_unlock(&p->mu);
		uint64_t one = 1;
		if (write(p->efd, &one, sizeof(one)) < 0) {
			/* full counter: the thread wakes anyway */
		}
		pthread_join(p->thread, NULL);
	}
	for (struct item *it = p->head, *next; it; it = next) {
		next = it->next;
		free(it->payload);
		free(it);
	}
	if (p->ring)
		ring_clear(p);
	free(p->ring);
	free(p->topic);
	if (p->pub)
		zmq_close(p->pub);
	if (p->replay)
		zmq_close(p->replay);
	if (p->own_ctx && p->ctx)
		zmq_ctx_term(p->ctx);
	if (p->efd >= 0)
		close(p->efd);
	pthread_cond_destroy(&p->done_cond);
	pthread_mutex_destroy(&p->mu);
	free(p);
}
