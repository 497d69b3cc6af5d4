/* The flag library: one parser for argv, one reader for a JSON
 * configuration object, one help printer, all over a table of struct
 * ig_flag (include/infergate/flags.h). Numbers go through ig_parse_long and
 * ig_parse_double, so every program words a bad number the same way. */
#include "config.h"
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"

#define FIELD(target, f, T) ((T *)(void *)((char *)(target) + (f)->off))

void ig_flags_problem(struct ig_buf *errs, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(errs, "%s\n", s);
	free(s);
}

/* A format that is not a literal (a program's own wording, from its table):
 * printf'd into a malloc'd string. */
static char *format(const char *fmt, const char *a, const char *b)
{
	char *s = NULL;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
	if (asprintf(&s, fmt, a, b) < 0)
		abort();
#pragma GCC diagnostic pop
	return s;
}

/* The index of value among the words of "a|b|c", or -1. */
static int choice_index(const char *words, const char *value)
{
	size_t vl = strlen(value);
	int idx = 0;
	for (const char *w = words; *w; idx++) {
		size_t wl = strcspn(w, "|");
		if (wl == vl && strncmp(w, value, vl) == 0)
			return idx;
		w += wl + (w[wl] == '|');
	}
	return -1;
}

/* The idx-th word of "a|b|c" into out (empty when there is none). */
static void choice_word(const char *words, int idx, char *out, size_t n)
{
	const char *w = words;
	for (int i = 0; i < idx && *w; i++) {
		w += strcspn(w, "|");
		w += *w == '|';
	}
	snprintf(out, n, "%.*s", (int)strcspn(w, "|"), w);
}

static long long_bound(double v)
{
	if (v >= (double)LONG_MAX)
		return LONG_MAX;
	if (v <= (double)LONG_MIN)
		return LONG_MIN;
	return (long)v;
}

/* Stores one value given as text. Returns 0, or -1 with *err. */
static int set_value(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	switch (f->type) {
	case IG_FLAG_STRING: {
		if (f->parse && f->parse(target, f, what, v, err) < 0)
			return -1;
		char **slot = FIELD(target, f, char *);
		free(*slot);
		*slot = strdup(v);
		if (!*slot)
			abort();
		return 0;
	}
	case IG_FLAG_LONG:
		return ig_parse_long(what, v, long_bound(f->min), long_bound(f->max), FIELD(target, f, long), err);
	case IG_FLAG_DOUBLE:
		return ig_parse_double(what, v, f->min, f->max, FIELD(target, f, double), err);
	case IG_FLAG_SWITCH:
		if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0) {
			*FIELD(target, f, bool) = true;
		} else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0) {
			*FIELD(target, f, bool) = false;
		} else {
			*err = ig_strdupf("%s: '%s' is not 0, 1, true or false (the flag alone means 1)", what, v);
			return -1;
		}
		return 0;
	case IG_FLAG_CHOICE: {
		int idx = choice_index(f->metavar, v);
		if (idx < 0) {
			*err = f->bad ? format(f->bad, what, v) : ig_strdupf("%s: '%s' is not one of %s", what, v, f->metavar);
			return -1;
		}
		*FIELD(target, f, int) = idx;
		return 0;
	}
	case IG_FLAG_CUSTOM:
		return f->parse(target, f, what, v, err);
	}
	return 0;
}

int ig_flags_nonempty(void *target IG_UNUSED, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
		      char **err)
{
	if (*v)
		return 0;
	*err = ig_strdupf("%s: empty value", what);
	return -1;
}

int ig_flags_readable(void *target IG_UNUSED, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
		      char **err)
{
	if (access(v, R_OK) == 0)
		return 0;
	*err = ig_strdupf("%s: '%s': %s", what, v, strerror(errno));
	return -1;
}

int ig_flags_defaults(const struct ig_flags *spec, void *target, char **err)
{
	for (size_t i = 0; i < spec->n; i++) {
		const struct ig_flag *f = &spec->flags[i];
		if (f->def && set_value(target, f, f->name ? f->name : f->key, f->def, err) < 0)
			return -1;
	}
	return 0;
}

const struct ig_flag *ig_flags_find(const struct ig_flags *spec, const char *name)
{
	for (size_t i = 0; i < spec->n; i++) {
		const struct ig_flag *f = &spec->flags[i];
		if ((f->name && strcmp(f->name, name) == 0) || (f->key && strcmp(f->key, name) == 0))
			return f;
	}
	return NULL;
}

static const struct ig_flag *find_flag(const struct ig_flags *spec, const char *a, size_t len)
{
	for (size_t i = 0; i < spec->n; i++) {
		const char *name = spec->flags[i].name;
		if (name && strlen(name) == len && strncmp(name, a, len) == 0)
			return &spec->flags[i];
	}
	return NULL;
}

