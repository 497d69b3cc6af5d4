/* Structured outputs in the simulator (schema.h).
 *
 * The fields that ask for a JSON answer, as the imitated servers read them:
 * - OpenAI's response_format {"type":"json_object"} and
 *   {"type":"json_schema","json_schema":{"schema":{...}}}, which vLLM
 *   (vllm/entrypoints/openai/chat_completion/protocol.py, ResponseFormat)
 *   and SGLang (python/sglang/srt/entrypoints/openai/protocol.py) take too;
 * - vLLM's structured_outputs {"json": schema or its text, "json_object":
 *   true} (StructuredOutputsParams, vllm/sampling_params.py) and the older
 *   guided_json (vllm/entrypoints/openai/protocol.py);
 * - SGLang's json_schema, a schema as a string, in a chat or completions
 *   body (protocol.py above) and in /generate's sampling_params
 *   (python/sglang/srt/sampling/sampling_params.py).
 * A regex, a grammar, a choice list or a structural tag is not followed:
 * the answer is words as usual (a gateway treats them alike: it only needs
 * to know that the answer is constrained, src/gateway/path/structured.c).
 * The Responses API's text.format is not read either.
 *
 * The subset of JSON Schema followed: "type" (object, array, string,
 * integer, number, boolean, null; a list of types: its first that is not
 * "null"), "properties" (every one, in the schema's order) and "required"
 * (those not in properties get a string), "items" with "minItems" /
 * "maxItems" (1..3 items when not bounded), "enum" and "const" (one of the
 * values as given), "minimum" / "maximum" for integers, "anyOf" / "oneOf" /
 * "allOf" (their first schema). Anything else ($ref, patterns, formats,
 * string lengths) gets a string of words. A schema nested more than 16
 * deep gets a string there. Without a schema (json_object), an object of
 * three keys.
 *
 * Length: the document's structure is the schema's; its free strings get as
 * many words as bring it nearest `target` tokens (at least one each), so the
 * answer's length (--output-tokens, or the seed's) is honoured as far as the
 * JSON allows. max_tokens then cuts it where it falls, with finish_reason
 * "length", as vLLM and SGLang do with a grammar (the client gets invalid
 * JSON then, as from them). */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "schema.h"
#include "text.h"

/* ---- which fields ask for JSON ---- */

/* A schema given as an object or as its text. Returns 1 (*schema set,
 * *owned when parsed here), -1 with *err when the text is not JSON. */
static int take_schema(json_t *v, const char *name, json_t **schema, json_t **owned, char **err)
{
	if (json_is_string(v)) {
		json_error_t je;
		json_t *s = json_loads(json_string_value(v), 0, &je);
		if (!s) {
			*err = ig_strdupf("'%s' is not a valid JSON schema: %s", name, je.text);
			return -1;
		}
		*owned = s;
		*schema = s;
		return 1;
	}
	*schema = json_is_object(v) ? v : NULL;
	return 1;
}

int sim_schema_of(json_t *root, json_t **schema, json_t **owned, char **err)
{
	json_t *v;
	*schema = NULL;
	*owned = NULL;
	*err = NULL;
	json_t *rf = json_object_get(root, "response_format");
	if (json_is_object(rf)) {
		const char *type = json_string_value(json_object_get(rf, "type"));
		if (type && strcmp(type, "json_object") == 0)
			return 1;
		if (type && strcmp(type, "json_schema") == 0) {
			json_t *js = json_object_get(rf, "json_schema");
			return take_schema(json_object_get(js, "schema"), "response_format.json_schema.schema", schema,
					   owned, err);
		}
	}
	json_t *so = json_object_get(root, "structured_outputs");
	if (json_is_object(so)) {
		if ((v = json_object_get(so, "json")) && !json_is_null(v))
			return take_schema(v, "structured_outputs.json", schema, owned, err);
		if (json_is_true(json_object_get(so, "json_object")))
			return 1;
	}
	if ((v = json_object_get(root, "guided_json")) && !json_is_null(v))
		return take_schema(v, "guided_json", schema, owned, err);
	if (json_is_string(v = json_object_get(root, "json_schema")))
		return take_schema(v, "json_schema", schema, owned, err);
	json_t *sp = json_object_get(root, "sampling_params");
	if (json_is_object(sp) && json_is_string(v = json_object_get(sp, "json_schema")))
		return take_schema(v, "sampling_params.json_schema", schema, owned, err);
	return 0;
}

/* ---- the document ---- */

