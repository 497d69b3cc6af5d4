/* Token buckets for per-key rate limits (ratelimit.h). Continuous refill
 * (the level grows by limit/60000 per millisecond), as OpenAI describes
 * its own limits: a key at rpm 60 gets one request a second back, not 60
 * at the turn of each minute. */
#include "config.h"
#include <math.h>
#include <stdio.h>

#include "keys/ratelimit.h"

int ig_bucket_set(struct ig_bucket *b, double per_minute, uint64_t now_ms)
{
	/* NaN is not <= 0 and infinity is no limit: neither may lift one (a
	 * share computed from what Redis said, cluster.c) */
	if (!isfinite(per_minute))
		return -1;
	double limit = per_minute > 0 ? per_minute : 0;
	if (b->limit == 0 || limit == 0)
		b->level = limit;
	else
		ig_bucket_refill(b, now_ms);
	b->limit = limit;
	if (b->level > limit)
		b->level = limit;
	b->t_ms = now_ms;
	return 0;
}

void ig_bucket_refill(struct ig_bucket *b, uint64_t now_ms)
{
	if (now_ms > b->t_ms) {
		b->level += (double)(now_ms - b->t_ms) * b->limit / 60000.0;
		if (b->level > b->limit)
			b->level = b->limit;
	}
	b->t_ms = now_ms;
}

double ig_bucket_level(const struct ig_bucket *b, uint64_t now_ms)
{
	double level = b->level;
	if (now_ms > b->t_ms) {
		level += (double)(now_ms - b->t_ms) * b->limit / 60000.0;
		if (level > b->limit)
			level = b->limit;
	}
	return level;
}

uint64_t ig_bucket_wait_ms(const struct ig_bucket *b, double n)
{
	if (b->limit <= 0 || b->level >= n)
		return 0;
	return (uint64_t)ceil((n - b->level) * 60000.0 / b->limit);
}

uint64_t ig_bucket_reset_ms(const struct ig_bucket *b)
{
	return ig_bucket_wait_ms(b, b->limit);
}

long ig_bucket_remaining(const struct ig_bucket *b)
{
	return b->level > 0 ? (long)floor(b->level + 1e-9) : 0;
}

void ig_bucket_give(struct ig_bucket *b, double n)
{
	b->level += n;
	if (b->level > b->limit)
		b->level = b->limit;
}

enum ig_limit ig_ratelimit_admit(struct ig_bucket *req, struct ig_bucket *tok, long tokens, double never,
				 uint64_t now_ms, uint64_t *retry_ms)
{
	*retry_ms = 0;
	ig_bucket_refill(req, now_ms);
	ig_bucket_refill(tok, now_ms);
	if (never <= 0)
		never = tok->limit;
	if (tok->limit > 0 && (double)tokens > never)
		return IG_LIMIT_TOO_BIG;
	/* More than the bucket holds at all (a gateway's share of a larger
	 * limit): it waits for a full bucket and leaves it below zero. */
	double need = (double)tokens < tok->limit ? (double)tokens : tok->limit;
	uint64_t wr = req->limit > 0 ? ig_bucket_wait_ms(req, 1) : 0;
	uint64_t wt = tok->limit > 0 ? ig_bucket_wait_ms(tok, need) : 0;
	if (wr || wt) {
		*retry_ms = wr > wt ? wr : wt;
		return wr ? IG_LIMIT_REQUESTS : IG_LIMIT_TOKENS;
	}
	if (req->limit > 0)
		req->level -= 1;
	if (tok->limit > 0)
		tok->level -= (double)tokens;
	return IG_LIMIT_NONE;
}

void ig_ratelimit_duration(char *out, size_t len, uint64_t ms)
{
	if (ms < 1000) {
		snprintf(out, len, "%llums", (unsigned long long)ms);
		return;
	}
	uint64_t tcs = (ms + 5) / 10; /* centiseconds */
	uint64_t h = tcs / 360000, m = tcs / 6000 % 60, cs = tcs % 6000;
	char sec[24];
	if (cs % 100 == 0)
		snprintf(sec, sizeof(sec), "%llus", (unsigned long long)(cs / 100));
	else if (cs % 10 == 0)
		snprintf(sec, sizeof(sec), "%llu.%llus", (unsigned long long)(cs / 100), (unsigned long long)(cs / 10 % 10));
	else
		snprintf(sec, sizeof(sec), "%llu.%02llus", (unsigned long long)(cs / 100), (unsigned long long)(cs % 100));
	if (h)
		snprintf(out, len, "%lluh%llum%s", (unsigned long long)h, (unsigned long long)m, sec);
	else if (m)
		snprintf(out, len, "%llum%s", (unsigned long long)m, sec);
	else
		snprintf(out, len, "%s", sec);
}
