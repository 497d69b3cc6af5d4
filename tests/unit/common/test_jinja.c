/* Unit tests for the Jinja renderer (src/common/jinja_parse.c, jinja_value.c,
 * jinja_eval.c): each construct the chosen chat templates use, on small
 * templates, with the bytes @huggingface/jinja 0.5.13 gives for them (the
 * reference of tests/integration/test_chattmpl_ref.py, which checks whole
 * templates); unsupported constructs refused at parse with their line; hostile
 * templates and inputs refused, not crashed; one parsed template rendered by
 * several threads at once. */
#include "config.h"
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/jinja.h"
#include "../check_main.h"

static char errbuf[512];

/* The template rendered with the variables of a JSON object; the text, or
 * "ERROR: why" (parse or render). Freed by the caller. */
static char *r(const char *tmpl, const char *vars_json)
{
	struct ig_jinja *t = ig_jinja_parse(tmpl, strlen(tmpl), errbuf, sizeof(errbuf));
	char *out = NULL, *res;
	size_t len;
	if (!t) {
		ck_assert(asprintf(&res, "ERROR: %s", errbuf) > 0);
		return res;
	}
	json_error_t je;
	json_t *vars = json_loads(vars_json ? vars_json : "{}", 0, &je);
	ck_assert_msg(vars != NULL, "bad test JSON: %s", je.text);
	struct ig_jinja_var v[16];
	size_t n = 0;
	const char *k;
	json_t *val;
	json_object_foreach(vars, k, val) {
		ck_assert(n < 16);
		v[n++] = (struct ig_jinja_var){k, val};
	}
	if (ig_jinja_render(t, v, n, &out, &len, errbuf, sizeof(errbuf)) == 0) {
		ck_assert_uint_eq(strlen(out), len);
		res = out;
	} else {
		ck_assert(out == NULL);
		ck_assert(asprintf(&res, "ERROR: %s", errbuf) > 0);
	}
	json_decref(vars);
	ig_jinja_free(t);
	return res;
}

#define RENDERS(tmpl, vars, want)                                                     \
	do {                                                                          \
		char *got_ = r(tmpl, vars);                                           \
		ck_assert_msg(strcmp(got_, want) == 0, "%.200s\n  got  [%.300s]\n  want [%s]", tmpl, got_, want); \
		free(got_);                                                           \
	} while (0)

#define FAILS(tmpl, vars, needle)                                                     \
	do {                                                                          \
		char *got_ = r(tmpl, vars);                                           \
		ck_assert_msg(strncmp(got_, "ERROR: ", 7) == 0 && strstr(got_, needle), \
		              "%.200s\n  got  [%.300s]\n  want an error with [%s]", tmpl, got_, needle); \
		free(got_);                                                           \
	} while (0)

START_TEST(whitespace_control_and_blocks)
{
	/* {%- -%} and {{- -}} eat the white space beside them, newlines included */
	RENDERS("a  {%- if true -%}  b  {%- endif -%}  c", NULL, "abc");
	RENDERS("a \n {{- 'x' -}} \n b", NULL, "axb");
	/* lstrip_blocks and trim_blocks, as the reference sets them: the indent
	 * before a block tag and the newline after it go; not around {{ }} */
	RENDERS("<\n  {% if true %}\n  x\n  {% endif %}\n>", NULL, "<\n  x\n>");
	RENDERS("  {{ 'y' }}\n", NULL, "  y");          /* and one trailing newline of the template */
	RENDERS("{# note #}\nz", NULL, "z");
	RENDERS("a {#- note -#} b", NULL, "ab");
	/* text with braces that open nothing */
	RENDERS("{ a } {x}", NULL, "{ a } {x}");
}
END_TEST

