/* The Files API (files.h). On disk, in data_dir/files: FILE_ID (the bytes)
 * and FILE_ID.json (its metadata), each put in place by rename(2) after an
 * fsync, so a crash leaves either the whole file or nothing; uploads in
 * progress are ".upload-*" files, removed at start. The shapes are OpenAI's
 * (the File object, the list with first_id/last_id/has_more, the deletion
 * object, "No such File object: ID" for an unknown id). */
#include "config.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infergate/httpd.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "files.h"
#include "gateway.h"

struct ig_files {
	char *dir;
	struct ig_file *v;   /* in upload order */
	size_t n, cap;
};

/* ---- the store ---- */

char *ig_files_path(const struct ig_files *fs, const char *id)
{
	return ig_strdupf("%s/%s", fs->dir, id);
}

static json_t *file_json(const struct ig_file *f)
{
	return json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:s, s:n, s:n}", "id", f->id, "object", "file", "bytes",
			 (json_int_t)f->bytes, "created_at", (json_int_t)f->created_at, "filename", f->filename,
			 "purpose", f->purpose, "status", "processed", "status_details", "expires_at");
}

/* Makes a directory's entries durable (a rename in it). */
static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* FILE_ID.json, written to a temporary name, synced, renamed. Returns 0 or
 * -1 (errno set). */
static int write_meta(const struct ig_files *fs, const struct ig_file *f)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "id", f->id, "owner", f->owner, "filename", f->filename,
			      "purpose", f->purpose, "bytes", (json_int_t)f->bytes, "created_at", (json_int_t)f->created_at);
	char *text = json_dumps(j, JSON_COMPACT);
	char *tmp = ig_strdupf("%s/.upload-%s.json", fs->dir, f->id), *path = ig_strdupf("%s/%s.json", fs->dir, f->id);
	json_decref(j);
	int rc = -1, fd = text ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
	if (fd >= 0) {
		rc = ig_write_all(fd, text, strlen(text)) == 0 && fsync(fd) == 0 ? 0 : -1;
		int e = errno;
		close(fd);
		if (rc == 0)
			rc = rename(tmp, path);
		else
			errno = e;
		if (rc < 0) {
			e = errno;
			unlink(tmp);
			errno = e;
		}
	}
	free(text);
	free(tmp);
	free(path);
	return rc;
}

/* One FILE_ID.json read back; 0, or -1 when it is not one of ours. */
static int read_meta(const struct ig_files *fs, const char *name, struct ig_file *f)
{
	char *path = ig_strdupf("%s/%s", fs->dir, name);
	json_t *j = json_load_file(path, 0, NULL);
	free(path);
	const char *id = json_string_value(json_object_get(j, "id")), *owner = json_string_value(json_object_get(j, "owner"));
	const char *fn = json_string_value(json_object_get(j, "filename")), *pu = json_string_value(json_object_get(j, "purpose"));
	json_t *b = json_object_get(j, "bytes"), *c = json_object_get(j, "created_at");
	int rc = -1;
	if (id && owner && fn && pu && json_is_integer(b) && json_is_integer(c) && strlen(id) < sizeof(f->id) &&
	    strlen(owner) < sizeof(f->owner) && strlen(fn) < sizeof(f->filename) && strlen(pu) < sizeof(f->purpose)) {
		*f = (struct ig_file){.bytes = json_integer_value(b), .created_at = json_integer_value(c)};
		strcpy(f->id, id);
		strcpy(f->owner, owner);
		strcpy(f->filename, fn);
		strcpy(f->purpose, pu);
		rc = 0;
	}
	json_decref(j);
	return rc;
}

static int add(struct ig_files *fs, const struct ig_file *f)
{
	struct ig_file *v = ig_grow(fs->v, &fs->cap, fs->n, sizeof(*v), 64);
	if (!v)
		return -1;
	fs->v = v;
	fs->v[fs->n++] = *f;
	return 0;
}

static int by_created(const void *a, const void *b)
{
	const struct ig_file *x = a, *y = b;
	return x->created_at < y->created_at ? -1 : x->created_at > y->created_at ? 1 : strcmp(x->id, y->id);
}

