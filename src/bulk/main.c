/* infergate-bulk: push a JSONL corpus (OpenAI Batch format) through any
 * OpenAI-compatible URL, exactly once, resumable.
 *
 * This file is the order of events: flags, then the preflight (every check
 * that can fail runs before the first request: the flags, the files, every
 * line of the input, the ids already done, the server and its models), then
 * the run, then the summary and the exit code. The run itself is in
 * scheduler.c. Memory stays flat with the corpus size: the preflight keeps
 * 8-16 bytes per id (hashes), the run reads the input again as a stream. */
#include "config.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "bulk.h"

/* ------------------------------------------------------------------ flags */

static int parse_temperature(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	struct bulk_opts *o = target;
	if (ig_parse_double(what, v, f->min, f->max, &o->temperature, err) < 0)
		return -1;
	o->have_temperature = 1;
	return 0;
}

static int parse_concurrency(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	struct bulk_opts *o = target;
	if (strcmp(v, "auto") == 0) {
		o->concurrency = 0;
		return 0;
	}
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || *end || !*v || n < f->min || n > f->max) {
		*err = ig_strdupf("%s: '%s' is not auto or a whole number in %ld..%ld", what, v, (long)f->min, (long)f->max);
		return -1;
	}
	o->concurrency = n;
	return 0;
}

static int parse_shard(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v, char **err)
{
	struct bulk_opts *o = target;
	char *end;
	errno = 0;
	long k = strtol(v, &end, 10);
	long n = *end == '/' ? strtol(end + 1, &end, 10) : -1;
	if (errno || *end || n < 1 || n > 1000000 || k < 0 || k >= n || !*v) {
		*err = ig_strdupf("%s: '%s' is not K/N with 0 <= K < N (e.g. 0/4)", what, v);
		return -1;
	}
	o->shard_k = k;
	o->shard_n = n;
	return 0;
}

#define O(field) offsetof(struct bulk_opts, field)
#define FILE_FLAG(flag, field, text) \
	{.name = flag, .type = IG_FLAG_STRING, .off = O(field), .metavar = "FILE", .parse = ig_flags_nonempty, .help = text}
