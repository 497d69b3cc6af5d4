/* Unit tests for src/common/flags.c: every type through argv and through a
 * JSON object, bounds, defaults, the problems and their wording, positional
 * arguments, and the help printer. */
#include "config.h"
#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/flags.h"
#include "../check_main.h"

struct opts {
	char *name;
	long count;
	double rate;
	bool on;
	int color;
	long custom; /* K of K/N */
};

static int parse_k(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	struct opts *o = target;
	(void)f;
	if (strncmp(v, "k=", 2) != 0) {
		*err = strdup(what);
		return -1;
	}
	o->custom = strtol(v + 2, NULL, 10);
	return 0;
}

static int no_x(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	(void)target;
	(void)f;
	if (strchr(v, 'x')) {
		*err = strdup(what);
		return -1;
	}
	return 0;
}

static const struct ig_flag table[] = {
	{.name = "--name", .key = "name", .type = IG_FLAG_STRING, .off = offsetof(struct opts, name), .def = "anon",
	 .metavar = "NAME", .parse = no_x, .help = "who"},
	{.name = "--count", .key = "limits.count", .type = IG_FLAG_LONG, .off = offsetof(struct opts, count),
	 .min = 1, .max = 10, .def = "3", .metavar = "N", .help = "how many"},
	{.name = "--rate", .key = "limits.rate", .type = IG_FLAG_DOUBLE, .off = offsetof(struct opts, rate),
	 .min = 0, .max = 1, .metavar = "P", .help = "how often"},
	{.name = "--on", .key = "on", .type = IG_FLAG_SWITCH, .off = offsetof(struct opts, on), .help = "a switch"},
	{.name = "--color", .key = "color", .type = IG_FLAG_CHOICE, .off = offsetof(struct opts, color),
	 .def = "red", .metavar = "red|green|blue", .help = "which"},
	{.name = "--k", .type = IG_FLAG_CUSTOM, .metavar = "k=N", .parse = parse_k, .help = "custom"},
};

static const struct ig_flags spec = {
	.prog = "prog",
	.usage = "Usage: prog [flags]\n",
	.epilog = "The end.\n",
	.flags = table,
	.n = sizeof(table) / sizeof(table[0]),
	.unknown = "unknown flag '%s'",
	.missing = "%s needs %s",
	.positional = NULL,
};

/* Parses a space-separated command line; returns the result, the problems
 * in *errs (malloc'd, "" when none) and the kept arguments in rest. */
static int parse(const char *line, struct opts *o, char **errs, char **rest, int *nrest)
{
	static char copy[512];
	char *argv[32] = {"prog"};
	int argc = 1;
	struct ig_buf b;

	snprintf(copy, sizeof(copy), "%s", line);
	for (char *t = strtok(copy, " "); t && argc < 31; t = strtok(NULL, " "))
		argv[argc++] = t;
	memset(o, 0, sizeof(*o));
	char *err = NULL;
	ck_assert_int_eq(ig_flags_defaults(&spec, o, &err), 0);
	ig_buf_init(&b);
	int rc = ig_flags_parse(&spec, o, argc, argv, nrest, &b);
	*errs = ig_flags_errors(&b);
	for (int i = 0; rest && nrest && i < *nrest; i++)
		rest[i] = argv[1 + i];
	return rc;
}

START_TEST(defaults_and_every_type)
{
	struct opts o;
	char *errs;
	int n = 0;

	ck_assert_int_eq(parse("", &o, &errs, NULL, &n), 0);
	ck_assert_str_eq(errs, "");
	ck_assert_str_eq(o.name, "anon");
	ck_assert_int_eq(o.count, 3);
	ck_assert(!o.on);
	ck_assert_int_eq(o.color, 0);
	ig_flags_free(&spec, &o);
	ck_assert_ptr_null(o.name);
	free(errs);

	ck_assert_int_eq(parse("--name bo --count=10 --rate 0.5 --on --color blue --k k=7", &o, &errs, NULL, &n), 0);
	ck_assert_str_eq(errs, "");
	ck_assert_str_eq(o.name, "bo");
	ck_assert_int_eq(o.count, 10);
	ck_assert(o.rate == 0.5);
	ck_assert(o.on);
	ck_assert_int_eq(o.color, 2);
	ck_assert_int_eq(o.custom, 7);
	ig_flags_free(&spec, &o);
	free(errs);

	/* A switch takes no value from the next argument, but =0 turns it off. */
	char *rest[8];
	ck_assert_int_eq(parse("--on=1 --on=0 file1 -- --count", &o, &errs, rest, &n), 0);
	ck_assert(!o.on);
	ck_assert_int_eq(n, 2);
	ck_assert_str_eq(rest[0], "file1");
	ck_assert_str_eq(rest[1], "--count");
	ig_flags_free(&spec, &o);
	free(errs);
}
END_TEST

