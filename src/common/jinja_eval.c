/* The evaluator of the Jinja renderer (include/infergate/jinja.h): walks the
 * AST jinja_parse.c made, with @huggingface/jinja 0.5.13's semantics
 * (src/runtime.ts Interpreter), quirks included, since the gateway must
 * produce the bytes transformers.js produces: a for loop is one scope for all
 * its iterations (a `set` inside it outlives the iteration, not the loop);
 * strip/lstrip/rstrip ignore their argument and trim JavaScript's white space;
 * null in `+` or `in` is an error; `==` is JavaScript's; {{ true }} prints
 * "true". A render's values live in its arena; an error longjmps to
 * ig_jinja_render, which frees the arena. Not here: the values' printing and
 * equality (jinja_value.c), parsing (jinja_parse.c). */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/jinja.h"

#define MAX_EVAL_DEPTH 1000

struct scope {
	struct scope *parent;
	struct jval *vars; /* a JV_OBJECT */
};

enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

static struct jval *eval(struct jctx *c, const struct jnode *n, struct scope *s);
static enum flow render(struct jctx *c, struct jnode *const *body, size_t n, struct scope *s, struct jbuf *out);

static struct jval *lookup(struct scope *s, const char *name, size_t n, struct jctx *c)
{
	for (; s; s = s->parent) {
		struct jval *v = jv_get(s->vars, name, n);
		if (v)
			return v;
	}
	return &c->undef;
}

static struct scope *new_scope(struct jctx *c, struct scope *parent)
{
	struct scope *s = ja_alloc(&c->arena, sizeof(*s));
	s->parent = parent;
	s->vars = jv_object(c, JV_OBJECT, 0);
	return s;
}

static struct jval *cstr(struct jctx *c, const char *s)
{
	return jv_str(c, s, strlen(s));
}

static struct jval *func(struct jctx *c, enum jfunc fn, struct jval *self)
{
	struct jval *v = jv_num(c, JV_FUNC, 0);
	v->u.fn.fn = fn;
	v->u.fn.self = self;
	return v;
}

static struct jval *buf_str(struct jctx *c, struct jbuf *b)
{
	return jv_str(c, b->p ? b->p : "", b->n);
}

static bool is_num(const struct jval *v)
{
	return v->type == JV_INT || v->type == JV_FLOAT;
}

static void count_iteration(struct jctx *c)
{
	if (++c->iterations > IG_JINJA_MAX_ITERATIONS)
		jfail(c, "more than %ld loop iterations", IG_JINJA_MAX_ITERATIONS);
}

/* ---- calls: positional arguments, then one kwargs object if any -------------------- */

struct args {
	struct jval **v;
	size_t n;
	struct jval *kw; /* NULL when the call has none */
};

static struct args eval_args(struct jctx *c, const struct jnode *call, struct scope *s)
{
	struct args a = {ja_alloc(&c->arena, (call->nbody + 1) * sizeof(struct jval *)), 0, NULL};
	for (size_t i = 0; i < call->nbody; i++)
		if (call->body[i]->kind != JN_KWARG)
			a.v[a.n++] = eval(c, call->body[i], s);
	for (size_t i = 0; i < call->nbody; i++) {
		const struct jnode *k = call->body[i];
		if (k->kind != JN_KWARG)
			continue;
		if (!a.kw) {
			a.kw = jv_object(c, JV_OBJECT, 2);
			a.kw->kwargs = true;
		}
		if (jv_get(a.kw, k->s, k->slen))
			jfail(c, "got multiple values for keyword argument '%s'", k->s);
		jv_set(c, a.kw, k->s, k->slen, eval(c, k->a, s));
	}
	return a;
}

/* The argument at i, else the keyword, else NULL. */
static struct jval *arg(const struct args *a, size_t i, const char *kw)
{
	if (i < a->n)
		return a->v[i];
	if (a->kw && kw)
		return jv_get(a->kw, kw, strlen(kw));
	return NULL;
}

/* ---- string methods ------------------------------------------------------------------ */

static bool has_prefix(const struct jval *s, const struct jval *p, bool suffix)
{
	if (p->u.s.n > s->u.s.n)
		return false;
	const char *at = suffix ? s->u.s.p + s->u.s.n - p->u.s.n : s->u.s.p;
	return memcmp(at, p->u.s.p, p->u.s.n) == 0;
}

static const char *find(const char *h, size_t hn, const char *nd, size_t nn)
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

