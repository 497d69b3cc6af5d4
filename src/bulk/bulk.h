/* infergate-bulk's internal interfaces: the options, the run's counters, and
 * one section per module (stream, scheduler, progress, report, generate;
 * corpus, idset and journal are in batchfile.h, shared with the gateway's
 * Batch API). Nothing here is used by the other programs, which is why it
 * lives next to the sources and not in include/infergate. */
#ifndef IG_BULK_H
#define IG_BULK_H

#include <curl/curl.h>
#include <jansson.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "infergate/buf.h"
#include "infergate/sse.h"
#include "infergate/batchfile.h"

/* Exit codes, documented in --help. */
enum {
	BULK_EXIT_OK = 0,        /* every selected line is in OUTPUT */
	BULK_EXIT_ERRORS = 1,    /* complete, but some lines are in the errors file */
	BULK_EXIT_USAGE = 2,     /* bad flag or preflight problem: nothing was sent */
	BULK_EXIT_STOPPED = 3,   /* stopped early (signal, full disk): rerun with --resume */
	BULK_EXIT_GATEWAY = 4,   /* submit: the gateway answered an error or could not be reached */
};

/* ---------------------------------------------------------------- options */

/* HTTPS to a gateway whose certificate a private CA signed, or that asks
 * for a client certificate: --cacert, --cert, --key (curl's names). */
struct ig_bulk_tls {
	char *cacert, *cert, *key;
};

static inline void ig_bulk_tls_setopt(CURL *e, const struct ig_bulk_tls *t)
{
	if (t->cacert && *t->cacert)
		curl_easy_setopt(e, CURLOPT_CAINFO, t->cacert);
	if (t->cert && *t->cert)
		curl_easy_setopt(e, CURLOPT_SSLCERT, t->cert);
	if (t->key && *t->key)
		curl_easy_setopt(e, CURLOPT_SSLKEY, t->key);
}

/* The three flags, for a flag table over a struct whose member `tls` they
 * fill (the preflight's first request then shows a bad CA or certificate). */
#define IG_BULK_TLS_FLAGS(T, check)                                                                           \
	{.name = "--cacert", .type = IG_FLAG_STRING, .off = offsetof(T, tls.cacert), .metavar = "FILE",        \
	 .parse = check, .help = "HTTPS: PEM CA certificates to verify the server with (default: the system's)"},  \
	{.name = "--cert", .type = IG_FLAG_STRING, .off = offsetof(T, tls.cert), .metavar = "FILE",            \
	 .parse = check, .help = "HTTPS: PEM client certificate, for a gateway that asks for one (with --key)"},    \
	{.name = "--key", .type = IG_FLAG_STRING, .off = offsetof(T, tls.key), .metavar = "FILE",              \
	 .parse = check, .help = "HTTPS: the PEM private key of --cert"}

struct bulk_opts {
	char *input;
	char *output;
	char *errors;           /* default: OUTPUT minus .jsonl, plus .errors.jsonl */
	char *url;              /* normalised: no trailing slash, no trailing /v1 */
	char *api_key_env;
	char *api_key;          /* value of that variable, not owned */
	struct ig_bulk_tls tls; /* --cacert, --cert, --key */
	char *model;
	long max_tokens;        /* -1: not set */
	double temperature;
	int have_temperature;
	int endpoint;           /* -1 auto (messages->chat, prompt->completions), or IG_EP_* */
	long concurrency;       /* 0: auto (autoconc.c) */
	long max_concurrency;   /* with auto: the most it may hold */
	double rate;            /* requests/s cap, 0 = none */
	long retries;
	long backoff_ms;        /* first retry delay, doubling up to 30 s */
	long idle_timeout_s;
	long connect_timeout_s;
	char *progress_file;
	char *summary_json;
	long shard_k, shard_n;
	bool resume;
	bool dry_run;
	bool stream;
	bool trace;             /* a W3C trace per line, its id in the result line */
	int priority;           /* 0 high, 1 normal, 2 low, 3 none (no header) */
	long progress_interval_s; /* plain progress lines when stderr is not a TTY */
	int log_level;          /* enum ig_log_level */
};

