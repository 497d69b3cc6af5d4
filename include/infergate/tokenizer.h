/* The models' tokenizer: a Hugging Face tokenizer.json of the byte-level BPE
 * kind (Qwen3's, Llama-3's), encoding text to the token ids the reference
 * implementation (huggingface/tokenizers, Rust) gives, so the gateway can
 * count and hash prompts in the engines' own tokens (SGLang's
 * python/sglang/srt/hf_transformers_utils.py and vLLM's
 * vllm/transformers_utils/tokenizer.py get_tokenizer load transformers'
 * fast tokenizers, i.e. that library, from the same file).
 *
 * What a file may use, and anything else is refused at load with its name:
 *   normalizer      null, NFC, Sequence of those
 *   pre_tokenizer   Split (Regex or String, behavior Isolated, invert false),
 *                   ByteLevel (add_prefix_space false; use_regex: GPT-2's
 *                   pattern), Sequence of those; one ByteLevel step required
 *   model           BPE over the byte-level alphabet, merges as "a b" or
 *                   ["a","b"], ignore_merges; no dropout, byte_fallback,
 *                   subword prefix or suffix
 *   added_tokens    special or not, normalized or not; no lstrip, rstrip or
 *                   single_word
 *   post_processor  null, ByteLevel, TemplateProcessing (its single
 *                   template's special tokens around the text), Sequence
 * Not for: decoding ids back to text, pairs of sequences, truncation.
 *
 * A loaded tokenizer is read-only but for a cache of words behind locks:
 * ig_tokenizer_encode may run on several threads at once. */
#ifndef IG_TOKENIZER_H
#define IG_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ig_tokenizer;

/* Loads a tokenizer.json. NULL with the reason in err (the file, and the
 * part: "normalizer type 'X' is not supported", a bad merge, ...). */
struct ig_tokenizer *ig_tokenizer_load(const char *path, char *err, size_t errlen);
void ig_tokenizer_free(struct ig_tokenizer *t);

/* The token ids of text (UTF-8, len bytes; NUL bytes are text) into a
 * malloc'd array *out of *n ids (*out may be NULL when *n is 0), with the
 * post-processor's tokens (a BOS) around them as HF's encode adds them by
 * default. special: added tokens marked special are recognised in the text
 * (HF's default; right for prompts rendered from a chat template); when
 * false they are text like any other (HF's encode_special_tokens). Bytes
 * that are not UTF-8 are read as U+FFFD each maximal bad subpart, as
 * Python's and Rust's lossy decoding do before a string reaches HF.
 * Returns 0, or -1 when out of memory. */
int ig_tokenizer_encode(const struct ig_tokenizer *t, const char *text, size_t len, bool special,
			uint32_t **out, size_t *n);
/* One more than the largest id of the vocab and the added tokens
 * (transformers' len(tokenizer)). */
size_t ig_tokenizer_vocab_size(const struct ig_tokenizer *t);
/* The id of a token as the file spells it (an added token's content, or a
 * vocab entry in the byte-level alphabet: "Ġthe"), or -1. */
long ig_tokenizer_token_id(const struct ig_tokenizer *t, const char *s);

#endif
