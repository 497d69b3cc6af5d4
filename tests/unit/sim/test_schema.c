/* Unit tests for src/sim/schema.c: which request fields ask for a JSON
 * answer, and that the document made for a schema is valid JSON of its
 * shape, cut into tokens a stream can carry, of about the length asked. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "schema.h"
#include "text.h"
#include "../check_main.h"

/* The document's tokens joined and unescaped, as a client reading the
 * stream's deltas has it; *ntok their number. Each token is checked to
 * fit a token's buffer and to be a valid JSON string's inside. */
static char *joined(const json_t *schema, uint64_t seed, long target, long *ntok)
{
	struct ig_buf doc, quoted;
	ig_buf_init(&doc);
	ig_buf_init(&quoted);
	*ntok = sim_schema_doc(schema, seed, target, &doc);
	ig_buf_append(&quoted, "\"", 1);
	long seen = 0;
	for (size_t at = 0; at < doc.len; seen++) {
		size_t n = strlen(doc.data + at);
		ck_assert_uint_gt(n, 0);
		ck_assert_uint_le(n, SIM_TOKEN_MAX);
		struct ig_buf one;
		ig_buf_init(&one);
		ig_buf_printf(&one, "\"%s\"", doc.data + at);
		json_t *s = json_loadb(one.data, one.len, JSON_DECODE_ANY, NULL);
		ck_assert_msg(json_is_string(s), "token %ld is not a JSON string's inside: %s", seen, doc.data + at);
		json_decref(s);
		ig_buf_free(&one);
		ig_buf_append(&quoted, doc.data + at, n);
		at += n + 1;
	}
	ck_assert_int_eq(seen, *ntok);
	ig_buf_append(&quoted, "\"", 1);
	json_t *s = json_loadb(quoted.data, quoted.len, JSON_DECODE_ANY, NULL);
	ck_assert(json_is_string(s));
	char *out = strdup(json_string_value(s));
	json_decref(s);
	ig_buf_free(&doc);
	ig_buf_free(&quoted);
	return out;
}

static json_t *parsed(const char *schema_text, uint64_t seed, long target, long *ntok)
{
	json_t *schema = schema_text ? json_loads(schema_text, 0, NULL) : NULL;
	ck_assert(!schema_text || schema);
	char *text = joined(schema, seed, target, ntok);
	json_error_t je;
	json_t *v = json_loads(text, JSON_DECODE_ANY, &je);
	ck_assert_msg(v != NULL, "not JSON (%s): %s", je.text, text);
	free(text);
	json_decref(schema);
	return v;
}

#define PERSON "{\"type\":\"object\",\"properties\":{" \
	"\"name\":{\"type\":\"string\"}," \
	"\"age\":{\"type\":\"integer\",\"minimum\":18,\"maximum\":99}," \
	"\"height\":{\"type\":\"number\"}," \
	"\"member\":{\"type\":\"boolean\"}," \
	"\"color\":{\"enum\":[\"red\",\"green\",\"blue \\\"sky\\\"\"]}," \
	"\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":2,\"maxItems\":4}," \
	"\"address\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}," \
	"\"note\":{\"type\":[\"string\",\"null\"]}}," \
	"\"required\":[\"name\",\"age\",\"id\"]}"

START_TEST(a_document_of_the_schemas_shape)
{
	for (uint64_t seed = 1; seed < 40; seed++) {
		long n;
		json_t *v = parsed(PERSON, seed, 60, &n);
		ck_assert(json_is_object(v));
		ck_assert(json_is_string(json_object_get(v, "name")));
		json_t *age = json_object_get(v, "age");
		ck_assert(json_is_integer(age));
		ck_assert_int_ge(json_integer_value(age), 18);
		ck_assert_int_le(json_integer_value(age), 99);
		ck_assert(json_is_number(json_object_get(v, "height")));
		ck_assert(json_is_boolean(json_object_get(v, "member")));
		const char *c = json_string_value(json_object_get(v, "color"));
		ck_assert(c && (!strcmp(c, "red") || !strcmp(c, "green") || !strcmp(c, "blue \"sky\"")));
		json_t *tags = json_object_get(v, "tags");
		ck_assert(json_is_array(tags));
		ck_assert_uint_ge(json_array_size(tags), 2);
		ck_assert_uint_le(json_array_size(tags), 4);
		ck_assert(json_is_string(json_array_get(tags, 0)));
		ck_assert(json_is_string(json_object_get(json_object_get(v, "address"), "city")));
		ck_assert(json_is_string(json_object_get(v, "note")));
		ck_assert(json_is_string(json_object_get(v, "id"))); /* required, not in properties */
		json_decref(v);
	}
}
END_TEST

