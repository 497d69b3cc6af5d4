/* The trace of infergate-bulk replay (trace.h): read and checked whole
 * before anything is sent, the window kept, and the synthetic prompts of
 * Mooncake's hash ids.
 *
 * Mooncake's format (kvcache-ai/Mooncake, FAST25-release/traces; the same
 * as aiperf's mooncake_trace): one request per line, "timestamp" (ms),
 * "input_length", "output_length", "hash_ids" (the prompt's blocks of 512
 * tokens; two requests whose lists start with the same ids share that
 * prefix). The texts behind the ids are not in the trace: each id becomes
 * the same synthetic words wherever it appears, so prefixes are shared as in
 * the trace, byte for byte. Not for sending (replay_run.c). */
#include "config.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/batchfile.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "trace.h"

#define MAX_PROBLEMS 20

static void problem(struct ig_buf *b, long *n, const char *fmt, ...) IG_PRINTF(3, 4);
static void problem(struct ig_buf *b, long *n, const char *fmt, ...)
{
	va_list ap;
	if (++*n > MAX_PROBLEMS)
		return;
	ig_buf_append(b, "  - ", 4);
	va_start(ap, fmt);
	char *s;
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(b, "%s\n", s);
	free(s);
}

/* A member that must be a whole number of at least `min`: its value, or
 * -1 with the problem said. */
static int whole(json_t *obj, const char *key, long long min, long long *out, struct ig_buf *pb, long *np,
		 long line)
{
	json_t *v = json_object_get(obj, key);
	if (!v) {
		problem(pb, np, "line %ld: no \"%s\"", line, key);
		return -1;
	}
	double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : NAN;
	if (!json_is_number(v) || d != floor(d) || d < (double)min || d > 1e15) {
		char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
		problem(pb, np, "line %ld: \"%s\" is %.40s: not a whole number of at least %lld", line, key,
			text ? text : "?", min);
		free(text);
		return -1;
	}
	*out = (long long)d;
	return 0;
}

static int push_id(struct ig_trace *t, int64_t id)
{
	int64_t *v = ig_grow(t->ids, &t->cap_ids, t->n_ids, sizeof(*v), 4096);
	if (!v)
		return -1;
	t->ids = v;
	t->ids[t->n_ids++] = id;
	return 0;
}

/* A Mooncake line into r (its ids appended to t->ids). Returns 0 or -1
 * (said). */
static int mooncake_line(struct ig_trace *t, json_t *obj, struct ig_trace_req *r, long block_tokens,
			 struct ig_buf *pb, long *np)
{
	long long in, out;
	int bad = whole(obj, "input_length", 1, &in, pb, np, r->line);
	bad |= whole(obj, "output_length", 0, &out, pb, np, r->line);
	json_t *ids = json_object_get(obj, "hash_ids");
	if (!json_is_array(ids)) {
		problem(pb, np, "line %ld: \"hash_ids\" is %s: a list of whole numbers is needed", r->line,
			ids ? "not a list" : "missing");
		return -1;
	}
	if (bad)
		return -1;
	size_t need = (size_t)((in + block_tokens - 1) / block_tokens);
	if (json_array_size(ids) != need) {
		problem(pb, np, "line %ld: %zu hash_ids for an input_length of %lld: blocks of %ld tokens need %zu "
			"(--block-tokens)", r->line, json_array_size(ids), in, block_tokens, need);
		return -1;
	}
	r->input_len = (long)in;
	r->output_len = (long)out;
	r->ids_off = t->n_ids;
	r->n_ids = need;
	size_t k;
	json_t *v;
	json_array_foreach(ids, k, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0) {
			problem(pb, np, "line %ld: hash_ids[%zu] is not a whole number of at least 0", r->line, k);
			t->n_ids = r->ids_off;
			return -1;
		}
		if (push_id(t, (int64_t)json_integer_value(v)) < 0)
			abort();
	}
	return 0;
}

