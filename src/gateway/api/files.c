/* The Files API's store (files.h). On disk, in data_dir/files: FILE_ID
 * (the bytes) and FILE_ID.json (its metadata), each put in place by
 * rename(2) after an fsync, so a crash leaves either the whole file or
 * nothing; uploads in progress are ".upload-*" files, removed at start. The
 * shapes are OpenAI's (the File object, the list with first_id/last_id/
 * has_more, the deletion object). A removal's unlinks and the lookups of
 * files stored through another gateway run on the background I/O thread
 * (bio.h), never on the reactor. The list is the reactor's (under
 * gw->lock). Not here: the HTTP side and the uploads (files_api.c). */
#include "config.h"
#include <dirent.h>
#include <time.h>
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

struct ig_files {
	char *dir;           /* fixed once open: the I/O thread reads it */
	struct ig_file *v;   /* in upload order */
	size_t n, cap;
	size_t queued;       /* uploads' bytes handed to the I/O thread and not written yet
			      * (files_api.c counts them: ig_files_queue) */
	void (*notify)(void *arg, char kind, const char *id); /* across gateways: 'f' stored, 'd' deleted */
	void *notify_arg;
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

/* FILE_ID.json, written to a temporary name, synced, renamed (any thread:
 * it reads only fs->dir). Returns 0 or -1 (errno set). */
static int write_meta(const struct ig_files *fs, const struct ig_file *f)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "id", f->id, "owner", f->owner, "filename", f->filename,
			      "purpose", f->purpose, "bytes", (json_int_t)f->bytes, "created_at", (json_int_t)f->created_at);
	char *text = json_dumps(j, JSON_COMPACT);
	char *tmp = ig_strdupf("%s/.upload-%s.json", fs->dir, f->id), *path = ig_strdupf("%s/%s.json", fs->dir, f->id);
	json_decref(j);
	int rc = -1, fd = text ? open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600) : -1;
	if (!text) /* a name jansson cannot encode (the upload checks its UTF-8 first), or no memory */
		errno = EINVAL;
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

/* Adds f learnt from another gateway, in order of creation; a no-op when
 * it is there. */
static void add_learnt(struct ig_files *fs, const struct ig_file *f)
{
	size_t i = 0;
	for (i = 0; i < fs->n; i++)
		if (strcmp(fs->v[i].id, f->id) == 0)
			return;
	if (add(fs, f) < 0)
		return;
	for (i = fs->n - 1; i > 0 && fs->v[i - 1].created_at > f->created_at; i--)
		fs->v[i] = fs->v[i - 1];
	fs->v[i] = *f;
}

static int by_created(const void *a, const void *b)
{
	const struct ig_file *x = a, *y = b;
	return x->created_at < y->created_at ? -1 : x->created_at > y->created_at ? 1 : strcmp(x->id, y->id);
}

struct ig_files *ig_files_open(const char *dir, bool shared, char **err)
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
			struct stat st;
			/* shared with other gateways: theirs may be under way (written
			 * within the hour) */
			if (!shared || (stat(p, &st) == 0 && st.st_mtime < time(NULL) - 3600)) {
				unlink(p);
				dropped++;
			}
			free(p);
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

int ig_files_adopt_disk(const struct ig_files *fs, const char *src, struct ig_file *f)
{
	struct stat st;
	char *path = ig_files_path(fs, f->id);
	int rc = -1;
	/* a crash after the rename left the bytes in place without metadata */
	if (stat(src, &st) == 0)
		rc = rename(src, path);
	else if (errno == ENOENT)
		rc = stat(path, &st);
	if (rc == 0) {
		f->bytes = st.st_size;
		rc = write_meta(fs, f);
	}
	free(path);
	if (rc == 0)
		sync_dir(fs->dir);
	return rc;
}

