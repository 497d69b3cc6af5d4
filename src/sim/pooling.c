/* Embeddings, rerank, score, pooling and classify (pooling.h), in the
 * shapes of:
 * - SGLang: python/sglang/srt/entrypoints/openai/serving_embedding.py
 *   (no id or created; items embedding, index, object), serving_rerank.py
 *   (a bare list sorted by score: score, document, index, meta_info;
 *   top_n, return_documents), serving_score.py ({"scores": one list per
 *   item in label_token_ids order, "model", "usage": null, "object":
 *   "scoring"}), and the native /classify of http_server.py (an
 *   EmbeddingReqInput: {"embedding", "meta_info"} per text), request and
 *   usage fields from python/sglang/srt/entrypoints/openai/protocol.py;
 * - vLLM: vllm/frontend/entrypoints/pooling/ embed, scoring (rerank and
 *   score: ids "score-..."), pooling and classify protocol.py and
 *   serving.py: {"id", "object": "list", "created", "model", "data",
 *   "usage"} with UsageInfo {prompt_tokens, total_tokens,
 *   completion_tokens: 0, prompt_tokens_details: null}; rerank's
 *   {"id", "model", "usage", "results": [{index, document: {text,
 *   multi_modal}, relevance_score}]} sorted, top_n 0 meaning all.
 * Vectors have SIM_DIM dimensions, unit length, drawn from a hash of the
 * text; a score is the cosine of two texts' vectors mapped to 0..1. */
#include "config.h"
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "pooling.h"
#include "text.h"

#define SIM_DIM 8

static void vector(const char *text, size_t n, double v[SIM_DIM])
{
	double norm = 0;
	for (int i = 0; i < SIM_DIM; i++) {
		v[i] = (double)(ig_hash64(text, n, (uint64_t)i + 1) % 2001) / 1000.0 - 1.0;
		norm += v[i] * v[i];
	}
	norm = norm > 0 ? sqrt(norm) : 1;
	for (int i = 0; i < SIM_DIM; i++)
		v[i] = round(v[i] / norm * 1e6) / 1e6;
}

static json_t *vector_json(const char *text, size_t n)
{
	double v[SIM_DIM];
	vector(text, n, v);
	json_t *a = json_array();
	for (int i = 0; i < SIM_DIM; i++)
		json_array_append_new(a, json_real(v[i]));
	return a;
}

/* encoding_format "base64": the little-endian float32s, base64 (OpenAI's
 * and both servers' form). */
static json_t *vector_base64(const char *text, size_t n)
{
	double v[SIM_DIM];
	unsigned char raw[SIM_DIM * 4], out[SIM_DIM * 4 * 2];
	vector(text, n, v);
	for (int i = 0; i < SIM_DIM; i++) {
		float f = (float)v[i];
		memcpy(raw + 4 * i, &f, 4); /* x86 and arm64: little-endian */
	}
	EVP_EncodeBlock(out, raw, (int)sizeof(raw));
	return json_string((const char *)out);
}

static double score(const char *a, size_t an, const char *b, size_t bn)
{
	double va[SIM_DIM], vb[SIM_DIM], dot = 0;
	vector(a, an, va);
	vector(b, bn, vb);
	for (int i = 0; i < SIM_DIM; i++)
		dot += va[i] * vb[i];
	return round((dot + 1) / 2 * 1e6) / 1e6;
}

static long tokens(json_t *s)
{
	return sim_text_prompt_tokens(json_string_length(s));
}

static json_t *usage(long prompt)
{
	return json_pack("{s:I, s:I, s:i, s:n}", "prompt_tokens", (json_int_t)prompt, "total_tokens",
			 (json_int_t)prompt, "completion_tokens", 0, "prompt_tokens_details");
}

int sim_refuse(struct sim_perr *e, unsigned status, const char *type, const char *param, char *msg)
{
	*e = (struct sim_perr){status, type, param, msg};
	return -1;
}

static int fail(struct sim_pool_answer *a, unsigned status, const char *type, const char *param, char *msg)
{
	return sim_refuse(&a->err, status, type, param, msg);
}

/* A string or a non-empty list of strings, as a list (a new reference), or
 * NULL. */
static json_t *strings(json_t *v)
{
	if (json_is_string(v))
		return json_pack("[O]", v);
	if (!json_is_array(v) || json_array_size(v) == 0)
		return NULL;
	size_t i;
	json_t *x;
	json_array_foreach(v, i, x)
		if (!json_is_string(x))
			return NULL;
	return json_incref(v);
}

/* vLLM's answer id: "{prefix}-{X-Request-Id, else a random uuid}"
 * (vllm/frontend/entrypoints/openai/engine/serving.py _base_request_id). */
static const char *request_id;

