/* The Batch API (batches.h). A batch's life, as OpenAI's:
 *   validating   every line of its input file read and checked, a few
 *                thousand per tick (the loop never stalls): JSON, custom_id
 *                unique ("line-N" when a line has none, as infergate-bulk
 *                names it), url equal to the batch's endpoint, a
 *                model served here (and allowed to the owner's key). Any
 *                problem: failed, with errors.data naming the lines, nothing
 *                sent.
 *   in_progress  the lines sent as requests to the gateway's own listening
 *                address, X-Infergate-Priority low (or the owner key's
 *                higher class), so a batch goes through the same scheduler,
 *                router, retries and limits as anyone and takes the slots
 *                interactive requests leave. Each answer is appended to
 *                output.jsonl (200) or errors.jsonl (anything else, or no
 *                answer after the retries) with one write(2): after a crash
 *                the journal's done-set (src/bulk/journal.c, the code
 *                infergate-bulk resumes with) says which lines are done, and
 *                the rest are sent again: each custom_id ends in exactly one
 *                file, once.
 *   finalizing   the two files become Files of the owner (ids chosen and
 *                written to batch.json first, so a crash here ends the same)
 *   completed, or cancelling -> cancelled (in-flight requests aborted; the
 *   output file holds the lines that finished), or expired (24 h).
 * A full disk pauses the batch: answers wait in memory (one per request in
 * flight at most) and nothing new is sent until they are written.
 * Requests in flight are shared between running batches: each model's
 * learned slots (plus an eighth for the queue's turn-around) split evenly
 * between the batches that use it. */
#include "config.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "infergate/batchfile.h"
#include "batches.h"
#include "files.h"
#include "gateway.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "router.h"
#include "upstream.h"

enum bstatus {
	B_VALIDATING,
	B_FAILED,
	B_IN_PROGRESS,
	B_FINALIZING,
	B_COMPLETED,
	B_EXPIRED,
	B_CANCELLING,
	B_CANCELLED,
	B_NSTATUS,
};
static const char *status_names[B_NSTATUS] = {"validating", "failed",  "in_progress", "finalizing",
					      "completed",  "expired", "cancelling",  "cancelled"};

static bool finished(enum bstatus s)
{
	return s == B_FAILED || s == B_COMPLETED || s == B_EXPIRED || s == B_CANCELLED;
}

#define MAX_MODELS 16       /* a batch's distinct models counted for its share */
#define MAX_ERRORS 100      /* errors.data entries kept (the rest counted) */
#define MAX_TRIES 8         /* answers with a retryable status (429, 5xx, none) */
#define VALIDATE_US 4000    /* validation's slice of a tick */
#define EXPIRY_S 86400      /* completion_window "24h" */

/* One line sent, waiting for its answer or its next try. */
struct item {
	struct ig_xfer x;
	struct ig_list link;    /* in its batch's items */
	struct batch *b;
	char *custom_id;
	char *body;             /* the request, JSON text */
	struct curl_slist *hdrs;
	struct ig_buf resp;
	int tries;
	uint64_t due_ms;        /* waiting to be sent again: when (0: in flight) */
	char request_id[48];
};

/* A result line that could not be written yet (full disk). */
struct pending {
	struct ig_list link;
	int file;               /* 0 output, 1 errors */
	size_t len;
	char line[];
};

struct batch {
	struct ig_list link;    /* in bs->all, oldest first */
	struct ig_batches *bs;
	char id[40];            /* "batch_" + 24 hex */
	char owner[65];
	char input_file_id[40];
	char endpoint[32];
	enum ig_endpoint ep;
	json_t *metadata;       /* object or null */
	enum bstatus status;
	bool expiring;          /* finalizing toward expired, not completed */
	int64_t created_at, in_progress_at, expires_at, finalizing_at, completed_at, failed_at, expired_at,
		cancelling_at, cancelled_at;
	long total, completed, failed;
	char output_file_id[40], error_file_id[40];
	json_t *errors;         /* errors.data, while validating and after */
	long n_problems;
	char *dir;
	char paused[200];       /* why nothing is sent now ("" running) */
	/* validating */
	struct ig_corpus_reader rd;
	bool rd_open;
	struct ig_idset ids, ambiguous;
	char *models[MAX_MODELS];
	size_t n_models;
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
	long probe_slots;       /* for a backend still learning its slots (share_of) */
	uint64_t probe_at_ms;   /* when it doubles next */
};

struct ig_batches {
	struct ig_gw *gw;
	char *dir;
	char secret[33];
	char base_url[80];      /* the gateway's own address */
	struct ig_list all;
	size_t nbatches;
	uint64_t next_sweep_ms;
	uint64_t lines_ok, lines_failed; /* written by this process */
};

/* ---------------------------------------------------------------- disk */

static char *bpath(const struct batch *b, const char *name)
{
	return ig_strdupf("%s/%s", b->dir, name);
}

static json_t *opt_time(int64_t t)
{
	return t ? json_integer((json_int_t)t) : json_null();
}

static json_t *opt_str(const char *s)
{
	return *s ? json_string(s) : json_null();
}

/* The Batch object, as OpenAI shows it (plus "infergate": what only this
 * gateway knows). */
static json_t *batch_json(const struct batch *b)
{
	json_t *errs = json_null();
	if (b->errors && json_array_size(b->errors))
		errs = json_pack("{s:s, s:O}", "object", "list", "data", b->errors);
	json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:o, s:o, s:I}", "id", b->id, "object", "batch",
			      "endpoint", b->endpoint, "errors", errs, "input_file_id", b->input_file_id,
			      "completion_window", "24h", "status", status_names[b->status], "output_file_id",
			      opt_str(b->output_file_id), "error_file_id", opt_str(b->error_file_id), "created_at",
			      (json_int_t)b->created_at);
	json_object_set_new(o, "in_progress_at", opt_time(b->in_progress_at));
	json_object_set_new(o, "expires_at", opt_time(b->expires_at));
	json_object_set_new(o, "finalizing_at", opt_time(b->finalizing_at));
	json_object_set_new(o, "completed_at", opt_time(b->completed_at));
	json_object_set_new(o, "failed_at", opt_time(b->failed_at));
	json_object_set_new(o, "expired_at", opt_time(b->expired_at));
	json_object_set_new(o, "cancelling_at", opt_time(b->cancelling_at));
	json_object_set_new(o, "cancelled_at", opt_time(b->cancelled_at));
	json_object_set_new(o, "request_counts",
			    json_pack("{s:I, s:I, s:I}", "total", (json_int_t)b->total, "completed",
				      (json_int_t)b->completed, "failed", (json_int_t)b->failed));
	json_object_set(o, "metadata", b->metadata ? b->metadata : json_null());
	json_object_set_new(o, "infergate",
			    json_pack("{s:I, s:o}", "in_flight", (json_int_t)b->inflight, "paused",
				      *b->paused ? json_string(b->paused) : json_null()));
	return o;
}

/* batch.json: what a restart needs (counts come from the result files).
 * Returns 0 or -1 (errno set; logged). */
