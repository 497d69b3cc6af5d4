/* Reading a tokenizer.json (src/common/tokenizer_int.h): the parts HF's
 * tokenizers deserialises (tokenizers/src/tokenizer/serialization.rs),
 * each checked against what tokenizer.c can do; anything else is refused
 * here with its name, so a model the gateway cannot count exactly fails at
 * boot rather than miscounting quietly. */
#include "config.h"
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uninorm.h>

#include "tokenizer_int.h"

const char tok_gpt2_pattern[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct ld {
	struct ig_tokenizer *t;
	char *err;
	size_t errlen;
	bool byte_level;        /* a ByteLevel pre-tokenizer step seen */
};

__attribute__((format(printf, 2, 3))) static int fail(struct ld *l, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(l->err, l->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static const char *type_of(json_t *o)
{
	const char *s = json_string_value(json_object_get(o, "type"));
	return s ? s : "";
}

/* A key that must be false or absent (or null). */
static int off(struct ld *l, json_t *o, const char *where, const char *key)
{
	json_t *v = json_object_get(o, key);
	if (v && !json_is_false(v) && !json_is_null(v))
		return fail(l, "%s: '%s' is not supported", where, key);
	return 0;
}

/* A key that must be null, absent or "". */
static int empty(struct ld *l, json_t *o, const char *where, const char *key)
{
	json_t *v = json_object_get(o, key);
	if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
		return fail(l, "%s: '%s' is not supported", where, key);
	return 0;
}

/* ---- normalizer ----------------------------------------------------------- */

static int normalizer(struct ld *l, json_t *n)
{
	if (!n || json_is_null(n))
		return 0;
	if (!json_is_object(n))
		return fail(l, "normalizer: not an object");
	const char *ty = type_of(n);
	if (strcmp(ty, "NFC") == 0) {
		l->t->nfc = true;
		return 0;
	}
	if (strcmp(ty, "Sequence") == 0) {
		json_t *list = json_object_get(n, "normalizers"), *v;
		size_t i;
		if (!json_is_array(list))
			return fail(l, "normalizer: Sequence without 'normalizers'");
		json_array_foreach(list, i, v)
			if (normalizer(l, v) < 0)
				return -1;
		return 0;
	}
	return fail(l, "normalizer type '%s' is not supported", ty);
}

/* ---- pre-tokenizer -------------------------------------------------------- */

/* Oniguruma's \s (HF's regex engine, tokenizers/src/utils/onig.rs) is
 * Unicode's White_Space; PCRE2 10.42's also takes U+180E, which Unicode
 * took out of it in 6.3. Each \s and \S is spelled out as that list. */
#define WHITE_SPACE "\\t\\n\\x0b\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* pattern with \s and \S spelled out into a malloc'd *out. */
static int onig_spaces(struct ld *l, const char *in, size_t len, char **out, size_t *outlen)
{
	size_t cap = len * 8 + 64, n = 0;
	char *o = malloc(cap);
	bool in_class = false;
	if (!o)
		return fail(l, "out of memory");
#define PUT(s, k) (memcpy(o + n, (s), (k)), n += (k))
	for (size_t i = 0; i < len; i++) {
		if (n + sizeof(WHITE_SPACE) + 8 > cap) {
			char *no = realloc(o, cap *= 2);
			if (!no) {
				free(o);
				return fail(l, "out of memory");
			}
			o = no;
		}
		char c = in[i];
		if (c == '\\' && i + 1 < len) {
			char e = in[++i];
			if (e == 's' || e == 'S') {
				if (in_class && e == 'S') {
					free(o);
					return fail(l, "pre_tokenizer: pattern: \\S inside a class is not supported");
				}
				if (!in_class)
					PUT(e == 's' ? "[" : "[^", e == 's' ? 1 : 2);
				PUT(WHITE_SPACE, sizeof(WHITE_SPACE) - 1);
				if (!in_class)
					PUT("]", 1);
			} else if (e == 'Q') {
				free(o);
				return fail(l, "pre_tokenizer: pattern: \\Q is not supported");
			} else {
				o[n++] = c;
				o[n++] = e;
			}
		} else if (!in_class && c == '[') {
			in_class = true;
			o[n++] = c;
			if (i + 1 < len && in[i + 1] == '^')
				o[n++] = in[++i];
			if (i + 1 < len && in[i + 1] == ']') /* a ] first is itself */
				o[n++] = in[++i];
		} else if (in_class && c == '[' && i + 1 < len && in[i + 1] == ':') {
			const char *end = memmem(in + i, len - i, ":]", 2);
			size_t k = end ? (size_t)(end - (in + i)) + 2 : 1;
			if (n + k + 8 > cap) {
				free(o);
				return fail(l, "pre_tokenizer: pattern: a POSIX class too long");
			}
			PUT(in + i, k);
			i += k - 1;
		} else {
			if (in_class && c == ']')
				in_class = false;
			o[n++] = c;
		}
	}
#undef PUT
	*out = o;
	*outlen = n;
	return 0;
}

static int add_split(struct ld *l, const char *pattern, size_t len, bool literal)
{
	struct ig_tokenizer *t = l->t;
	struct tok_split *s = realloc(t->splits, (t->nsplits + 1) * sizeof(*s));
	if (!s)
		return fail(l, "out of memory");
	t->splits = s;
	char *spelled = NULL;
	size_t slen = len;
	if (!literal && onig_spaces(l, pattern, len, &spelled, &slen) < 0)
		return -1;
	int ec;
	PCRE2_SIZE eo;
	/* UCP: \p{L}, \p{N} and the (?i:) of the patterns in Unicode's sense,
	 * as Oniguruma reads them for HF. */
	uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); /* LITERAL refuses UCP */
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)(spelled ? spelled : pattern), slen, opts, &ec, &eo, NULL);
	free(spelled);
	if (!re) {
		char msg[160];
		pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof(msg));
		return fail(l, "pre_tokenizer: pattern '%.*s': %s", (int)len, pattern, msg);
	}
	s[t->nsplits].re = re;
	s[t->nsplits].jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
	t->nsplits++;
	return 0;
}