START_TEST(json_object_and_odd_schemas)
{
	long n;
	json_t *v = parsed(NULL, 7, 30, &n); /* json_object: any object */
	ck_assert(json_is_object(v));
	ck_assert_uint_ge(json_object_size(v), 1);
	json_decref(v);
	v = parsed("{\"type\":\"array\",\"items\":{\"const\":{\"k\":[1,null]}}}", 7, 30, &n);
	ck_assert(json_is_array(v));
	ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(json_array_get(v, 0), "k"), 0)), 1);
	json_decref(v);
	v = parsed("{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"string\"}]}", 7, 30, &n);
	ck_assert(json_is_boolean(v));
	json_decref(v);
	/* nested past the depth bound: a string there, still JSON */
	char deep[2048] = "";
	for (int i = 0; i < 40; i++)
		strcat(deep, "{\"type\":\"array\",\"items\":");
	strcat(deep, "{\"type\":\"integer\"}");
	for (int i = 0; i < 40; i++)
		strcat(deep, "}");
	v = parsed(deep, 7, 30, &n);
	ck_assert(json_is_array(v));
	json_decref(v);
	/* a key and an enum value with quotes, a backslash, a control byte
	 * and UTF-8 come through escaped and whole */
	v = parsed("{\"type\":\"object\",\"properties\":{\"q\\\"\\\\k\":{\"enum\":[\"\\u00e9t\\u00e9\\n\\t\"]}}}", 7, 10, &n);
	ck_assert_str_eq(json_string_value(json_object_get(v, "q\"\\k")), "\xc3\xa9t\xc3\xa9\n\t");
	json_decref(v);
}
END_TEST

START_TEST(same_seed_same_document_and_length_follows_the_target)
{
	long a, b, small, big;
	json_t *schema = json_loads(PERSON, 0, NULL);
	char *x = joined(schema, 3, 80, &a), *y = joined(schema, 3, 80, &b);
	ck_assert_str_eq(x, y);
	ck_assert_int_eq(a, b);
	free(x);
	free(y);
	free(joined(schema, 3, 1, &small));
	free(joined(schema, 3, 400, &big));
	ck_assert_int_lt(small, 80);
	/* free text grows it: about the target, give or take a word per string */
	ck_assert_int_gt(big, 400 - 40);
	ck_assert_int_lt(big, 400 + 40);
	json_decref(schema);
	/* no free text: the schema's own length whatever the target */
	schema = json_loads("{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}}}", 0, NULL);
	free(joined(schema, 3, 1, &small));
	free(joined(schema, 3, 500, &big));
	ck_assert_int_eq(small, big);
	json_decref(schema);
}
END_TEST

static int of(const char *body, json_t **schema, char **err)
{
	json_t *root = json_loads(body, 0, NULL), *owned;
	ck_assert(root);
	int r = sim_schema_of(root, schema, &owned, err);
	/* the schema outlives neither: keep a copy to look at */
	*schema = *schema ? json_deep_copy(*schema) : NULL;
	json_decref(owned);
	json_decref(root);
	return r;
}

START_TEST(the_fields_that_ask_for_json)
{
	json_t *s;
	char *err;
	ck_assert_int_eq(of("{\"response_format\":{\"type\":\"json_object\"}}", &s, &err), 1);
	ck_assert_ptr_null(s);
	ck_assert_int_eq(of("{\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\","
			    "\"schema\":{\"type\":\"integer\"}}}}", &s, &err), 1);
	ck_assert_str_eq(json_string_value(json_object_get(s, "type")), "integer");
	json_decref(s);
	ck_assert_int_eq(of("{\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"boolean\\\"}\"}}", &s, &err), 1);
	ck_assert_str_eq(json_string_value(json_object_get(s, "type")), "boolean");
	json_decref(s);
	ck_assert_int_eq(of("{\"structured_outputs\":{\"json_object\":true}}", &s, &err), 1);
	ck_assert_ptr_null(s);
	ck_assert_int_eq(of("{\"guided_json\":{\"type\":\"number\"}}", &s, &err), 1);
	json_decref(s);
	ck_assert_int_eq(of("{\"json_schema\":\"{\\\"type\\\":\\\"null\\\"}\"}", &s, &err), 1);
	json_decref(s);
	ck_assert_int_eq(of("{\"sampling_params\":{\"json_schema\":\"{}\"}}", &s, &err), 1);
	json_decref(s);
	/* not followed: text, a regex, a choice, a grammar */
	ck_assert_int_eq(of("{\"response_format\":{\"type\":\"text\"}}", &s, &err), 0);
	ck_assert_int_eq(of("{\"guided_regex\":\"a+\",\"regex\":\"b\"}", &s, &err), 0);
	ck_assert_int_eq(of("{\"structured_outputs\":{\"choice\":[\"a\"]}}", &s, &err), 0);
	ck_assert_int_eq(of("{\"messages\":[]}", &s, &err), 0);
	/* a schema's text that is not JSON */
	ck_assert_int_eq(of("{\"json_schema\":\"{nope\"}", &s, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "'json_schema' is not a valid JSON schema"));
	free(err);
}
END_TEST

IG_CHECK_MAIN("sim_schema", a_document_of_the_schemas_shape, json_object_and_odd_schemas,
	      same_seed_same_document_and_length_follows_the_target, the_fields_that_ask_for_json)