static int save(const struct batch *b)
{
	json_t *o = batch_json(b);
	json_object_del(o, "infergate");
	json_object_del(o, "request_counts");
	json_object_set_new(o, "owner", json_string(b->owner));
	json_object_set_new(o, "total", json_integer((json_int_t)b->total));
	/* counts at the last change: the result files say more while it runs */
	json_object_set_new(o, "completed", json_integer((json_int_t)b->completed));
	json_object_set_new(o, "failed", json_integer((json_int_t)b->failed));
	if (b->expiring)
		json_object_set_new(o, "expiring", json_true());
	char *text = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	char *tmp = bpath(b, "batch.json.tmp"), *path = bpath(b, "batch.json");
	int rc = -1, e = ENOMEM, fd = text ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
	if (text && fd < 0)
		e = errno;
	if (fd >= 0) {
		rc = ig_write_all(fd, text, strlen(text)) == 0 && fsync(fd) == 0 ? 0 : -1;
		e = errno;
		close(fd);
		if (rc == 0 && (rc = rename(tmp, path)) < 0)
			e = errno;
		if (rc < 0)
			unlink(tmp);
	}
	if (rc < 0)
		ig_log_error("batch %s: cannot write %s: %s", b->id, path, strerror(e));
	free(text);
	free(tmp);
	free(path);
	errno = e;
	return rc;
}

static int64_t get_time(json_t *o, const char *k)
{
	return json_is_integer(json_object_get(o, k)) ? (int64_t)json_integer_value(json_object_get(o, k)) : 0;
}

static void get_str(json_t *o, const char *k, char *out, size_t n)
{
	const char *v = json_string_value(json_object_get(o, k));
	snprintf(out, n, "%s", v ? v : "");
}

static void batch_free(struct batch *b)
{
	if (!b)
		return;
	if (b->rd_open)
		ig_corpus_close(&b->rd);
	ig_idset_free(&b->ids);
	ig_idset_free(&b->ambiguous);
	for (size_t i = 0; i < b->n_models; i++)
		free(b->models[i]);
	if (b->journals_open) {
		ig_journal_close(&b->out);
		ig_journal_close(&b->err);
	}
	if (b->done_loaded)
		ig_journal_done_free(&b->done);
	if (b->have_held)
		ig_corpus_line_clear(&b->held);
	struct pending *p, *tmp;
	IG_LIST_FOREACH_SAFE(p, tmp, &b->pending, struct pending, link)
		free(p);
	json_decref(b->metadata);
	json_decref(b->errors);
	free(b->dir);
	free(b);
}

static struct batch *batch_new(struct ig_batches *bs, const char *id)
{
	struct batch *b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	snprintf(b->id, sizeof(b->id), "%s", id);
	b->bs = bs;
	b->dir = ig_strdupf("%s/%s", bs->dir, id);
	ig_list_init(&b->items);
	ig_list_init(&b->pending);
	ig_list_init(&b->link);
	b->errors = json_array();
	return b;
}

/* One batch read back from its batch.json; NULL when it is not one. */
static struct batch *load(struct ig_batches *bs, const char *id)
{
	struct batch *b = batch_new(bs, id);
	char *path = b ? bpath(b, "batch.json") : NULL;
	json_t *o = path ? json_load_file(path, 0, NULL) : NULL;
	free(path);
	const char *st = json_string_value(json_object_get(o, "status"));
	int s = -1;
	for (int i = 0; st && i < B_NSTATUS; i++)
		if (strcmp(st, status_names[i]) == 0)
			s = i;
	if (!b || !o || s < 0 || !json_is_string(json_object_get(o, "endpoint"))) {
		json_decref(o);
		batch_free(b);
		return NULL;
	}
	b->status = (enum bstatus)s;
	get_str(o, "owner", b->owner, sizeof(b->owner));
	get_str(o, "input_file_id", b->input_file_id, sizeof(b->input_file_id));
	get_str(o, "endpoint", b->endpoint, sizeof(b->endpoint));
	get_str(o, "output_file_id", b->output_file_id, sizeof(b->output_file_id));
	get_str(o, "error_file_id", b->error_file_id, sizeof(b->error_file_id));
	for (int i = 0; i < IG_EP_COUNT; i++)
		if (strcmp(b->endpoint, ig_corpus_endpoint_path((enum ig_endpoint)i)) == 0)
			b->ep = (enum ig_endpoint)i;
	b->created_at = get_time(o, "created_at");
	b->in_progress_at = get_time(o, "in_progress_at");
	b->expires_at = get_time(o, "expires_at");
	b->finalizing_at = get_time(o, "finalizing_at");
	b->completed_at = get_time(o, "completed_at");
	b->failed_at = get_time(o, "failed_at");
	b->expired_at = get_time(o, "expired_at");
	b->cancelling_at = get_time(o, "cancelling_at");
	b->cancelled_at = get_time(o, "cancelled_at");
	b->total = (long)get_time(o, "total");
	b->completed = (long)get_time(o, "completed");
	b->failed = (long)get_time(o, "failed");
	b->expiring = json_is_true(json_object_get(o, "expiring"));
	json_t *m = json_object_get(o, "metadata");
	b->metadata = json_is_object(m) ? json_incref(m) : json_null();
	json_t *e = json_object_get(json_object_get(o, "errors"), "data");
	if (json_is_array(e)) {
		json_decref(b->errors);
		b->errors = json_incref(e);
	}
	json_decref(o);
	return b;
}

/* Removes a batch's directory (its files are the owner's, kept apart). */
static void remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		char *p = ig_strdupf("%s/%s", dir, e->d_name);
		unlink(p);
		free(p);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* ------------------------------------------------------------ problems */

/* Notes a validation problem (errors.data: OpenAI's {code, message, param,
 * line}); the first MAX_ERRORS are kept. */
