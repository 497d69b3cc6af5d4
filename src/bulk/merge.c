/* `infergate-bulk merge`: joins the result files of a sharded run (each
 * shard's OUTPUT and the errors file next to it) into one pair, as a single
 * unsharded run would have written it, and proves the join exact: every
 * custom_id of the corpus is named by exactly one result line, none is
 * missing, none is there twice, none is foreign to the corpus. Not for
 * sending (scheduler.c) or resuming (journal.c): a shard with missing ids is
 * finished by rerunning it with --resume, then merging again.
 *
 * Memory does not grow with the text: each corpus id is a 64-bit hash with a
 * 64-bit value (where its line is, how many result lines named it), 16-21
 * bytes per id. A hash match is confirmed by re-reading the corpus line at
 * the stored offset, so a collision can neither hide a missing id nor invent
 * a duplicate; corpus ids whose hashes collide with each other are kept as
 * strings (in practice there are none). */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "bulk.h"

#define MG_SHOW 10 /* ids listed per kind of finding; the rest are counted */

/* The value kept per corpus hash: where its line is (byte offset, or line
 * number when the id is the derived "line-N"), whether it is derived, and
 * how many result lines named it (saturating at 255; extra lines are also
 * counted exactly in dup_lines). */
#define MG_COUNT(v) ((v) & 0xffu)
#define MG_DERIVED(v) (((v) >> 8) & 1u)
#define MG_WHERE(v) ((v) >> 9)
#define MG_VAL(where, derived) (((uint64_t)(where) << 9) | ((uint64_t)(derived) << 8))

struct mg_exact {               /* a corpus id whose hash another corpus id shares */
	char *id;
	long lineno;
	long count;
};

struct mg_file {
	char *path;
	int derived;                /* the errors file next to a given OUTPUT */
	dev_t dev;
	ino_t ino;
	long ok, failed;            /* result lines: error null / error set */
	int torn;                   /* an incomplete last line was ignored */
};

struct mg_finding {             /* one kind of finding: a count and the first MG_SHOW */
	long n;
	struct ig_buf text;         /* one indented line per shown id */
	json_t *ids;                /* the shown ids */
};

struct merge {
	char *input, *output, *summary_json; /* the flags (flags.c frees them) */
	char *errors_flag;          /* --errors as given */
	char *errors;               /* the merged errors file (malloc'd), NULL without --output */
	long shards;                /* --shards N: missing ids per shard; 0 off */
	bool force;
	struct mg_file *files;
	size_t n_files;

	int corpus_fd;
	long corpus_ids;
	struct ig_idset ids;        /* corpus id hash -> MG_VAL(...) + count */
	struct ig_idset ambiguous;  /* hashes that two corpus ids share */
	struct mg_exact *exact;     /* the ids of those hashes, sorted by string */
	size_t n_exact;
	struct ig_buf line;         /* a corpus line re-read for confirmation */

	long ok_lines, err_lines, dup_lines, dup_ids;
	long *missing_per_shard;
	struct ig_errcount *codes;
	size_t n_codes;
	struct mg_finding errs, dups, unknown, missing;
	struct {
		char *id, *where;
	} dup_shown[MG_SHOW];       /* the shown duplicates, for their final count */

	struct ig_buf problems;     /* what makes the merge impossible: exit 2 */
	long n_problems;

	FILE *out, *err_out;        /* temp files, renamed into place when exact */
	char *out_tmp, *err_tmp;
	long written[2];
};

static void mg_problem(struct merge *m, const char *fmt, ...) IG_PRINTF(2, 3);
static void mg_problem(struct merge *m, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (++m->n_problems > 20) /* the rest are counted */
		return;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(&m->problems, "  - %s\n", s);
	free(s);
}

/* Counts one finding and keeps its text while fewer than MG_SHOW are shown. */
static void mg_note(struct mg_finding *f, const char *id, const char *fmt, ...) IG_PRINTF(3, 4);
static void mg_note(struct mg_finding *f, const char *id, const char *fmt, ...)
{
	va_list ap;
	char *s;

	if (++f->n > MG_SHOW)
		return;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(&f->text, "               %s\n", s);
	json_array_append_new(f->ids, json_string(id));
	free(s);
}

static void mg_init(struct merge *m)
{
	memset(m, 0, sizeof(*m));
	m->corpus_fd = -1;
	ig_buf_init(&m->problems);
	ig_buf_init(&m->line);
	struct mg_finding *fs[] = {&m->errs, &m->dups, &m->unknown, &m->missing};
	for (size_t i = 0; i < 4; i++) {
		ig_buf_init(&fs[i]->text);
		fs[i]->ids = json_array();
	}
}

