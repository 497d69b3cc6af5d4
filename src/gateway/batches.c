/* The Batch API's store and runner (batches.h; its HTTP side is
 * batches_api.c). A batch's life, as OpenAI's:
 *   validating   every line of its input file read and checked by the
 *                background I/O thread (bio.h), one slice of SLICE_LINES
 *                of one batch at a time, so neither the reactors nor the
 *                thread's other jobs (uploads) wait long: JSON, custom_id
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
 *                the journal's done-set (src/batchfile/journal.c, the code
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
 * between the batches that use it.
 * Everything here runs on reactor 0 (its tick, and its curl multi for the
 * transfers) under gw->lock, except the jobs' run functions: opening the
 * result files (a scan of both), validation, saving batch.json, the
 * fsync and the hand-over of the result files, removals. Still on the
 * reactor: appending one result line (one write(2), no fsync) and reading
 * the input as lines are sent. Not here: the HTTP API (batches_api.c). */
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
#include "batch.h"
#include "batches.h"
#include "bio.h"
#include "files.h"
#include "gateway.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "metrics.h"
#include "router.h"
#include "upstream.h"

const char *const ig_batch_status_names[IG_BATCH_NSTATUS] = {"validating", "failed",     "in_progress",
								"finalizing", "completed",  "expired",
								"cancelling", "cancelled"};

#define MAX_TRIES 8         /* answers with a retryable status (429, 5xx, none) */

