/* What the redis_* fuzz targets share: the bytes as RESP, read by
 * hiredis's own reader (redisReaderCreate/Feed/GetReply) into the reply a
 * callback of cluster.c, batches_lease.c or idem_share.c would be handed.
 * A declared array of more than FUZZ_REDIS_ELEMENTS_MAX elements is not
 * fed: hiredis 0.14's reader allocates that many pointers before it reads
 * one (a bound on it is the connection's, redis.c's, not these parsers'). */
#ifndef FUZZ_REDIS_H
#define FUZZ_REDIS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#define FUZZ_REDIS_ELEMENTS_MAX 4096

/* Whether every "*N" anywhere (a reader that lost its framing may read
 * one inside a string) declares at most the maximum. */
static inline int fuzz_redis_sane(const uint8_t *d, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (d[i] != '*')
			continue;
		unsigned long long v = 0;
		for (size_t j = i + 1; j < n && d[j] >= '0' && d[j] <= '9'; j++)
			if ((v = v * 10 + (d[j] - '0')) > FUZZ_REDIS_ELEMENTS_MAX)
				return 0;
	}
	return 1;
}

/* The first reply in d (NULL: not a whole one, or refused above). */
static inline redisReply *fuzz_redis_reply(const uint8_t *d, size_t n)
{
	if (!fuzz_redis_sane(d, n))
		return NULL;
	redisReader *rd = redisReaderCreate();
	void *out = NULL;
	if (!rd)
		return NULL;
	if (redisReaderFeed(rd, (const char *)d, n) != REDIS_OK || redisReaderGetReply(rd, &out) != REDIS_OK)
		out = NULL;
	redisReaderFree(rd);
	return out;
}

/* A message frame {"message", channel, payload} around n bytes of payload. */
static inline redisReply *fuzz_redis_message(const char *channel, const char *head, const uint8_t *d, size_t n)
{
	size_t hl = strlen(head), cl = strlen(channel), cap = n + hl + cl + 96;
	char *buf = malloc(cap);
	if (!buf)
		return NULL;
	int k = snprintf(buf, cap, "*3\r\n$7\r\nmessage\r\n$%zu\r\n%s\r\n$%zu\r\n%s", cl, channel, n + hl, head);
	memcpy(buf + k, d, n);
	memcpy(buf + k + n, "\r\n", 2);
	redisReply *r = fuzz_redis_reply((const uint8_t *)buf, (size_t)k + n + 2);
	free(buf);
	return r;
}

#endif