static const struct ig_flags mg_spec; /* the flags, below */

static void mg_free(struct merge *m)
{
	/* temp files still here: the merge was not exact or failed */
	FILE *fs[2] = {m->out, m->err_out};
	char *tmps[2] = {m->out_tmp, m->err_tmp};
	for (int i = 0; i < 2; i++) {
		if (fs[i])
			fclose(fs[i]);
		if (tmps[i])
			unlink(tmps[i]);
		free(tmps[i]);
	}
	for (size_t i = 0; i < m->n_files; i++)
		free(m->files[i].path);
	free(m->files);
	if (m->corpus_fd >= 0)
		close(m->corpus_fd);
	ig_idset_free(&m->ids);
	ig_idset_free(&m->ambiguous);
	for (size_t i = 0; i < m->n_exact; i++)
		free(m->exact[i].id);
	free(m->exact);
	ig_buf_free(&m->line);
	free(m->missing_per_shard);
	free(m->codes);
	struct mg_finding *f[] = {&m->errs, &m->dups, &m->unknown, &m->missing};
	for (size_t i = 0; i < 4; i++) {
		ig_buf_free(&f[i]->text);
		json_decref(f[i]->ids);
	}
	for (size_t i = 0; i < MG_SHOW; i++) {
		free(m->dup_shown[i].id);
		free(m->dup_shown[i].where);
	}
	ig_buf_free(&m->problems);
	free(m->errors);
	ig_flags_free(&mg_spec, m);
	memset(m, 0, sizeof(*m));
	m->corpus_fd = -1;
}

#define M(field) offsetof(struct merge, field)
static const struct ig_flag mg_flag_table[] = {
	{.name = "--input", .type = IG_FLAG_STRING, .off = M(input), .metavar = "FILE",
	 .help = "the corpus the shards ran (required)"},
	{.name = "--output", .type = IG_FLAG_STRING, .off = M(output), .metavar = "FILE",
	 .help = "merged results (without it: check only)"},
	{.name = "--errors", .type = IG_FLAG_STRING, .off = M(errors_flag), .metavar = "FILE",
	 .help = "merged error lines (default: MERGED with .errors.jsonl)"},
	{.name = "--shards", .type = IG_FLAG_LONG, .off = M(shards), .min = 1, .max = 1000000, .metavar = "N",
	 .help = "the run had N shards: count missing ids per shard K/N"},
	{.name = "--force", .type = IG_FLAG_SWITCH, .off = M(force),
	 .help = "replace an existing MERGED and errors file"},
	{.name = "--summary-json", .type = IG_FLAG_STRING, .off = M(summary_json), .metavar = "FILE",
	 .help = "the findings as JSON"},
};

static const struct ig_flags mg_spec = {
	.prog = "infergate-bulk merge",
	.usage = "Usage: infergate-bulk merge --input CORPUS [--output MERGED] [options] SHARD_OUTPUT...\n"
		 "       (infergate-bulk --merge ... is the same)\n"
		 "\nJoins the result files of a sharded run and checks that every custom_id of CORPUS is\n"
		 "named by exactly one line of them: none missing, none twice, none that is not in CORPUS.\n"
		 "The errors file next to each SHARD_OUTPUT (named as a run names it) is read too; errors\n"
		 "files may also be given by name. When the check passes and --output is given, result\n"
		 "lines are copied byte for byte to MERGED and error lines to its errors file, as one\n"
		 "unsharded run would have written them; otherwise nothing is written.\n"
		 "\nOptions:\n",
	.epilog = "\nAn id in an errors file counts as present (its request ended, and failed for good): such\n"
		  "ids are counted and listed, and their lines go to the merged errors file, not to MERGED.\n"
		  "A torn last line (a shard killed and not resumed) is ignored, so its id is missing.\n"
		  "\nExit status: 0 exact: every id exactly once (some possibly in errors files);\n"
		  "  1 ids missing, duplicated or unknown (listed; nothing written); 2 bad flag, unreadable or\n"
		  "  malformed file, or a write failure (nothing written).\n",
	.flags = mg_flag_table,
	.n = sizeof(mg_flag_table) / sizeof(mg_flag_table[0]),
	.unknown = "unknown flag '%s' (see merge --help)",
	.missing = "%s needs a value",
	.positional = NULL, /* the shard outputs */
};

static int mg_has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);
	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Adds a result file unless it is already there. Returns 1 added, 0 the
 * same file was already given, -1 when it cannot be used (a problem). */
