/* `infergate-bulk replay`: a production trace sent open loop, each request
 * at its time, measured (replay_state.h says what is shared).
 *
 * This file is the order of events, as main.c is for `run`: the flags, then
 * the preflight (the flags, the files, every line of the trace, the server
 * and its model: everything that can fail fails before the first send, and
 * together), then the run, then the summary, the CSV, the plot and the exit
 * code. Teams replay a day's trace to plan capacity, compare routing
 * policies and reproduce an incident; aiperf (mooncake_trace with
 * --fixed-schedule), vllm bench serve and SGLang's bench_serving do it as
 * separate Python programs. */
#include "config.h"
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "replay_report.h"
#include "replay_run.h"
#include "trace.h"

/* A file gnuplot is given: no quote that would end its string. */
static int check_plot(void *target IG_UNUSED, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
		      char **err)
{
	if (*v && !strpbrk(v, "'\"\\\n"))
		return 0;
	*err = ig_strdupf("%s: '%s': a file name without quotes, backslashes or newlines", what, v);
	return -1;
}

#define O(field) offsetof(struct replay_opts, field)
#define FILE_FLAG(flag, field, text) \
	{.name = flag, .type = IG_FLAG_STRING, .off = O(field), .metavar = "FILE", .parse = ig_flags_nonempty, .help = text}
static const struct ig_flag flags[] = {
	FILE_FLAG("--input", input, "the trace: Mooncake lines ({\"timestamp\" ms, \"input_length\", \"output_length\", "
				    "\"hash_ids\"}) or OpenAI Batch lines with \"timestamp\" (required)"),
	FILE_FLAG("--output", output, "one line per request: its times, tokens, backend and error (required; an "
				      "existing file is not overwritten)"),
	FILE_FLAG("--csv", csv, "one row per second: arrivals, in flight, ended, TTFT p90, output tokens/s "
				"(default: OUTPUT with .seconds.csv)"),
	FILE_FLAG("--summary-json", summary_json, "the summary as JSON"),
	{.name = "--plot", .type = IG_FLAG_STRING, .off = O(plot), .metavar = "FILE.png", .parse = check_plot,
	 .help = "draw the per-second figures with gnuplot"},
	{.name = "--url", .type = IG_FLAG_STRING, .off = O(url), .def = "http://127.0.0.1:8080", .metavar = "URL",
	 .parse = ig_flags_nonempty, .help = "OpenAI-compatible server or gateway; a trailing /v1 is fine"},
	{.name = "--api-key-env", .type = IG_FLAG_STRING, .off = O(api_key_env), .metavar = "VAR",
	 .parse = ig_flags_nonempty, .help = "send Authorization: Bearer $VAR"},
	IG_BULK_TLS_FLAGS(struct replay_opts, ig_flags_readable),
	{.name = "--model", .type = IG_FLAG_STRING, .off = O(model), .metavar = "NAME", .parse = ig_flags_nonempty,
	 .help = "the model of Mooncake lines and of Batch lines that name none (default: the one the server lists)"},
	{.name = "--endpoint", .type = IG_FLAG_CHOICE, .off = O(endpoint), .def = "chat", .metavar = "chat|completions",
	 .bad = "%s: '%s' is not chat or completions",
	 .help = "where Mooncake lines go: chat (one user message) or completions (the prompt)"},
	{.name = "--speed", .type = IG_FLAG_DOUBLE, .off = O(speed), .min = 0.001, .max = 10000, .def = "1",
	 .metavar = "X", .help = "arrivals X times as dense as in the trace"},
	{.name = "--start", .type = IG_FLAG_DOUBLE, .off = O(start_s), .min = 0, .max = 1e9, .def = "0", .metavar = "S",
	 .help = "replay the trace from S seconds of trace time (the window's requests keep their times from S)"},
	{.name = "--duration", .type = IG_FLAG_DOUBLE, .off = O(duration_s), .min = 0, .max = 1e9, .def = "0",
	 .metavar = "S", .help = "only the requests of S seconds of trace time from --start (0: to the end)"},
	{.name = "--rate", .type = IG_FLAG_DOUBLE, .off = O(rate), .min = 0, .max = 1e6, .def = "0", .metavar = "N",
	 .help = "Batch lines without \"timestamp\": N per second, evenly (before --speed)"},
	{.name = "--slo-ttft-ms", .type = IG_FLAG_DOUBLE, .off = O(slo_ttft_ms), .min = 0, .max = 1e9, .def = "2000",
	 .metavar = "N", .help = "goodput: a request meets its SLO with its first token within N ms ..."},
	{.name = "--slo-tpot-ms", .type = IG_FLAG_DOUBLE, .off = O(slo_tpot_ms), .min = 0, .max = 1e9, .def = "100",
	 .metavar = "N", .help = "... and N ms or less per output token after it"},
	{.name = "--time-scale", .type = IG_FLAG_DOUBLE, .off = O(time_scale), .min = 0.001, .max = 1e6, .def = "1",
	 .metavar = "X", .help = "the simulators' --time-scale: the trace runs X times faster and every figure "
				 "is reported in simulated time"},
	{.name = "--tokens-per-block-bytes", .type = IG_FLAG_LONG, .off = O(bytes_per_token), .min = 1, .max = 64,
	 .def = "4", .metavar = "N",
	 .help = "bytes of synthetic text per token of a hash id's block (4: the simulator's count; a real "
		 "tokenizer's ratio for its words, so input_length comes out right)"},
	{.name = "--block-tokens", .type = IG_FLAG_LONG, .off = O(block_tokens), .min = 1, .max = 1000000,
	 .def = "512", .metavar = "N", .help = "tokens per hash id (Mooncake's traces: 512)"},
	{.name = "--max-in-flight", .type = IG_FLAG_LONG, .off = O(max_in_flight), .min = 1, .max = 100000,
	 .def = "10000", .metavar = "N",
	 .help = "at most N requests in flight; a send held back by it is late (a guard, not a knob)"},
	{.name = "--idle-timeout-s", .type = IG_FLAG_LONG, .off = O(idle_timeout_s), .min = 1, .max = 86400,
	 .def = "300", .metavar = "N", .help = "an answer with no byte for N s (wall clock) is an error"},
	{.name = "--connect-timeout-s", .type = IG_FLAG_LONG, .off = O(connect_timeout_s), .min = 1, .max = 600,
	 .def = "10", .metavar = "N", .help = "TCP connect timeout"},
	{.name = "--priority", .type = IG_FLAG_CHOICE, .off = O(priority), .def = "none",
	 .metavar = "high|normal|low|none", .bad = "%s: '%s' is not high, normal, low or none",
	 .help = "X-Infergate-Priority of every request (none: no header: a trace is interactive traffic)"},
	{.name = "--progress-interval-s", .type = IG_FLAG_LONG, .off = O(progress_interval_s), .min = 1,
	 .max = 3600, .def = "5", .metavar = "N", .help = "plain progress line period when stderr is not a terminal"},
	{.name = "--dry-run", .type = IG_FLAG_SWITCH, .off = O(dry_run),
	 .help = "run every check, print the plan (and the trace's reuse bound), send nothing"},
	{.name = "--log-level", .type = IG_FLAG_CHOICE, .off = O(log_level), .def = "info",
	 .metavar = "debug|info|warn|error", .bad = "%s: '%s' is not debug, info, warn or error", .help = "what to log"},
};

