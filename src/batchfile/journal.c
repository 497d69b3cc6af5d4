/* The result files (OUTPUT and the errors file) and resuming from them:
 * appending one line per finished request with one write(2), and finding
 * which ids earlier runs already finished. Not for deciding what to retry
 * or what to send (the programs that link this library). */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "infergate/batchfile.h"

int ig_journal_open(struct ig_journal *j, const char *path, char **err)
{
	struct stat st;

	memset(j, 0, sizeof(*j));
	j->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (j->fd < 0) {
		*err = ig_strdupf("%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(j->fd, &st) < 0) {
		*err = ig_strdupf("%s: %s", path, strerror(errno));
		close(j->fd);
		j->fd = -1;
		return -1;
	}
	j->regular = S_ISREG(st.st_mode);
	j->size = j->regular ? st.st_size : 0;
	j->path = strdup(path);
	return 0;
}

int ig_journal_append(struct ig_journal *j, const char *line, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t w = write(j->fd, line + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : ENOSPC;
			/* never leave half a line behind: resume would cut it, but a
			 * later successful write must not be glued to it */
			if (done > 0 && j->regular && ftruncate(j->fd, j->size) < 0)
				ig_log_error("%s: cannot cut a partly written line: %s", j->path, strerror(errno));
			errno = e;
			return -1;
		}
		done += (size_t)w;
	}
	j->size += (off_t)len;
	return 0;
}

int ig_journal_sync(struct ig_journal *j)
{
	if (j->fd < 0 || !j->regular)
		return 0;
	return fdatasync(j->fd);
}

void ig_journal_close(struct ig_journal *j)
{
	if (j->fd >= 0)
		close(j->fd);
	free(j->path);
	memset(j, 0, sizeof(*j));
	j->fd = -1;
}

char *ig_journal_errors_path(const char *output)
{
	size_t n = strlen(output);
	if (n > 6 && strcmp(output + n - 6, ".jsonl") == 0)
		return ig_strdupf("%.*s.errors.jsonl", (int)(n - 6), output);
	return ig_strdupf("%s.errors.jsonl", output);
}

/* ------------------------------------------------------------ result lines */

static char *dump_line(json_t *obj, size_t *len)
{
	char *s = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!s)
		return NULL;
	size_t n = strlen(s);
	char *line = realloc(s, n + 2);
	if (!line) {
		free(s);
		return NULL;
	}
	line[n] = '\n';
	line[n + 1] = '\0';
	*len = n + 1;
	return line;
}

static json_t *batch_id(void)
{
	char hex[25];
	ig_random_hex(hex, 24);
	return json_sprintf("batch_req_%s", hex);
}

static json_t *response_obj(long status, const char *request_id, json_t *body)
{
	json_t *r = json_object();
	json_object_set_new(r, "status_code", json_integer(status));
	json_object_set_new(r, "request_id", request_id && *request_id ? json_string(request_id) : json_null());
	json_object_set(r, "body", body ? body : json_null());
	return r;
}

char *ig_journal_ok_line(const char *custom_id, long status, const char *request_id, const char *trace_id,
			 json_t *body, size_t *len)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", batch_id());
	json_object_set_new(o, "custom_id", json_string(custom_id));
	if (trace_id)
		json_object_set_new(o, "trace_id", json_string(trace_id));
	json_object_set_new(o, "response", response_obj(status, request_id, body));
	json_object_set_new(o, "error", json_null());
	return dump_line(o, len);
}

char *ig_journal_error_line(const char *custom_id, long status, const char *request_id, const char *trace_id,
			    json_t *body, const char *code, const char *message, size_t *len)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", batch_id());
	json_object_set_new(o, "custom_id", json_string(custom_id));
	if (trace_id)
		json_object_set_new(o, "trace_id", json_string(trace_id));
	json_object_set_new(o, "response", status ? response_obj(status, request_id, body) : json_null());
	json_object_set_new(o, "error", json_pack("{s:s, s:s}", "code", code, "message", message));
	return dump_line(o, len);
}

/* ---------------------------------------------------------------- resume */

void ig_journal_done_init(struct ig_doneset *d)
{
	memset(d, 0, sizeof(*d));
	d->fd[0] = d->fd[1] = -1;
}

void ig_journal_done_free(struct ig_doneset *d)
{
	ig_idset_free(&d->set);
	for (int i = 0; i < 2; i++)
		if (d->fd[i] >= 0)
			close(d->fd[i]);
	for (size_t i = 0; i < d->n_extra; i++)
		free(d->extra[i]);
	free(d->extra);
	free(d->extra_file);
	ig_journal_done_init(d);
}

/* The custom_id of a result line (malloc'd), or NULL when the line is not
 * a JSON object with a string custom_id. */
static char *line_id(const char *p, size_t n)
{
	json_t *o = json_loadb(p, n, 0, NULL);
	json_t *id = json_object_get(o, "custom_id");
	char *s = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
	json_decref(o);
	return s;
}

/* Re-reads the line at off in file f and returns its id (malloc'd) or NULL. */
static char *id_at(struct ig_doneset *d, int f, off_t off)
{
	struct ig_buf b;
	char chunk[4096];
	char *id = NULL;

	ig_buf_init(&b);
	for (;;) {
		ssize_t n = pread(d->fd[f], chunk, sizeof(chunk), off);
		if (n <= 0)
			break;
		char *nl = memchr(chunk, '\n', (size_t)n);
		if (ig_buf_append(&b, chunk, nl ? (size_t)(nl - chunk) : (size_t)n) < 0)
			break;
		if (nl) {
			id = line_id(ig_buf_head(&b), ig_buf_pending(&b));
			break;
		}
		off += n;
	}
	ig_buf_free(&b);
	return id;
}