START_TEST(values_and_printing)
{
	RENDERS("{{ x }}|{{ x.y.z }}|{{ none }}", NULL, "||");             /* undefined, its attributes, null: nothing */
	RENDERS("{{ x.y is defined }} {{ x is undefined }}", NULL, "false true");
	RENDERS("{{ true }} {{ 1 }} {{ 2.0 }} {{ 1.5 }} {{ -0.0 }}", NULL, "true 1 2.0 1.5 -0.0");
	RENDERS("{{ n }} {{ f }} {{ big }} {{ tiny }}", "{\"n\": 3.0, \"f\": 0.1, \"big\": 1e21, \"tiny\": 1e-7}",
	        "3 0.1 1e+21 1e-7");                                     /* JSON's 3.0 is JavaScript's 3 */
	RENDERS("{{ [1, 'a', none] }} {{ {'k': [true]} }}", NULL, "[1, \"a\", null] {\"k\": [true]}");
	RENDERS("{{ 7 // 2 }} {{ 7 % 3 }} {{ 1 / 4 }} {{ 2 ** 10 }} {{ -3 + 1 }}", NULL, "3 1 0.25 1024 -2");
	RENDERS("{{ 'a' + 1 }} {{ 'a' ~ 1.5 ~ true }} {{ x ~ 'b' }} {{ [1, 2] ~ '' }}", NULL, "a1 a1.5true b 1,2");
	RENDERS("{{ [none, 2.0, [3]] ~ '' }} {{ [none, 2.0, [3]] }}", NULL, "undefined,2.0,[3] [null, 2, [3]]");
	FAILS("{{ none + 'a' }}", NULL, "null");
	FAILS("{{ x + 'a' }}", NULL, "undefined");
	FAILS("{{ 'a' in none }}", NULL, "null");
}
END_TEST

START_TEST(operators_and_truthiness)
{
	RENDERS("{{ [] or 'e' }} {{ 'a' and 0 }} {{ not '' }} {{ not [0] }} {{ {} or 'o' }}", NULL, "e 0 true false o");
	RENDERS("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in x }}", NULL,
	        "true true true true false");
	RENDERS("{{ 1 < 2 }} {{ 2 <= 1 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ none == x }}", NULL,
	        "true false true true true");
	RENDERS("{{ '1' == 1 }} {{ true == 1 }} {{ [] == '' }}", NULL, "true true true"); /* JavaScript's == */
	RENDERS("{{ 'y' if 1 > 2 else 'n' }}{{ 'never' if false }}", NULL, "n");
	/* a filter binds tighter than +, a test tighter than `and` */
	RENDERS("{{ 'a' + ' b ' | trim }}{{ x is defined and x }}", NULL, "abfalse");
	RENDERS("{% if m is mapping and s is string and l is iterable and l is sequence and 1 is number "
	        "and n is none and b is boolean and 3 is odd %}yes{% endif %}",
	        "{\"m\": {}, \"s\": \"\", \"l\": [], \"n\": null, \"b\": false}", "yes");
	RENDERS("{{ s is string }} {{ e is false }} {{ e is not true }}", "{\"s\": 1, \"e\": false}", "false true true");
	FAILS("{{ 'a' < 'b' }}", NULL, "Unknown operator");
}
END_TEST

START_TEST(members_slices_literals)
{
	const char *v = "{\"m\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\"}], \"s\": \"héllo\"}";
	RENDERS("{{ m[0].role }} {{ m[0]['content'] }} {{ m[-1].role }} {{ m[5] is defined }} {{ m[1].content is defined }}",
	        v, "user hi assistant false false");
	RENDERS("{% for x in m[::-1] %}{{ x.role }} {% endfor %}{{ s[1:] }} {{ s[::-1] }} {{ s[-2:] }} {{ s[0] }}", v,
	        "assistant user éllo olléh lo h");
	RENDERS("{{ m|length }} {{ s|length }} {{ s.length }} {{ [1,2,3][1:2] }}", v, "2 5 5 [2]");
	RENDERS("{{ {'a': 1, 'b': [2, {'c': none}]}['b'][1] }}", NULL, "{\"c\": null}");
	FAILS("{{ x[0] }}", NULL, "non-string");
}
END_TEST

