/* A chat template's text to its AST (include/infergate/jinja.h), the way
 * @huggingface/jinja 0.5.13 does it (src/lexer.ts, src/parser.ts): the same
 * preprocessing (lstrip_blocks and trim_blocks as regular expressions over the
 * whole text, the transformers-only {% generation %} tag removed), the same
 * tokens (a '-' or '+' after an operator is a sign glued to the number after
 * it) and the same precedence (a filter binds tighter than '+': `a + b | trim`
 * trims b; a test binds tighter than a comparison). Not here: evaluation
 * (jinja_eval.c). Macros, call blocks and filter blocks are refused with
 * their line: no chosen model's template uses them. */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/jinja.h"

/* ---- preprocessing ----------------------------------------------------------- */

/* The text after preprocessing, and each byte's line in the source. */
struct pre {
	char *p;
	int *line;
	size_t n;
};

static void pre_put(struct pre *o, const char *s, const int *line, size_t n)
{
	memcpy(o->p + o->n, s, n);
	memcpy(o->line + o->n, line, n * sizeof(int));
	o->n += n;
}

/* A JavaScript line terminator (the `m` flag's ^ follows one) ending at s[i-1]. */
static bool after_line_end(const char *s, size_t i)
{
	if (i == 0)
		return true;
	if (s[i - 1] == '\n' || s[i - 1] == '\r')
		return true;
	return i >= 3 && (unsigned char)s[i - 3] == 0xe2 && (unsigned char)s[i - 2] == 0x80 &&
	       ((unsigned char)s[i - 1] == 0xa8 || (unsigned char)s[i - 1] == 0xa9);
}

/* lexer.ts preprocess(): one trailing newline dropped; /^[ \t]*({[#%-])/gm
 * to "$1"; /([#%-]})\n/g to "$1"; {%-? (end)?generation -?%} removed. */
static void preprocess(const char *src, size_t len, struct pre *out, struct jarena *a)
{
	int *line = ja_alloc(a, (len + 1) * sizeof(int));
	int l = 1;
	for (size_t i = 0; i < len; i++) {
		line[i] = l;
		if (src[i] == '\n')
			l++;
	}
	if (len > 0 && src[len - 1] == '\n')
		len--;

	struct pre s1 = {ja_alloc(a, len + 1), ja_alloc(a, (len + 1) * sizeof(int)), 0};
	for (size_t i = 0; i < len;) {
		if (after_line_end(src, i)) {
			size_t j = i;
			while (j < len && (src[j] == ' ' || src[j] == '\t'))
				j++;
			if (j + 1 < len && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-')) {
				pre_put(&s1, src + j, line + j, 2);
				i = j + 2;
				continue;
			}
		}
		pre_put(&s1, src + i, line + i, 1);
		i++;
	}

	struct pre s2 = {ja_alloc(a, s1.n + 1), ja_alloc(a, (s1.n + 1) * sizeof(int)), 0};
	for (size_t i = 0; i < s1.n; i++) {
		pre_put(&s2, s1.p + i, s1.line + i, 1);
		if (i + 2 < s1.n && (s1.p[i] == '#' || s1.p[i] == '%' || s1.p[i] == '-') && s1.p[i + 1] == '}' &&
		    s1.p[i + 2] == '\n') {
			pre_put(&s2, s1.p + i + 1, s1.line + i + 1, 1);
			i += 2; /* the newline goes */
		}
	}

	struct pre s3 = {ja_alloc(a, s2.n + 1), ja_alloc(a, (s2.n + 1) * sizeof(int)), 0};
	size_t last = 0;
	for (size_t i = 0; i + 1 < s2.n; i++) {
		if (s2.p[i] != '{' || s2.p[i + 1] != '%')
			continue;
		size_t j = i + 2, sp;
		bool lstrip = false, rstrip = false;
		if (j < s2.n && s2.p[j] == '-')
			lstrip = true, j++;
		while ((sp = jv_space_at(s2.p + j, s2.n - j)) > 0)
			j += sp;
		if (s2.n - j >= 3 && memcmp(s2.p + j, "end", 3) == 0 && s2.n - j >= 13 &&
		    memcmp(s2.p + j + 3, "generation", 10) == 0)
			j += 3;
		if (s2.n - j < 10 || memcmp(s2.p + j, "generation", 10) != 0)
			continue;
		j += 10;
		while ((sp = jv_space_at(s2.p + j, s2.n - j)) > 0)
			j += sp;
		if (j < s2.n && s2.p[j] == '-')
			rstrip = true, j++;
		if (s2.n - j < 2 || s2.p[j] != '%' || s2.p[j + 1] != '}')
			continue;
		j += 2;
		size_t after = j;
		while ((sp = jv_space_at(s2.p + j, s2.n - j)) > 0)
			j += sp;
		size_t end = i;
		while (lstrip && end > last && (sp = jv_space_before(s2.p + last, end - last)) > 0)
			end -= sp;
		pre_put(&s3, s2.p + last, s2.line + last, end - last);
		if (!rstrip)
			pre_put(&s3, s2.p + after, s2.line + after, j - after);
		last = j;
		i = j - 1;
	}
	pre_put(&s3, s2.p + last, s2.line + last, s2.n - last);
	s3.p[s3.n] = '\0';
	*out = s3;
}

