/* Unit tests for src/common/tokenizer.c and its parts (tokenizer_load.c,
 * tokenizer_bpe.c, tokenizer_map.c): Hugging Face tokenizer.json
 * byte-level BPE. The two fixtures in tests/fixtures/tokenizer are small
 * tokenizers of the real files' shape (each byte's token at its byte's
 * id, then a few merges):
 *   tiny.json               Qwen3's: NFC, its Split regex, merges as "a b",
 *                           added tokens special and not (270 <|s|>, 271
 *                           <x>, 272 <|s|>!)
 *   bos_ignore_merges.json  Llama-3's kind: ByteLevel's own regex, merges
 *                           as pairs, ignore_merges (258 "abcd" is in the
 *                           vocab, no merge reaches it), a BOS (259) added
 *                           by TemplateProcessing
 * Every expected list of ids below is what HF's tokenizers (Rust, npm
 * tokenizers 0.23.2) gives on the same file; the real models are compared
 * on 11,000 strings in tests/integration/test_tokenizer_ref.py. */
#include "config.h"
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "infergate/tokenizer.h"
#include "../check_main.h"

static char *fixture_path(const char *name)
{
	const char *src = getenv("IG_SRCDIR");
	static char path[1024];
	snprintf(path, sizeof(path), "%s/tests/fixtures/tokenizer/%s", src ? src : "..", name);
	return path;
}

static struct ig_tokenizer *load(const char *name)
{
	char err[512] = "";
	struct ig_tokenizer *t = ig_tokenizer_load(fixture_path(name), err, sizeof(err));
	ck_assert_msg(t != NULL, "%s", err);
	return t;
}

/* text's ids equal want[0..n). */
static void expect(const struct ig_tokenizer *t, const char *text, size_t len, bool special, const uint32_t *want,
		   size_t n)
{
	uint32_t *ids;
	size_t got;
	ck_assert_int_eq(ig_tokenizer_encode(t, text, len, special, &ids, &got), 0);
	char shown[512] = "";
	for (size_t i = 0; i < got && strlen(shown) < 480; i++)
		snprintf(shown + strlen(shown), sizeof(shown) - strlen(shown), "%u ", ids[i]);
	ck_assert_msg(got == n && (n == 0 || memcmp(ids, want, n * sizeof(*ids)) == 0), "'%s': got [ %s] (%zu ids)",
		      text, shown, got);
	free(ids);
}

#define EXPECT(t, s, special, ...)                                                          \
	do {                                                                                \
		const uint32_t want_[] = {__VA_ARGS__};                                     \
		expect(t, s, strlen(s), special, want_, sizeof(want_) / sizeof(want_[0])); \
	} while (0)