static size_t cp_len(const char *p, size_t n)
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
static struct jval *split(struct jctx *c, const struct jval *self, const struct args *a)
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
				i += cp_len(p + i, n - i);
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
		const char *hit = find(p, n, sep->u.s.p, sep->u.s.n);
		if (!hit) {
			jv_push(c, out, jv_str(c, p, n));
			break;
		}
		jv_push(c, out, jv_str(c, p, (size_t)(hit - p)));
		n -= (size_t)(hit - p) + sep->u.s.n;
		p = hit + sep->u.s.n;
		count_iteration(c);
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
			size_t l = cp_len(p + i, n - i);
			jb_put(c, &b, p + i, l);
			i += l;
		}
		return buf_str(c, &b);
	}
	while (left > 0) {
		const char *hit = find(p, n, old->u.s.p, old->u.s.n);
		if (!hit)
			break;
		jb_put(c, &b, p, (size_t)(hit - p));
		jb_put(c, &b, new->u.s.p, new->u.s.n);
		n -= (size_t)(hit - p) + old->u.s.n;
		p = hit + old->u.s.n;
		left--;
	}
	jb_put(c, &b, p, n);
	return buf_str(c, &b);
}

static struct jval *capitalize(struct jctx *c, const struct jval *s)
{
	if (s->u.s.n == 0)
		return (struct jval *)s;
	size_t l = cp_len(s->u.s.p, s->u.s.n);
	if (l == 4) /* charAt(0) is half a surrogate pair: unchanged */
		return (struct jval *)s;
	struct jval *head = jv_case(c, jv_str(c, s->u.s.p, l), true);
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	jb_put(c, &b, head->u.s.p, head->u.s.n);
	jb_put(c, &b, s->u.s.p + l, s->u.s.n - l);
	return buf_str(c, &b);
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

static struct jval *namespace_fn(struct jctx *c, const struct args *a)
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

static struct jval *range_fn(struct jctx *c, const struct args *a)
{
	for (size_t i = 0; i < a->n; i++)
		if (!is_num(a->v[i]))
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

static struct jval *strftime_fn(struct jctx *c, const struct args *a)
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
	return buf_str(c, &b);
}

static struct jval *items(struct jctx *c, const struct jval *o, int what /* 0 items, 1 keys, 2 values */)
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

static struct jval *call_fn(struct jctx *c, const struct jval *fn, const struct args *a)
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
		return items(c, self, 0);
	case JF_O_KEYS:
		return items(c, self, 1);
	case JF_O_VALUES:
		return items(c, self, 2);
	}
	jfail(c, "unknown function");
}

/* ---- member access ------------------------------------------------------------------------ */

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
static struct jval *builtin(struct jctx *c, struct jval *obj, const struct jval *prop)
{
	const char *k = prop->u.s.p;
	size_t n = prop->u.s.n;
	if (obj->type == JV_STR) {
		if (n == 6 && memcmp(k, "length", 6) == 0)
			return jv_num(c, JV_INT, (double)jv_utf16_len(obj->u.s.p, obj->u.s.n));
		for (size_t i = 0; i < sizeof(STR_METHODS) / sizeof(STR_METHODS[0]); i++)
			if (strlen(STR_METHODS[i].name) == n && memcmp(STR_METHODS[i].name, k, n) == 0)
				return func(c, STR_METHODS[i].fn, obj);
	} else if (obj->type == JV_ARRAY) {
		if (n == 6 && memcmp(k, "length", 6) == 0)
			return jv_num(c, JV_INT, (double)obj->u.arr.n);
	} else if (obj->type == JV_OBJECT) {
		for (size_t i = 0; i < sizeof(OBJ_METHODS) / sizeof(OBJ_METHODS[0]); i++)
			if (strlen(OBJ_METHODS[i].name) == n && memcmp(OBJ_METHODS[i].name, k, n) == 0)
				return func(c, OBJ_METHODS[i].fn, obj);
	}
	return &c->undef;
}

/* Code point i of a string (JavaScript counts UTF-16 units: they differ past the BMP). */
static struct jval *char_at(struct jctx *c, const struct jval *s, double idx)
{
	size_t count = 0;
	for (size_t i = 0; i < s->u.s.n; i += cp_len(s->u.s.p + i, s->u.s.n - i))
		count++;
	double i = trunc(idx);
	if (i < 0)
		i += (double)count;
	if (i < 0 || i >= (double)count)
		return &c->undef;
	size_t at = 0, k = 0;
	while (k < (size_t)i) {
		at += cp_len(s->u.s.p + at, s->u.s.n - at);
		k++;
	}
	return jv_str(c, s->u.s.p + at, cp_len(s->u.s.p + at, s->u.s.n - at));
}