/* ---- lexer --------------------------------------------------------------------- */

enum tok_type {
	T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_LPAREN, T_RPAREN, T_OPEN_STMT, T_CLOSE_STMT,
	T_OPEN_EXPR, T_CLOSE_EXPR, T_LBRACKET, T_RBRACKET, T_LBRACE, T_RBRACE, T_COMMA, T_DOT,
	T_COLON, T_PIPE, T_ADD, T_MUL, T_POW, T_CMP, T_UNARY, T_COMMENT,
};

struct tok {
	enum tok_type type;
	const char *v; /* NUL-terminated */
	size_t n;
	int line;
};

struct parser {
	struct jarena *a;
	jmp_buf jmp;
	char *err;
	size_t errlen;
	struct tok *t;
	size_t nt, cap, cur;
	int depth;
	int eof_line;
};

static void __attribute__((format(printf, 3, 4), noreturn)) perr(struct parser *p, int line, const char *fmt, ...)
{
	va_list ap;
	int k = snprintf(p->err, p->errlen, "line %d: ", line);
	va_start(ap, fmt);
	if (k >= 0 && (size_t)k < p->errlen)
		vsnprintf(p->err + k, p->errlen - k, fmt, ap);
	va_end(ap);
	longjmp(p->jmp, 1);
}

static void push_tok(struct parser *p, enum tok_type type, const char *v, size_t n, int line)
{
	if (p->nt == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 256;
		struct tok *t = ja_alloc(p->a, cap * sizeof(*t));
		if (p->nt)
			memcpy(t, p->t, p->nt * sizeof(*t));
		p->t = t;
		p->cap = cap;
	}
	p->t[p->nt++] = (struct tok){type, ja_strndup(p->a, v, n), n, line};
}

