/* The Files API's HTTP side (files.h's ig_files_call): an upload read from
 * its multipart body and handed to the background I/O thread (bio.h) in
 * chunks that the thread writes in order, its fsync and rename, then its
 * metadata; a list, a File object, its content, a DELETE. When too much of
 * an upload waits to be written, the connection is suspended until the
 * writer catches up (so the client's TCP window closes and its memory
 * stays bounded), and the answer is queued when the fsync and rename are
 * done. The shapes are OpenAI's (files.c's store makes the objects).
 * Not here: the store itself (files.c): its list is the reactor's (under
 * gw->lock); the thread touches only the upload's own file. */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/apicall.h"
#include "api/files.h"
#include "gateway.h"
#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/bio.h"
#include "net/rx.h"
#include "path/answer.h"

/* An upload's memory: its body is handed to the writer in chunks of this
 * size; a connection is suspended while more than UPLOAD_HIGH of its own
 * bytes wait to be written, or (with some of its own waiting) more than
 * FILES_HIGH of all uploads' do, and resumed when its own are down to
 * UPLOAD_LOW. So the gateway holds at most about FILES_HIGH plus a chunk
 * and a half per upload, whatever the clients send. */
#define UPLOAD_CHUNK (256 * 1024)
#define UPLOAD_HIGH (4 * UPLOAD_CHUNK)
#define UPLOAD_LOW UPLOAD_CHUNK
#define FILES_HIGH (64u * 1024 * 1024)

/* ---- the requests ---- */

struct files_call {
	struct ig_api_call c;         /* on_request, on_completed; suspended: waits for
				       * the writer, a DELETE's unlinks or a lookup */
	/* an upload, on the reactor (under gw->lock) */
	struct MHD_PostProcessor *pp;
	bool got_file;
	bool in_file;                 /* the last part read was the file's */
	int64_t bytes;                /* of the file, read so far */
	char filename[256];
	char purpose[32];
	size_t purpose_len;
	char *chunk;                  /* bytes read and not handed to the writer yet */
	size_t chunk_len, chunk_cap;
	size_t queued;                /* bytes handed to the writer, not written yet */
	bool started;                 /* a job was handed over: the temporary file may exist */
	bool finishing, finished;     /* the fsync and rename: handed over, done */
	bool kept;                    /* the file is in the store */
	int io_errno;                 /* the first error of the writer (0 none) */
	struct ig_file f;             /* what finishing keeps */
	/* the temporary file: touched only by the call's jobs, in their order */
	int fd;                       /* -1 not open */
	bool wfailed;                 /* a write failed: the later ones do nothing */
	char *tmp;                    /* its path (set before the first job) */
	/* a DELETE: answered when its unlinks are done (ig_files_remove) */
	bool deleting, deleted;
	bool looked;                  /* an id not known here looked up in data_dir (another gateway's) */
	char deleted_id[40];
	int delete_errno;             /* of the unlinks (0: removed) */
	/* an error found while reading the body */
	unsigned err_status;
	char err_msg[160];
	const char *err_param, *err_code;
};

static void fail_body(struct files_call *fc, unsigned status, const char *param, const char *code, const char *msg)
{
	if (fc->err_status)
		return;
	fc->err_status = status;
	fc->err_param = param;
	fc->err_code = code;
	snprintf(fc->err_msg, sizeof(fc->err_msg), "%s", msg);
}

/* The writer's error as the client sees it. */
static void fail_storage(struct files_call *fc, int e)
{
	fail_body(fc, e == ENOSPC ? 507 : 500, NULL, "storage_error",
		  e == ENOSPC ? "the gateway's data_dir is full: nothing was kept" : "the gateway cannot write its data_dir");
}

/* ---- the upload's jobs (bio.h): each runs on the I/O thread, then its
 * done on the call's reactor ---- */

