/* `infergate-bulk submit`'s flags and its preflight (submit_state.h): every
 * local check made before the first byte is sent, each problem listed so
 * that one run names them all. Moved out of submit.c, which runs the
 * submission. Not for the corpus's own lines past the first: the gateway
 * checks those and sends them back as the batch's errors. */
#include "config.h"
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdarg.h>
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
#include "submit_state.h"

/* ------------------------------------------------------------------ flags */

/* An id that goes into a URL path as it is: letters, digits, '_', '-', '.'. */
int ig_submit_id_ok(const char *v)
{
	size_t n = strlen(v);
	if (n == 0 || n > 128)
		return 0;
	return strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == n;
}

static int sb_check_batch_id(void *target IG_UNUSED, const struct ig_flag *f IG_UNUSED, const char *what,
			     const char *v, char **err)
{
	if (ig_submit_id_ok(v))
		return 0;
	*err = ig_strdupf("%s: '%s' is not a batch id (letters, digits, '_', '-' and '.', such as batch_abc123)",
			  what, v);
	return -1;
}

static int sb_parse_metadata(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
			     char **err)
{
	struct submit *s = target;
	const char *eq = strchr(v, '=');

	if (!eq || eq == v) {
		*err = ig_strdupf("%s: '%s' is not KEY=VALUE", what, v);
		return -1;
	}
	size_t klen = (size_t)(eq - v);
	if (klen > SB_MAX_KEY || strlen(eq + 1) > SB_MAX_VALUE) {
		*err = ig_strdupf("%s: '%s': keys are at most %d characters, values %d", what, v, SB_MAX_KEY,
				  SB_MAX_VALUE);
		return -1;
	}
	if (!s->metadata)
		s->metadata = json_object();
	char *key = ig_strdupf("%.*s", (int)klen, v);
	int rc = -1;
	if (json_object_get(s->metadata, key))
		*err = ig_strdupf("%s: '%s': the key %s is given twice", what, v, key);
	else if (json_object_size(s->metadata) >= SB_MAX_METADATA)
		*err = ig_strdupf("%s: '%s': at most %d pairs", what, v, SB_MAX_METADATA);
	else if (json_object_set_new(s->metadata, key, json_string(eq + 1)) < 0)
		*err = ig_strdupf("%s: '%s' is not UTF-8 text", what, v);
	else
		rc = 0;
	free(key);
	return rc;
}

