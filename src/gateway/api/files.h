/* OpenAI's Files API on the gateway (POST, GET /v1/files, GET and DELETE
 * /v1/files/{id}, GET /v1/files/{id}/content), over data_dir/files: an
 * upload is streamed to disk as it arrives (libmicrohttpd's post
 * processor; the writes on the background I/O thread, bio.h), renamed
 * into place when whole, its metadata written beside it
 * with temp-file-and-rename; content is sent from the file. A file belongs
 * to the API key that uploaded it: others get 404. Not here: batches (which
 * read these files), routing the request to this module (server.c). */
#ifndef IG_FILES_H
#define IG_FILES_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stdint.h>

struct ig_gw;
struct ig_bio;
struct ig_call;
struct ig_files;

/* One stored file, as the API shows it. */
struct ig_file {
	char id[40];        /* "file-" + 24 hex */
	char owner[65];     /* hex SHA-256 of its key, "" without keys */
	char filename[256];
	char purpose[32];
	int64_t bytes;
	int64_t created_at;
};

/* Opens the store in dir (data_dir/files, made if missing): loads every
 * file's metadata, removes uploads a crash left half-written (`shared`:
 * other gateways use dir too, so only those untouched for an hour). NULL with
 * *err (malloc'd) when it cannot. */
struct ig_files *ig_files_open(const char *dir, bool shared, char **err);
void ig_files_free(struct ig_files *fs);
/* The file with this id that owner may see, or NULL. */
const struct ig_file *ig_files_find(const struct ig_files *fs, const char *id, const char *owner);
/* Its path on disk (malloc'd). */
char *ig_files_path(const struct ig_files *fs, const char *id);
/* Takes the file at src (synced, in the same file system) into the store's
 * directory as f->id: renamed into place, its metadata written, f->bytes
 * filled in. Blocks on the disk: for the I/O thread (bio.h); it reads
 * only what ig_files_open fixed. Done again after a crash it finds the
 * bytes already in place. Returns 0, or -1 with errno (ENOSPC: the disk is
 * full). */
int ig_files_adopt_disk(const struct ig_files *fs, const char *src, struct ig_file *f);
/* Lists f in the store (on a reactor, under gw->lock); a no-op when its id
 * is there already. Returns 0, or -1 out of memory. */
int ig_files_add(struct ig_files *fs, const struct ig_file *f);
/* Removes a stored file: from the list at once, from the disk (its
 * metadata first) on the I/O thread, then calls done(arg, errno of the
 * first unlink that failed, or 0) on this reactor (done may be NULL).
 * Returns 0, or -1 with errno (ENOENT: no such file, ENOMEM; done is not
 * called). */
int ig_files_remove(struct ig_files *fs, struct ig_bio *bio, const char *id, void (*done)(void *arg, int err),
		    void *arg);
/* A new file id ("file-" + 24 hex; 40 bytes out). */
void ig_files_new_id(char out[40]);
/* A page of an OpenAI list (the Files and Batch APIs'): the entries after
 * the id `after` (NULL: from the first), `limit` at most. */
struct ig_files_pager {
	const char *after;
	long limit;
	json_t *data;                /* the page's entries */
	bool more;                   /* an entry was left for the next page */
};
/* Offers the next visible entry, by its id. Returns 1: append it to
 * p->data; 0: not on this page (before `after`); -1: the page is full
 * (p->more set), stop. */
int ig_files_pager_take(struct ig_files_pager *p, const char *id);
/* OpenAI's list object around p->data (taken): first_id, last_id of its
 * entries, has_more. */
json_t *ig_files_list_page(struct ig_files_pager *p);
/* Files stored, and their bytes. */
void ig_files_count(const struct ig_files *fs, uint64_t *n, uint64_t *bytes);

/* For the HTTP side (files_api.c). The store's directory (fixed once open). */
const char *ig_files_dir(const struct ig_files *fs);
/* A File object's JSON (OpenAI's shape). */
json_t *ig_files_json(const struct ig_file *f);
/* Writes f's metadata next to its bytes (put in place by rename after an
 * fsync) and syncs the directory. Returns 0, or -1 with errno. On the I/O
 * thread (it reads only what ig_files_open fixed). */
int ig_files_write_meta(const struct ig_files *fs, const struct ig_file *f);
/* Uploads' bytes handed to the I/O thread and not written yet: delta added
 * (negative: written); returns the sum. */
size_t ig_files_queue(struct ig_files *fs, long delta);
/* Whether the store is shared with other gateways (ig_files_set_notify). */
bool ig_files_shared(const struct ig_files *fs);
/* owner's files (of purpose, NULL: any), oldest first when asc, through
 * the pager pg (its data array filled). */
void ig_files_page(const struct ig_files *fs, const char *owner, const char *purpose, bool asc,
		   struct ig_files_pager *pg);

/* The call that answers a /v1/files request for owner (the key's hex
 * digest, "" without keys): its body (an upload) is read by the call.
 * NULL when out of memory. */
struct ig_call *ig_files_call(struct ig_gw *gw, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *owner);

/* Across gateways (a data_dir they all mount). fn is told of each file
 * stored ('f') or deleted ('d') here; the others learn them with
 * ig_files_learn (an id; NULL: every file of dir, after being away) and
 * ig_files_forget. On a reactor, under the lock. */
void ig_files_set_notify(struct ig_files *fs, void (*fn)(void *arg, char kind, const char *id), void *arg);
void ig_files_learn(struct ig_files *fs, struct ig_bio *bio, const char *id);
/* Whether id is a file id ("file-" and 24 hex digits: safe in a path), as
 * the Files API checks a client's. */
bool ig_files_id_valid(const char *id);
void ig_files_forget(struct ig_files *fs, const char *id);
/* Whether id is in the store, whoever owns it. */
bool ig_files_known(const struct ig_files *fs, const char *id);
/* A file stored through another gateway a moment ago may not be known
 * here yet: its metadata is read from dir (I/O thread), then done(arg) on
 * this reactor, the file listed or not. Returns 0, or -1 (alone, not a
 * file id, out of memory: done is not called). */
int ig_files_lookup(struct ig_files *fs, struct ig_bio *bio, const char *id, void (*done)(void *arg), void *arg);

#endif
