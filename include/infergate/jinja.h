/* The Jinja subset of the models' chat templates, as @huggingface/jinja 0.5.13
 * (the renderer transformers.js uses) lexes, parses and evaluates it: the
 * parts of src/common/jinja_parse.c (lexer and parser: template text to an
 * AST), jinja_value.c (runtime values: the JSON a request carries, strings,
 * numbers and tojson as JavaScript prints them) and jinja_eval.c (the
 * evaluator). include/infergate/chattmpl.h is the interface the gateway uses;
 * this header is the renderer's inside, shared by its three files and their
 * unit tests.
 *
 * A parsed template (struct ig_jinja) is never written after
 * ig_jinja_parse: renders on many threads share it. Everything a render
 * makes lives in its own arena (struct jarena), freed whole at the end, so an
 * error anywhere unwinds with longjmp and leaks nothing. */
#ifndef IG_JINJA_H
#define IG_JINJA_H

#include <jansson.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>

/* Hostile templates and requests meet these limits, not the stack's. */
#define IG_JINJA_MAX_DEPTH 200            /* nesting of expressions and blocks in a template */
#define IG_JINJA_MAX_VALUE_DEPTH 256      /* nesting of a request's JSON, and of tojson */
#define IG_JINJA_MAX_OUTPUT (64u << 20)   /* bytes a render may write */
#define IG_JINJA_MAX_ARENA (512u << 20)   /* bytes a render may allocate */
#define IG_JINJA_MAX_ITERATIONS 1000000L  /* loop iterations in one render, all loops together */
#define IG_JINJA_MAX_RANGE 1000000L       /* items of one range() */

/* ---- arena ---------------------------------------------------------------- */

struct jarena_block;
struct jarena {
	struct jarena_block *head;
	size_t total;      /* bytes allocated so far */
	size_t limit;      /* over it, fail() */
	jmp_buf *fail_jmp; /* where an allocation over the limit jumps (NULL: abort the parse) */
	char *err;         /* the reason, for the jump */
	size_t errlen;
};
void *ja_alloc(struct jarena *a, size_t n);
char *ja_strndup(struct jarena *a, const char *s, size_t n);
void ja_free(struct jarena *a);

/* ---- AST ------------------------------------------------------------------- */

enum jn_kind {
	JN_TEXT,       /* s: literal output */
	JN_OUTPUT,     /* {{ a }} */
	JN_IF,         /* a: test, body, alt (an elif is one JN_IF in alt) */
	JN_FOR,        /* a: loop variable (JN_IDENT or JN_TUPLE), b: iterable, c: select test or NULL; body, alt (else);
	                  flag: the loop names `loop` */
	JN_SET,        /* a: target; b: value, or NULL and body (a {% set %}...{% endset %} block) */
	JN_BREAK,
	JN_CONTINUE,
	JN_COMMENT,
	JN_IDENT,      /* s */
	JN_INT,        /* num */
	JN_FLOAT,      /* num */
	JN_STR,        /* s, slen */
	JN_ARRAY,      /* body: items */
	JN_TUPLE,      /* body: items */
	JN_OBJECT,     /* body: keys, alt: values */
	JN_BINARY,     /* op, a, b */
	JN_UNARY,      /* op (JOP_NOT, JOP_ADD, JOP_SUB), a */
	JN_MEMBER,     /* a: object, b: property; flag: computed (a[b]) */
	JN_SLICE,      /* a, b, c: start, stop, step (each may be NULL) */
	JN_CALL,       /* a: callee, body: arguments */
	JN_KWARG,      /* s: name, a: value */
	JN_FILTER,     /* a: operand, s: filter name, body: arguments (flag: with parentheses) */
	JN_TEST,       /* a: operand, s: test name, flag: negated */
	JN_TERNARY,    /* a: condition, b: if true, c: if false */
	JN_SELECT,     /* a: value, b: condition (`x if c` without else) */
};

enum jop {
	JOP_NONE, JOP_AND, JOP_OR, JOP_NOT, JOP_EQ, JOP_NE, JOP_LT, JOP_GT, JOP_LE, JOP_GE,
	JOP_ADD, JOP_SUB, JOP_MUL, JOP_DIV, JOP_FLOORDIV, JOP_MOD, JOP_POW, JOP_CONCAT,
	JOP_IN, JOP_NOTIN,
};

