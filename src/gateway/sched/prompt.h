/* A prompt as the engine will see it: the token ids of the request's text,
 * through the model's own tokenizer (tokenizer.json) and, for chat, its
 * chat template, as vLLM and SGLang build it (vllm/entrypoints/
 * chat_utils.py apply_hf_chat_template, then the tokenizer without
 * special tokens added: the template wrote them). What the exact prefix
 * index (kvindex.h) is looked up with, an exact prompt count for a key's
 * tpm, and the gateway's own /tokenize.
 *
 * The models' tokenizers are loaded once at start (and at a reload),
 * models[].tokenizer; a model without one is counted at 4 bytes a token,
 * as infergate-sim counts it (and so its blocks are the sim's). Not here:
 * where a request goes (the policies). */
#ifndef IG_SCHED_PROMPT_H
#define IG_SCHED_PROMPT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "conf/conf.h"
#include "infergate/buf.h"

struct ig_prompts;

/* Loads every models[] entry's tokenizer and template; problems (a file
 * that is not a tokenizer, a template it cannot render) are lines in errs
 * naming models[i]. Returns NULL on a problem or when no model has a
 * tokenizer (check errs->len). */
struct ig_prompts *ig_prompts_load(const struct ig_conf *cfg, struct ig_buf *errs);
void ig_prompts_free(struct ig_prompts *p);

/* The prompt's token ids as the engine will see them into a malloc'd *ids:
 * chat: messages (and tools) through the template, with the generation
 * prompt; completions: prompt (a string, or token ids as given; of a list
 * of prompts, the first). Returns 1 (ids set), 0 (model has no tokenizer,
 * or the body has no prompt it knows), -1 (the template refused the
 * messages, or out of memory: the reason in err). */
int ig_prompt_tokens(const struct ig_prompts *p, const char *model, json_t *root, uint32_t **ids, size_t *n,
		     char *err, size_t errlen);
/* Whether the model has a tokenizer. */
bool ig_prompt_has_tokenizer(const struct ig_prompts *p, const char *model);

/* The table rows: models[] and --tokenizer MODEL=PATH (registered by
 * conf_parts.c), and the check that each tokenizer path is readable. */
extern const struct ig_conf_part ig_prompt_conf;
void ig_prompt_conf_check(struct ig_conf *cfg, struct ig_buf *errs);

#endif
