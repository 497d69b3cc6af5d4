/* Idempotency-Key: the answers of requests that named one, by API key and
 * key value, so that a client that sends a POST again (its connection broke
 * after it sent it, it cannot know whether it ran) is not answered twice by
 * a backend. The first request runs and its answer's bytes are kept here as
 * they are relayed; a duplicate while it runs reads the same bytes from the
 * start and then follows them live; one after it ended, within
 * idempotency.ttl_s, gets them at once. A failed run (a 5xx, a stream cut,
 * a refusal by the gateway) is not kept once its readers are done: a retry
 * runs again. Kept answers are bounded in bytes (the oldest go first).
 * After Stripe's idempotent requests and the IETF draft
 * "The Idempotency-Key HTTP Header Field".
 *
 * Threads: the store and its entries are under the gateway's lock.
 * Not here: which requests take part, the tee and the replies
 * (watch_idem.c, an observer of the exchange). */
#ifndef IG_IDEM_H
#define IG_IDEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "infergate/buf.h"
#include "infergate/list.h"

#define IG_IDEM_KEY_MAX 255 /* bytes of an Idempotency-Key value */
/* The 422 of a value sent again with another route or body. */
#define IG_IDEM_CONFLICT_MESSAGE \
	"this Idempotency-Key was used with another request (another route or body); a key names one request"

struct ig_idem_entry {
	struct ig_list link;        /* the store's ended ones, by end, oldest first */
	struct ig_idem_entry *next; /* its hash chain */
	char *scope;                /* "<API key name>\n<Idempotency-Key>" */
	unsigned char digest[32];   /* SHA-256 of the route's path, a NUL and the body as sent */
	unsigned status;            /* the answer's, 0 until known */
	char *content_type;         /* its Content-Type, or NULL */
	struct ig_buf bytes;        /* its body as relayed so far */
	bool done;                  /* whole: no more bytes */
	bool failed;                /* not kept: dropped once no one reads it */
	bool dropped;               /* out of the store, freed by its last reader */
	int refs;                   /* requests that run or read it */
	uint64_t done_ms;
	struct ig_list waiting;     /* readers waiting for more bytes (watch_idem.c) */
	/* across gateways (idem_share.c's) */
	unsigned char share;        /* enum ig_idem_share */
	bool share_busy;            /* a command of its in flight */
	bool conflict;              /* another body holds the key: its answer is the 422 */
	uint64_t share_next_ms;     /* its next poll or refresh */
	char *claim;                /* what it holds in Redis while it runs here */
	struct ig_list share_link;  /* the store's `shared` */
};

/* An entry across gateways (idem_share.h): */
enum ig_idem_share {
	IG_IDEM_ALONE,  /* this gateway's only (no cluster, Redis gone, or settled) */
	IG_IDEM_ASKING, /* Redis asked whether another gateway holds its key */
	IG_IDEM_OURS,   /* it runs here, its key claimed in Redis */
	IG_IDEM_THEIRS, /* it runs at another gateway: its answer is polled for */
};

struct ig_idem {
	struct ig_list entries;     /* those that ended (a running one is in tab only) */
	struct ig_idem_entry **tab; /* chains by scope, keyed with a secret */
	size_t ntab;                /* a power of two */
	uint64_t secret;
	size_t n;
	size_t bytes;               /* of its entries (answers, scopes, overhead) */
	size_t max_bytes;
	uint64_t ttl_ms;
	struct ig_list shared;      /* entries asking, running or followed across gateways */
	/* wakes an entry's waiting readers (watch_idem.c's, set at start) */
	void (*wake)(struct ig_idem_entry *e);
};

void ig_idem_init(struct ig_idem *s, size_t max_bytes, uint64_t ttl_ms);
void ig_idem_free(struct ig_idem *s);
/* The entry of scope (NUL-terminated), or NULL. */
struct ig_idem_entry *ig_idem_find(struct ig_idem *s, const char *scope);
/* An entry in no store (a hedge's answer, for its primary should it win):
 * one reference, freed by its last. NULL: out of memory. */
struct ig_idem_entry *ig_idem_private(void);
/* A new running entry (one reference: its runner's), or NULL. */
struct ig_idem_entry *ig_idem_add(struct ig_idem *s, const char *scope, const unsigned char digest[32]);
/* More bytes of its answer. Returns 0 or -1 (out of memory: it fails). */
int ig_idem_append(struct ig_idem_entry *e, const void *p, size_t n);
/* Its run ended: kept (failed false) or not. */
void ig_idem_end(struct ig_idem *s, struct ig_idem_entry *e, bool failed, uint64_t now_ms);
/* Its run ended without an answer to keep: the answer its readers get is
 * this error (status, OpenAI-shaped body) unless it had a status already;
 * not kept, readers woken. */
void ig_idem_fail(struct ig_idem *s, struct ig_idem_entry *e, unsigned status, const char *body, uint64_t now_ms);
/* A reference let go: a dropped or failed entry goes with its last. */
void ig_idem_put(struct ig_idem *s, struct ig_idem_entry *e);
/* Drops answers older than the ttl, then the oldest while over max_bytes. */
void ig_idem_expire(struct ig_idem *s, uint64_t now_ms);

#endif
