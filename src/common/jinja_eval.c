/* The evaluator of the Jinja renderer (include/infergate/jinja.h): walks the
 * AST jinja_parse.c made, with @huggingface/jinja 0.5.13's semantics
 * (src/runtime.ts Interpreter), quirks included, since the gateway must
 * produce the bytes transformers.js produces: a for loop is one scope for all
 * its iterations (a `set` inside it outlives the iteration, not the loop);
 * strip/lstrip/rstrip ignore their argument and trim JavaScript's white space;
 * null in `+` or `in` is an error; `==` is JavaScript's; {{ true }} prints
 * "true". A render's values live in its arena; an error longjmps to
 * ig_jinja_render, which frees the arena. Not here: the values' printing and
 * equality (jinja_value.c), the functions, methods, filters and tests
 * (jinja_builtin.c), parsing (jinja_parse.c). */
#include "config.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/jinja.h"

#define MAX_EVAL_DEPTH 1000

struct jscope {
	struct jscope *parent;
	struct jval *vars; /* a JV_OBJECT */
};

enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE };

static enum flow render(struct jctx *c, struct jnode *const *body, size_t n, struct jscope *s, struct jbuf *out);

static struct jval *lookup(struct jscope *s, const char *name, size_t n, struct jctx *c)
{
	for (; s; s = s->parent) {
		struct jval *v = jv_get(s->vars, name, n);
		if (v)
			return v;
	}
	return &c->undef;
}

static struct jscope *new_scope(struct jctx *c, struct jscope *parent)
{
	struct jscope *s = ja_alloc(&c->arena, sizeof(*s));
	s->parent = parent;
	s->vars = jv_object(c, JV_OBJECT, 0);
	return s;
}

void jv_count_iteration(struct jctx *c)
{
	if (++c->iterations > IG_JINJA_MAX_ITERATIONS)
		jfail(c, "more than %ld loop iterations", IG_JINJA_MAX_ITERATIONS);
}

/* ---- calls: positional arguments, then one kwargs object if any -------------------- */

struct jargs jv_eval_args(struct jctx *c, const struct jnode *call, struct jscope *s)
{
	struct jargs a = {ja_alloc(&c->arena, (call->nbody + 1) * sizeof(struct jval *)), 0, NULL};
	for (size_t i = 0; i < call->nbody; i++)
		if (call->body[i]->kind != JN_KWARG)
			a.v[a.n++] = jv_eval(c, call->body[i], s);
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
		jv_set(c, a.kw, k->s, k->slen, jv_eval(c, k->a, s));
	}
	return a;
}

/* The argument at i, else the keyword, else NULL. */
struct jval *jv_arg(const struct jargs *a, size_t i, const char *kw)
{
	if (i < a->n)
		return a->v[i];
	if (a->kw && kw)
		return jv_get(a->kw, kw, strlen(kw));
	return NULL;
}

/* ---- member access ------------------------------------------------------------------------ */
/* Code point i of a string (JavaScript counts UTF-16 units: they differ past the BMP). */
static struct jval *char_at(struct jctx *c, const struct jval *s, double idx)
{
	size_t count = 0;
	for (size_t i = 0; i < s->u.s.n; i += jv_cp_len(s->u.s.p + i, s->u.s.n - i))
		count++;
	double i = trunc(idx);
	if (i < 0)
		i += (double)count;
	if (i < 0 || i >= (double)count)
		return &c->undef;
	size_t at = 0, k = 0;
	while (k < (size_t)i) {
		at += jv_cp_len(s->u.s.p + at, s->u.s.n - at);
		k++;
	}
	return jv_str(c, s->u.s.p + at, jv_cp_len(s->u.s.p + at, s->u.s.n - at));
}

static struct jval *slice(struct jctx *c, struct jval *obj, const struct jnode *sl, struct jscope *s)
{
	if (obj->type != JV_ARRAY && obj->type != JV_STR)
		jfail(c, "Slice object must be an array or string");
	struct jval *v[3] = {sl->a ? jv_eval(c, sl->a, s) : &c->undef, sl->b ? jv_eval(c, sl->b, s) : &c->undef,
	                     sl->c ? jv_eval(c, sl->c, s) : &c->undef};
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
			cpl[len] = jv_cp_len(obj->u.s.p + i, obj->u.s.n - i);
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
		jv_count_iteration(c);
		if (arr)
			jv_push(c, arr, obj->u.arr.v[(size_t)i]);
		else
			jb_put(c, &b, cps[(size_t)i], cpl[(size_t)i]);
	}
	return arr ? arr : jv_buf_str(c, &b);
}