#define MAX_DEPTH 16
#define MAX_ITEMS 16
#define WORD_MAX 12 /* bytes of a word token, its space apart */

struct gen {
	struct ig_buf *raw; /* the document */
	uint64_t state;     /* structure: enum picks, counts, numbers */
	struct sim_text words;
	long nwords;        /* words per free string */
};

static void put_json(struct gen *g, const json_t *v)
{
	char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
	if (s)
		ig_buf_append(g->raw, s, strlen(s));
	free(s);
}

static void put_words(struct gen *g)
{
	char tok[SIM_TOKEN_MAX + 1];
	ig_buf_append(g->raw, "\"", 1);
	for (long i = 0; i < g->nwords; i++) {
		size_t n = sim_text_next(&g->words, tok);
		const char *t = tok;
		if (i == 0 && *t == ' ')
			t++, n--;
		ig_buf_append(g->raw, t, n);
	}
	ig_buf_append(g->raw, "\"", 1);
}

static long bound(const json_t *s, const char *key, long dflt)
{
	json_t *v = json_object_get(s, key);
	return json_is_integer(v) ? (long)json_integer_value(v) : json_is_real(v) ? (long)json_real_value(v) : dflt;
}

/* The schema's type: its "type", the first of a list that is not "null",
 * "object" for properties without a type; NULL when none. */
static const char *type_of(const json_t *s)
{
	json_t *t = json_object_get(s, "type");
	if (json_is_string(t))
		return json_string_value(t);
	if (json_is_array(t)) {
		size_t i;
		json_t *x;
		const char *first = NULL;
		json_array_foreach(t, i, x) {
			if (!json_is_string(x))
				continue;
			if (!first)
				first = json_string_value(x);
			if (strcmp(json_string_value(x), "null") != 0)
				return json_string_value(x);
		}
		return first;
	}
	if (json_is_object(json_object_get(s, "properties")) || json_is_array(json_object_get(s, "required")))
		return "object";
	return NULL;
}

static void value(struct gen *g, const json_t *s, int depth);

static void member(struct gen *g, const char *key, const json_t *s, int depth, bool *first)
{
	json_t *k = json_string(key);
	if (!*first)
		ig_buf_append(g->raw, ", ", 2);
	*first = false;
	put_json(g, k);
	json_decref(k);
	ig_buf_append(g->raw, ": ", 2);
	value(g, s, depth + 1);
}

static void object(struct gen *g, const json_t *s, int depth)
{
	json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"), *v;
	const char *k;
	size_t i;
	bool first = true;
	ig_buf_append(g->raw, "{", 1);
	if (!json_is_object(props) && !json_is_array(req)) {
		/* any object (json_object): three keys of its own */
		static const char *const keys[] = {"answer", "detail", "score"};
		for (i = 0; i < 3; i++) {
			json_t *t = json_pack("{s:s}", "type", i == 2 ? "integer" : "string");
			member(g, keys[i], t, depth, &first);
			json_decref(t);
		}
	}
	json_object_foreach(props, k, v)
		member(g, k, v, depth, &first);
	json_array_foreach(req, i, v)
		if (json_is_string(v) && !json_object_get(props, json_string_value(v)))
			member(g, json_string_value(v), NULL, depth, &first);
	ig_buf_append(g->raw, "}", 1);
}

static void array(struct gen *g, const json_t *s, int depth)
{
	long lo = bound(s, "minItems", 1), hi = bound(s, "maxItems", -1);
	if (lo < 0)
		lo = 0;
	if (lo > MAX_ITEMS)
		lo = MAX_ITEMS;
	if (hi < 0 || hi > lo + 2)
		hi = hi < 0 ? (lo > 3 ? lo : 3) : lo + 2;
	if (hi > MAX_ITEMS)
		hi = MAX_ITEMS;
	if (hi < lo)
		hi = lo;
	long n = lo + (long)(ig_rand_next(&g->state) % (uint64_t)(hi - lo + 1));
	json_t *items = json_object_get(s, "items");
	ig_buf_append(g->raw, "[", 1);
	for (long i = 0; i < n; i++) {
		if (i)
			ig_buf_append(g->raw, ", ", 2);
		value(g, json_is_object(items) ? items : NULL, depth + 1);
	}
	ig_buf_append(g->raw, "]", 1);
}