/* One line sent, waiting for its answer or its next try. */
struct item {
	struct ig_xfer x;
	struct ig_list link;    /* in its batch's items */
	struct ig_batch *b;
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

/* ---------------------------------------------------------------- disk */

static char *bpath(const struct ig_batch *b, const char *name)
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
json_t *ig_batch_json(const struct ig_batch *b)
{
	json_t *errs = json_null();
	if (b->errors && json_array_size(b->errors))
		errs = json_pack("{s:s, s:O}", "object", "list", "data", b->errors);
	json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:s, s:s, s:s, s:o, s:o, s:I}", "id", b->id, "object", "batch",
			      "endpoint", b->endpoint, "errors", errs, "input_file_id", b->input_file_id,
			      "completion_window", "24h", "status", ig_batch_status_names[b->status], "output_file_id",
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

/* batch.json's text: what a restart needs (counts come from the result
 * files). NULL out of memory. */
char *ig_batch_text(const struct ig_batch *b)
{
	json_t *o = ig_batch_json(b);
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
	return text;
}

/* Writes text as dir/batch.json: a temporary file, synced, renamed (any
 * thread). Returns 0 or -1 (errno set; logged). */
int ig_batch_write_json(const char *dir, const char *id, const char *text)
{
	char *tmp = ig_strdupf("%s/batch.json.tmp", dir), *path = ig_strdupf("%s/batch.json", dir);
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
		ig_log_error("batch %s: cannot write %s: %s", id, path, strerror(e));
	free(tmp);
	free(path);
	errno = e;
	return rc;
}

/* Saving batch.json on the I/O thread: in submission order, so the last
 * state saved is the last one written. */
struct save_job {
	struct ig_bio_job job;
	char *dir, *text;
	char id[40];
};

static void save_run(struct ig_bio_job *job)
{
	struct save_job *sj = IG_CONTAINER_OF(job, struct save_job, job);
	ig_batch_write_json(sj->dir, sj->id, sj->text);
}

static void save_done(struct ig_bio_job *job)
{
	struct save_job *sj = IG_CONTAINER_OF(job, struct save_job, job);
	free(sj->dir);
	free(sj->text);
	free(sj);
}

/* batch.json with the batch's state now, written by the I/O thread (a
 * failure is logged: the next change writes it again). */
static void save(const struct ig_batch *b)
{
	struct save_job *sj = calloc(1, sizeof(*sj));
	if (!sj || !(sj->text = ig_batch_text(b)) || !(sj->dir = strdup(b->dir))) {
		if (sj)
			free(sj->text);
		free(sj);
		ig_log_error("batch %s: out of memory saving its state", b->id);
		return;
	}
	snprintf(sj->id, sizeof(sj->id), "%s", b->id);
	sj->job.queue = IG_BIO_BATCHES;
	sj->job.run = save_run;
	sj->job.done = save_done;
	ig_bio_submit(b->bs->gw->bio, &sj->job);
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

static void vstate_free(struct ig_batch_check *v);

/* A batch with no job on the I/O thread (b->jobs 0). */
void ig_batch_free(struct ig_batch *b)
{
	if (!b)
		return;
	if (b->rd_open)
		ig_corpus_close(&b->rd);
	vstate_free(b->v);
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

struct ig_batch *ig_batch_new(struct ig_batches *bs, const char *id)
{
	struct ig_batch *b = calloc(1, sizeof(*b));
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
static struct ig_batch *load(struct ig_batches *bs, const char *id)
{
	struct ig_batch *b = ig_batch_new(bs, id);
	char *path = b ? bpath(b, "batch.json") : NULL;
	json_t *o = path ? json_load_file(path, 0, NULL) : NULL;
	free(path);
	const char *st = json_string_value(json_object_get(o, "status"));
	int s = -1;
	for (int i = 0; st && i < IG_BATCH_NSTATUS; i++)
		if (strcmp(st, ig_batch_status_names[i]) == 0)
			s = i;
	if (!b || !o || s < 0 || !json_is_string(json_object_get(o, "endpoint"))) {
		json_decref(o);
		ig_batch_free(b);
		return NULL;
	}
	b->status = (enum ig_batch_status)s;
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
void ig_batch_remove_dir(const char *dir)
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
 * line}); the first IG_BATCH_MAX_ERRORS are kept. */
static void problem(struct ig_batch *b, const char *code, long line, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void problem(struct ig_batch *b, const char *code, long line, const char *param, const char *fmt, ...)
{
	if (b->n_problems++ >= IG_BATCH_MAX_ERRORS)
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

void ig_batch_set_status(struct ig_batch *b, enum ig_batch_status s)
{
	int64_t now = ig_wall_s();
	b->status = s;
	switch (s) {
	case IG_BATCH_IN_PROGRESS: b->in_progress_at = now; break;
	case IG_BATCH_FINALIZING: b->finalizing_at = now; break;
	case IG_BATCH_COMPLETED: b->completed_at = now; break;
	case IG_BATCH_FAILED: b->failed_at = now; break;
	case IG_BATCH_EXPIRED: b->expired_at = now; break;
	case IG_BATCH_CANCELLING: b->cancelling_at = now; break;
	case IG_BATCH_CANCELLED: b->cancelled_at = now; break;
	default: break;
	}
	save(b);
	ig_log_info("batch %s: %s (%ld of %ld done, %ld failed)", b->id, ig_batch_status_names[s], b->completed + b->failed,
		    b->total, b->failed);
}

/* ----------------------------------------------------------- validating */

static const struct ig_corpus_defaults no_defaults = {.max_tokens = -1, .endpoint = -1};

static void fail_validation(struct ig_batches *bs, struct ig_batch *b)
{
	(void)bs;
	if (b->n_problems > IG_BATCH_MAX_ERRORS)
		problem(b, "too_many_errors", 0, NULL, "%ld more problems not listed", b->n_problems - IG_BATCH_MAX_ERRORS);
	ig_batch_set_status(b, IG_BATCH_FAILED);
}

static void note_model(struct ig_batch *b, const char *m)
{
	for (size_t i = 0; i < b->n_models; i++)
		if (strcmp(b->models[i], m) == 0)
			return;
	if (b->n_models < IG_BATCH_MAX_MODELS)
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

static void start_running(struct ig_batches *bs, struct ig_batch *b);

/* The batch's input file on disk (malloc'd), NULL when it was deleted. */
static char *input_path(struct ig_batches *bs, const struct ig_batch *b)
{
	const struct ig_file *f = ig_files_find(bs->gw->files, b->input_file_id, b->owner);
	return f ? ig_files_path(bs->gw->files, f->id) : NULL;
}

/* A model the lines name, with the first lines that name it (the problems
 * if it turns out not to be served). */
struct vmodel {
	char *name;
	long lines[IG_BATCH_MAX_ERRORS];
	long count;
};

/* What validation learnt so far. The I/O thread reads the file (in slices
 * of SLICE_LINES, one slice of one batch at a time) and checks what needs
 * no gateway state: JSON, the url, unique custom_ids (the whole-file second
 * look at hash collisions too); the reactor checks, once at the end, each
 * distinct model against the backends' lists. Owned by the job while one
 * runs (vbusy), by the reactor in between. */
struct ig_batch_check {
	char *path;                 /* the input file */
	enum ig_endpoint ep;
	char endpoint[32];
	struct ig_corpus_reader rd;
	bool rd_open;
	struct ig_idset ids, ambiguous;
	long total;
	json_t *problems;           /* {code, message, param, line}, the first IG_BATCH_MAX_ERRORS */
	long n_problems;            /* found, kept or not */
	struct vmodel *models;
	size_t n_models;
	bool eof;                   /* every line read (or too many problems) */
};

#define SLICE_LINES 16384   /* lines one job reads: tens of milliseconds of the thread */
#define VMODELS 64          /* distinct models a batch may name */

static void vstate_free(struct ig_batch_check *v)
{
	if (!v)
		return;
	if (v->rd_open)
		ig_corpus_close(&v->rd);
	ig_idset_free(&v->ids);
	ig_idset_free(&v->ambiguous);
	json_decref(v->problems);
	for (size_t i = 0; i < v->n_models; i++)
		free(v->models[i].name);
	free(v->models);
	free(v->path);
	free(v);
}

/* A problem found on the thread (kept in v, not in the batch). */
static void vproblem(struct ig_batch_check *v, const char *code, long line, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void vproblem(struct ig_batch_check *v, const char *code, long line, const char *param, const char *fmt, ...)
{
	if (v->n_problems++ >= IG_BATCH_MAX_ERRORS)
		return;
	va_list ap;
	char msg[400];
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_array_append_new(v->problems, json_pack("{s:s, s:s, s:o, s:o}", "code", code, "message", msg, "param",
						     param ? json_string(param) : json_null(), "line",
						     line > 0 ? json_integer(line) : json_null()));
}

static void vnote_model(struct ig_batch_check *v, const char *m, long line)
{
	size_t i = 0;
	while (i < v->n_models && strcmp(v->models[i].name, m) != 0)
		i++;
	if (i == v->n_models) {
		if (v->n_models == VMODELS) {
			vproblem(v, "invalid_request", line, "body.model",
				 "More than %d different models in one batch.", VMODELS);
			return;
		}
		if (!(v->models[i].name = strdup(m))) {
			vproblem(v, "server_error", line, NULL, "out of memory");
			return;
		}
		v->n_models++;
	}
	struct vmodel *vm = &v->models[i];
	if (vm->count < IG_BATCH_MAX_ERRORS)
		vm->lines[vm->count] = line;
	vm->count++;
}

static void vduplicate_found(void *ud, long lineno, const char *id, long first)
{
	vproblem(ud, "duplicate_custom_id", lineno, "custom_id", "Duplicate custom_id '%.200s' (first at line %ld).", id,
		 first);
}

/* One slice of validation, on the I/O thread. */
struct vjob {
	struct ig_bio_job job;
	struct ig_batches *bs;
	struct ig_batch *b;
	struct ig_batch_check *v;
};

static void validate_run(struct ig_bio_job *job)
{
	struct ig_batch_check *v = IG_CONTAINER_OF(job, struct vjob, job)->v;
	char *err = NULL;
	if (!v->rd_open) {
		if (ig_corpus_open(&v->rd, v->path, &err) < 0) {
			vproblem(v, "invalid_file", 0, "input_file_id", "The input file cannot be read: %s.",
				 err ? err : "out of memory");
			free(err);
			v->eof = true;
			return;
		}
		v->rd_open = true;
	}
	int got = 1;
	for (int n = 0; n < SLICE_LINES && v->n_problems < 10 * IG_BATCH_MAX_ERRORS; n++) {
		if ((got = ig_corpus_next(&v->rd)) <= 0)
			break;
		struct ig_corpus_line l;
		v->total++;
		if (ig_corpus_parse(v->rd.line, v->rd.len, v->rd.lineno, &no_defaults, &l, &err) < 0) {
			vproblem(v, "invalid_request", v->rd.lineno, NULL, "%s", err);
			free(err);
			err = NULL;
			continue;
		}
		if (l.ep != v->ep)
			vproblem(v, "invalid_url", v->rd.lineno, "url",
				 "The url '%s' does not match the batch's endpoint '%s'.", ig_corpus_endpoint_path(l.ep),
				 v->endpoint);
		vnote_model(v, l.model, v->rd.lineno);
		uint64_t h = ig_idset_hash(l.custom_id, strlen(l.custom_id));
		int added = ig_idset_add(&v->ids, h, 0, NULL);
		if (added == 0)
			added = ig_idset_add(&v->ambiguous, h, 0, NULL) < 0 ? -1 : 0;
		ig_corpus_line_clear(&l);
		if (added < 0) {
			vproblem(v, "server_error", v->rd.lineno, NULL, "out of memory");
			got = 0;
			break;
		}
	}
	if (got > 0 && v->n_problems < 10 * IG_BATCH_MAX_ERRORS)
		return; /* more in the next slice */
	if (got < 0)
		vproblem(v, "invalid_file", 0, "input_file_id", "The input file cannot be read: %s.", strerror(errno));
	ig_corpus_close(&v->rd);
	v->rd_open = false;
	v->eof = true;
	if (v->total == 0)
		vproblem(v, "empty_file", 0, "input_file_id", "The input file has no request lines.");
	/* a hash seen twice: the whole file again, comparing the strings */
	if (v->ambiguous.len && ig_corpus_duplicates(v->path, &no_defaults, &v->ambiguous, vduplicate_found, v, &err) < 0) {
		vproblem(v, "invalid_file", 0, "input_file_id", "The input file cannot be read: %s.", err);
		free(err);
	}
	ig_idset_free(&v->ids);
	ig_idset_free(&v->ambiguous);
}

static void validate_next(struct ig_batches *bs);

static void validate_done(struct ig_bio_job *job)
{
	struct vjob *vj = IG_CONTAINER_OF(job, struct vjob, job);
	struct ig_batches *bs = vj->bs;
	struct ig_batch *b = vj->b;
	free(vj);
	b->jobs--;
	bs->vbusy = false;
	b->vslices++;
	if (b->status != IG_BATCH_VALIDATING || b->expiring) { /* cancelled or expired meanwhile */
		vstate_free(b->v);
		b->v = NULL;
	} else {
		b->total = b->v->total;
	}
	if (!bs->gw->stopping)
		validate_next(bs);
}

/* Hands the next slice to the I/O thread: one at a time across all
 * batches, to the batch that had the fewest (so two batches validate
 * side by side, and uploads' writes queue behind one slice at most). */
static void validate_next(struct ig_batches *bs)
{
	struct ig_batch *b, *pick = NULL;
	if (bs->vbusy)
		return;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		if (b->status == IG_BATCH_VALIDATING && !b->expiring && !b->jobs && !(b->v && b->v->eof) &&
		    (!pick || b->vslices < pick->vslices))
			pick = b;
	if (!pick)
		return;
	b = pick;
	if (!b->v) { /* the first slice */
		struct ig_batch_check *v = calloc(1, sizeof(*v));
		char *path = input_path(bs, b);
		if (!v || !path || !(v->problems = json_array()) || !(v->models = calloc(VMODELS, sizeof(*v->models))) ||
		    ig_idset_init(&v->ids, 0) < 0 || ig_idset_init(&v->ambiguous, 0) < 0) {
			problem(b, !path ? "invalid_file" : "server_error", 0, !path ? "input_file_id" : NULL, "%s",
				!path ? "The input file cannot be read: it was deleted." : "out of memory");
			free(path);
			vstate_free(v);
			fail_validation(bs, b);
			return;
		}
		v->path = path;
		v->ep = b->ep;
		snprintf(v->endpoint, sizeof(v->endpoint), "%s", b->endpoint);
		b->v = v;
		b->n_problems = 0;
		json_array_clear(b->errors);
		b->total = 0;
	}
	struct vjob *vj = calloc(1, sizeof(*vj));
	if (!vj)
		return; /* the next tick */
	*vj = (struct vjob){.bs = bs, .b = b, .v = b->v};
	vj->job.queue = IG_BIO_BATCHES;
	vj->job.run = validate_run;
	vj->job.done = validate_done;
	b->jobs++;
	bs->vbusy = true;
	ig_bio_submit(bs->gw->bio, &vj->job);
}

static int by_line(const void *x, const void *y)
{
	json_int_t a = json_integer_value(json_object_get(*(json_t *const *)x, "line"));
	json_int_t c = json_integer_value(json_object_get(*(json_t *const *)y, "line"));
	return a < c ? -1 : a > c;
}

/* Every line read: the models are checked against the backends' lists
 * (waiting until they are known), the problems become the batch's, in
 * line order. */
static void finish_validation(struct ig_batches *bs, struct ig_batch *b)
{
	struct ig_batch_check *v = b->v;
	size_t cap = json_array_size(v->problems), k = 0;
	for (size_t i = 0; i < v->n_models; i++) {
		int served = model_served(bs->gw, b->owner, v->models[i].name);
		if (served < 0) {
			snprintf(b->paused, sizeof(b->paused), "waiting for the backends' model lists");
			return;
		}
		if (!served)
			cap += (size_t)(v->models[i].count < IG_BATCH_MAX_ERRORS ? v->models[i].count : IG_BATCH_MAX_ERRORS);
	}
	*b->paused = 0;
	json_t **all = calloc(cap + 1, sizeof(*all));
	if (!all) {
		ig_log_error("batch %s: out of memory ending its validation (tried again)", b->id);
		return;
	}
	long more = v->n_problems - (long)json_array_size(v->problems);
	for (size_t i = 0; i < json_array_size(v->problems); i++)
		all[k++] = json_incref(json_array_get(v->problems, i));
	for (size_t i = 0; i < v->n_models; i++) {
		struct vmodel *vm = &v->models[i];
		if (model_served(bs->gw, b->owner, vm->name)) {
			note_model(b, vm->name);
			continue;
		}
		char msg[300];
		snprintf(msg, sizeof(msg), "The model '%.200s' does not exist or is not served here.", vm->name);
		for (long j = 0; j < vm->count && j < IG_BATCH_MAX_ERRORS; j++)
			all[k++] = json_pack("{s:s, s:s, s:s, s:I}", "code", "model_not_found", "message", msg, "param",
					     "body.model", "line", (json_int_t)vm->lines[j]);
		more += vm->count > IG_BATCH_MAX_ERRORS ? vm->count - IG_BATCH_MAX_ERRORS : 0;
	}
	if (k > 1)
		qsort(all, k, sizeof(*all), by_line);
	json_array_clear(b->errors);
	for (size_t i = 0; i < k; i++) {
		if (i < IG_BATCH_MAX_ERRORS)
			json_array_append(b->errors, all[i]);
		json_decref(all[i]);
	}
	free(all);
	b->n_problems = more + (long)k;
	b->total = v->total;
	vstate_free(v);
	b->v = NULL;
	if (b->n_problems) {
		fail_validation(bs, b);
		return;
	}
	start_running(bs, b);
}

/* ----------------------------------------------------------- in_progress */

/* Opening the result files (learning what earlier runs wrote: a scan of
 * both) and the input, on the I/O thread. */
struct ojob {
	struct ig_bio_job job;
	struct ig_batches *bs;
	struct ig_batch *b;
	char *out, *errs, *input;   /* input NULL: not needed (cancelling, expiring) */
	struct ig_doneset done;
	struct ig_journal jout, jerr;
	struct ig_corpus_reader rd;
	int rc;                     /* 0, -1 the journals, -2 the input */
	char *err;
};

static void open_run(struct ig_bio_job *job)
{
	struct ojob *oj = IG_CONTAINER_OF(job, struct ojob, job);
	oj->rc = -1;
	if (ig_journal_done_load(&oj->done, oj->out, oj->errs, &oj->err) < 0 ||
	    ig_journal_done_cut_torn(&oj->done, oj->out, oj->errs, &oj->err) < 0 ||
	    ig_journal_open(&oj->jout, oj->out, &oj->err) < 0)
		return;
	if (ig_journal_open(&oj->jerr, oj->errs, &oj->err) < 0) {
		ig_journal_close(&oj->jout);
		return;
	}
	oj->rc = 0;
	if (oj->input && ig_corpus_open(&oj->rd, oj->input, &oj->err) < 0)
		oj->rc = -2;
}

static void open_done(struct ig_bio_job *job)
{
	struct ojob *oj = IG_CONTAINER_OF(job, struct ojob, job);
	struct ig_batch *b = oj->b;
	b->jobs--;
	if (oj->rc == -1) {
		ig_log_error("batch %s: %s", b->id, oj->err);
		problem(b, "server_error", 0, NULL, "The gateway cannot keep the results: %s.", oj->err);
		ig_journal_done_free(&oj->done);
		if (b->status == IG_BATCH_IN_PROGRESS)
			ig_batch_set_status(b, IG_BATCH_FAILED);
		goto out;
	}
	b->done = oj->done; /* taken */
	b->done_loaded = true;
	b->out = oj->jout;
	b->err = oj->jerr;
	b->journals_open = true;
	b->completed = b->done.count[0];
	b->failed = b->done.count[1];
	if (oj->rc == -2) {
		problem(b, "invalid_file", 0, "input_file_id", "The input file %s cannot be read: %s.", b->input_file_id,
			oj->err);
		if (b->status == IG_BATCH_IN_PROGRESS)
			ig_batch_set_status(b, IG_BATCH_FAILED);
		goto out;
	}
	if (oj->input && b->status == IG_BATCH_IN_PROGRESS) {
		b->rd = oj->rd;
		b->rd_open = true;
		b->input_done = false;
		save(b);
		ig_log_info("batch %s: in_progress, %ld lines (%ld done before)", b->id, b->total,
			    b->completed + b->failed);
	} else if (oj->input) {
		ig_corpus_close(&oj->rd);
	}
out:
	free(oj->out);
	free(oj->errs);
	free(oj->input);
	free(oj->err);
	free(oj);
}

/* Whether the result files are open; when not, their opening is handed
 * to the I/O thread (with the input when `input`), once: a later tick
 * finds them open. */
static bool journals_ready(struct ig_batches *bs, struct ig_batch *b, bool input)
{
	if (b->journals_open)
		return true;
	if (b->jobs)
		return false;
	struct ojob *oj = calloc(1, sizeof(*oj));
	if (!oj)
		return false;
	oj->bs = bs;
	oj->b = b;
	oj->out = bpath(b, "output.jsonl");
	oj->errs = bpath(b, "errors.jsonl");
	ig_journal_done_init(&oj->done);
	if (input && !(oj->input = input_path(bs, b))) {
		problem(b, "invalid_file", 0, "input_file_id", "The input file %s cannot be read: it was deleted.",
			b->input_file_id);
		free(oj->out);
		free(oj->errs);
		free(oj);
		ig_batch_set_status(b, IG_BATCH_FAILED);
		return false;
	}
	oj->job.queue = IG_BIO_BATCHES;
	oj->job.run = open_run;
	oj->job.done = open_done;
	b->jobs++;
	ig_bio_submit(bs->gw->bio, &oj->job);
	return false;
}

static void start_running(struct ig_batches *bs, struct ig_batch *b)
{
	if (b->status != IG_BATCH_IN_PROGRESS)
		b->status = IG_BATCH_IN_PROGRESS, b->in_progress_at = ig_wall_s();
	journals_ready(bs, b, true);
}

/* Appends a result line, or keeps it for later when the disk refuses.
 * Takes line. */
static void emit(struct ig_batches *bs, struct ig_batch *b, int file, char *line, size_t len)
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
static void flush_pending(struct ig_batches *bs, struct ig_batch *b)
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
	struct ig_batch *b = it->b;
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
static const char *class_of(struct ig_batches *bs, const struct ig_batch *b)
{
	const struct ig_key *k = ig_sched_key_find(&bs->gw->sched, b->owner);
	int c = k && k->klass >= 0 && k->klass < IG_CLASS_LOW ? k->klass : IG_CLASS_LOW;
	return ig_conf_class_name(c);
}

/* One line becomes an item and is sent. Returns 0, or -1 when the line
 * cannot be (it was valid when checked: only out of memory). */
static int start_line(struct ig_batches *bs, struct ig_batch *b, struct ig_corpus_line *l)
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
static long share_of(struct ig_batches *bs, const struct ig_batch *b)
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
		struct ig_batch *o;
		IG_LIST_FOREACH(o, &bs->all, struct ig_batch, link) {
			if (o->status != IG_BATCH_IN_PROGRESS || !*o->models)
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

static void finalize(struct ig_batches *bs, struct ig_batch *b);

/* The next line not done yet. Returns 1 with it in *l, or 0 at the end of
 * the input (b->input_done set). */
static int next_line(struct ig_batch *b, struct ig_corpus_line *l)
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
static void run(struct ig_batches *bs, struct ig_batch *b, uint64_t now)
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
static void abort_items(struct ig_batches *bs, struct ig_batch *b)
{
	struct item *it, *tmp;
	IG_LIST_FOREACH_SAFE(it, tmp, &b->items, struct item, link)
		item_free(bs, it);
}

/* ------------------------------------------------------------ finalizing */

/* The end of a batch on the I/O thread: its result files synced and
 * closed, batch.json with the file ids written, then the files taken into
 * the Files store's directory. */
struct fjob {
	struct ig_bio_job job;
	struct ig_batch *b;
	bool sync;                  /* the journals are open: sync and close them */
	char *text;                 /* batch.json */
	char *out, *errs;
	struct ig_file of, ef;      /* id "" when there is no such file */
	int err;                    /* errno of the failed step, 0 ok */
	const char *step;
};

static void finalize_run(struct ig_bio_job *job)
{
	struct fjob *fj = IG_CONTAINER_OF(job, struct fjob, job);
	struct ig_batch *b = fj->b;
	const struct ig_files *fs = b->bs->gw->files;
	if (fj->sync) { /* the batch writes nothing while it finalizes: its journals are the job's */
		if (ig_journal_sync(&b->out) < 0 || ig_journal_sync(&b->err) < 0) {
			fj->err = errno;
			fj->step = "cannot sync the results";
			return;
		}
		ig_journal_close(&b->out);
		ig_journal_close(&b->err);
	}
	if (ig_batch_write_json(b->dir, b->id, fj->text) < 0) {
		fj->err = errno;
		fj->step = "cannot save its state";
		return;
	}
	if ((*fj->of.id && ig_files_adopt_disk(fs, fj->out, &fj->of) < 0) ||
	    (*fj->ef.id && ig_files_adopt_disk(fs, fj->errs, &fj->ef) < 0)) {
		fj->err = errno;
		fj->step = "cannot store the result files";
	}
}

static void finalize_done(struct ig_bio_job *job)
{
	struct fjob *fj = IG_CONTAINER_OF(job, struct fjob, job);
	struct ig_batch *b = fj->b;
	struct ig_files *fs = b->bs->gw->files;
	b->jobs--;
	if (fj->sync && !(fj->err && strcmp(fj->step, "cannot sync the results") == 0))
		b->journals_open = false;
	if (!fj->err && ((*fj->of.id && ig_files_add(fs, &fj->of) < 0) || (*fj->ef.id && ig_files_add(fs, &fj->ef) < 0))) {
		fj->err = ENOMEM;
		fj->step = "cannot store the result files";
	}
	if (fj->err) {
		snprintf(b->paused, sizeof(b->paused), "%s: %s (retrying)", fj->step, strerror(fj->err));
	} else {
		enum ig_batch_status end = b->status == IG_BATCH_CANCELLING ? IG_BATCH_CANCELLED : b->expiring ? IG_BATCH_EXPIRED : IG_BATCH_COMPLETED;
		*b->paused = 0;
		if (b->done_loaded)
			ig_journal_done_free(&b->done);
		b->done_loaded = false;
		ig_batch_set_status(b, end);
	}
	free(fj->text);
	free(fj->out);
	free(fj->errs);
	free(fj);
}

/* The result files become Files of the owner: ids chosen and written first,
 * so a crash in between ends the same way at the next start. The disk work
 * is a job; until its done, the batch waits (b->jobs). */
static void finalize(struct ig_batches *bs, struct ig_batch *b)
{
	if (b->jobs)
		return;
	if (b->rd_open)
		ig_corpus_close(&b->rd);
	b->rd_open = false;
	if (b->status != IG_BATCH_FINALIZING && b->status != IG_BATCH_CANCELLING) {
		b->status = IG_BATCH_FINALIZING;
		b->finalizing_at = ig_wall_s();
	}
	if (!*b->output_file_id && b->completed > 0)
		ig_files_new_id(b->output_file_id);
	if (!*b->error_file_id && b->failed > 0)
		ig_files_new_id(b->error_file_id);
	struct fjob *fj = calloc(1, sizeof(*fj));
	if (!fj || !(fj->text = ig_batch_text(b))) {
		free(fj);
		snprintf(b->paused, sizeof(b->paused), "out of memory (retrying)");
		return;
	}
	fj->b = b;
	fj->sync = b->journals_open;
	fj->out = bpath(b, "output.jsonl");
	fj->errs = bpath(b, "errors.jsonl");
	int64_t now = ig_wall_s();
	if (*b->output_file_id) {
		fj->of = (struct ig_file){.created_at = now};
		snprintf(fj->of.id, sizeof(fj->of.id), "%s", b->output_file_id);
		snprintf(fj->of.owner, sizeof(fj->of.owner), "%s", b->owner);
		snprintf(fj->of.filename, sizeof(fj->of.filename), "%s_output.jsonl", b->id);
		snprintf(fj->of.purpose, sizeof(fj->of.purpose), "batch_output");
	}
	if (*b->error_file_id) {
		fj->ef = (struct ig_file){.created_at = now};
		snprintf(fj->ef.id, sizeof(fj->ef.id), "%s", b->error_file_id);
		snprintf(fj->ef.owner, sizeof(fj->ef.owner), "%s", b->owner);
		snprintf(fj->ef.filename, sizeof(fj->ef.filename), "%s_error.jsonl", b->id);
		snprintf(fj->ef.purpose, sizeof(fj->ef.purpose), "batch_output");
	}
	fj->job.queue = IG_BIO_BATCHES;
	fj->job.run = finalize_run;
	fj->job.done = finalize_done;
	b->jobs++;
	ig_bio_submit(bs->gw->bio, &fj->job);
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
	const struct ig_batch *b;
	const struct item *it;
	if (!bs)
		return 0;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		IG_LIST_FOREACH(it, &b->items, struct item, link)
			n += it->x.running;
	return n;
}

static int by_created(const void *a, const void *b)
{
	const struct ig_batch *x = *(struct ig_batch *const *)a, *y = *(struct ig_batch *const *)b;
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

/* ------------------------------------------------------------- reports */

/* For the status page: the unfinished batches and the last few finished:
 * [{id, status, endpoint, total, completed, failed, in_flight, paused,
 * created_at}], newest first. */
static json_t *report_json(void *arg)
{
	const struct ig_batches *bs = arg;
	json_t *arr = json_array();
	size_t shown_done = 0;
	for (struct ig_list *l = bs ? bs->all.prev : NULL; bs && l != &bs->all; l = l->prev) {
		const struct ig_batch *b = IG_LIST_ELEM(l, struct ig_batch, link);
		if (ig_batch_finished(b->status) && shown_done++ >= 5) /* the last few finished */
			continue;
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:o, s:I}", "id", b->id, "status",
						     ig_batch_status_names[b->status], "endpoint", b->endpoint, "total",
						     (json_int_t)b->total, "completed", (json_int_t)b->completed, "failed",
						     (json_int_t)b->failed, "in_flight", (json_int_t)b->inflight, "paused",
						     *b->paused ? json_string(b->paused) : json_null(), "created_at",
						     (json_int_t)b->created_at));
	}
	return arr;
}

/* Prometheus series: batches by status, lines written, per-batch progress
 * of the unfinished ones. */
static void report_prom(void *arg, struct ig_buf *out)
{
	const struct ig_batches *bs = arg;
	long by[IG_BATCH_NSTATUS] = {0};
	const struct ig_batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		by[b->status]++;
	ig_buf_printf(out, "# HELP infergate_batches Batches (the Batch API) by status.\n# TYPE infergate_batches gauge\n");
	for (int s = 0; s < IG_BATCH_NSTATUS; s++)
		ig_buf_printf(out, "infergate_batches{status=\"%s\"} %ld\n", ig_batch_status_names[s], by[s]);
	ig_buf_printf(out, "# HELP infergate_batch_lines_total Batch lines written by this process, by file.\n"
			   "# TYPE infergate_batch_lines_total counter\n"
			   "infergate_batch_lines_total{file=\"output\"} %llu\n"
			   "infergate_batch_lines_total{file=\"errors\"} %llu\n",
		      (unsigned long long)bs->lines_ok, (unsigned long long)bs->lines_failed);
	ig_buf_printf(out, "# HELP infergate_batch_requests Lines of each unfinished batch, by state.\n"
			   "# TYPE infergate_batch_requests gauge\n");
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link) {
		if (ig_batch_finished(b->status))
			continue;
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"total\"} %ld\n", b->id, b->total);
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"completed\"} %ld\n", b->id, b->completed);
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"failed\"} %ld\n", b->id, b->failed);
		ig_buf_printf(out, "infergate_batch_requests{batch=\"%s\",state=\"in_flight\"} %ld\n", b->id, b->inflight);
	}
	ig_buf_printf(out, "# HELP infergate_batch_paused 1 while an unfinished batch sends nothing (full disk, no "
			   "backend for its model).\n# TYPE infergate_batch_paused gauge\n");
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		if (!ig_batch_finished(b->status))
			ig_buf_printf(out, "infergate_batch_paused{batch=\"%s\"} %d\n", b->id, *b->paused ? 1 : 0);
}

struct ig_batches *ig_batches_open(struct ig_gw *gw, const char *dir, char **err)
{
	struct ig_batches *bs = calloc(1, sizeof(*bs));
	struct ig_batch **v = NULL;
	size_t n = 0, cap = 0;
	if (!bs || !(bs->dir = strdup(dir))) {
		free(bs);
		*err = strdup("out of memory");
		return NULL;
	}
	bs->gw = gw;
	ig_list_init(&bs->all);
	ig_random_hex(bs->secret, 32);
	if (ig_metrics_register(gw, &(struct ig_metrics_source){"batches", report_json, report_prom, bs}) < 0) {
		*err = strdup("out of memory");
		goto fail;
	}
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
		struct ig_batch *b = load(bs, e->d_name);
		if (!b) {
			ig_log_warn("data_dir: %s/%s is not a batch (no readable batch.json): left alone", dir, e->d_name);
			continue;
		}
		struct ig_batch **nv = ig_grow(v, &cap, n, sizeof(*v), 16);
		if (!nv) {
			ig_batch_free(b);
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
		if (!ig_batch_finished(v[i]->status))
			resumed++;
		/* its counts, from its result files, before any request: at
		 * start, before the loops and the I/O thread (gw->bio NULL: the
		 * job runs here), when nothing waits on it */
		if (v[i]->status == IG_BATCH_IN_PROGRESS)
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
	ig_metrics_unregister(bs->gw, bs);
	struct ig_batch *b, *tmp;
	IG_LIST_FOREACH_SAFE(b, tmp, &bs->all, struct ig_batch, link) {
		abort_items(bs, b);
		ig_list_del(&b->link);
		ig_batch_free(b);
	}
	free(bs->dir);
	free(bs);
}

/* Removing a batch's directory, on the I/O thread. */
struct rmdir_job {
	struct ig_bio_job job;
	char *dir;
};

static void rmdir_run(struct ig_bio_job *job)
{
	ig_batch_remove_dir(IG_CONTAINER_OF(job, struct rmdir_job, job)->dir);
}

static void rmdir_done(struct ig_bio_job *job)
{
	struct rmdir_job *rj = IG_CONTAINER_OF(job, struct rmdir_job, job);
	free(rj->dir);
	free(rj);
}

/* Finished batches older than batches.retention_s go, with their result
 * files. */
static void sweep(struct ig_batches *bs)
{
	long keep = bs->gw->cfg->batch_retention_s;
	int64_t now = ig_wall_s();
	struct ig_batch *b, *tmp;
	if (keep <= 0)
		return;
	IG_LIST_FOREACH_SAFE(b, tmp, &bs->all, struct ig_batch, link) {
		int64_t end = b->completed_at ? b->completed_at
			      : b->failed_at  ? b->failed_at
			      : b->cancelled_at ? b->cancelled_at
						: b->expired_at;
		if (!ig_batch_finished(b->status) || now - end < keep || b->jobs)
			continue;
		struct rmdir_job *rj = calloc(1, sizeof(*rj));
		if (!rj || !(rj->dir = strdup(b->dir))) {
			free(rj);
			continue; /* out of memory: the next sweep */
		}
		if (*b->output_file_id)
			ig_files_remove(bs->gw->files, bs->gw->bio, b->output_file_id);
		if (*b->error_file_id)
			ig_files_remove(bs->gw->files, bs->gw->bio, b->error_file_id);
		rj->job.queue = IG_BIO_BATCHES;
		rj->job.run = rmdir_run;
		rj->job.done = rmdir_done;
		ig_bio_submit(bs->gw->bio, &rj->job);
		ig_log_info("batch %s: removed (finished %lld s ago; batches.retention_s %ld)", b->id,
			    (long long)(now - end), keep);
		ig_list_del(&b->link);
		bs->nbatches--;
		ig_batch_free(b);
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
	struct ig_batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link) {
		if ((b->status == IG_BATCH_VALIDATING || b->status == IG_BATCH_IN_PROGRESS) && b->expires_at && wall >= b->expires_at) {
			/* OpenAI's 24 h window: what finished is kept, the rest is not run */
			abort_items(bs, b);
			if (b->rd_open)
				ig_corpus_close(&b->rd);
			b->rd_open = false;
			b->expiring = true;
			if (b->status == IG_BATCH_VALIDATING)
				b->in_progress_at = 0;
			if (b->status == IG_BATCH_IN_PROGRESS && !journals_ready(bs, b, false))
				continue;
			finalize(bs, b);
			continue;
		}
		switch (b->status) {
		case IG_BATCH_VALIDATING: /* the slices are handed out below */
			if (b->v && b->v->eof && !b->jobs)
				finish_validation(bs, b);
			break;
		case IG_BATCH_IN_PROGRESS:
			if (journals_ready(bs, b, true) && b->rd_open)
				run(bs, b, now_ms);
			break;
		case IG_BATCH_CANCELLING:
			abort_items(bs, b);
			/* after a restart: counts from the files, unless they were
			 * already handed over (ids chosen, counts saved) */
			if (b->in_progress_at && !*b->output_file_id && !*b->error_file_id && !journals_ready(bs, b, false))
				break;
			if (!ig_list_empty(&b->pending))
				flush_pending(bs, b);
			if (ig_list_empty(&b->pending))
				finalize(bs, b);
			break;
		case IG_BATCH_FINALIZING: /* after a restart: ids and counts were saved with the status */
			finalize(bs, b);
			break;
		default:
			break;
		}
	}
	if (!bs->gw->stopping)
		validate_next(bs);
}