static const struct ig_flags spec = {
	.prog = "infergate-bulk replay",
	.usage = "Usage: infergate-bulk replay --input TRACE --output RESULTS.jsonl [options]\n"
		 "\nSends a trace open loop: each request at its time, whatever the answers do; streamed; measures\n"
		 "per request TTFT, time per output token, end-to-end, tokens, cached tokens and errors, and\n"
		 "goodput under the SLOs. Everything is checked before the first request is sent.\n\nOptions:\n",
	.epilog = "\nMooncake lines: each hash id becomes the same synthetic text of --block-tokens tokens wherever it\n"
		  "  appears (so prefixes are shared as in the trace), sent as one user message (or the prompt with\n"
		  "  --endpoint completions) with max_tokens = output_length and \"ignore_eos\": true.\n"
		  "Batch lines: {\"custom_id\", \"method\", \"url\", \"body\", \"timestamp\"} or the shorthand lines of\n"
		  "  infergate-bulk run, sent as they are, streamed.\n"
		  "Exit status: 0 every request answered; 1 some errors (in OUTPUT); 2 bad flag or input (nothing was\n"
		  "  sent); 3 stopped by a signal or a write failure.\n",
	.flags = flags,
	.n = sizeof(flags) / sizeof(flags[0]),
	.unknown = "unknown flag '%s' (see replay --help)",
	.missing = "%s needs a value",
	.positional = "unexpected argument '%s' (see replay --help)",
	.all_problems = true,
};

