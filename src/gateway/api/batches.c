/* The Batch API (batches.h): the store of batches (data_dir/batches, each
 * batch.json) and the tick that moves each batch through its life; the
 * work of each stage is in batches_check.c (validating), batches_run.c
 * (in_progress, finalizing) and batches_api.c (the HTTP API), with batch.h
 * between them. A batch's life, as OpenAI's:
 *   validating   every line of its input file read and checked by the
 *                background I/O thread (bio.h), one slice of SLICE_LINES
 *                of one batch at a time, so neither the reactors nor the
 *                thread's other jobs (uploads) wait long: JSON, custom_id
 *                unique ("line-N" when a line has none, as infergate-bulk
 *                names it), url equal to the batch's endpoint, a
 *                model served here (and allowed to the owner's key). Any
 *                problem: failed, with errors.data naming the lines, nothing
 *                sent.
 *   in_progress  the lines sent as requests to the gateway through its own
 *                socket (boot.c: bind_self), X-Infergate-Priority low (or the owner key's
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
 * the input as lines are sent. */
#include "config.h"
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

#include "api/batch.h"
#include "api/batches.h"
#include "api/files.h"
#include "cluster/cluster.h"
#include "conf/conf.h"
#include "gateway.h"
#include "infergate/batchfile.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/bio.h"
#include "net/rx.h"
#include "obs/stats.h"
#include "path/proxy.h"

/* A batch with no job on the I/O thread (b->jobs 0). */
/* A batch on no list, with no job (b->jobs 0): what every stage left. */
void ig_batch_free(struct ig_batch *b)
{
	if (!b)
		return;
	ig_batch_check_free(b->v);
	ig_batch_run_clear(b);
	for (size_t i = 0; i < b->n_models; i++)
		free(b->models[i]);
	json_decref(b->metadata);
	json_decref(b->errors);
	if (b->fence_fd >= 0)
		close(b->fence_fd);
	free(b->dir);
	free(b);
}

/* ------------------------------------------------------------- the store */

size_t ig_batches_inflight(const struct ig_batches *bs)
{
	size_t n = 0;
	const struct ig_batch *b;
	if (!bs)
		return 0;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
		n += ig_batch_running(b);
	return n;
}

int ig_batches_internal(const struct ig_batches *bs, const char *value, char owner[65])
{
	if (!bs || !value || strlen(value) < 33 || value[32] != ' ' || CRYPTO_memcmp(value, bs->secret, 32) != 0)
		return 0;
	snprintf(owner, 65, "%s", value + 33);
	return 1;
}

