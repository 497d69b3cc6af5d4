/* One batch (batch.h): its disk form (batch.json, written with
 * temp-file-and-rename on the I/O thread), its OpenAI object, its status
 * changes and validation problems. The bottom of the Batch API's files:
 * it calls none of them. Not here: moving a batch through its life
 * (batches.c and the stages' files). */
#include "config.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "api/batch.h"
#include "api/files.h"
#include "cluster/cluster.h"
#include "gateway.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/bio.h"

const char *const ig_batch_status_names[IG_BATCH_NSTATUS] = {"validating", "failed",     "in_progress",
								"finalizing", "completed",  "expired",
								"cancelling", "cancelled"};

/* ---------------------------------------------------------------- disk */

char *ig_batch_path(const struct ig_batch *b, const char *name)
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
	if (b->bs->clustered) /* several gateways: whether this one runs it, under which fencing token */
		json_object_set_new(json_object_get(o, "infergate"), "run_here",
				    json_pack("{s:b, s:o}", "held", b->ours, "fencing_token",
					      b->ours ? json_integer((json_int_t)b->fence) : json_null()));
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
	struct ig_gw *gw;
	char *dir, *text;
	char id[40];
	uint64_t fence;     /* 0 alone */
	int rc;
};

static void save_run(struct ig_bio_job *job)
{
	struct save_job *sj = IG_CONTAINER_OF(job, struct save_job, job);
	int fd = ig_batch_fence_check_path(sj->dir, sj->fence);
	if (fd == -1) { /* another gateway runs it now: its state is its own */
		sj->rc = -1;
		return;
	}
	sj->rc = ig_batch_write_json(sj->dir, sj->id, sj->text);
	if (fd >= 0)
		close(fd);
}

static void save_done(struct ig_bio_job *job)
{
	struct save_job *sj = IG_CONTAINER_OF(job, struct save_job, job);
	if (sj->rc == 0 && sj->fence) /* the others read it again */
		ig_cluster_publish(sj->gw, NULL, NULL, 0, 'b', "%s", sj->id);
	free(sj->dir);
	free(sj->text);
	free(sj);
}

/* batch.json with the batch's state now, written by the I/O thread (a
 * failure is logged: the next change writes it again). */
void ig_batch_save(const struct ig_batch *b)
{
	if (b->bs->clustered && !b->ours)
		return; /* its state is the gateway's that runs it */
	struct save_job *sj = calloc(1, sizeof(*sj));
	if (!sj || !(sj->text = ig_batch_text(b)) || !(sj->dir = strdup(b->dir))) {
		if (sj)
			free(sj->text);
		free(sj);
		ig_log_error("batch %s: out of memory saving its state", b->id);
		return;
	}
	snprintf(sj->id, sizeof(sj->id), "%s", b->id);
	sj->gw = b->bs->gw;
	sj->fence = b->bs->clustered ? b->fence : 0;
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

bool ig_batch_id_valid(const char *id)
{
	size_t n = strlen(id);
	return n == 30 && strncmp(id, "batch_", 6) == 0 && strspn(id + 6, "0123456789abcdef") == 24;
}

struct ig_batch *ig_batch_load(struct ig_batches *bs, const char *id)
{
	/* an id names a directory of data_dir: whoever asks (a client, another
	 * gateway through Redis, a listing), nothing else is read or removed */
	struct ig_batch *b = ig_batch_id_valid(id) ? ig_batch_new(bs, id) : NULL;
	char *path = b ? ig_batch_path(b, "batch.json") : NULL;
	json_t *o = path ? json_load_file(path, 0, NULL) : NULL;
	free(path);
	const char *st = json_string_value(json_object_get(o, "status"));
	int s = -1;
	for (int i = 0; st && i < IG_BATCH_NSTATUS; i++)
		if (strcmp(st, ig_batch_status_names[i]) == 0)
			s = i;
	if (!b || !o || s < 0 || !json_is_string(json_object_get(o, "endpoint"))) {
		json_decref(o);
		ig_batch_drop(b);
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

void ig_batch_take_state(struct ig_batch *b, const struct ig_batch *f)
{
	b->status = f->status;
	b->expiring = f->expiring;
	snprintf(b->owner, sizeof(b->owner), "%s", f->owner);
	snprintf(b->input_file_id, sizeof(b->input_file_id), "%s", f->input_file_id);
	snprintf(b->endpoint, sizeof(b->endpoint), "%s", f->endpoint);
	snprintf(b->output_file_id, sizeof(b->output_file_id), "%s", f->output_file_id);
	snprintf(b->error_file_id, sizeof(b->error_file_id), "%s", f->error_file_id);
	b->ep = f->ep;
	b->created_at = f->created_at;
	b->in_progress_at = f->in_progress_at;
	b->expires_at = f->expires_at;
	b->finalizing_at = f->finalizing_at;
	b->completed_at = f->completed_at;
	b->failed_at = f->failed_at;
	b->expired_at = f->expired_at;
	b->cancelling_at = f->cancelling_at;
	b->cancelled_at = f->cancelled_at;
	b->total = f->total;
	b->completed = f->completed;
	b->failed = f->failed;
	json_decref(b->metadata);
	b->metadata = json_incref(f->metadata);
	json_decref(b->errors);
	b->errors = json_deep_copy(f->errors);
	b->n_problems = (long)json_array_size(b->errors);
}

void ig_batch_insert(struct ig_batches *bs, struct ig_batch *b)
{
	struct ig_list *at = &bs->all; /* before the first one created later */
	for (struct ig_list *l = bs->all.next; l != &bs->all; l = l->next) {
		const struct ig_batch *o = IG_LIST_ELEM(l, struct ig_batch, link);
		if (o->created_at > b->created_at || (o->created_at == b->created_at && strcmp(o->id, b->id) > 0)) {
			at = l;
			break;
		}
	}
	ig_list_append(at, &b->link); /* appended to `at`'s list: just before it */
	bs->nbatches++;
}

struct ig_batch *ig_batch_find(struct ig_batches *bs, const char *id)
{
	struct ig_batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		if (strcmp(b->id, id) == 0)
			return b;
	return NULL;
}

int ig_batch_load_dir(struct ig_batches *bs, struct ig_batch ***out, size_t *n, bool warn)
{
	struct ig_batch **v = NULL;
	size_t cap = 0;
	DIR *d = opendir(bs->dir);
	struct dirent *e;
	*n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "batch_", 6) != 0)
			continue;
		struct ig_batch *b = ig_batch_load(bs, e->d_name);
		if (!b) {
			if (warn)
				ig_log_warn("data_dir: %s/%s is not a batch (no readable batch.json): left alone", bs->dir,
					    e->d_name);
			continue;
		}
		struct ig_batch **nv = ig_grow(v, &cap, *n, sizeof(*v), 16);
		if (!nv) {
			ig_batch_drop(b);
			break;
		}
		v = nv;
		v[(*n)++] = b;
	}
	closedir(d);
	*out = v;
	return 0;
}

