/* The simulator's deterministic answer text (text.c): the same prompt and
 * --seed give the same words, with the shared splitmix64 generator. */
#ifndef IG_SIM_TEXT_H
#define IG_SIM_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_TOKEN_MAX 32                 /* longest token text, bytes */

struct sim_text {
	uint64_t state;      /* splitmix64 */
	unsigned long index; /* tokens produced so far */
	bool capitalize;     /* next word starts a sentence */
	const char *doc;     /* a fixed answer's tokens, each NUL-terminated
			      * (schema.h), or NULL: words */
	size_t doc_len, doc_at;
};

/* The seed of a prompt's answer: same prompt bytes and --seed, same text. */
uint64_t sim_text_seed(const void *prompt, size_t n, uint64_t seed);
void sim_text_init(struct sim_text *t, uint64_t text_seed);
/* Words of text_seed's text that make up `prefix` exactly (its first k
 * words, k >= 1), or 0 when it is not such a prefix (at most max words
 * looked at). */
long sim_text_prefix_words(uint64_t text_seed, const char *prefix, size_t n, long max);
/* A completion's prompt that ends with the start of its own answer (what a
 * gateway sends to continue a broken stream: the prompt, then the text so
 * far): the length of the prompt before it, and *nwords, the answer's words
 * it holds; 0 when there is no such end. The answer's first word starts
 * with a capital, so only those bytes are tried. */
size_t sim_text_split(const char *prompt, size_t n, uint64_t seed, long *nwords);
/* Writes the next token (NUL-terminated, at most SIM_TOKEN_MAX bytes, JSON-safe:
 * a word in ASCII, or a document's token already escaped, schema.h) into
 * out; returns its length (0 once a document is all given). */
size_t sim_text_next(struct sim_text *t, char *out);
/* t gives doc's tokens (len bytes of NUL-terminated tokens, schema.h)
 * from the first instead of words; doc NULL: words. */
void sim_text_doc(struct sim_text *t, const char *doc, size_t len);
/* t at text_seed's text after its first `skip` words. */
void sim_text_start(struct sim_text *t, uint64_t text_seed, long skip);
/* The answer's natural length in tokens, 16..256, from the same seed. */
long sim_text_natural_tokens(uint64_t text_seed);
/* Tokens the prompt counts as: about one per 4 bytes, at least 1. */
long sim_text_prompt_tokens(size_t bytes);
/* The simulator's tokenizer, which counts what sim_text_prompt_tokens
 * counts: a token is 4 bytes of text, its id those bytes as a little-endian
 * number (a shorter last one padded with zeros), so ids turn back into the
 * text. sim_text_tokenize appends the ids of text to arr; sim_text_detokenize
 * writes the text of ids into a malloc'd string (NULL when an id is not an
 * integer in 0..2^32-1). */
struct json_t;
void sim_text_tokenize(const char *text, size_t n, struct json_t *arr);
char *sim_text_detokenize(struct json_t *ids);

#endif
