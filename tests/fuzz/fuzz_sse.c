/* libFuzzer target: infergate-bulk's Server-Sent-Events parser and body
 * rebuilder (src/bulk/stream.c). The first byte of the input chooses how the
 * rest is cut into feeds (as curl would hand it over in pieces), so the
 * parser must give the same result however the bytes are split. */
#include "config.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bulk.h"

static char *run(const uint8_t *p, size_t n, unsigned step, int *first_count)
{
	struct ig_stream s;
	const char *why = NULL;

	ig_stream_init(&s);
	*first_count = 0;
	for (size_t off = 0; off < n;) {
		size_t k = step ? step : n;
		if (k > n - off)
			k = n - off;
		int r = ig_stream_feed(&s, (const char *)p + off, k);
		if (r < 0)
			abort();
		*first_count += r;
		off += k;
	}
	json_t *b = ig_stream_body(&s, (p && n && (p[0] & 1)) ? IG_EP_COMPLETIONS : IG_EP_CHAT, &why);
	char *out;
	if (b) {
		out = json_dumps(b, JSON_COMPACT | JSON_SORT_KEYS);
		if (!out)
			abort(); /* the rebuilt body must always serialise */
		json_decref(b);
	} else {
		if (!why || !*why)
			abort();
		out = strdup(why);
	}
	ig_stream_free(&s);
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned step = data[0] % 17;
	int f1, f2;
	char *whole = run(data + 1, size - 1, 0, &f1);
	char *split = run(data + 1, size - 1, step, &f2);
	if (f1 > 1 || f2 > 1 || f1 != f2)
		abort(); /* "first token" is reported once, whatever the split */
	if (strcmp(whole, split) != 0)
		abort();
	/* "id" comes from the first chunk, but "created" etc. too: same either way */
	free(whole);
	free(split);
	return 0;
}