/* One table gives the parser, the defaults, the bounds and --help. */
static const struct ig_flag flags[] = {
	FILE_FLAG("--input", input, "JSONL corpus: OpenAI Batch lines or shorthand lines (required)"),
	FILE_FLAG("--output", output, "results, one Batch output line per request (required)"),
	FILE_FLAG("--errors", errors, "failed requests (default: OUTPUT with .errors.jsonl)"),
	{.name = "--url", .type = IG_FLAG_STRING, .off = O(url), .def = "http://127.0.0.1:8080", .metavar = "URL",
	 .parse = ig_flags_nonempty, .help = "OpenAI-compatible server or gateway; a trailing /v1 is fine"},
	{.name = "--api-key-env", .type = IG_FLAG_STRING, .off = O(api_key_env), .metavar = "VAR",
	 .parse = ig_flags_nonempty, .help = "send Authorization: Bearer $VAR"},
	IG_BULK_TLS_FLAGS(struct bulk_opts, ig_flags_readable),
	{.name = "--model", .type = IG_FLAG_STRING, .off = O(model), .metavar = "NAME", .parse = ig_flags_nonempty,
	 .help = "model for lines that do not name one"},
	{.name = "--max-tokens", .type = IG_FLAG_LONG, .off = O(max_tokens), .min = 1, .max = 10000000,
	 .metavar = "N", .help = "max_tokens for lines that do not set it"},
	{.name = "--temperature", .type = IG_FLAG_CUSTOM, .min = 0, .max = 2, .metavar = "X",
	 .parse = parse_temperature, .help = "temperature for lines that do not set it"},
	{.name = "--endpoint", .type = IG_FLAG_CHOICE, .off = O(endpoint), .metavar = "chat|completions",
	 .bad = "%s: '%s' is not chat or completions",
	 .help = "where shorthand prompt lines go (default: prompt lines to completions, messages lines to chat)"},
	{.name = "--concurrency", .type = IG_FLAG_CUSTOM, .min = 1, .max = 20000, .def = "auto",
	 .metavar = "N|auto", .parse = parse_concurrency,
	 .help = "requests in flight at all times; auto: an infergate gateway's learned slots plus a little "
		 "headroom, or against another server the fewest that give the most tokens/s (searched, "
		 "held, re-probed)"},
	{.name = "--max-concurrency", .type = IG_FLAG_LONG, .off = O(max_concurrency), .min = 1, .max = 20000,
	 .def = "4096", .metavar = "N", .help = "with --concurrency auto: the most it may hold"},
	{.name = "--rate", .type = IG_FLAG_DOUBLE, .off = O(rate), .min = 0, .max = 1000000, .def = "0",
	 .metavar = "N", .help = "at most N requests started per second (0: no cap)"},
	{.name = "--retries", .type = IG_FLAG_LONG, .off = O(retries), .min = 0, .max = 100, .def = "5",
	 .metavar = "N", .help = "retries of 408/429/5xx/connection errors/timeouts"},
	{.name = "--backoff-ms", .type = IG_FLAG_LONG, .off = O(backoff_ms), .min = 1, .max = 60000, .def = "500",
	 .metavar = "N",
	 .help = "first retry delay; doubles per retry up to 30 s, jittered; Retry-After wins when longer"},
	{.name = "--idle-timeout-s", .type = IG_FLAG_LONG, .off = O(idle_timeout_s), .min = 1, .max = 86400,
	 .def = "300", .metavar = "N", .help = "abandon and retry a request with no byte for N s"},
	{.name = "--connect-timeout-s", .type = IG_FLAG_LONG, .off = O(connect_timeout_s), .min = 1, .max = 600,
	 .def = "10", .metavar = "N", .help = "TCP connect timeout"},
	FILE_FLAG("--progress-file", progress_file, "JSON progress, rewritten atomically every second"),
	{.name = "--progress-interval-s", .type = IG_FLAG_LONG, .off = O(progress_interval_s), .min = 1,
	 .max = 3600, .def = "5", .metavar = "N", .help = "plain progress line period when stderr is not a terminal"},
	FILE_FLAG("--summary-json", summary_json, "final summary as JSON"),
	{.name = "--shard", .type = IG_FLAG_CUSTOM, .def = "0/1", .metavar = "K/N", .parse = parse_shard,
	 .help = "take the lines whose 0-based index modulo N is K"},
	{.name = "--resume", .type = IG_FLAG_SWITCH, .off = O(resume),
	 .help = "continue into an existing OUTPUT, skipping ids done"},
	{.name = "--dry-run", .type = IG_FLAG_SWITCH, .off = O(dry_run),
	 .help = "run every check, print the plan, send nothing"},
	{.name = "--stream", .type = IG_FLAG_SWITCH, .off = O(stream),
	 .help = "stream responses (measures time to first token)"},
	{.name = "--trace", .type = IG_FLAG_SWITCH, .off = O(trace),
	 .help = "give each line a W3C trace (traceparent, sampled) and write its trace_id in the result line: "
		 "through a gateway with tracing, a bad answer leads to its spans"},
	{.name = "--priority", .type = IG_FLAG_CHOICE, .off = O(priority), .def = "low",
	 .metavar = "high|normal|low|none", .bad = "%s: '%s' is not high, normal, low or none",
	 .help = "X-Infergate-Priority sent with every request: an infergate gateway serves interactive "
		 "(normal) requests first and fills every idle slot with this run; none: no header"},
	{.name = "--log-level", .type = IG_FLAG_CHOICE, .off = O(log_level), .def = "info",
	 .metavar = "debug|info|warn|error", .bad = "%s: '%s' is not debug, info, warn or error",
	 .help = "what to log"},
};