int ig_files_add(struct ig_files *fs, const struct ig_file *f)
{
	for (size_t i = 0; i < fs->n; i++)
		if (strcmp(fs->v[i].id, f->id) == 0)
			return 0;
	if (add(fs, f) < 0) {
		errno = ENOMEM;
		return -1;
	}
	if (fs->notify)
		fs->notify(fs->notify_arg, 'f', f->id);
	return 0;
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

const char *ig_files_dir(const struct ig_files *fs)
{
	return fs->dir;
}

json_t *ig_files_json(const struct ig_file *f)
{
	return file_json(f);
}

int ig_files_write_meta(const struct ig_files *fs, const struct ig_file *f)
{
	if (write_meta(fs, f) < 0)
		return -1;
	sync_dir(fs->dir);
	return 0;
}

size_t ig_files_queue(struct ig_files *fs, long delta)
{
	fs->queued = (size_t)((long)fs->queued + delta);
	return fs->queued;
}

bool ig_files_shared(const struct ig_files *fs)
{
	return fs->notify != NULL;
}

void ig_files_page(const struct ig_files *fs, const char *owner, const char *purpose, bool asc,
		   struct ig_files_pager *pg)
{
	for (size_t k = 0; k < fs->n; k++) {
		const struct ig_file *f = &fs->v[asc ? k : fs->n - 1 - k];
		if (strcmp(f->owner, owner) != 0 || (purpose && strcmp(f->purpose, purpose) != 0))
			continue;
		int take = ig_files_pager_take(pg, f->id);
		if (take < 0)
			break;
		if (take)
			json_array_append_new(pg->data, file_json(f));
	}
}

/* A removal's unlinks, on the I/O thread: unlinking a large file can take
 * a while on some file systems. */
struct remove_job {
	struct ig_bio_job job;
	char *meta, *path;
	int err;                      /* the first unlink's errno (0: both gone) */
	void (*done)(void *arg, int err);
	void *arg;
};

static void remove_run(struct ig_bio_job *job)
{
	struct remove_job *rj = IG_CONTAINER_OF(job, struct remove_job, job);
	/* the metadata first: a crash in between leaves bytes no one lists, not a listed file with no bytes */
	if (unlink(rj->meta) < 0 && errno != ENOENT) {
		rj->err = errno;
		ig_log_error("data_dir: removing %s: %s", rj->meta, strerror(errno));
	} else if (unlink(rj->path) < 0 && errno != ENOENT) {
		rj->err = errno;
		ig_log_error("data_dir: removing %s: %s", rj->path, strerror(errno));
	}
}

static void remove_done(struct ig_bio_job *job)
{
	struct remove_job *rj = IG_CONTAINER_OF(job, struct remove_job, job);
	if (rj->done)
		rj->done(rj->arg, rj->err);
	free(rj->meta);
	free(rj->path);
	free(rj);
}

int ig_files_remove(struct ig_files *fs, struct ig_bio *bio, const char *id, void (*done)(void *arg, int err),
		    void *arg)
{
	size_t i = 0;
	while (i < fs->n && strcmp(fs->v[i].id, id) != 0)
		i++;
	if (i == fs->n) {
		errno = ENOENT;
		return -1;
	}
	struct remove_job *rj = calloc(1, sizeof(*rj));
	if (!rj || !(rj->meta = ig_strdupf("%s/%s.json", fs->dir, id)) || !(rj->path = ig_files_path(fs, id))) {
		if (rj)
			free(rj->meta);
		free(rj);
		errno = ENOMEM;
		return -1;
	}
	memmove(&fs->v[i], &fs->v[i + 1], (fs->n - i - 1) * sizeof(*fs->v));
	fs->n--;
	if (fs->notify)
		fs->notify(fs->notify_arg, 'd', id);
	rj->job.run = remove_run;
	rj->job.done = remove_done;
	rj->done = done;
	rj->arg = arg;
	ig_bio_submit(bio, &rj->job);
	return 0;
}

bool ig_files_known(const struct ig_files *fs, const char *id)
{
	for (size_t i = 0; i < fs->n; i++)
		if (strcmp(fs->v[i].id, id) == 0)
			return true;
	return false;
}

/* ---- across gateways ---- */

void ig_files_set_notify(struct ig_files *fs, void (*fn)(void *arg, char kind, const char *id), void *arg)
{
	fs->notify = fn;
	fs->notify_arg = arg;
}

void ig_files_forget(struct ig_files *fs, const char *id)
{
	for (size_t i = 0; fs && i < fs->n; i++)
		if (strcmp(fs->v[i].id, id) == 0) {
			memmove(&fs->v[i], &fs->v[i + 1], (fs->n - i - 1) * sizeof(*fs->v));
			fs->n--;
			return;
		}
}

/* Reading files' metadata that other gateways wrote, on the I/O thread:
 * one id, or all of them (id ""). */
struct learn_job {
	struct ig_bio_job job;
	struct ig_files *fs;
	char id[40];
	struct ig_file *got;
	size_t n;
	void (*cb)(void *arg);      /* a lookup's, called at the end */
	void *arg;
};

static void learn_one(struct learn_job *lj, const char *name)
{
	struct ig_file f;
	struct stat st;
	if (read_meta(lj->fs, name, &f) < 0)
		return;
	char *p = ig_files_path(lj->fs, f.id);
	bool whole = stat(p, &st) == 0 && st.st_size == f.bytes;
	free(p);
	struct ig_file *v = whole ? realloc(lj->got, (lj->n + 1) * sizeof(*v)) : NULL;
	if (v) {
		lj->got = v;
		lj->got[lj->n++] = f;
	}
}

static void learn_run(struct ig_bio_job *job)
{
	struct learn_job *lj = IG_CONTAINER_OF(job, struct learn_job, job);
	if (*lj->id) {
		char name[64];
		snprintf(name, sizeof(name), "%s.json", lj->id);
		learn_one(lj, name);
		return;
	}
	DIR *d = opendir(lj->fs->dir);
	struct dirent *e;
	while (d && (e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (n > 5 && strncmp(e->d_name, "file-", 5) == 0 && strcmp(e->d_name + n - 5, ".json") == 0)
			learn_one(lj, e->d_name);
	}
	if (d)
		closedir(d);
}

static void learn_done(struct ig_bio_job *job)
{
	struct learn_job *lj = IG_CONTAINER_OF(job, struct learn_job, job);
	for (size_t i = 0; i < lj->n; i++)
		add_learnt(lj->fs, &lj->got[i]);
	if (lj->cb)
		lj->cb(lj->arg);
	free(lj->got);
	free(lj);
}

/* A file id: "file-" and 24 hex digits (safe in a path). */
static bool id_valid(const char *id)
{
	return strlen(id) == 29 && strncmp(id, "file-", 5) == 0 && strspn(id + 5, "0123456789abcdef") == 24;
}

bool ig_files_id_valid(const char *id)
{
	return id_valid(id);
}

static int learn(struct ig_files *fs, struct ig_bio *bio, const char *id, void (*cb)(void *), void *arg)
{
	struct learn_job *lj = fs && (!id || id_valid(id)) ? calloc(1, sizeof(*lj)) : NULL;
	if (!lj)
		return -1;
	lj->cb = cb;
	lj->arg = arg;
	lj->fs = fs;
	snprintf(lj->id, sizeof(lj->id), "%s", id ? id : "");
	lj->job.queue = IG_BIO_FILES;
	lj->job.run = learn_run;
	lj->job.done = learn_done;
	ig_bio_submit(bio, &lj->job);
	return 0;
}

void ig_files_learn(struct ig_files *fs, struct ig_bio *bio, const char *id)
{
	learn(fs, bio, id, NULL, NULL);
}

int ig_files_lookup(struct ig_files *fs, struct ig_bio *bio, const char *id, void (*done)(void *arg), void *arg)
{
	if (!fs || !fs->notify || !id_valid(id))
		return -1;
	return learn(fs, bio, id, done, arg);
}