int ig_flags_parse(const struct ig_flags *spec, void *target, int argc, char **argv, int *nrest,
		   struct ig_buf *errs)
{
	int kept = 0;
	bool failed = false, flags_end = false;

	for (int i = 1; i < argc; i++) {
		char *a = argv[i];
		if (flags_end || strncmp(a, "--", 2) != 0 || a[2] == '\0') {
			if (!flags_end && strcmp(a, "--") == 0) {
				flags_end = true;
				continue;
			}
			if (strcmp(a, "-h") == 0 && !flags_end) {
				ig_flags_print_help(spec, stdout);
				return 1;
			}
			if (spec->positional) {
				char *m = format(spec->positional, a, NULL);
				ig_flags_problem(errs, "%s", m);
				free(m);
				failed = true;
				if (!spec->all_problems)
					return -1;
				continue;
			}
			argv[1 + kept++] = a;
			continue;
		}
		const char *eq = strchr(a, '=');
		size_t len = eq ? (size_t)(eq - a) : strlen(a);
		if (len == 6 && strncmp(a, "--help", 6) == 0) {
			ig_flags_print_help(spec, stdout);
			return 1;
		}
		if (len == 15 && strncmp(a, "--help-markdown", 15) == 0) { /* not in --help: for `make docs-reference` */
			ig_flags_print_markdown(spec, stdout);
			return 1;
		}
		if (!spec->no_version && len == 9 && strncmp(a, "--version", 9) == 0) {
			printf("%s %s\n", spec->prog, PACKAGE_VERSION);
			return 1;
		}
		const struct ig_flag *f = find_flag(spec, a, len);
		char *name = ig_strdupf("%.*s", (int)len, a);
		char *err = NULL;
		const char *v = NULL;
		if (!f) {
			err = format(spec->unknown, name, NULL);
		} else if (eq) {
			v = eq + 1;
		} else if (f->type == IG_FLAG_SWITCH) {
			v = "1"; /* a switch: the next argument is not its value */
		} else if (i + 1 < argc) {
			v = argv[++i];
		} else {
			err = format(spec->missing, name, f->metavar ? f->metavar : "a value");
		}
		if (!err && v)
			set_value(target, f, name, v, &err);
		free(name);
		if (err) {
			ig_flags_problem(errs, "%s", err);
			free(err);
			failed = true;
			if (!spec->all_problems)
				return -1;
		}
	}
	if (nrest)
		*nrest = kept;
	return failed ? -1 : 0;
}

/* ---- configuration files ---- */

static int levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 40 || lb > 40)
		return 99;
	int d[41][41];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (int)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (int)j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
			d[i][j] = c < del ? (c < ins ? c : ins) : (del < ins ? del : ins);
		}
	return d[la][lb];
}

/* The known key or section nearest to path (at most 2 edits away) into
 * out; false when none is near. */
static bool suggest(const struct ig_flags *spec, const char *path, char *out, size_t n)
{
	int bestd = 3;
	for (size_t i = 0; i < spec->n; i++) {
		const char *key = spec->flags[i].key;
		if (!key)
			continue;
		int d = levenshtein(path, key);
		if (d < bestd) {
			bestd = d;
			snprintf(out, n, "%s", key);
		}
		/* Also the section names ("health" for "helth"). */
		const char *dot = strchr(key, '.');
		if (dot) {
			char sect[64];
			snprintf(sect, sizeof(sect), "%.*s", (int)(dot - key), key);
			d = levenshtein(path, sect);
			if (d < bestd) {
				bestd = d;
				snprintf(out, n, "%s", sect);
			}
		}
	}
	return bestd < 3;
}

static void unknown_key(const struct ig_flags *spec, struct ig_buf *errs, const char *where, const char *path)
{
	char near[128];
	if (suggest(spec, path, near, sizeof(near)))
		ig_flags_problem(errs, "%s: unknown key '%s' (did you mean '%s'?)", where, path, near);
	else
		ig_flags_problem(errs, "%s: unknown key '%s'", where, path);
}

static const struct ig_flag *find_key(const struct ig_flags *spec, const char *path)
{
	for (size_t i = 0; i < spec->n; i++)
		if (spec->flags[i].key && strcmp(spec->flags[i].key, path) == 0)
			return &spec->flags[i];
	return NULL;
}

static bool is_section(const struct ig_flags *spec, const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < spec->n; i++) {
		const char *key = spec->flags[i].key;
		if (key && strncmp(key, name, n) == 0 && key[n] == '.')
			return true;
	}
	return false;
}