#define SB_OFF(field) offsetof(struct submit, field)
static const struct ig_flag sb_flag_table[] = {
	{.name = "--input", .type = IG_FLAG_STRING, .off = SB_OFF(input), .metavar = "FILE", .parse = ig_flags_nonempty,
	 .help = "JSONL corpus of OpenAI Batch lines to upload (required unless --batch)"},
	{.name = "--url", .type = IG_FLAG_STRING, .off = SB_OFF(url_flag), .metavar = "URL", .parse = ig_flags_nonempty,
	 .help = "the gateway (or any server of the OpenAI Batch API); a trailing /v1 is fine (required)"},
	{.name = "--output", .type = IG_FLAG_STRING, .off = SB_OFF(output), .metavar = "FILE", .parse = ig_flags_nonempty,
	 .help = "the batch's output file, downloaded when it ends (required unless --no-wait)"},
	{.name = "--errors", .type = IG_FLAG_STRING, .off = SB_OFF(errors_flag), .metavar = "FILE",
	 .parse = ig_flags_nonempty,
	 .help = "the batch's error file (default: OUTPUT with .errors.jsonl); written empty when no line failed"},
	{.name = "--endpoint", .type = IG_FLAG_CHOICE, .off = SB_OFF(endpoint), .metavar = "chat|completions|embeddings",
	 .bad = "%s: '%s' is not chat, completions or embeddings",
	 .help = "the batch's endpoint (default: the \"url\" of the first request line)"},
	{.name = "--api-key-env", .type = IG_FLAG_STRING, .off = SB_OFF(api_key_env), .metavar = "VAR",
	 .parse = ig_flags_nonempty,
	 .help = "send Authorization: Bearer $VAR (default: OPENAI_API_KEY, when it is set)"},
	IG_BULK_TLS_FLAGS(struct submit, ig_flags_readable),
	{.name = "--metadata", .type = IG_FLAG_CUSTOM, .metavar = "KEY=VALUE", .parse = sb_parse_metadata,
	 .help = "the batch's metadata; repeat it, at most 16 pairs"},
	{.name = "--batch", .type = IG_FLAG_STRING, .off = SB_OFF(batch_flag), .metavar = "ID",
	 .parse = sb_check_batch_id, .help = "follow (and download) a batch already created instead of uploading"},
	{.name = "--no-wait", .type = IG_FLAG_SWITCH, .off = SB_OFF(no_wait),
	 .help = "upload and create the batch, print its id, exit"},
	{.name = "--cancel", .type = IG_FLAG_SWITCH, .off = SB_OFF(cancel),
	 .help = "with --batch: cancel it, follow it until cancelled, download the lines that finished"},
	{.name = "--poll-s", .type = IG_FLAG_LONG, .off = SB_OFF(poll_s), .min = 1, .max = 3600, .def = "2",
	 .metavar = "N", .help = "ask for the batch's state every N s"},
	{.name = "--progress-interval-s", .type = IG_FLAG_LONG, .off = SB_OFF(progress_interval_s), .min = 1,
	 .max = 86400, .def = "30", .metavar = "N", .help = "plain progress line period when stderr is not a terminal"},
	{.name = "--force", .type = IG_FLAG_SWITCH, .off = SB_OFF(force),
	 .help = "replace an existing OUTPUT and errors file"},
	{.name = "--connect-timeout-s", .type = IG_FLAG_LONG, .off = SB_OFF(connect_timeout_s), .min = 1, .max = 600,
	 .def = "10", .metavar = "N", .help = "TCP connect timeout"},
};

static const struct ig_flags sb_spec = {
	.prog = "infergate-bulk submit",
	.usage = "Usage: infergate-bulk submit --input FILE --url URL --output FILE [options]\n"
		 "       infergate-bulk submit --input FILE --url URL --no-wait [options]\n"
		 "       infergate-bulk submit --batch ID --url URL --output FILE [--cancel] [options]\n"
		 "\nHands a corpus to a gateway through the OpenAI Batch API: uploads INPUT (POST /v1/files),\n"
		 "creates a batch (POST /v1/batches), follows it (GET /v1/batches/ID) and downloads its\n"
		 "output and error files. The batch runs on the gateway: stop following at any time\n"
		 "(Ctrl-C), or do not follow at all (--no-wait), and pick it up later, from anywhere, with\n"
		 "--batch ID. Every local check runs before anything is sent; the gateway checks the lines.\n"
		 "\nOptions:\n",
	.epilog = "\nProgress goes to stderr, the summary to stdout (with --no-wait: the batch id alone).\n"
		  "Results are written to OUTPUT.tmp-PID, synced, then renamed: OUTPUT is never half a file.\n"
		  "While following, a gateway that does not answer is asked again for 2 minutes.\n"
		  "\nExit status: 0 completed, every line in OUTPUT; 1 completed, some lines in the errors file;\n"
		  "  2 bad flag or preflight problem (nothing was sent), or the batch failed validation (its\n"
		  "  errors are printed as \"line N: message\"); 3 stopped following (SIGINT/SIGTERM: the batch\n"
		  "  keeps running, the command to follow it again is printed), or the batch was cancelled or\n"
		  "  expired (the lines that finished are downloaded); 4 the gateway answered an error (its\n"
		  "  message and HTTP status are printed) or could not be reached. A second signal exits at\n"
		  "  once with 130.\n",
	.flags = sb_flag_table,
	.n = sizeof(sb_flag_table) / sizeof(sb_flag_table[0]),
	.unknown = "unknown flag '%s' (see submit --help)",
	.missing = "%s needs a value",
	.positional = "unexpected argument '%s' (see submit --help)",
};