static struct jval *slice(struct jctx *c, struct jval *obj, const struct jnode *sl, struct scope *s)
{
	if (obj->type != JV_ARRAY && obj->type != JV_STR)
		jfail(c, "Slice object must be an array or string");
	struct jval *v[3] = {sl->a ? eval(c, sl->a, s) : &c->undef, sl->b ? eval(c, sl->b, s) : &c->undef,
	                     sl->c ? eval(c, sl->c, s) : &c->undef};
	for (int i = 0; i < 3; i++)
		if (v[i]->type != JV_INT && v[i]->type != JV_UNDEF)
			jfail(c, "Slice %s must be numeric or undefined", i == 0 ? "start" : i == 1 ? "stop" : "step");
	/* the items: an array's, or a string's code points */
	size_t len;
	const char **cps = NULL;
	size_t *cpl = NULL;
	if (obj->type == JV_ARRAY) {
		len = obj->u.arr.n;
	} else {
		len = 0;
		cps = ja_alloc(&c->arena, (obj->u.s.n + 1) * sizeof(*cps));
		cpl = ja_alloc(&c->arena, (obj->u.s.n + 1) * sizeof(*cpl));
		for (size_t i = 0; i < obj->u.s.n; len++) {
			cps[len] = obj->u.s.p + i;
			cpl[len] = cp_len(obj->u.s.p + i, obj->u.s.n - i);
			i += cpl[len];
		}
	}
	double L = (double)len, step = v[2]->type == JV_UNDEF ? 1 : v[2]->u.num, start, stop;
	if (step >= 0) {
		start = v[0]->type == JV_UNDEF ? 0 : v[0]->u.num;
		stop = v[1]->type == JV_UNDEF ? L : v[1]->u.num;
		start = start < 0 ? fmax(L + start, 0) : fmin(start, L);
		stop = stop < 0 ? fmax(L + stop, 0) : fmin(stop, L);
	} else {
		start = v[0]->type == JV_UNDEF ? L - 1 : v[0]->u.num;
		stop = v[1]->type == JV_UNDEF ? -1 : v[1]->u.num;
		start = start < 0 ? fmax(L + start, -1) : fmin(start, L - 1);
		stop = stop < -1 ? fmax(L + stop, -1) : fmin(stop, L - 1);
	}
	if (step == 0)
		jfail(c, "slice step cannot be zero");
	double dir = step > 0 ? 1 : -1;
	struct jval *arr = obj->type == JV_ARRAY ? jv_array(c, 4) : NULL;
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	for (double i = start; dir * i < dir * stop; i += step) {
		count_iteration(c);
		if (arr)
			jv_push(c, arr, obj->u.arr.v[(size_t)i]);
		else
			jb_put(c, &b, cps[(size_t)i], cpl[(size_t)i]);
	}
	return arr ? arr : buf_str(c, &b);
}

static struct jval *member(struct jctx *c, const struct jnode *n, struct scope *s)
{
	struct jval *obj = eval(c, n->a, s), *prop, *v = NULL;
	if (n->flag) {
		if (n->b->kind == JN_SLICE)
			return slice(c, obj, n->b, s);
		prop = eval(c, n->b, s);
	} else if (n->b->kind == JN_INT) {
		prop = jv_num(c, JV_INT, n->b->num);
	} else {
		prop = jv_str(c, n->b->s, n->b->slen);
	}
	if (obj->type == JV_OBJECT || obj->type == JV_NS) {
		if (prop->type != JV_STR)
			jfail(c, "Cannot access property with non-string: got %s", jv_typename(prop));
		v = jv_get(obj, prop->u.s.p, prop->u.s.n);
		if (!v && obj->type == JV_OBJECT)
			v = builtin(c, obj, prop);
	} else if (obj->type == JV_ARRAY || obj->type == JV_STR) {
		if (prop->type == JV_INT) {
			if (obj->type == JV_STR) {
				v = char_at(c, obj, prop->u.num);
			} else {
				double i = prop->u.num < 0 ? prop->u.num + (double)obj->u.arr.n : prop->u.num;
				v = i >= 0 && i < (double)obj->u.arr.n ? obj->u.arr.v[(size_t)i] : NULL;
			}
		} else if (prop->type == JV_STR) {
			v = builtin(c, obj, prop);
		} else {
			jfail(c, "Cannot access property with non-string/non-number: got %s", jv_typename(prop));
		}
	} else {
		if (prop->type != JV_STR)
			jfail(c, "Cannot access property with non-string: got %s", jv_typename(prop));
		v = &c->undef; /* numbers, booleans, null, undefined, functions: no builtins */
	}
	return v ? v : &c->undef;
}

/* ---- binary operators ------------------------------------------------------------------------ */

static struct jval *concat(struct jctx *c, const struct jval *l, const struct jval *r)
{
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	if (l->type != JV_UNDEF)
		jv_concat_str(c, &b, l);
	if (r->type != JV_UNDEF)
		jv_concat_str(c, &b, r);
	return buf_str(c, &b);
}

static const char *OPNAMES[] = {"", "and", "or", "not", "==", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/",
                                "//", "%", "**", "~", "in", "not in"};