static void json_problem(struct ig_buf *errs, const char *where, const char *key, json_t *v, const char *is_not)
{
	char *txt = json_dumps(v, JSON_ENCODE_ANY);
	ig_flags_problem(errs, "%s: key '%s': %s is not %s", where, key, txt ? txt : "?", is_not);
	free(txt);
}

static void json_value(void *target, const struct ig_flag *f, json_t *v, const char *where, struct ig_buf *errs)
{
	char *err = NULL;
	char range[96];

	switch (f->type) {
	case IG_FLAG_LONG:
		if (!json_is_integer(v) || json_integer_value(v) < long_bound(f->min) ||
		    json_integer_value(v) > long_bound(f->max)) {
			snprintf(range, sizeof(range), "an integer in %ld..%ld", long_bound(f->min), long_bound(f->max));
			json_problem(errs, where, f->key, v, range);
			return;
		}
		*FIELD(target, f, long) = (long)json_integer_value(v);
		return;
	case IG_FLAG_DOUBLE:
		if (!json_is_number(v) || json_number_value(v) < f->min || json_number_value(v) > f->max) {
			snprintf(range, sizeof(range), "a number in %g..%g", f->min, f->max);
			json_problem(errs, where, f->key, v, range);
			return;
		}
		*FIELD(target, f, double) = json_number_value(v);
		return;
	case IG_FLAG_SWITCH:
		if (!json_is_boolean(v)) {
			json_problem(errs, where, f->key, v, "true or false");
			return;
		}
		*FIELD(target, f, bool) = json_is_true(v);
		return;
	case IG_FLAG_CUSTOM:
		if (f->parse_json) {
			f->parse_json(target, f, v, where, errs);
			return;
		}
		break;
	case IG_FLAG_STRING:
	case IG_FLAG_CHOICE:
		break;
	}
	if (!json_is_string(v)) {
		json_problem(errs, where, f->key, v, "a string");
		return;
	}
	char *what = ig_strdupf("%s: %s", where, f->key);
	if (set_value(target, f, what, json_string_value(v), &err) < 0) {
		ig_flags_problem(errs, "%s", err);
		free(err);
	}
	free(what);
}

void ig_flags_from_json(const struct ig_flags *spec, void *target, json_t *root, const char *where,
			struct ig_buf *errs)
{
	const char *name;
	json_t *v;

	json_object_foreach(root, name, v) {
		const struct ig_flag *f = find_key(spec, name);
		if (f) {
			json_value(target, f, v, where, errs);
		} else if (is_section(spec, name)) {
			if (!json_is_object(v)) {
				ig_flags_problem(errs, "%s: key '%s' must be an object", where, name);
				continue;
			}
			const char *sub;
			json_t *sv;
			json_object_foreach(v, sub, sv) {
				char full[256];
				snprintf(full, sizeof(full), "%s.%s", name, sub);
				const struct ig_flag *sf = find_key(spec, full);
				if (sf)
					json_value(target, sf, sv, where, errs);
				else
					unknown_key(spec, errs, where, full);
			}
		} else {
			unknown_key(spec, errs, where, name);
		}
	}
}

json_t *ig_flags_value_json(const struct ig_flag *f, const void *target)
{
	void *t = (void *)(uintptr_t)target;
	char word[64];

	switch (f->type) {
	case IG_FLAG_STRING: {
		const char *s = *FIELD(t, f, char *);
		return s ? json_string(s) : json_null();
	}
	case IG_FLAG_LONG:
		return json_integer(*FIELD(t, f, long));
	case IG_FLAG_DOUBLE:
		return json_real(*FIELD(t, f, double));
	case IG_FLAG_SWITCH:
		return json_boolean(*FIELD(t, f, bool));
	case IG_FLAG_CHOICE:
		choice_word(f->metavar, *FIELD(t, f, int), word, sizeof(word));
		return json_string(word);
	case IG_FLAG_CUSTOM:
		break;
	}
	return NULL;
}

/* ---- help ---- */

#define HELP_COL 32   /* where the help text of an entry starts */
#define HELP_WIDTH 100 /* and where its lines end */

/* Writes text from column `col` on, wrapped at HELP_WIDTH, later lines
 * indented to HELP_COL. */
static void wrap(FILE *out, const char *text, int col)
{
	const char *p = text;
	while (*p) {
		size_t word = strcspn(p, " ");
		if (col > HELP_COL && col + 1 + (int)word > HELP_WIDTH) {
			fprintf(out, "\n%*s", HELP_COL, "");
			col = HELP_COL;
		} else if (col > HELP_COL) {
			fputc(' ', out);
			col++;
		}
		fwrite(p, 1, word, out);
		col += (int)word;
		p += word;
		while (*p == ' ')
			p++;
	}
	fputc('\n', out);
}