/* --------------------------------------------------------------- stream */

/* Incremental Server-Sent-Events parser that rebuilds the non-streaming
 * body (chat.completion or text_completion) from the chunks, so the output
 * file looks the same with or without --stream. */
struct ig_stream {
	struct ig_sse lines;    /* the SSE line splitter (src/common) */
	json_t *meta;           /* id, created, model, system_fingerprint of the first chunk */
	struct ig_buf *text;    /* per choice index */
	json_t **finish;        /* per choice index */
	size_t n_choices;
	json_t *usage;
	json_t *error;          /* an {"error": ...} event */
	int done;               /* saw data: [DONE] */
	int first_token;        /* saw a chunk with text */
	int bad;                /* a chunk that is not JSON */
};

void ig_stream_init(struct ig_stream *s);
void ig_stream_free(struct ig_stream *s);
/* Feeds bytes; returns 1 when this call delivered the first token, else 0;
 * -1 out of memory. */
int ig_stream_feed(struct ig_stream *s, const char *p, size_t n);
/* The rebuilt body (new reference), or NULL with *err (static text). */
json_t *ig_stream_body(struct ig_stream *s, enum ig_endpoint ep, const char **err);

/* ------------------------------------------------------------- autoconc */

/* --concurrency auto (autoconc.c says how it decides). */
enum ig_auto_state {
	IG_AUTO_FIXED,          /* --concurrency N */
	IG_AUTO_GATEWAY,        /* an infergate gateway's learned slots + headroom */
	IG_AUTO_RAMPING,        /* doubling while throughput rises */
	IG_AUTO_REFINING,       /* bisecting for the knee */
	IG_AUTO_HOLDING,        /* at the knee, probing now and then */
	IG_AUTO_PROBING,        /* one window above or below the hold */
	IG_AUTO_BACKING_OFF,    /* throughput fell or latency doubled: searching again from lower */
	IG_AUTO_DRAINING,       /* every line is sent: nothing left to decide */
	IG_AUTO_LEARNING,       /* doubling until the gateway has learned every backend's slots */
};

/* A gateway's GET /health/capacity, summed over the run's models. */
struct ig_capacity {
	long slots;             /* known, for the run's class */
	long unknown;           /* healthy backends with no known slots */
	long learning;          /* of them, those capped by a ramp until learned */
	long ramp;              /* the sum of those caps */
	long healthy;
	long inflight, queued;  /* the pools' requests on backends, in the gateway's queue */
	double rtt_s;           /* the report's round trip */
};

struct ig_auto {
	int on;                 /* 0: fixed */
	enum ig_auto_state state;
	long limit;             /* in flight allowed now */
	long max, floor;
	char why[96];           /* the state for people */
	/* the measuring window */
	uint64_t changed_at;    /* the limit's last change */
	long fresh_done;        /* completions of requests started since */
	uint64_t win_start, area_at;
	double win_area;        /* in flight x seconds */
	double win_lat;         /* seconds, summed over the window's completions */
	double win_tokens;
	long win_done;
	double starved_s;       /* seconds with in flight below 90% of the limit */
	long inflight;          /* since area_at */
	double lat_ewma_s;      /* a typical request's latency */
	long windows;           /* measuring windows judged */
	long windows_to_hold;   /* when it first held (-1: not yet) */
	long backoffs;
	/* the search */
	long best_limit, below_best;
	double best_tps;
	long lo, hi;
	double ref;
	long knee, hold;
	double hold_tps, hold_lat;
	int held, bad, probe_up;
	/* the gateway */
	long gw_slots, gw_unknown, gw_healthy; /* unknown -1: no capacity report (not a gateway) */
	long headroom;
	double transit, rtt_s;  /* smoothed */
	/* the run's figures */
	uint64_t t0, last_us;
	double limit_area;
	long min_seen, max_seen;
};

