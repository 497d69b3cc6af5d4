/* Unit tests for a prompt as the engine sees it (src/gateway/sched/prompt.c):
 * models[] and --tokenizer read and checked, a completion's prompt and a
 * chat's rendered messages tokenized (tests/fixtures/prompt: a byte-level
 * tokenizer without merges, so a byte is its own id, two special tokens,
 * a ChatML-like template), token ids given as the prompt kept. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../check_main.h"
#include "conf/conf.h"
#include "infergate/blockhash.h"
#include "infergate/buf.h"
#include "sched/prompt.h"

/* tests/fixtures/prompt/NAME (IG_SRCDIR, as ig_fixture finds them) */
static const char *fix(const char *name)
{
	static char path[4][1024];
	static int k;
	const char *src = getenv("IG_SRCDIR");
	k = (k + 1) % 4;
	snprintf(path[k], sizeof(path[k]), "%s/tests/fixtures/prompt/%s", src ? src : "..", name);
	return path[k];
}

static struct ig_conf cfg_of(const char *model, const char *tok, const char *tmpl)
{
	struct ig_conf cfg = {0};
	cfg.models = calloc(1, sizeof(*cfg.models));
	cfg.models[0] = (struct ig_model_conf){strdup(model), strdup(tok), tmpl ? strdup(tmpl) : NULL};
	cfg.n_models = 1;
	return cfg;
}

static void cfg_clear(struct ig_conf *cfg)
{
	for (size_t i = 0; i < cfg->n_models; i++) {
		free(cfg->models[i].name);
		free(cfg->models[i].tokenizer);
		free(cfg->models[i].chat_template);
	}
	free(cfg->models);
}

static struct ig_prompts *load_fixture(struct ig_conf *cfg)
{
	*cfg = cfg_of("m", fix("tokenizer.json"), NULL); /* the template beside it */
	struct ig_buf errs;
	ig_buf_init(&errs);
	struct ig_prompts *p = ig_prompts_load(cfg, &errs);
	ck_assert_msg(p != NULL, "%s", errs.data ? errs.data : "");
	ig_buf_free(&errs);
	return p;
}

START_TEST(a_completion_prompt_in_the_models_tokens)
{
	struct ig_conf cfg;
	struct ig_prompts *p = load_fixture(&cfg);
	json_t *body = json_pack("{s:s, s:s}", "model", "m", "prompt", "hi<|im_end|>");
	uint32_t *ids;
	size_t n;
	char err[128];
	ck_assert_int_eq(ig_prompt_tokens(p, "m", body, &ids, &n, err, sizeof(err)), 1);
	ck_assert_uint_eq(n, 3); /* 'h', 'i', and the special token recognised */
	ck_assert_uint_eq(ids[0], 'h');
	ck_assert_uint_eq(ids[1], 'i');
	ck_assert_uint_eq(ids[2], 257);
	free(ids);
	/* another model: no tokenizer, nothing said */
	ck_assert(!ig_prompt_has_tokenizer(p, "other"));
	ck_assert_int_eq(ig_prompt_tokens(p, "other", body, &ids, &n, err, sizeof(err)), 0);
	json_decref(body);
	/* ids given as the prompt are the prompt */
	body = json_pack("{s:s, s:[i,i,i]}", "model", "m", "prompt", 5, 6, 7);
	ck_assert_int_eq(ig_prompt_tokens(p, "m", body, &ids, &n, err, sizeof(err)), 1);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(ids[2], 7);
	free(ids);
	json_decref(body);
	/* a negative id is not a token: not tokenized, no crash */
	body = json_pack("{s:s, s:[i,i]}", "model", "m", "prompt", 5, -1);
	ck_assert_int_eq(ig_prompt_tokens(p, "m", body, &ids, &n, err, sizeof(err)), 0);
	json_decref(body);
	ig_prompts_free(p);
	cfg_clear(&cfg);
}
END_TEST

START_TEST(a_chat_rendered_by_the_template_then_tokenized)
{
	struct ig_conf cfg;
	struct ig_prompts *p = load_fixture(&cfg);
	json_t *body = json_loads("{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": "
				  "[{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}]}",
				  0, NULL);
	uint32_t *ids;
	size_t n;
	char err[128];
	ck_assert_int_eq(ig_prompt_tokens(p, "m", body, &ids, &n, err, sizeof(err)), 1);
	/* <|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n: the parts joined by a newline
	 * (vLLM's string content format), the generation prompt added by default */
	static const uint32_t want[] = {256, 'u', 's', 'e', 'r', '\n', 'a', '\n', 'b', 257, '\n',
					256, 'a', 's', 's', 'i', 's', 't', 'a', 'n', 't', '\n'};
	ck_assert_uint_eq(n, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(ids[i], want[i]);
	free(ids);
	json_object_set_new(body, "add_generation_prompt", json_false());
	ck_assert_int_eq(ig_prompt_tokens(p, "m", body, &ids, &n, err, sizeof(err)), 1);
	ck_assert_uint_eq(n, 11);
	free(ids);
	json_decref(body);
	/* a null content is "" to the template, as vLLM gives it */
	body = json_loads("{\"model\": \"m\", \"messages\": [{\"role\": \"assistant\", \"content\": null}]}", 0, NULL);
	ck_assert_int_eq(ig_prompt_tokens(p, "m", body, &ids, &n, err, sizeof(err)), 1);
	ck_assert_uint_eq(n, 13 + 11); /* <|im_start|>assistant\n<|im_end|>\n, then the generation prompt */
	ck_assert_uint_eq(ids[10], '\n');
	ck_assert_uint_eq(ids[11], 257);
	free(ids);
	json_decref(body);
	ig_prompts_free(p);
	cfg_clear(&cfg);
}
END_TEST

START_TEST(bad_files_are_named)
{
	struct ig_conf cfg = cfg_of("m", fix("tokenizer_config.json"), NULL); /* not a tokenizer */
	struct ig_buf errs;
	ig_buf_init(&errs);
	ck_assert_ptr_null(ig_prompts_load(&cfg, &errs));
	ck_assert_msg(errs.data && strstr(errs.data, "models[0].tokenizer") && strstr(errs.data, "tokenizer_config.json"),
		      "%s", errs.data ? errs.data : "");
	ig_buf_free(&errs);
	cfg_clear(&cfg);
	cfg = cfg_of("m", fix("missing.json"), NULL);
	ig_buf_init(&errs);
	ig_prompt_conf_check(&cfg, &errs);
	ck_assert_msg(errs.data && strstr(errs.data, "models[0].tokenizer: '") && strstr(errs.data, "missing.json"),
		      "%s", errs.data ? errs.data : "");
	ig_buf_free(&errs);
	cfg_clear(&cfg);
}
END_TEST

IG_CHECK_MAIN("prompt", a_completion_prompt_in_the_models_tokens, a_chat_rendered_by_the_template_then_tokenized,
	      bad_files_are_named)