/* Returns 0 to run, 1 to exit 0 (--help), -1 with *err. */
static int parse_flags(int argc, char **argv, struct replay_opts *o, char **err)
{
	struct ig_buf errs;
	memset(o, 0, sizeof(*o));
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
		*err = ig_strdupf("%s is required (see replay --help)", !o->input ? "--input" : "--output");
		return -1;
	}
	char *url = ig_parse_base_url("--url", o->url, err);
	if (!url)
		return -1;
	free(o->url);
	o->url = url;
	if (!o->csv) {
		size_t n = strlen(o->output);
		if (n > 6 && strcmp(o->output + n - 6, ".jsonl") == 0)
			n -= 6;
		o->csv = ig_strdupf("%.*s.seconds.csv", (int)n, o->output);
	}
	if (o->api_key_env) {
		o->api_key = getenv(o->api_key_env);
		if (!o->api_key || !*o->api_key) {
			*err = ig_strdupf("--api-key-env: the environment variable %s is not set", o->api_key_env);
			return -1;
		}
	}
	return 0;
}

/* --------------------------------------------------------------- preflight */

struct preflight {
	struct ig_buf problems;
	long n;
};

static void problem(struct preflight *pf, const char *fmt, ...) IG_PRINTF(2, 3);
static void problem(struct preflight *pf, const char *fmt, ...)
{
	va_list ap;
	char *s;
	if (++pf->n > 20)
		return;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(&pf->problems, "  - %s\n", s);
	free(s);
}

/* A file the replay writes: new (a replay is a measurement: an old one is
 * not continued or overwritten), in a writable directory, not the input. */
static void new_file(struct preflight *pf, const char *what, const char *path, const struct stat *in)
{
	struct stat st;
	if (stat(path, &st) == 0) {
		if (in && st.st_dev == in->st_dev && st.st_ino == in->st_ino)
			problem(pf, "%s %s is the input file", what, path);
		else
			problem(pf, "%s %s exists: a replay writes new files (nothing is overwritten); choose another "
				"name or remove it", what, path);
		return;
	}
	char *copy = strdup(path);
	const char *dir = dirname(copy);
	if (access(dir, W_OK | X_OK) < 0)
		problem(pf, "%s %s: the directory %s is not writable (%s)", what, path, dir, strerror(errno));
	free(copy);
}

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
	struct ig_buf *b = ud;
	if (ig_buf_pending(b) + size * n > (16u << 20))
		return 0;
	return ig_buf_append(b, p, size * n) < 0 ? 0 : size * n;
}

/* GET /v1/models: the server answers and lists --model (or, without it, one
 * model, which becomes --model). */
