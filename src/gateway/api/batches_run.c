/* The Batch API's runner (batch.h), on reactor 0's tick and its curl
 * multi: a batch's result files opened (their done-set scanned, on the
 * I/O thread), its lines sent as requests to the gateway itself at class
 * low, each answer appended to output.jsonl or errors.jsonl with one
 * write(2) (on the reactor: no fsync, a page-cache write), and at the end
 * the files synced and handed to the Files store (on the I/O thread).
 * Only reactor 0 touches a batch's transfers; the API on another reactor
 * changes the status and this code acts on it at the next tick. Not here:
 * validation (batches_check.c), the store and the tick (batches.c). */
#include "config.h"
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "api/batch.h"
#include "api/files.h"
#include "gateway.h"
#include "infergate/batchfile.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/bio.h"
#include "net/rx.h"
#include "net/upstream.h"
#include "sched/policy.h"

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
		ig_batch_problem(b, "server_error", 0, NULL, "The gateway cannot keep the results: %s.", oj->err);
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
		ig_batch_problem(b, "invalid_file", 0, "input_file_id", "The input file %s cannot be read: %s.", b->input_file_id,
			oj->err);
		if (b->status == IG_BATCH_IN_PROGRESS)
			ig_batch_set_status(b, IG_BATCH_FAILED);
		goto out;
	}
	if (oj->input && b->status == IG_BATCH_IN_PROGRESS) {
		b->rd = oj->rd;
		b->rd_open = true;
		b->input_done = false;
		ig_batch_save(b);
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
void ig_batch_run_clear(struct ig_batch *b)
{
	if (b->rd_open)
		ig_corpus_close(&b->rd);
	b->rd_open = false;
	if (b->journals_open) {
		ig_journal_close(&b->out);
		ig_journal_close(&b->err);
	}
	b->journals_open = false;
	if (b->done_loaded)
		ig_journal_done_free(&b->done);
	b->done_loaded = false;
	if (b->have_held)
		ig_corpus_line_clear(&b->held);
	b->have_held = false;
	struct pending *p, *tmp;
	IG_LIST_FOREACH_SAFE(p, tmp, &b->pending, struct pending, link)
		free(p);
	ig_list_init(&b->pending);
}

bool ig_batch_journals_ready(struct ig_batches *bs, struct ig_batch *b, bool input)
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
	oj->out = ig_batch_path(b, "output.jsonl");
	oj->errs = ig_batch_path(b, "errors.jsonl");
	ig_journal_done_init(&oj->done);
	if (input && !(oj->input = ig_batch_input_path(bs, b))) {
		ig_batch_problem(b, "invalid_file", 0, "input_file_id", "The input file %s cannot be read: it was deleted.",
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

void ig_batch_start(struct ig_batches *bs, struct ig_batch *b)
{
	if (b->status != IG_BATCH_IN_PROGRESS)
		b->status = IG_BATCH_IN_PROGRESS, b->in_progress_at = ig_wall_s();
	ig_batch_journals_ready(bs, b, true);
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
	if (ig_batch_fence_lock(b) < 0) { /* another gateway runs the batch now: it sends the line again */
		free(line);
		return;
	}
	int rc = first ? ig_journal_append(file ? &b->err : &b->out, line, len) : -1;
	int e = errno;
	ig_batch_fence_unlock(b);
	if (rc == 0) {
		if (file)
			b->failed++, bs->lines_failed++;
		else
			b->completed++, bs->lines_ok++;
		free(line);
		return;
	}
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
void ig_batch_flush_pending(struct ig_batches *bs, struct ig_batch *b)
{
	struct pending *p, *tmp;
	if (ig_batch_fence_lock(b) < 0)
		return;
	IG_LIST_FOREACH_SAFE(p, tmp, &b->pending, struct pending, link) {
		if (ig_journal_append(p->file ? &b->err : &b->out, p->line, p->len) < 0) {
			ig_batch_fence_unlock(b);
			return;
		}
		if (p->file)
			b->failed++, bs->lines_failed++;
		else
			b->completed++, bs->lines_ok++;
		ig_list_del(&p->link);
		free(p);
	}
	ig_batch_fence_unlock(b);
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
		line = ig_journal_ok_line(it->custom_id, status, it->request_id, NULL, body, &len);
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
		line = ig_journal_error_line(it->custom_id, status, it->request_id, NULL, body, code, msg, &len);
		emit(bs, b, 1, line, len);
	}
	json_decref(body);
	item_free(bs, it);
}

/* A line goes to the gateway through its own socket (gw->self_path: a
 * Unix socket in data_dir only its user may open), plain HTTP whatever the
 * listen address speaks (TLS, client certificates); the URL's address is
 * never connected to. */
#define SELF_URL "http://127.0.0.1"

/* Starts (again) the transfer of one line. Returns 0 or -1. */
static int send_item(struct ig_batches *bs, struct item *it)
{
	CURL *e = it->x.easy ? it->x.easy : ig_upstream_easy_get(ig_gw_home(bs->gw));
	if (!e)
		return -1;
	it->x.easy = e;
	it->x.done = item_done;
	it->due_ms = 0;
	char *url = ig_strdupf("%s%s", SELF_URL, it->b->endpoint);
	curl_easy_setopt(e, CURLOPT_URL, url);
	free(url);
	curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, bs->gw->self_path);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, it->body);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(it->body));
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, it->hdrs);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, it);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
	return ig_upstream_start(ig_gw_home(bs->gw), &it->x) == CURLM_OK ? 0 : -1;
}