struct jnode {
	enum jn_kind kind;
	enum jop op;
	int line;              /* in the template's source, from 1 */
	bool flag;
	const char *s;         /* NUL-terminated; slen bytes (a string literal may hold NULs) */
	size_t slen;
	double num;
	struct jnode *a, *b, *c;
	struct jnode **body, **alt;
	size_t nbody, nalt;
};

struct ig_jinja {
	struct jarena arena;   /* the AST's memory */
	struct jnode **body;
	size_t nbody;
};

/* Parses a template as @huggingface/jinja's Template does (lstrip_blocks and
 * trim_blocks on, as its constructor sets them and as transformers'
 * apply_chat_template sets them for Python's jinja2). NULL with "line N: why"
 * in err on a syntax error or a construct this renderer does not support
 * (macros, call and filter blocks, an unknown filter or test). */
struct ig_jinja *ig_jinja_parse(const char *src, size_t len, char *err, size_t errlen);
void ig_jinja_free(struct ig_jinja *t);

/* ---- values ----------------------------------------------------------------- */

enum jv_type {
	JV_UNDEF,  /* a missing variable or attribute */
	JV_NULL,
	JV_BOOL,
	JV_INT,    /* a number JavaScript holds as an integer (JSON's 1.0 too) */
	JV_FLOAT,
	JV_STR,
	JV_ARRAY,  /* also a tuple */
	JV_OBJECT, /* insertion-ordered keys; JSON objects, dict literals, loop, keyword arguments */
	JV_NS,     /* namespace(): an object whose attributes `set` may assign */
	JV_FUNC,   /* a global function, or a method bound to self */
};

enum jfunc {
	JF_NAMESPACE, JF_RAISE, JF_RANGE, JF_STRFTIME,
	JF_S_UPPER, JF_S_LOWER, JF_S_STRIP, JF_S_LSTRIP, JF_S_RSTRIP, JF_S_TITLE, JF_S_CAPITALIZE,
	JF_S_STARTSWITH, JF_S_ENDSWITH, JF_S_SPLIT, JF_S_REPLACE,
	JF_O_GET, JF_O_ITEMS, JF_O_KEYS, JF_O_VALUES,
};

struct jval {
	enum jv_type type;
	bool kwargs;               /* a JV_OBJECT of keyword arguments, last of a call's arguments */
	bool tuple;                /* a JV_ARRAY made by a tuple literal (no tojson, not `iterable`) */
	union {
		bool b;
		double num;        /* JV_INT, JV_FLOAT */
		struct { const char *p; size_t n; } s;
		struct { struct jval **v; size_t n, cap; } arr;
		struct { const char **k; size_t *klen; struct jval **v; size_t n, cap; } obj;
		struct { enum jfunc fn; struct jval *self; } fn;
	} u;
};

/* The evaluation state of one render: its arena, where errors jump. */
struct jctx {
	struct jarena arena;
	jmp_buf jmp;
	char *err;
	size_t errlen;
	long iterations;
	int depth;                     /* of evaluation */
	struct jval undef, null, t, f; /* shared constants */
};

