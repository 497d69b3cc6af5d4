/* One batch of the Batch API: its type, its states, and what the module's
 * files share. From the top down (each calls only those below it):
 *   batches_api.c    the HTTP API, on whichever reactor holds the client
 *   batches.c        the store and the tick that moves each batch on
 *   batches_lease.c  across gateways: who runs which batch (a lease and a
 *                    fencing token), what the others learn of it (cluster.c
 *                    tells it through hooks)
 *   batches_check.c  validating (slices on the I/O thread)
 *   batches_run.c    in_progress and finalizing (reactor 0's curl multi)
 *   batch.c          one batch: batch.json, its OpenAI object, its status,
 *                    its fence
 * Private to those files; the rest of the gateway sees batches.h.
 * Ownership: every field is guarded by gw->lock. A field a job on the I/O
 * thread works on (bio.h) belongs to that job until its done runs; while
 * b->jobs is not 0 the batch is not freed. The transfers (items) and the
 * input reader are reactor 0's: the API never touches them, it changes
 * the status and reactor 0's tick does the rest. */
#ifndef IG_BATCH_H
#define IG_BATCH_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "infergate/batchfile.h"
#include "infergate/list.h"

struct ig_gw;
struct ig_batch_check;

/* OpenAI's statuses, in the order a batch meets them. */
enum ig_batch_status {
	IG_BATCH_VALIDATING,    /* its input read and checked by the I/O thread */
	IG_BATCH_FAILED,        /* validation found problems (errors.data), or the results cannot be kept */
	IG_BATCH_IN_PROGRESS,   /* its lines sent through the gateway */
	IG_BATCH_FINALIZING,    /* its result files becoming Files */
	IG_BATCH_COMPLETED,     /* every line answered */
	IG_BATCH_EXPIRED,       /* its 24 h passed: what finished is kept */
	IG_BATCH_CANCELLING,    /* cancelled: reactor 0 aborts its transfers, then finalizes */
	IG_BATCH_CANCELLED,     /* the lines that finished are in its output file */
	IG_BATCH_NSTATUS,
};
extern const char *const ig_batch_status_names[IG_BATCH_NSTATUS];

static inline bool ig_batch_finished(enum ig_batch_status s)
{
	return s == IG_BATCH_FAILED || s == IG_BATCH_COMPLETED || s == IG_BATCH_EXPIRED || s == IG_BATCH_CANCELLED;
}

#define IG_BATCH_MAX_MODELS 16       /* a batch's distinct models counted for its share */
#define IG_BATCH_MAX_ERRORS 100      /* errors.data entries kept (the rest counted) */
#define IG_BATCH_EXPIRY_S 86400      /* completion_window "24h" */

struct ig_batch {
	struct ig_list link;    /* in bs->all, oldest first */
	struct ig_batches *bs;
	char id[40];            /* "batch_" + 24 hex */
	char owner[65];
	char input_file_id[40];
	char endpoint[32];
	enum ig_endpoint ep;
	json_t *metadata;       /* object or null */
	enum ig_batch_status status;
	bool expiring;          /* finalizing toward expired, not completed */
	int64_t created_at, in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,
		cancelling_at, cancelled_at;
	long total, completed, failed;
	char output_file_id[40], error_file_id[40];
	json_t *errors;         /* errors.data, while validating and after */
	long n_problems;
	char *dir;
	char paused[200];       /* why nothing is sent now ("" running) */
	int jobs;               /* on the I/O thread (bio.h): the batch stays until 0 */
	/* validating */
	struct ig_batch_check *v;       /* what the slices learnt (the job's while one runs) */
	long vslices;           /* slices done (the next goes to the batch with the fewest) */
	char *models[IG_BATCH_MAX_MODELS];
	size_t n_models;
	/* in_progress: the input, read line by line as lines are sent */
	struct ig_corpus_reader rd;
	bool rd_open;
	/* in_progress */
	struct ig_journal out, err;
	bool journals_open;
	struct ig_doneset done;
	bool done_loaded;
	bool input_done;        /* every line read */
	struct ig_corpus_line held;  /* read, waiting for a backend of its model */
	bool have_held;
	struct ig_list items;   /* in flight or waiting to be sent again */
	long inflight;          /* items (both kinds) */
	struct ig_list pending; /* struct pending */
	uint64_t next_flush_ms;
	/* across gateways (batches_lease.c). Alone, `ours` is always true. */
	bool ours;              /* this gateway runs it: it holds its lease, its fence is written */
	bool taking;            /* the lease is ours, the fence being written (a job) */
	bool releasing;         /* lost: what running left goes at the next tick with no job */
	bool reloading;         /* a copy of another's: its batch.json being read again */
	uint64_t fence;         /* the fencing token of our lease (0: none) */
	int fence_fd;           /* dir/fence while ours, else -1 */
	long pub_completed, pub_failed, pub_inflight; /* the progress last told to the others */
};