static void check_server(struct replay_opts *o, enum ig_trace_kind kind, struct preflight *pf)
{
	char *url = ig_strdupf("%s/v1/models", o->url);
	char errbuf[CURL_ERROR_SIZE] = "";
	struct ig_buf body;
	struct curl_slist *h = NULL;
	long status = 0;
	json_t *j = NULL;

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
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
	CURLcode rc = curl_easy_perform(e);
	if (rc != CURLE_OK) {
		problem(pf, "cannot reach %s: %s", url, errbuf[0] ? errbuf : curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	j = json_loadb(ig_buf_head(&body), ig_buf_pending(&body), 0, NULL);
	json_t *data = json_object_get(j, "data");
	if (status != 200 || !json_is_array(data)) {
		json_t *m = json_object_get(json_object_get(j, "error"), "message");
		problem(pf, "%s answered HTTP %ld%s%s%s", url, status, json_is_string(m) ? " (" : " without a list of models",
			json_is_string(m) ? json_string_value(m) : "", json_is_string(m) ? ")" : "");
		goto out;
	}
	size_t k;
	json_t *m;
	if (!o->model) {
		const char *id = json_string_value(json_object_get(json_array_get(data, 0), "id"));
		if (json_array_size(data) == 1 && id && *id)
			o->model = strdup(id);
		else if (kind == IG_TRACE_MOONCAKE) /* Batch lines may name theirs */
			problem(pf, "--model is needed: %s lists %zu models", o->url, json_array_size(data));
		goto out;
	}
	json_array_foreach(data, k, m) {
		json_t *id = json_object_get(m, "id");
		if (json_is_string(id) && strcmp(json_string_value(id), o->model) == 0)
			goto out;
	}
	problem(pf, "--model %s: not served by %s", o->model, o->url);
out:
	json_decref(j);
	ig_buf_free(&body);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
	free(url);
}

/* Batch lines: each must make a chat or completions request. */
static void check_batch_lines(const struct replay_opts *o, const struct ig_trace *t, struct preflight *pf)
{
	FILE *f = fopen(o->input, "r");
	if (!f) {
		problem(pf, "--input %s: %s", o->input, strerror(errno));
		return;
	}
	struct ig_corpus_defaults d = {o->model, -1, 0, 0, -1, 1, "--model"};
	for (size_t i = 0; i < t->n && pf->n <= 20; i++) {
		const struct ig_trace_req *q = &t->v[i];
		char *line = malloc(q->len + 1), *err = NULL;
		if (!line)
			abort();
		if (pread(fileno(f), line, q->len, q->offset) != (ssize_t)q->len) {
			problem(pf, "--input %s: read error", o->input);
			free(line);
			break;
		}
		json_t *obj = json_loadb(line, q->len, 0, NULL);
		free(line);
		json_object_del(obj, "timestamp");
		char *text = json_dumps(obj, JSON_COMPACT);
		json_decref(obj);
		struct ig_corpus_line l;
		if (ig_corpus_parse(text, strlen(text), q->line, &d, &l, &err) < 0) {
			problem(pf, "%s", err);
			free(err);
		} else {
			if (l.ep == IG_EP_EMBEDDINGS)
				problem(pf, "line %ld: an embeddings request has no tokens to time: a replay sends chat "
					"and completions", q->line);
			ig_corpus_line_clear(&l);
		}
		free(text);
	}
	fclose(f);
}

static void print_plan(FILE *f, const struct replay_opts *o, const struct ig_trace *t)
{
	char span[32], wall[32];
	ig_report_duration(span, sizeof(span), (double)t->last_ms / 1000.0);
	ig_report_duration(wall, sizeof(wall), (double)t->last_ms / 1000.0 / o->speed / o->time_scale);
	fprintf(f, "infergate-bulk replay plan%s:\n", o->dry_run ? " (dry run: nothing sent)" : "");
	fprintf(f, "  input        %s: %ld lines, %s; %zu in the window", o->input, t->lines,
		t->kind == IG_TRACE_MOONCAKE ? "Mooncake" : "Batch", t->n);
	if (o->start_s > 0 || o->duration_s > 0)
		fprintf(f, " (from %g s%s%g s)", o->start_s, o->duration_s > 0 ? ", for " : "", o->duration_s);
	fprintf(f, "\n  arrivals     over %s of trace time, at speed %gx: %s of wall clock%s\n", span, o->speed, wall,
		o->time_scale != 1 ? " (time scale applied)" : "");
	if (t->kind == IG_TRACE_MOONCAKE)
		fprintf(f, "  reuse bound  %.1f%% of prompt tokens (%.1f%% of blocks) are in blocks seen before\n",
			100.0 * ig_trace_reuse_bound(t), t->blocks ? 100.0 * (double)t->blocks_seen / (double)t->blocks : 0);
	fprintf(f, "  url          %s, model %s\n", o->url, o->model ? o->model : "-");
	fprintf(f, "  output       %s\n  csv          %s\n", o->output, o->csv);
	fflush(f);
}

/* --------------------------------------------------------------------- run */

static volatile int signals_seen;

static void on_signal(int signo IG_UNUSED)
{
	if (signals_seen++) {
		static const char msg[] = "\ninfergate-bulk replay: second signal, exiting now\n";
		ssize_t IG_UNUSED w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
		_exit(130);
	}
}

static int run(struct replay_opts *o, struct ig_trace *t)
{
	struct ig_replay r;
	int rc = BULK_EXIT_OK;
	char *err = NULL;

	memset(&r, 0, sizeof(r));
	r.o = o;
	r.t = t;
	r.signals = &signals_seen;
	r.tty = isatty(STDERR_FILENO);
	r.out_path = o->output;
	r.rec = calloc(t->n, sizeof(*r.rec));
	if (!r.rec)
		abort();
	int fd = open(o->output, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0 || !(r.out = fdopen(fd, "w"))) {
		ig_log_error("--output %s: %s", o->output, strerror(errno));
		if (fd >= 0)
			close(fd);
		free(r.rec);
		return BULK_EXIT_USAGE;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
	ig_raise_nofile(o->max_in_flight + 64);
	char wall[32];
	ig_report_duration(wall, sizeof(wall), (double)t->last_ms / 1000.0 / o->speed / o->time_scale);
	ig_log_info("replaying %zu requests to %s over %s of wall clock (speed %gx%s)", t->n, o->url, wall, o->speed,
		    o->time_scale != 1 ? ", time scale applied" : "");
	if (ig_replay_run(&r) < 0 && !r.fatal)
		r.fatal = ig_strdupf("the run could not start");
	if (r.drawn)
		fputc('\n', stderr);
	if (fflush(r.out) != 0 || fsync(fileno(r.out)) != 0 || ferror(r.out)) {
		if (!r.fatal)
			r.fatal = ig_strdupf("--output %s: %s", o->output, strerror(errno));
	}
	fclose(r.out);
	json_t *s = ig_replay_summary_json(&r);
	ig_replay_print_summary(&r, s, stdout);
	if (o->summary_json) {
		char *text = json_dumps(s, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
		if (!text || ig_report_write_atomic(o->summary_json, text) < 0)
			ig_log_error("--summary-json %s: %s", o->summary_json, strerror(errno));
		free(text);
	}
	json_decref(s);
	if (ig_replay_write_csv(&r, o->csv) < 0)
		ig_log_error("--csv %s: %s", o->csv, strerror(errno));
	else if (o->plot && ig_replay_plot(&r, o->csv, o->plot, &err) < 0) {
		ig_log_error("%s", err);
		free(err);
	}
	if (r.fatal)
		ig_log_error("%s", r.fatal);
	if (r.fatal || r.stopping)
		rc = BULK_EXIT_STOPPED;
	else if (r.errors > 0)
		rc = BULK_EXIT_ERRORS;
	free(r.fatal);
	free(r.rec);
	return rc;
}

static bool on_path(const char *prog)
{
	const char *path = getenv("PATH");
	if (!path)
		return false;
	char *copy = strdup(path), *save = NULL;
	bool found = false;
	for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		char *p = ig_strdupf("%s/%s", *d ? d : ".", prog);
		found = access(p, X_OK) == 0;
		free(p);
	}
	free(copy);
	return found;
}

int ig_replay_main(int argc, char **argv)
{
	struct replay_opts o;
	struct ig_trace t;
	struct preflight pf = {0};
	char *err = NULL;
	int rc;

	memset(&t, 0, sizeof(t));
	rc = parse_flags(argc, argv, &o, &err);
	if (rc != 0) {
		if (rc < 0) {
			fprintf(stderr, "infergate-bulk replay: %s\n", err);
			free(err);
		}
		ig_flags_free(&spec, &o);
		return rc < 0 ? BULK_EXIT_USAGE : 0;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	ig_buf_init(&pf.problems);
	struct stat in;
	int have_in = stat(o.input, &in) == 0;
	if (!o.dry_run) {
		new_file(&pf, "--output", o.output, have_in ? &in : NULL);
		new_file(&pf, "--csv", o.csv, have_in ? &in : NULL);
		if (strcmp(o.output, o.csv) == 0)
			problem(&pf, "--output and --csv are the same file");
		if (o.plot && !on_path("gnuplot"))
			problem(&pf, "--plot %s: gnuplot is not on the PATH (apt-get install gnuplot-nox)", o.plot);
	}
	struct ig_trace_opts to = {o.start_s, o.duration_s, o.rate, o.block_tokens};
	if (ig_trace_load(&t, o.input, &to, &pf.problems, &pf.n) == 0) {
		check_server(&o, t.kind, &pf);
		if (pf.n == 0 && t.kind == IG_TRACE_BATCH)
			check_batch_lines(&o, &t, &pf);
	}
	if (pf.n > 0) {
		fprintf(stderr, "infergate-bulk replay: preflight failed, nothing was sent:\n%s",
			ig_buf_head(&pf.problems));
		if (pf.n > 20)
			fprintf(stderr, "  ... and %ld more problems\n", pf.n - 20);
		rc = BULK_EXIT_USAGE;
		goto out;
	}
	if (o.dry_run) {
		print_plan(stdout, &o, &t);
		rc = 0;
		goto out;
	}
	print_plan(stderr, &o, &t);
	rc = run(&o, &t);
out:
	ig_trace_free(&t);
	ig_buf_free(&pf.problems);
	ig_flags_free(&spec, &o);
	curl_global_cleanup();
	return rc;
}