void ig_submit_init(struct submit *s)
{
	memset(s, 0, sizeof(*s));
	s->endpoint = -1;
	ig_buf_init(&s->problems);
}

void ig_submit_free(struct submit *s)
{
	if (s->curl)
		curl_easy_cleanup(s->curl);
	curl_slist_free_all(s->auth);
	curl_slist_free_all(s->json_headers);
	json_decref(s->metadata);
	json_decref(s->batch);
	ig_buf_free(&s->problems);
	free(s->url);
	free(s->errors);
	free(s->file_id);
	free(s->batch_id);
	ig_flags_free(&sb_spec, s);
	memset(s, 0, sizeof(*s));
}

/* Returns 0 to go on, 1 to exit 0 (--help, --version), -1 on a bad flag
 * or combination (*err). */
int ig_submit_flags(struct submit *s, int argc, char **argv, char **err)
{
	struct ig_buf errs;

	if (ig_flags_defaults(&sb_spec, s, err) < 0)
		return -1;
	ig_buf_init(&errs);
	int rc = ig_flags_parse(&sb_spec, s, argc, argv, NULL, &errs);
	if (rc != 0) {
		if (rc < 0)
			*err = ig_flags_errors(&errs);
		ig_buf_free(&errs);
		return rc;
	}
	ig_buf_free(&errs);
	if (!s->url_flag)
		*err = ig_strdupf("--url is required (see submit --help)");
	else if (s->input && s->batch_flag)
		*err = ig_strdupf("--input and --batch: give one (--batch follows a batch already created)");
	else if (!s->input && !s->batch_flag)
		*err = ig_strdupf("--input FILE is required, or --batch ID to follow a batch already created");
	else if (s->no_wait && s->batch_flag)
		*err = ig_strdupf("--no-wait is for creating a batch (with --input), not with --batch");
	else if (s->no_wait && (s->output || s->errors_flag))
		*err = ig_strdupf("%s: --no-wait downloads nothing; give the file when following with --batch",
				  s->output ? "--output" : "--errors");
	else if (!s->no_wait && !s->output)
		*err = ig_strdupf("--output FILE is required (or --no-wait)");
	else if (s->cancel && !s->batch_flag)
		*err = ig_strdupf("--cancel needs --batch ID (the batch to cancel)");
	else if (s->batch_flag && s->endpoint >= 0)
		*err = ig_strdupf("--endpoint is for creating a batch (with --input): a batch keeps its own");
	else if (s->batch_flag && s->metadata)
		*err = ig_strdupf("--metadata is for creating a batch (with --input)");
	if (*err)
		return -1;
	s->url = ig_parse_base_url("--url", s->url_flag, err);
	if (!s->url)
		return -1;
	if (s->output)
		s->errors = s->errors_flag ? strdup(s->errors_flag) : ig_journal_errors_path(s->output);
	if (s->api_key_env) {
		s->api_key = getenv(s->api_key_env);
		if (!s->api_key || !*s->api_key) {
			*err = ig_strdupf("--api-key-env: the environment variable %s is not set", s->api_key_env);
			return -1;
		}
	} else {
		s->api_key = getenv("OPENAI_API_KEY");
		if (s->api_key && !*s->api_key)
			s->api_key = NULL;
	}
	return 0;
}

/* -------------------------------------------------------------- preflight */