static struct jval *binary(struct jctx *c, const struct jnode *n, struct scope *s)
{
	struct jval *l = eval(c, n->a, s);
	if (n->op == JOP_AND)
		return jv_truthy(l) ? eval(c, n->b, s) : l;
	if (n->op == JOP_OR)
		return jv_truthy(l) ? l : eval(c, n->b, s);
	struct jval *r = eval(c, n->b, s);
	enum jop op = n->op;
	if (op == JOP_EQ || op == JOP_NE)
		return jv_bool(c, jv_loose_eq(c, l, r) == (op == JOP_EQ));
	if (is_num(l) && is_num(r) && op != JOP_CONCAT && op != JOP_POW) {
		double a = l->u.num, b = r->u.num;
		enum jv_type t = l->type == JV_FLOAT || r->type == JV_FLOAT ? JV_FLOAT : JV_INT;
		switch (op) {
		case JOP_ADD: return jv_num(c, t, a + b);
		case JOP_SUB: return jv_num(c, t, a - b);
		case JOP_MUL: return jv_num(c, t, a * b);
		case JOP_DIV: return jv_num(c, JV_FLOAT, a / b);
		case JOP_FLOORDIV: return jv_num(c, t, floor(a / b));
		case JOP_MOD: return jv_num(c, t, fmod(a, b));
		case JOP_LT: return jv_bool(c, a < b);
		case JOP_GT: return jv_bool(c, a > b);
		case JOP_GE: return jv_bool(c, a >= b);
		case JOP_LE: return jv_bool(c, a <= b);
		default: break;
		}
	} else if (l->type == JV_UNDEF || r->type == JV_UNDEF) {
		if (r->type == JV_UNDEF && (op == JOP_IN || op == JOP_NOTIN))
			return jv_bool(c, op == JOP_NOTIN);
		if (op == JOP_CONCAT && l->type != JV_NULL && r->type != JV_NULL)
			return concat(c, l, r);
		jfail(c, "Cannot perform operation %s on undefined values", OPNAMES[op]);
	} else if (l->type == JV_NULL || r->type == JV_NULL) {
		jfail(c, "Cannot perform operation on null values");
	} else if (op == JOP_CONCAT) {
		return concat(c, l, r);
	} else if (op == JOP_POW && (is_num(l) || l->type == JV_BOOL) && (is_num(r) || r->type == JV_BOOL)) {
		double a = l->type == JV_BOOL ? l->u.b : l->u.num, b = r->type == JV_BOOL ? r->u.b : r->u.num;
		if (a == 0 && b < 0)
			jfail(c, "0.0 cannot be raised to a negative power");
		double x = pow(a, b);
		if (!isfinite(x))
			jfail(c, "Exponentiation result is not a finite real number");
		return jv_num(c, l->type == JV_FLOAT || r->type == JV_FLOAT || b < 0 ? JV_FLOAT : JV_INT, x);
	} else if (l->type == JV_ARRAY && r->type == JV_ARRAY) {
		if (op == JOP_ADD) {
			struct jval *out = jv_array(c, l->u.arr.n + r->u.arr.n);
			for (size_t i = 0; i < l->u.arr.n; i++)
				jv_push(c, out, l->u.arr.v[i]);
			for (size_t i = 0; i < r->u.arr.n; i++)
				jv_push(c, out, r->u.arr.v[i]);
			return out;
		}
	} else if (r->type == JV_ARRAY && (op == JOP_IN || op == JOP_NOTIN)) {
		bool found = false;
		for (size_t i = 0; i < r->u.arr.n && !found; i++)
			found = jv_strict_eq(r->u.arr.v[i], l);
		return jv_bool(c, found == (op == JOP_IN));
	}
	if ((l->type == JV_STR || r->type == JV_STR) && op == JOP_ADD)
		return concat(c, l, r);
	if (l->type == JV_STR && r->type == JV_STR && (op == JOP_IN || op == JOP_NOTIN))
		return jv_bool(c, (find(r->u.s.p, r->u.s.n, l->u.s.p, l->u.s.n) != NULL) == (op == JOP_IN));
	if (l->type == JV_STR && r->type == JV_OBJECT && (op == JOP_IN || op == JOP_NOTIN))
		return jv_bool(c, (jv_get(r, l->u.s.p, l->u.s.n) != NULL) == (op == JOP_IN));
	jfail(c, "Unknown operator \"%s\" between %s and %s", OPNAMES[op], jv_typename(l), jv_typename(r));
}

/* ---- filters and tests ------------------------------------------------------------------------ */

static bool test(struct jctx *c, const char *name, const struct jval *v)
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
		return is_num(v);
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
	struct jctx *none = NULL;
	(void)none;
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
	return buf_str(c, &b);
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
	return buf_str(c, &b);
}

