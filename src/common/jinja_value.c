/* The runtime values of the Jinja renderer (include/infergate/jinja.h) and
 * what @huggingface/jinja 0.5.13 (src/runtime.ts) makes of them, which is
 * JavaScript's behaviour more than Python's: a request's JSON as JSON.parse
 * leaves it (every number a double, so 1.0 is the integer 1; an object's
 * integer-like keys first), numbers printed by Number#toString, `tojson` as
 * JSON.stringify escapes with Python's ", " and ": " separators, == as
 * JavaScript's loose equality, and trim as String#trim with its Unicode
 * spaces. Also the arena every render and parse allocates from. Not here:
 * the evaluator (jinja_eval.c). */
#include "config.h"
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicase.h>

#include "infergate/jinja.h"

/* ---- arena ------------------------------------------------------------------------ */

struct jarena_block {
	struct jarena_block *next;
	size_t used, size;
	_Alignas(16) unsigned char data[];
};

#define BLOCK_SIZE (64u << 10)

void *ja_alloc(struct jarena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct jarena_block *b = a->head;
	if (!b || b->size - b->used < n) {
		size_t size = n > BLOCK_SIZE / 4 ? n : BLOCK_SIZE;
		if (a->total + size > a->limit || !(b = malloc(sizeof(*b) + size))) {
			snprintf(a->err, a->errlen, "the template needs more than %zu MiB of memory", a->limit >> 20);
			if (a->fail_jmp)
				longjmp(*a->fail_jmp, 1);
			abort();
		}
		a->total += size;
		b->used = 0;
		b->size = size;
		if (size > BLOCK_SIZE && a->head) { /* a big one goes behind, so the current block stays in use */
			b->next = a->head->next;
			a->head->next = b;
		} else {
			b->next = a->head;
			a->head = b;
		}
	}
	void *p = b->data + b->used;
	b->used += n;
	return p;
}