START_TEST(problems_name_the_flag_and_value)
{
	static const char *bad[][2] = {
		{"--count 11", "--count: 11 is out of range (1..10)"},
		{"--count x", "--count: 'x' is not an integer"},
		{"--rate 2", "--rate"},
		{"--color pink", "--color: 'pink' is not one of red|green|blue"},
		{"--on=maybe", "--on: 'maybe' is not 0, 1, true or false (the flag alone means 1)"},
		{"--bogus", "unknown flag '--bogus'"},
		{"--bogus=1", "unknown flag '--bogus'"},
		{"--count", "--count needs N"},
		{"--name xx", "--name"},
		{"--k 7", "--k"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct opts o;
		char *errs;
		int n;
		ck_assert_int_eq(parse(bad[i][0], &o, &errs, NULL, &n), -1);
		ck_assert_msg(strncmp(errs, bad[i][1], strlen(bad[i][1])) == 0, "%s -> '%s'", bad[i][0], errs);
		ig_flags_free(&spec, &o);
		free(errs);
	}
}
END_TEST

START_TEST(first_problem_only_unless_all)
{
	struct opts o;
	char *errs;
	int n;

	ck_assert_int_eq(parse("--count 0 --bogus", &o, &errs, NULL, &n), -1);
	ck_assert_ptr_null(strchr(errs, '\n'));
	ig_flags_free(&spec, &o);
	free(errs);

	struct ig_flags all = spec;
	all.all_problems = true;
	all.positional = "unexpected '%s'";
	char *argv[] = {"prog", "--count", "0", "--bogus", "stray", "--color", "x", NULL};
	struct ig_buf b;
	ig_buf_init(&b);
	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(ig_flags_parse(&all, &o, 7, argv, NULL, &b), -1);
	errs = ig_flags_errors(&b);
	ck_assert_str_eq(errs, "--count: 0 is out of range (1..10)\nunknown flag '--bogus'\nunexpected 'stray'\n"
			       "--color: 'x' is not one of red|green|blue");
	free(errs);
	ig_flags_free(&spec, &o);
}
END_TEST

START_TEST(json_through_the_same_table)
{
	struct opts o;
	struct ig_buf b;
	char *err = NULL;
	json_error_t je;

	memset(&o, 0, sizeof(o));
	ck_assert_int_eq(ig_flags_defaults(&spec, &o, &err), 0);
	json_t *ok = json_loads("{\"name\": \"z\", \"limits\": {\"count\": 4, \"rate\": 1}, \"on\": true, "
				"\"color\": \"green\"}", 0, &je);
	ig_buf_init(&b);
	ig_flags_from_json(&spec, &o, ok, "f.json", &b);
	char *errs = ig_flags_errors(&b);
	ck_assert_str_eq(errs, "");
	free(errs);
	ck_assert_str_eq(o.name, "z");
	ck_assert_int_eq(o.count, 4);
	ck_assert(o.rate == 1);
	ck_assert(o.on);
	ck_assert_int_eq(o.color, 1);
	json_t *v = ig_flags_value_json(&table[4], &o);
	ck_assert_str_eq(json_string_value(v), "green");
	json_decref(v);
	json_decref(ok);

	json_t *bad = json_loads("{\"nmae\": \"z\", \"limits\": {\"count\": 40, \"cuont\": 1}, \"on\": 1, "
				 "\"color\": \"pink\", \"name\": 5}", JSON_PRESERVE_ORDER, &je);
	ig_buf_init(&b);
	ig_flags_from_json(&spec, &o, bad, "f.json", &b);
	errs = ig_flags_errors(&b);
	ck_assert_str_eq(errs, "f.json: unknown key 'nmae' (did you mean 'name'?)\n"
			       "f.json: key 'limits.count': 40 is not an integer in 1..10\n"
			       "f.json: unknown key 'limits.cuont' (did you mean 'limits.count'?)\n"
			       "f.json: key 'on': 1 is not true or false\n"
			       "f.json: color: 'pink' is not one of red|green|blue\n"
			       "f.json: key 'name': 5 is not a string");
	free(errs);
	json_decref(bad);
	/* nothing bad was stored */
	ck_assert_int_eq(o.count, 4);
	ck_assert_int_eq(o.color, 1);
	ig_flags_free(&spec, &o);
}
END_TEST

START_TEST(help_lists_every_flag)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	ig_flags_print_help(&spec, f);
	fclose(f);
	ck_assert_ptr_nonnull(strstr(text, "Usage: prog [flags]\n"));
	ck_assert_ptr_nonnull(strstr(text, "  --name NAME"));
	ck_assert_ptr_nonnull(strstr(text, "who (default anon) [file: name]"));
	ck_assert_ptr_nonnull(strstr(text, "  --count N"));
	ck_assert_ptr_nonnull(strstr(text, "[file: limits.count]"));
	ck_assert_ptr_nonnull(strstr(text, "  --on                          a switch"));
	ck_assert_ptr_nonnull(strstr(text, "  --color red|green|blue"));
	ck_assert_ptr_nonnull(strstr(text, "  --help"));
	ck_assert_ptr_nonnull(strstr(text, "  --version"));
	ck_assert_ptr_nonnull(strstr(text, "The end.\n"));
	/* no line runs past the wrap width */
	for (char *line = text; *line;) {
		size_t n = strcspn(line, "\n");
		ck_assert_msg(n <= 100, "a help line of %zu columns", n);
		line += n + (line[n] == '\n');
	}
	free(text);
}
END_TEST

/* The two checks programs give their file and name flags. */
START_TEST(nonempty_and_readable_name_the_flag)
{
	char *err = NULL;
	ck_assert_int_eq(ig_flags_nonempty(NULL, NULL, "--model", "m", &err), 0);
	ck_assert_int_eq(ig_flags_nonempty(NULL, NULL, "--model", "", &err), -1);
	ck_assert_str_eq(err, "--model: empty value");
	free(err);
	ck_assert_int_eq(ig_flags_readable(NULL, NULL, "--cacert", "/proc/self/status", &err), 0);
	ck_assert_int_eq(ig_flags_readable(NULL, NULL, "--cacert", "/nonexistent/ca.pem", &err), -1);
	ck_assert_str_eq(err, "--cacert: '/nonexistent/ca.pem': No such file or directory");
	free(err);
}
END_TEST

IG_CHECK_MAIN("flags", defaults_and_every_type, problems_name_the_flag_and_value, first_problem_only_unless_all,
	      json_through_the_same_table, help_lists_every_flag, nonempty_and_readable_name_the_flag)