static const struct ig_flags spec = {
	.prog = "infergate-bulk",
	.usage = "Usage: infergate-bulk --input FILE --output FILE [options]\n"
		 "       infergate-bulk generate --count N --output FILE [--seed S] [--kind chat|completions]\n"
		 "       infergate-bulk merge --input CORPUS [--output MERGED] SHARD_OUTPUT... (see merge --help)\n"
		 "       infergate-bulk submit --input FILE --url URL --output FILE (the gateway's Batch API;\n"
		 "                             see submit --help)\n"
		 "       infergate-bulk replay --input TRACE --output FILE (a trace, open loop, each request at\n"
		 "                             its time, measured; see replay --help)\n"
		 "\nPushes every line of a JSONL corpus through an OpenAI-compatible server, exactly once,\n"
		 "resumable. Everything is checked before the first request is sent.\n\nOptions:\n",
	.epilog = "\nInput lines: {\"custom_id\", \"method\": \"POST\", \"url\": \"/v1/chat/completions\", \"body\": {...}}\n"
		  "  (url may also be /v1/completions or /v1/embeddings), or {\"custom_id\"?, \"messages\": [...], ...},\n"
		  "  or {\"custom_id\"?, \"prompt\": \"...\", ...}. A missing custom_id becomes line-N (1-based).\n"
		  "Output lines: {\"id\", \"custom_id\", \"response\": {\"status_code\", \"request_id\", \"body\"}, \"error\": null}\n"
		  "Errors lines: {\"id\", \"custom_id\", \"response\": null or {...}, \"error\": {\"code\", \"message\"}}\n"
		  "\nExit status: 0 every line is in OUTPUT; 1 complete, some lines are in the errors file;\n"
		  "  2 bad flag or preflight problem (nothing was sent); 3 stopped early by a signal or a\n"
		  "  write failure (rerun with --resume). A second SIGINT/SIGTERM exits at once with 130.\n",
	.flags = flags,
	.n = sizeof(flags) / sizeof(flags[0]),
	.unknown = "unknown flag '%s' (see --help)",
	.missing = "%s needs a value",
	.positional = "unexpected argument '%s' (see --help)",
};

static void opts_free(struct bulk_opts *o)
{
	ig_flags_free(&spec, o);
}

/* Returns 0 to run, 1 to exit 0 (--help, --version), -1 on a bad flag
 * (*err). Whatever the result, opts_free() releases o. */
static int parse_flags(int argc, char **argv, struct bulk_opts *o, char **err)
{
	struct ig_buf errs;

	memset(o, 0, sizeof(*o));
	o->max_tokens = -1;
	o->endpoint = -1;
	if (ig_flags_defaults(&spec, o, err) < 0)
		return -1;
	ig_buf_init(&errs);
	int rc = ig_flags_parse(&spec, o, argc, argv, NULL, &errs);
	if (rc < 0) {
		*err = ig_flags_errors(&errs);
		return -1;
	}
	ig_buf_free(&errs);
	if (rc > 0)
		return 1;
	ig_log_set_level((enum ig_log_level)o->log_level);
	if (!o->input || !o->output) {
		*err = ig_strdupf("%s is required (see --help)", !o->input ? "--input" : "--output");
		return -1;
	}
	char *url = ig_parse_base_url("--url", o->url, err);
	if (!url)
		return -1;
	free(o->url);
	o->url = url;
	if (!o->errors)
		o->errors = ig_journal_errors_path(o->output);
	if (o->api_key_env) {
		o->api_key = getenv(o->api_key_env);
		if (!o->api_key || !*o->api_key) {
			*err = ig_strdupf("--api-key-env: the environment variable %s is not set", o->api_key_env);
			return -1;
		}
	}
	return 0;
}

/* -------------------------------------------------------------- preflight */

struct preflight {
	struct ig_buf problems;         /* one "  - ..." line each */
	long n_problems;
	struct ig_doneset done;
	uint8_t *skip;                  /* bit per request index */
	size_t skip_bytes;
	struct bulk_model *models;      /* what the run then counts in (stats->models) */
	size_t n_models;
	long per_ep[IG_EP_COUNT];       /* selected and not done */
	long first_line, last_line;
	long foreign_done;              /* done ids that are not lines of this shard */
	int gateway;                    /* /v1/models carries infergate's extension */
};

static void problem(struct preflight *pf, const char *fmt, ...) IG_PRINTF(2, 3);
static void problem(struct preflight *pf, const char *fmt, ...)
{
	va_list ap;
	char *s;
	pf->n_problems++;
	if (pf->n_problems > 20) /* the rest are counted */
		return;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(&pf->problems, "  - %s\n", s);
	free(s);
}

static void dir_writable(struct preflight *pf, const char *what, const char *path)
{
	char *copy = strdup(path);
	const char *dir = dirname(copy);
	if (access(dir, W_OK | X_OK) < 0)
		problem(pf, "%s %s: the directory %s is not writable (%s)", what, path, dir, strerror(errno));
	free(copy);
}