/* fixed > 0: that many, always; else auto from start, at most max. */
void ig_auto_init(struct ig_auto *a, long fixed, long start, long max, uint64_t now);
/* A request that succeeded: its output tokens and latency. */
void ig_auto_done(struct ig_auto *a, uint64_t tokens, uint64_t started_us, uint64_t latency_us);
/* A gateway capacity report for the run's models, with this run's in
 * flight when it came. */
void ig_auto_capacity(struct ig_auto *a, const struct ig_capacity *c, long our_inflight, uint64_t now);
/* Called every turn of the loop before the slots are filled; returns the
 * limit in force. sending_done: every line has been sent (the rest is
 * draining). */
long ig_auto_tick(struct ig_auto *a, uint64_t now, int sending_done);
/* After the slots are filled: the number in flight from now on. */
void ig_auto_inflight(struct ig_auto *a, uint64_t now, long in_flight);
const char *ig_auto_state_name(enum ig_auto_state s);
/* {"mode", "state", "final", "why", "min", "max", "mean"[, "gateway"]} */
json_t *ig_auto_json(const struct ig_auto *a);
/* The limit's mean over the run so far, weighted by time. */
double ig_auto_mean(const struct ig_auto *a);

/* --------------------------------------------------------------- report */

/* Log-bucketed histogram of microseconds: about 1.5% precision in 20 KB,
 * whatever the number of samples, so percentiles cost no memory per line. */
#define IG_HIST_SUB 64
#define IG_HIST_EXP 40
struct ig_report_hist {
	uint64_t bucket[IG_HIST_EXP * IG_HIST_SUB];
	uint64_t n;
	uint64_t max;
	double sum;
};

void ig_report_hist_add(struct ig_report_hist *h, uint64_t us);
/* q in [0, 1]; returns microseconds (0 when empty). */
uint64_t ig_report_hist_quantile(const struct ig_report_hist *h, double q);

struct ig_errcount {
	char code[48];
	long n;
};

/* One model of the corpus: its selected lines and what became of them
 * (counted by the preflight, then by the run). */
struct bulk_model {
	char *name;
	long total;             /* selected lines that name it */
	long resumed_ok, resumed_err; /* of them, done by earlier runs */
	long ok, failed;        /* by this run */
	long lines;             /* selected and not done: to send */
	long first_line;        /* the first of those */
};

/* What the run did; shared by the scheduler, progress and report. */
struct bulk_stats {
	long requests;          /* request lines in the input */
	long selected;          /* in this shard */
	long resumed_ok;        /* already in OUTPUT */
	long resumed_err;       /* already in the errors file */
	long to_send;           /* selected - resumed */
	long ok;                /* written to OUTPUT by this run */
	long failed;            /* written to the errors file by this run */
	long attempts;          /* HTTP requests started */
	long retries;
	long in_flight;         /* transfers in progress */
	long waiting;           /* requests waiting for a retry */
	uint64_t input_tokens;
	uint64_t output_tokens;
	uint64_t start_us;
	uint64_t end_us;
	int stopping;           /* a signal or a write failure: no new requests */
	int interrupted;        /* by a signal */
	char *fatal;            /* why the run stopped early, malloc'd */
	struct ig_report_hist *latency;
	struct ig_report_hist *ttft;
	struct ig_errcount *errs;
	size_t n_errs;
	struct bulk_model *models; /* in the order the corpus names them first */
	size_t n_models;
	struct ig_auto conc;    /* the concurrency in force and why */
};

/* The index of `name` in st->models, or -1. */
long ig_report_model_index(const struct bulk_stats *st, const char *name);
/* Per-model counts as JSON ({name: {"total", "ok", "errors", "done"}}),
 * or NULL when the corpus uses one model only (nothing to split). */
json_t *ig_report_models_json(const struct bulk_stats *st);