static int pre_tokenizer(struct ld *l, json_t *p)
{
	if (!p || json_is_null(p))
		return 0;
	if (!json_is_object(p))
		return fail(l, "pre_tokenizer: not an object");
	const char *ty = type_of(p);
	if (l->byte_level)
		return fail(l, "pre_tokenizer: a '%s' step after ByteLevel is not supported", ty);
	if (strcmp(ty, "Sequence") == 0) {
		json_t *list = json_object_get(p, "pretokenizers"), *v;
		size_t i;
		if (!json_is_array(list))
			return fail(l, "pre_tokenizer: Sequence without 'pretokenizers'");
		json_array_foreach(list, i, v)
			if (pre_tokenizer(l, v) < 0)
				return -1;
		return 0;
	}
	if (strcmp(ty, "Split") == 0) {
		const char *behavior = json_string_value(json_object_get(p, "behavior"));
		if (!behavior || strcmp(behavior, "Isolated") != 0)
			return fail(l, "pre_tokenizer: Split behavior '%s' is not supported", behavior ? behavior : "");
		if (off(l, p, "pre_tokenizer: Split", "invert") < 0)
			return -1;
		json_t *pat = json_object_get(p, "pattern");
		json_t *re = json_object_get(pat, "Regex"), *str = json_object_get(pat, "String");
		if (json_is_string(re))
			return add_split(l, json_string_value(re), json_string_length(re), false);
		if (json_is_string(str))
			return add_split(l, json_string_value(str), json_string_length(str), true);
		return fail(l, "pre_tokenizer: Split without a Regex or String pattern");
	}
	if (strcmp(ty, "ByteLevel") == 0) {
		if (off(l, p, "pre_tokenizer: ByteLevel", "add_prefix_space") < 0)
			return -1;
		json_t *use_regex = json_object_get(p, "use_regex");
		/* byte_level.rs: use_regex defaults to true */
		if ((!use_regex || json_is_true(use_regex)) &&
		    add_split(l, tok_gpt2_pattern, strlen(tok_gpt2_pattern), false) < 0)
			return -1;
		l->byte_level = true;
		return 0;
	}
	return fail(l, "pre_tokenizer type '%s' is not supported", ty);
}

/* ---- model ---------------------------------------------------------------- */

static void note_id(struct ig_tokenizer *t, uint32_t id)
{
	if ((size_t)id + 1 > t->vocab_size)
		t->vocab_size = (size_t)id + 1;
}