/* One entry: its flag and metavar, then its help from HELP_COL on (on the
 * next line when the flag is too long). */
static void entry(FILE *out, const char *left, const char *help)
{
	int col = fprintf(out, "  %s", left);
	if (col <= HELP_COL - 2) /* at least two spaces before the help */
		fprintf(out, "%*s", HELP_COL - col, "");
	else
		fprintf(out, "\n%*s", HELP_COL, "");
	wrap(out, help, HELP_COL);
}

void ig_flags_print_help(const struct ig_flags *spec, FILE *out)
{
	fputs(spec->usage, out);
	for (size_t i = 0; i < spec->n; i++) {
		const struct ig_flag *f = &spec->flags[i];
		if (!f->name)
			continue;
		char left[96], *help;
		bool takes_value = f->type != IG_FLAG_SWITCH && f->metavar && f->metavar[0];
		snprintf(left, sizeof(left), "%s%s%s", f->name, takes_value ? " " : "", takes_value ? f->metavar : "");
		if (f->def && f->def[0] && f->type != IG_FLAG_SWITCH)
			help = ig_strdupf("%s (default %s)", f->help, f->def);
		else
			help = ig_strdupf("%s", f->help);
		if (f->key) {
			char *h = ig_strdupf("%s [file: %s]", help, f->key);
			free(help);
			help = h;
		}
		entry(out, left, help);
		free(help);
	}
	entry(out, "--help", "print this help and exit");
	if (!spec->no_version)
		entry(out, "--version", "print the version and exit");
	if (spec->epilog)
		fputs(spec->epilog, out);
}

/* One table cell: '|' escaped (it would end the cell, even inside a code
 * span), a newline as a space. */
static void md_cell(FILE *out, const char *text, bool code)
{
	if (!text || !*text)
		return;
	if (code)
		fputc('`', out);
	for (const char *p = text; *p; p++) {
		if (*p == '|')
			fputs("\\|", out);
		else if (*p == '\n')
			fputc(' ', out);
		else
			fputc(*p, out);
	}
	if (code)
		fputc('`', out);
}

void ig_flags_print_markdown(const struct ig_flags *spec, FILE *out)
{
	bool keys = false;
	for (size_t i = 0; i < spec->n; i++)
		keys |= spec->flags[i].key != NULL;
	fprintf(out, "```\n%s", spec->usage);
	if (spec->usage[0] && spec->usage[strlen(spec->usage) - 1] != '\n')
		fputc('\n', out);
	fputs("```\n\n", out);
	fputs(keys ? "| Flag | File key | Default | Value | What it does |\n|---|---|---|---|---|\n"
		   : "| Flag | Default | Value | What it does |\n|---|---|---|---|\n", out);
	for (size_t i = 0; i < spec->n; i++) {
		const struct ig_flag *f = &spec->flags[i];
		bool takes_value = f->type != IG_FLAG_SWITCH && f->metavar && f->metavar[0];
		fputs("| ", out);
		if (f->name)
			md_cell(out, f->name, true);
		else
			fputs("(file only)", out);
		if (keys) {
			fputs(" | ", out);
			md_cell(out, f->key, true);
		}
		fputs(" | ", out);
		if (f->type == IG_FLAG_SWITCH)
			fputs("off", out);
		else
			md_cell(out, f->def, true);
		fputs(" | ", out);
		md_cell(out, takes_value ? f->metavar : NULL, true);
		fputs(" | ", out);
		md_cell(out, f->help, false);
		fputs(" |\n", out);
	}
	fputs("| `--help` |", out);
	fputs(keys ? " | | | print this help and exit |\n" : " | | print this help and exit |\n", out);
	if (!spec->no_version)
		fputs(keys ? "| `--version` | | | | print the version and exit |\n"
			   : "| `--version` | | | print the version and exit |\n", out);
	if (spec->epilog)
		fprintf(out, "\n```\n%s```\n", spec->epilog[0] == '\n' ? spec->epilog + 1 : spec->epilog);
}

void ig_flags_free(const struct ig_flags *spec, void *target)
{
	for (size_t i = 0; i < spec->n; i++) {
		const struct ig_flag *f = &spec->flags[i];
		if (f->type == IG_FLAG_STRING) {
			free(*FIELD(target, f, char *));
			*FIELD(target, f, char *) = NULL;
		}
	}
}

char *ig_flags_errors(struct ig_buf *errs)
{
	size_t n = ig_buf_pending(errs);
	char *s = ig_strdupf("%.*s", (int)n, n ? ig_buf_head(errs) : "");
	n = strlen(s);
	while (n > 0 && s[n - 1] == '\n')
		s[--n] = '\0';
	ig_buf_free(errs);
	return s;
}