static int by_created(const void *a, const void *b)
{
	const struct ig_batch *x = *(struct ig_batch *const *)a, *y = *(struct ig_batch *const *)b;
	return x->created_at < y->created_at ? -1 : x->created_at > y->created_at ? 1 : strcmp(x->id, y->id);
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
	if (bs->clustered)
		ig_buf_printf(out, "# HELP infergate_batch_leases_total Batches this gateway took to run (taken) and "
				   "let go because another runs them (lost).\n# TYPE infergate_batch_leases_total counter\n"
				   "infergate_batch_leases_total{event=\"taken\"} %llu\n"
				   "infergate_batch_leases_total{event=\"lost\"} %llu\n",
			      (unsigned long long)bs->takeovers, (unsigned long long)bs->leases_lost);
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

/* Reactor 0's tick (rx.h: ig_rx_every). */
static void batches_timer(struct ig_rx *rx IG_UNUSED, uint64_t now_ms, void *arg)
{
	ig_batches_tick(arg, now_ms);
}

struct ig_batches *ig_batches_open(struct ig_gw *gw, const char *dir, char **err)
{
	struct ig_batches *bs = calloc(1, sizeof(*bs));
	struct ig_batch **v = NULL;
	size_t n = 0;
	if (!bs || !(bs->dir = strdup(dir))) {
		free(bs);
		*err = strdup("out of memory");
		return NULL;
	}
	bs->gw = gw;
	bs->clustered = ig_cluster_configured(gw);
	if (bs->clustered)
		ig_batch_lease_open(bs);
	ig_list_init(&bs->all);
	if (ig_secret_hex(bs->secret, 32) < 0) {
		*err = ig_strdupf("cannot draw the batch runner's secret: %s", strerror(errno));
		goto fail;
	}
	snprintf(bs->mark, sizeof(bs->mark), "%s: %s", IG_BATCH_HEADER, bs->secret);
	if (ig_stats_register(gw, &(struct ig_metrics_source){"batches", report_json, report_prom, bs}) < 0) {
		*err = strdup("out of memory");
		goto fail;
	}
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		*err = ig_strdupf("data_dir: cannot make %s: %s", dir, strerror(errno));
		goto fail;
	}
	if (ig_batch_load_dir(bs, &v, &n, true) < 0) {
		*err = ig_strdupf("data_dir: cannot read %s: %s", dir, strerror(errno));
		goto fail;
	}
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
		if (v[i]->status == IG_BATCH_IN_PROGRESS && !bs->clustered)
			ig_batch_start(bs, v[i]);
	}
	free(v);
	if (resumed && bs->clustered)
		ig_log_info("data_dir: %zu unfinished batch(es): each goes on here or at another gateway, whichever "
			    "takes its lease", resumed);
	else if (resumed)
		ig_log_info("data_dir: %zu unfinished batch(es) go on where they stopped", resumed);
	if (ig_rx_every(gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_BATCHES, batches_timer, bs) < 0) {
		*err = strdup("out of memory");
		goto fail;
	}
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
	ig_stats_unregister(bs->gw, bs);
	struct ig_batch *b, *tmp;
	IG_LIST_FOREACH_SAFE(b, tmp, &bs->all, struct ig_batch, link) {
		if (bs->clustered && b->ours && !ig_batch_finished(b->status))
			ig_cluster_lease_held(bs->gw, b->id, b->fence); /* another takes it at once */
		ig_batch_abort(bs, b);
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
			ig_files_remove(bs->gw->files, bs->gw->bio, b->output_file_id, NULL, NULL);
		if (*b->error_file_id)
			ig_files_remove(bs->gw->files, bs->gw->bio, b->error_file_id, NULL, NULL);
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
	if (bs->clustered)
		ig_batch_lease_tick(bs, now_ms);
	int64_t wall = ig_wall_s();
	struct ig_batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link) {
		if (!b->ours) /* another gateway runs it, or none yet */
			continue;
		if ((b->status == IG_BATCH_VALIDATING || b->status == IG_BATCH_IN_PROGRESS) && b->expires_at && wall >= b->expires_at) {
			/* OpenAI's 24 h window: what finished is kept, the rest is not run */
			ig_batch_abort(bs, b);
			if (b->rd_open)
				ig_corpus_close(&b->rd);
			b->rd_open = false;
			b->expiring = true;
			if (b->status == IG_BATCH_VALIDATING)
				b->in_progress_at = 0;
			if (b->status == IG_BATCH_IN_PROGRESS && !ig_batch_journals_ready(bs, b, false))
				continue;
			ig_batch_finalize(bs, b);
			continue;
		}
		switch (b->status) {
		case IG_BATCH_VALIDATING: /* the slices are handed out below */
			if (ig_batch_check_ready(b))
				ig_batch_check_finish(bs, b);
			break;
		case IG_BATCH_IN_PROGRESS:
			if (ig_batch_journals_ready(bs, b, true) && b->rd_open)
				ig_batch_run(bs, b, now_ms);
			break;
		case IG_BATCH_CANCELLING:
			ig_batch_abort(bs, b);
			/* after a restart: counts from the files, unless they were
			 * already handed over (ids chosen, counts saved) */
			if (b->in_progress_at && !*b->output_file_id && !*b->error_file_id && !ig_batch_journals_ready(bs, b, false))
				break;
			if (!ig_list_empty(&b->pending))
				ig_batch_flush_pending(bs, b);
			if (ig_list_empty(&b->pending))
				ig_batch_finalize(bs, b);
			break;
		case IG_BATCH_FINALIZING: /* after a restart: ids and counts were saved with the status */
			ig_batch_finalize(bs, b);
			break;
		default:
			break;
		}
	}
	if (!bs->gw->stopping)
		ig_batch_check_next(bs);
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag batches_rows[] = {
	{.name = "--batch-max-inflight", .key = "batches.max_inflight", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(batch_max_inflight), .min = 0, .max = 100000, .def = "0", .metavar = "N",
	 .help = "requests of one batch (the Batch API) in flight at most; 0 = its share of the learned slots of "
		 "its model's backends, split between the batches running"},
	{.name = "--batch-retention-s", .key = "batches.retention_s", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(batch_retention_s), .min = 0, .max = 315360000, .def = "2592000", .metavar = "S",
	 .help = "a finished batch and its output and error files are removed S seconds after it ended (30 days, "
		 "as OpenAI); 0 = kept for ever"},
};
const struct ig_conf_part ig_batches_conf = IG_CONF_PART(batches_rows);
