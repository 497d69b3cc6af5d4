/* `infergate-bulk submit`'s state, shared by its two files: submit.c (the
 * run: upload, create, follow, download) and submit_flags.c (its flags and
 * the preflight: every local check made before the first byte is sent).
 * Private to them; the program's entry is bulk.h's ig_submit_main. */
#ifndef IG_BULK_SUBMIT_STATE_H
#define IG_BULK_SUBMIT_STATE_H

#include <curl/curl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "infergate/buf.h"
#include "bulk.h"

#define SB_MAX_METADATA 16      /* OpenAI's limits on a batch's metadata */
#define SB_MAX_KEY 64
#define SB_MAX_VALUE 512
#define SB_RATE_SAMPLES 32      /* polls the rate is measured over (about a minute at 2 s) */
#define SB_OUTAGE_S 120         /* a following that gets no answer this long gives up (exit 4) */
#define SB_IDLE_S 120           /* a transfer with no byte this long is abandoned */

/* What a step ended in; the exit code follows from it. */
enum sb_end {
	SB_DONE,                /* the step did what it should */
	SB_STOPPED,             /* a signal: stop, say how to resume */
	SB_GATEWAY,             /* the gateway said no, or did not answer */
};

struct sb_answer {
	long status;            /* HTTP status; 0: no answer */
	json_t *json;           /* the body, when it is JSON */
	char *err;              /* why it failed, for people (malloc'd) */
	int aborted;            /* a signal stopped it */
};

struct submit {
	/* the flags (ig_flags_free frees the strings) */
	char *input, *output, *errors_flag, *url_flag, *api_key_env, *batch_flag;
	struct ig_bulk_tls tls;
	int endpoint;           /* IG_EP_*, -1: from the first request line's "url" */
	json_t *metadata;       /* --metadata KEY=VALUE, an object */
	bool no_wait, cancel, force;
	long poll_s, progress_interval_s, connect_timeout_s;

	char *url;              /* normalised: no trailing slash or /v1 */
	char *errors;           /* --errors, or the main command's rule */
	const char *api_key;    /* from the environment, not owned */
	const char *ep_path;    /* the batch's endpoint, "/v1/chat/completions"... */
	struct ig_buf problems; /* the preflight's, one "  - ..." line each */
	long n_problems;

	CURL *curl;             /* one handle: its connection is kept alive */
	struct curl_slist *auth;
	struct curl_slist *json_headers;
	char errbuf[CURL_ERROR_SIZE];
	int abortable;          /* a signal aborts the transfer in progress */
	const char *upload_name;/* non-NULL while uploading: its progress is shown */
	uint64_t upload_drawn_us;
	int upload_drawn;
	int upload_full;        /* the 100% line is drawn */

	uint64_t start_us;
	char *file_id;          /* the uploaded input */
	char *batch_id;         /* created, or --batch */
	json_t *batch;          /* the last Batch object seen */
	long out_lines, err_lines;

	/* following */
	int tty;
	int drawn;              /* a live line is on the terminal */
	uint64_t last_plain_us;
	char last_status[32];
	uint64_t sample_us[SB_RATE_SAMPLES];
	long sample_done[SB_RATE_SAMPLES];
	unsigned n_samples, next_sample;
};

/* An empty submit (the flags' defaults). */
void ig_submit_init(struct submit *s);
/* Frees what s holds (its curl handle too) and zeroes it. */
void ig_submit_free(struct submit *s);
/* Returns 0 to go on, 1 to exit 0 (--help, --version), -1 on a bad flag
 * or combination (*err, malloc'd). */
int ig_submit_flags(struct submit *s, int argc, char **argv, char **err);
/* The preflight: the files and the corpus's first line checked; each
 * problem added to s->problems (s->n_problems counts them). */
void ig_submit_preflight(struct submit *s);
/* Whether v may be a batch or file id (safe in a URL path). */
int ig_submit_id_ok(const char *v);

#endif
