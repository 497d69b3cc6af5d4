/* The models' tokenizer (include/infergate/tokenizer.h): the steps HF's
 * TokenizerImpl::encode_single_sequence runs (tokenizers/src/tokenizer/
 * mod.rs), in its order, on one text:
 *   1. added tokens that are not `normalized` are split out of the raw text
 *      (added_vocabulary.rs: leftmost-longest; a special one is text when
 *      the caller says so, encode_special_tokens);
 *   2. each piece between them is normalized (NFC), then split on the
 *      `normalized` added tokens;
 *   3. the pre-tokenizer's Split steps cut each piece in turn (Isolated:
 *      the matches and the gaps between them are all pre-tokens);
 *   4. each pre-token's bytes go through BPE (tokenizer_bpe.c);
 *   5. the post-processor's ids go around (a BOS).
 * The file is read by tokenizer_load.c. Nothing here writes the tokenizer
 * but the BPE model's word cache, behind its locks: encode runs on any
 * number of threads, each with its own regex match data. */
#include "config.h"
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistr.h> /* u8_check */
#include <uninorm.h>

#include "tokenizer_int.h"

struct enc {
	const struct ig_tokenizer *t;
	pcre2_match_data *md;
	struct tok_ids out;
	bool special;
};

struct ig_tokenizer *ig_tokenizer_load(const char *path, char *err, size_t errlen)
{
	struct ig_tokenizer *t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	if (tok_load(t, path, err, errlen) < 0) {
		ig_tokenizer_free(t);
		return NULL;
	}
	return t;
}

void ig_tokenizer_free(struct ig_tokenizer *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->nsplits; i++)
		pcre2_code_free(t->splits[i].re);
	free(t->splits);
	for (size_t i = 0; i < t->nadded; i++)
		free(t->added[i].content);
	free(t->added);
	free(t->prefix);
	free(t->suffix);
	tok_bpe_free(&t->bpe);
	free(t);
}

size_t ig_tokenizer_vocab_size(const struct ig_tokenizer *t)
{
	return t->vocab_size;
}

long ig_tokenizer_token_id(const struct ig_tokenizer *t, const char *s)
{
	size_t len = strlen(s);
	/* the added tokens first, as TokenizerImpl::token_to_id asks them */
	for (size_t i = 0; i < t->nadded; i++)
		if (t->added[i].len == len && memcmp(t->added[i].content, s, len) == 0)
			return t->added[i].id;
	return tok_map_get(&t->bpe.vocab, s, len);
}