static int push_req(struct ig_trace *t, const struct ig_trace_req *r)
{
	struct ig_trace_req *v = ig_grow(t->v, &t->cap, t->n, sizeof(*v), 1024);
	if (!v)
		return -1;
	t->v = v;
	t->v[t->n++] = *r;
	return 0;
}

/* The window's reuse bound: each block's tokens, and whether its id was
 * seen before in the window (an id names its whole prefix, so the blocks
 * seen before are a prefix of each request's). */
static void reuse_bound(struct ig_trace *t, long block_tokens)
{
	struct ig_idset seen;
	if (ig_idset_init(&seen, t->n_ids) < 0)
		abort();
	for (size_t i = 0; i < t->n; i++) {
		const struct ig_trace_req *r = &t->v[i];
		for (size_t b = 0; b < r->n_ids; b++) {
			long tokens = b + 1 < r->n_ids ? block_tokens : r->input_len - (long)b * block_tokens;
			int64_t id = t->ids[r->ids_off + b];
			/* the set holds hashes; an id's own bits, mixed, are one */
			int added = ig_idset_add(&seen, ig_idset_hash((const char *)&id, sizeof(id)), 0, NULL);
			if (added < 0)
				abort();
			t->blocks++;
			t->tokens += (uint64_t)tokens;
			if (added == 0) {
				t->blocks_seen++;
				t->tokens_seen += (uint64_t)tokens;
			}
		}
	}
	ig_idset_free(&seen);
}

int ig_trace_load(struct ig_trace *t, const char *path, const struct ig_trace_opts *o, struct ig_buf *pb,
		  long *np)
{
	struct ig_corpus_reader rd;
	char *err = NULL;
	int got, kind = -1;
	long kind_line = 0, stamped = 0, unstamped = 0, first_unstamped = 0, first_stamped = 0;
	int64_t prev = -1;
	long prev_line = 0;
	long start_np = *np;

	memset(t, 0, sizeof(*t));
	if (ig_corpus_open(&rd, path, &err) < 0) {
		problem(pb, np, "--input %s", err);
		free(err);
		return -1;
	}
	int64_t from = (int64_t)llround(o->start_s * 1000.0);
	int64_t to = o->duration_s > 0 ? from + (int64_t)llround(o->duration_s * 1000.0) : INT64_MAX;
	while ((got = ig_corpus_next(&rd)) > 0) {
		struct ig_trace_req r = {.line = rd.lineno, .input_len = -1, .output_len = -1,
					 .offset = rd.offset, .len = rd.len};
		json_error_t je;
		t->lines++;
		json_t *obj = json_loadb(rd.line, rd.len, JSON_REJECT_DUPLICATES, &je);
		if (!json_is_object(obj)) {
			if (obj)
				problem(pb, np, "line %ld: not a JSON object", r.line);
			else
				problem(pb, np, "line %ld: not JSON (%s at column %d)", r.line, je.text, je.column);
			json_decref(obj);
			continue;
		}
		int k = json_object_get(obj, "hash_ids") || json_object_get(obj, "input_length") ? IG_TRACE_MOONCAKE
												  : IG_TRACE_BATCH;
		if (kind < 0) {
			kind = k;
			kind_line = r.line;
		} else if (k != kind) {
			problem(pb, np, "line %ld: a %s line in a trace of %s lines (line %ld)", r.line,
				k == IG_TRACE_MOONCAKE ? "Mooncake" : "Batch",
				kind == IG_TRACE_MOONCAKE ? "Mooncake" : "Batch", kind_line);
			json_decref(obj);
			continue;
		}
		json_t *ts = json_object_get(obj, "timestamp");
		long long at = -1;
		if (ts || k == IG_TRACE_MOONCAKE) {
			if (whole(obj, "timestamp", 0, &at, pb, np, r.line) < 0) {
				json_decref(obj);
				continue;
			}
			if (!stamped++)
				first_stamped = r.line;
		} else {
			if (!unstamped++)
				first_unstamped = r.line;
			at = o->rate > 0 ? (long long)llround((double)(t->lines - 1) * 1000.0 / o->rate) : 0;
		}
		if (at < prev)
			problem(pb, np, "line %ld: timestamp %lld is before line %ld's %lld: a trace is in time order",
				r.line, at, prev_line, (long long)prev);
		prev = at;
		prev_line = r.line;
		if (k == IG_TRACE_MOONCAKE && mooncake_line(t, obj, &r, o->block_tokens, pb, np) < 0) {
			json_decref(obj);
			continue;
		}
		json_decref(obj);
		if (at < from || at >= to) {
			t->n_ids = r.n_ids ? r.ids_off : t->n_ids; /* not in the window */
			continue;
		}
		r.at_ms = at - from;
		if (push_req(t, &r) < 0)
			abort();
	}
	if (got < 0)
		problem(pb, np, "--input %s: read error: %s", path, strerror(errno));
	ig_corpus_close(&rd);
	t->kind = kind < 0 ? IG_TRACE_BATCH : (enum ig_trace_kind)kind;
	if (stamped && unstamped)
		problem(pb, np, "line %ld has no \"timestamp\" (line %ld has one): every line needs one", first_unstamped,
			first_stamped);
	else if (unstamped && o->rate <= 0)
		problem(pb, np, "line %ld: no \"timestamp\": give every line one (ms from the trace's start), or "
			"--rate N to send them N per second", first_unstamped);
	if (t->lines == 0 && got == 0)
		problem(pb, np, "--input %s has no request lines", path);
	else if (*np == start_np && t->n == 0)
		problem(pb, np, "--start %g --duration %g: no request of --input %s arrives in that window (its last "
			"at %.3f s)", o->start_s, o->duration_s, path, (double)prev / 1000.0);
	if (*np > start_np)
		return -1;
	t->last_ms = t->n ? t->v[t->n - 1].at_ms : 0;
	if (t->kind == IG_TRACE_MOONCAKE)
		reuse_bound(t, o->block_tokens);
	return 0;
}