enum upload_op {
	UP_WRITE,   /* append a chunk */
	UP_FINISH,  /* fsync, rename into place, metadata, directory */
	UP_DROP,    /* close and unlink the temporary file */
};

struct upload_job {
	struct ig_bio_job job;
	struct files_call *fc;
	enum upload_op op;
	int err;                      /* errno of the run, 0 ok */
	size_t len;
	char *data;
};

/* The temporary file, created by the first job that needs it. */
static int upload_open(struct files_call *fc)
{
	if (fc->fd < 0)
		fc->fd = open(fc->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	return fc->fd < 0 ? -1 : 0;
}

static void upload_close_unlink(struct files_call *fc)
{
	if (fc->fd >= 0)
		close(fc->fd);
	fc->fd = -1;
	unlink(fc->tmp);
}

static void upload_run(struct ig_bio_job *job)
{
	struct upload_job *uj = IG_CONTAINER_OF(job, struct upload_job, job);
	struct files_call *fc = uj->fc;
	struct ig_files *fs = fc->c.gw->files;
	switch (uj->op) {
	case UP_WRITE:
		if (fc->wfailed)
			break;
		if (upload_open(fc) < 0 || ig_write_all(fc->fd, uj->data, uj->len) < 0) {
			uj->err = errno;
			fc->wfailed = true;
			upload_close_unlink(fc); /* nothing is kept: the rest of the body is dropped */
		}
		break;
	case UP_FINISH: {
		char *path = ig_files_path(fs, fc->f.id);
		if (fc->wfailed) {
			uj->err = EIO; /* not answered with: the write's error came first */
		} else if (upload_open(fc) < 0 || fsync(fc->fd) < 0 || rename(fc->tmp, path) < 0) {
			uj->err = errno;
			upload_close_unlink(fc);
		} else {
			close(fc->fd);
			fc->fd = -1;
			if (ig_files_write_meta(fs, &fc->f) < 0) {
				uj->err = errno ? errno : EIO; /* 0 would be taken for kept */
				unlink(path);
			}
		}
		free(path);
		break;
	}
	case UP_DROP:
		upload_close_unlink(fc);
		break;
	}
}

static void call_free(struct files_call *fc)
{
	free(fc->chunk);
	free(fc->tmp);
	free(fc);
}

/* Whether the upload should wait for its writer. */
static bool too_much_queued(const struct files_call *fc)
{
	return fc->queued > UPLOAD_HIGH || (fc->queued > 0 && ig_files_queue(fc->c.gw->files, 0) > FILES_HIGH);
}

static void upload_done(struct ig_bio_job *job)
{
	struct upload_job *uj = IG_CONTAINER_OF(job, struct upload_job, job);
	struct files_call *fc = uj->fc;
	fc->queued -= uj->len;
	ig_files_queue(fc->c.gw->files, -(long)uj->len);
	if (uj->err && !fc->io_errno) {
		fc->io_errno = uj->err;
		if (uj->op == UP_WRITE)
			fail_storage(fc, uj->err);
		ig_log_error("data_dir: %s %s: %s", uj->op == UP_FINISH ? "keeping" : "writing",
			     uj->op == UP_FINISH ? fc->f.id : fc->tmp, strerror(uj->err));
	}
	if (uj->op == UP_FINISH) {
		fc->finished = true;
		if (!uj->err && ig_files_add(fc->c.gw->files, &fc->f) == 0)
			fc->kept = true;
		else if (!uj->err && !fc->io_errno)
			fc->io_errno = ENOMEM;
	}
	free(uj->data);
	free(uj);
	/* the handler is called again once resumed: with more body, or to
	 * answer when finishing is done */
	if (ig_api_call_job_done(&fc->c, fc->finishing ? fc->finished : fc->io_errno || fc->queued <= UPLOAD_LOW))
		call_free(fc);
}

/* Hands a job to the I/O thread (data: malloc'd, taken). Returns 0, or -1
 * out of memory (data freed). */
static int upload_submit(struct files_call *fc, enum upload_op op, char *data, size_t len)
{
	struct upload_job *uj = calloc(1, sizeof(*uj));
	if (!uj) {
		free(data);
		return -1;
	}
	*uj = (struct upload_job){.fc = fc, .op = op, .len = len, .data = data};
	uj->job.run = upload_run;
	uj->job.done = upload_done;
	uj->job.bytes = len;
	ig_api_call_job(&fc->c);
	fc->queued += len;
	ig_files_queue(fc->c.gw->files, (long)len);
	fc->started = true;
	ig_bio_submit(fc->c.gw->bio, &uj->job);
	return 0;
}

/* The bytes read so far go to the writer. Returns 0 or -1 (out of memory). */
static int upload_flush(struct files_call *fc)
{
	if (!fc->chunk_len)
		return 0;
	char *data = fc->chunk;
	size_t len = fc->chunk_len;
	fc->chunk = NULL;
	fc->chunk_len = fc->chunk_cap = 0;
	return upload_submit(fc, UP_WRITE, data, len);
}

/* Whatever was written goes (an error, a refused upload, a client gone). */
static void drop_upload(struct files_call *fc)
{
	free(fc->chunk);
	fc->chunk = NULL;
	fc->chunk_len = fc->chunk_cap = 0;
	if (fc->started && !fc->kept && upload_submit(fc, UP_DROP, NULL, 0) < 0)
		ig_log_error("data_dir: out of memory: %s stays until the next start", fc->tmp);
	fc->started = false;
}

/* The post processor's callback: "purpose" kept, "file" copied into the
 * chunk the writer gets next; anything else ignored. MHD_NO stops the
 * parsing. */
static enum MHD_Result field(void *cls, enum MHD_ValueKind kind IG_UNUSED, const char *key, const char *filename,
			     const char *content_type IG_UNUSED, const char *transfer_encoding IG_UNUSED,
			     const char *data, uint64_t off, size_t size)
{
	struct files_call *fc = cls;
	struct ig_files *fs = fc->c.gw->files;
	bool was_file = fc->in_file;
	fc->in_file = strcmp(key, "file") == 0;
	if (strcmp(key, "purpose") == 0) {
		if (off == 0 && fc->purpose_len) { /* a second purpose part would be appended to the first */
			fail_body(fc, 400, "purpose", "invalid_value", "Invalid 'purpose': given more than once.");
			drop_upload(fc);
			return MHD_NO;
		}
		if (fc->purpose_len + size >= sizeof(fc->purpose)) {
			fail_body(fc, 400, "purpose", "invalid_value", "Invalid value for 'purpose': only 'batch' is taken here.");
			return MHD_NO;
		}
		memcpy(fc->purpose + fc->purpose_len, data, size);
		fc->purpose_len += size;
		return MHD_YES;
	}
	if (strcmp(key, "file") != 0)
		return MHD_YES;
	/* A part starts at offset 0; MHD may call twice at 0 for one part (the
	 * first time with no bytes, before they arrived), so another file part
	 * is one at 0 after the file's bytes or after another field. (An empty
	 * file part right before another is not told apart: nothing of it would
	 * be kept anyway.) Its bytes would be appended to the first file's. */
	if (off == 0 && fc->got_file && (fc->bytes > 0 || !was_file)) {
		fail_body(fc, 400, "file", "invalid_value",
			  "Invalid 'file': more than one file part; an upload is one file (upload each on its own).");
		drop_upload(fc);
		return MHD_NO;
	}
	if (off == 0 && !fc->tmp) {
		const char *name = filename ? filename : "upload.jsonl";
		json_t *encodable = json_string(name); /* jansson's UTF-8 check: the name goes into JSON */
		json_decref(encodable);
		if (!encodable || strlen(name) >= sizeof(fc->filename)) {
			fail_body(fc, 400, "file", "invalid_filename",
				  !encodable ? "Invalid 'file': its filename is not UTF-8 text."
					     : "Invalid 'file': its filename is longer than 255 bytes.");
			return MHD_NO;
		}
		char rnd[17];
		ig_random_hex(rnd, 16);
		fc->tmp = ig_strdupf("%s/.upload-%s", ig_files_dir(fs), rnd);
		fc->got_file = true;
		snprintf(fc->filename, sizeof(fc->filename), "%s", name);
		for (char *c = fc->filename; *c; c++) /* names go to JSON and logs */
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '_';
	}
	if (!fc->tmp || fc->io_errno)
		return MHD_NO;
	long max = fc->c.gw->cfg->files_max_bytes;
	if (fc->bytes + (int64_t)size > max) {
		char msg[160];
		snprintf(msg, sizeof(msg), "the file is larger than %ld bytes (files.max_bytes)", max);
		fail_body(fc, 413, "file", "file_too_large", msg);
		drop_upload(fc);
		return MHD_NO;
	}
	while (size) {
		size_t n = UPLOAD_CHUNK - fc->chunk_len < size ? UPLOAD_CHUNK - fc->chunk_len : size;
		if (fc->chunk_len + n > fc->chunk_cap) { /* grows to what MHD hands over at once, usually */
			size_t cap = fc->chunk_len + n;
			char *c = realloc(fc->chunk, cap);
			if (!c) {
				fail_storage(fc, ENOMEM);
				drop_upload(fc);
				return MHD_NO;
			}
			fc->chunk = c;
			fc->chunk_cap = cap;
		}
		memcpy(fc->chunk + fc->chunk_len, data, n);
		fc->chunk_len += n;
		fc->bytes += (int64_t)n;
		data += n;
		size -= n;
		if (fc->chunk_len == UPLOAD_CHUNK && upload_flush(fc) < 0) {
			fail_storage(fc, ENOMEM);
			drop_upload(fc);
			return MHD_NO;
		}
	}
	return MHD_YES;
}

/* Its answer, counted and logged as the gateway's own (answer.h). */
#define TO(fc) (&(struct ig_answer_to){(fc)->c.gw, (fc)->c.conn, (fc)->c.method, (fc)->c.url})

static enum MHD_Result answer(struct files_call *fc, unsigned status, struct MHD_Response *r, size_t len)
{
	MHD_add_response_header(r, "Cache-Control", "no-store");
	return ig_answer(TO(fc), status, r, len);
}

static enum MHD_Result answer_json(struct files_call *fc, unsigned status, json_t *j)
{
	return ig_answer_json(TO(fc), status, j);
}

/* An OpenAI-shaped error; allow: a 405's methods. */
static enum MHD_Result answer_error_allow(struct files_call *fc, unsigned status, const char *param, const char *code,
					  const char *msg, const char *allow)
{
	return ig_answer_error(TO(fc), status, param, code, allow, false, msg);
}

static enum MHD_Result answer_error(struct files_call *fc, unsigned status, const char *param, const char *code,
				    const char *msg)
{
	return answer_error_allow(fc, status, param, code, msg, NULL);
}

static enum MHD_Result not_found(struct files_call *fc, const char *id)
{
	char msg[120];
	snprintf(msg, sizeof(msg), "No such File object: %.80s", id);
	return answer_error(fc, 404, "id", NULL, msg);
}

/* The end of an upload's body: checked, then the fsync and rename handed
 * to the I/O thread with the connection suspended; called again when that
 * is done (upload_done resumes it), to answer. */
static enum MHD_Result finish_upload(struct files_call *fc)
{
	if (fc->finished) {
		if (!fc->kept) {
			fail_storage(fc, fc->io_errno);
			return answer_error(fc, fc->err_status, fc->err_param, fc->err_code, fc->err_msg);
		}
		ig_log_info("file %s: %lld bytes from '%s'", fc->f.id, (long long)fc->f.bytes, fc->f.filename);
		return answer_json(fc, 200, ig_files_json(&fc->f));
	}
	if (fc->finishing) { /* not resumed by us: wait on */
		ig_api_call_suspend(&fc->c);
		return MHD_YES;
	}
	/* MHD_NO: the body ended inside a part, before the closing boundary
	 * (a torn upload is not a file) */
	if (fc->pp && MHD_destroy_post_processor(fc->pp) != MHD_YES)
		fail_body(fc, 400, "file", "invalid_body", "the multipart/form-data body ends before its closing boundary");
	fc->pp = NULL;
	if (fc->io_errno)
		fail_storage(fc, fc->io_errno);
	if (!fc->err_status && !fc->got_file)
		fail_body(fc, 400, "file", "missing_required_parameter",
			  "Missing required parameter: 'file' (multipart/form-data, with 'purpose').");
	if (!fc->err_status && (!fc->purpose_len || strcmp(fc->purpose, "batch") != 0))
		fail_body(fc, 400, "purpose", fc->purpose_len ? "invalid_value" : "missing_required_parameter",
			  fc->purpose_len ? "Invalid value for 'purpose': only 'batch' is taken here."
					  : "Missing required parameter: 'purpose'.");
	if (!fc->err_status) {
		fc->f = (struct ig_file){.bytes = fc->bytes, .created_at = ig_wall_s()};
		ig_files_new_id(fc->f.id);
		snprintf(fc->f.owner, sizeof(fc->f.owner), "%s", fc->c.owner);
		snprintf(fc->f.filename, sizeof(fc->f.filename), "%s", fc->filename);
		snprintf(fc->f.purpose, sizeof(fc->f.purpose), "%s", fc->purpose);
		if (upload_flush(fc) == 0 && upload_submit(fc, UP_FINISH, NULL, 0) == 0) {
			fc->finishing = true;
			if (!fc->finished) { /* no thread (bio NULL): already done */
				ig_api_call_suspend(&fc->c);
				return MHD_YES;
			}
			return finish_upload(fc);
		}
		fail_storage(fc, ENOMEM);
	}
	drop_upload(fc);
	return answer_error(fc, fc->err_status, fc->err_param, fc->err_code, fc->err_msg);
}

/* GET /v1/files: OpenAI's list (purpose, limit 1..10000, after, order). */
static enum MHD_Result list(struct files_call *fc)
{
	struct ig_files *fs = fc->c.gw->files;
	const char *purpose = MHD_lookup_connection_value(fc->c.conn, MHD_GET_ARGUMENT_KIND, "purpose");
	const char *after = MHD_lookup_connection_value(fc->c.conn, MHD_GET_ARGUMENT_KIND, "after");
	const char *order = MHD_lookup_connection_value(fc->c.conn, MHD_GET_ARGUMENT_KIND, "order");
	const char *lim = MHD_lookup_connection_value(fc->c.conn, MHD_GET_ARGUMENT_KIND, "limit");
	long limit = 10000;
	char *err = NULL;
	if (lim && ig_parse_long("limit", lim, 1, 10000, &limit, &err) < 0) {
		enum MHD_Result ret = answer_error(fc, 400, "limit", "invalid_value", err);
		free(err);
		return ret;
	}
	if (order && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)
		return answer_error(fc, 400, "order", "invalid_value", "Invalid value for 'order': expected 'asc' or 'desc'.");
	bool asc = order && strcmp(order, "asc") == 0;
	struct ig_files_pager pg = {.after = after, .limit = limit, .data = json_array()};
	ig_files_page(fs, fc->c.owner, purpose, asc, &pg);
	return answer_json(fc, 200, ig_files_list_page(&pg));
}

static enum MHD_Result content(struct files_call *fc, const struct ig_file *f)
{
	char *path = ig_files_path(fc->c.gw->files, f->id);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	free(path);
	if (fd < 0)
		return answer_error(fc, 500, NULL, "storage_error", "the file's bytes cannot be read from data_dir");
	/* MHD sends it from the descriptor (sendfile) and closes it. */
	struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)f->bytes, fd);
	if (!r) {
		close(fd);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/octet-stream");
	return answer(fc, 200, r, (size_t)f->bytes);
}

