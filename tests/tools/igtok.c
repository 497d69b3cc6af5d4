/* igtok: the tokenizer (include/infergate/tokenizer.h) from the command
 * line, for tests/integration/test_tokenizer_ref.py and bench/tokenizer.py.
 *
 *   igtok [--no-special] TOKENIZER.json [INPUT]
 *       INPUT (stdin by default) is JSON lines {"text": "...", "special":
 *       true|false (optional)}; prints each text's ids as a JSON array, one
 *       line each, in order.
 *   igtok --raw [--no-special] TOKENIZER.json [INPUT]
 *       the whole INPUT is one text.
 *   igtok --bench SECONDS [--threads N] TOKENIZER.json [INPUT]
 *       encodes INPUT's texts over and over for SECONDS on each of N
 *       threads; prints {"load_s", "tokens", "bytes", "seconds", "cpu_s",
 *       "tokens_per_s", "tokens_per_cpu_s"} as one JSON line (cpu_s: the
 *       process's CPU time over the loop only).
 * Not a test itself: its callers compare what it prints. */
#include "config.h"
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/tokenizer.h"

struct text {
	char *s;
	size_t len;
	bool special;
};

static struct ig_tokenizer *tok;
static struct text *texts;
static size_t ntexts;
static double bench_s;

static double clock_s(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

static char *slurp(FILE *f, size_t *len)
{
	size_t cap = 1 << 16, n = 0, r;
	char *b = malloc(cap);
	while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			char *nb = realloc(b, cap *= 2);
			if (!nb) {
				free(b);
				return NULL;
			}
			b = nb;
		}
	}
	*len = n;
	return b;
}

static int add_text(const char *s, size_t len, bool special)
{
	struct text *nt = realloc(texts, (ntexts + 1) * sizeof(*nt));
	if (!nt)
		return -1;
	texts = nt;
	texts[ntexts].s = malloc(len + 1);
	if (!texts[ntexts].s)
		return -1;
	memcpy(texts[ntexts].s, s, len);
	texts[ntexts].len = len;
	texts[ntexts].special = special;
	ntexts++;
	return 0;
}

/* INPUT's JSON lines into texts. */
static int read_lines(char *buf, size_t len, bool special)
{
	size_t line = 0;
	for (char *p = buf, *end = buf + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		line++;
		if (n) {
			json_error_t je;
			json_t *o = json_loadb(p, n, JSON_ALLOW_NUL, &je);
			json_t *tx = json_object_get(o, "text"), *sp = json_object_get(o, "special");
			if (!json_is_string(tx)) {
				fprintf(stderr, "igtok: line %zu: not {\"text\": \"...\"}: %s\n", line,
					o ? "no text" : je.text);
				json_decref(o);
				return -1;
			}
			if (add_text(json_string_value(tx), json_string_length(tx),
				     json_is_boolean(sp) ? json_is_true(sp) : special) < 0) {
				json_decref(o);
				return -1;
			}
			json_decref(o);
		}
		p += n + 1;
	}
	return 0;
}

struct run {
	size_t tokens, bytes;
	double seconds;
};

static void *bench(void *arg)
{
	struct run *r = arg;
	double t0 = now();
	do {
		for (size_t i = 0; i < ntexts; i++) {
			uint32_t *ids;
			size_t n;
			if (ig_tokenizer_encode(tok, texts[i].s, texts[i].len, texts[i].special, &ids, &n) < 0) {
				fprintf(stderr, "igtok: out of memory\n");
				exit(1);
			}
			r->tokens += n;
			r->bytes += texts[i].len;
			free(ids);
		}
	} while ((r->seconds = now() - t0) < bench_s);
	return NULL;
}

static void usage(void)
{
	fprintf(stderr, "usage: igtok [--no-special] [--raw] [--bench SECONDS [--threads N]] TOKENIZER.json [INPUT]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	bool special = true, raw = false;
	int threads = 1, i = 1;
	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--no-special") == 0)
			special = false;
		else if (strcmp(argv[i], "--raw") == 0)
			raw = true;
		else if (strcmp(argv[i], "--bench") == 0 && i + 1 < argc)
			bench_s = atof(argv[++i]);
		else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
			threads = atoi(argv[++i]);
		else
			usage();
	}
	if (i >= argc || argc - i > 2 || threads < 1 || threads > 64)
		usage();
	char err[512];
	double t0 = now();
	tok = ig_tokenizer_load(argv[i], err, sizeof(err));
	double load_s = now() - t0;
	if (!tok) {
		fprintf(stderr, "igtok: %s\n", err);
		return 1;
	}
	FILE *in = i + 1 < argc ? fopen(argv[i + 1], "rb") : stdin;
	if (!in) {
		perror(argv[i + 1]);
		return 1;
	}
	size_t len;
	char *buf = slurp(in, &len);
	if (!buf || (raw ? add_text(buf, len, special) : read_lines(buf, len, special)) < 0)
		return 1;
	free(buf);
	if (bench_s > 0) {
		pthread_t th[64];
		struct run runs[64] = {{0}};
		double cpu0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
		for (int k = 0; k < threads; k++)
			pthread_create(&th[k], NULL, bench, &runs[k]);
		struct run all = {0, 0, 0};
		for (int k = 0; k < threads; k++) {
			pthread_join(th[k], NULL);
			all.tokens += runs[k].tokens;
			all.bytes += runs[k].bytes;
			if (runs[k].seconds > all.seconds)
				all.seconds = runs[k].seconds;
		}
		double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
		printf("{\"load_s\": %.4f, \"tokens\": %zu, \"bytes\": %zu, \"seconds\": %.3f, \"cpu_s\": %.3f, "
		       "\"tokens_per_s\": %.0f, \"tokens_per_cpu_s\": %.0f}\n",
		       load_s, all.tokens, all.bytes, all.seconds, cpu, (double)all.tokens / all.seconds,
		       (double)all.tokens / cpu);
	} else {
		for (size_t k = 0; k < ntexts; k++) {
			uint32_t *ids;
			size_t n;
			if (ig_tokenizer_encode(tok, texts[k].s, texts[k].len, texts[k].special, &ids, &n) < 0) {
				fprintf(stderr, "igtok: out of memory\n");
				return 1;
			}
			putchar('[');
			for (size_t j = 0; j < n; j++)
				printf(j ? ",%u" : "%u", ids[j]);
			puts("]");
			free(ids);
		}
	}
	for (size_t k = 0; k < ntexts; k++)
		free(texts[k].s);
	free(texts);
	ig_tokenizer_free(tok);
	return 0;
}