char *ja_strndup(struct jarena *a, const char *s, size_t n)
{
	char *p = ja_alloc(a, n + 1);
	memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

void ja_free(struct jarena *a)
{
	while (a->head) {
		struct jarena_block *b = a->head;
		a->head = b->next;
		free(b);
	}
	a->total = 0;
}

/* ---- errors, buffers ------------------------------------------------------------------ */

void jfail(struct jctx *c, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	longjmp(c->jmp, 1);
}

void jb_put(struct jctx *c, struct jbuf *b, const char *s, size_t n)
{
	if (n == 0)
		return;
	if (b->n + n > b->limit)
		jfail(c, "the rendered text exceeds %zu MiB", b->limit >> 20);
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		/* an arena copy: a render's buffers go with its arena */
		char *p = ja_alloc(&c->arena, cap);
		if (b->n)
			memcpy(p, b->p, b->n);
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

void jb_puts(struct jctx *c, struct jbuf *b, const char *s)
{
	jb_put(c, b, s, strlen(s));
}

/* ---- constructors ---------------------------------------------------------------------- */

struct jval *jv_str(struct jctx *c, const char *p, size_t n)
{
	struct jval *v = ja_alloc(&c->arena, sizeof(*v));
	v->type = JV_STR;
	v->kwargs = false;
	v->tuple = false;
	v->u.s.p = p;
	v->u.s.n = n;
	return v;
}

struct jval *jv_num(struct jctx *c, enum jv_type type, double num)
{
	struct jval *v = ja_alloc(&c->arena, sizeof(*v));
	v->type = type;
	v->kwargs = false;
	v->tuple = false;
	v->u.num = num;
	return v;
}

struct jval *jv_cstr(struct jctx *c, const char *s)
{
	return jv_str(c, s, strlen(s));
}

struct jval *jv_buf_str(struct jctx *c, struct jbuf *b)
{
	return jv_str(c, b->p ? b->p : "", b->n);
}

struct jval *jv_func(struct jctx *c, enum jfunc fn, struct jval *self)
{
	struct jval *v = jv_num(c, JV_FUNC, 0);
	v->u.fn.fn = fn;
	v->u.fn.self = self;
	return v;
}

struct jval *jv_bool(struct jctx *c, bool b)
{
	return b ? &c->t : &c->f;
}

struct jval *jv_array(struct jctx *c, size_t cap)
{
	struct jval *v = ja_alloc(&c->arena, sizeof(*v));
	v->type = JV_ARRAY;
	v->kwargs = false;
	v->tuple = false;
	v->u.arr.n = 0;
	v->u.arr.cap = cap;
	v->u.arr.v = cap ? ja_alloc(&c->arena, cap * sizeof(struct jval *)) : NULL;
	return v;
}

void jv_push(struct jctx *c, struct jval *arr, struct jval *v)
{
	if (arr->u.arr.n == arr->u.arr.cap) {
		size_t cap = arr->u.arr.cap ? arr->u.arr.cap * 2 : 4;
		struct jval **nv = ja_alloc(&c->arena, cap * sizeof(*nv));
		if (arr->u.arr.n)
			memcpy(nv, arr->u.arr.v, arr->u.arr.n * sizeof(*nv));
		arr->u.arr.v = nv;
		arr->u.arr.cap = cap;
	}
	arr->u.arr.v[arr->u.arr.n++] = v;
}

struct jval *jv_object(struct jctx *c, enum jv_type type, size_t cap)
{
	struct jval *v = ja_alloc(&c->arena, sizeof(*v));
	v->type = type;
	v->kwargs = false;
	v->tuple = false;
	v->u.obj.n = 0;
	v->u.obj.cap = cap;
	v->u.obj.k = cap ? ja_alloc(&c->arena, cap * sizeof(char *)) : NULL;
	v->u.obj.klen = cap ? ja_alloc(&c->arena, cap * sizeof(size_t)) : NULL;
	v->u.obj.v = cap ? ja_alloc(&c->arena, cap * sizeof(struct jval *)) : NULL;
	return v;
}

struct jval *jv_get(const struct jval *obj, const char *k, size_t klen)
{
	for (size_t i = 0; i < obj->u.obj.n; i++)
		if (obj->u.obj.klen[i] == klen && memcmp(obj->u.obj.k[i], k, klen) == 0)
			return obj->u.obj.v[i];
	return NULL;
}

void jv_set(struct jctx *c, struct jval *obj, const char *k, size_t klen, struct jval *v)
{
	for (size_t i = 0; i < obj->u.obj.n; i++)
		if (obj->u.obj.klen[i] == klen && memcmp(obj->u.obj.k[i], k, klen) == 0) {
			obj->u.obj.v[i] = v;
			return;
		}
	if (obj->u.obj.n == obj->u.obj.cap) {
		size_t cap = obj->u.obj.cap ? obj->u.obj.cap * 2 : 4, n = obj->u.obj.n;
		const char **nk = ja_alloc(&c->arena, cap * sizeof(*nk));
		size_t *nl = ja_alloc(&c->arena, cap * sizeof(*nl));
		struct jval **nv = ja_alloc(&c->arena, cap * sizeof(*nv));
		if (n) {
			memcpy(nk, obj->u.obj.k, n * sizeof(*nk));
			memcpy(nl, obj->u.obj.klen, n * sizeof(*nl));
			memcpy(nv, obj->u.obj.v, n * sizeof(*nv));
		}
		obj->u.obj.k = nk;
		obj->u.obj.klen = nl;
		obj->u.obj.v = nv;
		obj->u.obj.cap = cap;
	}
	obj->u.obj.k[obj->u.obj.n] = k;
	obj->u.obj.klen[obj->u.obj.n] = klen;
	obj->u.obj.v[obj->u.obj.n++] = v;
}

/* An array index as JavaScript's property order sees one: "0", or no
 * leading zero, below 2^32 - 1; its value, or -1. */
static double array_index(const char *k, size_t n)
{
	if (n == 0 || n > 10 || (n > 1 && k[0] == '0'))
		return -1;
	double v = 0;
	for (size_t i = 0; i < n; i++) {
		if (k[i] < '0' || k[i] > '9')
			return -1;
		v = v * 10 + (k[i] - '0');
	}
	return v < 4294967295.0 ? v : -1;
}

struct jval *jv_from_json(struct jctx *c, const json_t *j, int depth)
{
	if (depth > IG_JINJA_MAX_VALUE_DEPTH)
		jfail(c, "the request's JSON is nested deeper than %d", IG_JINJA_MAX_VALUE_DEPTH);
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		size_t n = json_object_size(j), ni = 0;
		struct jval *o = jv_object(c, JV_OBJECT, n);
		const char *k;
		json_t *v;
		/* Object.entries: integer-like keys first, ascending (insertion sort: they are few) */
		json_object_foreach((json_t *)j, k, v) {
			size_t kl = strlen(k);
			double idx = array_index(k, kl);
			if (idx < 0)
				continue;
			size_t at = ni;
			while (at > 0 && array_index(o->u.obj.k[at - 1], o->u.obj.klen[at - 1]) > idx)
				at--;
			for (size_t m = ni; m > at; m--) {
				o->u.obj.k[m] = o->u.obj.k[m - 1];
				o->u.obj.klen[m] = o->u.obj.klen[m - 1];
				o->u.obj.v[m] = o->u.obj.v[m - 1];
			}
			o->u.obj.k[at] = k;
			o->u.obj.klen[at] = kl;
			o->u.obj.v[at] = jv_from_json(c, v, depth + 1);
			ni++;
		}
		o->u.obj.n = ni;
		json_object_foreach((json_t *)j, k, v) {
			size_t kl = strlen(k);
			if (array_index(k, kl) < 0)
				jv_set(c, o, k, kl, jv_from_json(c, v, depth + 1));
		}
		return o;
	}
	case JSON_ARRAY: {
		size_t n = json_array_size(j);
		struct jval *a = jv_array(c, n);
		for (size_t i = 0; i < n; i++)
			a->u.arr.v[i] = jv_from_json(c, json_array_get(j, i), depth + 1);
		a->u.arr.n = n;
		return a;
	}
	case JSON_STRING:
		return jv_str(c, json_string_value(j), json_string_length(j));
	case JSON_INTEGER:
		return jv_num(c, JV_INT, (double)json_integer_value(j));
	case JSON_REAL: {
		double x = json_real_value(j);
		return jv_num(c, isfinite(x) && x == trunc(x) ? JV_INT : JV_FLOAT, x);
	}
	case JSON_TRUE:
		return &c->t;
	case JSON_FALSE:
		return &c->f;
	default:
		return &c->null;
	}
}