static struct jval *tojson(struct jctx *c, const struct jval *v, const struct args *a)
{
	struct tojson_opts o = {0, false, NULL, NULL, true};
	struct jval *ind = a ? arg(a, (size_t)-1, "indent") : NULL, *asc = a ? arg(a, (size_t)-1, "ensure_ascii") : NULL;
	struct jval *sk = a ? arg(a, (size_t)-1, "sort_keys") : NULL, *seps = a ? arg(a, (size_t)-1, "separators") : NULL;
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
	return buf_str(c, &b);
}

/* selectattr / rejectattr with string-literal arguments (the reference refuses others). */
static struct jval *select_attr(struct jctx *c, const struct jnode *f, struct jval *arr, struct scope *s)
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
	struct jval *attr = eval(c, f->body[0], s);
	const char *tname = f->nbody > 1 ? f->body[1]->s : NULL;
	struct jval *out = jv_array(c, 4);
	for (size_t i = 0; i < arr->u.arr.n; i++) {
		count_iteration(c);
		struct jval *a = jv_get(arr->u.arr.v[i], attr->u.s.p, attr->u.s.n);
		bool r = a ? (tname ? test(c, tname, a) : jv_truthy(a)) : false;
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

static struct jval *filter(struct jctx *c, const struct jnode *f, struct scope *s)
{
	struct jval *v = eval(c, f->a, s);
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
				return buf_str(c, &b);
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
		if (is_num(v)) {
			if (!strcmp(name, "abs"))
				return jv_num(c, v->type, fabs(v->u.num));
			if (!strcmp(name, "int"))
				return jv_num(c, JV_INT, trunc(v->u.num) + 0);
			if (!strcmp(name, "float"))
				return jv_num(c, JV_FLOAT, v->u.num);
			if (!strcmp(name, "string")) {
				struct jbuf b = {NULL, 0, 0, 64};
				jv_print(c, &b, v);
				return buf_str(c, &b);
			}
			jfail(c, "Unknown NumericValue filter: %s", name);
		}
		if (v->type == JV_OBJECT) {
			if (!strcmp(name, "items"))
				return items(c, v, 0);
			if (!strcmp(name, "length"))
				return jv_num(c, JV_INT, (double)v->u.obj.n);
			if (!strcmp(name, "keys"))
				return items(c, v, 1);
			if (!strcmp(name, "values"))
				return items(c, v, 2);
			jfail(c, "Unknown ObjectValue filter: %s", name);
		}
		if (v->type == JV_BOOL) {
			if (!strcmp(name, "bool"))
				return v;
			if (!strcmp(name, "int") || !strcmp(name, "float"))
				return jv_num(c, name[0] == 'i' ? JV_INT : JV_FLOAT, v->u.b);
			if (!strcmp(name, "string"))
				return cstr(c, v->u.b ? "true" : "false");
			jfail(c, "Unknown BooleanValue filter: %s", name);
		}
		jfail(c, "Cannot apply filter \"%s\" to type: %s", name, jv_typename(v));
	}

	if (!strcmp(name, "tojson")) {
		struct args a = eval_args(c, f, s);
		return tojson(c, v, &a);
	}
	if (!strcmp(name, "join")) {
		if (v->type != JV_ARRAY && v->type != JV_STR)
			jfail(c, "Cannot apply filter \"join\" to type: %s", jv_typename(v));
		struct args a = eval_args(c, f, s);
		struct jval *sep = arg(&a, 0, "separator");
		if (!sep)
			sep = cstr(c, "");
		if (sep->type != JV_STR)
			jfail(c, "separator must be a string");
		if (v->type == JV_ARRAY)
			return join(c, v, sep);
		struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
		for (size_t i = 0; i < v->u.s.n;) {
			size_t l = cp_len(v->u.s.p + i, v->u.s.n - i);
			if (i)
				jb_put(c, &b, sep->u.s.p, sep->u.s.n);
			jb_put(c, &b, v->u.s.p + i, l);
			i += l;
		}
		return buf_str(c, &b);
	}
	if (!strcmp(name, "int") || !strcmp(name, "float")) {
		bool isint = name[0] == 'i';
		struct args a = eval_args(c, f, s);
		struct jval *def = arg(&a, 0, "default");
		if (!def)
			def = jv_num(c, isint ? JV_INT : JV_FLOAT, 0);
		if (v->type == JV_STR) {
			double x = isint ? parse_int(v) : parse_float(c, v);
			return isnan(x) ? def : jv_num(c, isint ? JV_INT : JV_FLOAT, x);
		}
		if (is_num(v))
			return jv_num(c, isint ? JV_INT : JV_FLOAT, isint ? trunc(v->u.num) + 0 : v->u.num);
		if (v->type == JV_BOOL)
			return jv_num(c, isint ? JV_INT : JV_FLOAT, v->u.b);
		jfail(c, "Cannot apply filter \"%s\" to type: %s", name, jv_typename(v));
	}
	if (!strcmp(name, "default")) {
		struct args a = eval_args(c, f, s);
		struct jval *def = a.n > 0 ? a.v[0] : cstr(c, "");
		struct jval *boolean = arg(&a, 1, "boolean");
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
			struct args a = eval_args(c, f, s);
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
		struct args a = eval_args(c, f, s);
		if (!strcmp(name, "indent")) {
			struct jval *w = arg(&a, 0, "width"), *first = arg(&a, 1, "first"), *blank = arg(&a, 2, "blank");
			if (!w)
				w = jv_num(c, JV_INT, 4);
			if (w->type != JV_INT && w->type != JV_STR)
				jfail(c, "width must be an integer or a string");
			return indent(c, v, w, first && jv_truthy(first), blank && jv_truthy(blank));
		}
		if (!strcmp(name, "replace")) {
			struct jval fn = {.type = JV_FUNC, .u.fn = {JF_S_REPLACE, v}};
			return call_fn(c, &fn, &a);
		}
		jfail(c, "Unknown StringValue filter: %s", name);
	}
	if (v->type == JV_OBJECT) {
		struct args a = eval_args(c, f, s);
		if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values"))
			return items(c, v, name[0] == 'i' ? 0 : name[0] == 'k' ? 1 : 2);
		(void)a;
		jfail(c, "Unknown ObjectValue filter: %s", name);
	}
	jfail(c, "Cannot apply filter \"%s\" to type: %s", name, jv_typename(v));
}