static struct jval *member(struct jctx *c, const struct jnode *n, struct jscope *s)
{
	struct jval *obj = jv_eval(c, n->a, s), *prop, *v = NULL;
	if (n->flag) {
		if (n->b->kind == JN_SLICE)
			return slice(c, obj, n->b, s);
		prop = jv_eval(c, n->b, s);
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
			v = jv_builtin(c, obj, prop);
	} else if (obj->type == JV_ARRAY || obj->type == JV_STR) {
		if (prop->type == JV_INT) {
			if (obj->type == JV_STR) {
				v = char_at(c, obj, prop->u.num);
			} else {
				double i = prop->u.num < 0 ? prop->u.num + (double)obj->u.arr.n : prop->u.num;
				v = i >= 0 && i < (double)obj->u.arr.n ? obj->u.arr.v[(size_t)i] : NULL;
			}
		} else if (prop->type == JV_STR) {
			v = jv_builtin(c, obj, prop);
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
	return jv_buf_str(c, &b);
}

static const char *OPNAMES[] = {"", "and", "or", "not", "==", "!=", "<", ">", "<=", ">=", "+", "-", "*", "/",
                                "//", "%", "**", "~", "in", "not in"};

static struct jval *binary(struct jctx *c, const struct jnode *n, struct jscope *s)
{
	struct jval *l = jv_eval(c, n->a, s);
	if (n->op == JOP_AND)
		return jv_truthy(l) ? jv_eval(c, n->b, s) : l;
	if (n->op == JOP_OR)
		return jv_truthy(l) ? l : jv_eval(c, n->b, s);
	struct jval *r = jv_eval(c, n->b, s);
	enum jop op = n->op;
	if (op == JOP_EQ || op == JOP_NE)
		return jv_bool(c, jv_loose_eq(c, l, r) == (op == JOP_EQ));
	if (jv_is_num(l) && jv_is_num(r) && op != JOP_CONCAT && op != JOP_POW) {
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
	} else if (op == JOP_POW && (jv_is_num(l) || l->type == JV_BOOL) && (jv_is_num(r) || r->type == JV_BOOL)) {
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
		return jv_bool(c, (jv_find(r->u.s.p, r->u.s.n, l->u.s.p, l->u.s.n) != NULL) == (op == JOP_IN));
	if (l->type == JV_STR && r->type == JV_OBJECT && (op == JOP_IN || op == JOP_NOTIN))
		return jv_bool(c, (jv_get(r, l->u.s.p, l->u.s.n) != NULL) == (op == JOP_IN));
	jfail(c, "Unknown operator \"%s\" between %s and %s", OPNAMES[op], jv_typename(l), jv_typename(r));
}

/* ---- expressions ---------------------------------------------------------------------------- */

struct jval *jv_eval(struct jctx *c, const struct jnode *n, struct jscope *s)
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
		struct jargs a = jv_eval_args(c, n, s);
		struct jval *fn = jv_eval(c, n->a, s);
		if (fn->type != JV_FUNC)
			jfail(c, "line %d: Cannot call something that is not a function: got %s", n->line, jv_typename(fn));
		if (a.kw) /* the calling convention: kwargs last among the arguments */
			a.v[a.n] = a.kw;
		v = jv_call(c, fn, &a);
		break;
	}
	case JN_FILTER:
		v = jv_filter(c, n, s);
		break;
	case JN_TEST: {
		bool r = jv_test(c, n->s, jv_eval(c, n->a, s));
		v = jv_bool(c, n->flag ? !r : r);
		break;
	}
	case JN_TERNARY:
		v = jv_truthy(jv_eval(c, n->a, s)) ? jv_eval(c, n->b, s) : jv_eval(c, n->c, s);
		break;
	case JN_SELECT:
		v = jv_truthy(jv_eval(c, n->b, s)) ? jv_eval(c, n->a, s) : &c->undef;
		break;
	case JN_UNARY: {
		struct jval *a = jv_eval(c, n->a, s);
		if (n->op == JOP_NOT) {
			v = jv_bool(c, !jv_truthy(a));
			break;
		}
		if (!jv_is_num(a) && a->type != JV_BOOL)
			jfail(c, "line %d: Unknown operator \"%c\" for %s", n->line, n->op == JOP_SUB ? '-' : '+', jv_typename(a));
		double x = a->type == JV_BOOL ? a->u.b : a->u.num;
		v = jv_num(c, a->type == JV_FLOAT ? JV_FLOAT : JV_INT, n->op == JOP_SUB ? -x : x);
		break;
	}
	case JN_ARRAY:
	case JN_TUPLE:
		v = jv_array(c, n->nbody);
		for (size_t i = 0; i < n->nbody; i++)
			jv_push(c, v, jv_eval(c, n->body[i], s));
		v->tuple = n->kind == JN_TUPLE;
		break;
	case JN_OBJECT:
		v = jv_object(c, JV_OBJECT, n->nbody);
		for (size_t i = 0; i < n->nbody; i++) {
			struct jval *k = jv_eval(c, n->body[i], s);
			if (k->type != JV_STR)
				jfail(c, "line %d: Object keys must be strings: got %s", n->line, jv_typename(k));
			jv_set(c, v, k->u.s.p, k->u.s.n, jv_eval(c, n->alt[i], s));
		}
		break;
	default:
		jfail(c, "line %d: this cannot be evaluated as an expression", n->line);
	}
	c->depth--;
	return v;
}

