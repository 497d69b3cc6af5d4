/* The Batch API's validation (batch.h): a batch's input read and checked
 * by the background I/O thread (bio.h) in slices of SLICE_LINES lines, one
 * slice of one batch at a time across all batches (to the batch that had
 * the fewest), so neither a reactor nor the thread's other jobs wait long:
 * each line's JSON, its url against the batch's endpoint, its custom_id
 * unique (a second look over the whole file at ids whose hash was seen
 * twice, on the thread too). The models are checked on reactor 0 once
 * every line is read, one check per distinct model, against the backends'
 * lists (waiting while some list is unknown: no line is read again).
 * Not here: what a valid batch does next (batches_run.c). */
#include "config.h"
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "api/batch.h"
#include "gateway.h"
#include "infergate/batchfile.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/bio.h"

/* ----------------------------------------------------------- validating */

static void fail_validation(struct ig_batches *bs, struct ig_batch *b)
{
	(void)bs;
	if (b->n_problems > IG_BATCH_MAX_ERRORS)
		ig_batch_problem(b, "too_many_errors", 0, NULL, "%ld more problems not listed", b->n_problems - IG_BATCH_MAX_ERRORS);
	ig_batch_set_status(b, IG_BATCH_FAILED);
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
		const struct ig_key *k = ig_clients_find(&gw->clients, owner);
		if (k && k->ent && !ig_keyset_model_allowed(k->ent, name, served ? model : NULL))
			return 0;
	}
	return 1;
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

void ig_batch_check_free(struct ig_batch_check *v)
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
	va_list ap;
	va_start(ap, fmt);
	ig_batch_vproblem(v->problems, &v->n_problems, code, line, param, fmt, ap);
	va_end(ap);
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
		if (ig_corpus_parse(v->rd.line, v->rd.len, v->rd.lineno, &ig_batch_no_defaults, &l, &err) < 0) {
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
	if (v->ambiguous.len && ig_corpus_duplicates(v->path, &ig_batch_no_defaults, &v->ambiguous, vduplicate_found, v, &err) < 0) {
		vproblem(v, "invalid_file", 0, "input_file_id", "The input file cannot be read: %s.", err);
		free(err);
	}
	ig_idset_free(&v->ids);
	ig_idset_free(&v->ambiguous);
}

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
		ig_batch_check_free(b->v);
		b->v = NULL;
	} else {
		b->total = b->v->total;
	}
	if (!bs->gw->stopping)
		ig_batch_check_next(bs);
}

/* Hands the next slice to the I/O thread: one at a time across all
 * batches, to the batch that had the fewest (so two batches validate
 * side by side, and uploads' writes queue behind one slice at most). */
void ig_batch_check_next(struct ig_batches *bs)
{
	struct ig_batch *b, *pick = NULL;
	if (bs->vbusy)
		return;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		if (b->status == IG_BATCH_VALIDATING && b->ours && !b->expiring && !b->jobs && !(b->v && b->v->eof) &&
		    (!pick || b->vslices < pick->vslices))
			pick = b;
	if (!pick)
		return;
	b = pick;
	if (!b->v) { /* the first slice */
		struct ig_batch_check *v = calloc(1, sizeof(*v));
		char *path = ig_batch_input_path(bs, b);
		if (!v || !path || !(v->problems = json_array()) || !(v->models = calloc(VMODELS, sizeof(*v->models))) ||
		    ig_idset_init(&v->ids, 0) < 0 || ig_idset_init(&v->ambiguous, 0) < 0) {
			ig_batch_problem(b, !path ? "invalid_file" : "server_error", 0, !path ? "input_file_id" : NULL, "%s",
				!path ? "The input file cannot be read: it was deleted." : "out of memory");
			free(path);
			ig_batch_check_free(v);
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
bool ig_batch_check_ready(const struct ig_batch *b)
{
	return !b->jobs && b->v && b->v->eof; /* v is the job's while one runs */
}

void ig_batch_check_finish(struct ig_batches *bs, struct ig_batch *b)
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
			ig_batch_note_model(b, vm->name);
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
	ig_batch_check_free(v);
	b->v = NULL;
	if (b->n_problems) {
		fail_validation(bs, b);
		return;
	}
	ig_batch_start(bs, b);
}

