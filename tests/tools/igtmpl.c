/* igtmpl: renders chat requests with a model's chat template, for the
 * byte-for-byte comparison with the reference renderer
 * (tests/integration/test_chattmpl_ref.py, beside chattmpl_ref.mjs).
 *
 *   igtmpl TOKENIZER_CONFIG.json [--bench N] < requests.jsonl
 *   igtmpl --templates < templates.jsonl
 *
 * Each input line is {"messages": [...], "tools": [...]?, "add_generation_prompt": bool,
 * "chat_template_kwargs": {...}?};
 * each output line is the rendered prompt as a JSON string, or
 * {"error": "..."} when the template refuses the request. --bench N renders
 * every line N times more and prints "renders/s R" on stderr. With
 * --templates each input line is {"template": "...", "vars": {...}}, rendered
 * by the Jinja renderer alone (include/infergate/jinja.h); the output is the
 * text, {"error": "..."}, or {"parse_error": "..."}. */
#include "config.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/chattmpl.h"
#include "infergate/jinja.h"

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void print(json_t *res)
{
	char *s = json_dumps(res, JSON_ENCODE_ANY | JSON_COMPACT);
	puts(s);
	free(s);
	json_decref(res);
}

/* --templates: one template and its variables a line. */
static int templates(void)
{
	char *line = NULL, err[1024];
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, stdin)) > 0) {
		json_t *r = json_loadb(line, (size_t)n, 0, NULL), *vars = json_object_get(r, "vars"), *val;
		const char *text = json_string_value(json_object_get(r, "template")), *key;
		if (!text || (vars && !json_is_object(vars))) {
			fprintf(stderr, "igtmpl: a line without a template or with vars not an object\n");
			return 1;
		}
		struct ig_jinja *t = ig_jinja_parse(text, json_string_length(json_object_get(r, "template")), err, sizeof(err));
		if (!t) {
			print(json_pack("{ss}", "parse_error", err));
			json_decref(r);
			continue;
		}
		struct ig_jinja_var *v = calloc(json_object_size(vars) + 1, sizeof(*v));
		size_t k = 0;
		json_object_foreach(vars, key, val)
			v[k++] = (struct ig_jinja_var){key, val};
		char *out;
		size_t len;
		if (ig_jinja_render(t, v, k, &out, &len, err, sizeof(err)) == 0) {
			print(json_stringn(out, len));
			free(out);
		} else {
			print(json_pack("{ss}", "error", err));
		}
		free(v);
		ig_jinja_free(t);
		json_decref(r);
	}
	free(line);
	return 0;
}

int main(int argc, char **argv)
{
	char err[1024];
	long bench = 0;
	if (argc == 2 && strcmp(argv[1], "--templates") == 0)
		return templates();
	if (argc == 4 && strcmp(argv[2], "--bench") == 0)
		bench = strtol(argv[3], NULL, 10);
	else if (argc != 2) {
		fprintf(stderr, "usage: igtmpl TOKENIZER_CONFIG.json [--bench N] < requests.jsonl\n");
		return 2;
	}
	struct ig_chattmpl *t = ig_chattmpl_load(argv[1], err, sizeof(err));
	if (!t) {
		fprintf(stderr, "igtmpl: %s\n", err);
		return 1;
	}
	json_t *reqs = json_array();
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while ((n = getline(&line, &cap, stdin)) > 0) {
		json_error_t je;
		json_t *r = json_loadb(line, (size_t)n, 0, &je);
		if (!json_is_object(r)) {
			fprintf(stderr, "igtmpl: input line %zu: %s\n", json_array_size(reqs) + 1, je.text);
			return 1;
		}
		json_array_append_new(reqs, r);
	}
	free(line);
	size_t i;
	json_t *r;
	json_array_foreach(reqs, i, r) {
		char *out;
		size_t len;
		json_t *res;
		if (ig_chattmpl_render_kw(t, json_object_get(r, "messages"), json_object_get(r, "tools"),
		                          json_is_true(json_object_get(r, "add_generation_prompt")),
		                          json_object_get(r, "chat_template_kwargs"), &out, &len, err, sizeof(err)) == 0) {
			res = json_stringn(out, len);
			free(out);
		} else {
			res = json_pack("{ss}", "error", err);
		}
		print(res);
	}
	if (bench > 0) {
		long count = 0;
		double t0 = now();
		for (long k = 0; k < bench; k++)
			json_array_foreach(reqs, i, r) {
				char *out;
				size_t len;
				if (ig_chattmpl_render_kw(t, json_object_get(r, "messages"), json_object_get(r, "tools"),
				                          json_is_true(json_object_get(r, "add_generation_prompt")),
				                          json_object_get(r, "chat_template_kwargs"), &out, &len, err,
				                          sizeof(err)) == 0)
					free(out);
				count++;
			}
		fprintf(stderr, "renders/s %.0f\n", (double)count / (now() - t0));
	}
	json_decref(reqs);
	ig_chattmpl_free(t);
	return 0;
}