/* The class a batch's requests go at: low, or its owner key's if higher. */
static const char *class_of(struct ig_batches *bs, const struct ig_batch *b)
{
	const struct ig_key *k = ig_clients_find(&bs->gw->clients, b->owner);
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
	char *h1 = ig_strdupf("%s %s", bs->mark, b->owner);
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

/* Requests in flight the batch may have now: per model, its pool's limits
 * for class low and an eighth more, split between the running batches that
 * use that model. A backend whose capacity is not known yet counts the
 * gateway's ramp for it (capacity.h), which grows while the eighth more
 * keeps it full; one without any limit (no load reports) counts 64. */
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
			long lim = ig_backend_usable(be) ? ig_policy_limit(gw->cluster_view, be, true) : -1;
			if (lim == 0) /* no limit: no load reports to learn one from */
				lim = 64;
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
		if (ig_corpus_parse(b->rd.line, b->rd.len, b->rd.lineno, &ig_batch_no_defaults, l, &err) < 0) {
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
void ig_batch_run(struct ig_batches *bs, struct ig_batch *b, uint64_t now)
{
	struct ig_gw *gw = bs->gw;
	if (!ig_list_empty(&b->pending)) {
		if (now < b->next_flush_ms)
			return;
		b->next_flush_ms = now + 1000;
		ig_batch_flush_pending(bs, b);
		if (!ig_list_empty(&b->pending))
			return;
	}
	if (gw->stopping)
		return;
	struct item *it, *tmp;
	IG_LIST_FOREACH_SAFE(it, tmp, &b->items, struct item, link)
		if (it->due_ms && it->due_ms <= now && send_item(bs, it) < 0)
			item_free(bs, it);
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
		ig_batch_note_model(b, l.model); /* after a restart, the models are learnt again here */
		if (start_line(bs, b, &l) < 0)
			ig_log_error("batch %s: out of memory sending line %ld", b->id, b->rd.lineno);
		ig_corpus_line_clear(&l);
	}
	if (b->input_done && !b->have_held && b->inflight == 0 && ig_list_empty(&b->pending))
		ig_batch_finalize(bs, b);
}

/* Stops every line in flight (their lines are in neither file). */
void ig_batch_abort(struct ig_batches *bs, struct ig_batch *b)
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
	uint64_t fence;             /* our fencing token (0 alone) */
	int err;                    /* errno of the failed step, 0 ok */
	const char *step;
};

static void finalize_run(struct ig_bio_job *job)
{
	struct fjob *fj = IG_CONTAINER_OF(job, struct fjob, job);
	struct ig_batch *b = fj->b;
	const struct ig_files *fs = b->bs->gw->files;
	int fd = ig_batch_fence_check_path(b->dir, fj->fence);
	if (fd == -1) {
		fj->err = EPERM;
		fj->step = "another gateway runs it now";
		return;
	}
	if (fj->sync) { /* the batch writes nothing while it finalizes: its journals are the job's */
		if (ig_journal_sync(&b->out) < 0 || ig_journal_sync(&b->err) < 0) {
			fj->err = errno;
			fj->step = "cannot sync the results";
			goto out;
		}
		ig_journal_close(&b->out);
		ig_journal_close(&b->err);
	}
	if (ig_batch_write_json(b->dir, b->id, fj->text) < 0) {
		fj->err = errno;
		fj->step = "cannot save its state";
		goto out;
	}
	if ((*fj->of.id && ig_files_adopt_disk(fs, fj->out, &fj->of) < 0) ||
	    (*fj->ef.id && ig_files_adopt_disk(fs, fj->errs, &fj->ef) < 0)) {
		fj->err = errno;
		fj->step = "cannot store the result files";
	}
out:
	if (fd >= 0)
		close(fd);
}

static void finalize_done(struct ig_bio_job *job)
{
	struct fjob *fj = IG_CONTAINER_OF(job, struct fjob, job);
	struct ig_batch *b = fj->b;
	struct ig_files *fs = b->bs->gw->files;
	b->jobs--;
	if (fj->sync && !(fj->err && (fj->err == EPERM || strcmp(fj->step, "cannot sync the results") == 0)))
		b->journals_open = false;
	if (!fj->err && ((*fj->of.id && ig_files_add(fs, &fj->of) < 0) || (*fj->ef.id && ig_files_add(fs, &fj->ef) < 0))) {
		fj->err = ENOMEM;
		fj->step = "cannot store the result files";
	}
	if (fj->err == EPERM && fj->fence) {
		ig_batch_lose(b, "its fence holds another gateway's token at finalizing");
	} else if (fj->err) {
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
void ig_batch_finalize(struct ig_batches *bs, struct ig_batch *b)
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
	fj->fence = bs->clustered ? b->fence : 0;
	fj->sync = b->journals_open;
	fj->out = ig_batch_path(b, "output.jsonl");
	fj->errs = ig_batch_path(b, "errors.jsonl");
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

size_t ig_batch_running(const struct ig_batch *b)
{
	size_t n = 0; /* transfers running, not lines waiting to be sent again */
	const struct item *it;
	IG_LIST_FOREACH(it, &b->items, struct item, link)
		n += it->x.running;
	return n;
}

