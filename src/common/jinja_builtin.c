/* The builtins of the Jinja renderer (include/infergate/jinja.h), as
 * @huggingface/jinja 0.5.13 has them (src/runtime.ts): the globals
 * (namespace, raise_exception, range, strftime_now), the methods of strings
 * and objects, the filters and the tests. Strings are UTF-8 here and UTF-16
 * there: what counts characters (length, slices, capitalize) counts as
 * JavaScript does where it can (length: UTF-16 units; an index: a code
 * point, the same below U+10000). Not here: the evaluator (jinja_eval.c). */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/jinja.h"

/* ---- string methods ------------------------------------------------------------------ */

static bool has_prefix(const struct jval *s, const struct jval *p, bool suffix)
{
	if (p->u.s.n > s->u.s.n)
		return false;
	const char *at = suffix ? s->u.s.p + s->u.s.n - p->u.s.n : s->u.s.p;
	return memcmp(at, p->u.s.p, p->u.s.n) == 0;
}

const char *jv_find(const char *h, size_t hn, const char *nd, size_t nn)
{
	if (nn == 0)
		return h;
	if (nn > hn)
		return NULL;
	for (const char *p = h; p + nn <= h + hn; p++) {
		p = memchr(p, nd[0], (size_t)(h + hn - p));
		if (!p || p + nn > h + hn)
			return NULL;
		if (memcmp(p, nd, nn) == 0)
			return p;
	}
	return NULL;
}

size_t jv_cp_len(const char *p, size_t n)
{
	unsigned char ch = (unsigned char)p[0];
	size_t l = ch >= 0xf0 ? 4 : ch >= 0xe0 ? 3 : ch >= 0xc0 ? 2 : 1;
	return l <= n ? l : n;
}

