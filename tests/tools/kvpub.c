/* kvpub: a scriptable KV-event publisher for the tests, standing in for a
 * vLLM or SGLang engine (src/common/kvpub.c does the sockets, kvwire.c the
 * encoding). It reads one JSON object a line on stdin and prints one line
 * on stdout per action, after the action is done, so a test can sync on it:
 *
 *   {"bind": "tcp://127.0.0.1:*", "replay": "tcp://127.0.0.1:*",
 *    "flavor": "vllm", "topic": "", "buffer_steps": 100, "dp_rank": 0}
 *                    -> "bound PUB-ENDPOINT REPLAY-ENDPOINT" (a "*" port
 *                       resolved; "-" when no replay)
 *   {"wait_subscriber_ms": 5000}
 *                    -> "subscribers N" once a subscription has reached the
 *                       publisher, or "no subscriber" after the wait
 *   {"batch": {"ts": 1.0, "dp_rank": 0, "events": [
 *      {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": null,
 *       "token_ids": [...], "block_size": 16, "lora_id": null, "medium": "GPU"},
 *      {"type": "BlockRemoved", "block_hashes": [1]},
 *      {"type": "AllBlocksCleared"}]}, "send": true}
 *                    -> "sent SEQ" ("held SEQ" with "send": false: numbered
 *                       and kept for replay, not sent on PUB)
 *   {"skip_seq": 3}  -> "skipping 3": the next 3 batches (or raw payloads)
 *                       are held as with "send": false, a gap the
 *                       subscriber must fill by replay
 *   {"raw": "93cb..."} -> "sent SEQ": these bytes (hex) as the payload, for
 *                       malformed batches
 *   {"sleep_ms": 100} -> "slept 100"
 *   {"restart": true} -> "restarted": seq from 0, replay buffer emptied
 *   {"stats": true}   -> "stats published P sent S dropped D replays R"
 *
 * Hashes are JSON integers (negative ones are their 64-bit two's
 * complement) or strings of one ("0x..." or decimal) for values past
 * 2^63. At end of input it waits for the queue to go out and prints "bye".
 *
 * PUB/SUB's slow joiner: a SUB that connects gets nothing published before
 * its subscription reaches the publisher. kvpub sends nothing until its
 * script says so: start it, start the subscriber, send
 * {"wait_subscriber_ms": N} and wait for "subscribers 1", then publish. A
 * bad line prints "error: ..." and exits 2. */
#include "config.h"
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "infergate/kvpub.h"
#include "infergate/kvwire.h"

static struct ig_kvpub *pub;
static enum ig_kv_flavor flavor = IG_KV_VLLM;
static uint64_t next_seq;
static long skip;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("error: ");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	ig_kvpub_free(pub);
	exit(2);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static int get_u64(json_t *v, uint64_t *out)
{
	if (json_is_integer(v)) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v)) {
		char *end;
		errno = 0;
		*out = strtoull(json_string_value(v), &end, 0);
		return errno || *end || end == json_string_value(v) ? -1 : 0;
	}
	return -1;
}

static void get_hashes(json_t *a, struct ig_kv_event *e)
{
	if (!json_is_array(a))
		die("%s: block_hashes is not an array", "batch");
	e->nhashes = json_array_size(a);
	e->hashes = calloc(e->nhashes + 1, sizeof(*e->hashes));
	for (size_t i = 0; i < e->nhashes; i++)
		if (get_u64(json_array_get(a, i), &e->hashes[i]) < 0)
			die("%s: a block hash is not an integer", "batch");
}

static void get_event(json_t *o, struct ig_kv_event *e)
{
	const char *type = json_string_value(json_object_get(o, "type"));
	e->lora_id = -1;
	e->gpu = true;
	if (!type)
		die("%s: an event without \"type\"", "batch");
	const char *medium = json_string_value(json_object_get(o, "medium"));
	if (medium && strcmp(medium, "GPU") != 0)
		e->gpu = false;
	if (strcmp(type, "AllBlocksCleared") == 0) {
		e->kind = IG_KV_CLEARED;
		return;
	}
	get_hashes(json_object_get(o, "block_hashes"), e);
	if (strcmp(type, "BlockRemoved") == 0) {
		e->kind = IG_KV_REMOVED;
		return;
	}
	if (strcmp(type, "BlockStored") != 0)
		die("unknown event type %s", type);
	e->kind = IG_KV_STORED;
	json_t *parent = json_object_get(o, "parent_block_hash");
	if (parent && !json_is_null(parent)) {
		if (get_u64(parent, &e->parent) < 0)
			die("%s: parent_block_hash is not an integer", "batch");
		e->has_parent = true;
	}
	json_t *t = json_object_get(o, "token_ids");
	if (!json_is_array(t))
		die("%s: token_ids is not an array", "batch");
	e->ntokens = json_array_size(t);
	e->tokens = calloc(e->ntokens + 1, sizeof(*e->tokens));
	for (size_t i = 0; i < e->ntokens; i++)
		e->tokens[i] = (uint32_t)json_integer_value(json_array_get(t, i));
	e->block_size = (uint32_t)json_integer_value(json_object_get(o, "block_size"));
	json_t *lora = json_object_get(o, "lora_id");
	if (json_is_integer(lora))
		e->lora_id = json_integer_value(lora);
}