static void answer_id(char *id, size_t size, const char *prefix)
{
	size_t n = (size_t)snprintf(id, size, "%s-", prefix);
	if (request_id && strlen(request_id) < size - n)
		snprintf(id + n, size - n, "%s", request_id);
	else
		ig_random_hex(id + n, 32);
}

/* vLLM's {"id", "object": "list", "created", "model", "data", "usage"}. */
static json_t *vllm_list(const struct sim_conf *conf, const char *prefix, json_t *data, long prompt)
{
	char id[160];
	answer_id(id, sizeof(id), prefix);
	return json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", id, "object", "list", "created",
			 (json_int_t)ig_wall_s(), "model", conf->model, "data", data, "usage", usage(prompt));
}

static int embed(const struct sim_conf *conf, json_t *root, bool vllm, json_t **out, struct sim_pool_answer *a)
{
	json_t *in = strings(json_object_get(root, "input"));
	json_t *fmt = json_object_get(root, "encoding_format");
	if (!in)
		return fail(a, 400, NULL, "input", strdup("'input' must be a string or a non-empty list of strings"));
	bool b64 = json_is_string(fmt) && strcmp(json_string_value(fmt), "base64") == 0;
	if (fmt && !json_is_null(fmt) && !b64 && !(json_is_string(fmt) && strcmp(json_string_value(fmt), "float") == 0)) {
		json_decref(in);
		return fail(a, 400, NULL, "encoding_format", strdup("'encoding_format' must be \"float\" or \"base64\""));
	}
	json_t *data = json_array(), *x;
	size_t i;
	long prompt = 0;
	json_array_foreach(in, i, x) {
		json_t *e = b64 ? vector_base64(json_string_value(x), json_string_length(x))
				: vector_json(json_string_value(x), json_string_length(x));
		prompt += tokens(x);
		json_array_append_new(data, vllm ? json_pack("{s:I, s:s, s:o}", "index", (json_int_t)i, "object",
							     "embedding", "embedding", e)
						 : json_pack("{s:o, s:I, s:s}", "embedding", e, "index", (json_int_t)i,
							     "object", "embedding"));
	}
	json_decref(in);
	a->prompt_tokens = prompt;
	*out = vllm ? vllm_list(conf, "embd", data, prompt)
		    : json_pack("{s:o, s:s, s:s, s:o}", "data", data, "model", conf->model, "object", "list", "usage",
				usage(prompt));
	return 0;
}

struct ranked {
	size_t index;
	double score;
};

static int by_score(const void *x, const void *y)
{
	const struct ranked *a = x, *b = y;
	return a->score < b->score ? 1 : a->score > b->score ? -1 : (a->index > b->index) - (a->index < b->index);
}

static int rerank(const struct sim_conf *conf, json_t *root, bool vllm, json_t **out, struct sim_pool_answer *a)
{
	json_t *q = json_object_get(root, "query"), *docs = json_object_get(root, "documents");
	json_t *top = json_object_get(root, "top_n"), *ret = json_object_get(root, "return_documents");
	if (!json_is_string(q) || (!vllm && json_string_length(q) == 0))
		return fail(a, 400, NULL, "query", strdup(vllm ? "'query' must be a string" : "Query cannot be empty"));
	json_t *d = strings(docs);
	if (!d || json_is_string(docs)) {
		json_decref(d);
		return fail(a, 400, NULL, "documents", strdup("Documents cannot be empty"));
	}
	if (top && !json_is_null(top) && (!json_is_integer(top) || json_integer_value(top) < (vllm ? 0 : 1))) {
		json_decref(d);
		return fail(a, 400, NULL, "top_n", strdup(vllm ? "'top_n' must be an integer of at least 0"
							: "Value error, parameter top_n should be larger than 0."));
	}
	size_t n = json_array_size(d), keep = n;
	if (json_is_integer(top) && json_integer_value(top) > 0 && (size_t)json_integer_value(top) < n)
		keep = (size_t)json_integer_value(top);
	struct ranked *r = calloc(n, sizeof(*r));
	if (!r)
		abort();
	long prompt = 0;
	for (size_t i = 0; i < n; i++) {
		json_t *x = json_array_get(d, i);
		r[i] = (struct ranked){i, score(json_string_value(q), json_string_length(q), json_string_value(x),
						json_string_length(x))};
		prompt += tokens(q) + tokens(x);
	}
	qsort(r, n, sizeof(*r), by_score);
	json_t *list = json_array();
	for (size_t i = 0; i < keep; i++) {
		json_t *doc = json_array_get(d, r[i].index);
		if (vllm)
			json_array_append_new(list, json_pack("{s:I, s:{s:O, s:n}, s:f}", "index", (json_int_t)r[i].index,
							      "document", "text", doc, "multi_modal", "relevance_score",
							      r[i].score));
		else if (json_is_false(ret))
			json_array_append_new(list, json_pack("{s:f, s:I, s:n}", "score", r[i].score, "index",
							      (json_int_t)r[i].index, "meta_info"));
		else
			json_array_append_new(list, json_pack("{s:f, s:O, s:I, s:n}", "score", r[i].score, "document", doc,
							      "index", (json_int_t)r[i].index, "meta_info"));
	}
	free(r);
	json_decref(d);
	a->prompt_tokens = prompt;
	if (!vllm) {
		*out = list;
		return 0;
	}
	char id[160];
	answer_id(id, sizeof(id), "score");
	*out = json_pack("{s:s, s:s, s:{s:I, s:I}, s:o}", "id", id, "model", conf->model, "usage", "prompt_tokens",
			 (json_int_t)prompt, "total_tokens", (json_int_t)prompt, "results", list);
	return 0;
}