void ig_trace_free(struct ig_trace *t)
{
	free(t->v);
	free(t->ids);
	memset(t, 0, sizeof(*t));
}

double ig_trace_reuse_bound(const struct ig_trace *t)
{
	if (t->kind != IG_TRACE_MOONCAKE || t->tokens == 0)
		return -1;
	return (double)t->tokens_seen / (double)t->tokens;
}

/* splitmix64: the words of an id come from its own stream. */
static uint64_t splitmix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void ig_trace_block_text(struct ig_buf *out, int64_t id, size_t n)
{
	uint64_t s = (uint64_t)id * 0xd1342543de82ef95ull + 0x2545f4914f6cdd1dull, x = 0;
	char tmp[1024];
	size_t k = 0, left = 0; /* letters left in the current word */
	bool space = false;     /* a space is due before the next word */
	for (size_t i = 0; i < n; i++) {
		if (left == 0 && space) {
			tmp[k++] = ' ';
			space = false;
		} else {
			if (left == 0) {
				x = splitmix(&s);
				left = 2 + x % 8; /* a word of 2..9 letters */
				x >>= 3;
			}
			tmp[k++] = (char)('a' + x % 26);
			x /= 26;
			space = --left == 0;
		}
		if (k == sizeof(tmp) || i + 1 == n) {
			if (ig_buf_append(out, tmp, k) < 0)
				abort();
			k = 0;
		}
	}
}

void ig_trace_prompt(struct ig_buf *out, const struct ig_trace *t, const struct ig_trace_req *r, long block_tokens,
		     long bytes_per_token)
{
	size_t block = (size_t)block_tokens * (size_t)bytes_per_token;
	size_t left = (size_t)r->input_len * (size_t)bytes_per_token;
	for (size_t b = 0; b < r->n_ids && left > 0; b++) {
		size_t n = left < block ? left : block;
		ig_trace_block_text(out, t->ids[r->ids_off + b], n);
		left -= n;
	}
}