bool jv_truthy(const struct jval *v)
{
	switch (v->type) {
	case JV_BOOL:
		return v->u.b;
	case JV_INT:
	case JV_FLOAT:
		return v->u.num != 0 && !isnan(v->u.num);
	case JV_STR:
		return v->u.s.n > 0;
	case JV_ARRAY:
		return v->u.arr.n > 0;
	case JV_OBJECT:
		return v->u.obj.n > 0;
	case JV_NS:   /* !!Map: always */
	case JV_FUNC:
		return true;
	default:
		return false;
	}
}

const char *jv_typename(const struct jval *v)
{
	static const char *const names[] = {"UndefinedValue", "NullValue", "BooleanValue", "IntegerValue", "FloatValue",
	                                    "StringValue", "ArrayValue", "ObjectValue", "NamespaceValue", "FunctionValue"};
	return names[v->type];
}

/* ---- numbers and strings as JavaScript prints them --------------------------------------- */

void jv_fmt_number(char *out, size_t n, double x)
{
	if (isnan(x)) {
		snprintf(out, n, "NaN");
		return;
	}
	if (isinf(x)) {
		snprintf(out, n, x < 0 ? "-Infinity" : "Infinity");
		return;
	}
	if (x == 0) {
		snprintf(out, n, "0");
		return;
	}
	/* the shortest digits that read back as x (Number::toString's k, n) */
	char sci[40];
	int prec;
	for (prec = 1; prec <= 17; prec++) {
		snprintf(sci, sizeof(sci), "%.*e", prec - 1, fabs(x));
		if (strtod(sci, NULL) == fabs(x))
			break;
	}
	char digits[24];
	size_t k = 0;
	const char *q = sci;
	for (; *q && *q != 'e'; q++)
		if (*q >= '0' && *q <= '9')
			digits[k++] = *q;
	while (k > 1 && digits[k - 1] == '0')
		k--;
	digits[k] = '\0';
	int e = atoi(q + 1) + 1; /* the decimal point's place after the first digit */
	char buf[64];
	size_t o = 0;
	if (x < 0)
		buf[o++] = '-';
	if ((int)k <= e && e <= 21) {
		memcpy(buf + o, digits, k);
		o += k;
		for (int i = (int)k; i < e; i++)
			buf[o++] = '0';
	} else if (0 < e && e <= 21) {
		memcpy(buf + o, digits, (size_t)e);
		o += (size_t)e;
		buf[o++] = '.';
		memcpy(buf + o, digits + e, k - (size_t)e);
		o += k - (size_t)e;
	} else if (-6 < e && e <= 0) {
		buf[o++] = '0';
		buf[o++] = '.';
		for (int i = 0; i < -e; i++)
			buf[o++] = '0';
		memcpy(buf + o, digits, k);
		o += k;
	} else {
		buf[o++] = digits[0];
		if (k > 1) {
			buf[o++] = '.';
			memcpy(buf + o, digits + 1, k - 1);
			o += k - 1;
		}
		o += (size_t)snprintf(buf + o, sizeof(buf) - o, "e%c%d", e - 1 < 0 ? '-' : '+', abs(e - 1));
	}
	buf[o] = '\0';
	snprintf(out, n, "%s", buf);
}