/* vLLM's pairs: queries/documents, queries/items, data_1/data_2 or
 * text_1/text_2, each a string or a list (one side of one string is paired
 * with every one of the other). */
static int vllm_pairs(json_t *root, json_t **l, json_t **r, struct sim_pool_answer *a)
{
	static const char *const names[][2] = {{"queries", "documents"}, {"queries", "items"}, {"data_1", "data_2"},
					       {"text_1", "text_2"}};
	for (size_t i = 0; i < 4; i++) {
		json_t *x = json_object_get(root, names[i][0]), *y = json_object_get(root, names[i][1]);
		if (!x || !y)
			continue;
		*l = strings(x);
		*r = strings(y);
		if (*l && *r && (json_array_size(*l) == 1 || json_array_size(*l) == json_array_size(*r)))
			return 0;
		json_decref(*l);
		json_decref(*r);
		return fail(a, 400, NULL, names[i][0],
			    ig_strdupf("'%s' and '%s' must be strings or lists of strings, one of them one or both as long",
				       names[i][0], names[i][1]));
	}
	return fail(a, 400, "Bad Request", NULL,
		    strdup("give 'queries' and 'documents' (or 'queries' and 'items', 'data_1' and 'data_2', "
			   "'text_1' and 'text_2')"));
}

static int score_answer(const struct sim_conf *conf, json_t *root, bool vllm, json_t **out,
			struct sim_pool_answer *a)
{
	long prompt = 0;
	if (vllm) {
		json_t *l, *r;
		if (vllm_pairs(root, &l, &r, a) < 0)
			return -1;
		json_t *data = json_array();
		for (size_t i = 0; i < json_array_size(r); i++) {
			json_t *x = json_array_get(l, json_array_size(l) == 1 ? 0 : i), *y = json_array_get(r, i);
			prompt += tokens(x) + tokens(y);
			json_array_append_new(data, json_pack("{s:I, s:s, s:f}", "index", (json_int_t)i, "object", "score",
							      "score", score(json_string_value(x), json_string_length(x),
									     json_string_value(y), json_string_length(y))));
		}
		json_decref(l);
		json_decref(r);
		a->prompt_tokens = prompt;
		*out = vllm_list(conf, "score", data, prompt);
		return 0;
	}
	json_t *q = json_object_get(root, "query"), *labels = json_object_get(root, "label_token_ids");
	json_t *items = strings(json_object_get(root, "items")), *model = json_object_get(root, "model");
	json_t *soft = json_object_get(root, "apply_softmax");
	if (!json_is_string(q) || !items) {
		json_decref(items);
		return fail(a, 400, NULL, NULL, strdup("'query' must be a string and 'items' a string or a list of strings"));
	}
	if (!json_is_array(labels) || json_array_size(labels) == 0) {
		json_decref(items);
		return fail(a, 400, NULL, NULL, strdup("label_token_ids must be provided"));
	}
	json_t *scores = json_array();
	for (size_t i = 0; i < json_array_size(items); i++) {
		json_t *it = json_array_get(items, i), *row = json_array();
		double v[64], sum = 0;
		size_t nl = json_array_size(labels) < 64 ? json_array_size(labels) : 64;
		prompt += tokens(q) + tokens(it);
		for (size_t k = 0; k < nl; k++) {
			char label[32];
			int ln = snprintf(label, sizeof(label), "%lld", (long long)json_integer_value(json_array_get(labels, k)));
			v[k] = score(json_string_value(it), json_string_length(it), label, (size_t)ln);
			sum += json_is_true(soft) ? exp(v[k]) : 0;
		}
		for (size_t k = 0; k < nl; k++)
			json_array_append_new(row, json_real(json_is_true(soft) ? round(exp(v[k]) / sum * 1e6) / 1e6 : v[k]));
		json_array_append_new(scores, row);
	}
	json_decref(items);
	a->prompt_tokens = prompt;
	*out = json_pack("{s:o, s:s, s:n, s:s}", "scores", scores, "model",
			 json_is_string(model) ? json_string_value(model) : "default", "usage", "object", "scoring");
	return 0;
}

