/* OpenAI-shaped error bodies, built with jansson so messages are escaped;
 * and servers' errors read from whatever shape they came in. */
#include "config.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/buf.h"
#include "infergate/oaerror.h"
#include "infergate/util.h"

json_t *ig_oaerror_string(const char *s)
{
	json_t *j = json_string(s);
	if (j)
		return j;
	char *copy = strdup(s);
	if (!copy)
		abort();
	for (char *p = copy; *p; p++)
		if ((unsigned char)*p >= 0x80 || (unsigned char)*p < 0x20)
			*p = '?';
	j = json_string(copy);
	free(copy);
	return j;
}

char *ig_oaerror_json(const char *message, const char *type, const char *param, const char *code)
{
	json_t *err = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error",
				"message", ig_oaerror_string(message ? message : ""),
				"type", type ? type : "server_error",
				"param", param ? ig_oaerror_string(param) : json_null(),
				"code", code ? ig_oaerror_string(code) : json_null());
	if (!err)
		abort();
	char *s = json_dumps(err, JSON_COMPACT);
	json_decref(err);
	if (!s)
		abort();
	return s;
}

const char *ig_oaerror_type_for_status(unsigned status)
{
	switch (status) {
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 429: return "rate_limit_error";
	default:  return status >= 500 ? "server_error" : "invalid_request_error";
	}
}

char *ig_oaerror_vmessagef(const char *fmt, va_list ap)
{
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	if (n < 0)
		return NULL;
	if (n > IG_OAERROR_MESSAGE_MAX) {
		size_t cut = IG_OAERROR_MESSAGE_MAX;
		/* s[cut] is the first byte left out: a continuation byte's
		 * character began before it, and goes too */
		while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80)
			cut--;
		s[cut] = '\0';
	}
	return s;
}

char *ig_oaerror_messagef(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = ig_oaerror_vmessagef(fmt, ap);
	va_end(ap);
	return s;
}

char *ig_oaerror_vjsonf(unsigned status, const char *type, const char *param, const char *code, const char *fmt,
			va_list ap)
{
	char *msg = ig_oaerror_vmessagef(fmt, ap);
	if (!msg)
		abort();
	char *out = ig_oaerror_json(msg, type ? type : ig_oaerror_type_for_status(status), param, code);
	free(msg);
	return out;
}

char *ig_oaerror_jsonf(unsigned status, const char *type, const char *param, const char *code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *out = ig_oaerror_vjsonf(status, type, param, code, fmt, ap);
	va_end(ap);
	return out;
}

/* FastAPI's validation detail: [{"loc": ["body", "x"], "msg": "..."}, ...]
 * as "body.x: ...; ...", at most DETAIL_MESSAGE_MAX bytes. */
#define DETAIL_MESSAGE_MAX 1023
static json_t *detail_message(json_t *detail)
{
	if (json_is_string(detail))
		return json_incref(detail);
	if (!json_is_array(detail))
		return NULL;
	struct ig_buf b;
	size_t i, k;
	json_t *item, *part;
	ig_buf_init(&b);
	json_array_foreach(detail, i, item) {
		json_t *msg = json_object_get(item, "msg"), *loc = json_object_get(item, "loc");
		if (!json_is_string(msg))
			continue;
		if (b.len)
			ig_buf_printf(&b, "; ");
		json_array_foreach(loc, k, part) {
			if (json_is_string(part))
				ig_buf_printf(&b, "%s%s", k ? "." : "", json_string_value(part));
			else if (json_is_integer(part))
				ig_buf_printf(&b, "[%lld]", (long long)json_integer_value(part));
		}
		ig_buf_printf(&b, "%s%s", json_array_size(loc) ? ": " : "", json_string_value(msg));
	}
	json_t *m = NULL;
	if (b.len && ig_buf_append(&b, "", 1) == 0) {
		if (b.len > DETAIL_MESSAGE_MAX)
			b.data[DETAIL_MESSAGE_MAX] = '\0';
		m = ig_oaerror_string(ig_buf_head(&b));
	}
	ig_buf_free(&b);
	return m;
}

