/* The one flag library of the tree: a program describes its flags (and, for
 * the gateway, the keys of its configuration file) in one table of struct
 * ig_flag; one parser reads argv through it, one reader reads a JSON object
 * through it, one printer writes --help from it, and the defaults come from
 * it. So --help, the README tables, validation and the defaults cannot
 * disagree. Used by infergate, infergate-bulk (run, generate, merge) and
 * infergate-sim.
 *
 *	static const struct ig_flag flags[] = {
 *		{.name = "--retries", .type = IG_FLAG_LONG, .off = offsetof(struct o, retries),
 *		 .min = 0, .max = 100, .def = "5", .metavar = "N", .help = "retries of ..."},
 *	};
 *
 * Every problem names the flag or key and the bad value. Messages that
 * differ between the programs (their wording predates this library and
 * their users' scripts may match it) are part of struct ig_flags. */
#ifndef IG_FLAGS_H
#define IG_FLAGS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "infergate/buf.h"

enum ig_flag_type {
	IG_FLAG_STRING, /* char *, a malloc'd copy (ig_flags_free releases it) */
	IG_FLAG_LONG,   /* long within [min, max] */
	IG_FLAG_DOUBLE, /* double within [min, max] */
	IG_FLAG_SWITCH, /* bool: the flag alone means true; =1, =0, =true, =false also work */
	IG_FLAG_CHOICE, /* int: the index of the value among the metavar's words "a|b|c" */
	IG_FLAG_CUSTOM, /* stored by the entry's parse callback */
};

struct ig_flag;

/* Stores (CUSTOM) or checks before storing (STRING) one value. `what` is
 * the flag or key as the user wrote it, for the message. Returns 0, or -1
 * with *err (malloc'd). */
typedef int (*ig_flag_parse_fn)(void *target, const struct ig_flag *f, const char *what,
				const char *value, char **err);
/* Reads one value of a configuration file (a CUSTOM key whose value is not
 * a string: a list, an object); each problem is one line appended to errs,
 * prefixed with `where` (the file). */
typedef void (*ig_flag_json_fn)(void *target, const struct ig_flag *f, json_t *v, const char *where,
				struct ig_buf *errs);

struct ig_flag {
	const char *name;      /* "--listen"; NULL: a configuration-file key only */
	const char *key;       /* "health.interval_ms" in the file; NULL: a flag only */
	enum ig_flag_type type;
	size_t off;            /* of the field in the target struct */
	double min, max;       /* LONG and DOUBLE bounds */
	const char *def;       /* default, parsed like a given value; NULL: the field stays as it is */
	const char *metavar;   /* "N", "FILE" in --help; CHOICE: its words "a|b|c" */
	const char *help;
	const char *bad;       /* CHOICE: printf format (what, value) for another value;
			        * NULL: "%s: '%s' is not one of a|b|c" */
	ig_flag_parse_fn parse;
	ig_flag_json_fn parse_json;
};

/* A program's command line. */
struct ig_flags {
	const char *prog;       /* "infergate-sim": --version prints "infergate-sim VERSION" */
	const char *usage;      /* --help: printed before the table */
	const char *epilog;     /* --help: printed after it; NULL: nothing */
	const struct ig_flag *flags; /* written by: any (the program fills its table) */
	size_t n; /* written by: any (the program fills its table) */
	/* printf formats of the problems argv can have: */
	const char *unknown;    /* (flag): "unknown flag '%s' (see --help)" */
	const char *missing;    /* (flag, metavar): "%s needs a value" */
	const char *positional; /* (argument); NULL: arguments that are not flags are kept */
	bool all_problems;      /* go on after a problem and report every one */
	bool no_version;        /* no --version flag */
};

/* Sets every field that has a default. Returns 0, or -1 with *err (a bad
 * default in a table is a bug; it is reported anyway). */
int ig_flags_defaults(const struct ig_flags *spec, void *target, char **err);
/* Reads argv[1..argc) into target: "--name value", "--name=value", a switch
 * alone, "--" ending the flags. --help (or -h) prints the help to stdout and
 * --version the version; then it returns 1 (the caller exits 0). Arguments
 * that are not flags are moved, in order, to argv[1..*nrest] when
 * spec->positional is NULL (nrest may be NULL otherwise). Returns 0, or -1
 * with each problem as one line appended to errs. Defaults are not set here:
 * call ig_flags_defaults first. */
int ig_flags_parse(const struct ig_flags *spec, void *target, int argc, char **argv, int *nrest,
		   struct ig_buf *errs);
/* Reads a JSON object (a configuration file's root) through the entries'
 * keys: "a.b" is key b of the object under a. Unknown keys (with the nearest
 * known one suggested) and values of the wrong type or out of bounds are
 * problems: one line each appended to errs, starting with `where`. */
void ig_flags_from_json(const struct ig_flags *spec, void *target, json_t *root, const char *where,
			struct ig_buf *errs);
/* The value of one entry as JSON (NULL for CUSTOM): what --check-config shows. */
json_t *ig_flags_value_json(const struct ig_flag *f, const void *target);
/* The help text: usage, one entry per flag (metavar, help wrapped, default,
 * the file key), --help and --version, the epilog. */
void ig_flags_print_help(const struct ig_flags *spec, FILE *out);
/* The same table as Markdown (usage, then one row per entry: flag, file key,
 * default, metavar, help; file-only keys too), for docs/reference/. Printed
 * by the hidden flag --help-markdown. */
void ig_flags_print_markdown(const struct ig_flags *spec, FILE *out);
/* The entry with this flag name or file key, or NULL. */
const struct ig_flag *ig_flags_find(const struct ig_flags *spec, const char *name);
/* Frees the STRING fields and sets them to NULL. */
void ig_flags_free(const struct ig_flags *spec, void *target);
/* Two checks of a STRING flag's value, for an entry's .parse: not empty
 * ("--model: empty value"), and a file readable now, so a bad path fails
 * at start ("--cacert: 'x.pem': No such file or directory"). */
int ig_flags_nonempty(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
int ig_flags_readable(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
/* Appends one problem (printf-style) as a line to errs: for a program's
 * own checks next to the library's. */
void ig_flags_problem(struct ig_buf *errs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The problems collected in errs as one malloc'd string, lines joined by
 * '\n' without a trailing one; errs is freed. */
char *ig_flags_errors(struct ig_buf *errs);

#endif