static void problem(struct batch *b, const char *code, long line, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void problem(struct batch *b, const char *code, long line, const char *param, const char *fmt, ...)
{
	if (b->n_problems++ >= MAX_ERRORS)
		return;
	va_list ap;
	char msg[400];
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *o = json_pack("{s:s, s:s, s:o, s:o}", "code", code, "message", msg, "param",
			      param ? json_string(param) : json_null(), "line",
			      line > 0 ? json_integer(line) : json_null());
	json_array_append_new(b->errors, o);
}

static void set_status(struct batch *b, enum bstatus s)
{
	int64_t now = ig_wall_s();
	b->status = s;
	switch (s) {
	case B_IN_PROGRESS: b->in_progress_at = now; break;
	case B_FINALIZING: b->finalizing_at = now; break;
	case B_COMPLETED: b->completed_at = now; break;
	case B_FAILED: b->failed_at = now; break;
	case B_EXPIRED: b->expired_at = now; break;
	case B_CANCELLING: b->cancelling_at = now; break;
	case B_CANCELLED: b->cancelled_at = now; break;
	default: break;
	}
	save(b);
	ig_log_info("batch %s: %s (%ld of %ld done, %ld failed)", b->id, status_names[s], b->completed + b->failed,
		    b->total, b->failed);
}

/* ----------------------------------------------------------- validating */

static const struct ig_corpus_defaults no_defaults = {.max_tokens = -1, .endpoint = -1};

static void fail_validation(struct ig_batches *bs, struct batch *b)
{
	(void)bs;
	if (b->n_problems > MAX_ERRORS)
		problem(b, "too_many_errors", 0, NULL, "%ld more problems not listed", b->n_problems - MAX_ERRORS);
	if (b->rd_open)
		ig_corpus_close(&b->rd);
	b->rd_open = false;
	set_status(b, B_FAILED);
}

static void note_model(struct batch *b, const char *m)
{
	for (size_t i = 0; i < b->n_models; i++)
		if (strcmp(b->models[i], m) == 0)
			return;
	if (b->n_models < MAX_MODELS)
		b->models[b->n_models++] = strdup(m);
}

/* Whether the gateway serves model (or an alias of a served one) to owner.
 * Returns 1 yes, 0 no, -1 not known yet (some backend's list is not). */
static int model_served(struct ig_gw *gw, const char *owner, const char *model)
{
	const char *served = ig_conf_alias_target(gw->cfg, model);
	const char *name = served ? served : model;
	const struct ig_model *m = ig_sched_find(&gw->sched, name);
	if (!m || m->nbackends == 0)
		return gw->sched.unknown_up > 0 ? -1 : 0;
	if (gw->api_keys.enabled) {
		const struct ig_key *k = ig_sched_key_find(&gw->sched, owner);
		if (k && k->ent && !ig_keyset_model_allowed(k->ent, name, served ? model : NULL))
			return 0;
	}
	return 1;
}

static void duplicate_found(void *ud, long lineno, const char *id, long first)
{
	problem(ud, "duplicate_custom_id", lineno, "custom_id", "Duplicate custom_id '%.200s' (first at line %ld).", id,
		first);
}

static void start_running(struct ig_batches *bs, struct batch *b);

/* The batch's input file on disk (malloc'd), NULL when it was deleted. */
static char *input_path(struct ig_batches *bs, const struct batch *b)
{
	const struct ig_file *f = ig_files_find(bs->gw->files, b->input_file_id, b->owner);
	return f ? ig_files_path(bs->gw->files, f->id) : NULL;
}

/* Opens the input file to read it from its start. Returns 0, or -1 with
 * the problem noted (deleted, unreadable). */
static int open_input(struct ig_batches *bs, struct batch *b)
{
	char *path = input_path(bs, b), *err = NULL;
	int rc = path && ig_corpus_open(&b->rd, path, &err) == 0 ? 0 : -1;
	if (rc < 0)
		problem(b, "invalid_file", 0, "input_file_id", "The input file %s cannot be read: %s.", b->input_file_id,
			!path ? "it was deleted" : err ? err : "out of memory");
	b->rd_open = rc == 0;
	free(err);
	free(path);
	return rc;
}

/* Reads lines for a slice of the tick. */
static void validate(struct ig_batches *bs, struct batch *b)
{
	struct ig_gw *gw = bs->gw;
	char *err = NULL;
	if (!b->rd_open) {
		b->n_problems = 0;
		json_array_clear(b->errors);
		ig_idset_free(&b->ids);
		ig_idset_free(&b->ambiguous);
		b->total = 0;
		if (ig_idset_init(&b->ids, 0) < 0 || ig_idset_init(&b->ambiguous, 0) < 0)
			problem(b, "server_error", 0, NULL, "out of memory");
		if (b->n_problems || open_input(bs, b) < 0) {
			fail_validation(bs, b);
			return;
		}
	}
	uint64_t until = ig_now_us() + VALIDATE_US;
	int got = 1;
	for (int n = 0; (n & 255) || ig_now_us() < until; n++) {
		if ((got = ig_corpus_next(&b->rd)) <= 0)
			break;
		struct ig_corpus_line l;
		b->total++;
		if (ig_corpus_parse(b->rd.line, b->rd.len, b->rd.lineno, &no_defaults, &l, &err) < 0) {
			problem(b, "invalid_request", b->rd.lineno, NULL, "%s", err);
			free(err);
			continue;
		}
		if (l.ep != b->ep)
			problem(b, "invalid_url", b->rd.lineno, "url",
				"The url '%s' does not match the batch's endpoint '%s'.", ig_corpus_endpoint_path(l.ep),
				b->endpoint);
		int served = model_served(gw, b->owner, l.model);
		if (served < 0) { /* the backends' lists come first: read this line again */
			ig_corpus_line_clear(&l);
			b->total--;
			if (ig_corpus_unread(&b->rd) < 0) { /* not seekable now: read the file again */
				ig_corpus_close(&b->rd);
				b->rd_open = false;
			}
			snprintf(b->paused, sizeof(b->paused), "waiting for the backends' model lists");
			return;
		}
		*b->paused = 0;
		if (!served)
			problem(b, "model_not_found", b->rd.lineno, "body.model",
				"The model '%.200s' does not exist or is not served here.", l.model);
		else
			note_model(b, l.model);
		uint64_t h = ig_idset_hash(l.custom_id, strlen(l.custom_id));
		int added = ig_idset_add(&b->ids, h, 0, NULL);
		if (added == 0)
			added = ig_idset_add(&b->ambiguous, h, 0, NULL) < 0 ? -1 : 0;
		ig_corpus_line_clear(&l);
		if (added < 0) {
			problem(b, "server_error", b->rd.lineno, NULL, "out of memory");
			break;
		}
	}
	if (got > 0 && b->n_problems < 10 * MAX_ERRORS)
		return; /* more next tick */
	if (got < 0)
		problem(b, "invalid_file", 0, "input_file_id", "The input file cannot be read: %s.", strerror(errno));
	ig_corpus_close(&b->rd);
	b->rd_open = false;
	if (b->total == 0)
		problem(b, "empty_file", 0, "input_file_id", "The input file has no request lines.");
	if (b->ambiguous.len) {
		char *path = input_path(bs, b);
		if (!path || ig_corpus_duplicates(path, &no_defaults, &b->ambiguous, duplicate_found, b, &err) < 0) {
			problem(b, "invalid_file", 0, "input_file_id", "The input file cannot be read: %s.",
				err ? err : "it was deleted");
			free(err);
		}
		free(path);
	}
	ig_idset_free(&b->ids);
	ig_idset_free(&b->ambiguous);
	if (b->n_problems) {
		fail_validation(bs, b);
		return;
	}
	start_running(bs, b);
}

/* ----------------------------------------------------------- in_progress */

/* Opens the result files and learns what earlier runs wrote. Returns 0 or
 * -1 (logged: the batch fails). */
static int open_journals(struct batch *b)
{
	char *out = bpath(b, "output.jsonl"), *errs = bpath(b, "errors.jsonl"), *err = NULL;
	int rc = -1;
	ig_journal_done_init(&b->done);
	b->done_loaded = true;
	if (ig_journal_done_load(&b->done, out, errs, &err) == 0 &&
	    ig_journal_done_cut_torn(&b->done, out, errs, &err) == 0 && ig_journal_open(&b->out, out, &err) == 0) {
		if (ig_journal_open(&b->err, errs, &err) == 0) {
			b->journals_open = true;
			rc = 0;
		} else {
			ig_journal_close(&b->out);
		}
	}
	if (rc < 0) {
		ig_log_error("batch %s: %s", b->id, err);
		problem(b, "server_error", 0, NULL, "The gateway cannot keep the results: %s.", err);
	}
	b->completed = b->done.count[0];
	b->failed = b->done.count[1];
	free(err);
	free(out);
	free(errs);
	return rc;
}

static void start_running(struct ig_batches *bs, struct batch *b)
{
	if (b->status != B_IN_PROGRESS)
		b->status = B_IN_PROGRESS, b->in_progress_at = ig_wall_s();
	if (open_journals(b) < 0 || open_input(bs, b) < 0) {
		set_status(b, B_FAILED);
		return;
	}
	b->input_done = false;
	save(b);
	ig_log_info("batch %s: in_progress, %ld lines (%ld done before)", b->id, b->total, b->completed + b->failed);
}

/* Appends a result line, or keeps it for later when the disk refuses.
 * Takes line. */
static void emit(struct ig_batches *bs, struct batch *b, int file, char *line, size_t len)
{
	bool first = ig_list_empty(&b->pending); /* else it waits behind them, in order */
	if (!line) { /* dropping it would lose the line: a restart sends it again instead */
		ig_log_error("batch %s: out of memory writing a result", b->id);
		abort();
	}
	if (first && ig_journal_append(file ? &b->err : &b->out, line, len) == 0) {
		if (file)
			b->failed++, bs->lines_failed++;
		else
			b->completed++, bs->lines_ok++;
		free(line);
		return;
	}
	int e = errno;
	struct pending *p = malloc(sizeof(*p) + len);
	if (!p) {
		ig_log_error("batch %s: out of memory keeping a result", b->id);
		abort();
	}
	p->file = file;
	p->len = len;
	memcpy(p->line, line, len);
	ig_list_append(&b->pending, &p->link);
	free(line);
	if (first) {
		ig_log_error("batch %s: cannot write its results: %s; paused until they can be", b->id, strerror(e));
		snprintf(b->paused, sizeof(b->paused),
			 "cannot write the results to data_dir: %s (paused; nothing is lost)", strerror(e));
	}
}

/* Writes what the disk refused before. */
static void flush_pending(struct ig_batches *bs, struct batch *b)
{
	struct pending *p, *tmp;
	IG_LIST_FOREACH_SAFE(p, tmp, &b->pending, struct pending, link) {
		if (ig_journal_append(p->file ? &b->err : &b->out, p->line, p->len) < 0)
			return;
		if (p->file)
			b->failed++, bs->lines_failed++;
		else
			b->completed++, bs->lines_ok++;
		ig_list_del(&p->link);
		free(p);
	}
	if (*b->paused && strncmp(b->paused, "cannot write", 12) == 0) {
		ig_log_info("batch %s: results written again, going on", b->id);
		*b->paused = 0;
	}
}

static void item_free(struct ig_batches *bs, struct item *it)
{
	ig_upstream_stop(&it->x);
	ig_upstream_easy_put(ig_gw_home(bs->gw), it->x.easy);
	curl_slist_free_all(it->hdrs);
	ig_buf_free(&it->resp);
	free(it->custom_id);
	free(it->body);
	if (ig_list_linked(&it->link)) {
		ig_list_del(&it->link);
		it->b->inflight--;
	}
	free(it);
}

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct item *it = ud;
	return ig_buf_append(&it->resp, p, size * n) == 0 ? size * n : 0;
}

