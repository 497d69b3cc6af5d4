/* The tokenizer's parts (include/infergate/tokenizer.h), shared by its
 * files and by nothing else: tokenizer_load.c reads the JSON into this,
 * tokenizer_map.c its tables of strings and GPT-2's byte alphabet,
 * tokenizer_bpe.c the model (merges, the merge loop, a cache of words),
 * tokenizer.c the pipeline that HF's TokenizerImpl::encode runs
 * (tokenizers/src/tokenizer/mod.rs): added tokens, normalizer,
 * pre-tokenizer, model, post-processor. */
#ifndef IG_TOKENIZER_INT_H
#define IG_TOKENIZER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "infergate/tokenizer.h"

/* Byte strings to ids, open addressing; the strings live in one arena. */
struct tok_map {
	uint32_t *slots;        /* entry index + 1, 0 empty */
	size_t mask;
	struct tok_entry {
		uint32_t off, len, id, hash;
	} *ent;
	size_t n, cap;
	char *arena;
	size_t alen, acap;
};

int tok_map_init(struct tok_map *m, size_t expect);
void tok_map_free(struct tok_map *m);
/* Adds s -> id; a key already there takes the new id (the file's last
 * word wins, as a Rust HashMap collected from it). -1 out of memory. */
int tok_map_put(struct tok_map *m, const char *s, size_t len, uint32_t id);
/* The id of s, or -1. */
long tok_map_get(const struct tok_map *m, const char *s, size_t len);

/* (left id, right id) -> (rank, merged id): the merges. */
struct tok_merge {
	uint64_t key;           /* left << 32 | right; UINT64_MAX empty */
	uint32_t rank, id;
};

#define TOK_CACHE_SHARDS 16

struct tok_cache_shard {
	pthread_mutex_t lock;
	struct tok_cached **slot; /* direct mapped by the word's hash */
};

struct tok_bpe {
	struct tok_map vocab;   /* the file's strings (byte-level alphabet) */
	struct tok_map raw;     /* the same entries as raw bytes: ignore_merges */
	uint32_t byte_id[256];  /* each byte's own token */
	struct tok_merge *merges;
	size_t merge_mask;
	bool ignore_merges;
	size_t cache_slots;     /* per shard; 0: no cache */
	struct tok_cache_shard cache[TOK_CACHE_SHARDS];
};

/* GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py, tokenizers'
 * pre_tokenizers/byte_level.rs): the code point standing for byte b. */
uint32_t tok_byte_char(uint8_t b);
/* The byte a code point of that alphabet stands for, or -1. */
int tok_char_byte(uint32_t cp);

int tok_bpe_init(struct tok_bpe *b, size_t vocab_n, size_t merges_n);
void tok_bpe_free(struct tok_bpe *b);
/* After the vocab is in: each byte's token, the raw-bytes map. err set on
 * -1 (a byte without its token). */
int tok_bpe_finish_vocab(struct tok_bpe *b, char *err, size_t errlen);
/* Adds merge number rank of the file (two vocab strings). -1 with err. */
int tok_bpe_add_merge(struct tok_bpe *b, uint32_t rank, const char *l, size_t ll, const char *r, size_t rl,
		      char *err, size_t errlen);

/* A growing array of ids. */
struct tok_ids {
	uint32_t *v;
	size_t n, cap;
};
int tok_ids_push(struct tok_ids *o, uint32_t id);

/* The ids of one pre-token (raw bytes) appended to o. -1 out of memory. */
int tok_bpe_word(const struct tok_bpe *b, const uint8_t *w, size_t n, struct tok_ids *o);

struct tok_added {
	char *content;          /* as matched: normalized when `normalized` */
	size_t len;
	uint32_t id;
	bool special, normalized;
};

/* A pre-tokenizer step: Split or ByteLevel's regex, both Isolated splits. */
struct tok_split {
	pcre2_code *re;
	bool jit;
};

struct ig_tokenizer {
	bool nfc;               /* the normalizer: NFC or nothing */
	struct tok_split *splits;
	size_t nsplits;
	struct tok_bpe bpe;
	struct tok_added *added; /* longest first */
	size_t nadded;
	bool added_first[2][256]; /* [normalized]: a byte that begins one */
	uint32_t *prefix, *suffix; /* the post-processor's ids around the text */
	size_t nprefix, nsuffix;
	size_t vocab_size;
};

/* tokenizer_load.c: the file into t (zeroed). -1 with err. */
int tok_load(struct ig_tokenizer *t, const char *path, char *err, size_t errlen);
/* GPT-2's own split pattern, ByteLevel's use_regex (byte_level.rs). */
extern const char tok_gpt2_pattern[];

#endif