static int model(struct ld *l, json_t *m)
{
	struct tok_bpe *b = &l->t->bpe;
	if (!json_is_object(m))
		return fail(l, "model: missing");
	if (strcmp(type_of(m), "BPE") != 0)
		return fail(l, "model type '%s' is not supported", type_of(m));
	json_t *dropout = json_object_get(m, "dropout");
	if (dropout && !json_is_null(dropout) && json_number_value(dropout) != 0)
		return fail(l, "model: 'dropout' is not supported");
	if (off(l, m, "model", "byte_fallback") < 0 || empty(l, m, "model", "continuing_subword_prefix") < 0 ||
	    empty(l, m, "model", "end_of_word_suffix") < 0)
		return -1;
	json_t *vocab = json_object_get(m, "vocab"), *merges = json_object_get(m, "merges");
	if (!json_is_object(vocab))
		return fail(l, "model: 'vocab' is not an object");
	if (!json_is_array(merges))
		return fail(l, "model: 'merges' is not an array");
	if (tok_bpe_init(b, json_object_size(vocab), json_array_size(merges)) < 0)
		return fail(l, "out of memory");
	b->ignore_merges = json_is_true(json_object_get(m, "ignore_merges"));
	const char *k;
	size_t klen;
	json_t *v;
	void *tmp;
	json_object_keylen_foreach_safe(vocab, tmp, k, klen, v) {
		json_int_t id = json_integer_value(v);
		if (!json_is_integer(v) || id < 0 || id > UINT32_MAX - 1)
			return fail(l, "model: vocab '%.*s': the id is not a number from 0 to 2^32-2", (int)klen, k);
		if (tok_map_put(&b->vocab, k, klen, (uint32_t)id) < 0)
			return fail(l, "out of memory");
		note_id(l->t, (uint32_t)id);
	}
	if (tok_bpe_finish_vocab(b, l->err, l->errlen) < 0)
		return -1;
	size_t i;
	json_array_foreach(merges, i, v) {
		const char *a, *c;
		size_t al, cl;
		if (json_is_string(v)) {
			/* the older "a b": exactly one space (model.rs: BadMerges) */
			a = json_string_value(v);
			const char *sp = memchr(a, ' ', json_string_length(v));
			if (!sp || memchr(sp + 1, ' ', json_string_length(v) - (size_t)(sp + 1 - a)))
				return fail(l, "model: merge %zu: '%s' is not two tokens and one space", i + 1, a);
			al = (size_t)(sp - a);
			c = sp + 1;
			cl = json_string_length(v) - al - 1;
		} else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
			   json_is_string(json_array_get(v, 1))) {
			a = json_string_value(json_array_get(v, 0));
			al = json_string_length(json_array_get(v, 0));
			c = json_string_value(json_array_get(v, 1));
			cl = json_string_length(json_array_get(v, 1));
		} else {
			return fail(l, "model: merge %zu is neither \"a b\" nor [\"a\", \"b\"]", i + 1);
		}
		if (i >= UINT32_MAX || tok_bpe_add_merge(b, (uint32_t)i, a, al, c, cl, l->err, l->errlen) < 0)
			return -1;
	}
	return 0;
}

/* ---- added tokens --------------------------------------------------------- */

static int by_length(const void *a, const void *b)
{
	const struct tok_added *x = a, *y = b;
	return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}

static int added_tokens(struct ld *l, json_t *list)
{
	struct ig_tokenizer *t = l->t;
	if (!list || json_is_null(list))
		return 0;
	if (!json_is_array(list))
		return fail(l, "added_tokens: not an array");
	t->added = calloc(json_array_size(list) + 1, sizeof(*t->added));
	if (!t->added)
		return fail(l, "out of memory");
	size_t i;
	json_t *a;
	json_array_foreach(list, i, a) {
		json_t *content = json_object_get(a, "content"), *id = json_object_get(a, "id");
		if (!json_is_string(content) || json_string_length(content) == 0 || !json_is_integer(id) ||
		    json_integer_value(id) < 0 || json_integer_value(id) > UINT32_MAX - 1)
			return fail(l, "added_tokens: entry %zu has no content or id", i + 1);
		char where[96];
		snprintf(where, sizeof(where), "added token '%.60s'", json_string_value(content));
		if (off(l, a, where, "lstrip") < 0 || off(l, a, where, "rstrip") < 0 ||
		    off(l, a, where, "single_word") < 0)
			return -1;
		struct tok_added *x = &t->added[t->nadded];
		x->id = (uint32_t)json_integer_value(id);
		x->special = json_is_true(json_object_get(a, "special"));
		/* added_vocabulary.rs: a normalized token is matched in the
		 * normalized text, so its content is normalized too */
		x->normalized = json_is_true(json_object_get(a, "normalized"));
		if (x->normalized && t->nfc) {
			size_t n = 0;
			uint8_t *s = u8_normalize(UNINORM_NFC, (const uint8_t *)json_string_value(content),
						  json_string_length(content), NULL, &n);
			if (!s)
				return fail(l, "%s: cannot be normalized", where);
			x->content = (char *)s;
			x->len = n;
		} else {
			x->len = json_string_length(content);
			x->content = malloc(x->len + 1);
			if (!x->content)
				return fail(l, "out of memory");
			memcpy(x->content, json_string_value(content), x->len + 1);
		}
		t->nadded++;
		t->added_first[x->normalized][(uint8_t)x->content[0]] = true;
		note_id(t, x->id);
	}
	qsort(t->added, t->nadded, sizeof(*t->added), by_length);
	return 0;
}

/* ---- post-processor ------------------------------------------------------- */

