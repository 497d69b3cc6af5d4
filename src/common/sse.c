/* Server-Sent Events line splitting (include/infergate/sse.h). Only the
 * framing: what a data line means is the caller's. */
#include "config.h"
#include <string.h>

#include "infergate/sse.h"

void ig_sse_init(struct ig_sse *s)
{
	ig_buf_init(&s->line);
	s->dropped = 0;
}

void ig_sse_reset(struct ig_sse *s)
{
	ig_buf_reset(&s->line);
	s->dropped = 0;
}

void ig_sse_free(struct ig_sse *s)
{
	ig_buf_free(&s->line);
	s->dropped = 0;
}

/* A whole line of len bytes (without its LF), `dropped` more not kept: a
 * data line goes to fn. */
static void line_done(const char *line, size_t len, size_t dropped, size_t rest, ig_sse_data_fn fn, void *arg)
{
	size_t line_len = len + dropped;
	if (len < 5 || memcmp(line, "data:", 5) != 0)
		return;
	if (dropped) {
		fn(arg, NULL, 0, line_len, rest);
		return;
	}
	if (line[len - 1] == '\r')
		len--;
	line += 5;
	len -= 5;
	if (len > 0 && *line == ' ') {
		line++;
		len--;
	}
	fn(arg, line, len, line_len, rest);
}

int ig_sse_feed(struct ig_sse *s, const char *p, size_t n, ig_sse_data_fn fn, void *arg)
{
	const char *end = p + n;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t take = (size_t)((nl ? nl : end) - p);
		size_t rest = nl ? (size_t)(end - nl - 1) : 0;
		if (nl && s->line.len == 0 && s->dropped == 0 && take <= IG_SSE_MAX_LINE) {
			/* The common case: a whole line inside this feed, no copy. */
			line_done(p, take, 0, rest, fn, arg);
		} else {
			/* A line across feeds: gather it, up to the cap. */
			size_t room = IG_SSE_MAX_LINE - s->line.len;
			size_t keep = take < room ? take : room;
			if (keep && ig_buf_append(&s->line, p, keep) < 0) {
				ig_sse_reset(s);
				return -1;
			}
			s->dropped += take - keep;
			if (!nl)
				return 0;
			line_done(s->line.data, s->line.len, s->dropped, rest, fn, arg);
			ig_sse_reset(s);
		}
		p = nl + 1;
	}
	return 0;
}