static int pool_or_classify(const struct sim_conf *conf, json_t *root, bool classify, bool vllm, json_t **out,
			    struct sim_pool_answer *a)
{
	const char *field = vllm ? "input" : "text";
	json_t *raw = json_object_get(root, field), *in = strings(raw);
	if (!in) {
		a->native = !vllm;
		return fail(a, 400, NULL, field, ig_strdupf(vllm ? "'%s' must be a string or a non-empty list of strings"
								 : "Either text, input_ids or input_embeds should be provided."
								   " ('%s' must be a string or a list of strings here)",
							    field));
	}
	json_t *data = json_array(), *x;
	size_t i;
	long prompt = 0;
	json_array_foreach(in, i, x) {
		const char *t = json_string_value(x);
		size_t n = json_string_length(x);
		prompt += tokens(x);
		if (!classify) {
			json_array_append_new(data, json_pack("{s:I, s:s, s:o}", "index", (json_int_t)i, "object", "pooling",
							      "data", vector_json(t, n)));
			continue;
		}
		double p1 = score(t, n, "LABEL_1", 7), logit[2] = {1 - p1, p1};
		if (!vllm) { /* SGLang's native answer: the logits, with meta_info; its id the
			      * rid (a batch's: rid_i, io_struct.py), else uuid4().hex */
			char id[160];
			json_t *rid = json_object_get(root, "rid");
			if (json_is_string(rid) && json_is_string(raw))
				snprintf(id, sizeof(id), "%.150s", json_string_value(rid));
			else if (json_is_string(rid))
				snprintf(id, sizeof(id), "%.120s_%zu", json_string_value(rid), i);
			else
				ig_random_hex(id, 32);
			json_array_append_new(data, json_pack("{s:[f,f], s:{s:s, s:I, s:s, s:i, s:f}}", "embedding", logit[0],
							      logit[1], "meta_info", "id", id, "prompt_tokens",
							      (json_int_t)tokens(x), "weight_version", "default",
							      "num_retractions", 0, "e2e_latency", 0.0));
			continue;
		}
		double e0 = exp(logit[0]), e1 = exp(logit[1]), q0 = round(e0 / (e0 + e1) * 1e6) / 1e6;
		json_array_append_new(data, json_pack("{s:I, s:s, s:[f,f], s:i}", "index", (json_int_t)i, "label",
						      q0 >= 0.5 ? "LABEL_0" : "LABEL_1", "probs", q0, 1 - q0, "num_classes", 2));
	}
	json_decref(in);
	a->prompt_tokens = prompt;
	if (!vllm) /* one text, one object; a list, a list */
		*out = json_is_string(raw) ? json_incref(json_array_get(data, 0)) : json_incref(data);
	else
		*out = vllm_list(conf, classify ? "classify" : "pooling", json_incref(data), prompt);
	json_decref(data);
	return 0;
}

void sim_pool_answer(const struct sim_conf *conf, enum sim_pool_kind kind, const char *body, size_t len,
		     const char *req_id, struct sim_pool_answer *a)
{
	request_id = req_id;
	json_error_t jerr;
	json_t *root = json_loadb(body ? body : "", len, 0, &jerr), *out = NULL;
	bool vllm = conf->flavor == SIM_FLAVOR_VLLM;
	*a = (struct sim_pool_answer){0};
	a->native = !vllm && kind == SIM_POOL_CLASSIFY;
	if (!json_is_object(root)) {
		fail(a, 400, "Bad Request", NULL,
		     root ? strdup("the body must be a JSON object") : ig_strdupf("invalid JSON body: %s", jerr.text));
		json_decref(root);
		return;
	}
	json_t *model = json_object_get(root, "model");
	if (vllm && model && !json_is_null(model) &&
	    (!json_is_string(model) || strcmp(json_string_value(model), conf->model) != 0)) {
		fail(a, 404, "NotFoundError", "model",
		     ig_strdupf("The model `%s` does not exist.", json_is_string(model) ? json_string_value(model) : "?"));
		json_decref(root);
		return;
	}
	int rc;
	switch (kind) {
	case SIM_POOL_EMBED:
		rc = embed(conf, root, vllm, &out, a);
		break;
	case SIM_POOL_RERANK:
		rc = rerank(conf, root, vllm, &out, a);
		break;
	case SIM_POOL_SCORE:
		rc = score_answer(conf, root, vllm, &out, a);
		break;
	default:
		rc = pool_or_classify(conf, root, kind == SIM_POOL_CLASSIFY, vllm, &out, a);
		break;
	}
	if (rc == 0 && !(a->body = json_dumps(out, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9))))
		abort();
	json_decref(out);
	json_decref(root);
}
