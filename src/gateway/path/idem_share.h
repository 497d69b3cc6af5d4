/* Idempotency-Key across gateways: the first request with a key, at any
 * gateway of the cluster, runs; a duplicate through another gateway gets
 * its answer. Through cluster.c's Redis, one key per API key and value
 * (infergate:idem:<SHA-256 of both>):
 * - "R <body digest> <holder>" while it runs, set if absent (SET NX GET,
 *   Redis 7.0 or later: the claim and the look are one command) with a life
 *   of 2 minutes that its gateway renews every 30 s, so the claim of a
 *   gateway that died lapses;
 * - "D <body digest> <status> <Content-Type>\n<answer>" once it ended and is
 *   kept (idem.h's rules), for idempotency.ttl_s; a failed run lets go of
 *   its claim, so that a retry runs again.
 * A duplicate of a running answer at another gateway is polled for every
 * 100 ms and answered whole when it ended (not followed live, as at the
 * gateway that runs it); when that run failed or its gateway died (the
 * claim gone), the duplicate claims the key in turn and runs, as a retry
 * would. Nothing waits on a Redis that is gone: an entry asking when the
 * gateway comes to serve alone runs here.
 *
 * Threads: under the gateway's lock; the replies come on reactor 0.
 * Not here: the entries (idem.c), the requests (proxy.c), Redis (cluster.c). */
#ifndef IG_IDEM_SHARE_H
#define IG_IDEM_SHARE_H

#include <stddef.h>
#include <stdint.h>

struct ig_gw;
struct ig_idem_entry;
struct ig_redismsg_bad;

/* What Redis holds under a key, checked (it is another gateway's only if
 * it reads as one): 'R', the body's digest (64 hex) and the holder (a
 * gateway's name and 32 hex); or 'D', the digest, a status from 100 to 599,
 * a Content-Type of printable ASCII ('-': none) and an answer of at most
 * max_bytes. Returns 0 (body points into v) or -1 with *bad (redismsg.h). */
struct ig_idem_value {
	char kind;              /* 'R' running at another gateway, 'D' kept */
	char digest[65];
	unsigned status;        /* 'D' */
	char ctype[256];        /* 'D': "" for none */
	const char *body;       /* 'D' */
	size_t nbody;
};
int ig_idem_share_parse(const char *v, size_t n, size_t max_bytes, struct ig_idem_value *out,
			struct ig_redismsg_bad *bad);

/* A new entry (its runner's): asks Redis whether another gateway holds its
 * key (share IG_IDEM_ASKING until the reply; then OURS: it runs here;
 * THEIRS: another runs it, and its answer is waited for, or the key claimed
 * again once that one's claim is gone; ALONE with an answer: another's
 * kept answer or the conflict's 422; ALONE without: Redis failed, it runs
 * here). Returns 0
 * (asked: its readers are woken at the reply) or -1 (not in a cluster now:
 * it runs here). */
int ig_idem_share_claim(struct ig_gw *gw, struct ig_idem_entry *e);
/* Its run here ended (idem.c's ig_idem_end done): its answer shared, or
 * its claim let go. */
void ig_idem_share_end(struct ig_gw *gw, struct ig_idem_entry *e);
/* Polls the answers others run, renews the claims of those that run here.
 * Reactor 0's tick. */
void ig_idem_share_tick(struct ig_gw *gw, uint64_t now_ms);
/* Registers that tick (with a cluster: boot.c). Returns 0 or -1. */
int ig_idem_share_start(struct ig_gw *gw);

#endif
