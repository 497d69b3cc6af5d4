/* The one Server-Sent Events line splitter of the tree (the gateway's relay,
 * the bulk client's stream reader, the fuzz targets): bytes in as they
 * arrive, whole `data:` lines out. Follows the SSE standard's line rules
 * (WHATWG HTML, "Server-sent events", 9.2.5): a line ends with LF or CRLF;
 * `data:` may be followed by one space, which is not part of the data; other
 * fields and comments are skipped. A line longer than IG_SSE_MAX_LINE is not
 * buffered: it is reported without its data, so memory stays bounded. */
#ifndef IG_SSE_H
#define IG_SSE_H

#include <stdbool.h>
#include <stddef.h>

#include "infergate/buf.h"

#define IG_SSE_MAX_LINE (1024 * 1024)

struct ig_sse {
	struct ig_buf line;  /* the current line so far, across feeds (its
			      * first IG_SSE_MAX_LINE bytes) */
	size_t dropped;      /* bytes of it past IG_SSE_MAX_LINE, not kept */
};

/* One whole `data:` line. data/len: its payload (NULL, 0 for an overlong
 * line); line_len: the whole line's length without its LF (the bytes it
 * took, CR included); rest: the bytes of this feed after the line's LF
 * (so a caller holding the fed bytes can find the line). */
typedef void (*ig_sse_data_fn)(void *arg, const char *data, size_t len, size_t line_len, size_t rest);

void ig_sse_init(struct ig_sse *s);
/* Forgets a partial line (a new response begins). */
void ig_sse_reset(struct ig_sse *s);
void ig_sse_free(struct ig_sse *s);
/* Splits n more bytes into lines, calling fn for each whole data line.
 * Returns 0, or -1 when out of memory (the partial line is lost). */
int ig_sse_feed(struct ig_sse *s, const char *p, size_t n, ig_sse_data_fn fn, void *arg);

#endif
