/* Growable byte buffer. Not thread-safe: each buffer has one owner thread. */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/buf.h"

void ig_buf_init(struct ig_buf *b) { memset(b, 0, sizeof(*b)); }

void ig_buf_free(struct ig_buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

void ig_buf_reset(struct ig_buf *b) { b->len = b->off = 0; }

static int reserve(struct ig_buf *b, size_t extra)
{
	if (b->off > 0 && b->off == b->len)
		b->len = b->off = 0;
	if (b->len + extra <= b->cap)
		return 0;
	/* Reclaim consumed space before growing. */
	if (b->off > 0) {
		memmove(b->data, b->data + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->len + extra <= b->cap)
			return 0;
	}
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + extra)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p)
		return -1;
	b->data = p;
	b->cap = cap;
	return 0;
}

int ig_buf_append(struct ig_buf *b, const void *p, size_t n)
{
	if (n == 0)
		return 0;
	if (reserve(b, n) < 0)
		return -1;
	memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

int ig_buf_printf(struct ig_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || reserve(b, (size_t)n + 1) < 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

int ig_buf_prom_label(struct ig_buf *b, const char *v)
{
	int rc = 0;
	for (; *v && rc == 0; v++) {
		if (*v == '\\' || *v == '"')
			rc = ig_buf_printf(b, "\\%c", *v);
		else if (*v == '\n')
			rc = ig_buf_append(b, "\\n", 2);
		else
			rc = ig_buf_append(b, v, 1);
	}
	return rc;
}

void ig_buf_consume(struct ig_buf *b, size_t n)
{
	if (n > b->len - b->off)
		n = b->len - b->off;
	b->off += n;
	if (b->off == b->len)
		b->off = b->len = 0;
}