/* ---- expressions ---------------------------------------------------------------------------- */

static struct jval *eval(struct jctx *c, const struct jnode *n, struct scope *s)
{
	if (!n)
		return &c->undef;
	if (++c->depth > MAX_EVAL_DEPTH)
		jfail(c, "line %d: expression nested deeper than %d", n->line, MAX_EVAL_DEPTH);
	struct jval *v;
	switch (n->kind) {
	case JN_IDENT:
		v = lookup(s, n->s, n->slen, c);
		break;
	case JN_INT:
	case JN_FLOAT:
		v = jv_num(c, n->kind == JN_INT ? JV_INT : JV_FLOAT, n->num);
		break;
	case JN_STR:
	case JN_TEXT:
		v = jv_str(c, n->s, n->slen);
		break;
	case JN_BINARY:
		v = binary(c, n, s);
		break;
	case JN_MEMBER:
		v = member(c, n, s);
		break;
	case JN_CALL: {
		struct args a = eval_args(c, n, s);
		struct jval *fn = eval(c, n->a, s);
		if (fn->type != JV_FUNC)
			jfail(c, "line %d: Cannot call something that is not a function: got %s", n->line, jv_typename(fn));
		if (a.kw) /* the calling convention: kwargs last among the arguments */
			a.v[a.n] = a.kw;
		v = call_fn(c, fn, &a);
		break;
	}
	case JN_FILTER:
		v = filter(c, n, s);
		break;
	case JN_TEST: {
		bool r = test(c, n->s, eval(c, n->a, s));
		v = jv_bool(c, n->flag ? !r : r);
		break;
	}
	case JN_TERNARY:
		v = jv_truthy(eval(c, n->a, s)) ? eval(c, n->b, s) : eval(c, n->c, s);
		break;
	case JN_SELECT:
		v = jv_truthy(eval(c, n->b, s)) ? eval(c, n->a, s) : &c->undef;
		break;
	case JN_UNARY: {
		struct jval *a = eval(c, n->a, s);
		if (n->op == JOP_NOT) {
			v = jv_bool(c, !jv_truthy(a));
			break;
		}
		if (!is_num(a) && a->type != JV_BOOL)
			jfail(c, "line %d: Unknown operator \"%c\" for %s", n->line, n->op == JOP_SUB ? '-' : '+', jv_typename(a));
		double x = a->type == JV_BOOL ? a->u.b : a->u.num;
		v = jv_num(c, a->type == JV_FLOAT ? JV_FLOAT : JV_INT, n->op == JOP_SUB ? -x : x);
		break;
	}
	case JN_ARRAY:
	case JN_TUPLE:
		v = jv_array(c, n->nbody);
		for (size_t i = 0; i < n->nbody; i++)
			jv_push(c, v, eval(c, n->body[i], s));
		v->tuple = n->kind == JN_TUPLE;
		break;
	case JN_OBJECT:
		v = jv_object(c, JV_OBJECT, n->nbody);
		for (size_t i = 0; i < n->nbody; i++) {
			struct jval *k = eval(c, n->body[i], s);
			if (k->type != JV_STR)
				jfail(c, "line %d: Object keys must be strings: got %s", n->line, jv_typename(k));
			jv_set(c, v, k->u.s.p, k->u.s.n, eval(c, n->alt[i], s));
		}
		break;
	default:
		jfail(c, "line %d: this cannot be evaluated as an expression", n->line);
	}
	c->depth--;
	return v;
}