static void publish(char *payload, size_t len, bool send)
{
	if (skip > 0) {
		send = false;
		skip--;
	}
	if (ig_kvpub_publish(pub, payload, len, send) < 0)
		die("%s: the publisher's queue is full", "batch");
	if (ig_kvpub_flush(pub, 10000) < 0)
		die("%s: the publisher did not send within 10 s", "batch");
	printf("%s %llu\n", send ? "sent" : "held", (unsigned long long)next_seq++);
}

static void do_batch(json_t *o, bool send)
{
	struct ig_kv_batch b = {.dp_rank = -1};
	json_t *ev = json_object_get(o, "events");
	if (!json_is_object(o) || !json_is_array(ev))
		die("%s: not an object with \"events\"", "batch");
	b.ts = json_number_value(json_object_get(o, "ts"));
	json_t *rank = json_object_get(o, "dp_rank");
	if (json_is_integer(rank))
		b.dp_rank = (int32_t)json_integer_value(rank);
	b.nev = json_array_size(ev);
	b.ev = calloc(b.nev + 1, sizeof(*b.ev));
	for (size_t i = 0; i < b.nev; i++)
		get_event(json_array_get(ev, i), &b.ev[i]);
	char *buf;
	size_t len;
	if (ig_kv_encode(flavor, &b, &buf, &len) < 0)
		die("%s: out of memory", "batch");
	for (size_t i = 0; i < b.nev; i++) {
		free(b.ev[i].hashes);
		free(b.ev[i].tokens);
	}
	free(b.ev);
	publish(buf, len, send);
}

static void do_raw(const char *hex)
{
	size_t n = strlen(hex);
	if (n % 2)
		die("raw: an odd number of hex digits: %s", hex);
	char *buf = malloc(n / 2 + 1);
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			die("raw: not hex: %s", hex);
		buf[i] = (char)v;
	}
	publish(buf, n / 2, true);
}

static void do_bind(json_t *o)
{
	if (pub)
		die("%s: already bound", "bind");
	const char *fl = json_string_value(json_object_get(o, "flavor"));
	if (fl && strcmp(fl, "sglang") == 0)
		flavor = IG_KV_SGLANG;
	else if (fl && strcmp(fl, "vllm") != 0)
		die("unknown flavor %s (vllm or sglang)", fl);
	struct ig_kvpub_opts opts = {
		.endpoint = json_string_value(json_object_get(o, "bind")),
		.replay_endpoint = json_string_value(json_object_get(o, "replay")),
		.dp_rank = (int)json_integer_value(json_object_get(o, "dp_rank")),
		.buffer_steps = (size_t)json_integer_value(json_object_get(o, "buffer_steps")),
		.topic = json_string_value(json_object_get(o, "topic")),
	};
	char err[256];
	if (!opts.endpoint)
		die("%s: \"bind\" is not an endpoint", "bind");
	pub = ig_kvpub_new(&opts, err, sizeof(err));
	if (!pub)
		die("bind: %s", err);
	printf("bound %s %s\n", ig_kvpub_endpoint(pub, 0), opts.replay_endpoint ? ig_kvpub_endpoint(pub, 1) : "-");
}

int main(void)
{
	char line[1 << 16];
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		if (line[strspn(line, " \t\r\n")] == 0)
			continue;
		json_error_t je;
		json_t *o = json_loads(line, 0, &je);
		if (!json_is_object(o))
			die("not a JSON object: %s", je.text);
		json_t *v;
		if (json_object_get(o, "bind"))
			do_bind(o);
		else if ((v = json_object_get(o, "sleep_ms"))) {
			sleep_ms((long)json_integer_value(v));
			printf("slept %lld\n", (long long)json_integer_value(v));
		} else if (!pub)
			die("%s: the first action must be bind", "kvpub");
		else if ((v = json_object_get(o, "wait_subscriber_ms"))) {
			long left = (long)json_integer_value(v);
			while (ig_kvpub_subscribers(pub) < 1 && left > 0)
				sleep_ms(10), left -= 10;
			if (ig_kvpub_subscribers(pub) < 1)
				printf("no subscriber\n");
			else
				printf("subscribers %d\n", ig_kvpub_subscribers(pub));
		} else if ((v = json_object_get(o, "batch"))) {
			json_t *send = json_object_get(o, "send");
			do_batch(v, !json_is_false(send));
		} else if ((v = json_object_get(o, "raw")))
			do_raw(json_string_value(v) ? json_string_value(v) : "");
		else if ((v = json_object_get(o, "skip_seq"))) {
			skip = (long)json_integer_value(v);
			printf("skipping %ld\n", skip);
		} else if (json_object_get(o, "restart")) {
			ig_kvpub_restart(pub);
			ig_kvpub_flush(pub, 10000);
			next_seq = 0;
			printf("restarted\n");
		} else if (json_object_get(o, "stats")) {
			struct ig_kvpub_stats st;
			ig_kvpub_stats(pub, &st);
			printf("stats published %llu sent %llu dropped %llu replays %llu\n",
			       (unsigned long long)st.published, (unsigned long long)st.sent,
			       (unsigned long long)st.dropped, (unsigned long long)st.replays);
		} else
			die("%s: no action in the line", "kvpub");
		json_decref(o);
	}
	ig_kvpub_free(pub);
	printf("bye\n");
	return 0;
}