/* FloatValue#toString: an integral value keeps ".0" (toFixed(1)), -0 is "-0.0". */
static void fmt_float(char *out, size_t n, double x)
{
	if (x == 0 && signbit(x))
		snprintf(out, n, "-0.0");
	else if (isfinite(x) && x == trunc(x) && fabs(x) < 1e21)
		snprintf(out, n, "%.1f", x);
	else
		jv_fmt_number(out, n, x);
}

static void json_str_out(struct jctx *c, struct jbuf *b, const char *s, size_t n, bool ascii)
{
	jb_put(c, b, "\"", 1);
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)s[i];
		const char *esc = NULL;
		char u[16];
		if (ch == '"')
			esc = "\\\"";
		else if (ch == '\\')
			esc = "\\\\";
		else if (ch == '\n')
			esc = "\\n";
		else if (ch == '\r')
			esc = "\\r";
		else if (ch == '\t')
			esc = "\\t";
		else if (ch == '\b')
			esc = "\\b";
		else if (ch == '\f')
			esc = "\\f";
		else if (ch < 0x20) {
			snprintf(u, sizeof(u), "\\u%04x", ch);
			esc = u;
		} else if (ascii && ch >= 0x7f) {
			/* makeAsciiSafe: each UTF-16 code unit from 0x7f up as \uxxxx */
			unsigned cp = ch;
			size_t len = 1;
			if (ch >= 0xf0 && i + 3 < n)
				cp = ((ch & 7u) << 18) | ((s[i + 1] & 0x3fu) << 12) | ((s[i + 2] & 0x3fu) << 6) | (s[i + 3] & 0x3fu), len = 4;
			else if (ch >= 0xe0 && i + 2 < n)
				cp = ((ch & 15u) << 12) | ((s[i + 1] & 0x3fu) << 6) | (s[i + 2] & 0x3fu), len = 3;
			else if (ch >= 0xc0 && i + 1 < n)
				cp = ((ch & 31u) << 6) | (s[i + 1] & 0x3fu), len = 2;
			if (cp >= 0x10000)
				snprintf(u, sizeof(u), "\\u%04x\\u%04x", 0xd800 + ((cp - 0x10000) >> 10), 0xdc00 + ((cp - 0x10000) & 0x3ff));
			else
				snprintf(u, sizeof(u), "\\u%04x", cp);
			jb_put(c, b, s + i - run, run);
			run = 0;
			jb_puts(c, b, u);
			i += len - 1;
			continue;
		}
		if (esc) {
			jb_put(c, b, s + i - run, run);
			run = 0;
			jb_puts(c, b, esc);
		} else {
			run++;
		}
	}
	jb_put(c, b, s + n - run, run);
	jb_put(c, b, "\"", 1);
}

