/* infergate-bulk replay's internal interfaces: the trace (trace.c), the
 * open-loop run (replay_run.c) and what it measured (replay_report.c);
 * replay.c is the order of events (flags, preflight, run, summary).
 *
 * A replay is a measurement, not a corpus run: each request goes out at its
 * time whatever the answers do (open loop), is streamed so its first token is
 * timed, and is written once to the per-request file. There is no retry and
 * no resume: a retried request would measure something else. */
#ifndef IG_REPLAY_H
#define IG_REPLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "infergate/buf.h"
#include "bulk.h"

/* ---------------------------------------------------------------- trace */

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

/* ----------------------------------------------------------------- run */

struct replay_opts {
	char *input;
	char *output;
	char *csv;              /* default: OUTPUT minus .jsonl, plus .seconds.csv */
	char *summary_json;
	char *plot;
	char *url;              /* normalised: no trailing slash or /v1 */
	char *api_key_env;
	char *api_key;          /* the variable's value, not owned */
	struct ig_bulk_tls tls;
	char *model;
	int endpoint;           /* Mooncake lines: 0 chat, 1 completions */
	double speed;
	double start_s, duration_s;
	double rate;
	double slo_ttft_ms, slo_tpot_ms;
	double time_scale;
	long bytes_per_token;   /* --tokens-per-block-bytes */
	long block_tokens;
	long max_in_flight;
	long idle_timeout_s;
	long connect_timeout_s;
	int priority;           /* 0 high, 1 normal, 2 low, 3 none */
	long progress_interval_s;
	bool dry_run;
	int log_level;
};

/* What one request did; times in microseconds of wall clock from the run's
 * start (reported in simulated time: x time_scale). */
struct ig_replay_rec {
	uint64_t due_us;        /* when it was to go out */
	uint64_t sent_us;       /* when it went out */
	uint64_t first_us;      /* first token; 0 none */
	uint64_t end_us;        /* last byte or failure; 0 not ended */
	long status;            /* HTTP status; 0 no answer */
	long prompt_tokens, completion_tokens, cached_tokens; /* from usage; -1 unknown */
	bool ok;                /* 200 and a whole answer */
};

/* The run's state shared by the loop and the reports. */
struct ig_replay {
	const struct replay_opts *o;
	const struct ig_trace *t;
	struct ig_replay_rec *rec; /* one per trace request */
	FILE *out;              /* the per-request file */
	char *out_path;
	long sent, ended, in_flight, errors, late;
	uint64_t start_wall_us; /* the run's start (ig_now_us) */
	uint64_t end_us;        /* the last end, from the start */
	int stopping;           /* a signal: no more sends */
	char *fatal;            /* why it stopped early (write failure), malloc'd */
	volatile int *signals;
	/* the live line */
	int tty;
	uint64_t last_draw_us;
	int drawn;
	double recent_ttft[256]; /* the last TTFTs, ms reported */
	unsigned n_recent;
};

/* Sends every request of r->t at its time. Returns 0 (ran to the end or
 * stopped: r->stopping, r->fatal say which), -1 when it could not start. */
int ig_replay_run(struct ig_replay *r);

/* -------------------------------------------------------------- report */

/* A request's ms of reported time: us of wall clock x time_scale / 1000. */
static inline double ig_replay_ms(const struct ig_replay *r, uint64_t us)
{
	return (double)us * r->o->time_scale / 1000.0;
}

/* TPOT of a record in reported ms: (end - first token) / (tokens - 1), or
 * -1 when it had fewer than 2 tokens. */
double ig_replay_tpot_ms(const struct ig_replay *r, const struct ig_replay_rec *x);
bool ig_replay_slo_met(const struct ig_replay *r, const struct ig_replay_rec *x);
/* The per-request line of request i (its record filled), as JSON. */
json_t *ig_replay_line_json(const struct ig_replay *r, size_t i, const char *backend, const char *error);
/* The summary (what --summary-json holds). */
json_t *ig_replay_summary_json(const struct ig_replay *r);
/* The summary for people. */
void ig_replay_print_summary(const struct ig_replay *r, const json_t *summary, FILE *f);
/* The per-second CSV. Returns 0, or -1 with errno. */
int ig_replay_write_csv(const struct ig_replay *r, const char *path);
/* --plot: gnuplot draws the CSV into path. Returns 0, or -1 with *err. */
int ig_replay_plot(const struct ig_replay *r, const char *csv, const char *path, char **err);
/* The live progress line (stderr): drawn when due, or always with force. */
void ig_replay_progress(struct ig_replay *r, uint64_t now_us, int force);

/* `infergate-bulk replay ...`: returns the exit code. */
int ig_replay_main(int argc, char **argv);

#endif