static void check_files(const struct bulk_opts *o, struct preflight *pf)
{
	struct stat in, st;
	int have_in = stat(o->input, &in) == 0;

	if (!have_in)
		problem(pf, "--input %s: %s", o->input, strerror(errno));
	const char *outs[2] = {o->output, o->errors};
	const char *names[2] = {"--output", "--errors"};
	for (int i = 0; i < 2; i++) {
		if (stat(outs[i], &st) == 0) {
			if (S_ISDIR(st.st_mode))
				problem(pf, "%s %s is a directory", names[i], outs[i]);
			else if (have_in && st.st_dev == in.st_dev && st.st_ino == in.st_ino)
				problem(pf, "%s %s is the input file", names[i], outs[i]);
			else if (!o->resume && S_ISREG(st.st_mode) && (i == 0 || st.st_size > 0))
				problem(pf, "%s %s exists: give --resume to continue it, or choose another file "
					"(nothing is overwritten)", names[i], outs[i]);
			else if (access(outs[i], W_OK) < 0)
				problem(pf, "%s %s: %s", names[i], outs[i], strerror(errno));
		} else {
			dir_writable(pf, names[i], outs[i]);
		}
	}
	if (strcmp(o->output, o->errors) == 0)
		problem(pf, "--output and --errors are the same file");
	if (o->progress_file)
		dir_writable(pf, "--progress-file", o->progress_file);
	if (o->summary_json)
		dir_writable(pf, "--summary-json", o->summary_json);
}

/* Counts a selected line of model m: to send (done 0), or already done in
 * OUTPUT (1) or the errors file (2). */
static void note_model(struct preflight *pf, const char *m, long lineno, int done)
{
	struct bulk_model *mu = NULL;
	for (size_t i = 0; i < pf->n_models && !mu; i++)
		if (strcmp(pf->models[i].name, m) == 0)
			mu = &pf->models[i];
	if (!mu) {
		if (pf->n_models >= 1000) /* a corpus with more models than this is not a plan */
			return;
		mu = realloc(pf->models, (pf->n_models + 1) * sizeof(*mu));
		if (!mu)
			abort();
		pf->models = mu;
		mu = &pf->models[pf->n_models++];
		*mu = (struct bulk_model){.name = strdup(m)};
	}
	mu->total++;
	if (done == 1)
		mu->resumed_ok++;
	else if (done == 2)
		mu->resumed_err++;
	else if (mu->lines++ == 0)
		mu->first_line = lineno;
}

static int set_bit(struct preflight *pf, long i)
{
	size_t byte = (size_t)i >> 3;
	if (byte >= pf->skip_bytes) {
		size_t n = pf->skip_bytes ? pf->skip_bytes * 2 : 4096;
		while (n <= byte)
			n *= 2;
		uint8_t *s = realloc(pf->skip, n);
		if (!s)
			return -1;
		memset(s + pf->skip_bytes, 0, n - pf->skip_bytes);
		pf->skip = s;
		pf->skip_bytes = n;
	}
	pf->skip[byte] |= (uint8_t)(1u << (i & 7));
	return 0;
}

/* A duplicate custom_id found by ig_corpus_duplicates: a problem of the run. */
static void duplicate_found(void *ud, long lineno, const char *id, long first)
{
	problem(ud, "line %ld: duplicate custom_id '%s' (first at line %ld)", lineno, id, first);
}

/* Reads the whole input once: every line parsed, ids checked, ids already
 * done marked in pf->skip, models noted. */
static void scan_input(const struct bulk_opts *o, const struct ig_corpus_defaults *d,
		       struct preflight *pf, struct bulk_stats *st)
{
	struct ig_corpus_reader r;
	struct ig_idset ids, ambiguous;
	char *err = NULL;
	int got;