static void indent_to(struct jctx *c, struct jbuf *b, int indent, int depth)
{
	jb_put(c, b, "\n", 1);
	for (int i = 0; i < indent * depth; i++)
		jb_put(c, b, " ", 1);
}

/* runtime.ts toJSON(). */
void jv_tojson(struct jctx *c, struct jbuf *b, const struct jval *v, const struct tojson_opts *o, int depth)
{
	char num[64];
	if (depth > IG_JINJA_MAX_VALUE_DEPTH)
		jfail(c, "tojson: nested deeper than %d", IG_JINJA_MAX_VALUE_DEPTH);
	const char *isep = o->item_sep ? o->item_sep : o->indent ? "," : ", ";
	const char *ksep = o->key_sep ? o->key_sep : ": ";
	switch (v->type) {
	case JV_NULL:
		jb_puts(c, b, "null");
		return;
	case JV_UNDEF:
		jb_puts(c, b, o->undefined_as_null ? "null" : "undefined");
		return;
	case JV_BOOL:
		jb_puts(c, b, v->u.b ? "true" : "false");
		return;
	case JV_INT:
	case JV_FLOAT:
		if (!isfinite(v->u.num))
			jb_puts(c, b, "null");
		else {
			jv_fmt_number(num, sizeof(num), v->u.num);
			jb_puts(c, b, num);
		}
		return;
	case JV_STR:
		json_str_out(c, b, v->u.s.p, v->u.s.n, o->ensure_ascii);
		return;
	case JV_ARRAY:
		if (v->tuple)
			jfail(c, "Cannot convert to JSON: TupleValue");
		if (v->kwargs)
			jfail(c, "Cannot convert to JSON: KeywordArgumentsValue");
		jb_put(c, b, "[", 1);
		for (size_t i = 0; i < v->u.arr.n; i++) {
			if (i)
				jb_puts(c, b, isep);
			if (o->indent)
				indent_to(c, b, o->indent, depth + 1);
			jv_tojson(c, b, v->u.arr.v[i], o, depth + 1);
		}
		if (o->indent && v->u.arr.n)
			indent_to(c, b, o->indent, depth);
		jb_put(c, b, "]", 1);
		return;
	case JV_OBJECT:
	case JV_NS:
		if (v->kwargs)
			jfail(c, "Cannot convert to JSON: KeywordArgumentsValue");
		jb_put(c, b, "{", 1);
		for (size_t i = 0; i < v->u.obj.n; i++) {
			if (i)
				jb_puts(c, b, isep);
			if (o->indent)
				indent_to(c, b, o->indent, depth + 1);
			json_str_out(c, b, v->u.obj.k[i], v->u.obj.klen[i], o->ensure_ascii);
			jb_puts(c, b, ksep);
			jv_tojson(c, b, v->u.obj.v[i], o, depth + 1);
		}
		if (o->indent && v->u.obj.n)
			indent_to(c, b, o->indent, depth);
		jb_put(c, b, "}", 1);
		return;
	case JV_FUNC:
		jfail(c, "Cannot convert to JSON: FunctionValue");
	}
}

