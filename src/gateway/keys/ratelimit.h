/* Rate limits as token buckets: a key's requests per minute and tokens per
 * minute (keyset.h's rpm, tpm). A bucket holds up to its limit, refills
 * continuously at limit/60 per second, and is charged at admission; a
 * token charge is corrected when the answer's usage is known, so a bucket
 * may go below zero (a request that used more than its estimate) and then
 * refuses until it has refilled. OpenAI's x-ratelimit-* headers are read
 * off the buckets.
 * Not here: which key a request has (proxy.c), the keys file (keyset.c). */
#ifndef IG_RATELIMIT_H
#define IG_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ig_bucket {
	double level;       /* available now (may be negative) */
	double limit;       /* per minute; 0 = no limit */
	uint64_t t_ms;      /* when level was last brought up to date */
};

/* Sets the limit (at start, on reload, and when a gateway's share of a
 * fleet's limit changes: cluster.c; so it may be fractional): a new bucket
 * starts full; a changed limit keeps the level, cut to the new limit.
 * per_minute <= 0: no limit. Returns 0, or -1 for a per_minute that is
 * not finite (NaN, infinity): the bucket is left as it was. */
int ig_bucket_set(struct ig_bucket *b, double per_minute, uint64_t now_ms);
/* Brings the level up to date. */
void ig_bucket_refill(struct ig_bucket *b, uint64_t now_ms);
/* What the bucket holds at now_ms (as ig_bucket_refill would bring it
 * to), read without changing it. */
double ig_bucket_level(const struct ig_bucket *b, uint64_t now_ms);
/* Milliseconds until the bucket holds n (0: it does now). */
uint64_t ig_bucket_wait_ms(const struct ig_bucket *b, double n);
/* Milliseconds until the bucket is full again. */
uint64_t ig_bucket_reset_ms(const struct ig_bucket *b);
/* What it holds, rounded down, never below 0. */
long ig_bucket_remaining(const struct ig_bucket *b);
/* Gives back n (a corrected estimate), up to the limit. n < 0 charges. */
void ig_bucket_give(struct ig_bucket *b, double n);

enum ig_limit {
	IG_LIMIT_NONE,     /* admitted */
	IG_LIMIT_REQUESTS, /* the requests bucket is empty */
	IG_LIMIT_TOKENS,   /* the tokens bucket holds less than the charge */
	IG_LIMIT_TOO_BIG,  /* the charge is over the tokens limit itself: never */
};

/* Admits one request charging `tokens`: both buckets are charged, or
 * neither. A charge above `never` is refused for good (IG_LIMIT_TOO_BIG;
 * 0: the token bucket's limit); one above the bucket's limit but not
 * `never` waits for a full bucket and leaves it below zero. Refusing,
 * *retry_ms says when both would admit it. */
enum ig_limit ig_ratelimit_admit(struct ig_bucket *req, struct ig_bucket *tok, long tokens, double never,
				 uint64_t now_ms, uint64_t *retry_ms);
/* A duration as OpenAI's x-ratelimit-reset-* headers write it: "20ms",
 * "1s", "8.64s", "6m0s", "1h2m3s". */
void ig_ratelimit_duration(char *out, size_t len, uint64_t ms);

#endif
