/* The OpenAI Batch files that infergate-bulk and the gateway's Batch API
 * both read and write (src/batchfile, libigbatchfile.a, linked by both):
 * the input corpus line by line, sets of custom_id hashes, and the
 * append-only result files (the journal) with the set of ids already done
 * that makes a resumed run send each line once. Its messages name files,
 * lines and fields, never a program's flags: a caller that has flags adds
 * their names itself (model_hint below, or a prefix). Not here: deciding
 * what to send, or sending it. */
#ifndef IG_BATCHFILE_H
#define IG_BATCHFILE_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

enum ig_endpoint {
	IG_EP_CHAT,        /* /v1/chat/completions */
	IG_EP_COMPLETIONS, /* /v1/completions */
	IG_EP_EMBEDDINGS,  /* /v1/embeddings (Batch lines only) */
	IG_EP_COUNT,
};

/* --------------------------------------------------------------- corpus */

/* Defaults a line may not set itself (infergate-bulk's flags; the Batch
 * API has none). */
struct ig_corpus_defaults {
	const char *model;
	long max_tokens;        /* -1: leave alone */
	double temperature;
	int have_temperature;
	int endpoint;           /* -1 auto */
	int stream;             /* force "stream": true + include_usage */
	const char *model_hint; /* how the caller's user gives a default model, named in the
				 * message for a line without one (infergate-bulk: "--model");
				 * NULL: there is no way */
};

/* One input line, normalised into a request. */
struct ig_corpus_line {
	char *custom_id;        /* malloc'd */
	enum ig_endpoint ep;
	json_t *body;           /* owned; model/max_tokens/... filled in */
	const char *model;      /* inside body, NULL when none */
	int stream;             /* body.stream is true */
};

/* Parses one input line (without its newline). lineno is 1-based and names
 * the default custom_id "line-N". Returns 0, or -1 with *err (malloc'd). */
int ig_corpus_parse(const char *text, size_t len, long lineno, const struct ig_corpus_defaults *d,
		    struct ig_corpus_line *out, char **err);
void ig_corpus_line_clear(struct ig_corpus_line *l);
const char *ig_corpus_endpoint_path(enum ig_endpoint ep);
const char *ig_corpus_endpoint_name(enum ig_endpoint ep);

/* Sequential reader of request lines: blank lines are skipped (they keep
 * their line numbers but have no index). One line in memory at a time. */
struct ig_corpus_reader {
	FILE *f;
	char *line;
	size_t cap;
	size_t len;
	long lineno;            /* 1-based physical line of the current line */
	long index;             /* 0-based index among request lines */
	off_t offset;           /* byte offset where the current line starts */
	off_t next_offset;      /* where the next physical line starts */
};

/* Returns 0, or -1 with *err ("PATH: why"). */
int ig_corpus_open(struct ig_corpus_reader *r, const char *path, char **err);
/* Returns 1 with the next request line in r->line/r->len, 0 at the end,
 * -1 on a read error (errno set). */
int ig_corpus_next(struct ig_corpus_reader *r);
/* Goes back to the start of the line ig_corpus_next just gave, so the next
 * call gives it again (once: not two lines back). Returns 0, or -1 with
 * errno. */
int ig_corpus_unread(struct ig_corpus_reader *r);
void ig_corpus_close(struct ig_corpus_reader *r);
/* The custom_id of a corpus line as the run names it ("line-N" from lineno
 * when it has none), without building the request. Returns 0 with *id
 * (malloc'd) and *derived (1 when it came from lineno), or -1 with *err. */
int ig_corpus_line_id(const char *text, size_t len, long lineno, char **id, int *derived, char **err);

struct ig_idset;
/* Reads the corpus at path again for the ids whose hash is in ambiguous (a
 * first pass saw it twice) and calls found(ud, line, id, first line) for
 * each line whose custom_id is an exact repeat (a hash collision is not).
 * Returns 0, or -1 with *err (malloc'd: read error, out of memory). */
int ig_corpus_duplicates(const char *path, const struct ig_corpus_defaults *d, const struct ig_idset *ambiguous,
			 void (*found)(void *ud, long lineno, const char *id, long first), void *ud, char **err);

/* ---------------------------------------------------------------- idset */