START_TEST(string_methods)
{
	const char *v = "{\"s\": \"<think>\\nplan\\n</think>\\n\\nanswer\", \"w\": \" \\u00a0 a b \\n\"}";
	RENDERS("[{{ s.split('</think>')[-1].lstrip('\\n') }}][{{ s.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}]",
	        v, "[answer][plan]");
	/* the reference's strip, lstrip and rstrip ignore their argument and trim
	 * all of JavaScript's white space, U+00A0 too (Python's would not) */
	RENDERS("[{{ w.strip('\\n') }}][{{ w.lstrip('x') }}][{{ w|trim }}]", v, "[a b][a b \n][a b]");
	RENDERS("{{ s.startswith('<think>') }} {{ s.endswith('answer') }} {{ s.startswith(('x', '<')) }}", v,
	        "true true true");
	RENDERS("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a,b,c'.split(',', 1) }}", NULL,
	        "[\"a\", \"b\", \"\", \"c\"] [\"a\", \"b\"] [\"a\", \"b,c\"]");
	RENDERS("{{ 'Straße'.upper() }} {{ 'ÀB'.lower() }} {{ 'ab'.replace('b', 'c') }} {{ 'x'|replace('x', 'yy') }} "
	        "{{ 'hello world'.title() }} {{ 'élan'|capitalize }}",
	        NULL, "STRASSE àb ac yy Hello World Élan");
	FAILS("{{ 'a'.split('') }}", NULL, "empty separator");
}
END_TEST

START_TEST(filters)
{
	const char *v = "{\"o\": {\"b\": 1, \"a\": [1, 2.5, \"é\\n\\\"\"], \"2\": null, \"1\": true}, "
	                "\"l\": [{\"t\": \"f\", \"n\": 1}, {\"t\": \"g\"}, {\"n\": 0}]}";
	/* tojson: Python's separators, JSON.stringify's escapes, UTF-8 kept, and
	 * JavaScript's key order (integer-like keys first) */
	RENDERS("{{ o|tojson }}", v, "{\"1\": true, \"2\": null, \"b\": 1, \"a\": [1, 2.5, \"é\\n\\\"\"]}");
	RENDERS("{{ o.a|tojson(indent=2) }}", v, "[\n  1,\n  2.5,\n  \"é\\n\\\"\"\n]");
	RENDERS("{{ 'é\\u0001'|tojson(ensure_ascii=true) }}", NULL, "\"\\u00e9\\u0001\"");
	RENDERS("{{ [1,2,3]|first }}{{ [1,2,3]|last }} {{ ['a','b']|join('-') }} {{ [1,2]|join }} {{ 'ab'|upper }}"
	        "{{ 'CD'|lower }} {{ x|default('d') }} {{ ''|default('d', true) }} {{ 3|string }} {{ [1]|string }}",
	        NULL, "13 a-b 12 ABcd d d 3 [1]");
	RENDERS("{% for k, val in o|items %}{{ k }}={{ val }};{% endfor %}", v, "1=true;2=;b=1;a=[1, 2.5, \"é\\n\\\"\"];");
	RENDERS("{{ l|selectattr('t', 'defined')|map(attribute='t')|join(',') }} {{ l|rejectattr('n')|length }}",
	        v, "f,g 2");
	RENDERS("{{ [3,1]|reverse|list }} {{ 'x\\ny'|indent }} {{ -2|abs }} {{ '42abc'|int }} {{ 'z'|int }}", NULL,
	        "[1, 3] x\n    y 2 42 0");
	FAILS("{{ 1|trim }}", NULL, "Unknown NumericValue filter: trim");
}
END_TEST

