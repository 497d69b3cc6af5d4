/* Unit tests for src/common/oaerror.c: the error bodies the programs
 * write, and the errors of real servers read in every shape they use. */
#include "config.h"
#include <check.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/oaerror.h"
#include "../check_main.h"

START_TEST(oaerror_shape)
{
	char *s = ig_oaerror_json("bad \"x\" \xff", "invalid_request_error", "model", NULL);
	json_error_t e;
	json_t *j = json_loads(s, 0, &e);
	ck_assert_ptr_nonnull(j);
	json_t *err = json_object_get(j, "error");
	ck_assert_str_eq(json_string_value(json_object_get(err, "type")), "invalid_request_error");
	ck_assert_str_eq(json_string_value(json_object_get(err, "param")), "model");
	ck_assert(json_is_null(json_object_get(err, "code")));
	ck_assert_str_eq(json_string_value(json_object_get(err, "message")), "bad \"x\" ?");
	json_decref(j);
	free(s);
}
END_TEST

/* The error a client gets for a server's error body: OpenAI's shape, with
 * the server's own message, type, param and code. */
static json_t *normalized(unsigned status, const char *fixture_or_text, bool fixture)
{
	size_t len;
	char *body = fixture ? ig_fixture(fixture_or_text, &len) : strdup(fixture_or_text);
	if (!fixture)
		len = strlen(body);
	char *out = ig_oaerror_normalize(status, body, len);
	free(body);
	if (!out)
		return NULL;
	json_t *j = json_loads(out, 0, NULL);
	free(out);
	ck_assert_ptr_nonnull(j);
	json_t *e = json_object_get(j, "error");
	ck_assert(json_is_object(e));
	ck_assert(json_is_string(json_object_get(e, "message")));
	ck_assert(json_is_string(json_object_get(e, "type")));
	ck_assert_ptr_nonnull(json_object_get(e, "param"));
	ck_assert_ptr_nonnull(json_object_get(e, "code"));
	json_t *copy = json_incref(e);
	json_decref(j);
	return copy;
}

START_TEST(oaerror_from_real_servers)
{
	json_t *e = normalized(400, "sglang-error-flat.json", true);
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(e, "message")),
				     "Requested token count exceeds the model's maximum context length of 4096"));
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "BadRequestError");
	ck_assert_int_eq(json_integer_value(json_object_get(e, "code")), 400);
	ck_assert(json_is_null(json_object_get(e, "param")));
	json_decref(e);

	e = normalized(400, "sglang-error-validation.json", true);
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(e, "message")), "Field required"));
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "Bad Request");
	json_decref(e);

	e = normalized(422, "fastapi-detail.json", true);
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")),
			 "body.messages: Field required; body.max_tokens: Input should be a valid integer");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
	json_decref(e);

	e = normalized(401, "sglang-error-auth.json", true);
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "Unauthorized");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "authentication_error");
	json_decref(e);

	e = normalized(404, "{\"detail\":\"Not Found\"}", false);
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "Not Found");
	json_decref(e);

	e = normalized(502, "<html>Bad Gateway</html>\r\n", false); /* not JSON: the text is the message */
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "<html>Bad Gateway</html>");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "server_error");
	json_decref(e);

	e = normalized(500, "", false);
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "HTTP 500 from the backend");
	json_decref(e);

	/* Already OpenAI's shape (vLLM's, OpenAI's, the gateway's): relayed as it is. */
	ck_assert_ptr_null(normalized(404, "vllm-error-404.json", true));

	/* What a stream's error event says, and its status. */
	struct ig_oaerror r;
	json_t *ev = json_loads("{\"error\": {\"object\": \"error\", \"message\": \"x\", \"type\": \"BadRequestError\", "
				"\"param\": null, \"code\": 400}}", 0, NULL);
	ck_assert_int_eq(ig_oaerror_read(ev, &r), 0);
	ck_assert(r.nested);
	ck_assert_uint_eq(ig_oaerror_status(&r), 400);
	ig_oaerror_clear(&r);
	json_decref(ev);
	/* A completion is not an error. */
	ev = json_loads("{\"id\": \"c\", \"choices\": [{\"message\": {\"content\": \"error\"}}]}", 0, NULL);
	ck_assert_int_eq(ig_oaerror_read(ev, &r), -1);
	ig_oaerror_clear(&r);
	json_decref(ev);
}
END_TEST