void ig_report_count_error(struct bulk_stats *st, const char *code);
/* Prints the summary for people (to f) and writes --summary-json when set.
 * Returns 0, or -1 when the JSON file could not be written (logged). */
int ig_report_summary(const struct bulk_opts *o, const struct bulk_stats *st, FILE *f, int exit_code);
json_t *ig_report_json(const struct bulk_opts *o, const struct bulk_stats *st, int exit_code);
/* Writes text to path through a temp file and rename(2), so a reader never
 * sees half a file. Returns 0, or -1 with errno. */
int ig_report_write_atomic(const char *path, const char *text);
/* "1h02m03s" style durations for people. */
void ig_report_duration(char *out, size_t n, double seconds);

/* ------------------------------------------------------------- progress */

#define IG_PROGRESS_WINDOW 10
struct ig_progress {
	int tty;
	const char *file;
	long interval_s;
	uint64_t last_draw_us;
	uint64_t last_file_us;
	uint64_t last_plain_us;
	/* one sample per second for the moving rate */
	uint64_t sample_us[IG_PROGRESS_WINDOW];
	long sample_done[IG_PROGRESS_WINDOW];
	uint64_t sample_tok[IG_PROGRESS_WINDOW];
	unsigned n_samples, next_sample;
	uint64_t last_sample_us;
	int drawn;              /* a live line is on the terminal */
};

void ig_progress_init(struct ig_progress *p, const char *file, long interval_s);
/* Called often; draws and writes only when due (or always with force). */
void ig_progress_tick(struct ig_progress *p, const struct bulk_stats *st, int force);
/* Final update: the live line gets its newline, the file its final state. */
void ig_progress_finish(struct ig_progress *p, const struct bulk_stats *st);
/* The figures as JSON (also what the file holds). */
json_t *ig_progress_json(struct ig_progress *p, const struct bulk_stats *st, const char *state);

/* ------------------------------------------------------------ scheduler */

/* Feeds the request lines selected by the shard and not skipped into
 * exactly `concurrency` transfers, retries, writes results. */
struct bulk_run {
	const struct bulk_opts *opts;
	struct ig_corpus_defaults defaults;
	struct ig_corpus_reader reader;
	const uint8_t *skip;    /* bit per request index: already done */
	long skip_bits;         /* bits in skip; indexes beyond are not done */
	struct ig_journal out;
	struct ig_journal err;
	struct bulk_stats *stats;
	int gateway;            /* the server is an infergate gateway (its /v1/models says so) */
	struct ig_progress *progress;
	int sigfd;              /* read end of the self-pipe the signal handler writes */
	volatile int *signals;  /* how many SIGINT/SIGTERM arrived */
};

/* Returns 0 when it ran to the end or was stopped cleanly (stats->stopping,
 * stats->fatal tell which), -1 on a setup failure (logged). */
int ig_scheduler_run(struct bulk_run *run);

/* ---------------------------------------------------------------- merge */

/* `infergate-bulk merge ...` (also `--merge`): joins shard results and
 * checks that every corpus id is present exactly once; returns the exit code. */
int ig_merge_main(int argc, char **argv);

/* --------------------------------------------------------------- submit */

/* `infergate-bulk submit ...`: a corpus handed to a gateway's Batch API
 * (upload, create, follow, download); returns the exit code. */
int ig_submit_main(int argc, char **argv);
/* `infergate-bulk replay ...` (replay.c): a trace sent open loop, each
 * request at its time, measured. Returns the exit code. */
int ig_replay_main(int argc, char **argv);

/* ------------------------------------------------------------- generate */

/* `infergate-bulk generate ...`: returns the exit code. */
int ig_generate_main(int argc, char **argv);
/* Writes the synthetic line number i (0-based) for a seed into b (no \n). */
void ig_generate_line(struct ig_buf *b, uint64_t seed, long i, enum ig_endpoint kind,
		      const char *model, long max_tokens);

#endif
