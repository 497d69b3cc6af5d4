/* A KV-event publisher as vLLM's and SGLang's ZmqEventPublisher
 * (vllm/distributed/kv_events.py): a PUB socket sending [topic, 8-byte
 * big-endian seq, payload], each batch the next seq from 0; the last
 * buffer_steps batches kept for an optional ROUTER replay socket, which
 * answers [identity, "", 8-byte start] with [identity, "", seq, payload]
 * for every kept batch from start, then [identity, "", -1 as 8 bytes, ""].
 * Its own thread does the sockets: ig_kvpub_publish only queues (bounded;
 * a batch past the bound is dropped and counted), so the simulator's
 * engine never waits on ZMQ. Used by infergate-sim (--kv-events) and the
 * test tool tests/tools/kvpub.
 *
 * Differences from the engines, all on the publisher's side of the wire:
 * the endpoints are always bound (vLLM connects a tcp:// endpoint without
 * "*"); the PUB socket is an XPUB, which sends the same frames but also
 * hears the subscriptions, so a test can wait for its subscriber
 * (ig_kvpub_subscribers) instead of sleeping past ZMQ's slow joiner. */
#ifndef IG_KVPUB_H
#define IG_KVPUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infergate/kvwire.h"

struct ig_kvpub;

struct ig_kvpub_opts {
	const char *endpoint;        /* PUB: tcp://HOST:PORT (HOST "*": all; PORT "*": a free one), inproc://NAME */
	const char *replay_endpoint; /* ROUTER, or NULL: no replay */
	int dp_rank;                 /* both ports offset by it (ig_kvpub_offset_endpoint) */
	size_t buffer_steps;         /* batches kept for replay; 0: vLLM's 10000 */
	size_t max_queue;            /* batches waiting for the thread; 0: vLLM's 100000 */
	int hwm;                     /* PUB high-water mark; 0: vLLM's 100000 */
	const char *topic;           /* NULL: "" (vLLM's default) */
	void *zmq_ctx;               /* a context to share (inproc), or NULL: its own */
};

struct ig_kvpub_stats {
	uint64_t published;          /* batches given a seq */
	uint64_t sent;               /* of which sent on PUB (the others: held back for a test) */
	uint64_t dropped;            /* refused: the queue was full */
	uint64_t replays;            /* replay requests answered */
	uint64_t bad_requests;       /* replay requests of the wrong shape, ignored */
};

/* Binds the sockets and starts the thread. Returns it, or NULL with the
 * reason (the endpoint named) in err. */
struct ig_kvpub *ig_kvpub_new(const struct ig_kvpub_opts *o, char *err, size_t errlen);
/* Sends what is queued (a second at most, as vLLM's shutdown), stops the
 * thread, closes the sockets. */
void ig_kvpub_free(struct ig_kvpub *p);

/* Queues a payload (malloc'd; taken over, freed by the publisher in every
 * case). send false: given its seq and kept for replay but not sent on PUB
 * (a gap a test's subscriber must fill by replay). Returns 0, or -1 when
 * the queue is full (dropped, counted). */
int ig_kvpub_publish(struct ig_kvpub *p, char *payload, size_t len, bool send);
/* Encodes b as flavor f and queues it. Returns 0 or -1 (out of memory, or
 * the queue full). */
int ig_kvpub_publish_batch(struct ig_kvpub *p, enum ig_kv_flavor f, const struct ig_kv_batch *b);
/* As a restarted engine: after what is queued, the seq starts again at 0
 * and the replay buffer is emptied. */
void ig_kvpub_restart(struct ig_kvpub *p);
/* Waits until everything queued before the call went out (tests, the
 * tool). Returns 0, or -1 after timeout_ms. */
int ig_kvpub_flush(struct ig_kvpub *p, int timeout_ms);

/* Subscriptions heard on the PUB socket so far (a SUB connecting and
 * subscribing counts one; unsubscribing takes it back). */
int ig_kvpub_subscribers(struct ig_kvpub *p);
void ig_kvpub_stats(struct ig_kvpub *p, struct ig_kvpub_stats *out);
/* The endpoint actually bound (a "*" port resolved): which 0 the PUB, 1
 * the replay socket. Empty when none. */
const char *ig_kvpub_endpoint(struct ig_kvpub *p, int which);

/* vLLM's ZmqEventPublisher.offset_endpoint_port: rank 0 unchanged, inproc
 * gets "_dp<rank>", tcp its port plus rank. Returns 0, or -1 (no port, a
 * port past 65535, an unknown transport, out too small). */
int ig_kvpub_offset_endpoint(const char *endpoint, int rank, char *out, size_t n);

#endif
