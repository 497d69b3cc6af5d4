/* A model's tokenizer from its Hugging Face tokenizer.json (src/common/tokenizer.c). */
#ifndef IG_TOKENIZER_H
#define IG_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ig_tokenizer;
struct ig_tokenizer *ig_tokenizer_load(const char *path, char *err, size_t errlen);
void ig_tokenizer_free(struct ig_tokenizer *t);
int ig_tokenizer_encode(const struct ig_tokenizer *t, const char *text, size_t len, bool special, uint32_t **out,
			size_t *n);
size_t ig_tokenizer_vocab_size(const struct ig_tokenizer *t);
long ig_tokenizer_token_id(const struct ig_tokenizer *t, const char *s);

#endif