static int send_item(struct ig_batches *bs, struct item *it);


static bool retryable(long status)
{
	return status == 0 || status == 408 || status == 429 || status >= 500;
}

/* The answer to one line: written, or sent again later. */
static void item_done(struct ig_xfer *x, CURLcode result)
{
	struct item *it = IG_CONTAINER_OF(x, struct item, x);
	struct batch *b = it->b;
	struct ig_batches *bs = b->bs;
	long status = 0;
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (result != CURLE_OK)
		status = 0;
	if (retryable(status) && bs->gw->stopping) { /* not written: sent again after the restart */
		item_free(bs, it);
		return;
	}
	if (retryable(status) && ++it->tries < MAX_TRIES) {
		/* 1 s, 2 s, 4 s ... 30 s: the gateway has retried other backends already */
		uint64_t wait = 1000u << (it->tries - 1 < 5 ? it->tries - 1 : 5);
		it->due_ms = ig_now_ms() + (wait > 30000 ? 30000 : wait);
		ig_upstream_easy_put(ig_gw_home(bs->gw), it->x.easy);
		it->x.easy = NULL;
		ig_buf_reset(&it->resp);
		return;
	}
	json_t *body = status ? json_loadb(ig_buf_head(&it->resp), ig_buf_pending(&it->resp), 0, NULL) : NULL;
	if (status && !body)
		body = json_stringn(ig_buf_head(&it->resp), ig_buf_pending(&it->resp));
	size_t len = 0;
	char *line;
	if (status == 200) {
		line = ig_journal_ok_line(it->custom_id, status, it->request_id, body, &len);
		emit(bs, b, 0, line, len);
	} else {
		const char *code = "request_failed", *msg = status ? "the request failed" : curl_easy_strerror(result);
		json_t *e = json_object_get(body, "error");
		if (json_is_string(json_object_get(e, "code")))
			code = json_string_value(json_object_get(e, "code"));
		if (json_is_string(json_object_get(e, "message")))
			msg = json_string_value(json_object_get(e, "message"));
		if (!status)
			code = "connection_error";
		line = ig_journal_error_line(it->custom_id, status, it->request_id, body, code, msg, &len);
		emit(bs, b, 1, line, len);
	}
	json_decref(body);
	item_free(bs, it);
}

/* Starts (again) the transfer of one line. Returns 0 or -1. */
static int send_item(struct ig_batches *bs, struct item *it)
{
	CURL *e = it->x.easy ? it->x.easy : ig_upstream_easy_get(ig_gw_home(bs->gw));
	if (!e)
		return -1;
	it->x.easy = e;
	it->x.done = item_done;
	it->due_ms = 0;
	char *url = ig_strdupf("%s%s", bs->base_url, it->b->endpoint);
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, it->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(it->body));
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, it->hdrs);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, it);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
	return ig_upstream_start(ig_gw_home(bs->gw), &it->x) == CURLM_OK ? 0 : -1;
}

/* The class a batch's requests go at: low, or its owner key's if higher. */
static const char *class_of(struct ig_batches *bs, const struct batch *b)
{
	const struct ig_key *k = ig_sched_key_find(&bs->gw->sched, b->owner);
	int c = k && k->klass >= 0 && k->klass < IG_CLASS_LOW ? k->klass : IG_CLASS_LOW;
	return ig_conf_class_name(c);
}

/* One line becomes an item and is sent. Returns 0, or -1 when the line
 * cannot be (it was valid when checked: only out of memory). */
static int start_line(struct ig_batches *bs, struct batch *b, struct ig_corpus_line *l)
{
	struct item *it = calloc(1, sizeof(*it));
	if (!it)
		return -1;
	it->b = b;
	ig_list_init(&it->link);
	ig_buf_init(&it->resp);
	/* one JSON answer per line: the output file holds bodies, not events */
	json_object_del(l->body, "stream");
	json_object_del(l->body, "stream_options");
	it->body = json_dumps(l->body, JSON_COMPACT);
	it->custom_id = l->custom_id;
	l->custom_id = NULL;
	memcpy(it->request_id, "batch_req_", 10);
	ig_random_hex(it->request_id + 10, 32);
	char *h1 = ig_strdupf("%s: %s %s", IG_BATCH_HEADER, bs->secret, b->owner);
	char *h2 = ig_strdupf("X-Infergate-Priority: %s", class_of(bs, b));
	char *h3 = ig_strdupf("X-Request-Id: %s", it->request_id);
	it->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	it->hdrs = curl_slist_append(it->hdrs, "Expect:");
	it->hdrs = curl_slist_append(it->hdrs, h1);
	it->hdrs = curl_slist_append(it->hdrs, h2);
	it->hdrs = curl_slist_append(it->hdrs, h3);
	free(h1);
	free(h2);
	free(h3);
	ig_list_append(&b->items, &it->link);
	b->inflight++;
	if (!it->body || !it->hdrs || send_item(bs, it) < 0) {
		item_free(bs, it);
		return -1;
	}
	return 0;
}

