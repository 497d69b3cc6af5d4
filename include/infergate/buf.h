/* A growable byte buffer with a read offset: the one place bytes queue up
 * between a producer (curl, a generator) and a consumer (MHD, a file). */
#ifndef IG_BUF_H
#define IG_BUF_H

#include <stddef.h>

struct ig_buf {
	char *data;
	size_t len;  /* bytes written */
	size_t off;  /* bytes already consumed, always <= len */
	size_t cap;
};

void ig_buf_init(struct ig_buf *b);
void ig_buf_free(struct ig_buf *b);
/* Appends n bytes; returns 0, or -1 when out of memory (b unchanged). */
int ig_buf_append(struct ig_buf *b, const void *p, size_t n);
/* printf-style append; returns 0 or -1. */
int ig_buf_printf(struct ig_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends v as a Prometheus label value: backslash, double quote and
 * newline escaped (the text exposition format). Returns 0 or -1. */
int ig_buf_prom_label(struct ig_buf *b, const char *v);
/* Bytes not yet consumed. */
static inline size_t ig_buf_pending(const struct ig_buf *b) { return b->len - b->off; }
/* Never NULL: an empty buffer that never allocated gives "" (NULL + 0 is
 * undefined behaviour, and callers hand this to memchr and memcpy). */
static inline const char *ig_buf_head(const struct ig_buf *b) { return b->data ? b->data + b->off : ""; }
/* Marks n pending bytes consumed; compacts when everything is consumed. */
void ig_buf_consume(struct ig_buf *b, size_t n);
void ig_buf_reset(struct ig_buf *b);

#endif