/* ---- statements ------------------------------------------------------------------------------ */

static void set_stmt(struct jctx *c, const struct jnode *n, struct scope *s)
{
	struct jval *rhs;
	if (n->b) {
		rhs = eval(c, n->b, s);
	} else {
		struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
		if (render(c, n->body, n->nbody, s, &b) != FLOW_NEXT)
			jfail(c, "line %d: break or continue inside {%% set %%}", n->line);
		rhs = buf_str(c, &b);
	}
	const struct jnode *t = n->a;
	if (t->kind == JN_IDENT) {
		jv_set(c, s->vars, t->s, t->slen, rhs);
	} else if (t->kind == JN_TUPLE) {
		if (rhs->type != JV_ARRAY)
			jfail(c, "line %d: Cannot unpack non-iterable type in set: %s", n->line, jv_typename(rhs));
		if (rhs->u.arr.n != t->nbody)
			jfail(c, "line %d: Too %s items to unpack in set", n->line, t->nbody > rhs->u.arr.n ? "few" : "many");
		for (size_t i = 0; i < t->nbody; i++) {
			if (t->body[i]->kind != JN_IDENT)
				jfail(c, "line %d: Cannot unpack to non-identifier in set", n->line);
			jv_set(c, s->vars, t->body[i]->s, t->body[i]->slen, rhs->u.arr.v[i]);
		}
	} else {
		struct jval *obj = eval(c, t->a, s);
		if (obj->type != JV_NS)
			jfail(c, "line %d: cannot assign attribute on non-namespace object", n->line);
		if (t->b->kind != JN_IDENT || t->flag)
			jfail(c, "line %d: Cannot assign to member with non-identifier property", n->line);
		jv_set(c, obj, t->b->s, t->b->slen, rhs);
	}
}

static void bind(struct jctx *c, const struct jnode *var, struct jval *item, struct scope *s)
{
	if (var->kind == JN_IDENT) {
		jv_set(c, s->vars, var->s, var->slen, item);
		return;
	}
	for (size_t j = 0; j < var->nbody; j++) {
		if (var->body[j]->kind != JN_IDENT)
			jfail(c, "line %d: Cannot unpack non-identifier type", var->line);
		jv_set(c, s->vars, var->body[j]->s, var->body[j]->slen, item->u.arr.v[j]);
	}
}

static const char *const LOOP_KEYS[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
                                        "previtem", "nextitem"};

static void for_stmt(struct jctx *c, const struct jnode *n, struct scope *outer, struct jbuf *out)
{
	struct scope *s = new_scope(c, outer);
	struct jval *it = eval(c, n->b, s);
	if (it->type == JV_OBJECT)
		it = items(c, it, 1);
	else if (it->type != JV_ARRAY)
		jfail(c, "line %d: Expected iterable or object type in for loop: got %s", n->line, jv_typename(it));
	struct jval **v = it->u.arr.v;
	size_t len = it->u.arr.n;
	if (n->a->kind == JN_TUPLE || n->c) {
		struct jval **kept = ja_alloc(&c->arena, (len + 1) * sizeof(*kept));
		size_t k = 0;
		for (size_t i = 0; i < len; i++) {
			count_iteration(c);
			if (n->a->kind == JN_TUPLE) {
				if (v[i]->type != JV_ARRAY)
					jfail(c, "line %d: Cannot unpack non-iterable type: %s", n->line, jv_typename(v[i]));
				if (v[i]->u.arr.n != n->a->nbody)
					jfail(c, "line %d: Too %s items to unpack", n->line, n->a->nbody > v[i]->u.arr.n ? "few" : "many");
			}
			if (n->c) {
				struct scope *ls = new_scope(c, s);
				bind(c, n->a, v[i], ls);
				if (!jv_truthy(eval(c, n->c, ls)))
					continue;
			}
			kept[k++] = v[i];
		}
		v = kept;
		len = k;
	} else {
		struct jval **copy = ja_alloc(&c->arena, (len + 1) * sizeof(*copy));
		if (len)
			memcpy(copy, v, len * sizeof(*copy)); /* the loop's body may not change what it walks */
		v = copy;
	}
	bool none = true;
	for (size_t i = 0; i < len; i++) {
		count_iteration(c);
		if (n->flag) {
			struct jval *loop = jv_object(c, JV_OBJECT, 9);
			struct jval *vals[9] = {
				jv_num(c, JV_INT, (double)i + 1), jv_num(c, JV_INT, (double)i), jv_num(c, JV_INT, (double)(len - i)),
				jv_num(c, JV_INT, (double)(len - i - 1)), jv_bool(c, i == 0), jv_bool(c, i == len - 1),
				jv_num(c, JV_INT, (double)len), i > 0 ? v[i - 1] : &c->undef, i + 1 < len ? v[i + 1] : &c->undef,
			};
			for (int k = 0; k < 9; k++)
				jv_set(c, loop, LOOP_KEYS[k], strlen(LOOP_KEYS[k]), vals[k]);
			jv_set(c, s->vars, "loop", 4, loop);
		}
		bind(c, n->a, v[i], s);
		size_t mark = out->n;
		enum flow f = render(c, n->body, n->nbody, s, out);
		if (f != FLOW_NEXT && out->p) {
			/* runtime.ts: break and continue are exceptions, which drop
			 * what the iteration had rendered so far */
			out->n = mark;
			out->p[mark] = '\0';
		}
		if (f == FLOW_CONTINUE)
			continue;
		if (f == FLOW_BREAK)
			break;
		none = false; /* runtime.ts: an iteration ended by break or continue does not count */
	}
	if (none && render(c, n->alt, n->nalt, s, out) != FLOW_NEXT)
		jfail(c, "line %d: break or continue outside a loop", n->line);
}