/* The one formatter: what a client reads in the error body. */
static json_t *error_of(char *text)
{
	json_t *j = json_loads(text, 0, NULL);
	free(text);
	ck_assert_ptr_nonnull(j);
	json_t *e = json_incref(json_object_get(j, "error"));
	json_decref(j);
	ck_assert(json_is_object(e));
	return e;
}

START_TEST(formatted_errors_take_the_status_type)
{
	json_t *e = error_of(ig_oaerror_jsonf(429, NULL, NULL, "queue_full", "the queue of '%s' is full (%d waiting)",
					      "llama", 64));
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "the queue of 'llama' is full (64 waiting)");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "rate_limit_error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "code")), "queue_full");
	ck_assert(json_is_null(json_object_get(e, "param")));
	json_decref(e);

	e = error_of(ig_oaerror_jsonf(404, "invalid_request_error", "model", "model_not_found",
				      "The model `%s` does not exist.", "gpt-\"x\""));
	ck_assert_str_eq(json_string_value(json_object_get(e, "message")), "The model `gpt-\"x\"` does not exist.");
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
	ck_assert_str_eq(json_string_value(json_object_get(e, "param")), "model");
	json_decref(e);

	e = error_of(ig_oaerror_jsonf(503, NULL, NULL, NULL, "no healthy backend"));
	ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "server_error");
	ck_assert(json_is_null(json_object_get(e, "code")));
	json_decref(e);
}
END_TEST

/* A message longer than the limit is cut there, never inside a character:
 * a model named in French stays readable, not turned into '?'. */
START_TEST(long_messages_are_cut_on_a_character)
{
	char name[2000];
	size_t n = 0;
	while (n + 8 < sizeof(name)) { /* "modèle-": 8 bytes, 7 characters */
		memcpy(name + n, "mod\xc3\xa8le-", 8);
		n += 8;
	}
	name[n] = '\0';
	for (int shift = 0; shift < 8; shift++) {
		char *m = ig_oaerror_messagef("%.*sthe model '%s' is unknown", shift, "xxxxxxx", name);
		ck_assert_ptr_nonnull(m);
		size_t len = strlen(m);
		ck_assert_uint_le(len, IG_OAERROR_MESSAGE_MAX);
		ck_assert_uint_ge(len, IG_OAERROR_MESSAGE_MAX - 1); /* at most the split character's first byte */
		json_t *valid = json_string(m); /* NULL when not UTF-8 */
		ck_assert_ptr_nonnull(valid);
		json_decref(valid);
		free(m);

		json_t *e = error_of(ig_oaerror_jsonf(404, NULL, "model", NULL, "%.*sthe model '%s' is unknown", shift,
						      "xxxxxxx", name));
		const char *msg = json_string_value(json_object_get(e, "message"));
		ck_assert_ptr_nonnull(strstr(msg, "the model 'mod\xc3\xa8le-mod\xc3\xa8le-"));
		ck_assert_ptr_null(strchr(msg, '?'));
		json_decref(e);
	}
	/* Short of the limit, the message is whole. */
	char *m = ig_oaerror_messagef("%s", name + n - 8 * 10);
	ck_assert_uint_eq(strlen(m), 80);
	free(m);
}
END_TEST

IG_CHECK_MAIN("oaerror", oaerror_shape, oaerror_from_real_servers, formatted_errors_take_the_status_type,
	      long_messages_are_cut_on_a_character)