struct ig_files *ig_files_open(const char *dir, char **err)
{
	struct ig_files *fs = calloc(1, sizeof(*fs));
	if (!fs || !(fs->dir = strdup(dir))) {
		free(fs);
		*err = strdup("out of memory");
		return NULL;
	}
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
	size_t dropped = 0;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		struct ig_file f;
		if (strncmp(e->d_name, ".upload-", 8) == 0) { /* a crash's half-written upload */
			char *p = ig_strdupf("%s/%s", dir, e->d_name);
			unlink(p);
			free(p);
			dropped++;
		} else if (n > 5 && strcmp(e->d_name + n - 5, ".json") == 0 && read_meta(fs, e->d_name, &f) == 0) {
			struct stat st;
			char *p = ig_files_path(fs, f.id);
			if (stat(p, &st) == 0 && st.st_size == f.bytes && add(fs, &f) < 0) {
				free(p);
				closedir(d);
				*err = strdup("out of memory");
				goto fail;
			}
			free(p);
		}
	}
	closedir(d);
	if (fs->n) /* qsort(NULL, 0, ...) is undefined */
		qsort(fs->v, fs->n, sizeof(*fs->v), by_created);
	if (dropped)
		ig_log_warn("data_dir: removed %zu upload(s) a stop left unfinished in %s", dropped, dir);
	return fs;
fail:
	ig_files_free(fs);
	return NULL;
}

void ig_files_free(struct ig_files *fs)
{
	if (!fs)
		return;
	free(fs->v);
	free(fs->dir);
	free(fs);
}

const struct ig_file *ig_files_find(const struct ig_files *fs, const char *id, const char *owner)
{
	for (size_t i = 0; fs && i < fs->n; i++)
		if (strcmp(fs->v[i].id, id) == 0)
			return strcmp(fs->v[i].owner, owner) == 0 ? &fs->v[i] : NULL;
	return NULL;
}

void ig_files_count(const struct ig_files *fs, uint64_t *n, uint64_t *bytes)
{
	*n = fs ? fs->n : 0;
	*bytes = 0;
	for (size_t i = 0; fs && i < fs->n; i++)
		*bytes += (uint64_t)fs->v[i].bytes;
}

void ig_files_new_id(char out[40])
{
	memcpy(out, "file-", 5);
	ig_random_hex(out + 5, 24);
}

int ig_files_adopt(struct ig_files *fs, const char *src, const char *id, const char *owner, const char *filename,
		   const char *purpose)
{
	for (size_t i = 0; i < fs->n; i++)
		if (strcmp(fs->v[i].id, id) == 0)
			return 0;
	struct stat st;
	struct ig_file f = {.created_at = ig_wall_s()};
	snprintf(f.id, sizeof(f.id), "%s", id);
	snprintf(f.owner, sizeof(f.owner), "%s", owner);
	snprintf(f.filename, sizeof(f.filename), "%s", filename);
	snprintf(f.purpose, sizeof(f.purpose), "%s", purpose);
	char *path = ig_files_path(fs, id);
	int rc = -1;
	/* a crash after the rename left the bytes in place without metadata */
	if (stat(src, &st) == 0)
		rc = rename(src, path);
	else if (errno == ENOENT)
		rc = stat(path, &st);
	if (rc == 0) {
		f.bytes = st.st_size;
		rc = write_meta(fs, &f);
	}
	if (rc == 0 && add(fs, &f) < 0) {
		errno = ENOMEM;
		rc = -1;
	}
	free(path);
	if (rc == 0)
		sync_dir(fs->dir);
	return rc;
}

int ig_files_pager_take(struct ig_files_pager *p, const char *id)
{
	if (p->after) { /* still before the page: its start is the entry after this id */
		if (strcmp(id, p->after) == 0)
			p->after = NULL;
		return 0;
	}
	if ((long)json_array_size(p->data) == p->limit) {
		p->more = true;
		return -1;
	}
	return 1;
}

json_t *ig_files_list_page(struct ig_files_pager *p)
{
	json_t *data = p->data;
	size_t n = json_array_size(data);
	json_t *first = n ? json_incref(json_object_get(json_array_get(data, 0), "id")) : json_null();
	json_t *last = n ? json_incref(json_object_get(json_array_get(data, n - 1), "id")) : json_null();
	p->data = NULL;
	return json_pack("{s:s, s:o, s:o, s:o, s:b}", "object", "list", "data", data, "first_id", first, "last_id", last,
			 "has_more", p->more);
}

/* ---- the requests ---- */