/* Requests in flight the batch may have now: per model, its pool's slots
 * for class low and an eighth more, split between the running batches that
 * use that model. A backend whose slots are not known yet is learning them
 * from its load reports, which needs it to queue a little (health.c): it
 * counts probe_slots, 4 at first and doubling every second up to 64, so
 * the first seconds do not pile hundreds of requests behind a 4-slot
 * server. One that sends no load report counts 64. */
static long share_of(struct ig_batches *bs, const struct batch *b)
{
	struct ig_gw *gw = bs->gw;
	long share = 0;
	for (size_t i = 0; i < b->n_models; i++) {
		const char *served = ig_conf_alias_target(gw->cfg, b->models[i]);
		const struct ig_model *m = ig_sched_find(&gw->sched, served ? served : b->models[i]);
		long slots = 0, users = 0;
		for (size_t j = 0; m && j < m->nbackends; j++) {
			const struct ig_backend *be = m->backends[j];
			long lim = ig_backend_routable(be) ? ig_router_limit(be, true) : -1;
			if (lim == 0) /* not known: learning it from load reports, or never */
				lim = be->reported_load >= 0 ? b->probe_slots : 64;
			slots += lim > 0 ? lim : 0; /* -1: its slots are reserved for the other classes */
		}
		struct batch *o;
		IG_LIST_FOREACH(o, &bs->all, struct batch, link) {
			if (o->status != B_IN_PROGRESS || !*o->models)
				continue;
			for (size_t k = 0; k < o->n_models; k++)
				if (strcmp(o->models[k], b->models[i]) == 0) {
					users++;
					break;
				}
		}
		slots += slots / 8 + (slots ? 4 : 0);
		share += users ? (slots + users - 1) / users : slots;
	}
	if (b->n_models == 0) /* none seen yet (a restart): one line teaches the first */
		share = 1;
	if (gw->cfg->batch_max_inflight > 0 && share > gw->cfg->batch_max_inflight)
		share = gw->cfg->batch_max_inflight;
	return share;
}

/* Whether some backend can take the line's model now. */
static bool model_up(struct ig_gw *gw, const char *model)
{
	const char *served = ig_conf_alias_target(gw->cfg, model);
	const struct ig_model *m = ig_sched_find(&gw->sched, served ? served : model);
	return m && ig_sched_healthy(m) > 0;
}

static void finalize(struct ig_batches *bs, struct batch *b);

/* The next line not done yet. Returns 1 with it in *l, or 0 at the end of
 * the input (b->input_done set). */
static int next_line(struct batch *b, struct ig_corpus_line *l)
{
	char *err = NULL;
	while (!b->input_done) {
		int got = ig_corpus_next(&b->rd);
		if (got <= 0) {
			if (got < 0)
				ig_log_error("batch %s: reading its input: %s", b->id, strerror(errno));
			b->input_done = true;
			break;
		}
		if (ig_corpus_parse(b->rd.line, b->rd.len, b->rd.lineno, &no_defaults, l, &err) < 0) {
			free(err); /* it was valid when checked: the file changed under us */
			err = NULL;
			continue;
		}
		if (!ig_journal_done_find(&b->done, l->custom_id, strlen(l->custom_id)))
			return 1;
		ig_corpus_line_clear(l);
	}
	return 0;
}

/* Sends what the batch's share allows, and notices its end. */
static void run(struct ig_batches *bs, struct batch *b, uint64_t now)
{
	struct ig_gw *gw = bs->gw;
	if (!ig_list_empty(&b->pending)) {
		if (now < b->next_flush_ms)
			return;
		b->next_flush_ms = now + 1000;
		flush_pending(bs, b);
		if (!ig_list_empty(&b->pending))
			return;
	}
	if (gw->stopping)
		return;
	struct item *it, *tmp;
	IG_LIST_FOREACH_SAFE(it, tmp, &b->items, struct item, link)
		if (it->due_ms && it->due_ms <= now && send_item(bs, it) < 0)
			item_free(bs, it);
	if (now >= b->probe_at_ms) {
		b->probe_slots = b->probe_slots ? (b->probe_slots < 32 ? 2 * b->probe_slots : 64) : 4;
		b->probe_at_ms = now + 1000;
	}
	long share = share_of(bs, b);
	while (b->inflight < share) {
		struct ig_corpus_line l;
		if (b->have_held) {
			l = b->held;
			b->have_held = false;
		} else if (next_line(b, &l) == 0) {
			break;
		}
		if (!model_up(gw, l.model)) { /* kept for when a backend is back */
			snprintf(b->paused, sizeof(b->paused), "no healthy backend serves the model '%.100s'", l.model);
			b->held = l;
			b->have_held = true;
			return;
		}
		if (*b->paused && strncmp(b->paused, "no healthy", 10) == 0)
			*b->paused = 0;
		note_model(b, l.model); /* after a restart, the models are learnt again here */
		if (start_line(bs, b, &l) < 0)
			ig_log_error("batch %s: out of memory sending line %ld", b->id, b->rd.lineno);
		ig_corpus_line_clear(&l);
	}
	if (b->input_done && !b->have_held && b->inflight == 0 && ig_list_empty(&b->pending))
		finalize(bs, b);
}

/* Stops every line in flight (their lines are in neither file). */
static void abort_items(struct ig_batches *bs, struct batch *b)
{
	struct item *it, *tmp;
	IG_LIST_FOREACH_SAFE(it, tmp, &b->items, struct item, link)
		item_free(bs, it);
}

/* ------------------------------------------------------------ finalizing */

/* The result files become Files of the owner: ids chosen and written first,
 * so a crash in between ends the same way at the next start. */
static void finalize(struct ig_batches *bs, struct batch *b)
{
	struct ig_files *fs = bs->gw->files;
	enum bstatus end = b->status == B_CANCELLING ? B_CANCELLED : b->expiring ? B_EXPIRED : B_COMPLETED;
	if (b->journals_open) {
		if (ig_journal_sync(&b->out) < 0 || ig_journal_sync(&b->err) < 0) {
			snprintf(b->paused, sizeof(b->paused), "cannot sync the results: %s", strerror(errno));
			return;
		}
		ig_journal_close(&b->out);
		ig_journal_close(&b->err);
		b->journals_open = false;
	}
	if (b->rd_open)
		ig_corpus_close(&b->rd);
	b->rd_open = false;
	if (b->status != B_FINALIZING && b->status != B_CANCELLING) {
		b->status = B_FINALIZING;
		b->finalizing_at = ig_wall_s();
	}
	if (!*b->output_file_id && b->completed > 0)
		ig_files_new_id(b->output_file_id);
	if (!*b->error_file_id && b->failed > 0)
		ig_files_new_id(b->error_file_id);
	if (save(b) < 0)
		return;
	char *out = bpath(b, "output.jsonl"), *errs = bpath(b, "errors.jsonl");
	char *on = ig_strdupf("%s_output.jsonl", b->id), *en = ig_strdupf("%s_error.jsonl", b->id);
	int rc = 0;
	if (*b->output_file_id)
		rc = ig_files_adopt(fs, out, b->output_file_id, b->owner, on, "batch_output");
	if (rc == 0 && *b->error_file_id)
		rc = ig_files_adopt(fs, errs, b->error_file_id, b->owner, en, "batch_output");
	int e = errno;
	free(out);
	free(errs);
	free(on);
	free(en);
	if (rc < 0) {
		snprintf(b->paused, sizeof(b->paused), "cannot store the result files: %s (retrying)", strerror(e));
		return;
	}
	*b->paused = 0;
	if (b->done_loaded)
		ig_journal_done_free(&b->done);
	b->done_loaded = false;
	set_status(b, end);
}