/* Step 3 and 4: pre-token cutting by split `step` onwards, then BPE. */
static int pre(struct enc *e, size_t step, const uint8_t *p, size_t len)
{
	const struct ig_tokenizer *t = e->t;
	if (len == 0)
		return 0;
	if (step == t->nsplits)
		return tok_bpe_word(&t->bpe, p, len, &e->out);
	const struct tok_split *s = &t->splits[step];
	size_t prev = 0, at = 0;
	while (at < len) {
		int rc = pcre2_match(s->re, p, len, at, PCRE2_NO_UTF_CHECK, e->md, NULL);
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* a long run: the interpreter's heap */
			rc = pcre2_match(s->re, p, len, at, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, e->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			break;
		if (rc < 0)
			return -1;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
		size_t ms = ov[0], me = ov[1];
		if (ms > prev && pre(e, step + 1, p + prev, ms - prev) < 0)
			return -1;
		if (me > ms) {
			if (pre(e, step + 1, p + ms, me - ms) < 0)
				return -1;
			prev = at = me;
		} else { /* an empty match: on by one character */
			at = ms + 1;
			while (at < len && (p[at] & 0xc0) == 0x80)
				at++;
		}
	}
	return prev < len ? pre(e, step + 1, p + prev, len - prev) : 0;
}

/* The longest added token of the pass (normalized or not) at p, or NULL. */
static const struct tok_added *added_at(const struct ig_tokenizer *t, bool normalized, const uint8_t *p,
					size_t len)
{
	for (size_t i = 0; i < t->nadded; i++) {
		const struct tok_added *x = &t->added[i];
		if (x->normalized == normalized && x->len <= len && (uint8_t)x->content[0] == p[0] &&
		    memcmp(x->content, p, x->len) == 0)
			return x;
	}
	return NULL;
}

static int text(struct enc *e, const uint8_t *p, size_t len);

/* Steps 1 and 2's splitting: added tokens of the pass out of p, the text
 * between them on to `then`. */
static int split_added(struct enc *e, bool normalized, const uint8_t *p, size_t len,
		       int (*then)(struct enc *, const uint8_t *, size_t))
{
	const struct ig_tokenizer *t = e->t;
	size_t start = 0;
	for (size_t i = 0; i < len;) {
		const struct tok_added *x = t->added_first[normalized][p[i]] ? added_at(t, normalized, p + i, len - i)
									    : NULL;
		if (!x) {
			i++;
			continue;
		}
		if (x->special && !e->special) { /* text like any other */
			i += x->len;
			continue;
		}
		if (i > start && then(e, p + start, i - start) < 0)
			return -1;
		if (tok_ids_push(&e->out, x->id) < 0)
			return -1;
		i += x->len;
		start = i;
	}
	return start < len ? then(e, p + start, len - start) : 0;
}

static int pre_all(struct enc *e, const uint8_t *p, size_t len)
{
	return pre(e, 0, p, len);
}

/* Step 2: a piece between raw added tokens, normalized. Text below U+0300
 * (no byte from 0xcc up) is its own NFC: nothing to do. */
static int text(struct enc *e, const uint8_t *p, size_t len)
{
	const struct ig_tokenizer *t = e->t;
	bool plain = true;
	for (size_t i = 0; i < len && plain; i++)
		plain = p[i] < 0xcc;
	if (!t->nfc || plain)
		return split_added(e, true, p, len, pre_all);
	uint8_t buf[1024];
	size_t n = sizeof(buf);
	uint8_t *s = u8_normalize(UNINORM_NFC, p, len, buf, &n);
	if (!s)
		return -1;
	int rc = split_added(e, true, s, n, pre_all);
	if (s != buf)
		free(s);
	return rc;
}

/* The length of the UTF-8 sequence at p (Unicode's table 3-7), or 0 with
 * *bad the length of its maximal bad subpart: the longest start of a
 * sequence that could still have been valid. */
static size_t utf8_seq(const uint8_t *p, size_t n, size_t *bad)
{
	uint8_t c = p[0], lo = 0x80, hi = 0xbf;
	size_t need;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		need = 1;
	else if (c >= 0xe0 && c <= 0xef)
		need = 2, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		need = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else {
		*bad = 1;
		return 0;
	}
	size_t i = 1;
	for (; i <= need && i < n; i++) {
		uint8_t min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xbf;
		if (p[i] < min || p[i] > max)
			break;
	}
	if (i == need + 1)
		return i;
	*bad = i;
	return 0;
}

/* Text that is not UTF-8, as Rust's String::from_utf8_lossy and Python's
 * errors="replace" read it: one U+FFFD for each maximal bad subpart. */
static uint8_t *lossy(const uint8_t *p, size_t len, size_t *n)
{
	uint8_t *o = len < SIZE_MAX / 3 ? malloc(len * 3 + 1) : NULL, *w = o;
	if (!o)
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t bad = 0, k = utf8_seq(p + i, len - i, &bad);
		if (k) {
			memcpy(w, p + i, k);
			w += k;
			i += k;
		} else {
			memcpy(w, "\xef\xbf\xbd", 3);
			w += 3;
			i += bad;
		}
	}
	*n = (size_t)(w - o);
	return o;
}

int ig_tokenizer_encode(const struct ig_tokenizer *t, const char *text_, size_t len, bool special,
			uint32_t **out, size_t *n)
{
	struct enc e = {t, NULL, {NULL, 0, 0}, special};
	const uint8_t *p = (const uint8_t *)text_;
	uint8_t *fixed = NULL;
	int rc = -1;
	*out = NULL;
	*n = 0;
	if (len && u8_check(p, len)) {
		if (!(fixed = lossy(p, len, &len)))
			return -1;
		p = fixed;
	}
	if (!(e.md = pcre2_match_data_create(1, NULL)))
		goto out;
	for (size_t i = 0; i < t->nprefix; i++)
		if (tok_ids_push(&e.out, t->prefix[i]) < 0)
			goto out;
	if (len && split_added(&e, false, p, len, text) < 0)
		goto out;
	for (size_t i = 0; i < t->nsuffix; i++)
		if (tok_ids_push(&e.out, t->suffix[i]) < 0)
			goto out;
	*out = e.out.v;
	*n = e.out.n;
	e.out.v = NULL;
	rc = 0;
out:
	pcre2_match_data_free(e.md);
	free(e.out.v);
	free(fixed);
	return rc;
}