void jv_print(struct jctx *c, struct jbuf *b, const struct jval *v)
{
	char num[64];
	static const struct tojson_opts plain = {0, false, NULL, NULL, false};
	switch (v->type) {
	case JV_STR:
		jb_put(c, b, v->u.s.p, v->u.s.n);
		return;
	case JV_INT:
		jv_fmt_number(num, sizeof(num), v->u.num);
		jb_puts(c, b, num);
		return;
	case JV_FLOAT:
		fmt_float(num, sizeof(num), v->u.num);
		jb_puts(c, b, num);
		return;
	case JV_BOOL:
		jb_puts(c, b, v->u.b ? "true" : "false");
		return;
	case JV_NULL: /* new NullValue() holds undefined, which String() prints so */
	case JV_UNDEF:
		jb_puts(c, b, "undefined");
		return;
	case JV_ARRAY:
	case JV_OBJECT:
	case JV_NS:
		jv_tojson(c, b, v, &plain, 0);
		return;
	case JV_FUNC:
		jfail(c, "cannot print a function");
	}
}

void jv_concat_str(struct jctx *c, struct jbuf *b, const struct jval *v)
{
	char num[64];
	switch (v->type) {
	case JV_INT:
	case JV_FLOAT:
		jv_fmt_number(num, sizeof(num), v->u.num);
		jb_puts(c, b, num);
		return;
	case JV_ARRAY: /* Array#toString: the items' toString, joined by "," */
		for (size_t i = 0; i < v->u.arr.n; i++) {
			if (i)
				jb_put(c, b, ",", 1);
			jv_print(c, b, v->u.arr.v[i]);
		}
		return;
	case JV_OBJECT:
	case JV_NS:
		jb_puts(c, b, "[object Map]");
		return;
	default:
		jv_print(c, b, v);
	}
}

/* ---- equality ------------------------------------------------------------------------------ */

static bool is_num(const struct jval *v)
{
	return v->type == JV_INT || v->type == JV_FLOAT;
}

/* JavaScript's StringToNumber. */
static double str_to_number(const char *s, size_t n)
{
	size_t sp;
	while (n && (sp = jv_space_at(s, n)) > 0)
		s += sp, n -= sp;
	while (n && (sp = jv_space_before(s, n)) > 0)
		n -= sp;
	if (n == 0)
		return 0;
	char buf[128];
	if (n >= sizeof(buf))
		return NAN;
	memcpy(buf, s, n);
	buf[n] = '\0';
	const char *p = buf;
	if (n > 2 && p[0] == '0' && strchr("xXoObB", p[1])) {
		int base = (p[1] == 'x' || p[1] == 'X') ? 16 : (p[1] == 'o' || p[1] == 'O') ? 8 : 2;
		double v = 0;
		for (p += 2; *p; p++) {
			int d = (*p >= '0' && *p <= '9') ? *p - '0' : (*p >= 'a' && *p <= 'f') ? *p - 'a' + 10
			        : (*p >= 'A' && *p <= 'F') ? *p - 'A' + 10 : 99;
			if (d >= base)
				return NAN;
			v = v * base + d;
		}
		return v;
	}
	const char *q = p;
	if (*q == '+' || *q == '-')
		q++;
	if (strcmp(q, "Infinity") == 0)
		return p[0] == '-' ? -INFINITY : INFINITY;
	bool digits = false;
	while (*q >= '0' && *q <= '9')
		q++, digits = true;
	if (*q == '.')
		for (q++; *q >= '0' && *q <= '9'; q++)
			digits = true;
	if (!digits)
		return NAN;
	if (*q == 'e' || *q == 'E') {
		q++;
		if (*q == '+' || *q == '-')
			q++;
		if (!(*q >= '0' && *q <= '9'))
			return NAN;
		while (*q >= '0' && *q <= '9')
			q++;
	}
	return *q ? NAN : strtod(p, NULL);
}

/* ToPrimitive of an array or a Map, as a string value. */
static struct jval *to_primitive(struct jctx *c, const struct jval *v)
{
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	jv_concat_str(c, &b, v);
	return jv_str(c, b.p ? b.p : "", b.n);
}