	if (ig_corpus_open(&r, o->input, &err) < 0) {
		problem(pf, "--input %s", err);
		free(err);
		return;
	}
	if (ig_idset_init(&ids, 0) < 0 || ig_idset_init(&ambiguous, 0) < 0)
		abort();
	while ((got = ig_corpus_next(&r)) > 0) {
		struct ig_corpus_line l;
		st->requests++;
		if (ig_corpus_parse(r.line, r.len, r.lineno, d, &l, &err) < 0) {
			problem(pf, "%s", err);
			free(err);
			continue;
		}
		size_t idlen = strlen(l.custom_id);
		uint64_t h = ig_idset_hash(l.custom_id, idlen);
		int added = ig_idset_add(&ids, h, 0, NULL);
		if (added < 0 || (added == 0 && ig_idset_add(&ambiguous, h, 0, NULL) < 0)) {
			problem(pf, "out of memory at line %ld", r.lineno);
			ig_corpus_line_clear(&l);
			break;
		}
		if (r.index % o->shard_n == o->shard_k) {
			st->selected++;
			if (!pf->first_line)
				pf->first_line = r.lineno;
			pf->last_line = r.lineno;
			int done = o->resume ? ig_journal_done_find(&pf->done, l.custom_id, idlen) : 0;
			if (done) {
				if (done == 1)
					st->resumed_ok++;
				else
					st->resumed_err++;
				if (set_bit(pf, r.index) < 0)
					abort();
			} else {
				pf->per_ep[l.ep]++;
			}
			note_model(pf, l.model, r.lineno, done);
		}
		ig_corpus_line_clear(&l);
	}
	if (got < 0)
		problem(pf, "--input %s: read error: %s", o->input, strerror(errno));
	if (st->requests == 0 && got == 0)
		problem(pf, "--input %s has no request lines", o->input);
	ig_corpus_close(&r);
	if (ambiguous.len > 0 && ig_corpus_duplicates(o->input, d, &ambiguous, duplicate_found, pf, &err) < 0) {
		problem(pf, "--input %s", err);
		free(err);
	}
	ig_idset_free(&ids);
	ig_idset_free(&ambiguous);
	st->to_send = st->selected - st->resumed_ok - st->resumed_err;
	pf->foreign_done = pf->done.count[0] + pf->done.count[1] - st->resumed_ok - st->resumed_err;
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	struct ig_buf *b = ud;
	if (ig_buf_pending(b) + size * n > (64u << 20))
		return 0;
	return ig_buf_append(b, p, size * n) < 0 ? 0 : size * n;
}

/* The decision on a /v1/models "data" list, apart from the HTTP so it can be
 * tested: every model the lines still to send use must be listed, and when
 * the entry carries infergate's extension ("infergate": {"backends": n,
 * "backends_healthy": k}), k must not be 0. Entries without it (SGLang,
 * vLLM) only need to be listed. Problems go to pf. */
static void check_models(struct preflight *pf, json_t *data, const char *url)
{
	size_t k;
	json_t *m;
	json_array_foreach(data, k, m)
		if (json_is_object(json_object_get(m, "infergate")))
			pf->gateway = 1;
	for (size_t i = 0; i < pf->n_models; i++) {
		const struct bulk_model *mu = &pf->models[i];
		if (mu->lines == 0)
			continue; /* only done lines name it */
		json_t *entry = NULL;
		json_array_foreach(data, k, m) {
			json_t *id = json_object_get(m, "id");
			if (json_is_string(id) && strcmp(json_string_value(id), mu->name) == 0) {
				entry = m;
				break;
			}
		}
		if (entry) {
			json_t *ext = json_object_get(entry, "infergate");
			json_t *healthy = json_object_get(ext, "backends_healthy");
			if (!json_is_integer(healthy) || json_integer_value(healthy) != 0)
				continue;
			const char *alias = json_string_value(json_object_get(ext, "alias_of"));
			problem(pf, "model '%s' (used by %ld lines, first at line %ld) is served by %s "
				"but none of its %lld backends is healthy now%s%s%s",
				mu->name, mu->lines, mu->first_line, url,
				(long long)json_integer_value(json_object_get(ext, "backends")),
				alias ? " (it is an alias of '" : "", alias ? alias : "", alias ? "')" : "");
			continue;
		}
		struct ig_buf served;
		ig_buf_init(&served);
		json_array_foreach(data, k, m) {
			json_t *id = json_object_get(m, "id");
			if (json_is_string(id) && k < 10)
				ig_buf_printf(&served, "%s%s", k ? ", " : "", json_string_value(id));
		}
		problem(pf, "model '%s' (used by %ld lines, first at line %ld) is not served by %s (it serves: %s)",
			mu->name, mu->lines, mu->first_line, url, served.len ? served.data : "nothing");
		ig_buf_free(&served);
	}
}

