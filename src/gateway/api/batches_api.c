/* The Batch API's HTTP side (batches.h): POST /v1/batches, GET
 * /v1/batches, GET /v1/batches/{id}, POST /v1/batches/{id}/cancel, in
 * OpenAI's shapes. It runs on whichever reactor holds the client's
 * connection, under gw->lock, and touches only the batches' state
 * (batch.h): never a transfer of a batch or the curl multi they live in
 * (reactor 0's), and nothing that blocks (a new batch's directory and
 * batch.json are made by the I/O thread, bio.h, with the connection
 * suspended meanwhile). What each call does from any reactor:
 *   create  checks the request, hands mkdir + batch.json to the I/O
 *           thread; on its done (this reactor) lists the batch, which
 *           reactor 0's tick starts validating, and answers;
 *   list, get  read the batches under the lock and answer;
 *   cancel  sets the status to cancelling (saved by the I/O thread) and
 *           answers; reactor 0's tick aborts the batch's transfers and
 *           finalizes it.
 * Not here: running a batch (batches.c). */
#include "config.h"
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "api/apicall.h"
#include "api/batch.h"
#include "api/batches.h"
#include "api/files.h"
#include "cluster/cluster.h"
#include "gateway.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"
#include "net/bio.h"
#include "net/rx.h"
#include "path/answer.h"

struct batch_call {
	struct ig_api_call c;         /* suspended: waits for a create or a lookup */
	struct ig_buf body;
	bool too_big;
	/* a create, while the I/O thread makes the batch's directory */
	struct ig_batch *made;        /* listed once made (NULL: failed) */
	bool created;
	int create_errno;
	/* an id not known here, looked up in data_dir (made through another gateway) */
	bool looked, looking;
};

/* Its answer, counted and logged as the gateway's own (answer.h). */
#define TO(bc) (&(struct ig_answer_to){(bc)->c.gw, (bc)->c.conn, (bc)->c.method, (bc)->c.url})

static enum MHD_Result answer_json(struct batch_call *bc, unsigned status, json_t *j)
{
	return ig_answer_json(TO(bc), status, j);
}

