/* Unit tests for the simulator's answers that take no generation
 * (src/sim/pooling.c): embeddings of unit length, the same for the same
 * text and different for another, in each server's shape (vLLM's id made of
 * X-Request-Id); rerank sorted by score with top_n; each refusal with its
 * status, param and words (vLLM checking the model name). */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "pooling.h"
#include "../check_main.h"

static struct sim_conf conf_of(int flavor)
{
	struct sim_conf c;
	memset(&c, 0, sizeof(c));
	c.model = "sim-embed";
	c.flavor = flavor;
	return c;
}

static json_t *answered(const struct sim_conf *c, enum sim_pool_kind kind, const char *body, const char *rid)
{
	struct sim_pool_answer a;
	sim_pool_answer(c, kind, body, strlen(body), rid, &a);
	ck_assert_msg(a.body != NULL, "refused: %s", a.err.msg);
	json_t *j = json_loads(a.body, 0, NULL);
	free(a.body);
	ck_assert_ptr_nonnull(j);
	return j;
}

static double norm(json_t *v)
{
	double s = 0;
	size_t i;
	json_t *x;
	json_array_foreach(v, i, x)
		s += json_real_value(x) * json_real_value(x);
	return sqrt(s);
}

START_TEST(embeddings_are_the_texts_own)
{
	struct sim_conf c = conf_of(SIM_FLAVOR_SGLANG);
	json_t *j = answered(&c, SIM_POOL_EMBED, "{\"input\": [\"the cat\", \"a dog\", \"the cat\"]}", NULL);
	ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "list");
	ck_assert_str_eq(json_string_value(json_object_get(j, "model")), "sim-embed");
	json_t *data = json_object_get(j, "data");
	ck_assert_uint_eq(json_array_size(data), 3);
	json_t *e0 = json_object_get(json_array_get(data, 0), "embedding");
	json_t *e1 = json_object_get(json_array_get(data, 1), "embedding");
	json_t *e2 = json_object_get(json_array_get(data, 2), "embedding");
	ck_assert_uint_gt(json_array_size(e0), 0);
	ck_assert(fabs(norm(e0) - 1) < 1e-6); /* unit length, as the servers normalise */
	ck_assert(json_equal(e0, e2));         /* the same text, the same vector */
	ck_assert(!json_equal(e0, e1));
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(data, 2), "index")), 2);
	ck_assert_int_gt(json_integer_value(json_object_get(json_object_get(j, "usage"), "prompt_tokens")), 0);
	json_decref(j);

	struct sim_conf v = conf_of(SIM_FLAVOR_VLLM);
	j = answered(&v, SIM_POOL_EMBED, "{\"model\": \"sim-embed\", \"input\": \"the cat\"}", "req-42");
	ck_assert_str_eq(json_string_value(json_object_get(j, "id")), "embd-req-42");
	json_t *ev = json_object_get(json_array_get(json_object_get(j, "data"), 0), "embedding");
	ck_assert(fabs(norm(ev) - 1) < 1e-6);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "object")),
			 "embedding");
	json_decref(j);
}
END_TEST

START_TEST(rerank_sorts_by_score_and_keeps_top_n)
{
	struct sim_conf c = conf_of(SIM_FLAVOR_VLLM);
	json_t *j = answered(&c, SIM_POOL_RERANK,
			     "{\"query\": \"cats\", \"documents\": [\"dogs\", \"cats and more cats\", \"fish\", \"birds\"],"
			     " \"top_n\": 3}",
			     NULL);
	json_t *res = json_object_get(j, "results");
	ck_assert_uint_eq(json_array_size(res), 3);
	double prev = 2;
	size_t i;
	json_t *r;
	json_array_foreach(res, i, r) {
		double s = json_real_value(json_object_get(r, "relevance_score"));
		ck_assert(s <= prev);
		prev = s;
		ck_assert_int_lt(json_integer_value(json_object_get(r, "index")), 4);
	}
	json_decref(j);
	/* the same question, the same order */
	json_t *again = answered(&c, SIM_POOL_RERANK,
				 "{\"query\": \"cats\", \"documents\": [\"dogs\", \"cats and more cats\", \"fish\", \"birds\"],"
				 " \"top_n\": 3}",
				 NULL);
	json_t *j2 = answered(&c, SIM_POOL_RERANK,
			      "{\"query\": \"cats\", \"documents\": [\"dogs\", \"cats and more cats\", \"fish\", \"birds\"],"
			      " \"top_n\": 3}",
			      NULL);
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(json_object_get(again, "results"), i),
								      "index")),
				 json_integer_value(json_object_get(json_array_get(json_object_get(j2, "results"), i),
								      "index")));
	json_decref(again);
	json_decref(j2);
}
END_TEST

static struct sim_pool_answer refusal(const struct sim_conf *c, enum sim_pool_kind kind, const char *body)
{
	struct sim_pool_answer a;
	sim_pool_answer(c, kind, body, strlen(body), NULL, &a);
	ck_assert_ptr_null(a.body);
	ck_assert_ptr_nonnull(a.err.msg);
	return a;
}

START_TEST(each_refusal_is_told)
{
	struct sim_conf s = conf_of(SIM_FLAVOR_SGLANG), v = conf_of(SIM_FLAVOR_VLLM);
	struct sim_pool_answer a = refusal(&s, SIM_POOL_EMBED, "{\"input\": []}");
	ck_assert_uint_eq(a.err.status, 400);
	ck_assert_str_eq(a.err.param, "input");
	free(a.err.msg);
	a = refusal(&s, SIM_POOL_EMBED, "{\"input\": \"x\", \"encoding_format\": \"int8\"}");
	ck_assert_str_eq(a.err.param, "encoding_format");
	ck_assert_str_eq(a.err.msg, "'encoding_format' must be \"float\" or \"base64\"");
	free(a.err.msg);
	a = refusal(&s, SIM_POOL_EMBED, "[1]");
	ck_assert_str_eq(a.err.msg, "the body must be a JSON object");
	free(a.err.msg);
	a = refusal(&s, SIM_POOL_EMBED, "{\"input\":");
	ck_assert_ptr_nonnull(strstr(a.err.msg, "invalid JSON body: "));
	free(a.err.msg);
	a = refusal(&v, SIM_POOL_EMBED, "{\"model\": \"other\", \"input\": \"x\"}");
	ck_assert_uint_eq(a.err.status, 404);
	ck_assert_str_eq(a.err.type, "NotFoundError");
	ck_assert_str_eq(a.err.msg, "The model `other` does not exist.");
	free(a.err.msg);
	a = refusal(&s, SIM_POOL_RERANK, "{\"query\": \"\", \"documents\": [\"d\"]}");
	ck_assert_str_eq(a.err.msg, "Query cannot be empty");
	free(a.err.msg);
	a = refusal(&s, SIM_POOL_RERANK, "{\"query\": \"q\", \"documents\": \"d\"}");
	ck_assert_str_eq(a.err.msg, "Documents cannot be empty");
	free(a.err.msg);
	a = refusal(&s, SIM_POOL_RERANK, "{\"query\": \"q\", \"documents\": [\"d\"], \"top_n\": 0}");
	ck_assert_str_eq(a.err.param, "top_n");
	free(a.err.msg);
}
END_TEST

IG_CHECK_MAIN("pooling", embeddings_are_the_texts_own, rerank_sorts_by_score_and_keeps_top_n, each_refusal_is_told)