/* A DELETE's unlinks are done: answer it (the handler runs again once
 * resumed), or free the call if its client left. */
static void delete_done(void *arg, int err)
{
	struct files_call *fc = arg;
	fc->deleted = true;
	fc->delete_errno = err;
	if (ig_api_call_job_done(&fc->c, true))
		call_free(fc);
}

static enum MHD_Result deleted(struct files_call *fc)
{
	if (fc->delete_errno) {
		char msg[200];
		snprintf(msg, sizeof(msg), "%s is no longer listed, but data_dir refused to remove it (%s): it may be "
			 "listed again after a restart", fc->deleted_id, strerror(fc->delete_errno));
		return answer_error(fc, 500, NULL, "storage_error", msg);
	}
	return answer_json(fc, 200, json_pack("{s:s, s:s, s:b}", "id", fc->deleted_id, "object", "file", "deleted", 1));
}

/* "deleted": true means gone from the disk, not only from the list: the
 * answer waits for the unlinks (a crash before them would list the file
 * again at the next start). */
static enum MHD_Result delete_file(struct files_call *fc, const struct ig_file *f)
{
	snprintf(fc->deleted_id, sizeof(fc->deleted_id), "%s", f->id);
	ig_api_call_job(&fc->c);
	if (ig_files_remove(fc->c.gw->files, fc->c.gw->bio, fc->deleted_id, delete_done, fc) < 0) {
		(void)ig_api_call_job_done(&fc->c, false); /* the job that never started */
		return answer_error(fc, 500, NULL, "storage_error", "the file cannot be removed from data_dir");
	}
	fc->deleting = true;
	if (fc->deleted) /* no I/O thread (the unit tests): done already */
		return deleted(fc);
	ig_api_call_suspend(&fc->c);
	return MHD_YES;
}