static enum MHD_Result answer_error(struct batch_call *bc, unsigned status, const char *param, const char *code,
				    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result answer_error(struct batch_call *bc, unsigned status, const char *param, const char *code,
				    const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *msg = ig_oaerror_vmessagef(fmt, ap);
	va_end(ap);
	enum MHD_Result ret = ig_answer_error(TO(bc), status, param, code, NULL, false, msg ? msg : "out of memory");
	free(msg);
	return ret;
}

/* 405 with the methods the path takes. */
static enum MHD_Result wrong_method(struct batch_call *bc, const char *allow)
{
	char msg[64];
	snprintf(msg, sizeof(msg), "this endpoint takes %s", allow);
	return ig_answer_error(TO(bc), 405, NULL, "method_not_allowed", allow, false, msg);
}

static struct ig_batch *find(struct ig_batches *bs, const char *id, const char *owner)
{
	struct ig_batch *b;
	IG_LIST_FOREACH(b, &bs->all, struct ig_batch, link)
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
	*f = fid ? ig_files_find(bc->c.gw->files, fid, bc->c.owner) : NULL;
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

/* A new batch's directory and batch.json, on the I/O thread. */
struct make_job {
	struct ig_bio_job job;
	struct batch_call *bc;
	struct ig_batch *b;
	char *text;
	int err;
};

static void make_run(struct ig_bio_job *job)
{
	struct make_job *mj = IG_CONTAINER_OF(job, struct make_job, job);
	if (!mj->text)
		mj->err = ENOMEM;
	else if (mkdir(mj->b->dir, 0700) < 0 || ig_batch_write_json(mj->b->dir, mj->b->id, mj->text) < 0)
		mj->err = errno;
	if (mj->err)
		ig_batch_remove_dir(mj->b->dir);
}

static void call_free(struct batch_call *bc)
{
	ig_buf_free(&bc->body);
	free(bc);
}

static void make_done(struct ig_bio_job *job)
{
	struct make_job *mj = IG_CONTAINER_OF(job, struct make_job, job);
	struct batch_call *bc = mj->bc;
	struct ig_batch *b = mj->b;
	struct ig_batches *bs = b->bs;
	if (mj->err) {
		ig_batch_free(b);
		b = NULL;
	} else { /* reactor 0's tick validates it from now on */
		ig_list_append(&bs->all, &b->link);
		bs->nbatches++;
		if (bs->clustered) { /* run where it was made, once its lease is taken (the others
				      * learn of it then) */
			bs->lease_now = true;
			if (bs->gw->threaded)
				ig_rx_wake(ig_gw_home(bs->gw));
		}
		ig_log_info("batch %s: validating %s (%s) for %s", b->id, b->input_file_id, b->endpoint,
			    *b->owner ? "its key" : "anyone");
	}
	bc->made = b;
	bc->create_errno = mj->err;
	bc->created = true;
	free(mj->text);
	free(mj);
	/* suspended by make(): the handler is called again, to answer */
	if (ig_api_call_job_done(&bc->c, true))
		call_free(bc);
}

/* The answer to a create, once the batch is made (or could not be). */
static enum MHD_Result created(struct batch_call *bc)
{
	int e = bc->create_errno;
	if (!bc->made)
		return answer_error(bc, e == ENOSPC ? 507 : 500, NULL, "storage_error", "%s",
				    e == ENOSPC ? "the gateway's data_dir is full" : "the gateway cannot write its data_dir");
	return answer_json(bc, 200, ig_batch_json(bc->made));
}

/* Hands b's making to the I/O thread; the connection waits suspended. */
static enum MHD_Result make(struct batch_call *bc, struct ig_batch *b)
{
	struct make_job *mj = calloc(1, sizeof(*mj));
	if (!mj) {
		ig_batch_free(b);
		return answer_error(bc, 500, NULL, "server_error", "out of memory");
	}
	*mj = (struct make_job){.bc = bc, .b = b, .text = ig_batch_text(b)};
	mj->job.queue = IG_BIO_BATCHES;
	mj->job.run = make_run;
	mj->job.done = make_done;
	ig_api_call_job(&bc->c);
	ig_bio_submit(bc->c.gw->bio, &mj->job);
	if (bc->created) /* no thread: done already */
		return created(bc);
	ig_api_call_suspend(&bc->c);
	return MHD_YES;
}

static void looked_up(void *arg);

static enum MHD_Result create(struct batch_call *bc)
{
	struct ig_gw *gw = bc->c.gw;
	struct ig_batches *bs = gw->batches;
	json_error_t je;
	json_t *req = json_loadb(ig_buf_head(&bc->body), ig_buf_pending(&bc->body), 0, &je);
	if (!json_is_object(req)) {
		json_decref(req);
		return answer_error(bc, 400, NULL, "invalid_json", "The body is not a JSON object: %s.",
				    req ? "another JSON value" : je.text);
	}
	const char *fid = json_string_value(json_object_get(req, "input_file_id"));
	if (fid && !bc->looked && bs->clustered && !ig_files_known(gw->files, fid)) {
		/* uploaded through another gateway a moment ago? data_dir says (the
		 * handler runs again once looked_up resumes it) */
		bc->looked = true;
		bc->looking = true;
		json_decref(req);
		ig_api_call_job(&bc->c);
		ig_api_call_suspend(&bc->c);
		if (ig_files_lookup(gw->files, gw->bio, fid, looked_up, bc) < 0)
			looked_up(bc);
		return MHD_YES;
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
	struct ig_batch *b = ig_batch_new(bs, id);
	if (!b) {
		json_decref(req);
		return answer_error(bc, 500, NULL, "server_error", "out of memory");
	}
	snprintf(b->owner, sizeof(b->owner), "%s", bc->c.owner);
	snprintf(b->input_file_id, sizeof(b->input_file_id), "%s", f->id);
	snprintf(b->endpoint, sizeof(b->endpoint), "%s", ep);
	b->ep = (enum ig_endpoint)epi;
	b->metadata = json_is_object(meta) ? json_incref(meta) : json_null();
	b->created_at = ig_wall_s();
	b->expires_at = b->created_at + IG_BATCH_EXPIRY_S;
	json_decref(req);
	return make(bc, b);
}

/* GET /v1/batches: newest first, OpenAI's after/limit (1..100, 20). */
static enum MHD_Result list(struct batch_call *bc)
{
	struct ig_batches *bs = bc->c.gw->batches;
	const char *after = MHD_lookup_connection_value(bc->c.conn, MHD_GET_ARGUMENT_KIND, "after");
	const char *lim = MHD_lookup_connection_value(bc->c.conn, MHD_GET_ARGUMENT_KIND, "limit");
	long limit = 20;
	char *err = NULL;
	if (lim && ig_parse_long("limit", lim, 1, 100, &limit, &err) < 0) {
		enum MHD_Result ret = answer_error(bc, 400, "limit", "invalid_value", "%s", err);
		free(err);
		return ret;
	}
	struct ig_files_pager pg = {.after = after, .limit = limit, .data = json_array()};
	for (struct ig_list *l = bs->all.prev; l != &bs->all; l = l->prev) {
		const struct ig_batch *b = IG_LIST_ELEM(l, struct ig_batch, link);
		if (strcmp(b->owner, bc->c.owner) != 0)
			continue;
		int take = ig_files_pager_take(&pg, b->id);
		if (take < 0)
			break;
		if (take)
			json_array_append_new(pg.data, ig_batch_json(b));
	}
	return answer_json(bc, 200, ig_files_list_page(&pg));
}

/* Only the status changes here: reactor 0's tick aborts the transfers and
 * finalizes (this may be another reactor's thread). */
static enum MHD_Result cancel(struct batch_call *bc, struct ig_batch *b)
{
	switch (b->status) {
	case IG_BATCH_VALIDATING:
	case IG_BATCH_IN_PROGRESS:
		if (b->bs->clustered && !b->ours)
			ig_batch_cancel_remote(b); /* the gateway that runs it cancels it */
		else
			ig_batch_set_status(b, IG_BATCH_CANCELLING);
		break;
	case IG_BATCH_CANCELLING:
		break;
	default:
		return answer_error(bc, 409, NULL, "batch_not_cancellable",
				    "Cannot cancel a batch with status '%s'.", ig_batch_status_names[b->status]);
	}
	return answer_json(bc, 200, ig_batch_json(b));
}

/* The lookup of an unknown id is over: answer (the handler runs again). */
static void looked_up(void *arg)
{
	struct batch_call *bc = arg;
	bc->looking = false;
	if (ig_api_call_job_done(&bc->c, true))
		call_free(bc);
}

static enum MHD_Result respond(struct batch_call *bc)
{
	if (bc->looking)
		return MHD_YES;
	if (bc->too_big)
		return answer_error(bc, 413, NULL, "request_too_large", "the request body is larger than %ld bytes",
				    bc->c.gw->cfg->max_body_bytes);
	const char *rest = bc->c.url + strlen("/v1/batches");
	bool get = strcmp(bc->c.method, "GET") == 0 || strcmp(bc->c.method, "HEAD") == 0;
	bool post = strcmp(bc->c.method, "POST") == 0;
	if (!*rest) {
		if (bc->created)
			return created(bc);
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
	struct ig_batch *b = find(bc->c.gw->batches, id, bc->c.owner);
	if (!b && !bc->looked && bc->c.gw->batches->clustered && ig_batch_id_valid(id) &&
	    !ig_batch_find(bc->c.gw->batches, id)) {
		/* made through another gateway a moment ago? data_dir says (the answer
		 * comes when the handler runs again, resumed by looked_up) */
		bc->looked = true;
		bc->looking = true;
		ig_api_call_job(&bc->c);
		ig_api_call_suspend(&bc->c);
		if (ig_batch_lookup(bc->c.gw->batches, id, looked_up, bc) < 0)
			looked_up(bc); /* out of memory: a 404 */
		return MHD_YES;
	}
	if (!b)
		return answer_error(bc, 404, "batch_id", NULL, "No such Batch object: %.80s", id);
	if (slash)
		return cancel(bc, b);
	return answer_json(bc, 200, ig_batch_json(b));
}

static enum MHD_Result on_request(struct ig_call *call, struct ig_gw *gw IG_UNUSED, struct MHD_Connection *conn IG_UNUSED,
				  const char *url IG_UNUSED, const char *method IG_UNUSED, const char *upload_data,
				  size_t *upload_data_size, void **con_cls IG_UNUSED)
{
	struct batch_call *bc = IG_CONTAINER_OF(call, struct batch_call, c.call);
	if (*upload_data_size) {
		if (bc->body.len + *upload_data_size > (size_t)bc->c.gw->cfg->max_body_bytes)
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
	struct batch_call *bc = IG_CONTAINER_OF(call, struct batch_call, c.call);
	if (ig_api_call_completed(&bc->c)) /* else make_done or looked_up frees it */
		call_free(bc);
}

struct ig_call *ig_batches_call(struct ig_gw *gw, struct MHD_Connection *conn, const char *url, const char *method,
				const char *owner)
{
	struct batch_call *bc = calloc(1, sizeof(*bc));
	if (!bc)
		return NULL;
	ig_api_call_init(&bc->c, (struct ig_call){on_request, on_completed, NULL}, gw, conn, url, method, owner);
	ig_buf_init(&bc->body);
	return &bc->c.call;
}