/* ------------------------------------------------------------- the store */

int ig_batches_internal(const struct ig_batches *bs, const char *value, char owner[65])
{
	if (!bs || !value || strlen(value) < 33 || value[32] != ' ' || CRYPTO_memcmp(value, bs->secret, 32) != 0)
		return 0;
	snprintf(owner, 65, "%s", value + 33);
	return 1;
}

size_t ig_batches_inflight(const struct ig_batches *bs)
{
	size_t n = 0; /* transfers running, not lines waiting to be sent again */
	const struct batch *b;
	const struct item *it;
	if (!bs)
		return 0;
	IG_LIST_FOREACH(b, &bs->all, struct batch, link)
		IG_LIST_FOREACH(it, &b->items, struct item, link)
			n += it->x.running;
	return n;
}

static int by_created(const void *a, const void *b)
{
	const struct batch *x = *(struct batch *const *)a, *y = *(struct batch *const *)b;
	return x->created_at < y->created_at ? -1 : x->created_at > y->created_at ? 1 : strcmp(x->id, y->id);
}

/* The address a batch's requests go to: the gateway's own socket (the
 * loopback address when it listens on every interface). */
static void own_address(struct ig_batches *bs)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "127.0.0.1";
	int port = bs->gw->cfg->listen_port;
	if (bs->gw->listen_fd >= 0 && getsockname(bs->gw->listen_fd, (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)&ss;
			port = ntohs(in->sin_port);
			if (in->sin_addr.s_addr != htonl(INADDR_ANY))
				inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
			port = ntohs(in6->sin6_port);
			if (memcmp(&in6->sin6_addr, &in6addr_any, sizeof(in6addr_any)) == 0)
				snprintf(host, sizeof(host), "::1");
			else
				inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
		}
	}
	if (strchr(host, ':'))
		snprintf(bs->base_url, sizeof(bs->base_url), "http://[%s]:%d", host, port);
	else
		snprintf(bs->base_url, sizeof(bs->base_url), "http://%s:%d", host, port);
}

struct ig_batches *ig_batches_open(struct ig_gw *gw, const char *dir, char **err)
{
	struct ig_batches *bs = calloc(1, sizeof(*bs));
	struct batch **v = NULL;
	size_t n = 0, cap = 0;
	if (!bs || !(bs->dir = strdup(dir))) {
		free(bs);
		*err = strdup("out of memory");
		return NULL;
	}
	bs->gw = gw;
	ig_list_init(&bs->all);
	ig_random_hex(bs->secret, 32);
	own_address(bs);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		*err = ig_strdupf("data_dir: cannot make %s: %s", dir, strerror(errno));
		goto fail;
	}
	DIR *d = opendir(dir);
	if (!d) {
		*err = ig_strdupf("data_dir: cannot read %s: %s", dir, strerror(errno));
		goto fail;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "batch_", 6) != 0)
			continue;
		struct batch *b = load(bs, e->d_name);
		if (!b) {
			ig_log_warn("data_dir: %s/%s is not a batch (no readable batch.json): left alone", dir, e->d_name);
			continue;
		}
		struct batch **nv = ig_grow(v, &cap, n, sizeof(*v), 16);
		if (!nv) {
			batch_free(b);
			break;
		}
		v = nv;
		v[n++] = b;
	}
	closedir(d);
	if (n > 1)
		qsort(v, n, sizeof(*v), by_created);
	size_t resumed = 0;
	for (size_t i = 0; i < n; i++) {
		ig_list_append(&bs->all, &v[i]->link);
		bs->nbatches++;
		if (!finished(v[i]->status))
			resumed++;
		if (v[i]->status == B_IN_PROGRESS) /* its counts, from its result files, before any request */
			start_running(bs, v[i]);
	}
	free(v);
	if (resumed)
		ig_log_info("data_dir: %zu unfinished batch(es) go on where they stopped", resumed);
	return bs;
fail:
	free(v);
	ig_batches_free(bs);
	return NULL;
}

void ig_batches_free(struct ig_batches *bs)
{
	if (!bs)
		return;
	struct batch *b, *tmp;
	IG_LIST_FOREACH_SAFE(b, tmp, &bs->all, struct batch, link) {
		abort_items(bs, b);
		ig_list_del(&b->link);
		batch_free(b);
	}
	free(bs->dir);
	free(bs);
}

/* Finished batches older than batches.retention_s go, with their result
 * files. */
static void sweep(struct ig_batches *bs)
{
	long keep = bs->gw->cfg->batch_retention_s;
	int64_t now = ig_wall_s();
	struct batch *b, *tmp;
	if (keep <= 0)
		return;
	IG_LIST_FOREACH_SAFE(b, tmp, &bs->all, struct batch, link) {
		int64_t end = b->completed_at ? b->completed_at
			      : b->failed_at  ? b->failed_at
			      : b->cancelled_at ? b->cancelled_at
						: b->expired_at;
		if (!finished(b->status) || now - end < keep)
			continue;
		if (*b->output_file_id)
			ig_files_remove(bs->gw->files, b->output_file_id);
		if (*b->error_file_id)
			ig_files_remove(bs->gw->files, b->error_file_id);
		remove_dir(b->dir);
		ig_log_info("batch %s: removed (finished %lld s ago; batches.retention_s %ld)", b->id,
			    (long long)(now - end), keep);
		ig_list_del(&b->link);
		bs->nbatches--;
		batch_free(b);
	}
}

void ig_batches_tick(struct ig_batches *bs, uint64_t now_ms)
{
	if (!bs)
		return;
	if (now_ms >= bs->next_sweep_ms) {
		bs->next_sweep_ms = now_ms + 1000;
		sweep(bs);
	}
	int64_t wall = ig_wall_s();
	struct batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct batch, link) {
		if ((b->status == B_VALIDATING || b->status == B_IN_PROGRESS) && b->expires_at && wall >= b->expires_at) {
			/* OpenAI's 24 h window: what finished is kept, the rest is not run */
			abort_items(bs, b);
			if (b->rd_open)
				ig_corpus_close(&b->rd);
			b->rd_open = false;
			b->expiring = true;
			if (b->status == B_VALIDATING)
				b->in_progress_at = 0;
			if (b->status == B_IN_PROGRESS && !b->journals_open && open_journals(b) < 0)
				continue;
			finalize(bs, b);
			continue;
		}
		switch (b->status) {
		case B_VALIDATING:
			if (!bs->gw->stopping)
				validate(bs, b);
			break;
		case B_IN_PROGRESS:
			if (!b->journals_open) {
				start_running(bs, b);
				break;
			}
			run(bs, b, now_ms);
			break;
		case B_CANCELLING:
			abort_items(bs, b);
			/* after a restart: counts from the files, unless they were
			 * already handed over (ids chosen, counts saved) */
			if (!b->journals_open && b->in_progress_at && !*b->output_file_id && !*b->error_file_id &&
			    open_journals(b) < 0)
				break;
			if (!ig_list_empty(&b->pending))
				flush_pending(bs, b);
			if (ig_list_empty(&b->pending))
				finalize(bs, b);
			break;
		case B_FINALIZING: /* after a restart: ids and counts were saved with the status */
			finalize(bs, b);
			break;
		default:
			break;
		}
	}
}

/* -------------------------------------------------------------- the API */

struct batch_call {
	struct ig_call call;
	struct ig_gw *gw;
	struct MHD_Connection *conn;
	char owner[65];
	char method[8];
	char url[200];
	struct ig_buf body;
	bool too_big;
};