/* Open-addressing set of 64-bit hashes with an optional 64-bit value: 8 or
 * 16 bytes per id, so a million ids cost megabytes, not the strings. A hash
 * is not an identity: callers re-check exact strings when a hash is present. */
struct ig_idset {
	uint64_t *keys;         /* 0 = empty */
	uint64_t *vals;         /* NULL when the set has no values */
	size_t cap;             /* power of two */
	size_t len;
};

uint64_t ig_idset_hash(const char *s, size_t n);   /* never 0 */
/* Returns 0, or -1 out of memory. */
int ig_idset_init(struct ig_idset *s, int with_vals);
void ig_idset_free(struct ig_idset *s);
/* Returns 1 added, 0 already present (*old gets its value when non-NULL),
 * -1 out of memory. */
int ig_idset_add(struct ig_idset *s, uint64_t h, uint64_t val, uint64_t *old);
/* Returns 1 present (*val gets its value when non-NULL), 0 absent. */
int ig_idset_get(const struct ig_idset *s, uint64_t h, uint64_t *val);
/* Where the value of h lives, to update it in place; NULL when h is absent
 * or the set has no values. Valid until the next ig_idset_add. */
uint64_t *ig_idset_val(struct ig_idset *s, uint64_t h);

/* -------------------------------------------------------------- journal */

/* The result files: append-only, one JSON object per line, each line written
 * with one write(2) so a crash leaves at most one torn line, at the end. */
struct ig_journal {
	int fd;
	char *path;
	off_t size;             /* bytes of complete lines */
	int regular;            /* a regular file (not /dev/null, a pipe...) */
};

/* Opens for appending (creates it). Returns 0, or -1 with *err. */
int ig_journal_open(struct ig_journal *j, const char *path, char **err);
/* Appends one line (ending in \n) with one write(2). On a short or failed
 * write the file is cut back to its previous size; returns -1 with errno. */
int ig_journal_append(struct ig_journal *j, const char *line, size_t len);
int ig_journal_sync(struct ig_journal *j);
void ig_journal_close(struct ig_journal *j);
/* The errors file that goes with an OUTPUT when --errors is not given:
 * "x.jsonl" -> "x.errors.jsonl", anything else gets ".errors.jsonl" added.
 * malloc'd. */
char *ig_journal_errors_path(const char *output);

/* Ids already written by earlier runs, from OUTPUT and the errors file.
 * Keeps hashes and line offsets only; membership is confirmed by re-reading
 * the line at that offset, so a hash collision can never skip a line. */
struct ig_doneset {
	struct ig_idset set;    /* hash -> (offset << 1) | file (0 output, 1 errors) */
	int fd[2];
	off_t valid[2];         /* size up to the last complete line */
	off_t size[2];          /* size on disk (valid + torn tail) */
	char **extra;           /* ids whose hash collided with another done id */
	unsigned char *extra_file;
	size_t n_extra;
	long count[2];          /* distinct ids per file */
	long dup_lines;         /* lines whose id was already seen (both files count) */
	long in_both;           /* ids present in both files */
};

void ig_journal_done_init(struct ig_doneset *d);
/* Scans both files (a missing file is empty). A torn last line is measured,
 * not cut (see ig_journal_done_cut_torn). Returns 0, or -1 with *err naming the
 * file and line. */
int ig_journal_done_load(struct ig_doneset *d, const char *output, const char *errors, char **err);
/* Returns 0 not done, 1 done in OUTPUT, 2 done in the errors file. */
int ig_journal_done_find(struct ig_doneset *d, const char *id, size_t len);
/* Cuts the torn tails found by load. Returns 0, or -1 with *err. */
int ig_journal_done_cut_torn(struct ig_doneset *d, const char *output, const char *errors, char **err);
void ig_journal_done_free(struct ig_doneset *d);

/* Result lines in the OpenAI Batch output format, malloc'd, ending in \n.
 * body may be NULL (JSON null), a JSON object or a string; trace_id, when
 * not NULL, is written as "trace_id" (infergate-bulk --trace). */
char *ig_journal_ok_line(const char *custom_id, long status, const char *request_id, const char *trace_id,
			 json_t *body, size_t *len);
/* status 0: "response" is null (no HTTP answer). */
char *ig_journal_error_line(const char *custom_id, long status, const char *request_id, const char *trace_id,
			    json_t *body, const char *code, const char *message, size_t *len);

#endif