/* GET /v1/models: its "data" list (a new reference), or NULL when the
 * server cannot be reached or gives none (said in pf, unless pf is NULL). */
static json_t *fetch_models(const struct bulk_opts *o, struct preflight *pf)
{
	char *url = ig_strdupf("%s/v1/models", o->url);
	char errbuf[CURL_ERROR_SIZE] = "";
	struct ig_buf body;
	struct curl_slist *h = NULL;
	long status = 0;
	json_t *j = NULL, *data = NULL;

	ig_buf_init(&body);
	CURL *e = curl_easy_init();
	if (!e)
		abort();
	if (o->api_key) {
		char *a = ig_strdupf("Authorization: Bearer %s", o->api_key);
		h = curl_slist_append(h, a);
		free(a);
	}
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	ig_bulk_tls_setopt(e, &o->tls);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_s * 1000L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 30000L); /* a listing, not a generation */
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
	CURLcode rc = curl_easy_perform(e);
	if (rc != CURLE_OK) {
		if (pf)
			problem(pf, "cannot reach %s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	j = json_loadb(body.data ? body.data : "", ig_buf_pending(&body), 0, NULL);
	if (status != 200) {
		json_t *m = json_object_get(json_object_get(j, "error"), "message");
		if (pf)
			problem(pf, "%s answered HTTP %ld%s%s%s", url, status, json_is_string(m) ? " (" : "",
				json_is_string(m) ? json_string_value(m) : "", json_is_string(m) ? ")" : "");
		goto out;
	}
	data = json_object_get(j, "data");
	if (!json_is_array(data)) {
		if (pf)
			problem(pf, "%s: the answer has no \"data\" list of models", url);
		data = NULL;
		goto out;
	}
	json_incref(data);
out:
	json_decref(j);
	ig_buf_free(&body);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
	free(url);
	return data;
}

/* GET /v1/models: the server answers and serves every model the lines use. */
static void check_server(const struct bulk_opts *o, struct preflight *pf)
{
	json_t *data = fetch_models(o, pf);
	if (data)
		check_models(pf, data, o->url);
	json_decref(data);
}

/* Without --model: the one model the server serves, for lines that name
 * none (malloc'd), or NULL when it serves several, none, or cannot say
 * (then such lines are refused, naming --model). */
static char *the_one_model(const struct bulk_opts *o)
{
	json_t *data = fetch_models(o, NULL);
	const char *id = json_array_size(data) == 1 ? json_string_value(json_object_get(json_array_get(data, 0), "id"))
						  : NULL;
	char *m = id && *id ? strdup(id) : NULL;
	json_decref(data);
	return m;
}

/* --concurrency as the plan and the log say it: "48" or "auto (at most 4096)". */
static void concurrency_text(const struct bulk_opts *o, char *out, size_t n)
{
	if (o->concurrency)
		snprintf(out, n, "%ld", o->concurrency);
	else
		snprintf(out, n, "auto (at most %ld)", o->max_concurrency);
}

static void print_plan(FILE *f, const struct bulk_opts *o, const struct preflight *pf, const struct bulk_stats *st)
{
	fprintf(f, "infergate-bulk plan%s:\n", o->dry_run ? " (dry run: nothing sent)" : "");
	fprintf(f, "  input        %s: %ld request lines\n", o->input, st->requests);
	fprintf(f, "  shard        %ld/%ld: %ld lines selected", o->shard_k, o->shard_n, st->selected);
	if (st->selected)
		fprintf(f, " (lines %ld..%ld)", pf->first_line, pf->last_line);
	fprintf(f, "\n");
	if (o->resume)
		fprintf(f, "  resume       %ld already in OUTPUT, %ld in the errors file%s\n", st->resumed_ok,
			st->resumed_err, pf->foreign_done > 0 ? " (plus ids of other inputs or shards)" : "");
	fprintf(f, "  to send      %ld requests (chat %ld, completions %ld, embeddings %ld)\n", st->to_send,
		pf->per_ep[IG_EP_CHAT], pf->per_ep[IG_EP_COMPLETIONS], pf->per_ep[IG_EP_EMBEDDINGS]);
	fprintf(f, "  models       ");
	size_t shown = 0;
	for (size_t i = 0; i < pf->n_models; i++)
		if (pf->models[i].lines)
			fprintf(f, "%s%s (%ld)", shown++ ? ", " : "", pf->models[i].name, pf->models[i].lines);
	fprintf(f, "%s\n", shown ? "" : "-");
	fprintf(f, "  url          %s (models listed: yes)\n", o->url);
	char conc[48];
	concurrency_text(o, conc, sizeof(conc));
	fprintf(f, "  concurrency  %s, rate %s, retries %ld, idle timeout %ld s, stream %s\n", conc,
		o->rate > 0 ? "capped" : "no cap", o->retries, o->idle_timeout_s, o->stream ? "yes" : "no");
	if (o->rate > 0)
		fprintf(f, "  rate cap     %.1f requests/s\n", o->rate);
	fprintf(f, "  output       %s\n  errors       %s\n", o->output, o->errors);
	fflush(f);
}

/* ------------------------------------------------------------------- run */

static int sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t n_signals;
static volatile int signals_seen;

static void on_signal(int signo IG_UNUSED)
{
	int saved = errno;
	if (++n_signals >= 2) {
		static const char msg[] = "\ninfergate-bulk: second signal, exiting now (the run stays resumable)\n";
		ssize_t IG_UNUSED w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(130);
	}
	signals_seen = 1;
	ssize_t IG_UNUSED w = write(sig_pipe[1], "s", 1);
	errno = saved;
}

static int setup_signals(void)
{
	struct sigaction sa;
	if (pipe2(sig_pipe, O_NONBLOCK | O_CLOEXEC) < 0)
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN); /* a file size limit is a write error we report */
	return 0;
}