static int push_special(struct ld *l, json_t *specials, const char *name, uint32_t **ids, size_t *n)
{
	json_t *ent = json_object_get(specials, name), *list = json_object_get(ent, "ids"), *v;
	size_t i;
	if (!json_is_array(list))
		return fail(l, "post_processor: special token '%s' is not listed", name);
	json_array_foreach(list, i, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX - 1)
			return fail(l, "post_processor: special token '%s': a bad id", name);
		uint32_t *nv = realloc(*ids, (*n + 1) * sizeof(**ids));
		if (!nv)
			return fail(l, "out of memory");
		*ids = nv;
		(*ids)[(*n)++] = (uint32_t)json_integer_value(v);
	}
	return 0;
}

static int post_processor(struct ld *l, json_t *p)
{
	struct ig_tokenizer *t = l->t;
	if (!p || json_is_null(p))
		return 0;
	const char *ty = type_of(p);
	if (strcmp(ty, "ByteLevel") == 0)
		return 0; /* offsets only: no ids */
	if (strcmp(ty, "Sequence") == 0) {
		json_t *list = json_object_get(p, "processors"), *v;
		size_t i;
		if (!json_is_array(list))
			return fail(l, "post_processor: Sequence without 'processors'");
		json_array_foreach(list, i, v)
			if (post_processor(l, v) < 0)
				return -1;
		return 0;
	}
	if (strcmp(ty, "TemplateProcessing") != 0)
		return fail(l, "post_processor type '%s' is not supported", ty);
	if (t->nprefix || t->nsuffix)
		return fail(l, "post_processor: a second TemplateProcessing is not supported");
	json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens"), *piece;
	size_t i;
	bool seen = false;
	if (!json_is_array(single))
		return fail(l, "post_processor: TemplateProcessing without a 'single' template");
	json_array_foreach(single, i, piece) {
		json_t *sp = json_object_get(piece, "SpecialToken"), *seq = json_object_get(piece, "Sequence");
		if (json_is_object(seq)) {
			const char *which = json_string_value(json_object_get(seq, "id"));
			if (seen || !which || strcmp(which, "A") != 0)
				return fail(l, "post_processor: the single template's sequence must be 'A', once");
			seen = true;
		} else if (json_is_object(sp) && json_is_string(json_object_get(sp, "id"))) {
			const char *name = json_string_value(json_object_get(sp, "id"));
			if (push_special(l, specials, name, seen ? &t->suffix : &t->prefix,
					 seen ? &t->nsuffix : &t->nprefix) < 0)
				return -1;
		} else {
			return fail(l, "post_processor: template piece %zu is neither SpecialToken nor Sequence", i + 1);
		}
	}
	if (!seen)
		return fail(l, "post_processor: the single template has no sequence 'A'");
	return 0;
}

/* ---- the file ------------------------------------------------------------- */

int tok_load(struct ig_tokenizer *t, const char *path, char *err, size_t errlen)
{
	struct ld l = {t, err, errlen, false};
	json_error_t je;
	/* read whole, then parsed: json_load_file reads a byte at a time
	 * (getc), a third of the load of an 11 MB file */
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	size_t cap = 1 << 20, n = 0, got;
	char *buf = malloc(cap);
	while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap) {
			char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	bool bad = ferror(f);
	fclose(f);
	if (!buf || bad) {
		snprintf(err, errlen, "%s: %s", path, buf ? "read error" : "out of memory");
		free(buf);
		return -1;
	}
	json_t *root = json_loadb(buf, n, JSON_ALLOW_NUL, &je);
	free(buf);
	if (!root) {
		snprintf(err, errlen, "%s: line %d: %s", path, je.line, je.text);
		return -1;
	}
	int rc = -1;
	if (!json_is_object(root)) {
		fail(&l, "not a JSON object");
		goto out;
	}
	json_t *trunc = json_object_get(root, "truncation"), *pad = json_object_get(root, "padding");
	if (trunc && !json_is_null(trunc)) {
		fail(&l, "'truncation' is not supported");
		goto out;
	}
	if (pad && !json_is_null(pad)) {
		fail(&l, "'padding' is not supported");
		goto out;
	}
	if (normalizer(&l, json_object_get(root, "normalizer")) < 0 ||
	    pre_tokenizer(&l, json_object_get(root, "pre_tokenizer")) < 0)
		goto out;
	if (!l.byte_level) {
		fail(&l, "pre_tokenizer: no ByteLevel step (only byte-level BPE is supported)");
		goto out;
	}
	if (model(&l, json_object_get(root, "model")) < 0 ||
	    added_tokens(&l, json_object_get(root, "added_tokens")) < 0 ||
	    post_processor(&l, json_object_get(root, "post_processor")) < 0)
		goto out;
	rc = 0;
out:
	json_decref(root);
	if (rc < 0 && strncmp(err, path, strlen(path)) != 0) {
		/* every reason names the file */
		char *msg = strdup(err);
		if (msg)
			snprintf(err, errlen, "%s: %s", path, msg);
		free(msg);
	}
	return rc;
}