START_TEST(loops_namespaces_scopes)
{
	RENDERS("{% for x in ['a','b','c'] %}{{ loop.index0 }}{{ loop.index }}{{ x }}{% if loop.first %}F{% endif %}"
	        "{% if loop.last %}L{% endif %}{{ loop.revindex }} {% endfor %}",
	        NULL, "01aF3 12b2 23cL1 ");
	RENDERS("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
	RENDERS("{% for x in [1,2,3,4] if x is odd %}{{ x }}{{ loop.length }}{% endfor %}", NULL, "1232");
	/* break and continue drop what their iteration rendered (they are exceptions in runtime.ts) */
	RENDERS("{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}",
	        NULL, "1");
	RENDERS("{% for x in [1,2,3,4] %}{% if x == 3 %}{% break %}{% endif %}{{ x }}{% endfor %}", NULL, "12");
	RENDERS("{% if 0 %}a{% elif none %}b{% elif 'x' %}c{% else %}d{% endif %}", NULL, "c");
	/* a set inside a loop stays inside it; a namespace carries values out */
	RENDERS("{% set x = 1 %}{% set ns = namespace(y=1, z='a') %}{% for i in [1,2] %}{% set x = x + i %}"
	        "{% set ns.y = ns.y + i %}{% endfor %}{{ x }} {{ ns.y }} {{ ns.z }}",
	        NULL, "1 4 a");
	/* and one scope for all of a loop's iterations (runtime.ts), unlike Python's jinja2 */
	RENDERS("{% for i in [1,2] %}{% if i == 1 %}{% set v = 'kept' %}{% endif %}{{ v }};{% endfor %}", NULL, "kept;kept;");
	RENDERS("{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set t %}in {{ a }}{% endset %} {{ t }}", NULL, "21 in 1");
	RENDERS("{% for k in {'p': 1, 'q': 2} %}{{ k }}{% endfor %} {{ range(3) }} {{ range(1, 7, 2)|join(',') }}", NULL,
	        "pq [0, 1, 2] 1,3,5");
	FAILS("{% set s = 'x' %}{% set s.a = 1 %}", NULL, "non-namespace");
	FAILS("{% for c in 'abc' %}{% endfor %}", NULL, "Expected iterable");
}
END_TEST

START_TEST(raise_exception_is_the_error)
{
	FAILS("a{% if 1 %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}",
	      NULL, "Conversation roles must alternate");
	char *got = r("{{ raise_exception('only this') }}", NULL);
	ck_assert_str_eq(got, "ERROR: only this");
	free(got);
}
END_TEST

START_TEST(unsupported_constructs_name_their_line)
{
	FAILS("a\nb\n{% macro f(x) %}{{ x }}{% endmacro %}", NULL, "line 3: {% macro %} is not supported");
	FAILS("{{ x }}\n{{ x | wordcount }}", NULL, "line 2: filter 'wordcount' is not supported");
	FAILS("\n\n\n{% if x is divisibleby %}{% endif %}", NULL, "line 4: test 'divisibleby' is not supported");
	FAILS("{% call f() %}{% endcall %}", NULL, "line 1: {% call %} is not supported");
	FAILS("{{ f(*args) }}", NULL, "line 1: argument unpacking");
	FAILS("x\n{% if true %}\nno end", NULL, "line 2: this block is never closed");
	FAILS("{{ 'abc }}", NULL, "unexpected end of input");
	FAILS("{% for %}", NULL, "line 1:");
	FAILS("{{ 1 +", NULL, "line 1:");
	FAILS("{% frobnicate %}", NULL, "unknown statement 'frobnicate'");
}
END_TEST

static char *repeat(const char *a, int n, const char *mid, const char *b)
{
	size_t la = strlen(a), lm = strlen(mid), lb = strlen(b);
	char *s = malloc(la * (size_t)n + lm + lb * (size_t)n + 1), *p = s;
	for (int i = 0; i < n; i++, p += la)
		memcpy(p, a, la);
	memcpy(p, mid, lm);
	p += lm;
	for (int i = 0; i < n; i++, p += lb)
		memcpy(p, b, lb);
	*p = '\0';
	return s;
}

START_TEST(hostile_templates_are_refused)
{
	char *t = repeat("(", 100000, "1", ")");
	char *inner = repeat("{{ ", 1, t, " }}");
	FAILS(inner, NULL, "nested deeper");
	free(inner);
	free(t);
	t = repeat("{% if 1 %}", 5000, "x", "{% endif %}");
	FAILS(t, NULL, "nested deeper");
	free(t);
	t = repeat("1 + ", 20000, "1", "");
	inner = repeat("{{ ", 1, t, " }}");
	FAILS(inner, NULL, "deeper than"); /* a long flat chain: deep in evaluation, refused there */
	free(inner);
	free(t);
	t = repeat("[", 100000, "", "]");
	inner = repeat("{{ ", 1, t, " }}");
	FAILS(inner, NULL, "nested deeper");
	free(inner);
	free(t);
	/* loops that would run for ever, output that would fill memory */
	FAILS("{% for i in range(100000000) %}{% endfor %}", NULL, "range() of more than");
	FAILS("{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", NULL, "iterations");
	FAILS("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s }}",
	      NULL, "MiB");
	/* a request's JSON nested deeper than the limit */
	char *deep = repeat("[", 1000, "", "]");
	char *vars = repeat("{\"d\": ", 1, deep, "}");
	FAILS("{{ d|tojson }}", vars, "nested deeper");
	free(vars);
	free(deep);
	ck_assert(ig_jinja_parse("x\0y", 3, errbuf, sizeof(errbuf)) == NULL); /* a NUL: no C string holds it */
	ck_assert(strstr(errbuf, "NUL") != NULL);
}
END_TEST

struct job {
	const struct ig_jinja *t;
	json_t *msgs;
	char *out;
	int rc;
};

static void *render_many(void *arg)
{
	struct job *j = arg;
	struct ig_jinja_var v[] = {{"messages", j->msgs}};
	char err[256];
	for (int i = 0; i < 200; i++) {
		size_t len;
		free(j->out);
		j->out = NULL;
		if ((j->rc = ig_jinja_render(j->t, v, 1, &j->out, &len, err, sizeof(err))) != 0)
			break;
	}
	return NULL;
}

START_TEST(one_template_many_threads)
{
	const char *tmpl = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
	                   "<{{ m.role }}>{{ m.content|trim }}{{ m|tojson }}{% endfor %}{{ ns.n }}";
	struct ig_jinja *t = ig_jinja_parse(tmpl, strlen(tmpl), errbuf, sizeof(errbuf));
	ck_assert_msg(t != NULL, "%s", errbuf);
	struct job jobs[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		char m[128];
		snprintf(m, sizeof(m), "[{\"role\": \"user\", \"content\": \" t%d \"}, {\"role\": \"assistant\", \"content\": \"%d\"}]", i, i);
		jobs[i] = (struct job){t, json_loads(m, 0, NULL), NULL, 0};
		ck_assert(pthread_create(&th[i], NULL, render_many, &jobs[i]) == 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		char want[256];
		snprintf(want, sizeof(want),
		         "<user>t%d{\"role\": \"user\", \"content\": \" t%d \"}<assistant>%d{\"role\": \"assistant\", \"content\": \"%d\"}2",
		         i, i, i, i);
		ck_assert_int_eq(jobs[i].rc, 0);
		ck_assert_str_eq(jobs[i].out, want);
		free(jobs[i].out);
		json_decref(jobs[i].msgs);
	}
	ig_jinja_free(t);
}
END_TEST

IG_CHECK_MAIN("jinja", whitespace_control_and_blocks, values_and_printing, operators_and_truthiness,
              members_slices_literals, string_methods, filters, loops_namespaces_scopes, raise_exception_is_the_error,
              unsupported_constructs_name_their_line, hostile_templates_are_refused, one_template_many_threads)