struct ig_batches {
	struct ig_gw *gw;
	char *dir;
	char secret[33];
	char mark[64];          /* "IG_BATCH_HEADER: SECRET": a batch's request header, but its owner */
	struct ig_list all;
	size_t nbatches;
	uint64_t next_sweep_ms;
	uint64_t lines_ok, lines_failed; /* written by this process */
	bool vbusy;             /* a validation slice is on the I/O thread */
	/* across gateways (batches_lease.c) */
	bool clustered;         /* the cluster section is set: batches run under leases */
	bool leasing;           /* a lease round is in flight */
	bool lease_now;         /* a round at the next tick, not in lease_s / 3 */
	uint64_t next_lease_ms, next_progress_ms;
	uint64_t takeovers, leases_lost;
};

/* The request defaults of a Batch line: none (a line names its model). */
static const struct ig_corpus_defaults ig_batch_no_defaults = {.max_tokens = -1, .endpoint = -1};

/* ---- one batch (batch.c) ---- */

/* A file of the batch's directory (malloc'd). */
char *ig_batch_path(const struct ig_batch *b, const char *name);
/* batch.json with the batch's state now, written by the I/O thread (a
 * failure is logged: the next change writes it again). */
void ig_batch_save(const struct ig_batch *b);
/* Notes a validation problem (errors.data: OpenAI's {code, message, param,
 * line}); the first IG_BATCH_MAX_ERRORS are kept. */
