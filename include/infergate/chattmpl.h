/* A model's chat template (src/common/chattmpl.c). */
#ifndef IG_CHATTMPL_H
#define IG_CHATTMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct ig_chattmpl;
struct ig_chattmpl *ig_chattmpl_load(const char *tokenizer_config_path, char *err, size_t errlen);
struct ig_chattmpl *ig_chattmpl_new(const char *template_text, const char *bos, const char *eos, char *err,
				    size_t errlen);
void ig_chattmpl_free(struct ig_chattmpl *t);
int ig_chattmpl_render(const struct ig_chattmpl *t, const json_t *messages, const json_t *tools,
		       bool add_generation_prompt, char **out, size_t *len, char *err, size_t errlen);

#endif
