/* The trace of infergate-bulk replay (trace.c): read and checked whole
 * before anything is sent, the window kept, the reuse bound counted, and
 * the synthetic prompts of Mooncake's hash ids. */
#ifndef IG_BULK_TRACE_H
#define IG_BULK_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "infergate/buf.h"

enum ig_trace_kind {
	IG_TRACE_MOONCAKE, /* {"timestamp", "input_length", "output_length", "hash_ids"} */
	IG_TRACE_BATCH,    /* an OpenAI Batch (or shorthand) line, with "timestamp" or --rate */
};

/* One request of the trace (of the replayed window). */
struct ig_trace_req {
	long line;              /* 1-based line of the input */
	int64_t at_ms;          /* arrival, ms from the window's start (trace time, before --speed) */
	long input_len;         /* Mooncake: tokens in, out; -1 for Batch lines */
	long output_len;
	size_t ids_off;         /* Mooncake: its hash ids, ids[ids_off .. ids_off + n_ids) */
	size_t n_ids;
	off_t offset;           /* Batch: where its line starts in the file, and its length */
	size_t len;
};

struct ig_trace_opts {
	double start_s;         /* the window: [start_s, start_s + duration_s) of trace time */
	double duration_s;      /* 0: to the end */
	double rate;            /* Batch lines without "timestamp": this many per second (0: refused) */
	long block_tokens;      /* tokens per hash id (Mooncake: 512) */
};

struct ig_trace {
	enum ig_trace_kind kind;
	struct ig_trace_req *v; /* the window's requests, in time order */
	size_t n, cap;
	int64_t *ids;           /* every request's hash ids, one array */
	size_t n_ids, cap_ids;
	long lines;             /* request lines in the whole file */
	int64_t last_ms;        /* the window's last arrival */
	/* the window's reuse bound: prompt tokens (blocks) in blocks seen
	 * before in the window, whatever a cache could hold */
	uint64_t tokens, tokens_seen;
	uint64_t blocks, blocks_seen;
};

/* Reads and checks the whole file: every problem is a line "line N: ..."
 * appended to problems (at most 20, the rest counted in *n_problems).
 * Returns 0 when the trace has no problem, else -1. */
int ig_trace_load(struct ig_trace *t, const char *path, const struct ig_trace_opts *o, struct ig_buf *problems,
		  long *n_problems);
void ig_trace_free(struct ig_trace *t);
/* The reuse bound as a share of prompt tokens (0..1); -1 for Batch lines. */
double ig_trace_reuse_bound(const struct ig_trace *t);

/* The synthetic text of hash id `id`: `n` bytes of lowercase words and
 * spaces, the same for the same id and n wherever it appears, and a prefix
 * of the text of a larger n. Appended to out. */
void ig_trace_block_text(struct ig_buf *out, int64_t id, size_t n);
/* A Mooncake request's prompt: its blocks' texts in order, each
 * block_tokens x bytes_per_token bytes, the whole cut to input_len tokens.
 * Appended to out. */
void ig_trace_prompt(struct ig_buf *out, const struct ig_trace *t, const struct ig_trace_req *r, long block_tokens,
		     long bytes_per_token);

#endif