static bool js_word(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* str.split as runtime.ts follows Python's (sep None: runs of white space). */
static struct jval *split(struct jctx *c, const struct jval *self, const struct jargs *a)
{
	struct jval *sep = a->n > 0 ? a->v[0] : &c->null, *maxv = a->n > 1 ? a->v[1] : NULL;
	if (sep->type != JV_STR && sep->type != JV_NULL)
		jfail(c, "sep argument must be a string or null");
	if (maxv && maxv->type != JV_INT)
		jfail(c, "maxsplit argument must be a number");
	double max = maxv ? maxv->u.num : -1;
	struct jval *out = jv_array(c, 4);
	const char *p = self->u.s.p;
	size_t n = self->u.s.n;
	if (sep->type == JV_NULL) {
		struct jval *t = jv_trim(c, self, true, false);
		p = t->u.s.p;
		n = t->u.s.n;
		size_t i = 0;
		while (i < n) {
			size_t sp;
			while (i < n && (sp = jv_space_at(p + i, n - i)) > 0)
				i += sp;
			if (i >= n)
				break;
			size_t start = i;
			while (i < n && jv_space_at(p + i, n - i) == 0)
				i += jv_cp_len(p + i, n - i);
			if (max >= 0 && (double)out->u.arr.n >= max) {
				jv_push(c, out, jv_str(c, p + start, n - start));
				break;
			}
			jv_push(c, out, jv_str(c, p + start, i - start));
		}
		return out;
	}
	if (sep->u.s.n == 0)
		jfail(c, "empty separator");
	for (;;) {
		if (max >= 0 && (double)out->u.arr.n >= max) {
			jv_push(c, out, jv_str(c, p, n));
			break;
		}
		const char *hit = jv_find(p, n, sep->u.s.p, sep->u.s.n);
		if (!hit) {
			jv_push(c, out, jv_str(c, p, n));
			break;
		}
		jv_push(c, out, jv_str(c, p, (size_t)(hit - p)));
		n -= (size_t)(hit - p) + sep->u.s.n;
		p = hit + sep->u.s.n;
		jv_count_iteration(c);
	}
	return out;
}

/* utils.ts replace(): count null or negative is all; "" matches between code points. */
static struct jval *replace(struct jctx *c, const struct jval *self, const struct jval *old, const struct jval *new,
                            const struct jval *count)
{
	double left = count->type == JV_NULL || count->u.num < 0 ? INFINITY : count->u.num;
	if (count->type != JV_NULL && count->u.num == 0)
		return (struct jval *)self;
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	const char *p = self->u.s.p;
	size_t n = self->u.s.n;
	if (old->u.s.n == 0) {
		for (size_t i = 0;; ) {
			if (left > 0) {
				jb_put(c, &b, new->u.s.p, new->u.s.n);
				left--;
			}
			if (i >= n)
				break;
			size_t l = jv_cp_len(p + i, n - i);
			jb_put(c, &b, p + i, l);
			i += l;
		}
		return jv_buf_str(c, &b);
	}
	while (left > 0) {
		const char *hit = jv_find(p, n, old->u.s.p, old->u.s.n);
		if (!hit)
			break;
		jb_put(c, &b, p, (size_t)(hit - p));
		jb_put(c, &b, new->u.s.p, new->u.s.n);
		n -= (size_t)(hit - p) + old->u.s.n;
		p = hit + old->u.s.n;
		left--;
	}
	jb_put(c, &b, p, n);
	return jv_buf_str(c, &b);
}

static struct jval *capitalize(struct jctx *c, const struct jval *s)
{
	if (s->u.s.n == 0)
		return (struct jval *)s;
	size_t l = jv_cp_len(s->u.s.p, s->u.s.n);
	if (l == 4) /* charAt(0) is half a surrogate pair: unchanged */
		return (struct jval *)s;
	struct jval *head = jv_case(c, jv_str(c, s->u.s.p, l), true);
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	jb_put(c, &b, head->u.s.p, head->u.s.n);
	jb_put(c, &b, s->u.s.p + l, s->u.s.n - l);
	return jv_buf_str(c, &b);
}

static struct jval *title(struct jctx *c, const struct jval *s)
{
	char *p = ja_strndup(&c->arena, s->u.s.p, s->u.s.n);
	for (size_t i = 0; i < s->u.s.n; i++)
		if (js_word(p[i]) && (i == 0 || !js_word(s->u.s.p[i - 1])) && p[i] >= 'a' && p[i] <= 'z')
			p[i] = (char)(p[i] - 32);
	return jv_str(c, p, s->u.s.n);
}

/* ---- functions ------------------------------------------------------------------------- */

static struct jval *namespace_fn(struct jctx *c, const struct jargs *a)
{
	struct jval *ns = jv_object(c, JV_NS, 4);
	if (a->n > 1)
		jfail(c, "namespace expected at most 1 argument, got %zu", a->n);
	if (a->n == 1) {
		struct jval *src = a->v[0];
		if (src->type == JV_OBJECT) {
			for (size_t i = 0; i < src->u.obj.n; i++)
				jv_set(c, ns, src->u.obj.k[i], src->u.obj.klen[i], src->u.obj.v[i]);
		} else if (src->type == JV_ARRAY) {
			for (size_t i = 0; i < src->u.arr.n; i++) {
				struct jval *pair = src->u.arr.v[i];
				if (pair->type != JV_ARRAY || pair->u.arr.n != 2 || pair->u.arr.v[0]->type != JV_STR)
					jfail(c, "namespace expected an object or an iterable of [key, value] pairs");
				jv_set(c, ns, pair->u.arr.v[0]->u.s.p, pair->u.arr.v[0]->u.s.n, pair->u.arr.v[1]);
			}
		} else {
			jfail(c, "'%s' object is not iterable", jv_typename(src));
		}
	}
	if (a->kw)
		for (size_t i = 0; i < a->kw->u.obj.n; i++)
			jv_set(c, ns, a->kw->u.obj.k[i], a->kw->u.obj.klen[i], a->kw->u.obj.v[i]);
	return ns;
}

static struct jval *range_fn(struct jctx *c, const struct jargs *a)
{
	for (size_t i = 0; i < a->n; i++)
		if (!jv_is_num(a->v[i]))
			jfail(c, "range() takes numbers");
	if (a->n == 0)
		jfail(c, "range() needs an argument");
	double start = 0, stop = a->v[0]->u.num, step = 1;
	if (a->n > 1) {
		start = a->v[0]->u.num;
		stop = a->v[1]->u.num;
	}
	if (a->n > 2)
		step = a->v[2]->u.num;
	if (step == 0)
		jfail(c, "range() step must not be zero");
	double count = step > 0 ? ceil((stop - start) / step) : ceil((start - stop) / -step);
	if (!(count <= IG_JINJA_MAX_RANGE))
		jfail(c, "range() of more than %ld items", IG_JINJA_MAX_RANGE);
	struct jval *out = jv_array(c, count > 0 ? (size_t)count : 0);
	for (double x = start; step > 0 ? x < stop : x > stop; x += step)
		jv_push(c, out, jv_num(c, x == trunc(x) ? JV_INT : JV_FLOAT, x));
	return out;
}

static struct jval *strftime_fn(struct jctx *c, const struct jargs *a)
{
	static const char *const mon[] = {"January", "February", "March", "April", "May", "June", "July",
	                                  "August", "September", "October", "November", "December"};
	if (a->n < 1 || a->v[0]->type != JV_STR)
		jfail(c, "strftime_now() takes a format string");
	time_t now = time(NULL);
	struct tm tm;
	localtime_r(&now, &tm);
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	const char *f = a->v[0]->u.s.p;
	size_t n = a->v[0]->u.s.n;
	char t[32];
	for (size_t i = 0; i < n; i++) {
		if (f[i] != '%' || i + 1 >= n || !strchr("YmdbBHM%", f[i + 1]) || f[i + 1] == 0) {
			jb_put(c, &b, f + i, 1);
			continue;
		}
		switch (f[++i]) {
		case 'Y': snprintf(t, sizeof(t), "%d", tm.tm_year + 1900); break;
		case 'm': snprintf(t, sizeof(t), "%02d", tm.tm_mon + 1); break;
		case 'd': snprintf(t, sizeof(t), "%02d", tm.tm_mday); break;
		case 'b': snprintf(t, sizeof(t), "%.3s", mon[tm.tm_mon]); break;
		case 'B': snprintf(t, sizeof(t), "%s", mon[tm.tm_mon]); break;
		case 'H': snprintf(t, sizeof(t), "%02d", tm.tm_hour); break;
		case 'M': snprintf(t, sizeof(t), "%02d", tm.tm_min); break;
		default: snprintf(t, sizeof(t), "%%"); break;
		}
		jb_puts(c, &b, t);
	}
	return jv_buf_str(c, &b);
}

struct jval *jv_items(struct jctx *c, const struct jval *o, int what /* 0 items, 1 keys, 2 values */)
{
	struct jval *out = jv_array(c, o->u.obj.n);
	for (size_t i = 0; i < o->u.obj.n; i++) {
		struct jval *k = jv_str(c, o->u.obj.k[i], o->u.obj.klen[i]);
		if (what == 1) {
			jv_push(c, out, k);
		} else if (what == 2) {
			jv_push(c, out, o->u.obj.v[i]);
		} else {
			struct jval *pair = jv_array(c, 2);
			jv_push(c, pair, k);
			jv_push(c, pair, o->u.obj.v[i]);
			jv_push(c, out, pair);
		}
	}
	return out;
}

struct jval *jv_call(struct jctx *c, const struct jval *fn, const struct jargs *a)
{
	struct jval *self = fn->u.fn.self;
	switch (fn->u.fn.fn) {
	case JF_NAMESPACE:
		return namespace_fn(c, a);
	case JF_RAISE: {
		/* a JavaScript function: new Error(String(first argument's value)) */
		struct jbuf b = {NULL, 0, 0, 4096};
		if (a->n > 0 && a->v[0]->type != JV_UNDEF)
			jv_concat_str(c, &b, a->v[0]);
		jfail(c, "%s", b.p ? b.p : "");
	}
	case JF_RANGE:
		return range_fn(c, a);
	case JF_STRFTIME:
		return strftime_fn(c, a);
	case JF_S_UPPER:
	case JF_S_LOWER:
		return jv_case(c, self, fn->u.fn.fn == JF_S_UPPER);
	case JF_S_STRIP: /* runtime.ts: trim(), whatever the argument */
		return jv_trim(c, self, true, true);
	case JF_S_LSTRIP:
		return jv_trim(c, self, true, false);
	case JF_S_RSTRIP:
		return jv_trim(c, self, false, true);
	case JF_S_TITLE:
		return title(c, self);
	case JF_S_CAPITALIZE:
		return capitalize(c, self);
	case JF_S_STARTSWITH:
	case JF_S_ENDSWITH: {
		bool suffix = fn->u.fn.fn == JF_S_ENDSWITH;
		if (a->n == 0)
			jfail(c, "%s() requires at least one argument", suffix ? "endswith" : "startswith");
		struct jval *p = a->v[0];
		if (p->type == JV_STR)
			return jv_bool(c, has_prefix(self, p, suffix));
		if (p->type == JV_ARRAY) {
			for (size_t i = 0; i < p->u.arr.n; i++) {
				if (p->u.arr.v[i]->type != JV_STR)
					jfail(c, "startswith() tuple elements must be strings");
				if (has_prefix(self, p->u.arr.v[i], suffix))
					return &c->t;
			}
			return &c->f;
		}
		jfail(c, "startswith() argument must be a string or tuple of strings");
	}
	case JF_S_SPLIT:
		return split(c, self, a);
	case JF_S_REPLACE: {
		if (a->n + (a->kw ? 1 : 0) < 2 || a->n < 2)
			jfail(c, "replace() requires at least two arguments");
		if (a->v[0]->type != JV_STR || a->v[1]->type != JV_STR)
			jfail(c, "replace() arguments must be strings");
		struct jval *count = a->n > 2 ? a->v[2] : a->kw ? jv_get(a->kw, "count", 5) : NULL;
		if (!count)
			count = &c->null;
		if (count->type != JV_INT && count->type != JV_NULL)
			jfail(c, "replace() count argument must be a number or null");
		return replace(c, self, a->v[0], a->v[1], count);
	}
	case JF_O_GET: {
		struct jval *k = a->n > 0 ? a->v[0] : &c->undef;
		if (k->type != JV_STR)
			jfail(c, "Object key must be a string: got %s", jv_typename(k));
		struct jval *v = jv_get(self, k->u.s.p, k->u.s.n);
		return v ? v : a->n > 1 ? a->v[1] : &c->null;
	}
	case JF_O_ITEMS:
		return jv_items(c, self, 0);
	case JF_O_KEYS:
		return jv_items(c, self, 1);
	case JF_O_VALUES:
		return jv_items(c, self, 2);
	}
	jfail(c, "unknown function");
}

/* ---- member access: the types' builtins ----------------------------------------------------- */

static const struct {
	const char *name;
	enum jfunc fn;
} STR_METHODS[] = {
	{"upper", JF_S_UPPER}, {"lower", JF_S_LOWER}, {"strip", JF_S_STRIP}, {"title", JF_S_TITLE},
	{"capitalize", JF_S_CAPITALIZE}, {"rstrip", JF_S_RSTRIP}, {"lstrip", JF_S_LSTRIP},
	{"startswith", JF_S_STARTSWITH}, {"endswith", JF_S_ENDSWITH}, {"split", JF_S_SPLIT},
	{"replace", JF_S_REPLACE},
}, OBJ_METHODS[] = {
	{"get", JF_O_GET}, {"items", JF_O_ITEMS}, {"keys", JF_O_KEYS}, {"values", JF_O_VALUES},
};

/* A type's builtins (runtime.ts `builtins`): methods, and length. */
struct jval *jv_builtin(struct jctx *c, struct jval *obj, const struct jval *prop)
{
	const char *k = prop->u.s.p;
	size_t n = prop->u.s.n;
	if (obj->type == JV_STR) {
		if (n == 6 && memcmp(k, "length", 6) == 0)
			return jv_num(c, JV_INT, (double)jv_utf16_len(obj->u.s.p, obj->u.s.n));
		for (size_t i = 0; i < sizeof(STR_METHODS) / sizeof(STR_METHODS[0]); i++)
			if (strlen(STR_METHODS[i].name) == n && memcmp(STR_METHODS[i].name, k, n) == 0)
				return jv_func(c, STR_METHODS[i].fn, obj);
	} else if (obj->type == JV_ARRAY) {
		if (n == 6 && memcmp(k, "length", 6) == 0)
			return jv_num(c, JV_INT, (double)obj->u.arr.n);
	} else if (obj->type == JV_OBJECT) {
		for (size_t i = 0; i < sizeof(OBJ_METHODS) / sizeof(OBJ_METHODS[0]); i++)
			if (strlen(OBJ_METHODS[i].name) == n && memcmp(OBJ_METHODS[i].name, k, n) == 0)
				return jv_func(c, OBJ_METHODS[i].fn, obj);
	}
	return &c->undef;
}

/* ---- filters and tests ------------------------------------------------------------------------ */

bool jv_test(struct jctx *c, const char *name, const struct jval *v)
{
	if (!strcmp(name, "boolean"))
		return v->type == JV_BOOL;
	if (!strcmp(name, "callable"))
		return v->type == JV_FUNC;
	if (!strcmp(name, "odd") || !strcmp(name, "even")) {
		if (v->type != JV_INT)
			jfail(c, "cannot %s on %s", name, jv_typename(v));
		return (fmod(v->u.num, 2) != 0) == (name[0] == 'o');
	}
	if (!strcmp(name, "false") || !strcmp(name, "true"))
		return v->type == JV_BOOL && v->u.b == (name[0] == 't');
	if (!strcmp(name, "none"))
		return v->type == JV_NULL;
	if (!strcmp(name, "string"))
		return v->type == JV_STR;
	if (!strcmp(name, "number"))
		return jv_is_num(v);
	if (!strcmp(name, "integer"))
		return v->type == JV_INT;
	if (!strcmp(name, "iterable"))
		return (v->type == JV_ARRAY && !v->tuple) || v->type == JV_STR;
	if (!strcmp(name, "mapping"))
		return v->type == JV_OBJECT;
	if (!strcmp(name, "sequence"))
		return v->type == JV_ARRAY || v->type == JV_OBJECT || v->type == JV_STR;
	if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
		if (v->type != JV_STR)
			return false;
		const struct jval *o = jv_case(c, v, name[0] == 'u');
		return o->u.s.n == v->u.s.n && memcmp(o->u.s.p, v->u.s.p, v->u.s.n) == 0;
	}
	if (!strcmp(name, "defined"))
		return v->type != JV_UNDEF;
	if (!strcmp(name, "undefined"))
		return v->type == JV_UNDEF;
	jfail(c, "Unknown test: %s", name);
}