static void value(struct gen *g, const json_t *s, int depth)
{
	json_t *v;
	if (!json_is_object(s) || depth > MAX_DEPTH) {
		put_words(g);
		return;
	}
	if ((v = json_object_get(s, "const"))) {
		put_json(g, v);
		return;
	}
	if (json_is_array(v = json_object_get(s, "enum")) && json_array_size(v) > 0) {
		put_json(g, json_array_get(v, ig_rand_next(&g->state) % json_array_size(v)));
		return;
	}
	static const char *const alts[] = {"anyOf", "oneOf", "allOf"};
	for (size_t i = 0; i < 3; i++)
		if (json_is_array(v = json_object_get(s, alts[i])) && json_array_size(v) > 0 && !type_of(s)) {
			value(g, json_array_get(v, 0), depth + 1);
			return;
		}
	const char *t = type_of(s);
	uint64_t r = ig_rand_next(&g->state);
	if (!t || strcmp(t, "string") == 0) {
		put_words(g);
	} else if (strcmp(t, "object") == 0) {
		object(g, s, depth);
	} else if (strcmp(t, "array") == 0) {
		array(g, s, depth);
	} else if (strcmp(t, "integer") == 0) {
		long lo = bound(s, "minimum", 0), hi = bound(s, "maximum", lo + 1000);
		if (hi < lo || hi - lo > 1000000)
			hi = hi < lo ? lo : lo + 1000000;
		ig_buf_printf(g->raw, "%ld", lo + (long)(r % (uint64_t)(hi - lo + 1)));
	} else if (strcmp(t, "number") == 0) {
		ig_buf_printf(g->raw, "%ld.%02ld", (long)(r % 1000), (long)((r >> 20) % 100));
	} else if (strcmp(t, "boolean") == 0) {
		ig_buf_printf(g->raw, "%s", r & 1 ? "true" : "false");
	} else if (strcmp(t, "null") == 0) {
		ig_buf_printf(g->raw, "null");
	} else {
		put_words(g);
	}
}

static void make(struct ig_buf *raw, const json_t *schema, uint64_t seed, long nwords)
{
	struct gen g = {.raw = raw, .state = seed ^ 0xD1B54A32D192ED03ull, .nwords = nwords};
	sim_text_init(&g.words, seed);
	ig_buf_reset(raw);
	if (schema)
		value(&g, schema, 0);
	else
		object(&g, NULL, 0);
}

static bool word_byte(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c >= 0x80;
}

/* Appends raw[0..n) escaped for a JSON string. */
static void escape(struct ig_buf *out, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c == '"' || c == '\\')
			ig_buf_printf(out, "\\%c", c);
		else if (c < 0x20)
			ig_buf_printf(out, "\\u%04x", c);
		else
			ig_buf_append(out, p + i, 1);
	}
}

/* Cuts the document into tokens: a word (with the space before it, at
 * most WORD_MAX bytes, never inside a UTF-8 sequence) or up to two other
 * bytes. Returns their number; out NULL: only counts. */
static long tokens(const struct ig_buf *raw, struct ig_buf *out)
{
	const char *d = raw->data ? raw->data : "";
	size_t n = raw->len, i = 0;
	long count = 0;
	while (i < n) {
		size_t j = i;
		if (d[j] == ' ' && j + 1 < n && word_byte((unsigned char)d[j + 1]))
			j++;
		if (word_byte((unsigned char)d[j])) {
			size_t start = j;
			while (j < n && word_byte((unsigned char)d[j]) &&
			       (j - start < WORD_MAX || ((unsigned char)d[j] & 0xC0) == 0x80))
				j++;
		} else {
			while (j < n && j - i < 2 && !word_byte((unsigned char)d[j]) &&
			       !(d[j] == ' ' && j + 1 < n && word_byte((unsigned char)d[j + 1])))
				j++;
		}
		if (out) {
			escape(out, d + i, j - i);
			ig_buf_append(out, "", 1);
		}
		count++;
		i = j;
	}
	return count;
}

long sim_schema_doc(const json_t *schema, uint64_t seed, long target, struct ig_buf *out)
{
	struct ig_buf raw;
	ig_buf_init(&raw);
	/* Two sizes tell how many tokens a word per free string costs. */
	make(&raw, schema, seed, 1);
	long t1 = tokens(&raw, NULL);
	make(&raw, schema, seed, 2);
	long t2 = tokens(&raw, NULL), nwords = 1;
	if (t2 > t1 && target > t1)
		nwords = 1 + (target - t1 + (t2 - t1) / 2) / (t2 - t1);
	if (nwords > 200)
		nwords = 200;
	make(&raw, schema, seed, nwords);
	long n = tokens(&raw, out);
	ig_buf_free(&raw);
	return n;
}