static enum flow render(struct jctx *c, struct jnode *const *body, size_t nb, struct scope *s, struct jbuf *out)
{
	if (++c->depth > MAX_EVAL_DEPTH)
		jfail(c, "blocks nested deeper than %d", MAX_EVAL_DEPTH);
	for (size_t i = 0; i < nb; i++) {
		const struct jnode *n = body[i];
		switch (n->kind) {
		case JN_TEXT:
			jb_put(c, out, n->s, n->slen);
			break;
		case JN_COMMENT:
			break;
		case JN_IF: {
			bool yes = jv_truthy(eval(c, n->a, s));
			enum flow f = render(c, yes ? n->body : n->alt, yes ? n->nbody : n->nalt, s, out);
			if (f != FLOW_NEXT) {
				c->depth--;
				return f;
			}
			break;
		}
		case JN_FOR:
			for_stmt(c, n, s, out);
			break;
		case JN_SET:
			set_stmt(c, n, s);
			break;
		case JN_BREAK:
			c->depth--;
			return FLOW_BREAK;
		case JN_CONTINUE:
			c->depth--;
			return FLOW_CONTINUE;
		case JN_OUTPUT: {
			struct jval *v = eval(c, n->a, s);
			if (v->type != JV_NULL && v->type != JV_UNDEF)
				jv_print(c, out, v);
			break;
		}
		default:
			jfail(c, "line %d: unexpected statement", n->line);
		}
	}
	c->depth--;
	return FLOW_NEXT;
}

int ig_jinja_render(const struct ig_jinja *t, const struct ig_jinja_var *vars, size_t nvars, char **out,
                    size_t *len, char *err, size_t errlen)
{
	struct jctx *c = calloc(1, sizeof(*c));
	*out = NULL;
	*len = 0;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	c->err = err;
	c->errlen = errlen;
	c->arena.limit = IG_JINJA_MAX_ARENA;
	c->arena.fail_jmp = &c->jmp;
	c->arena.err = err;
	c->arena.errlen = errlen;
	c->undef.type = JV_UNDEF;
	c->null.type = JV_NULL;
	c->t.type = c->f.type = JV_BOOL;
	c->t.u.b = true;
	if (setjmp(c->jmp)) {
		ja_free(&c->arena);
		free(c);
		return -1;
	}
	struct scope *g = new_scope(c, NULL);
	jv_set(c, g->vars, "namespace", 9, func(c, JF_NAMESPACE, NULL));
	jv_set(c, g->vars, "false", 5, &c->f);
	jv_set(c, g->vars, "true", 4, &c->t);
	jv_set(c, g->vars, "none", 4, &c->null);
	jv_set(c, g->vars, "raise_exception", 15, func(c, JF_RAISE, NULL));
	jv_set(c, g->vars, "range", 5, func(c, JF_RANGE, NULL));
	jv_set(c, g->vars, "strftime_now", 12, func(c, JF_STRFTIME, NULL));
	jv_set(c, g->vars, "True", 4, &c->t);
	jv_set(c, g->vars, "False", 5, &c->f);
	jv_set(c, g->vars, "None", 4, &c->null);
	for (size_t i = 0; i < nvars; i++)
		if (vars[i].value)
			jv_set(c, g->vars, vars[i].name, strlen(vars[i].name), jv_from_json(c, vars[i].value, 0));
	struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
	if (render(c, t->body, t->nbody, g, &b) != FLOW_NEXT)
		jfail(c, "break or continue outside a loop");
	*out = malloc(b.n + 1);
	if (!*out)
		jfail(c, "out of memory");
	if (b.n)
		memcpy(*out, b.p, b.n);
	(*out)[b.n] = '\0';
	*len = b.n;
	ja_free(&c->arena);
	free(c);
	return 0;
}