static void sb_problem(struct submit *s, const char *fmt, ...) IG_PRINTF(2, 3);
static void sb_problem(struct submit *s, const char *fmt, ...)
{
	va_list ap;
	char *m;

	if (++s->n_problems > 20) /* the rest are counted */
		return;
	va_start(ap, fmt);
	if (vasprintf(&m, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(&s->problems, "  - %s\n", m);
	free(m);
}

/* The batch's endpoint from the first request line when --endpoint does not
 * give it; with --endpoint, that line must not name another. Only the
 * first line: the gateway reads every line before it runs any. */
static void sb_check_first_line(struct submit *s)
{
	struct ig_corpus_reader r;
	char *err = NULL;

	if (ig_corpus_open(&r, s->input, &err) < 0) {
		sb_problem(s, "--input %s", err);
		free(err);
		return;
	}
	int got = ig_corpus_next(&r);
	if (got < 0) {
		sb_problem(s, "--input %s: read error: %s", s->input, strerror(errno));
		goto out;
	}
	if (got == 0) {
		sb_problem(s, "--input %s has no request lines", s->input);
		goto out;
	}
	json_error_t je;
	json_t *line = json_loadb(r.line, r.len, 0, &je);
	json_t *url = json_object_get(line, "url");
	if (!json_is_object(line)) {
		sb_problem(s, "--input %s line %ld is not a JSON object%s%s", s->input, r.lineno, line ? "" : ": ",
			   line ? "" : je.text);
	} else if (url && !json_is_string(url)) {
		sb_problem(s, "--input %s line %ld: \"url\" is not a string", s->input, r.lineno);
	} else if (url) {
		const char *u = json_string_value(url);
		int ep = -1;
		for (int i = 0; i < IG_EP_COUNT; i++)
			if (strcmp(u, ig_corpus_endpoint_path(i)) == 0)
				ep = i;
		if (ep < 0)
			sb_problem(s, "--input %s line %ld: url '%s' is not /v1/chat/completions, /v1/completions "
				   "or /v1/embeddings", s->input, r.lineno, u);
		else if (s->endpoint >= 0 && s->endpoint != ep)
			sb_problem(s, "--input %s line %ld: url '%s' is not the --endpoint %s (%s): a batch has "
				   "one endpoint", s->input, r.lineno, u, ig_corpus_endpoint_name(s->endpoint),
				   ig_corpus_endpoint_path(s->endpoint));
		else
			s->endpoint = ep;
	} else if (s->endpoint < 0) {
		sb_problem(s, "--input %s line %ld has no \"url\": give --endpoint chat|completions|embeddings",
			   s->input, r.lineno);
	}
	json_decref(line);
	if (s->endpoint >= 0)
		s->ep_path = ig_corpus_endpoint_path(s->endpoint);
out:
	ig_corpus_close(&r);
}

/* The files: INPUT a readable regular file; OUTPUT and its errors file new
 * (or --force), not the input, in a writable directory. */
void ig_submit_preflight(struct submit *s)
{
	struct stat in, st;
	int have_in = 0;

	if (s->input) {
		if (stat(s->input, &in) < 0)
			sb_problem(s, "--input %s: %s", s->input, strerror(errno));
		else if (!S_ISREG(in.st_mode))
			sb_problem(s, "--input %s is not a regular file", s->input);
		else if (access(s->input, R_OK) < 0)
			sb_problem(s, "--input %s: %s", s->input, strerror(errno));
		else
			have_in = 1;
		if (have_in)
			sb_check_first_line(s);
	}
	if (!s->output)
		return;
	if (strcmp(s->output, s->errors) == 0)
		sb_problem(s, "--output and --errors are the same file");
	const char *outs[2] = {s->output, s->errors};
	const char *names[2] = {"--output", "--errors"};
	for (int i = 0; i < 2; i++) {
		if (stat(outs[i], &st) == 0) {
			if (S_ISDIR(st.st_mode))
				sb_problem(s, "%s %s is a directory", names[i], outs[i]);
			else if (have_in && st.st_dev == in.st_dev && st.st_ino == in.st_ino)
				sb_problem(s, "%s %s is the input file", names[i], outs[i]);
			else if (!s->force)
				sb_problem(s, "%s %s exists: give --force to replace it, or choose another file",
					   names[i], outs[i]);
		}
		char *copy = strdup(outs[i]);
		const char *dir = dirname(copy);
		if (access(dir, W_OK | X_OK) < 0)
			sb_problem(s, "%s %s: the directory %s is not writable (%s)", names[i], outs[i], dir,
				   strerror(errno));
		free(copy);
	}
}