static void raise_fd_limit(long need)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)need + 64) {
		rl.rlim_cur = rl.rlim_max < (rlim_t)need + 64 ? rl.rlim_max : (rlim_t)need + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

#define AUTO_START 16 /* --concurrency auto's first limit */

static int run(struct bulk_opts *o, struct preflight *pf, struct bulk_stats *st)
{
	struct bulk_run r;
	struct ig_progress prog;
	char *err = NULL;
	int rc = BULK_EXIT_OK;

	memset(&r, 0, sizeof(r));
	r.out.fd = r.err.fd = -1;
	if (o->resume && ig_journal_done_cut_torn(&pf->done, o->output, o->errors, &err) < 0)
		goto fail;
	if (ig_journal_open(&r.out, o->output, &err) < 0 || ig_journal_open(&r.err, o->errors, &err) < 0)
		goto fail;
	if (ig_corpus_open(&r.reader, o->input, &err) < 0) {
		char *e = ig_strdupf("--input %s", err);
		free(err);
		err = e;
		goto fail;
	}
	if (setup_signals() < 0) {
		err = ig_strdupf("pipe: %s", strerror(errno));
		goto fail;
	}
	r.opts = o;
	r.defaults = (struct ig_corpus_defaults){o->model, o->max_tokens, o->temperature, o->have_temperature,
						 o->endpoint, o->stream, "--model"};
	r.skip = pf->skip;
	r.skip_bits = (long)(pf->skip_bytes * 8);
	r.stats = st;
	r.gateway = pf->gateway;
	r.progress = &prog;
	r.sigfd = sig_pipe[0];
	r.signals = &signals_seen;
	ig_progress_init(&prog, o->progress_file, o->progress_interval_s);
	char conc[48];
	concurrency_text(o, conc, sizeof(conc));
	ig_log_info("sending %ld requests to %s (%ld selected, %ld already done), concurrency %s%s", st->to_send,
		    o->url, st->selected, st->resumed_ok + st->resumed_err, conc,
		    o->concurrency ? "" : pf->gateway ? ": an infergate gateway, its learned slots"
						      : ": not an infergate gateway, searching for the most tokens/s");
	st->start_us = ig_now_us();
	ig_auto_init(&st->conc, o->concurrency, AUTO_START, o->max_concurrency, st->start_us);
	raise_fd_limit(st->conc.max); /* the most it will hold, fixed or auto */
	ig_progress_tick(&prog, st, 1);
	if (ig_scheduler_run(&r) < 0 && !st->fatal)
		st->fatal = ig_strdupf("the scheduler could not start");
	st->end_us = ig_now_us();
	ig_progress_finish(&prog, st);
	if (st->fatal)
		ig_log_error("%s", st->fatal);

	long done = st->resumed_ok + st->resumed_err + st->ok + st->failed;
	if (done < st->selected)
		rc = BULK_EXIT_STOPPED;
	else if (st->resumed_err + st->failed > 0)
		rc = BULK_EXIT_ERRORS;
	ig_report_summary(o, st, stdout, rc);
	goto out;
fail:
	ig_log_error("%s", err);
	free(err);
	rc = BULK_EXIT_STOPPED;
out:
	ig_corpus_close(&r.reader);
	ig_journal_close(&r.out);
	ig_journal_close(&r.err);
	return rc;
}

int main(int argc, char **argv)
{
	struct bulk_opts o;
	struct preflight pf;
	struct bulk_stats st;
	struct ig_report_hist *hists = NULL;
	char *err = NULL;
	int rc;

	ig_log_set_ident("infergate-bulk");
	if (argc > 1 && strcmp(argv[1], "generate") == 0)
		return ig_generate_main(argc - 1, argv + 1);
	if (argc > 1 && (strcmp(argv[1], "merge") == 0 || strcmp(argv[1], "--merge") == 0))
		return ig_merge_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "submit") == 0)
		return ig_submit_main(argc - 1, argv + 1);
	if (argc > 1 && strcmp(argv[1], "replay") == 0)
		return ig_replay_main(argc - 1, argv + 1);
	rc = parse_flags(argc, argv, &o, &err);
	if (rc != 0) {
		if (rc < 0) {
			fprintf(stderr, "infergate-bulk: %s\n", err);
			free(err);
		}
		opts_free(&o);
		return rc < 0 ? BULK_EXIT_USAGE : 0;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	memset(&pf, 0, sizeof(pf));
	memset(&st, 0, sizeof(st));
	ig_buf_init(&pf.problems);
	ig_journal_done_init(&pf.done);
	hists = calloc(2, sizeof(*hists));
	if (!hists)
		abort();
	st.latency = &hists[0];
	st.ttft = &hists[1];

	/* preflight: every check, all problems reported together */
	char *auto_model = NULL;
	if (!o.model && o.url && (auto_model = the_one_model(&o))) {
		/* lines that name no model: the one it serves, said once */
		o.model = auto_model;
		ig_log_info("lines that name no model go to '%s', the one model %s serves (--model chooses another)",
			    auto_model, o.url);
	}
	struct ig_corpus_defaults d = {o.model, o.max_tokens, o.temperature, o.have_temperature, o.endpoint, o.stream,
				       "--model"};
	check_files(&o, &pf);
	if (o.resume && pf.n_problems == 0 && ig_journal_done_load(&pf.done, o.output, o.errors, &err) < 0) {
		problem(&pf, "%s", err);
		free(err);
	}
	if (pf.n_problems == 0)
		scan_input(&o, &d, &pf, &st);
	if (pf.n_problems == 0 && (st.to_send > 0 || o.dry_run))
		check_server(&o, &pf);
	if (pf.n_problems > 0) {
		fprintf(stderr, "infergate-bulk: preflight failed, nothing was sent:\n%s", pf.problems.data);
		if (pf.n_problems > 20)
			fprintf(stderr, "  ... and %ld more problems\n", pf.n_problems - 20);
		rc = BULK_EXIT_USAGE;
		goto out;
	}
	if (pf.done.dup_lines || pf.done.in_both)
		ig_log_warn("%ld result lines repeat an id already seen (%ld ids are in both files); "
			    "they were written by another tool or run", pf.done.dup_lines, pf.done.in_both);
	if (pf.foreign_done > 0)
		ig_log_warn("%ld ids in %s / %s are not lines of this input and shard; they are left alone",
			    pf.foreign_done, o.output, o.errors);
	/* The run counts per model in the preflight's entries (pf frees them). */
	st.models = pf.models;
	st.n_models = pf.n_models;
	if (o.dry_run) {
		print_plan(stdout, &o, &pf, &st);
		rc = 0;
		goto out;
	}
	rc = run(&o, &pf, &st);
out:
	ig_journal_done_free(&pf.done);
	ig_buf_free(&pf.problems);
	for (size_t i = 0; i < pf.n_models; i++)
		free(pf.models[i].name);
	free(pf.models);
	free(pf.skip);
	free(st.errs);
	free(st.fatal);
	free(hists);
	opts_free(&o);
	curl_global_cleanup();
	return rc;
}