static enum MHD_Result answer_json(struct batch_call *bc, unsigned status, json_t *j)
{
	struct ig_gw *gw = bc->gw;
	char *body = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!body)
		return MHD_NO;
	size_t len = strlen(body);
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Cache-Control", "no-store");
	gw->stats.responses[status / 100]++;
	ig_accesslog_local(&gw->alog, bc->conn, bc->method, bc->url, status, len);
	enum MHD_Result ret = MHD_queue_response(bc->conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result answer_error(struct batch_call *bc, unsigned status, const char *param, const char *code,
				    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result answer_error(struct batch_call *bc, unsigned status, const char *param, const char *code,
				    const char *fmt, ...)
{
	struct ig_gw *gw = bc->gw;
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	gw->stats.responses[status / 100]++;
	ig_accesslog_local(&gw->alog, bc->conn, bc->method, bc->url, status, 0);
	return ig_httpd_error(bc->conn, status, msg, param, code, NULL, false);
}

/* 405 with the methods the path takes. */
static enum MHD_Result wrong_method(struct batch_call *bc, const char *allow)
{
	char msg[64];
	snprintf(msg, sizeof(msg), "this endpoint takes %s", allow);
	bc->gw->stats.responses[4]++;
	ig_accesslog_local(&bc->gw->alog, bc->conn, bc->method, bc->url, 405, 0);
	return ig_httpd_error_allow(bc->conn, 405, msg, NULL, "method_not_allowed", NULL, allow, false);
}

static struct batch *find(struct ig_batches *bs, const char *id, const char *owner)
{
	struct batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct batch, link)
		if (strcmp(b->id, id) == 0)
			return strcmp(b->owner, owner) == 0 ? b : NULL;
	return NULL;
}

/* metadata: OpenAI's limits (16 pairs, keys up to 64 characters, values up
 * to 512, strings). Returns NULL when it is fine, else the problem. */
static const char *bad_metadata(json_t *m)
{
	if (!m || json_is_null(m))
		return NULL;
	if (!json_is_object(m))
		return "Invalid type for 'metadata': expected an object.";
	if (json_object_size(m) > 16)
		return "Invalid 'metadata': at most 16 keys.";
	const char *k;
	json_t *v;
	json_object_foreach(m, k, v) {
		if (strlen(k) > 64)
			return "Invalid 'metadata': keys are at most 64 characters.";
		if (!json_is_string(v) || json_string_length(v) > 512)
			return "Invalid 'metadata': values are strings of at most 512 characters.";
	}
	return NULL;
}

/* What is wrong with a create request: 0, or the status with *param,
 * *code and msg set (OpenAI's messages). */
static unsigned check_create(struct batch_call *bc, json_t *req, const struct ig_file **f, int *epi,
			     const char **param, const char **code, char *msg, size_t n)
{
	const char *fid = json_string_value(json_object_get(req, "input_file_id"));
	const char *ep = json_string_value(json_object_get(req, "endpoint"));
	const char *win = json_string_value(json_object_get(req, "completion_window"));
	const char *why = bad_metadata(json_object_get(req, "metadata"));
	const char *missing = !fid ? "input_file_id" : !ep ? "endpoint" : !win ? "completion_window" : NULL;
	*epi = -1;
	for (int i = 0; ep && i < IG_EP_COUNT; i++)
		if (strcmp(ep, ig_corpus_endpoint_path((enum ig_endpoint)i)) == 0)
			*epi = i;
	*f = fid ? ig_files_find(bc->gw->files, fid, bc->owner) : NULL;
	*code = "invalid_value";
	if (missing) {
		*param = missing;
		*code = "missing_required_parameter";
		snprintf(msg, n, "Missing required parameter: '%s'.", missing);
	} else if (*epi < 0) {
		*param = "endpoint";
		snprintf(msg, n, "Invalid value for 'endpoint': '%.100s' (this gateway runs batches of "
			 "/v1/chat/completions, /v1/completions and /v1/embeddings).", ep);
	} else if (strcmp(win, "24h") != 0) {
		*param = "completion_window";
		snprintf(msg, n, "Invalid value for 'completion_window': '%.40s' (only '24h').", win);
	} else if (why) {
		*param = "metadata";
		snprintf(msg, n, "%s", why);
	} else if (!*f) {
		*param = "input_file_id";
		*code = NULL;
		snprintf(msg, n, "No such File object: %.80s", fid);
		return 404;
	} else if (strcmp((*f)->purpose, "batch") != 0) {
		*param = "input_file_id";
		snprintf(msg, n, "The file %s has purpose '%s'; a batch's input has purpose 'batch'.", (*f)->id,
			 (*f)->purpose);
	} else {
		return 0;
	}
	return 400;
}

static enum MHD_Result create(struct batch_call *bc)
{
	struct ig_gw *gw = bc->gw;
	struct ig_batches *bs = gw->batches;
	json_error_t je;
	json_t *req = json_loadb(ig_buf_head(&bc->body), ig_buf_pending(&bc->body), 0, &je);
	if (!json_is_object(req)) {
		json_decref(req);
		return answer_error(bc, 400, NULL, "invalid_json", "The body is not a JSON object: %s.",
				    req ? "another JSON value" : je.text);
	}
	const struct ig_file *f;
	const char *param = NULL, *code = NULL, *ep = json_string_value(json_object_get(req, "endpoint"));
	json_t *meta = json_object_get(req, "metadata");
	char msg[300];
	int epi;
	unsigned st = check_create(bc, req, &f, &epi, &param, &code, msg, sizeof(msg));
	if (st) {
		json_decref(req);
		return answer_error(bc, st, param, code, "%s", msg);
	}
	char id[40] = "batch_";
	ig_random_hex(id + 6, 24);
	struct batch *b = batch_new(bs, id);
	if (!b) {
		json_decref(req);
		return answer_error(bc, 500, NULL, "server_error", "out of memory");
	}
	snprintf(b->owner, sizeof(b->owner), "%s", bc->owner);
	snprintf(b->input_file_id, sizeof(b->input_file_id), "%s", f->id);
	snprintf(b->endpoint, sizeof(b->endpoint), "%s", ep);
	b->ep = (enum ig_endpoint)epi;
	b->metadata = json_is_object(meta) ? json_incref(meta) : json_null();
	b->created_at = ig_wall_s();
	b->expires_at = b->created_at + EXPIRY_S;
	json_decref(req);
	if (mkdir(b->dir, 0700) < 0 || save(b) < 0) {
		int e = errno;
		remove_dir(b->dir);
		batch_free(b);
		return answer_error(bc, e == ENOSPC ? 507 : 500, NULL, "storage_error",
				    e == ENOSPC ? "the gateway's data_dir is full" : "the gateway cannot write its data_dir");
	}
	ig_list_append(&bs->all, &b->link);
	bs->nbatches++;
	ig_log_info("batch %s: validating %s (%s) for %s", b->id, b->input_file_id, b->endpoint,
		    *b->owner ? "its key" : "anyone");
	return answer_json(bc, 200, batch_json(b));
}

/* GET /v1/batches: newest first, OpenAI's after/limit (1..100, 20). */
static enum MHD_Result list(struct batch_call *bc)
{
	struct ig_batches *bs = bc->gw->batches;
	const char *after = MHD_lookup_connection_value(bc->conn, MHD_GET_ARGUMENT_KIND, "after");
	const char *lim = MHD_lookup_connection_value(bc->conn, MHD_GET_ARGUMENT_KIND, "limit");
	long limit = 20;
	char *err = NULL;
	if (lim && ig_parse_long("limit", lim, 1, 100, &limit, &err) < 0) {
		enum MHD_Result ret = answer_error(bc, 400, "limit", "invalid_value", "%s", err);
		free(err);
		return ret;
	}
	struct ig_files_pager pg = {.after = after, .limit = limit, .data = json_array()};
	for (struct ig_list *l = bs->all.prev; l != &bs->all; l = l->prev) {
		const struct batch *b = IG_LIST_ELEM(l, struct batch, link);
		if (strcmp(b->owner, bc->owner) != 0)
			continue;
		int take = ig_files_pager_take(&pg, b->id);
		if (take < 0)
			break;
		if (take)
			json_array_append_new(pg.data, batch_json(b));
	}
	return answer_json(bc, 200, ig_files_list_page(&pg));
}

static enum MHD_Result cancel(struct batch_call *bc, struct batch *b)
{
	switch (b->status) {
	case B_VALIDATING:
		if (b->rd_open)
			ig_corpus_close(&b->rd);
		b->rd_open = false;
		set_status(b, B_CANCELLING);
		break;
	case B_IN_PROGRESS:
		abort_items(bc->gw->batches, b);
		set_status(b, B_CANCELLING);
		break;
	case B_CANCELLING:
		break;
	default:
		return answer_error(bc, 409, NULL, "batch_not_cancellable",
				    "Cannot cancel a batch with status '%s'.", status_names[b->status]);
	}
	return answer_json(bc, 200, batch_json(b));
}

static enum MHD_Result respond(struct batch_call *bc)
{
	if (bc->too_big)
		return answer_error(bc, 413, NULL, "request_too_large", "the request body is larger than %ld bytes",
				    bc->gw->cfg->max_body_bytes);
	const char *rest = bc->url + strlen("/v1/batches");
	bool get = strcmp(bc->method, "GET") == 0 || strcmp(bc->method, "HEAD") == 0;
	bool post = strcmp(bc->method, "POST") == 0;
	if (!*rest) {
		if (post)
			return create(bc);
		if (get)
			return list(bc);
		return wrong_method(bc, "GET, POST");
	}
	char id[64];
	const char *slash = strchr(rest + 1, '/');
	size_t n = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
	snprintf(id, sizeof(id), "%.*s", (int)(n < sizeof(id) ? n : sizeof(id) - 1), rest + 1);
	if (slash && strcmp(slash, "/cancel") != 0)
		return answer_error(bc, 404, NULL, "not_found", "unknown path under /v1/batches");
	if (slash ? !post : !get)
		return wrong_method(bc, slash ? "POST" : "GET");
	struct batch *b = find(bc->gw->batches, id, bc->owner);
	if (!b)
		return answer_error(bc, 404, "batch_id", NULL, "No such Batch object: %.80s", id);
	if (slash)
		return cancel(bc, b);
	return answer_json(bc, 200, batch_json(b));
}

static enum MHD_Result on_request(struct ig_call *call, struct ig_gw *gw IG_UNUSED, struct MHD_Connection *conn IG_UNUSED,
				  const char *url IG_UNUSED, const char *method IG_UNUSED, const char *upload_data,
				  size_t *upload_data_size, void **con_cls IG_UNUSED)
{
	struct batch_call *bc = IG_CONTAINER_OF(call, struct batch_call, call);
	if (*upload_data_size) {
		if (bc->body.len + *upload_data_size > (size_t)bc->gw->cfg->max_body_bytes)
			bc->too_big = true;
		else if (ig_buf_append(&bc->body, upload_data, *upload_data_size) < 0)
			bc->too_big = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	return respond(bc);
}

static void on_completed(struct ig_call *call, enum MHD_RequestTerminationCode toe IG_UNUSED)
{
	struct batch_call *bc = IG_CONTAINER_OF(call, struct batch_call, call);
	ig_buf_free(&bc->body);
	free(bc);
}

struct ig_call *ig_batches_call(struct ig_gw *gw, struct MHD_Connection *conn, const char *url, const char *method,
				const char *owner)
{
	struct batch_call *bc = calloc(1, sizeof(*bc));
	if (!bc)
		return NULL;
	bc->call = (struct ig_call){on_request, on_completed};
	bc->gw = gw;
	bc->conn = conn;
	ig_buf_init(&bc->body);
	snprintf(bc->owner, sizeof(bc->owner), "%s", owner);
	snprintf(bc->method, sizeof(bc->method), "%s", method);
	snprintf(bc->url, sizeof(bc->url), "%s", url);
	return &bc->call;
}

/* ------------------------------------------------------------- reports */

json_t *ig_batches_json(const struct ig_batches *bs)
{
	json_t *arr = json_array();
	size_t shown_done = 0;
	for (struct ig_list *l = bs ? bs->all.prev : NULL; bs && l != &bs->all; l = l->prev) {
		const struct batch *b = IG_LIST_ELEM(l, struct batch, link);
		if (finished(b->status) && shown_done++ >= 5) /* the last few finished */
			continue;
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:o, s:I}", "id", b->id, "status",
						     status_names[b->status], "endpoint", b->endpoint, "total",
						     (json_int_t)b->total, "completed", (json_int_t)b->completed, "failed",
						     (json_int_t)b->failed, "in_flight", (json_int_t)b->inflight, "paused",
						     *b->paused ? json_string(b->paused) : json_null(), "created_at",
						     (json_int_t)b->created_at));
	}
	return arr;
}