static void looked_up(void *arg);

/* The end of the request: answer it. */
static enum MHD_Result respond(struct files_call *fc)
{
	if (fc->deleting)
		return fc->deleted ? deleted(fc) : MHD_YES;
	const char *rest = fc->c.url + strlen("/v1/files");
	bool get = strcmp(fc->c.method, "GET") == 0 || strcmp(fc->c.method, "HEAD") == 0;
	if (!*rest) {
		if (strcmp(fc->c.method, "POST") == 0)
			return finish_upload(fc);
		if (get)
			return list(fc);
		return answer_error_allow(fc, 405, NULL, "method_not_allowed", "this endpoint takes GET, POST", "GET, POST");
	}
	char id[64];
	const char *slash = strchr(rest + 1, '/');
	size_t n = slash ? (size_t)(slash - rest - 1) : strlen(rest + 1);
	snprintf(id, sizeof(id), "%.*s", (int)(n < sizeof(id) ? n : sizeof(id) - 1), rest + 1);
	if (slash && strcmp(slash, "/content") != 0)
		return answer_error(fc, 404, NULL, "not_found", "unknown path under /v1/files");
	if (slash ? !get : !get && strcmp(fc->c.method, "DELETE") != 0)
		return answer_error_allow(fc, 405, NULL, "method_not_allowed",
					  slash ? "this endpoint takes GET" : "this endpoint takes GET, DELETE",
					  slash ? "GET" : "GET, DELETE");
	const struct ig_file *f = ig_files_find(fc->c.gw->files, id, fc->c.owner);
	if (!f && !fc->looked && ig_files_shared(fc->c.gw->files) && ig_files_id_valid(id) && !ig_files_known(fc->c.gw->files, id)) {
		/* stored through another gateway a moment ago? data_dir says (the
		 * answer comes when the handler runs again, resumed by looked_up) */
		fc->looked = true;
		ig_api_call_job(&fc->c);
		ig_api_call_suspend(&fc->c);
		if (ig_files_lookup(fc->c.gw->files, fc->c.gw->bio, id, looked_up, fc) < 0)
			looked_up(fc);
		return MHD_YES;
	}
	if (!f)
		return not_found(fc, id);
	if (slash)
		return content(fc, f);
	if (!get)
		return delete_file(fc, f);
	return answer_json(fc, 200, ig_files_json(f));
}