struct files_call {
	struct ig_call call;          /* on_request, on_completed */
	struct ig_gw *gw;
	struct MHD_Connection *conn;
	char owner[65];
	char method[8];
	char url[200];
	/* an upload */
	struct MHD_PostProcessor *pp;
	int fd;                       /* the temporary file, -1 none */
	char *tmp;                    /* its path */
	bool got_file;
	int64_t bytes;
	char filename[256];
	char purpose[32];
	size_t purpose_len;
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

static void drop_upload(struct files_call *fc)
{
	if (fc->fd >= 0)
		close(fc->fd);
	fc->fd = -1;
	if (fc->tmp)
		unlink(fc->tmp);
	free(fc->tmp);
	fc->tmp = NULL;
}

/* The post processor's callback: "purpose" kept, "file" written to disk
 * as it comes; anything else ignored. MHD_NO stops the parsing. */
static enum MHD_Result field(void *cls, enum MHD_ValueKind kind IG_UNUSED, const char *key, const char *filename,
			     const char *content_type IG_UNUSED, const char *transfer_encoding IG_UNUSED,
			     const char *data, uint64_t off, size_t size)
{
	struct files_call *fc = cls;
	struct ig_files *fs = fc->gw->files;
	if (strcmp(key, "purpose") == 0) {
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
	if (off == 0 && !fc->tmp) {
		if (fc->got_file) {
			fail_body(fc, 400, "file", "invalid_value", "one file per upload");
			return MHD_NO;
		}
		char rnd[17];
		ig_random_hex(rnd, 16);
		fc->tmp = ig_strdupf("%s/.upload-%s", fs->dir, rnd);
		fc->fd = open(fc->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		fc->got_file = true;
		snprintf(fc->filename, sizeof(fc->filename), "%s", filename ? filename : "upload.jsonl");
		for (char *c = fc->filename; *c; c++) /* names go to JSON and logs */
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '_';
		if (fc->fd < 0) {
			ig_log_error("data_dir: %s: %s", fc->tmp, strerror(errno));
			fail_body(fc, errno == ENOSPC ? 507 : 500, NULL, "storage_error",
				  errno == ENOSPC ? "the gateway's data_dir is full" : "the gateway cannot write its data_dir");
			return MHD_NO;
		}
	}
	if (fc->fd < 0)
		return MHD_NO;
	long max = fc->gw->cfg->files_max_bytes;
	if (fc->bytes + (int64_t)size > max) {
		char msg[160];
		snprintf(msg, sizeof(msg), "the file is larger than %ld bytes (files.max_bytes)", max);
		fail_body(fc, 413, "file", "file_too_large", msg);
		drop_upload(fc);
		return MHD_NO;
	}
	if (ig_write_all(fc->fd, data, size) < 0) {
		int e = errno;
		ig_log_error("data_dir: writing %s: %s", fc->tmp, strerror(e));
		fail_body(fc, e == ENOSPC ? 507 : 500, NULL, "storage_error",
			  e == ENOSPC ? "the gateway's data_dir is full: nothing was kept" : "the gateway cannot write its data_dir");
		drop_upload(fc);
		return MHD_NO;
	}
	fc->bytes += (int64_t)size;
	return MHD_YES;
}

/* Queues an answer, counted and logged as the gateway's own. */
static enum MHD_Result answer(struct files_call *fc, unsigned status, struct MHD_Response *r, size_t len)
{
	struct ig_gw *gw = fc->gw;
	gw->stats.responses[status / 100]++;
	ig_accesslog_local(&gw->alog, fc->conn, fc->method, fc->url, status, len);
	MHD_add_response_header(r, "Cache-Control", "no-store");
	enum MHD_Result ret = MHD_queue_response(fc->conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result answer_json(struct files_call *fc, unsigned status, json_t *j)
{
	char *body = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!body)
		return MHD_NO;
	size_t len = strlen(body);
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	return answer(fc, status, r, len);
}

/* An OpenAI-shaped error; allow: a 405's methods. */
static enum MHD_Result answer_error_allow(struct files_call *fc, unsigned status, const char *param, const char *code,
					  const char *msg, const char *allow)
{
	struct ig_gw *gw = fc->gw;
	gw->stats.responses[status / 100]++;
	ig_accesslog_local(&gw->alog, fc->conn, fc->method, fc->url, status, 0);
	return ig_httpd_error_allow(fc->conn, status, msg, param, code, NULL, allow, false);
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

static enum MHD_Result finish_upload(struct files_call *fc)
{
	struct ig_files *fs = fc->gw->files;
	/* MHD_NO: the body ended inside a part, before the closing boundary
	 * (a torn upload is not a file) */
	if (fc->pp && MHD_destroy_post_processor(fc->pp) != MHD_YES)
		fail_body(fc, 400, "file", "invalid_body", "the multipart/form-data body ends before its closing boundary");
	fc->pp = NULL;
	if (fc->err_status) {
		drop_upload(fc);
		return answer_error(fc, fc->err_status, fc->err_param, fc->err_code, fc->err_msg);
	}
	if (!fc->got_file) {
		drop_upload(fc);
		return answer_error(fc, 400, "file", "missing_required_parameter",
				    "Missing required parameter: 'file' (multipart/form-data, with 'purpose').");
	}
	if (!fc->purpose_len || strcmp(fc->purpose, "batch") != 0) {
		drop_upload(fc);
		return answer_error(fc, 400, "purpose", fc->purpose_len ? "invalid_value" : "missing_required_parameter",
				    fc->purpose_len ? "Invalid value for 'purpose': only 'batch' is taken here."
						    : "Missing required parameter: 'purpose'.");
	}
	struct ig_file f = {.bytes = fc->bytes, .created_at = ig_wall_s()};
	ig_files_new_id(f.id);
	snprintf(f.owner, sizeof(f.owner), "%s", fc->owner);
	snprintf(f.filename, sizeof(f.filename), "%s", fc->filename);
	snprintf(f.purpose, sizeof(f.purpose), "%s", fc->purpose);
	char *path = ig_files_path(fs, f.id);
	int rc = fsync(fc->fd) == 0 && rename(fc->tmp, path) == 0 ? 0 : -1;
	int e = errno;
	if (rc == 0) {
		close(fc->fd);
		fc->fd = -1;
		free(fc->tmp);
		fc->tmp = NULL;
		if ((rc = write_meta(fs, &f)) < 0)
			e = errno;
		if (rc < 0)
			unlink(path);
	}
	free(path);
	if (rc == 0 && add(fs, &f) < 0) {
		rc = -1;
		e = ENOMEM;
	}
	if (rc < 0) {
		ig_log_error("data_dir: keeping %s: %s", f.id, strerror(e));
		drop_upload(fc);
		return answer_error(fc, e == ENOSPC ? 507 : 500, NULL, "storage_error",
				    e == ENOSPC ? "the gateway's data_dir is full: nothing was kept"
						: "the gateway cannot write its data_dir");
	}
	sync_dir(fs->dir);
	ig_log_info("file %s: %lld bytes from '%s'", f.id, (long long)f.bytes, f.filename);
	return answer_json(fc, 200, file_json(&f));
}

/* GET /v1/files: OpenAI's list (purpose, limit 1..10000, after, order). */
static enum MHD_Result list(struct files_call *fc)
{
	struct ig_files *fs = fc->gw->files;
	const char *purpose = MHD_lookup_connection_value(fc->conn, MHD_GET_ARGUMENT_KIND, "purpose");
	const char *after = MHD_lookup_connection_value(fc->conn, MHD_GET_ARGUMENT_KIND, "after");
	const char *order = MHD_lookup_connection_value(fc->conn, MHD_GET_ARGUMENT_KIND, "order");
	const char *lim = MHD_lookup_connection_value(fc->conn, MHD_GET_ARGUMENT_KIND, "limit");
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
	for (size_t k = 0; k < fs->n; k++) {
		const struct ig_file *f = &fs->v[asc ? k : fs->n - 1 - k];
		if (strcmp(f->owner, fc->owner) != 0 || (purpose && strcmp(f->purpose, purpose) != 0))
			continue;
		int take = ig_files_pager_take(&pg, f->id);
		if (take < 0)
			break;
		if (take)
			json_array_append_new(pg.data, file_json(f));
	}
	return answer_json(fc, 200, ig_files_list_page(&pg));
}

static enum MHD_Result content(struct files_call *fc, const struct ig_file *f)
{
	char *path = ig_files_path(fc->gw->files, f->id);
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

int ig_files_remove(struct ig_files *fs, const char *id)
{
	size_t i = 0;
	while (i < fs->n && strcmp(fs->v[i].id, id) != 0)
		i++;
	if (i == fs->n) {
		errno = ENOENT;
		return -1;
	}
	char *path = ig_files_path(fs, id), *meta = ig_strdupf("%s/%s.json", fs->dir, id);
	/* the metadata first: a crash in between leaves bytes no one lists, not a listed file with no bytes */
	int rc = unlink(meta) == 0 || errno == ENOENT ? 0 : -1;
	if (rc == 0)
		unlink(path);
	free(path);
	free(meta);
	if (rc == 0) {
		memmove(&fs->v[i], &fs->v[i + 1], (fs->n - i - 1) * sizeof(*fs->v));
		fs->n--;
	}
	return rc;
}

static enum MHD_Result delete_file(struct files_call *fc, const struct ig_file *f)
{
	char id[sizeof(f->id)];
	snprintf(id, sizeof(id), "%s", f->id);
	if (ig_files_remove(fc->gw->files, id) < 0)
		return answer_error(fc, 500, NULL, "storage_error", "the file cannot be removed from data_dir");
	return answer_json(fc, 200, json_pack("{s:s, s:s, s:b}", "id", id, "object", "file", "deleted", 1));
}

/* The end of the request: answer it. */
static enum MHD_Result respond(struct files_call *fc)
{
	const char *rest = fc->url + strlen("/v1/files");
	bool get = strcmp(fc->method, "GET") == 0 || strcmp(fc->method, "HEAD") == 0;
	if (!*rest) {
		if (strcmp(fc->method, "POST") == 0)
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
	if (slash ? !get : !get && strcmp(fc->method, "DELETE") != 0)
		return answer_error_allow(fc, 405, NULL, "method_not_allowed",
					  slash ? "this endpoint takes GET" : "this endpoint takes GET, DELETE",
					  slash ? "GET" : "GET, DELETE");
	const struct ig_file *f = ig_files_find(fc->gw->files, id, fc->owner);
	if (!f)
		return not_found(fc, id);
	if (slash)
		return content(fc, f);
	if (!get)
		return delete_file(fc, f);
	return answer_json(fc, 200, file_json(f));
}

static enum MHD_Result on_request(struct ig_call *call, struct ig_gw *gw IG_UNUSED, struct MHD_Connection *conn,
				  const char *url IG_UNUSED, const char *method IG_UNUSED, const char *upload_data,
				  size_t *upload_data_size, void **con_cls IG_UNUSED)
{
	struct files_call *fc = IG_CONTAINER_OF(call, struct files_call, call);
	if (*upload_data_size) {
		bool upload = strcmp(fc->method, "POST") == 0 && strcmp(fc->url, "/v1/files") == 0;
		if (upload && !fc->err_status && !fc->pp &&
		    !(fc->pp = MHD_create_post_processor(conn, 8 * 1024, field, fc)))
			fail_body(fc, 400, NULL, "invalid_body",
				  "an upload is multipart/form-data with the fields 'purpose' and 'file'");
		if (upload && fc->pp && !fc->err_status &&
		    MHD_post_process(fc->pp, upload_data, *upload_data_size) != MHD_YES)
			fail_body(fc, 400, NULL, "invalid_body", "the multipart/form-data body cannot be read");
		*upload_data_size = 0; /* the rest of a refused body is read and dropped */
		return MHD_YES;
	}
	return respond(fc);
}

static void on_completed(struct ig_call *call, enum MHD_RequestTerminationCode toe IG_UNUSED)
{
	struct files_call *fc = IG_CONTAINER_OF(call, struct files_call, call);
	if (fc->pp)
		MHD_destroy_post_processor(fc->pp);
	drop_upload(fc); /* an upload the client left mid-way */
	free(fc);
}

struct ig_call *ig_files_call(struct ig_gw *gw, struct MHD_Connection *conn, const char *url, const char *method,
			      const char *owner)
{
	struct files_call *fc = calloc(1, sizeof(*fc));
	if (!fc)
		return NULL;
	fc->call = (struct ig_call){on_request, on_completed};
	fc->gw = gw;
	fc->conn = conn;
	fc->fd = -1;
	snprintf(fc->owner, sizeof(fc->owner), "%s", owner);
	snprintf(fc->method, sizeof(fc->method), "%s", method);
	snprintf(fc->url, sizeof(fc->url), "%s", url);
	return &fc->call;
}