static int mg_add_file(struct merge *m, const char *path, int derived)
{
	struct stat st;

	if (stat(path, &st) < 0) {
		if (!derived)
			mg_problem(m, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISDIR(st.st_mode)) {
		mg_problem(m, "%s is a directory", path);
		return -1;
	}
	for (size_t i = 0; i < m->n_files; i++) {
		if (m->files[i].dev == st.st_dev && m->files[i].ino == st.st_ino) {
			if (!derived && !m->files[i].derived)
				mg_problem(m, "%s is given twice (as %s)", path, m->files[i].path);
			else if (!derived) /* given by name after being found next to an OUTPUT */
				m->files[i].derived = 0;
			return 0;
		}
	}
	struct mg_file *f = realloc(m->files, (m->n_files + 1) * sizeof(*f));
	if (!f)
		abort();
	m->files = f;
	m->files[m->n_files++] = (struct mg_file){strdup(path), derived, st.st_dev, st.st_ino, 0, 0, 0};
	return 1;
}

/* Returns 0 to merge, 1 to exit 0 (--help), -1 on a bad flag (*err). The
 * shard outputs are moved to argv[1..*nargs]. */
static int mg_flags(struct merge *m, int argc, char **argv, int *nargs, char **err)
{
	struct ig_buf errs;

	ig_buf_init(&errs);
	int rc = ig_flags_parse(&mg_spec, m, argc, argv, nargs, &errs);
	if (rc != 0) {
		if (rc < 0)
			*err = ig_flags_errors(&errs);
		ig_buf_free(&errs);
		return rc;
	}
	ig_buf_free(&errs);
	if (!m->input) {
		*err = ig_strdupf("--input CORPUS is required (see merge --help)");
		return -1;
	}
	if (*nargs == 0) {
		*err = ig_strdupf("no shard output files given (see merge --help)");
		return -1;
	}
	if (m->errors_flag && !m->output) {
		*err = ig_strdupf("--errors names the merged errors file: it needs --output");
		return -1;
	}
	if (m->output)
		m->errors = m->errors_flag ? strdup(m->errors_flag) : ig_journal_errors_path(m->output);
	for (int i = 1; i <= *nargs; i++)
		if (!*argv[i]) {
			*err = ig_strdupf("an empty file name");
			return -1;
		}
	return 0;
}

/* Every file named: readable, none twice, none written over by accident. */
static void mg_check_files(struct merge *m, int nargs, char **args)
{
	struct stat in, st;

	if (stat(m->input, &in) < 0) {
		mg_problem(m, "--input %s: %s", m->input, strerror(errno));
		memset(&in, 0, sizeof(in));
	}
	for (int i = 0; i < nargs; i++)
		mg_add_file(m, args[i], 0);
	size_t given = m->n_files;
	for (size_t i = 0; i < given; i++) {
		if (mg_has_suffix(m->files[i].path, ".errors.jsonl"))
			continue;
		char *sib = ig_journal_errors_path(m->files[i].path);
		mg_add_file(m, sib, 1);
		free(sib);
	}
	for (size_t i = 0; i < m->n_files; i++)
		if (in.st_ino && m->files[i].dev == in.st_dev && m->files[i].ino == in.st_ino)
			mg_problem(m, "%s is the corpus (--input), not a result file", m->files[i].path);
	if (!m->output)
		return;
	const char *outs[2] = {m->output, m->errors};
	const char *names[2] = {"--output", "--errors"};
	if (strcmp(m->output, m->errors) == 0)
		mg_problem(m, "--output and --errors are the same file");
	for (int k = 0; k < 2; k++) {
		if (stat(outs[k], &st) == 0) {
			int read_too = in.st_ino && st.st_dev == in.st_dev && st.st_ino == in.st_ino;
			for (size_t i = 0; i < m->n_files; i++)
				read_too |= m->files[i].dev == st.st_dev && m->files[i].ino == st.st_ino;
			if (read_too)
				mg_problem(m, "%s %s is also an input of the merge", names[k], outs[k]);
			else if (S_ISDIR(st.st_mode))
				mg_problem(m, "%s %s is a directory", names[k], outs[k]);
			else if (!m->force)
				mg_problem(m, "%s %s exists: give --force to replace it, or choose another file",
					   names[k], outs[k]);
		}
		char *copy = strdup(outs[k]);
		const char *dir = dirname(copy);
		if (access(dir, W_OK | X_OK) < 0)
			mg_problem(m, "%s %s: the directory %s is not writable (%s)", names[k], outs[k], dir,
				   strerror(errno));
		free(copy);
	}
}

static int mg_cmp_exact(const void *a, const void *b)
{
	const struct mg_exact *x = a, *y = b;
	int c = strcmp(x->id, y->id);
	if (c)
		return c;
	return x->lineno < y->lineno ? -1 : x->lineno > y->lineno;
}

/* Second corpus pass, only when two corpus ids share a hash: keeps those ids
 * as strings, and finds real duplicates (the run would have refused them). */
static void mg_load_exact(struct merge *m)
{
	struct ig_corpus_reader r;
	size_t cap = 0;
	char *err = NULL, *id;
	int derived;

	if (ig_corpus_open(&r, m->input, &err) < 0) {
		mg_problem(m, "--input %s", err);
		free(err);
		return;
	}
	while (ig_corpus_next(&r) > 0) {
		if (ig_corpus_line_id(r.line, r.len, r.lineno, &id, &derived, &err) < 0) {
			free(err);
			continue;
		}
		if (!ig_idset_get(&m->ambiguous, ig_idset_hash(id, strlen(id)), NULL)) {
			free(id);
			continue;
		}
		if (m->n_exact == cap) {
			cap = cap ? cap * 2 : 16;
			struct mg_exact *e = realloc(m->exact, cap * sizeof(*e));
			if (!e)
				abort();
			m->exact = e;
		}
		m->exact[m->n_exact++] = (struct mg_exact){id, r.lineno, 0};
	}
	ig_corpus_close(&r);
	qsort(m->exact, m->n_exact, sizeof(*m->exact), mg_cmp_exact);
	size_t keep = 0;
	for (size_t i = 0; i < m->n_exact; i++) {
		if (keep && strcmp(m->exact[keep - 1].id, m->exact[i].id) == 0) {
			mg_problem(m, "--input %s line %ld: duplicate custom_id '%s' (first at line %ld); "
				   "no run could have used this corpus", m->input, m->exact[i].lineno,
				   m->exact[i].id, m->exact[keep - 1].lineno);
			free(m->exact[i].id);
			continue;
		}
		m->exact[keep++] = m->exact[i];
	}
	m->n_exact = keep;
}

/* First corpus pass: every id as a hash, with where its line is. */
static void mg_load_corpus(struct merge *m)
{
	struct ig_corpus_reader r;
	char *err = NULL, *id;
	int derived, got;

	if (ig_corpus_open(&r, m->input, &err) < 0) {
		mg_problem(m, "--input %s", err);
		free(err);
		return;
	}
	if (ig_idset_init(&m->ids, 1) < 0 || ig_idset_init(&m->ambiguous, 0) < 0)
		abort();
	while ((got = ig_corpus_next(&r)) > 0) {
		if (ig_corpus_line_id(r.line, r.len, r.lineno, &id, &derived, &err) < 0) {
			mg_problem(m, "--input %s %s", m->input, err);
			free(err);
			continue;
		}
		uint64_t h = ig_idset_hash(id, strlen(id));
		free(id);
		int added = ig_idset_add(&m->ids, h, MG_VAL(derived ? (uint64_t)r.lineno : (uint64_t)r.offset, derived), NULL);
		if (added == 0)
			added = ig_idset_add(&m->ambiguous, h, 0, NULL) < 0 ? -1 : 0;
		if (added < 0) {
			mg_problem(m, "out of memory at --input line %ld", r.lineno);
			break;
		}
		m->corpus_ids++;
	}
	if (got < 0)
		mg_problem(m, "--input %s: read error: %s", m->input, strerror(errno));
	else if (m->corpus_ids == 0 && m->n_problems == 0)
		mg_problem(m, "--input %s has no request lines", m->input);
	ig_corpus_close(&r);
	if (m->ambiguous.len > 0 && m->n_problems == 0)
		mg_load_exact(m);
	m->corpus_fd = open(m->input, O_RDONLY | O_CLOEXEC);
	if (m->corpus_fd < 0)
		mg_problem(m, "--input %s: %s", m->input, strerror(errno));
}

/* The id of the corpus line at off (malloc'd), or NULL on a read error. */
static char *mg_corpus_id_at(struct merge *m, off_t off)
{
	char chunk[4096];
	char *id = NULL, *err = NULL;
	int derived;

	ig_buf_reset(&m->line);
	for (;;) {
		ssize_t n = pread(m->corpus_fd, chunk, sizeof(chunk), off);
		if (n < 0 && errno == EINTR)
			continue;
		char *nl = n > 0 ? memchr(chunk, '\n', (size_t)n) : NULL;
		if (n > 0 && ig_buf_append(&m->line, chunk, nl ? (size_t)(nl - chunk) : (size_t)n) < 0)
			return NULL;
		if (nl || n <= 0) /* the last line may lack its newline */
			break;
		off += n;
	}
	if (ig_corpus_line_id(ig_buf_head(&m->line), ig_buf_pending(&m->line), 0, &id, &derived, &err) < 0)
		free(err);
	return id;
}

static int mg_cmp_key(const void *key, const void *e)
{
	return strcmp(key, ((const struct mg_exact *)e)->id);
}

/* Which corpus id a result line names. Returns 1 with *val (a hashed id) or
 * *ex (an id of a shared hash) to count it in, 0 when it is not a corpus
 * id, -1 when the corpus cannot be read again. */
static int mg_find(struct merge *m, const char *id, size_t len, uint64_t **val, struct mg_exact **ex)
{
	uint64_t h = ig_idset_hash(id, len);
	int same;

	*val = NULL;
	*ex = NULL;
	if (m->ambiguous.len && ig_idset_get(&m->ambiguous, h, NULL)) {
		if (strlen(id) != len) /* a NUL inside: no corpus id has one */
			return 0;
		*ex = bsearch(id, m->exact, m->n_exact, sizeof(*m->exact), mg_cmp_key);
		return *ex != NULL;
	}
	uint64_t *v = ig_idset_val(&m->ids, h);
	if (!v)
		return 0;
	if (MG_DERIVED(*v)) {
		char name[32];
		int n = snprintf(name, sizeof(name), "line-%llu", (unsigned long long)MG_WHERE(*v));
		same = (size_t)n == len && memcmp(name, id, len) == 0;
	} else {
		char *cid = mg_corpus_id_at(m, (off_t)MG_WHERE(*v));
		if (!cid)
			return -1;
		same = strlen(cid) == len && memcmp(cid, id, len) == 0;
		free(cid);
	}
	if (!same)
		return 0;
	*val = v;
	return 1;
}

static void mg_count_code(struct merge *m, const char *code)
{
	for (size_t i = 0; i < m->n_codes; i++) {
		if (strcmp(m->codes[i].code, code) == 0) {
			m->codes[i].n++;
			return;
		}
	}
	struct ig_errcount *c = realloc(m->codes, (m->n_codes + 1) * sizeof(*c));
	if (!c)
		abort();
	m->codes = c;
	memset(&c[m->n_codes], 0, sizeof(*c));
	snprintf(c[m->n_codes].code, sizeof(c[m->n_codes].code), "%s", code);
	c[m->n_codes++].n = 1;
}

/* Opens the temp files next to MERGED and its errors file. */
static void mg_open_outputs(struct merge *m)
{
	const char *outs[2] = {m->output, m->errors};
	char **tmps[2] = {&m->out_tmp, &m->err_tmp};
	FILE **fs[2] = {&m->out, &m->err_out};
	mode_t um = umask(0);
	umask(um);

	for (int k = 0; k < 2; k++) {
		*tmps[k] = ig_strdupf("%s.tmp.XXXXXX", outs[k]);
		int fd = mkostemp(*tmps[k], O_CLOEXEC);
		if (fd < 0) {
			mg_problem(m, "%s: %s", *tmps[k], strerror(errno));
			free(*tmps[k]);
			*tmps[k] = NULL;
			return;
		}
		if (fchmod(fd, 0666 & ~um) < 0 || !(*fs[k] = fdopen(fd, "w"))) {
			mg_problem(m, "%s: %s", *tmps[k], strerror(errno));
			close(fd);
			return;
		}
	}
}

/* Reads one result file: counts each line's id and copies the line. */
static void mg_scan_file(struct merge *m, struct mg_file *rf)
{
	FILE *in = fopen(rf->path, "re");
	char *line = NULL;
	size_t cap = 0;
	long lineno = 0;
	ssize_t n;

	if (!in) {
		mg_problem(m, "%s: %s", rf->path, strerror(errno));
		return;
	}
	posix_fadvise(fileno(in), 0, 0, POSIX_FADV_SEQUENTIAL);
	while ((n = getline(&line, &cap, in)) > 0) {
		lineno++;
		int complete = line[n - 1] == '\n';
		json_t *o = complete ? json_loadb(line, (size_t)n - 1, 0, NULL) : NULL;
		json_t *idj = json_object_get(o, "custom_id");
		if (!json_is_string(idj)) {
			json_decref(o);
			if (fgetc(in) == EOF) { /* torn by a crash, as resume sees it */
				rf->torn = 1;
				break;
			}
			mg_problem(m, "%s line %ld is not a result line (a JSON object with a string "
				      "\"custom_id\"); is this the right file?", rf->path, lineno);
			break;
		}
		const char *id = json_string_value(idj);
		size_t len = json_string_length(idj);
		json_t *e = json_object_get(o, "error");
		int failed = e && !json_is_null(e);
		uint64_t *v;
		struct mg_exact *ex;
		int found = mg_find(m, id, len, &v, &ex);
		if (found < 0) {
			mg_problem(m, "--input %s: cannot read it again: %s", m->input, strerror(errno));
			json_decref(o);
			break;
		}
		if (failed) {
			json_t *code = json_object_get(e, "code");
			const char *c = json_is_string(code) ? json_string_value(code) : "error";
			m->err_lines++;
			rf->failed++;
			mg_count_code(m, c);
			if (found)
				mg_note(&m->errs, id, "'%s' (%s line %ld: %s)", id, rf->path, lineno, c);
		} else {
			m->ok_lines++;
			rf->ok++;
		}
		if (!found) {
			mg_note(&m->unknown, id, "'%s' (%s line %ld)", id, rf->path, lineno);
		} else {
			long count;
			if (v) {
				if (MG_COUNT(*v) < 255)
					(*v)++;
				count = (long)MG_COUNT(*v);
			} else {
				count = ++ex->count;
			}
			if (count >= 2) {
				m->dup_lines++;
				if (count == 2 && m->dups.n < MG_SHOW) {
					m->dup_shown[m->dups.n].id = strdup(id);
					m->dup_shown[m->dups.n].where = ig_strdupf("%s line %ld", rf->path, lineno);
				}
				if (count == 2) /* the text is written by the report, with the final count */
					mg_note(&m->dups, id, "%s", "");
			}
		}
		if (m->out && found && fwrite(line, 1, (size_t)n, failed ? m->err_out : m->out) != (size_t)n) {
			mg_problem(m, "writing %s: %s", failed ? m->err_tmp : m->out_tmp, strerror(errno));
			json_decref(o);
			break;
		}
		m->written[failed] += found;
		json_decref(o);
	}
	if (ferror(in))
		mg_problem(m, "%s: read error: %s", rf->path, strerror(errno));
	free(line);
	fclose(in);
}

static long mg_count_of(struct merge *m, const char *id)
{
	uint64_t h = ig_idset_hash(id, strlen(id));
	if (m->ambiguous.len && ig_idset_get(&m->ambiguous, h, NULL)) {
		struct mg_exact *ex = bsearch(id, m->exact, m->n_exact, sizeof(*m->exact), mg_cmp_key);
		return ex ? ex->count : 0;
	}
	uint64_t v = 0;
	ig_idset_get(&m->ids, h, &v);
	return (long)MG_COUNT(v);
}

/* Missing and duplicated ids from the counts; when some are missing, a last
 * corpus pass names them (only hashes are kept) and sorts them by shard. */
static void mg_tally(struct merge *m)
{
	long missing = 0;

	for (size_t i = 0; i < m->ids.cap; i++) {
		uint64_t h = m->ids.keys[i];
		if (!h || (m->ambiguous.len && ig_idset_get(&m->ambiguous, h, NULL)))
			continue;
		missing += MG_COUNT(m->ids.vals[i]) == 0;
		m->dup_ids += MG_COUNT(m->ids.vals[i]) >= 2;
	}
	for (size_t i = 0; i < m->n_exact; i++) {
		missing += m->exact[i].count == 0;
		m->dup_ids += m->exact[i].count >= 2;
	}
	if (missing == 0)
		return;
	if (m->shards) {
		m->missing_per_shard = calloc((size_t)m->shards, sizeof(long));
		if (!m->missing_per_shard)
			abort();
	}
	struct ig_corpus_reader r;
	char *err = NULL, *id;
	int derived;
	if (ig_corpus_open(&r, m->input, &err) < 0) {
		free(err);
		m->missing.n = missing;
		return;
	}
	while (ig_corpus_next(&r) > 0) {
		if (ig_corpus_line_id(r.line, r.len, r.lineno, &id, &derived, &err) < 0) {
			free(err);
			continue;
		}
		if (mg_count_of(m, id) == 0) {
			if (m->shards) {
				long k = r.index % m->shards;
				m->missing_per_shard[k]++;
				mg_note(&m->missing, id, "'%s' (corpus line %ld, shard %ld/%ld)", id, r.lineno, k,
					m->shards);
			} else {
				mg_note(&m->missing, id, "'%s' (corpus line %ld, index %ld)", id, r.lineno, r.index);
			}
		}
		free(id);
	}
	ig_corpus_close(&r);
	m->missing.n = missing; /* the pass counted the same ids; the tally is the reference */
}

/* Flushes the temp files to disk and renames them into place, the errors
 * file first: MERGED appearing means the merge is complete. */
static void mg_commit(struct merge *m)
{
	FILE **fs[2] = {&m->err_out, &m->out};
	char **tmps[2] = {&m->err_tmp, &m->out_tmp};
	const char *dest[2] = {m->errors, m->output};

	for (int k = 0; k < 2; k++) {
		FILE *f = *fs[k];
		*fs[k] = NULL;
		int ok = fflush(f) == 0 && !ferror(f) && fdatasync(fileno(f)) == 0;
		int e = errno;
		if (fclose(f) != 0 && ok) {
			ok = 0;
			e = errno;
		}
		if (!ok) {
			mg_problem(m, "writing %s: %s", *tmps[k], strerror(e));
			return;
		}
	}
	for (int k = 0; k < 2; k++) {
		if (rename(*tmps[k], dest[k]) < 0) {
			mg_problem(m, "renaming %s to %s: %s", *tmps[k], dest[k], strerror(errno));
			return;
		}
		free(*tmps[k]);
		*tmps[k] = NULL;
	}
}

static json_t *mg_json(struct merge *m, int exact)
{
	json_t *files = json_array(), *codes = json_object(), *per_shard = json_null();
	for (size_t i = 0; i < m->n_files; i++)
		json_array_append_new(files, json_pack("{s:s, s:I, s:I, s:b}", "path", m->files[i].path,
						       "results", (json_int_t)m->files[i].ok, "errors",
						       (json_int_t)m->files[i].failed, "torn", m->files[i].torn));
	for (size_t i = 0; i < m->n_codes; i++)
		json_object_set_new(codes, m->codes[i].code, json_integer(m->codes[i].n));
	if (m->missing_per_shard) {
		per_shard = json_array();
		for (long k = 0; k < m->shards; k++)
			json_array_append_new(per_shard, json_integer(m->missing_per_shard[k]));
	}
	return json_pack("{s:b, s:s, s:I, s:o, s:I, s:I, s:o, s:{s:I, s:O}, s:{s:I, s:I, s:O}, "
			 "s:{s:I, s:O}, s:{s:I, s:O}, s:o, s:o, s:o, s:I, s:I}",
			 "exact", exact, "input", m->input, "corpus_ids", (json_int_t)m->corpus_ids,
			 "files", files, "result_lines", (json_int_t)m->ok_lines, "error_lines",
			 (json_int_t)m->err_lines, "errors_by_code", codes,
			 "missing", "count", (json_int_t)m->missing.n, "first", m->missing.ids,
			 "duplicated", "ids", (json_int_t)m->dup_ids, "extra_lines", (json_int_t)m->dup_lines,
			 "first", m->dups.ids,
			 "unknown", "lines", (json_int_t)m->unknown.n, "first", m->unknown.ids,
			 "in_errors", "ids", (json_int_t)m->errs.n, "first", m->errs.ids,
			 "missing_per_shard", per_shard,
			 "output", exact && m->output ? json_string(m->output) : json_null(),
			 "errors_output", exact && m->errors ? json_string(m->errors) : json_null(),
			 "written_results", (json_int_t)(exact && m->output ? m->written[0] : 0),
			 "written_errors", (json_int_t)(exact && m->output ? m->written[1] : 0));
}

static void mg_more(FILE *f, const struct mg_finding *fd)
{
	fputs(fd->text.data ? fd->text.data : "", f);
	if (fd->n > MG_SHOW)
		fprintf(f, "               ... and %ld more\n", fd->n - MG_SHOW);
}

static void mg_report(struct merge *m, FILE *f, int exact)
{
	fprintf(f, "infergate-bulk merge: --input %s: %ld ids; %zu result files\n", m->input, m->corpus_ids,
		m->n_files);
	for (size_t i = 0; i < m->n_files; i++)
		fprintf(f, "  %-40s %ld results, %ld errors%s%s\n", m->files[i].path, m->files[i].ok,
			m->files[i].failed, m->files[i].derived ? " (next to a given output)" : "",
			m->files[i].torn ? "; torn last line ignored (an interrupted shard: rerun it with --resume)" : "");
	fprintf(f, "  present      %ld of %ld ids (%ld result lines, %ld error lines)\n",
		m->corpus_ids - m->missing.n, m->corpus_ids, m->ok_lines, m->err_lines);
	fprintf(f, "  in errors    %ld ids", m->errs.n);
	for (size_t i = 0; i < m->n_codes; i++)
		fprintf(f, "%s%s %ld", i ? ", " : " (", m->codes[i].code, m->codes[i].n);
	fprintf(f, "%s\n", m->n_codes ? "): present, their lines go to the merged errors file" : "");
	mg_more(f, &m->errs);
	fprintf(f, "  missing      %ld ids", m->missing.n);
	if (m->missing_per_shard) {
		int first = 1;
		for (long k = 0; k < m->shards; k++) {
			if (!m->missing_per_shard[k])
				continue;
			fprintf(f, "%sshard %ld/%ld: %ld", first ? " (" : ", ", k, m->shards, m->missing_per_shard[k]);
			first = 0;
		}
		if (!first)
			fprintf(f, ")");
	}
	fprintf(f, "\n");
	mg_more(f, &m->missing);
	fprintf(f, "  duplicated   %ld ids (%ld extra lines)\n", m->dup_ids, m->dup_lines);
	for (long i = 0; i < m->dups.n && i < MG_SHOW; i++)
		fprintf(f, "               '%s' %ld times (the second at %s)\n", m->dup_shown[i].id,
			mg_count_of(m, m->dup_shown[i].id), m->dup_shown[i].where);
	if (m->dups.n > MG_SHOW)
		fprintf(f, "               ... and %ld more\n", m->dups.n - MG_SHOW);
	fprintf(f, "  unknown      %ld lines name ids that are not in the corpus\n", m->unknown.n);
	mg_more(f, &m->unknown);
	if (exact && m->output)
		fprintf(f, "exact: each of the %ld ids is in exactly one line; wrote %s (%ld lines) and %s (%ld lines)\n",
			m->corpus_ids, m->output, m->written[0], m->errors, m->written[1]);
	else if (exact)
		fprintf(f, "exact: each of the %ld ids is in exactly one line (check only, nothing written)\n",
			m->corpus_ids);
	else
		fprintf(f, "NOT exact: %ld missing, %ld duplicated (%ld extra lines), %ld unknown lines; "
			   "nothing was written\n", m->missing.n, m->dup_ids, m->dup_lines, m->unknown.n);
	fflush(f);
}

int ig_merge_main(int argc, char **argv)
{
	struct merge m;
	char *err = NULL;
	int rc;

	ig_log_set_ident("infergate-bulk merge");
	mg_init(&m);
	int nargs = 0;
	rc = mg_flags(&m, argc, argv, &nargs, &err);
	if (rc != 0) {
		if (rc < 0) {
			fprintf(stderr, "infergate-bulk merge: %s\n", err);
			free(err);
		}
		rc = rc < 0 ? BULK_EXIT_USAGE : 0;
		goto out;
	}
	mg_check_files(&m, nargs, argv + 1);
	if (m.n_problems == 0)
		mg_load_corpus(&m);
	if (m.n_problems == 0 && m.output)
		mg_open_outputs(&m);
	for (size_t i = 0; i < m.n_files && m.n_problems == 0; i++)
		mg_scan_file(&m, &m.files[i]);
	int exact = 0;
	if (m.n_problems == 0) {
		mg_tally(&m);
		exact = m.missing.n == 0 && m.dup_lines == 0 && m.unknown.n == 0;
		if (exact && m.output)
			mg_commit(&m);
	}
	if (m.n_problems > 0) {
		fprintf(stderr, "infergate-bulk merge: nothing was merged:\n%s", m.problems.data);
		if (m.n_problems > 20)
			fprintf(stderr, "  ... and %ld more problems\n", m.n_problems - 20);
		rc = BULK_EXIT_USAGE;
		goto out;
	}
	mg_report(&m, stdout, exact);
	if (!exact)
		fprintf(stderr, "infergate-bulk merge: not exact: %ld ids missing, %ld duplicated, %ld unknown lines\n",
			m.missing.n, m.dup_ids, m.unknown.n);
	rc = exact ? BULK_EXIT_OK : 1;
	if (m.summary_json) {
		json_t *j = mg_json(&m, exact);
		char *text = json_dumps(j, JSON_INDENT(2));
		json_decref(j);
		if (!text || ig_report_write_atomic(m.summary_json, text) < 0) {
			fprintf(stderr, "infergate-bulk merge: --summary-json %s: %s\n", m.summary_json, strerror(errno));
			rc = rc ? rc : BULK_EXIT_USAGE;
		}
		free(text);
	}
out:
	mg_free(&m);
	return rc;
}
