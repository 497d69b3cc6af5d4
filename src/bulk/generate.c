/* `infergate-bulk generate`: synthetic corpora for rehearsals, tests and
 * benchmarks. Line i depends only on (seed, i), so a corpus can be rebuilt
 * or extended byte for byte. Prompt lengths are log-uniform (many short,
 * some long), as in real batch jobs. */
#include "config.h"
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "bulk.h"

static const char *words[] = {
	"the", "model", "answer", "question", "data", "summary", "report", "review", "customer",
	"product", "shipping", "delay", "refund", "quality", "excellent", "poor", "battery", "screen",
	"price", "value", "service", "support", "team", "meeting", "schedule", "project", "deadline",
	"budget", "risk", "plan", "analysis", "result", "experiment", "sample", "protein", "cell",
	"gene", "climate", "ocean", "forest", "river", "mountain", "city", "history", "museum",
	"painting", "music", "rhythm", "melody", "novel", "chapter", "character", "dialogue", "scene",
	"code", "function", "variable", "loop", "memory", "thread", "network", "packet", "latency",
	"server", "client", "request", "response", "token", "batch", "queue", "cache", "index",
	"and", "or", "but", "because", "although", "while", "after", "before", "during", "with",
	"without", "about", "against", "between", "into", "through", "over", "under", "again",
	"quickly", "slowly", "carefully", "clearly", "rarely", "often", "never", "always",
	"describe", "explain", "compare", "list", "translate", "classify", "rewrite", "extract",
	"café", "naïve", "déjà", "Zürich", "東京", "データ", "ünïcödé", "\"quoted\"", "back\\slash",
	"tab\there", "new\nline", "emoji-🙂", "x", "yes", "no", "maybe", "42", "3.14", "2024",
};
static const char *tasks[] = {
	"Summarize the following text in one sentence:",
	"Classify the sentiment of this review as positive, negative or neutral:",
	"Translate into French:",
	"Extract the named entities from:",
	"Answer the question briefly:",
	"Rewrite this more politely:",
	"Write a short title for:",
	"List three keywords for:",
};
static const char *systems[] = {
	"You are a helpful assistant.",
	"You are a terse assistant. Answer in at most two sentences.",
	"You label data for a research project. Output only the label.",
};

#define N_WORDS (sizeof(words) / sizeof(words[0]))

void ig_generate_line(struct ig_buf *b, uint64_t seed, long i, enum ig_endpoint kind,
		      const char *model, long max_tokens)
{
	uint64_t st = seed * 0x2545F4914F6CDD1Dull ^ (uint64_t)i * 0x9E3779B97F4A7C15ull;
	struct ig_buf text;
	char id[32];

	ig_rand_next(&st);
	ig_buf_init(&text);
	/* log-uniform between 4 and 300 words: mean about 70 */
	double r = ig_rand_next_unit(&st);
	long n = (long)(4.0 * exp(r * log(300.0 / 4.0)));
	ig_buf_printf(&text, "%s", tasks[ig_rand_next(&st) % (sizeof(tasks) / sizeof(tasks[0]))]);
	for (long w = 0; w < n; w++)
		ig_buf_printf(&text, " %s", words[ig_rand_next(&st) % N_WORDS]);

	json_t *body = json_object();
	if (model)
		json_object_set_new(body, "model", json_string(model));
	json_t *content = json_stringn(text.data, text.len);
	if (kind == IG_EP_CHAT) {
		json_t *msgs = json_array();
		if (ig_rand_next(&st) % 5 == 0)
			json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "system", "content",
						 systems[ig_rand_next(&st) % (sizeof(systems) / sizeof(systems[0]))]));
		json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", "user", "content", content));
		json_object_set_new(body, "messages", msgs);
	} else {
		json_object_set_new(body, "prompt", content);
	}
	if (max_tokens > 0)
		json_object_set_new(body, "max_tokens", json_integer(max_tokens));
	snprintf(id, sizeof(id), "req-%09ld", i + 1);
	json_t *line = json_pack("{s:s, s:s, s:s, s:o}", "custom_id", id, "method", "POST",
				 "url", ig_corpus_endpoint_path(kind), "body", body);
	char *s = json_dumps(line, JSON_COMPACT);
	json_decref(line);
	ig_buf_printf(b, "%s", s ? s : "");
	free(s);
	ig_buf_free(&text);
}

struct gen_opts {
	long count;      /* -1 until given */
	char *output;
	long seed;
	int kind;        /* enum ig_endpoint: chat or completions */
	char *model;
	long max_tokens; /* -1: none in the bodies */
};