void ig_batch_drop(struct ig_batch *b)
{
	if (!b)
		return;
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
	b->ours = !bs->clustered;
	b->fence_fd = -1;
	b->dir = ig_strdupf("%s/%s", bs->dir, id);
	ig_list_init(&b->items);
	ig_list_init(&b->pending);
	ig_list_init(&b->link);
	b->errors = json_array();
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

/* Notes a validation problem (errors.data: OpenAI's {code, message, param,
 * line}); the first IG_BATCH_MAX_ERRORS are kept. */
void ig_batch_problem(struct ig_batch *b, const char *code, long line, const char *param, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ig_batch_vproblem(b->errors, &b->n_problems, code, line, param, fmt, ap);
	va_end(ap);
}

void ig_batch_vproblem(json_t *list, long *n, const char *code, long line, const char *param, const char *fmt,
		       va_list ap)
{
	if ((*n)++ >= IG_BATCH_MAX_ERRORS)
		return;
	char msg[400];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	json_array_append_new(list, json_pack("{s:s, s:s, s:o, s:o}", "code", code, "message", msg, "param",
					      param ? json_string(param) : json_null(), "line",
					      line > 0 ? json_integer(line) : json_null()));
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
	ig_batch_save(b);
	ig_log_info("batch %s: %s (%ld of %ld done, %ld failed)", b->id, ig_batch_status_names[s], b->completed + b->failed,
		    b->total, b->failed);
}

void ig_batch_note_model(struct ig_batch *b, const char *m)
{
	for (size_t i = 0; i < b->n_models; i++)
		if (strcmp(b->models[i], m) == 0)
			return;
	if (b->n_models < IG_BATCH_MAX_MODELS)
		b->models[b->n_models++] = strdup(m);
}

/* The batch's input file on disk (malloc'd), NULL when it was deleted. */
char *ig_batch_input_path(struct ig_batches *bs, const struct ig_batch *b)
{
	const struct ig_file *f = ig_files_find(bs->gw->files, b->input_file_id, b->owner);
	return f ? ig_files_path(bs->gw->files, f->id) : NULL;
}

/* ---------------------------------------------- the fence (batches_lease.c) */

int ig_batch_fence_read(int fd, uint64_t *tok)
{
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n < 0)
		return -1;
	buf[n] = 0;
	*tok = strtoull(buf, NULL, 10);
	return 0;
}

int ig_batch_fence_lock(struct ig_batch *b)
{
	if (!b->bs->clustered)
		return 0;
	if (!b->ours || b->fence_fd < 0)
		return -1;
	uint64_t tok = 0;
	/* not blocking: an exclusive lock is another gateway taking the batch over */
	if (flock(b->fence_fd, LOCK_SH | LOCK_NB) < 0) {
		ig_batch_lose(b, "another gateway is taking it over (its fence is locked)");
		return -1;
	}
	if (ig_batch_fence_read(b->fence_fd, &tok) < 0 || tok != b->fence) {
		flock(b->fence_fd, LOCK_UN);
		char why[120];
		snprintf(why, sizeof(why), "its fence holds token %" PRIu64 ", not ours (%" PRIu64 ")", tok, b->fence);
		ig_batch_lose(b, why);
		return -1;
	}
	return 0;
}

void ig_batch_fence_unlock(struct ig_batch *b)
{
	if (b->bs->clustered && b->fence_fd >= 0)
		flock(b->fence_fd, LOCK_UN);
}

int ig_batch_fence_check_path(const char *dir, uint64_t fence)
{
	if (!fence)
		return -2;
	char *p = ig_strdupf("%s/fence", dir);
	int fd = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
	free(p);
	uint64_t tok = 0;
	if (fd >= 0 && flock(fd, LOCK_SH) == 0 && ig_batch_fence_read(fd, &tok) == 0 && tok == fence)
		return fd;
	if (fd >= 0)
		close(fd);
	errno = EPERM;
	return -1;
}

void ig_batch_lose(struct ig_batch *b, const char *why)
{
	if (!b->ours && !b->taking)
		return;
	ig_log_warn("batch %s: run here no more: %s; its lines in flight here are not written (the gateway that "
		    "runs it sends them)", b->id, why);
	b->ours = false;
	b->taking = false;
	b->fence = 0;
	b->releasing = true; /* the tick aborts the transfers: this may be one's callback */
	b->bs->leases_lost++;
}