/* A copy of a fixture with `from` replaced by `to`, in a temp file. */
static char *variant(const char *name, const char *from, const char *to)
{
	FILE *f = fopen(fixture_path(name), "rb");
	ck_assert_ptr_nonnull(f);
	static char text[65536];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	char *at = strstr(text, from);
	ck_assert_msg(at != NULL, "'%s' not in %s", from, name);
	static char path[64];
	snprintf(path, sizeof(path), "/tmp/ig-tok-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	f = fdopen(fd, "wb");
	fwrite(text, 1, (size_t)(at - text), f);
	fputs(to, f);
	fputs(at + strlen(from), f);
	fclose(f);
	return path;
}

/* The same, from `from` to the end of its line. */
static char *variant_line(const char *name, const char *from, const char *to)
{
	FILE *f = fopen(fixture_path(name), "rb");
	ck_assert_ptr_nonnull(f);
	static char text[65536];
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	fclose(f);
	text[n] = '\0';
	char *at = strstr(text, from);
	ck_assert_msg(at != NULL, "'%s' not in %s", from, name);
	char *eol = strchr(at, '\n');
	ck_assert_ptr_nonnull(eol);
	char line[256];
	snprintf(line, sizeof(line), "%.*s", (int)(eol - at), at);
	return variant(name, line, to);
}

/* Loading the variant fails with a reason that holds `want`. */
static void refused(const char *name, const char *from, const char *to, const char *want)
{
	char *path = variant(name, from, to), err[512] = "";
	struct ig_tokenizer *t = ig_tokenizer_load(path, err, sizeof(err));
	unlink(path);
	ck_assert_msg(t == NULL, "loaded with %s", to);
	ck_assert_msg(strstr(err, want) && strstr(err, path), "error '%s' does not name '%s' and the file", err, want);
}

START_TEST(merges_apply_lowest_rank_first_leftmost_on_a_tie)
{
	struct ig_tokenizer *t = load("tiny.json");
	EXPECT(t, "hello world", true, 259, 264);
	/* "b c" is merge 10 and "a b" merge 11: bc first, and "ab c" never */
	EXPECT(t, "abc", true, 97, 265);
	/* "a a" twice over "aaa": the left pair first */
	EXPECT(t, "aaa", true, 269, 97);
	/* no merge crosses a pre-token: "I", "'LL" (the regex's (?i:'ll)) */
	EXPECT(t, "I'LL", true, 73, 39, 76, 76);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(a_long_word_takes_the_heap_and_agrees_with_the_scan)
{
	struct ig_tokenizer *t = load("tiny.json");
	/* 4,001 a's: one pre-token, 2,000 "aa" and an "a" */
	size_t n = 4001;
	char *s = malloc(n);
	memset(s, 'a', n);
	uint32_t *ids;
	size_t got;
	ck_assert_int_eq(ig_tokenizer_encode(t, s, n, true, &ids, &got), 0);
	ck_assert_uint_eq(got, 2001);
	for (size_t i = 0; i < 2000; i++)
		ck_assert_uint_eq(ids[i], 269);
	ck_assert_uint_eq(ids[2000], 97);
	free(ids);
	/* "hello" repeated as one word: the heap's merges in rank order */
	char *h = malloc(5 * 100);
	for (int i = 0; i < 100; i++)
		memcpy(h + 5 * i, "hello", 5);
	ck_assert_int_eq(ig_tokenizer_encode(t, h, 500, true, &ids, &got), 0);
	ck_assert_uint_eq(got, 100);
	for (size_t i = 0; i < got; i++)
		ck_assert_uint_eq(ids[i], 259);
	free(ids);
	free(h);
	free(s);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(ignore_merges_takes_a_whole_word_from_the_vocab)
{
	struct ig_tokenizer *t = load("bos_ignore_merges.json");
	EXPECT(t, "abcd", true, 259, 258);
	/* " abcd" is not in the vocab: merges, "a b" (rank 0) before "Ġ a" */
	EXPECT(t, " abcd", true, 259, 32, 256, 99, 100);
	ig_tokenizer_free(t);
	/* the same file without ignore_merges: "abcd" by merges */
	char *path = variant("bos_ignore_merges.json", "\"ignore_merges\": true", "\"ignore_merges\": false");
	char err[512];
	t = ig_tokenizer_load(path, err, sizeof(err));
	unlink(path);
	ck_assert_msg(t != NULL, "%s", err);
	EXPECT(t, "abcd", true, 259, 256, 99, 100);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(added_tokens_special_only_when_asked_longest_first)
{
	struct ig_tokenizer *t = load("tiny.json");
	EXPECT(t, "a<|s|>b<x>c", true, 97, 270, 98, 271, 99);
	/* special false: <|s|> is text, <x> (not special) still a token */
	EXPECT(t, "a<|s|>b<x>c", false, 97, 60, 124, 115, 124, 62, 98, 271, 99);
	/* "<|s|>!" is longer than "<|s|>" */
	EXPECT(t, "<|s|>!", true, 272);
	EXPECT(t, "<|s|><|s|>", true, 270, 270);
	EXPECT(t, "<|s|", true, 60, 124, 115, 124);
	ig_tokenizer_free(t);
	/* the BOS of TemplateProcessing, and an added token in the text */
	t = load("bos_ignore_merges.json");
	EXPECT(t, "<bos>ab", true, 259, 259, 256);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(nfc_composes_before_the_merges)
{
	struct ig_tokenizer *t = load("tiny.json");
	/* e + U+0301 is é (C3 A9, "Ã©" merged): one token, as the composed é */
	EXPECT(t, "e\xcc\x81", true, 268);
	EXPECT(t, "\xc3\xa9", true, 268);
	ig_tokenizer_free(t);
	/* without the normalizer: e, then U+0301's two bytes */
	char *path = variant("tiny.json", "\"normalizers\": [\n      {\n        \"type\": \"NFC\"\n      }\n    ]",
			     "\"normalizers\": []");
	char err[512];
	t = ig_tokenizer_load(path, err, sizeof(err));
	unlink(path);
	ck_assert_msg(t != NULL, "%s", err);
	EXPECT(t, "e\xcc\x81", true, 101, 204, 129);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(a_normalized_added_token_is_found_in_the_normalized_text)
{
	/* <x> made "e\u0301!" and normalized: matched after NFC, so the composed
	 * and the decomposed é! are both the token (added_vocabulary.rs) */
	char *path = variant("tiny.json", "\"content\": \"<x>\",\n      \"single_word\": false,\n      \"lstrip\": false,\n"
				      "      \"rstrip\": false,\n      \"normalized\": false",
			     "\"content\": \"e\\u0301!\",\n      \"single_word\": false,\n      \"lstrip\": false,\n"
			     "      \"rstrip\": false,\n      \"normalized\": true");
	char err[512];
	struct ig_tokenizer *t = ig_tokenizer_load(path, err, sizeof(err));
	unlink(path);
	ck_assert_msg(t != NULL, "%s", err);
	EXPECT(t, "\xc3\xa9!", true, 271);
	EXPECT(t, "ae\xcc\x81!b", true, 97, 271, 98);
	EXPECT(t, "e\xcc\x81", true, 268);
	EXPECT(t, "<|s|>e\xcc\x81!", true, 270, 271);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(a_split_on_a_string_is_literal)
{
	/* Split {"String": "l"}: each l its own pre-token, nothing else cut
	 * (no regex: "(" is no group) */
	char *path = variant_line("tiny.json", "\"Regex\": ", "\"String\": \"l\"");
	char err[512];
	struct ig_tokenizer *t = ig_tokenizer_load(path, err, sizeof(err));
	unlink(path);
	ck_assert_msg(t != NULL, "%s", err);
	EXPECT(t, "hello world", true, 256, 108, 108, 111, 262, 108, 100);
	EXPECT(t, "hel(lo", true, 256, 108, 40, 108, 111);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(an_empty_text_is_no_ids_but_the_bos)
{
	struct ig_tokenizer *t = load("tiny.json");
	uint32_t *ids;
	size_t n = 5;
	ck_assert_int_eq(ig_tokenizer_encode(t, "", 0, true, &ids, &n), 0);
	ck_assert_uint_eq(n, 0);
	free(ids);
	ig_tokenizer_free(t);
	t = load("bos_ignore_merges.json");
	EXPECT(t, "", true, 259);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(bytes_that_are_not_utf8_read_as_replacement_characters)
{
	struct ig_tokenizer *t = load("tiny.json");
	/* as Python's and Rust's lossy decoding: one U+FFFD (EF BF BD) per
	 * maximal bad subpart; HF's ids for "a\ufffdb\ufffd" */
	EXPECT(t, "a\xff" "b\xe2\x82", true, 97, 239, 191, 189, 98, 239, 191, 189);
	/* a UTF-16 surrogate in UTF-8 is three bad bytes */
	EXPECT(t, "x\xed\xa0\x80y", true, 120, 239, 191, 189, 239, 191, 189, 239, 191, 189, 121);
	/* NUL is text */
	uint32_t *ids;
	size_t n;
	ck_assert_int_eq(ig_tokenizer_encode(t, "a\0b", 3, true, &ids, &n), 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(ids[1], 0); /* byte 0's token (U+0100 in the file) */
	free(ids);
	/* every single byte and pair, any garbage: no crash, ids in range */
	char s[2];
	for (int i = 0; i < 65536; i++) {
		s[0] = (char)(i >> 8);
		s[1] = (char)i;
		ck_assert_int_eq(ig_tokenizer_encode(t, s, 2, i & 1, &ids, &n), 0);
		for (size_t k = 0; k < n; k++)
			ck_assert_uint_lt(ids[k], ig_tokenizer_vocab_size(t));
		free(ids);
	}
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(token_ids_and_the_vocab_size)
{
	struct ig_tokenizer *t = load("tiny.json");
	ck_assert_int_eq(ig_tokenizer_token_id(t, "<x>"), 271);
	ck_assert_int_eq(ig_tokenizer_token_id(t, "\xc4\xa0w"), 260); /* "Ġw" */
	ck_assert_int_eq(ig_tokenizer_token_id(t, "hello"), 259);
	ck_assert_int_eq(ig_tokenizer_token_id(t, "nope"), -1);
	ck_assert_uint_eq(ig_tokenizer_vocab_size(t), 273);
	ig_tokenizer_free(t);
}
END_TEST

START_TEST(unsupported_parts_are_refused_by_name)
{
	refused("tiny.json", "\"type\": \"NFC\"", "\"type\": \"NFKC\"", "normalizer type 'NFKC' is not supported");
	refused("tiny.json", "\"type\": \"Split\"", "\"type\": \"Whitespace\"",
		"pre_tokenizer type 'Whitespace' is not supported");
	refused("tiny.json", "\"behavior\": \"Isolated\"", "\"behavior\": \"Removed\"",
		"Split behavior 'Removed' is not supported");
	refused("tiny.json", "\"invert\": false", "\"invert\": true", "'invert' is not supported");
	refused("tiny.json", "\"type\": \"BPE\"", "\"type\": \"WordPiece\"", "model type 'WordPiece' is not supported");
	refused("tiny.json", "\"byte_fallback\": false", "\"byte_fallback\": true", "'byte_fallback' is not supported");
	refused("tiny.json", "\"lstrip\": false", "\"lstrip\": true", "added token '<|s|>': 'lstrip' is not supported");
	refused("tiny.json", "\"type\": \"ByteLevel\",\n    \"add_prefix_space\": false", "\"type\": \"RobertaProcessing\"",
		"post_processor type 'RobertaProcessing' is not supported");
	refused("tiny.json", "\"truncation\": null", "\"truncation\": {\"max_length\": 8}",
		"'truncation' is not supported");
	/* a merge whose parts are not in the vocab, a bad merge string */
	refused("tiny.json", "\"h e\"", "\"h q9\"", "merge 1: 'q9' is not in the vocab");
	refused("tiny.json", "\"h e\"", "\"h e x\"", "merge 1: 'h e x' is not two tokens and one space");
	/* a vocab without a byte's own token */
	refused("tiny.json", "\"!\": 33", "\"!!\": 33", "no token for byte 0x21");
	/* a regex PCRE2 cannot compile names the pattern */
	refused("tiny.json", "\"Regex\": \"(?i:", "\"Regex\": \"((?i:", "missing closing parenthesis");
	/* not JSON at all: the file and the line */
	refused("tiny.json", "\"version\"", "\"version\" ::", "line 2");
	char err[256];
	ck_assert_ptr_null(ig_tokenizer_load("/nonexistent/tokenizer.json", err, sizeof(err)));
	ck_assert_msg(strstr(err, "/nonexistent/tokenizer.json"), "%s", err);
}
END_TEST

/* Several threads on one tokenizer: the ids one thread had before them,
 * every time (the word cache is shared and rewritten under them; each call
 * has its own regex match data). */
static const char *const TEXTS[] = {"hello world", "abc aaa hello", "a<|s|>b<x>c", "e\xcc\x81 \xc3\xa9",
				     "I'LL hello  world\n\n", "aaaaaaa bc abc"};
static uint32_t *want_ids[6];
static size_t want_n[6];

struct job {
	const struct ig_tokenizer *t;
	int ok;
};

static void *hammer(void *arg)
{
	struct job *j = arg;
	j->ok = 1;
	for (int round = 0; round < 4000; round++) {
		const char *s = TEXTS[round % 6];
		uint32_t *ids;
		size_t n;
		if (ig_tokenizer_encode(j->t, s, strlen(s), true, &ids, &n) < 0 || n != want_n[round % 6] ||
		    memcmp(ids, want_ids[round % 6], n * sizeof(*ids)) != 0)
			j->ok = 0;
		free(ids);
	}
	return NULL;
}

START_TEST(threads_share_one_tokenizer)
{
	struct ig_tokenizer *t = load("tiny.json");
	for (int i = 0; i < 6; i++)
		ck_assert_int_eq(ig_tokenizer_encode(t, TEXTS[i], strlen(TEXTS[i]), true, &want_ids[i], &want_n[i]), 0);
	EXPECT(t, TEXTS[0], true, 259, 264);
	pthread_t th[4];
	struct job jobs[4];
	for (int i = 0; i < 4; i++) {
		jobs[i] = (struct job){t, 0};
		pthread_create(&th[i], NULL, hammer, &jobs[i]);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		ck_assert(jobs[i].ok);
	}
	for (int i = 0; i < 6; i++)
		free(want_ids[i]);
	ig_tokenizer_free(t);
}
END_TEST

IG_CHECK_MAIN("tokenizer", merges_apply_lowest_rank_first_leftmost_on_a_tie,
	      a_long_word_takes_the_heap_and_agrees_with_the_scan, ignore_merges_takes_a_whole_word_from_the_vocab,
	      added_tokens_special_only_when_asked_longest_first, nfc_composes_before_the_merges,
	      a_normalized_added_token_is_found_in_the_normalized_text, a_split_on_a_string_is_literal,
	      an_empty_text_is_no_ids_but_the_bos, bytes_that_are_not_utf8_read_as_replacement_characters,
	      token_ids_and_the_vocab_size, unsupported_parts_are_refused_by_name, threads_share_one_tokenizer)