#define G(field) offsetof(struct gen_opts, field)
static const struct ig_flag gen_flags[] = {
	{.name = "--count", .type = IG_FLAG_LONG, .off = G(count), .min = 1, .max = 1000000000, .metavar = "N",
	 .help = "number of lines (required)"},
	{.name = "--output", .type = IG_FLAG_STRING, .off = G(output), .metavar = "FILE",
	 .help = "where to write (written to FILE.tmp, then renamed; - for stdout) (required)"},
	{.name = "--seed", .type = IG_FLAG_LONG, .off = G(seed), .min = 0, .max = 9223372036854775807.0, .def = "1",
	 .metavar = "S", .help = "seed"},
	{.name = "--kind", .type = IG_FLAG_CHOICE, .off = G(kind), .def = "chat", .metavar = "chat|completions",
	 .bad = "%s: '%s' is not chat or completions",
	 .help = "chat: /v1/chat/completions lines; completions: /v1/completions lines"},
	{.name = "--model", .type = IG_FLAG_STRING, .off = G(model), .metavar = "NAME",
	 .help = "put \"model\" in each body (default: none, give --model to the run)"},
	{.name = "--max-tokens", .type = IG_FLAG_LONG, .off = G(max_tokens), .min = 1, .max = 10000000,
	 .metavar = "N", .help = "put \"max_tokens\" in each body (default: none)"},
};

static const struct ig_flags gen_spec = {
	.prog = "infergate-bulk generate",
	.usage = "Usage: infergate-bulk generate --count N --output FILE [options]\n"
		 "Writes N synthetic requests in the OpenAI Batch format (custom_id req-000000001 ...),\n"
		 "prompt lengths log-uniform from 4 to 300 words; line i depends only on --seed and i.\n\n",
	.epilog = "\nExample: infergate-bulk generate --count 902087 --seed 1 --output corpus.jsonl\n",
	.flags = gen_flags,
	.n = sizeof(gen_flags) / sizeof(gen_flags[0]),
	.unknown = "unknown flag '%s' (see generate --help)",
	.missing = "%s needs a value",
	.positional = "unexpected argument '%s' (see generate --help)",
};

static int generate(const struct gen_opts *o);

int ig_generate_main(int argc, char **argv)
{
	struct gen_opts o = {.count = -1, .max_tokens = -1};
	struct ig_buf errs;
	char *err = NULL;
	int rc;

	ig_buf_init(&errs);
	if (ig_flags_defaults(&gen_spec, &o, &err) < 0 || (rc = ig_flags_parse(&gen_spec, &o, argc, argv, NULL, &errs)) < 0) {
		if (!err)
			err = ig_flags_errors(&errs);
		fprintf(stderr, "infergate-bulk generate: %s\n", err);
		free(err);
		ig_buf_free(&errs);
		ig_flags_free(&gen_spec, &o);
		return BULK_EXIT_USAGE;
	}
	ig_buf_free(&errs);
	if (rc == 0 && (o.count < 0 || !o.output)) {
		fprintf(stderr, "infergate-bulk generate: %s\n", o.count < 0 ? "--count is required" : "--output is required");
		ig_flags_print_help(&gen_spec, stderr);
		rc = -1;
	}
	if (rc == 0)
		rc = generate(&o);
	else
		rc = rc > 0 ? 0 : BULK_EXIT_USAGE;
	ig_flags_free(&gen_spec, &o);
	return rc;
}

/* Writes the corpus. Returns the exit status. */
static int generate(const struct gen_opts *o)
{
	const char *output = o->output, *model = o->model;
	long count = o->count, seed = o->seed, max_tokens = o->max_tokens;
	enum ig_endpoint kind = (enum ig_endpoint)o->kind;

	int to_stdout = strcmp(output, "-") == 0;
	char *tmp = to_stdout ? NULL : ig_strdupf("%s.tmp", output);
	FILE *f = to_stdout ? stdout : fopen(tmp, "we");
	if (!f) {
		fprintf(stderr, "infergate-bulk generate: %s: %s\n", tmp, strerror(errno));
		free(tmp);
		return BULK_EXIT_USAGE;
	}
	struct ig_buf b;
	ig_buf_init(&b);
	int ok = 1;
	for (long i = 0; i < count && ok; i++) {
		ig_generate_line(&b, (uint64_t)seed, i, kind, model, max_tokens);
		ig_buf_append(&b, "\n", 1);
		if (b.len > (1 << 20) || i + 1 == count) {
			ok = fwrite(b.data, 1, b.len, f) == b.len;
			ig_buf_reset(&b);
		}
	}
	ig_buf_free(&b);
	if (fflush(f) != 0)
		ok = 0;
	if (!to_stdout && fclose(f) != 0)
		ok = 0;
	if (ok && tmp && rename(tmp, output) < 0)
		ok = 0;
	if (!ok) {
		fprintf(stderr, "infergate-bulk generate: writing %s: %s\n", output, strerror(errno));
		if (tmp)
			unlink(tmp);
		free(tmp);
		return 1;
	}
	free(tmp);
	if (!to_stdout)
		fprintf(stderr, "infergate-bulk generate: wrote %ld lines to %s\n", count, output);
	return 0;
}