/* Records why the render fails and jumps out of it. */
void jfail(struct jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

struct jval *jv_str(struct jctx *c, const char *p, size_t n);
struct jval *jv_cstr(struct jctx *c, const char *s);
struct jval *jv_func(struct jctx *c, enum jfunc fn, struct jval *self);
struct jval *jv_num(struct jctx *c, enum jv_type type, double num);
struct jval *jv_bool(struct jctx *c, bool b);
struct jval *jv_array(struct jctx *c, size_t cap);
void jv_push(struct jctx *c, struct jval *arr, struct jval *v);
struct jval *jv_object(struct jctx *c, enum jv_type type, size_t cap);
/* Sets key (replacing its value, keeping its place). */
void jv_set(struct jctx *c, struct jval *obj, const char *k, size_t klen, struct jval *v);
struct jval *jv_get(const struct jval *obj, const char *k, size_t klen); /* NULL when absent */
/* A request's JSON as the reference sees it after JSON.parse: numbers are
 * doubles, and an object's integer-like keys come first, ascending. */
struct jval *jv_from_json(struct jctx *c, const json_t *j, int depth);

bool jv_truthy(const struct jval *v);
const char *jv_typename(const struct jval *v);

/* Growable output of a render (malloc'd; IG_JINJA_MAX_OUTPUT caps it). */
struct jbuf {
	char *p;
	size_t n, cap;
	size_t limit;
};
void jb_put(struct jctx *c, struct jbuf *b, const char *s, size_t n);
void jb_puts(struct jctx *c, struct jbuf *b, const char *s);
struct jval *jv_buf_str(struct jctx *c, struct jbuf *b); /* the buffer's text as a string value */

static inline bool jv_is_num(const struct jval *v)
{
	return v->type == JV_INT || v->type == JV_FLOAT;
}

/* JavaScript's Number#toString of x. */
void jv_fmt_number(char *out, size_t n, double x);
/* What {{ v }} prints (RuntimeValue#toString): floats with ".0", containers as JSON. */
void jv_print(struct jctx *c, struct jbuf *b, const struct jval *v);
/* What `+` and `~` make of an operand (JavaScript's String(v.value)). */
void jv_concat_str(struct jctx *c, struct jbuf *b, const struct jval *v);
struct tojson_opts {
	int indent;            /* 0: none */
	bool ensure_ascii;
	const char *item_sep, *key_sep;
	bool undefined_as_null;
};
void jv_tojson(struct jctx *c, struct jbuf *b, const struct jval *v, const struct tojson_opts *o, int depth);
/* JavaScript's == between two values' .value; === for `in` on arrays. */
bool jv_loose_eq(struct jctx *c, const struct jval *a, const struct jval *b);
bool jv_strict_eq(const struct jval *a, const struct jval *b);

/* JavaScript's String#trim/trimStart/trimEnd (its \s: Unicode spaces too). */
struct jval *jv_trim(struct jctx *c, const struct jval *s, bool start, bool end);
/* toUpperCase / toLowerCase. */
struct jval *jv_case(struct jctx *c, const struct jval *s, bool upper);
/* String length in UTF-16 code units, as JavaScript counts. */
size_t jv_utf16_len(const char *p, size_t n);
/* The bytes of the JavaScript white space character (\s) at p, or before
 * p + n; 0 when there is none. */
size_t jv_space_at(const char *p, size_t n);
size_t jv_space_before(const char *p, size_t n);

/* ---- the evaluator and its builtins (jinja_eval.c, jinja_builtin.c) ---- */

struct jscope; /* a scope of variables: the globals, a for loop's */
struct jargs {
	struct jval **v;  /* positional (room for one more: the kwargs, when a function takes them last) */
	size_t n;
	struct jval *kw;  /* the keyword arguments (a kwargs JV_OBJECT), NULL when none */
};
struct jval *jv_eval(struct jctx *c, const struct jnode *n, struct jscope *s);
struct jargs jv_eval_args(struct jctx *c, const struct jnode *call, struct jscope *s);
/* Positional argument i, else keyword kw (either may be absent); NULL when neither. */
struct jval *jv_arg(const struct jargs *a, size_t i, const char *kw);
/* One more loop iteration; fails the render past IG_JINJA_MAX_ITERATIONS. */
void jv_count_iteration(struct jctx *c);

struct jval *jv_call(struct jctx *c, const struct jval *fn, const struct jargs *a);
struct jval *jv_filter(struct jctx *c, const struct jnode *f, struct jscope *s);
bool jv_test(struct jctx *c, const char *name, const struct jval *v);
/* A string's, an array's or an object's builtin attribute (methods, length); undefined if none. */
struct jval *jv_builtin(struct jctx *c, struct jval *obj, const struct jval *prop);
/* An object's items (what 0), keys (1) or values (2), as an array. */
struct jval *jv_items(struct jctx *c, const struct jval *o, int what);
const char *jv_find(const char *h, size_t hn, const char *nd, size_t nn); /* memmem */
size_t jv_cp_len(const char *p, size_t n); /* bytes of the UTF-8 character at p */

/* ---- rendering ----------------------------------------------------------- */

struct ig_jinja_var {
	const char *name;
	const json_t *value; /* NULL: the variable is undefined */
};

/* Renders t with the variables (and the globals: true, false, none,
 * namespace, raise_exception, range, strftime_now) into a malloc'd
 * NUL-terminated *out of *len bytes. Returns 0, or -1 with the reason in err
 * (raise_exception's message, a type error, a limit). */
int ig_jinja_render(const struct ig_jinja *t, const struct ig_jinja_var *vars, size_t nvars,
                    char **out, size_t *len, char *err, size_t errlen);

#endif