void ig_batch_problem(struct ig_batch *b, const char *code, long line, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* The same into list, counted in *n (problems found, kept or not): the
 * validation thread keeps its own list and count (batches_check.c). */
void ig_batch_vproblem(json_t *list, long *n, const char *code, long line, const char *param, const char *fmt,
		       va_list ap) __attribute__((format(printf, 6, 0)));
/* Counts model among the batch's (its share of the slots: batches_run.c). */
void ig_batch_note_model(struct ig_batch *b, const char *model);
/* The batch's input file on disk (malloc'd), NULL when it was deleted. */
char *ig_batch_input_path(struct ig_batches *bs, const struct ig_batch *b);

/* ---- validation (batches_check.c) ---- */

/* Hands the next validation slice to the I/O thread, if none is there. */
void ig_batch_check_next(struct ig_batches *bs);
/* Whether b's every line is read and its slice's done came back. */
bool ig_batch_check_ready(const struct ig_batch *b);
/* Ends b's validation: its models checked (it stays validating while some
 * backend's list is unknown), then failed with its problems or started. */
void ig_batch_check_finish(struct ig_batches *bs, struct ig_batch *b);
void ig_batch_check_free(struct ig_batch_check *v);

/* ---- the runner (batches_run.c) ---- */

/* b goes in_progress: its result files and input are opened on the I/O
 * thread (at once when there is none: at start). */
void ig_batch_start(struct ig_batches *bs, struct ig_batch *b);
/* Whether b's result files are open; when not, their opening (with the
 * input when `input`) is handed to the I/O thread, once. */
bool ig_batch_journals_ready(struct ig_batches *bs, struct ig_batch *b, bool input);
/* Sends what the batch's share allows, writes what came back, notices the
 * end (reactor 0). */
void ig_batch_run(struct ig_batches *bs, struct ig_batch *b, uint64_t now_ms);
/* b's transfers running (not lines waiting to be sent again). */
size_t ig_batch_running(const struct ig_batch *b);
/* Writes the result lines the disk refused before. */
void ig_batch_flush_pending(struct ig_batches *bs, struct ig_batch *b);
/* Stops every transfer of b (reactor 0: its lines are in neither file). */
void ig_batch_abort(struct ig_batches *bs, struct ig_batch *b);
/* The result files become Files of the owner (on the I/O thread), then b
 * ends (completed, cancelled or expired). A no-op while a job of b runs. */
void ig_batch_finalize(struct ig_batches *bs, struct ig_batch *b);

/* Frees what running left in b (input, result files, held and pending
 * lines), transfers aside (ig_batch_abort first). */
void ig_batch_run_clear(struct ig_batch *b);

/* ---- across gateways (batches_lease.c) ---- */

/* Renews the leases of the batches run here, tries to take those nobody
 * runs, tells the others of progress; lets go of what was lost (reactor 0,
 * each tick, when clustered). */
void ig_batch_lease_tick(struct ig_batches *bs, uint64_t now_ms);
/* At the store's opening, when clustered: files stored or deleted here are
 * announced to the others. */
void ig_batch_lease_open(struct ig_batches *bs);
/* The fence, the load and the lose below are batch.c's (one batch's record,
 * used by the runner too); the rest is batches_lease.c's. */
/* Before a journal append on the reactor: whether b's fence still holds
 * our token (then it is held shared until ig_batch_fence_unlock, so that
 * no gateway takes the batch over in between). Alone: always 0. On -1 b
 * is lost (ig_batch_lose): nothing more is written. */
int ig_batch_fence_lock(struct ig_batch *b);
void ig_batch_fence_unlock(struct ig_batch *b);
/* The token an open fence file holds (0: none yet). Returns 0 or -1. */
int ig_batch_fence_read(int fd, uint64_t *tok);
/* The same on the I/O thread, by path: fence 0 (alone, or not ours):
 * returns -2 and nothing is held; else an fd holding dir/fence shared
 * (close it after the write), or -1 when another gateway's token is
 * there (errno EPERM). */
int ig_batch_fence_check_path(const char *dir, uint64_t fence);
/* b is run here no more (its lease or its fence says another runs it):
 * nothing more is sent or written; the tick lets go of the rest. */
void ig_batch_lose(struct ig_batch *b, const char *why);
/* Whether id is a batch id ("batch_" and 24 hex digits: safe in a path):
 * the Batch API's check of a client's id, infergate:data's of another
 * gateway's, and ig_batch_load's. */
bool ig_batch_id_valid(const char *id);
/* A message of infergate:data about a batch or a file (its envelope
 * checked by cluster.c): KIND 'b' (batch.json changed), 'c' (cancel it),
 * 'f' / 'd' (a file stored / deleted): REST "ID"; 'p' (progress): "ID
 * COMPLETED FAILED IN_FLIGHT". Ids by ig_batch_id_valid and
 * ig_files_id_valid, counts from 0 to IG_BATCH_LINES_MAX. Another kind: 0,
 * nothing read (a newer gateway's). Returns 0, or -1 with *bad (redismsg.h). */
#define IG_BATCH_LINES_MAX 1000000000000LL
struct ig_redismsg_bad;
struct ig_batch_msg {
	char kind;
	char id[40];
	long completed, failed, inflight;  /* 'p' */
};
int ig_batch_lease_parse(char kind, const char *rest, size_t n, struct ig_batch_msg *m,
			 struct ig_redismsg_bad *bad);
/* The lease round's reply for n batches: n pairs of integers, the fencing
 * token held for this gateway (0: none; below 2^53) and whether a cancel
 * was asked (0 or 1). Returns 0 (tok[] and cancel[] set) or -1 with *bad. */
struct redisReply;
int ig_batch_lease_reply(const struct redisReply *r, size_t n, uint64_t *tok, bool *cancel,
			 struct ig_redismsg_bad *bad);
/* A batch this gateway does not know may have been made through another
 * one a moment ago: its batch.json is read (on the I/O thread) and done
 * (arg) called on this reactor once it is listed, or not. Returns 0, or -1
 * (alone, not an id, out of memory: done is not called). */
int ig_batch_lookup(struct ig_batches *bs, const char *id, void (*done)(void *arg), void *arg);
/* Cancels b through whichever gateway runs it (b is not run here). */
void ig_batch_cancel_remote(struct ig_batch *b);

/* ---- both halves ---- */

/* The Batch object, as OpenAI shows it (plus "infergate": what only this
 * gateway knows). */
json_t *ig_batch_json(const struct ig_batch *b);
/* batch.json's text: what a restart needs. NULL out of memory. */
char *ig_batch_text(const struct ig_batch *b);
/* Writes text as dir/batch.json: a temporary file, synced, renamed. It
 * blocks: for the I/O thread. Returns 0 or -1 (errno set; logged). */
int ig_batch_write_json(const char *dir, const char *id, const char *text);
/* A batch read back from data_dir (its batch.json), on no list; NULL when
 * it is not one. Any thread. */
struct ig_batch *ig_batch_load(struct ig_batches *bs, const char *id);
/* b (another gateway's, or before a take-over) gets what from says: its
 * status, times, counts, file ids, errors. */
void ig_batch_take_state(struct ig_batch *b, const struct ig_batch *from);
/* Adds b to bs->all in order of creation. */
void ig_batch_insert(struct ig_batches *bs, struct ig_batch *b);
/* The batch with this id, or NULL. */
struct ig_batch *ig_batch_find(struct ig_batches *bs, const char *id);
/* Every batch of bs->dir read back (*out malloc'd, *n of them, in no
 * order); those that are not batches are skipped, with a warning when
 * `warn`. Any thread. Returns 0, or -1 when the directory cannot be read
 * (errno set). */
int ig_batch_load_dir(struct ig_batches *bs, struct ig_batch ***out, size_t *n, bool warn);
/* Frees a batch ig_batch_load made that was never run here (no stage's
 * state). NULL is fine. */
void ig_batch_drop(struct ig_batch *b);
/* A new batch (status validating, on no list). NULL out of memory. */
struct ig_batch *ig_batch_new(struct ig_batches *bs, const char *id);
/* Frees a batch on no list, with no job (b->jobs 0), and what every stage
 * left in it (batches.c). NULL is fine. */
void ig_batch_free(struct ig_batch *b);
/* Removes a batch's directory and what is in it (it blocks: the I/O
 * thread). */
void ig_batch_remove_dir(const char *dir);
/* Moves b to status s (its time set), saved by the I/O thread, logged. */
void ig_batch_set_status(struct ig_batch *b, enum ig_batch_status s);

#endif
