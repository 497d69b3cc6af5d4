/* infergate-bulk replay's state, shared by its files: replay.c (the order
 * of events: flags, preflight, run, summary), replay_run.c (the open loop)
 * and replay_report.c (what it measured). Private to them; the program's
 * entry is bulk.h's ig_replay_main.
 *
 * A replay is a measurement, not a corpus run: each request goes out at its
 * time whatever the answers do (open loop), is streamed so its first token is
 * timed, and is written once to the per-request file. There is no retry and
 * no resume: a retried request would measure something else. */
#ifndef IG_BULK_REPLAY_STATE_H
#define IG_BULK_REPLAY_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bulk.h"
#include "trace.h"

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

#endif