bool jv_loose_eq(struct jctx *c, const struct jval *a, const struct jval *b)
{
	bool an = a->type == JV_NULL || a->type == JV_UNDEF, bn = b->type == JV_NULL || b->type == JV_UNDEF;
	if (an || bn)
		return an && bn;
	if (is_num(a) && is_num(b))
		return a->u.num == b->u.num;
	if (a->type == JV_STR && b->type == JV_STR)
		return a->u.s.n == b->u.s.n && memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0;
	if (a->type == JV_BOOL && b->type == JV_BOOL)
		return a->u.b == b->u.b;
	bool ao = a->type >= JV_ARRAY, bo = b->type >= JV_ARRAY;
	if (ao && bo)
		return a == b;
	if (a->type == JV_BOOL)
		return jv_loose_eq(c, jv_num(c, JV_INT, a->u.b), b);
	if (b->type == JV_BOOL)
		return jv_loose_eq(c, a, jv_num(c, JV_INT, b->u.b));
	if (is_num(a) && b->type == JV_STR)
		return a->u.num == str_to_number(b->u.s.p, b->u.s.n);
	if (a->type == JV_STR && is_num(b))
		return str_to_number(a->u.s.p, a->u.s.n) == b->u.num;
	if (ao && a->type != JV_FUNC)
		return jv_loose_eq(c, to_primitive(c, a), b);
	if (bo && b->type != JV_FUNC)
		return jv_loose_eq(c, a, to_primitive(c, b));
	return false;
}

bool jv_strict_eq(const struct jval *a, const struct jval *b)
{
	if (is_num(a) && is_num(b))
		return a->u.num == b->u.num;
	if (a->type != b->type)
		return false;
	switch (a->type) {
	case JV_NULL:
	case JV_UNDEF:
		return true;
	case JV_BOOL:
		return a->u.b == b->u.b;
	case JV_STR:
		return a->u.s.n == b->u.s.n && memcmp(a->u.s.p, b->u.s.p, a->u.s.n) == 0;
	default:
		return a == b;
	}
}

/* ---- strings --------------------------------------------------------------------------------- */

static bool js_space(unsigned cp)
{
	return cp == 32 || (cp >= 9 && cp <= 13) || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
	       cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000 || cp == 0xfeff;
}

static unsigned decode(const unsigned char *s, size_t len)
{
	if (len == 1)
		return s[0];
	if (len == 2)
		return ((s[0] & 31u) << 6) | (s[1] & 63u);
	return ((s[0] & 15u) << 12) | ((s[1] & 63u) << 6) | (s[2] & 63u);
}

size_t jv_space_at(const char *p, size_t n)
{
	const unsigned char *s = (const unsigned char *)p;
	if (n == 0)
		return 0;
	size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : 0;
	if (len == 0 || len > n)
		return 0;
	for (size_t i = 1; i < len; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return js_space(decode(s, len)) ? len : 0;
}

size_t jv_space_before(const char *p, size_t n)
{
	for (size_t len = 1; len <= 3 && len <= n; len++) {
		const unsigned char *s = (const unsigned char *)p + n - len;
		if ((s[0] & 0xc0) == 0x80)
			continue; /* a continuation byte: the character starts further back */
		return jv_space_at((const char *)s, len) == len ? len : 0;
	}
	return 0;
}

struct jval *jv_trim(struct jctx *c, const struct jval *s, bool start, bool end)
{
	const char *p = s->u.s.p;
	size_t n = s->u.s.n, sp;
	while (start && n && (sp = jv_space_at(p, n)) > 0)
		p += sp, n -= sp;
	while (end && n && (sp = jv_space_before(p, n)) > 0)
		n -= sp;
	return jv_str(c, p, n);
}

struct jval *jv_case(struct jctx *c, const struct jval *s, bool upper)
{
	size_t n = 0;
	uint8_t *r = (upper ? u8_toupper : u8_tolower)((const uint8_t *)s->u.s.p, s->u.s.n, NULL, NULL, NULL, &n);
	if (!r)
		jfail(c, "invalid UTF-8 in a string");
	char *p = ja_strndup(&c->arena, (const char *)r, n);
	free(r);
	return jv_str(c, p, n);
}

size_t jv_utf16_len(const char *p, size_t n)
{
	size_t len = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)p[i];
		if ((ch & 0xc0) != 0x80)
			len += ch >= 0xf0 ? 2 : 1;
	}
	return len;
}