void ig_batches_metrics(const struct ig_batches *bs, struct ig_buf *out)
{
	long by[B_NSTATUS] = {0};
	const struct batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct batch, link)
		by[b->status]++;
	ig_buf_printf(out, "# HELP infergate_batches Batches (the Batch API) by status.\n# TYPE infergate_batches gauge\n");
	for (int s = 0; s < B_NSTATUS; s++)
		ig_buf_printf(out, "infergate_batches{status=\"%s\"} %ld\n", status_names[s], by[s]);
	ig_buf_printf(out, "# HELP infergate_batch_lines_total Batch lines written by this process, by file.\n"
			   "# TYPE infergate_batch_lines_total counter\n"
			   "infergate_batch_lines_total{file=\"output\"} %llu\n"
			   "infergate_batch_lines_total{file=\"errors\"} %llu\n",
		      (unsigned long long)bs->lines_ok, (unsigned long long)bs->lines_failed);
	ig_buf_printf(out, "# HELP infergate_batch_requests Lines of each unfinished batch, by state.\n"
			   "# TYPE infergate_batch_requests gauge\n");
	IG_LIST_FOREACH(b, &bs->all, struct batch, link) {
		if (finished(b->status))
			continue;
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"total\"} %ld\n", b->id, b->total);
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"completed\"} %ld\n", b->id, b->completed);
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"failed\"} %ld\n", b->id, b->failed);
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"in_flight\"} %ld\n", b->id, b->inflight);
	}
	ig_buf_printf(out, "# HELP infergate_batch_paused 1 while an unfinished batch sends nothing (full disk, no "
			   "backend for its model).\n# TYPE infergate_batch_paused gauge\n");
	IG_LIST_FOREACH(b, &bs->all, struct batch, link)
		if (!finished(b->status))
			ig_buf_printf(out, "infergate_batch_paused{batch=\"%s\"} %d\n", b->id, *b->paused ? 1 : 0);
}