/* ---- statements ------------------------------------------------------------------------------ */

static void set_stmt(struct jctx *c, const struct jnode *n, struct jscope *s)
{
	struct jval *rhs;
	if (n->b) {
		rhs = jv_eval(c, n->b, s);
	} else {
		struct jbuf b = {NULL, 0, 0, IG_JINJA_MAX_OUTPUT};
		if (render(c, n->body, n->nbody, s, &b) != FLOW_NEXT)
			jfail(c, "line %d: break or continue inside {%% set %%}", n->line);
		rhs = jv_buf_str(c, &b);
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
		struct jval *obj = jv_eval(c, t->a, s);
		if (obj->type != JV_NS)
			jfail(c, "line %d: cannot assign attribute on non-namespace object", n->line);
		if (t->b->kind != JN_IDENT || t->flag)
			jfail(c, "line %d: Cannot assign to member with non-identifier property", n->line);
		jv_set(c, obj, t->b->s, t->b->slen, rhs);
	}
}

static void bind(struct jctx *c, const struct jnode *var, struct jval *item, struct jscope *s)
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

static void for_stmt(struct jctx *c, const struct jnode *n, struct jscope *outer, struct jbuf *out)
{
	struct jscope *s = new_scope(c, outer);
	struct jval *it = jv_eval(c, n->b, s);
	if (it->type == JV_OBJECT)
		it = jv_items(c, it, 1);
	else if (it->type != JV_ARRAY)
		jfail(c, "line %d: Expected iterable or object type in for loop: got %s", n->line, jv_typename(it));
	struct jval **v = it->u.arr.v;
	size_t len = it->u.arr.n;
	if (n->a->kind == JN_TUPLE || n->c) {
		struct jval **kept = ja_alloc(&c->arena, (len + 1) * sizeof(*kept));
		size_t k = 0;
		for (size_t i = 0; i < len; i++) {
			jv_count_iteration(c);
			if (n->a->kind == JN_TUPLE) {
				if (v[i]->type != JV_ARRAY)
					jfail(c, "line %d: Cannot unpack non-iterable type: %s", n->line, jv_typename(v[i]));
				if (v[i]->u.arr.n != n->a->nbody)
					jfail(c, "line %d: Too %s items to unpack", n->line, n->a->nbody > v[i]->u.arr.n ? "few" : "many");
			}
			if (n->c) {
				struct jscope *ls = new_scope(c, s);
				bind(c, n->a, v[i], ls);
				if (!jv_truthy(jv_eval(c, n->c, ls)))
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
		jv_count_iteration(c);
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

static enum flow render(struct jctx *c, struct jnode *const *body, size_t nb, struct jscope *s, struct jbuf *out)
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
			bool yes = jv_truthy(jv_eval(c, n->a, s));
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
			struct jval *v = jv_eval(c, n->a, s);
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
	struct jscope *g = new_scope(c, NULL);
	jv_set(c, g->vars, "namespace", 9, jv_func(c, JF_NAMESPACE, NULL));
	jv_set(c, g->vars, "false", 5, &c->f);
	jv_set(c, g->vars, "true", 4, &c->t);
	jv_set(c, g->vars, "none", 4, &c->null);
	jv_set(c, g->vars, "raise_exception", 15, jv_func(c, JF_RAISE, NULL));
	jv_set(c, g->vars, "range", 5, jv_func(c, JF_RANGE, NULL));
	jv_set(c, g->vars, "strftime_now", 12, jv_func(c, JF_STRFTIME, NULL));
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