static json_t *string_or_null(json_t *v)
{
	return json_is_string(v) ? json_incref(v) : NULL;
}

int ig_oaerror_read(json_t *body, struct ig_oaerror *out)
{
	memset(out, 0, sizeof(*out));
	if (!json_is_object(body))
		return -1;
	json_t *err = json_object_get(body, "error");
	json_t *src = NULL;
	if (json_is_object(err) && json_is_string(json_object_get(err, "message"))) {
		src = err; /* OpenAI, vLLM, and SGLang's streamed errors */
		out->nested = true;
	} else if (json_is_string(json_object_get(body, "message")) &&
		   (json_is_string(json_object_get(body, "type")) ||
		    json_object_get(body, "code") || json_is_string(json_object_get(body, "object")))) {
		src = body; /* SGLang's ErrorResponse, flat */
	}
	if (src) {
		out->message = json_incref(json_object_get(src, "message"));
		out->type = string_or_null(json_object_get(src, "type"));
		json_t *p = json_object_get(src, "param"), *c = json_object_get(src, "code");
		out->param = p && !json_is_null(p) ? json_incref(p) : NULL;
		out->code = c && !json_is_null(c) ? json_incref(c) : NULL;
		return 0;
	}
	if (json_is_string(err)) { /* SGLang's API-key middleware */
		out->message = json_incref(err);
		return 0;
	}
	json_t *detail = detail_message(json_object_get(body, "detail")); /* FastAPI */
	if (detail) {
		out->message = detail;
		return 0;
	}
	return -1;
}

void ig_oaerror_clear(struct ig_oaerror *e)
{
	json_decref(e->message);
	json_decref(e->type);
	json_decref(e->param);
	json_decref(e->code);
	memset(e, 0, sizeof(*e));
}

unsigned ig_oaerror_status(const struct ig_oaerror *e)
{
	json_int_t c = json_is_integer(e->code) ? json_integer_value(e->code) : 0;
	return c >= 400 && c <= 599 ? (unsigned)c : 0;
}

/* At most this much of a body that is not JSON becomes the message. */
#define TEXT_MESSAGE_MAX 1000

char *ig_oaerror_to_json(const struct ig_oaerror *e, unsigned status)
{
	json_t *err = json_pack("{s:{s:O, s:o, s:o, s:o}}", "error", "message", e->message,
				"type", e->type ? json_incref(e->type) : json_string(ig_oaerror_type_for_status(status)),
				"param", e->param ? json_incref(e->param) : json_null(),
				"code", e->code ? json_incref(e->code) : json_null());
	if (!err)
		abort();
	char *out = json_dumps(err, JSON_COMPACT);
	json_decref(err);
	if (!out)
		abort();
	return out;
}

char *ig_oaerror_normalize(unsigned status, const char *body, size_t len)
{
	json_t *root = json_loadb(body ? body : "", len, 0, NULL);
	struct ig_oaerror e;
	char *out = NULL;

	if (ig_oaerror_read(root, &e) == 0 && e.nested)
		goto done;
	if (!e.message) { /* plain text, or JSON in no known shape */
		size_t n = len < TEXT_MESSAGE_MAX ? len : TEXT_MESSAGE_MAX;
		while (n > 0 && (body[n - 1] == '\n' || body[n - 1] == '\r' || body[n - 1] == ' '))
			n--;
		char *text = n ? strndup(body, n) : ig_strdupf("HTTP %u from the backend", status);
		if (!text)
			abort();
		for (char *p = text; *p; p++) /* one line, whatever it held */
			if (*p == '\n' || *p == '\r' || *p == '\t')
				*p = ' ';
		e.message = ig_oaerror_string(text);
		free(text);
	}
	out = ig_oaerror_to_json(&e, status);
done:
	ig_oaerror_clear(&e);
	json_decref(root);
	return out;
}