static bool is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static void put_utf8(char *o, size_t *n, unsigned cp)
{
	if (cp < 0x80) {
		o[(*n)++] = (char)cp;
	} else if (cp < 0x800) {
		o[(*n)++] = (char)(0xc0 | (cp >> 6));
		o[(*n)++] = (char)(0x80 | (cp & 0x3f));
	} else {
		o[(*n)++] = (char)(0xe0 | (cp >> 12));
		o[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[(*n)++] = (char)(0x80 | (cp & 0x3f));
	}
}

/* A quoted literal's content from s[*i] (after the quote) with its escapes
 * resolved (consumeString). A \u of a lone surrogate is refused: it has no
 * UTF-8. */
static void lex_string(struct parser *p, const struct pre *s, size_t *i, char quote)
{
	int line = s->line[*i - 1];
	char *o = ja_alloc(p->a, s->n - *i + 1);
	size_t n = 0;
	for (;;) {
		if (*i >= s->n)
			perr(p, line, "unexpected end of input in a string");
		char ch = s->p[(*i)++];
		if (ch == quote)
			break;
		if (ch != '\\') {
			o[n++] = ch;
			continue;
		}
		if (*i >= s->n)
			perr(p, line, "unexpected end of input in a string");
		char e = s->p[(*i)++];
		if (e == 'x' || e == 'u') {
			size_t hl = e == 'x' ? 2 : 4;
			unsigned cp = 0;
			for (size_t k = 0; k < hl; k++) {
				char h = *i + k < s->n ? s->p[*i + k] : 0;
				int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
				if (d < 0)
					perr(p, line, "invalid hexadecimal escape sequence");
				cp = cp * 16 + (unsigned)d;
			}
			if (cp >= 0xd800 && cp <= 0xdfff)
				perr(p, line, "a \\u escape of a surrogate is not supported");
			*i += hl;
			put_utf8(o, &n, cp);
		} else {
			static const char from[] = "ntrbfv'\"\\", to[] = "\n\t\r\b\f\v'\"\\";
			const char *at = e ? strchr(from, e) : NULL;
			if (!at)
				perr(p, line, "unexpected escaped character: %c", e);
			o[n++] = to[at - from];
		}
	}
	o[n] = '\0';
	push_tok(p, T_STR, "", 0, line);
	p->t[p->nt - 1].v = o; /* the value as resolved, NULs included */
	p->t[p->nt - 1].n = n;
}

/* consumeWhile: the input ending while the predicate still holds is an error there too. */
static size_t consume_while(struct parser *p, const struct pre *s, size_t i, bool (*pred)(char))
{
	while (i < s->n && pred(s->p[i]))
		if (++i >= s->n)
			perr(p, s->line[s->n - 1], "unexpected end of input");
	return i;
}

static void lex_number(struct parser *p, const struct pre *s, size_t *i, size_t start, bool frac_ok)
{
	size_t j = consume_while(p, s, *i, is_digit);
	if (j > *i && frac_ok && j + 1 < s->n && s->p[j] == '.' && is_digit(s->p[j + 1]))
		j = consume_while(p, s, j + 1, is_digit);
	push_tok(p, j > *i ? T_NUM : T_UNARY, s->p + start, j - start, s->line[start]);
	*i = j;
}

static void strip_trailing_ws(struct parser *p)
{
	if (p->nt == 0 || p->t[p->nt - 1].type != T_TEXT)
		return;
	struct tok *t = &p->t[p->nt - 1];
	size_t sp;
	while ((sp = jv_space_before(t->v, t->n)) > 0)
		t->n -= sp;
	if (t->n == 0)
		p->nt--;
}

static size_t skip_ws(const struct pre *s, size_t i)
{
	size_t sp;
	while (i < s->n && (sp = jv_space_at(s->p + i, s->n - i)) > 0)
		i += sp;
	return i;
}

static const struct {
	const char *seq;
	enum tok_type type;
} RULES[] = {
	{"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR},
	{"(", T_LPAREN}, {")", T_RPAREN}, {"{", T_LBRACE}, {"}", T_RBRACE}, {"[", T_LBRACKET},
	{"]", T_RBRACKET}, {",", T_COMMA}, {".", T_DOT}, {":", T_COLON}, {"|", T_PIPE},
	{"<=", T_CMP}, {">=", T_CMP}, {"==", T_CMP}, {"!=", T_CMP}, {"<", T_CMP}, {">", T_CMP},
	{"+", T_ADD}, {"-", T_ADD}, {"~", T_ADD}, {"**", T_POW}, {"*", T_MUL}, {"//", T_MUL},
	{"/", T_MUL}, {"%", T_MUL}, {"=", T_EQUALS},
};

static void tokenize(struct parser *p, const struct pre *s)
{
	size_t i = 0;
	int depth = 0; /* of { } inside an expression: "}}" there closes two braces */
	while (i < s->n) {
		int last = p->nt ? (int)p->t[p->nt - 1].type : -1;
		if (last == -1 || last == T_CLOSE_STMT || last == T_CLOSE_EXPR || last == T_COMMENT) {
			size_t end = i;
			for (;;) {
				const char *b = memchr(s->p + end, '{', s->n - end);
				if (!b) {
					end = s->n;
					break;
				}
				end = (size_t)(b - s->p);
				char nx = end + 1 < s->n ? s->p[end + 1] : 0;
				if (nx == '%' || nx == '{' || nx == '#')
					break;
				end++;
			}
			if (end > i) {
				push_tok(p, T_TEXT, s->p + i, end - i, s->line[i]);
				i = end;
				continue;
			}
		}
		if (s->p[i] == '{') {
			char nx = i + 1 < s->n ? s->p[i + 1] : 0;
			int line = s->line[i];
			if (nx == '#') {
				i += 2;
				bool before = i < s->n && s->p[i] == '-';
				if (before)
					i++;
				const char *e = NULL;
				for (size_t k = i; k + 1 < s->n; k++)
					if (s->p[k] == '#' && s->p[k + 1] == '}') {
						e = s->p + k;
						break;
					}
				if (!e)
					perr(p, line, "missing end of comment tag");
				size_t end = (size_t)(e - s->p);
				bool after = end > i && s->p[end - 1] == '-';
				if (before)
					strip_trailing_ws(p);
				push_tok(p, T_COMMENT, s->p + i, end - i - (after ? 1 : 0), line);
				i = end + 2;
				if (after)
					i = skip_ws(s, i);
				continue;
			}
			if (i + 2 < s->n && s->p[i + 2] == '-' && (nx == '%' || nx == '{')) {
				strip_trailing_ws(p);
				push_tok(p, nx == '%' ? T_OPEN_STMT : T_OPEN_EXPR, nx == '%' ? "{%" : "{{", 2, line);
				if (nx == '{')
					depth = 0;
				i += 3;
				continue;
			}
		}
		{
			size_t sp;
			while (i < s->n && (sp = jv_space_at(s->p + i, s->n - i)) > 0)
				if ((i += sp) >= s->n)
					perr(p, s->line[s->n - 1], "unexpected end of input");
		}
		char ch = s->p[i];
		int line = s->line[i];
		if (ch == '-' && i + 2 < s->n && s->p[i + 2] == '}' && (s->p[i + 1] == '%' || s->p[i + 1] == '}')) {
			push_tok(p, s->p[i + 1] == '%' ? T_CLOSE_STMT : T_CLOSE_EXPR, s->p[i + 1] == '%' ? "%}" : "}}", 2, line);
			i = skip_ws(s, i + 3);
			continue;
		}
		if (ch == '-' || ch == '+') {
			if (last == T_TEXT || last == -1)
				perr(p, line, "unexpected character: %c", ch);
			if (last != T_IDENT && last != T_NUM && last != T_STR && last != T_RPAREN && last != T_RBRACKET) {
				size_t start = i++;
				lex_number(p, s, &i, start, true);
				continue;
			}
		}
		bool matched = false;
		for (size_t r = 0; r < sizeof(RULES) / sizeof(RULES[0]); r++) {
			size_t l = strlen(RULES[r].seq);
			if (RULES[r].type == T_CLOSE_EXPR && depth > 0)
				continue;
			if (s->n - i >= l && memcmp(s->p + i, RULES[r].seq, l) == 0) {
				push_tok(p, RULES[r].type, RULES[r].seq, l, line);
				if (RULES[r].type == T_OPEN_EXPR)
					depth = 0;
				else if (RULES[r].type == T_LBRACE)
					depth++;
				else if (RULES[r].type == T_RBRACE)
					depth--;
				i += l;
				matched = true;
				break;
			}
		}
		if (matched)
			continue;
		if (ch == '\'' || ch == '"') {
			i++;
			lex_string(p, s, &i, ch);
			continue;
		}
		if (is_digit(ch)) {
			lex_number(p, s, &i, i, last != T_DOT);
			continue;
		}
		if (is_word(ch)) {
			size_t j = consume_while(p, s, i, is_word);
			push_tok(p, T_IDENT, s->p + i, j - i, line);
			i = j;
			continue;
		}
		perr(p, line, "unexpected character: %c", ch);
	}
}

/* ---- parser ----------------------------------------------------------------------- */

static struct tok *peek(struct parser *p, size_t k)
{
	return p->cur + k < p->nt ? &p->t[p->cur + k] : NULL;
}

static int cur_line(struct parser *p)
{
	struct tok *t = peek(p, 0);
	return t ? t->line : p->eof_line;
}

static bool is(struct parser *p, enum tok_type type)
{
	struct tok *t = peek(p, 0);
	return t && t->type == type;
}

static bool is_ident(struct parser *p, size_t k, const char *name)
{
	struct tok *t = peek(p, k);
	return t && t->type == T_IDENT && strcmp(t->v, name) == 0;
}

static bool is_stmt(struct parser *p, const char *name)
{
	return is(p, T_OPEN_STMT) && is_ident(p, 1, name);
}

static struct tok *expect(struct parser *p, enum tok_type type, const char *what)
{
	struct tok *t = peek(p, 0);
	if (!t)
		perr(p, p->eof_line, "expected %s, the template ended", what);
	if (t->type != type)
		perr(p, t->line, "expected %s, found '%s'", what, t->v);
	p->cur++;
	return t;
}

static struct tok *next(struct parser *p)
{
	struct tok *t = peek(p, 0);
	if (!t)
		perr(p, p->eof_line, "unexpected end of template");
	p->cur++;
	return t;
}

static struct jnode *node(struct parser *p, enum jn_kind kind, int line)
{
	struct jnode *n = ja_alloc(p->a, sizeof(*n));
	memset(n, 0, sizeof(*n));
	n->kind = kind;
	n->line = line;
	return n;
}

/* A growing list of nodes (copied into the arena when done). */
struct nlist {
	struct jnode **v;
	size_t n, cap;
};

static void nl_push(struct parser *p, struct nlist *l, struct jnode *n)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		struct jnode **v = ja_alloc(p->a, cap * sizeof(*v));
		if (l->n)
			memcpy(v, l->v, l->n * sizeof(*v));
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = n;
}

static void enter(struct parser *p)
{
	if (++p->depth > IG_JINJA_MAX_DEPTH)
		perr(p, cur_line(p), "nested deeper than %d", IG_JINJA_MAX_DEPTH);
}

static struct jnode *parse_any(struct parser *p);
static struct jnode *parse_expr(struct parser *p);
static struct jnode *parse_primary(struct parser *p);

static const char *const FILTERS[] = {
	"safe", "tojson", "list", "first", "last", "length", "reverse", "join", "string", "trim",
	"upper", "lower", "capitalize", "items", "default", "replace", "selectattr", "rejectattr",
	"map", "int", "float", "abs", "keys", "values", "indent", "bool", NULL,
};
static const char *const TESTS[] = {
	"boolean", "callable", "odd", "even", "false", "true", "none", "string", "number", "integer",
	"iterable", "mapping", "sequence", "lower", "upper", "defined", "undefined", NULL,
};

static bool listed(const char *const *list, const char *name)
{
	for (; *list; list++)
		if (strcmp(*list, name) == 0)
			return true;
	return false;
}

/* Arguments of a call, from '(' to ')' (parseArgs "call"). */
static void parse_args(struct parser *p, struct jnode *call)
{
	struct nlist l = {0};
	bool kw = false;
	expect(p, T_LPAREN, "'('");
	while (!is(p, T_RPAREN)) {
		if (is(p, T_POW) || (is(p, T_MUL) && strcmp(peek(p, 0)->v, "*") == 0))
			perr(p, cur_line(p), "argument unpacking (* and **) is not supported");
		struct jnode *arg = parse_expr(p);
		if (is(p, T_EQUALS)) {
			p->cur++;
			if (arg->kind != JN_IDENT)
				perr(p, arg->line, "expected an identifier for a keyword argument");
			struct jnode *kwn = node(p, JN_KWARG, arg->line);
			kwn->s = arg->s;
			kwn->slen = arg->slen;
			kwn->a = parse_expr(p);
			arg = kwn;
			kw = true;
		} else if (kw) {
			perr(p, arg->line, "positional arguments must come before keyword arguments");
		}
		nl_push(p, &l, arg);
		if (is(p, T_COMMA))
			p->cur++;
		if (!peek(p, 0))
			perr(p, p->eof_line, "expected ')', the template ended");
	}
	expect(p, T_RPAREN, "')'");
	call->body = l.v;
	call->nbody = l.n;
}

static struct jnode *parse_member(struct parser *p, struct jnode *obj)
{
	while (is(p, T_DOT) || is(p, T_LBRACKET)) {
		struct tok *op = next(p);
		struct jnode *m = node(p, JN_MEMBER, op->line);
		m->a = obj;
		if (op->type == T_LBRACKET) {
			m->flag = true;
			struct jnode *sl[3] = {NULL, NULL, NULL};
			size_t k = 0;
			bool slice = false;
			while (!is(p, T_RBRACKET)) {
				if (!peek(p, 0))
					perr(p, p->eof_line, "expected ']', the template ended");
				if (k >= 3)
					perr(p, op->line, "expected 0-3 arguments for a slice");
				if (is(p, T_COLON)) {
					sl[k++] = NULL;
					p->cur++;
					slice = true;
				} else {
					sl[k++] = parse_expr(p);
					if (is(p, T_COLON)) {
						p->cur++;
						slice = true;
					}
				}
			}
			if (k == 0)
				perr(p, op->line, "expected at least one argument in [ ]");
			if (slice) {
				struct jnode *s = node(p, JN_SLICE, op->line);
				s->a = sl[0];
				s->b = k > 1 ? sl[1] : NULL;
				s->c = k > 2 ? sl[2] : NULL;
				m->b = s;
			} else {
				m->b = sl[0];
			}
			expect(p, T_RBRACKET, "']'");
		} else {
			m->b = parse_primary(p);
			if (m->b->kind != JN_IDENT && m->b->kind != JN_INT)
				perr(p, op->line, "expected an identifier or an integer after '.'");
		}
		obj = m;
	}
	return obj;
}

static struct jnode *parse_call(struct parser *p, struct jnode *callee)
{
	enter(p);
	struct jnode *c = node(p, JN_CALL, callee->line);
	c->a = callee;
	parse_args(p, c);
	struct jnode *e = parse_member(p, c);
	if (is(p, T_LPAREN))
		e = parse_call(p, e);
	p->depth--;
	return e;
}

static struct jnode *parse_sequence(struct parser *p, bool primary);

static struct jnode *parse_primary(struct parser *p)
{
	enter(p);
	struct tok *t = next(p);
	struct jnode *n;
	switch (t->type) {
	case T_NUM:
		n = node(p, strchr(t->v, '.') ? JN_FLOAT : JN_INT, t->line);
		n->num = strtod(t->v, NULL);
		break;
	case T_STR: {
		size_t total = t->n, k = p->cur;
		while (k < p->nt && p->t[k].type == T_STR)
			total += p->t[k++].n;
		char *v = ja_alloc(p->a, total + 1);
		memcpy(v, t->v, t->n);
		size_t off = t->n;
		while (is(p, T_STR)) {
			struct tok *u = next(p);
			memcpy(v + off, u->v, u->n);
			off += u->n;
		}
		v[total] = '\0';
		n = node(p, JN_STR, t->line);
		n->s = v;
		n->slen = total;
		break;
	}
	case T_IDENT:
		n = node(p, JN_IDENT, t->line);
		n->s = t->v;
		n->slen = t->n;
		break;
	case T_LPAREN:
		n = parse_sequence(p, false);
		expect(p, T_RPAREN, "')'");
		break;
	case T_LBRACKET: {
		struct nlist l = {0};
		while (!is(p, T_RBRACKET)) {
			if (!peek(p, 0))
				perr(p, p->eof_line, "expected ']', the template ended");
			nl_push(p, &l, parse_expr(p));
			if (is(p, T_COMMA))
				p->cur++;
		}
		p->cur++;
		n = node(p, JN_ARRAY, t->line);
		n->body = l.v;
		n->nbody = l.n;
		break;
	}
	case T_LBRACE: {
		struct nlist k = {0}, v = {0};
		while (!is(p, T_RBRACE)) {
			if (!peek(p, 0))
				perr(p, p->eof_line, "expected '}', the template ended");
			nl_push(p, &k, parse_expr(p));
			expect(p, T_COLON, "':' in a dict literal");
			nl_push(p, &v, parse_expr(p));
			if (is(p, T_COMMA))
				p->cur++;
		}
		p->cur++;
		n = node(p, JN_OBJECT, t->line);
		n->body = k.v;
		n->nbody = k.n;
		n->alt = v.v;
		n->nalt = v.n;
		break;
	}
	default:
		perr(p, t->line, "unexpected '%s'", t->v);
	}
	p->depth--;
	return n;
}

static struct jnode *parse_unary_sign(struct parser *p)
{
	struct tok *t = peek(p, 0);
	if (t && (t->type == T_UNARY || t->type == T_ADD) && (strcmp(t->v, "-") == 0 || strcmp(t->v, "+") == 0)) {
		enter(p);
		p->cur++;
		struct jnode *u = node(p, JN_UNARY, t->line);
		u->op = t->v[0] == '-' ? JOP_SUB : JOP_ADD;
		u->a = parse_unary_sign(p);
		p->depth--;
		return u;
	}
	struct jnode *m = parse_member(p, parse_primary(p));
	return is(p, T_LPAREN) ? parse_call(p, m) : m;
}

static struct jnode *parse_filter(struct parser *p)
{
	struct jnode *operand = parse_unary_sign(p);
	while (is(p, T_PIPE)) {
		int line = next(p)->line;
		struct jnode *name = parse_primary(p);
		if (name->kind != JN_IDENT)
			perr(p, line, "expected a filter's name after '|'");
		if (!listed(FILTERS, name->s))
			perr(p, line, "filter '%s' is not supported", name->s);
		struct jnode *f = node(p, JN_FILTER, line);
		f->a = operand;
		f->s = name->s;
		if (is(p, T_LPAREN)) {
			f->flag = true;
			parse_args(p, f);
			if (is(p, T_DOT) || is(p, T_LBRACKET) || is(p, T_LPAREN))
				perr(p, line, "a member or call of a filter's call is not supported");
		}
		operand = f;
	}
	return operand;
}

static struct jnode *parse_test(struct parser *p)
{
	struct jnode *operand = parse_filter(p);
	while (is_ident(p, 0, "is")) {
		int line = next(p)->line;
		bool neg = is_ident(p, 0, "not");
		if (neg)
			p->cur++;
		struct jnode *name = parse_primary(p);
		if (name->kind != JN_IDENT)
			perr(p, line, "expected a test's name after 'is'");
		if (!listed(TESTS, name->s))
			perr(p, line, "test '%s' is not supported", name->s);
		struct jnode *t = node(p, JN_TEST, line);
		t->a = operand;
		t->s = name->s;
		t->flag = neg;
		operand = t;
	}
	return operand;
}

static struct jnode *binary(struct parser *p, enum jop op, int line, struct jnode *l, struct jnode *r)
{
	struct jnode *b = node(p, JN_BINARY, line);
	b->op = op;
	b->a = l;
	b->b = r;
	return b;
}

static struct jnode *parse_power(struct parser *p)
{
	struct jnode *l = parse_test(p);
	while (is(p, T_POW)) {
		int line = next(p)->line;
		l = binary(p, JOP_POW, line, l, parse_test(p));
	}
	return l;
}

static struct jnode *parse_mul(struct parser *p)
{
	struct jnode *l = parse_power(p);
	while (is(p, T_MUL)) {
		struct tok *t = next(p);
		enum jop op = t->v[0] == '*' ? JOP_MUL : t->v[0] == '%' ? JOP_MOD : t->n == 2 ? JOP_FLOORDIV : JOP_DIV;
		l = binary(p, op, t->line, l, parse_power(p));
	}
	return l;
}

static struct jnode *parse_add(struct parser *p)
{
	struct jnode *l = parse_mul(p);
	while (is(p, T_ADD)) {
		struct tok *t = next(p);
		enum jop op = t->v[0] == '+' ? JOP_ADD : t->v[0] == '-' ? JOP_SUB : JOP_CONCAT;
		l = binary(p, op, t->line, l, parse_mul(p));
	}
	return l;
}

static struct jnode *parse_cmp(struct parser *p)
{
	struct jnode *l = parse_add(p);
	for (;;) {
		enum jop op;
		int line = cur_line(p);
		if (is_ident(p, 0, "not") && is_ident(p, 1, "in")) {
			op = JOP_NOTIN;
			p->cur += 2;
		} else if (is_ident(p, 0, "in")) {
			op = JOP_IN;
			p->cur++;
		} else if (is(p, T_CMP)) {
			const char *v = next(p)->v;
			op = strcmp(v, "==") == 0 ? JOP_EQ : strcmp(v, "!=") == 0 ? JOP_NE : strcmp(v, "<") == 0 ? JOP_LT
			     : strcmp(v, ">") == 0 ? JOP_GT : strcmp(v, "<=") == 0 ? JOP_LE : JOP_GE;
		} else {
			return l;
		}
		l = binary(p, op, line, l, parse_add(p));
	}
}

static struct jnode *parse_not(struct parser *p)
{
	if (is_ident(p, 0, "not")) {
		enter(p);
		int line = next(p)->line;
		struct jnode *u = node(p, JN_UNARY, line);
		u->op = JOP_NOT;
		u->a = parse_not(p);
		p->depth--;
		return u;
	}
	return parse_cmp(p);
}

static struct jnode *parse_and(struct parser *p)
{
	struct jnode *l = parse_not(p);
	while (is_ident(p, 0, "and")) {
		int line = next(p)->line;
		l = binary(p, JOP_AND, line, l, parse_not(p));
	}
	return l;
}

static struct jnode *parse_or(struct parser *p)
{
	struct jnode *l = parse_and(p);
	while (is_ident(p, 0, "or")) {
		int line = next(p)->line;
		l = binary(p, JOP_OR, line, l, parse_and(p));
	}
	return l;
}

static struct jnode *parse_expr(struct parser *p)
{
	enter(p);
	struct jnode *a = parse_or(p);
	if (is_ident(p, 0, "if")) {
		int line = next(p)->line;
		struct jnode *test = parse_or(p);
		if (is_ident(p, 0, "else")) {
			p->cur++;
			struct jnode *t = node(p, JN_TERNARY, line);
			t->a = test;
			t->b = a;
			t->c = parse_expr(p);
			a = t;
		} else {
			struct jnode *s = node(p, JN_SELECT, line);
			s->a = a;
			s->b = test;
			a = s;
		}
	}
	p->depth--;
	return a;
}

static struct jnode *parse_sequence(struct parser *p, bool primary)
{
	struct jnode *first = primary ? parse_primary(p) : parse_expr(p);
	if (!is(p, T_COMMA))
		return first;
	struct nlist l = {0};
	nl_push(p, &l, first);
	while (is(p, T_COMMA)) {
		p->cur++;
		nl_push(p, &l, primary ? parse_primary(p) : parse_expr(p));
	}
	struct jnode *t = node(p, JN_TUPLE, first->line);
	t->body = l.v;
	t->nbody = l.n;
	return t;
}

/* Statements until one of the names opens a statement. */
static void parse_until(struct parser *p, struct nlist *l, const char *a, const char *b, const char *c, int line)
{
	for (;;) {
		if (!peek(p, 0))
			perr(p, line, "this block is never closed (expected {%% %s %%})", c ? c : b ? b : a);
		if (is_stmt(p, a) || (b && is_stmt(p, b)) || (c && is_stmt(p, c)))
			return;
		nl_push(p, l, parse_any(p));
	}
}

static struct jnode *parse_if(struct parser *p, int line)
{
	enter(p);
	struct jnode *n = node(p, JN_IF, line);
	n->a = parse_expr(p);
	expect(p, T_CLOSE_STMT, "'%}'");
	struct nlist body = {0}, alt = {0};
	parse_until(p, &body, "elif", "else", "endif", line);
	if (is_stmt(p, "elif")) {
		int l2 = peek(p, 1)->line;
		p->cur += 2;
		nl_push(p, &alt, parse_if(p, l2));
	} else if (is_stmt(p, "else")) {
		p->cur += 2;
		expect(p, T_CLOSE_STMT, "'%}'");
		parse_until(p, &alt, "endif", NULL, NULL, line);
	}
	n->body = body.v;
	n->nbody = body.n;
	n->alt = alt.v;
	n->nalt = alt.n;
	p->depth--;
	return n;
}

static void expect_end(struct parser *p, const char *name, int line)
{
	expect(p, T_OPEN_STMT, "'{%'");
	if (!is_ident(p, 0, name))
		perr(p, line, "expected {%% %s %%}", name);
	p->cur++;
	expect(p, T_CLOSE_STMT, "'%}'");
}

/* Whether a subtree names `loop`: a for loop whose body does not is spared
 * making the loop object each iteration. Iterative down `a`, where long
 * chains (a + b + c ...) grow. */
static bool uses_loop(const struct jnode *n)
{
	for (; n; n = n->a) {
		if (n->kind == JN_IDENT && strcmp(n->s, "loop") == 0)
			return true;
		for (size_t i = 0; i < n->nbody; i++)
			if (uses_loop(n->body[i]))
				return true;
		for (size_t i = 0; i < n->nalt; i++)
			if (uses_loop(n->alt[i]))
				return true;
		if (uses_loop(n->b) || uses_loop(n->c))
			return true;
	}
	return false;
}

static struct jnode *parse_stmt(struct parser *p)
{
	struct tok *open = expect(p, T_OPEN_STMT, "'{%'");
	struct tok *t = peek(p, 0);
	if (!t || t->type != T_IDENT)
		perr(p, open->line, "expected a statement's name after {%%");
	int line = t->line;
	p->cur++;
	struct jnode *n;
	if (strcmp(t->v, "set") == 0) {
		n = node(p, JN_SET, line);
		n->a = parse_sequence(p, false);
		if (is(p, T_EQUALS)) {
			p->cur++;
			n->b = parse_sequence(p, false);
		} else {
			expect(p, T_CLOSE_STMT, "'%}'");
			struct nlist body = {0};
			parse_until(p, &body, "endset", NULL, NULL, line);
			n->body = body.v;
			n->nbody = body.n;
			p->cur++;
			if (!is_ident(p, 0, "endset"))
				perr(p, line, "expected {%% endset %%}");
			p->cur++;
		}
		expect(p, T_CLOSE_STMT, "'%}'");
		if (n->a->kind != JN_IDENT && n->a->kind != JN_TUPLE && n->a->kind != JN_MEMBER)
			perr(p, line, "cannot assign to this");
	} else if (strcmp(t->v, "if") == 0) {
		n = parse_if(p, line);
		expect_end(p, "endif", line);
	} else if (strcmp(t->v, "for") == 0) {
		enter(p);
		n = node(p, JN_FOR, line);
		n->a = parse_sequence(p, true);
		if (n->a->kind != JN_IDENT && n->a->kind != JN_TUPLE)
			perr(p, line, "expected an identifier or a tuple for the loop variable");
		if (!is_ident(p, 0, "in"))
			perr(p, line, "expected 'in' after the loop variable");
		p->cur++;
		struct jnode *it = parse_expr(p);
		if (it->kind == JN_SELECT) {
			n->b = it->a;
			n->c = it->b;
		} else {
			n->b = it;
		}
		expect(p, T_CLOSE_STMT, "'%}'");
		struct nlist body = {0}, alt = {0};
		parse_until(p, &body, "endfor", "else", NULL, line);
		if (is_stmt(p, "else")) {
			p->cur += 2;
			expect(p, T_CLOSE_STMT, "'%}'");
			parse_until(p, &alt, "endfor", NULL, NULL, line);
		}
		n->body = body.v;
		n->nbody = body.n;
		n->alt = alt.v;
		n->nalt = alt.n;
		n->flag = uses_loop(n);
		expect_end(p, "endfor", line);
		p->depth--;
	} else if (strcmp(t->v, "break") == 0 || strcmp(t->v, "continue") == 0) {
		n = node(p, t->v[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
		expect(p, T_CLOSE_STMT, "'%}'");
	} else if (strcmp(t->v, "macro") == 0 || strcmp(t->v, "call") == 0 || strcmp(t->v, "filter") == 0) {
		perr(p, line, "{%% %s %%} is not supported", t->v);
	} else {
		perr(p, line, "unknown statement '%s'", t->v);
	}
	return n;
}

static struct jnode *parse_any(struct parser *p)
{
	struct tok *t = peek(p, 0);
	struct jnode *n;
	switch (t->type) {
	case T_COMMENT:
		p->cur++;
		return node(p, JN_COMMENT, t->line);
	case T_TEXT:
		p->cur++;
		n = node(p, JN_TEXT, t->line);
		n->s = t->v;
		n->slen = t->n;
		return n;
	case T_OPEN_STMT:
		return parse_stmt(p);
	case T_OPEN_EXPR:
		p->cur++;
		n = node(p, JN_OUTPUT, t->line);
		n->a = parse_expr(p);
		expect(p, T_CLOSE_EXPR, "'}}'");
		return n;
	default:
		perr(p, t->line, "unexpected '%s'", t->v);
	}
}

struct ig_jinja *ig_jinja_parse(const char *src, size_t len, char *err, size_t errlen)
{
	struct ig_jinja *volatile t = calloc(1, sizeof(*t));
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	struct parser p = {.a = &t->arena, .err = err, .errlen = errlen};
	t->arena.limit = 64u << 20;
	t->arena.fail_jmp = &p.jmp;
	t->arena.err = err;
	t->arena.errlen = errlen;
	if (setjmp(p.jmp)) {
		ig_jinja_free(t);
		return NULL;
	}
	if (memchr(src, '\0', len)) {
		snprintf(err, errlen, "the template holds a NUL byte");
		longjmp(p.jmp, 1);
	}
	struct pre s;
	preprocess(src, len, &s, &t->arena);
	p.eof_line = s.n ? s.line[s.n - 1] : 1;
	tokenize(&p, &s);
	struct nlist body = {0};
	while (p.cur < p.nt)
		nl_push(&p, &body, parse_any(&p));
	t->body = body.v;
	t->nbody = body.n;
	t->arena.fail_jmp = NULL;
	return t;
}

void ig_jinja_free(struct ig_jinja *t)
{
	if (!t)
		return;
	ja_free(&t->arena);
	free(t);
}