static enum MHD_Result on_request(struct ig_call *call, struct ig_gw *gw IG_UNUSED, struct MHD_Connection *conn,
				  const char *url IG_UNUSED, const char *method IG_UNUSED, const char *upload_data,
				  size_t *upload_data_size, void **con_cls IG_UNUSED)
{
	struct files_call *fc = IG_CONTAINER_OF(call, struct files_call, c.call);
	if (*upload_data_size) {
		bool upload = strcmp(fc->c.method, "POST") == 0 && strcmp(fc->c.url, "/v1/files") == 0;
		if (upload && !fc->err_status && !fc->pp &&
		    !(fc->pp = MHD_create_post_processor(conn, 8 * 1024, field, fc)))
			fail_body(fc, 400, NULL, "invalid_body",
				  "an upload is multipart/form-data with the fields 'purpose' and 'file'");
		if (upload && fc->pp && !fc->err_status &&
		    MHD_post_process(fc->pp, upload_data, *upload_data_size) != MHD_YES)
			fail_body(fc, 400, NULL, "invalid_body", "the multipart/form-data body cannot be read");
		*upload_data_size = 0; /* the rest of a refused body is read and dropped */
		/* The first bytes go to the writer at once (the temporary file
		 * exists, an error opening it shows early); then a chunk when it
		 * is full: a job per read of MHD's (8 KiB) cost more of the
		 * reactor than the write it saved. */
		if (!fc->err_status && !fc->started && upload_flush(fc) < 0) {
			fail_storage(fc, ENOMEM);
			drop_upload(fc);
		}
		/* The chunk is taken (copied); while the writer is behind, MHD
		 * reads no more of this connection: suspending it, not leaving
		 * the data unconsumed, which in external mode makes MHD call
		 * again at once (a busy loop) and still buffers the socket. */
		if (!fc->err_status && too_much_queued(fc)) {
			ig_api_call_suspend(&fc->c);
		}
		return MHD_YES;
	}
	return respond(fc);
}

static void on_completed(struct ig_call *call, enum MHD_RequestTerminationCode toe IG_UNUSED)
{
	struct files_call *fc = IG_CONTAINER_OF(call, struct files_call, c.call);
	if (fc->pp)
		MHD_destroy_post_processor(fc->pp);
	fc->pp = NULL;
	ig_api_call_completed(&fc->c);
	drop_upload(fc); /* an upload the client left mid-way: its abort is a job */
	if (fc->c.jobs == 0)
		call_free(fc);
}

struct ig_call *ig_files_call(struct ig_gw *gw, struct MHD_Connection *conn, const char *url, const char *method,
			      const char *owner)
{
	struct files_call *fc = calloc(1, sizeof(*fc));
	if (!fc)
		return NULL;
	ig_api_call_init(&fc->c, (struct ig_call){on_request, on_completed, NULL}, gw, conn, url, method, owner);
	fc->fd = -1;
	return &fc->c.call;
}

/* The lookup of an id not known here is over: answer (the handler runs
 * again), or free the call if its client left. */
static void looked_up(void *arg)
{
	struct files_call *fc = arg;
	if (ig_api_call_job_done(&fc->c, true))
		call_free(fc);
}