static double parse_int(const struct jval *s)
{
	/* parseInt(s, 10): white space, a sign, the digits there are; NaN without */
	const char *p = s->u.s.p, *e = p + s->u.s.n;
	size_t sp;
	while (p < e && (sp = jv_space_at(p, (size_t)(e - p))) > 0)
		p += sp;
	double sign = 1, v = 0;
	if (p < e && (*p == '+' || *p == '-'))
		sign = *p++ == '-' ? -1 : 1;
	if (p >= e || *p < '0' || *p > '9')
		return NAN;
	for (; p < e && *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (*p - '0');
	return sign * v;
}

static double parse_float(struct jctx *c, const struct jval *s)
{
	/* parseFloat: the longest prefix that is a decimal literal (or Infinity) */
	struct jval *t = jv_trim(c, s, true, false);
	char buf[64];
	size_t n = t->u.s.n < sizeof(buf) - 1 ? t->u.s.n : sizeof(buf) - 1;
	memcpy(buf, t->u.s.p, n);
	buf[n] = '\0';
	const char *p = buf;
	if (*p == '+' || *p == '-')
		p++;
	if (strncmp(p, "Infinity", 8) == 0)
		return buf[0] == '-' ? -INFINITY : INFINITY;
	if (!((*p >= '0' && *p <= '9') || (*p == '.' && p[1] >= '0' && p[1] <= '9')))
		return NAN;
	for (char *q = buf; *q; q++) /* strtod would take hex and "inf": cut at what a decimal cannot hold */
		if (!strchr("0123456789.eE+-", *q)) {
			*q = '\0';
			break;
		}
	return strtod(buf, NULL);
}

static struct jval *join(struct jctx *c, const struct jval *arr, const struct jval *sep)
{
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	for (size_t i = 0; i < arr->u.arr.n; i++) {
		if (i && sep)
			jb_put(c, &b, sep->u.s.p, sep->u.s.n);
		const struct jval *x = arr->u.arr.v[i];
		if (x->type != JV_NULL && x->type != JV_UNDEF) /* Array#join: null and undefined as "" */
			jv_concat_str(c, &b, x);
	}
	return jv_buf_str(c, &b);
}

static struct jval *indent(struct jctx *c, const struct jval *s, const struct jval *width, bool first, bool blank)
{
	struct jbuf ind = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT}, b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	if (width->type == JV_STR)
		jb_put(c, &ind, width->u.s.p, width->u.s.n);
	else
		for (double i = 0; i < width->u.num && i < 1000; i++)
			jb_put(c, &ind, " ", 1);
	const char *p = s->u.s.p, *e = p + s->u.s.n;
	for (size_t line = 0;; line++) {
		const char *nl = memchr(p, '\n', (size_t)(e - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(e - p);
		if (!((!first && line == 0) || (!blank && len == 0)))
			jb_put(c, &b, ind.p, ind.n);
		jb_put(c, &b, p, len);
		if (!nl)
			break;
		jb_put(c, &b, "\n", 1);
		p = nl + 1;
	}
	return jv_buf_str(c, &b);
}

static struct jval *tojson(struct jctx *c, const struct jval *v, const struct jargs *a)
{
	struct tojson_opts o = {0, false, NULL, NULL, true};
	struct jval *ind = a ? jv_arg(a, (size_t)-1, "indent") : NULL, *asc = a ? jv_arg(a, (size_t)-1, "ensure_ascii") : NULL;
	struct jval *sk = a ? jv_arg(a, (size_t)-1, "sort_keys") : NULL, *seps = a ? jv_arg(a, (size_t)-1, "separators") : NULL;
	if (ind && ind->type != JV_NULL) {
		if (ind->type != JV_INT)
			jfail(c, "If set, indent must be a number");
		o.indent = ind->u.num > 0 && ind->u.num < 100 ? (int)ind->u.num : 0;
	}
	if (asc) {
		if (asc->type != JV_BOOL)
			jfail(c, "If set, ensure_ascii must be a boolean");
		o.ensure_ascii = asc->u.b;
	}
	if (sk && (sk->type != JV_BOOL || sk->u.b))
		jfail(c, "tojson's sort_keys is not supported");
	if (seps && seps->type != JV_NULL) {
		if (seps->type != JV_ARRAY || seps->u.arr.n != 2 || seps->u.arr.v[0]->type != JV_STR ||
		    seps->u.arr.v[1]->type != JV_STR)
			jfail(c, "separators must be a tuple of two strings");
		o.item_sep = ja_strndup(&c->arena, seps->u.arr.v[0]->u.s.p, seps->u.arr.v[0]->u.s.n);
		o.key_sep = ja_strndup(&c->arena, seps->u.arr.v[1]->u.s.p, seps->u.arr.v[1]->u.s.n);
	}
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	jv_tojson(c, &b, v, &o, 0);
	return jv_buf_str(c, &b);
}

/* selectattr / rejectattr with string-literal arguments (the reference refuses others). */
static struct jval *select_attr(struct jctx *c, const struct jnode *f, struct jval *arr, struct jscope *s)
{
	bool sel = f->s[0] == 's';
	for (size_t i = 0; i < arr->u.arr.n; i++)
		if (arr->u.arr.v[i]->type != JV_OBJECT && arr->u.arr.v[i]->type != JV_NS)
			jfail(c, "`%s` can only be applied to array of objects", f->s);
	for (size_t i = 0; i < f->nbody; i++)
		if (f->body[i]->kind != JN_STR)
			jfail(c, "arguments of `%s` must be strings", f->s);
	if (f->nbody == 0)
		jfail(c, "`%s` needs an attribute", f->s);
	struct jval *attr = jv_eval(c, f->body[0], s);
	const char *tname = f->nbody > 1 ? f->body[1]->s : NULL;
	struct jval *out = jv_array(c, 4);
	for (size_t i = 0; i < arr->u.arr.n; i++) {
		jv_count_iteration(c);
		struct jval *a = jv_get(arr->u.arr.v[i], attr->u.s.p, attr->u.s.n);
		bool r = a ? (tname ? jv_test(c, tname, a) : jv_truthy(a)) : false;
		if (r == sel)
			jv_push(c, out, arr->u.arr.v[i]);
	}
	return out;
}

/* getAttributeValue: a dotted path through objects and array indices. */
static struct jval *attr_path(struct jctx *c, struct jval *v, const struct jval *path)
{
	const char *p = path->u.s.p, *e = p + path->u.s.n;
	for (;;) {
		const char *dot = memchr(p, '.', (size_t)(e - p));
		size_t n = dot ? (size_t)(dot - p) : (size_t)(e - p);
		if (v->type == JV_OBJECT || v->type == JV_NS) {
			v = jv_get(v, p, n);
			if (!v)
				v = &c->undef;
		} else if (v->type == JV_ARRAY) {
			char tmp[32];
			snprintf(tmp, sizeof(tmp), "%.*s", (int)(n < 31 ? n : 31), p);
			struct jval probe = {.type = JV_STR, .u.s = {tmp, strlen(tmp)}};
			double idx = parse_int(&probe);
			if (isnan(idx) || idx < 0 || idx >= (double)v->u.arr.n)
				return &c->undef;
			v = v->u.arr.v[(size_t)idx];
		} else {
			return &c->undef;
		}
		if (!dot)
			return v;
		p = dot + 1;
	}
}

struct jval *jv_filter(struct jctx *c, const struct jnode *f, struct jscope *s)
{
	struct jval *v = jv_eval(c, f->a, s);
	const char *name = f->s;
	if (!f->flag) {
		if (!strcmp(name, "safe"))
			return v;
		if (!strcmp(name, "tojson"))
			return tojson(c, v, NULL);
		if (v->type == JV_ARRAY) {
			if (!strcmp(name, "list"))
				return v;
			if (!strcmp(name, "first") || !strcmp(name, "last")) {
				if (v->u.arr.n == 0)
					jfail(c, "%s of an empty list", name);
				return v->u.arr.v[name[0] == 'f' ? 0 : v->u.arr.n - 1];
			}
			if (!strcmp(name, "length"))
				return jv_num(c, JV_INT, (double)v->u.arr.n);
			if (!strcmp(name, "reverse")) {
				struct jval *out = jv_array(c, v->u.arr.n);
				for (size_t i = v->u.arr.n; i > 0; i--)
					jv_push(c, out, v->u.arr.v[i - 1]);
				return out;
			}
			if (!strcmp(name, "join"))
				return join(c, v, NULL);
			if (!strcmp(name, "string")) {
				struct tojson_opts o = {0, false, NULL, NULL, false};
				struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
				jv_tojson(c, &b, v, &o, 0);
				return jv_buf_str(c, &b);
			}
			jfail(c, "Unknown ArrayValue filter: %s", name);
		}
		if (v->type == JV_STR) {
			if (!strcmp(name, "length"))
				return jv_num(c, JV_INT, (double)jv_utf16_len(v->u.s.p, v->u.s.n));
			if (!strcmp(name, "upper") || !strcmp(name, "lower"))
				return jv_case(c, v, name[0] == 'u');
			if (!strcmp(name, "capitalize"))
				return capitalize(c, v);
			if (!strcmp(name, "trim"))
				return jv_trim(c, v, true, true);
			if (!strcmp(name, "indent"))
				return indent(c, v, jv_num(c, JV_INT, 4), false, false);
			if (!strcmp(name, "join") || !strcmp(name, "string"))
				return v;
			if (!strcmp(name, "int")) {
				double x = parse_int(v);
				return jv_num(c, JV_INT, isnan(x) ? 0 : x);
			}
			if (!strcmp(name, "float")) {
				double x = parse_float(c, v);
				return jv_num(c, JV_FLOAT, isnan(x) ? 0 : x);
			}
			jfail(c, "Unknown StringValue filter: %s", name);
		}
		if (jv_is_num(v)) {
			if (!strcmp(name, "abs"))
				return jv_num(c, v->type, fabs(v->u.num));
			if (!strcmp(name, "int"))
				return jv_num(c, JV_INT, trunc(v->u.num) + 0);
			if (!strcmp(name, "float"))
				return jv_num(c, JV_FLOAT, v->u.num);
			if (!strcmp(name, "string")) {
				struct jbuf b = {NULL, 0, 0, 64};
				jv_print(c, &b, v);
				return jv_buf_str(c, &b);
			}
			jfail(c, "Unknown NumericValue filter: %s", name);
		}
		if (v->type == JV_OBJECT) {
			if (!strcmp(name, "items"))
				return jv_items(c, v, 0);
			if (!strcmp(name, "length"))
				return jv_num(c, JV_INT, (double)v->u.obj.n);
			if (!strcmp(name, "keys"))
				return jv_items(c, v, 1);
			if (!strcmp(name, "values"))
				return jv_items(c, v, 2);
			jfail(c, "Unknown ObjectValue filter: %s", name);
		}
		if (v->type == JV_BOOL) {
			if (!strcmp(name, "bool"))
				return v;
			if (!strcmp(name, "int") || !strcmp(name, "float"))
				return jv_num(c, name[0] == 'i' ? JV_INT : JV_FLOAT, v->u.b);
			if (!strcmp(name, "string"))
				return jv_cstr(c, v->u.b ? "true" : "false");
			jfail(c, "Unknown BooleanValue filter: %s", name);
		}
		jfail(c, "Cannot apply filter \"%s\" to type: %s", name, jv_typename(v));
	}

	if (!strcmp(name, "tojson")) {
		struct jargs a = jv_eval_args(c, f, s);
		return tojson(c, v, &a);
	}
	if (!strcmp(name, "join")) {
		if (v->type != JV_ARRAY && v->type != JV_STR)
			jfail(c, "Cannot apply filter \"join\" to type: %s", jv_typename(v));
		struct jargs a = jv_eval_args(c, f, s);
		struct jval *sep = jv_arg(&a, 0, "separator");
		if (!sep)
			sep = jv_cstr(c, "");
		if (sep->type != JV_STR)
			jfail(c, "separator must be a string");
		if (v->type == JV_ARRAY)
			return join(c, v, sep);
		struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
		for (size_t i = 0; i < v->u.s.n;) {
			size_t l = jv_cp_len(v->u.s.p + i, v->u.s.n - i);
			if (i)
				jb_put(c, &b, sep->u.s.p, sep->u.s.n);
			jb_put(c, &b, v->u.s.p + i, l);
			i += l;
		}
		return jv_buf_str(c, &b);
	}
	if (!strcmp(name, "int") || !strcmp(name, "float")) {
		bool isint = name[0] == 'i';
		struct jargs a = jv_eval_args(c, f, s);
		struct jval *def = jv_arg(&a, 0, "default");
		if (!def)
			def = jv_num(c, isint ? JV_INT : JV_FLOAT, 0);
		if (v->type == JV_STR) {
			double x = isint ? parse_int(v) : parse_float(c, v);
			return isnan(x) ? def : jv_num(c, isint ? JV_INT : JV_FLOAT, x);
		}
		if (jv_is_num(v))
			return jv_num(c, isint ? JV_INT : JV_FLOAT, isint ? trunc(v->u.num) + 0 : v->u.num);
		if (v->type == JV_BOOL)
			return jv_num(c, isint ? JV_INT : JV_FLOAT, v->u.b);
		jfail(c, "Cannot apply filter \"%s\" to type: %s", name, jv_typename(v));
	}
	if (!strcmp(name, "default")) {
		struct jargs a = jv_eval_args(c, f, s);
		struct jval *def = a.n > 0 ? a.v[0] : jv_cstr(c, "");
		struct jval *boolean = jv_arg(&a, 1, "boolean");
		if (boolean && boolean->type != JV_BOOL)
			jfail(c, "`default` filter flag must be a boolean");
		if (v->type == JV_UNDEF || (boolean && boolean->u.b && !jv_truthy(v)))
			return def;
		return v;
	}
	if (v->type == JV_ARRAY) {
		if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
			return select_attr(c, f, v, s);
		if (!strcmp(name, "map")) {
			struct jargs a = jv_eval_args(c, f, s);
			struct jval *attr = a.kw ? jv_get(a.kw, "attribute", 9) : NULL;
			if (!attr)
				jfail(c, "`map` expressions without `attribute` set are not currently supported.");
			if (attr->type != JV_STR)
				jfail(c, "attribute must be a string");
			struct jval *def = jv_get(a.kw, "default", 7);
			struct jval *out = jv_array(c, v->u.arr.n);
			for (size_t i = 0; i < v->u.arr.n; i++) {
				struct jval *it = v->u.arr.v[i];
				if (it->type != JV_OBJECT && it->type != JV_NS)
					jfail(c, "items in map must be an object");
				struct jval *x = attr_path(c, it, attr);
				jv_push(c, out, x->type == JV_UNDEF && def ? def : x);
			}
			return out;
		}
		jfail(c, "Unknown ArrayValue filter: %s", name);
	}
	if (v->type == JV_STR) {
		struct jargs a = jv_eval_args(c, f, s);
		if (!strcmp(name, "indent")) {
			struct jval *w = jv_arg(&a, 0, "width"), *first = jv_arg(&a, 1, "first"), *blank = jv_arg(&a, 2, "blank");
			if (!w)
				w = jv_num(c, JV_INT, 4);
			if (w->type != JV_INT && w->type != JV_STR)
				jfail(c, "width must be an integer or a string");
			return indent(c, v, w, first && jv_truthy(first), blank && jv_truthy(blank));
		}
		if (!strcmp(name, "replace")) {
			struct jval fn = {.type = JV_FUNC, .u.fn = {JF_S_REPLACE, v}};
			return jv_call(c, &fn, &a);
		}
		jfail(c, "Unknown StringValue filter: %s", name);
	}
	if (v->type == JV_OBJECT) {
		(void)jv_eval_args(c, f, s); /* evaluated as the reference evaluates them, and unused */
		if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values"))
			return jv_items(c, v, name[0] == 'i' ? 0 : name[0] == 'k' ? 1 : 2);
		jfail(c, "Unknown ObjectValue filter: %s", name);
	}
	jfail(c, "Cannot apply filter \"%s\" to type: %s", name, jv_typename(v));
}