static int find_extra(const struct ig_doneset *d, const char *id)
{
	for (size_t i = 0; i < d->n_extra; i++)
		if (strcmp(d->extra[i], id) == 0)
			return d->extra_file[i] + 1;
	return 0;
}

/* Records that id (at off in file f) is done. Returns 0 or -1 (memory). */
static int add_done(struct ig_doneset *d, const char *id, int f, off_t off)
{
	uint64_t old;
	int r = ig_idset_add(&d->set, ig_idset_hash(id, strlen(id)), ((uint64_t)off << 1) | (uint64_t)f, &old);
	if (r != 0)
		return r < 0 ? -1 : 0;
	/* the hash is known: the same id again, or a different id (collision) */
	int of = (int)(old & 1);
	char *prev = id_at(d, of, (off_t)(old >> 1));
	int same = prev && strcmp(prev, id) == 0;
	free(prev);
	if (!same) {
		int x = find_extra(d, id);
		if (!x) {
			char **e = realloc(d->extra, (d->n_extra + 1) * sizeof(*e));
			unsigned char *ef = realloc(d->extra_file, d->n_extra + 1);
			if (e)
				d->extra = e;
			if (ef)
				d->extra_file = ef;
			if (!e || !ef)
				return -1;
			d->extra[d->n_extra] = strdup(id);
			d->extra_file[d->n_extra++] = (unsigned char)f;
			d->count[f]++;
			return 0;
		}
		of = x - 1;
	}
	d->dup_lines++;
	if (of != f)
		d->in_both++;
	return 0;
}

static int scan_file(struct ig_doneset *d, int f, const char *path, char **err)
{
	struct stat st;
	FILE *in = NULL;
	char *line = NULL;
	size_t cap = 0;
	off_t off = 0;
	long lineno = 0;
	ssize_t n;

	d->fd[f] = open(path, O_RDONLY | O_CLOEXEC);
	if (d->fd[f] < 0) {
		if (errno == ENOENT)
			return 0;
		*err = ig_strdupf("%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(d->fd[f], &st) < 0 || !S_ISREG(st.st_mode)) {
		/* /dev/null and the like hold no results */
		close(d->fd[f]);
		d->fd[f] = -1;
		return 0;
	}
	in = fopen(path, "re");
	if (!in) {
		*err = ig_strdupf("%s: %s", path, strerror(errno));
		return -1;
	}
	while ((n = getline(&line, &cap, in)) > 0) {
		lineno++;
		int complete = line[n - 1] == '\n';
		char *id = complete ? line_id(line, (size_t)n - 1) : NULL;
		if (!id) {
			int last = fgetc(in) == EOF;
			if (last) /* torn by a crash: cut before appending */
				break;
			*err = ig_strdupf("%s line %ld is not a result line (a JSON object with a "
					  "string \"custom_id\"); is this the right file?", path, lineno);
			goto fail;
		}
		if (add_done(d, id, f, off) < 0) {
			free(id);
			*err = ig_strdupf("out of memory reading %s", path);
			goto fail;
		}
		free(id);
		off += n;
	}
	if (ferror(in)) {
		*err = ig_strdupf("%s: %s", path, strerror(errno));
		goto fail;
	}
	d->valid[f] = off;
	d->size[f] = st.st_size;
	free(line);
	fclose(in);
	return 0;
fail:
	free(line);
	fclose(in);
	return -1;
}

int ig_journal_done_load(struct ig_doneset *d, const char *output, const char *errors, char **err)
{
	if (ig_idset_init(&d->set, 1) < 0) {
		*err = ig_strdupf("out of memory");
		return -1;
	}
	if (scan_file(d, 0, output, err) < 0 || scan_file(d, 1, errors, err) < 0)
		return -1;
	d->count[0] = d->count[1] = 0;
	/* distinct ids per file, first file wins for ids in both */
	for (size_t i = 0; i < d->set.cap; i++)
		if (d->set.keys[i])
			d->count[d->set.vals[i] & 1]++;
	for (size_t i = 0; i < d->n_extra; i++)
		d->count[d->extra_file[i]]++;
	return 0;
}

int ig_journal_done_find(struct ig_doneset *d, const char *id, size_t len)
{
	uint64_t v;
	if (!d->set.keys)
		return 0;
	if (ig_idset_get(&d->set, ig_idset_hash(id, len), &v)) {
		char *prev = id_at(d, (int)(v & 1), (off_t)(v >> 1));
		int same = prev && strlen(prev) == len && memcmp(prev, id, len) == 0;
		free(prev);
		if (same)
			return (int)(v & 1) + 1;
		return find_extra(d, id);
	}
	return 0;
}

int ig_journal_done_cut_torn(struct ig_doneset *d, const char *output, const char *errors, char **err)
{
	const char *paths[2] = {output, errors};
	for (int f = 0; f < 2; f++) {
		if (d->fd[f] < 0 || d->size[f] == d->valid[f])
			continue;
		if (truncate(paths[f], d->valid[f]) < 0) {
			*err = ig_strdupf("cannot cut the torn last line of %s: %s", paths[f], strerror(errno));
			return -1;
		}
		ig_log_info("%s: cut a torn last line of %lld bytes (from an interrupted run)",
			    paths[f], (long long)(d->size[f] - d->valid[f]));
		d->size[f] = d->valid[f];
	}
	return 0;
}
