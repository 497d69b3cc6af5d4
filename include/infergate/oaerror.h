/* OpenAI-shaped error bodies: {"error": {"message", "type", "param", "code"}}.
 * Every program that answers HTTP builds its errors here, so they agree; and
 * every program that reads a server's error reads it here, whatever shape the
 * server used. */
#ifndef IG_OAERROR_H
#define IG_OAERROR_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/* Returns a malloc'd JSON text. type is e.g. "invalid_request_error",
 * "server_error", "rate_limit_error"; param and code may be NULL (JSON null). */
char *ig_oaerror_json(const char *message, const char *type, const char *param, const char *code);

/* The OpenAI error type that goes with an HTTP status. */
const char *ig_oaerror_type_for_status(unsigned status);

/* The one formatter of the errors a program decides (admission's, dispatch's,
 * the proxy's, the Batch API's): the message printf'd, at most
 * IG_OAERROR_MESSAGE_MAX bytes, cut before a UTF-8 character it would split
 * (so a long message naming a non-ASCII model stays valid text), malloc'd;
 * NULL when out of memory. */
#define IG_OAERROR_MESSAGE_MAX 1023
char *ig_oaerror_messagef(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *ig_oaerror_vmessagef(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* The whole body, as ig_oaerror_json's, of such a message: type NULL is the
 * type of `status`. A malloc'd JSON text. */
char *ig_oaerror_jsonf(unsigned status, const char *type, const char *param, const char *code, const char *fmt,
		       ...) __attribute__((format(printf, 5, 6)));
char *ig_oaerror_vjsonf(unsigned status, const char *type, const char *param, const char *code, const char *fmt,
			va_list ap) __attribute__((format(printf, 5, 0)));

/* What a server's error says, read from any of the shapes real servers use:
 *   OpenAI, vLLM:  {"error": {"message", "type", "param", "code"}}
 *   SGLang:        {"object": "error", "message", "type", "param", "code": 400}
 *   SGLang auth:   {"error": "Unauthorized"}
 *   FastAPI:       {"detail": "Not Found"} or {"detail": [{"loc", "msg", ...}]}
 * Each member is a new reference, or NULL when the body has none. */
struct ig_oaerror {
	json_t *message; /* a string */
	json_t *type;    /* a string */
	json_t *param;
	json_t *code;    /* an integer (SGLang, vLLM: the HTTP status) or a string */
	bool nested;     /* already {"error": {"message": ...}}: OpenAI's shape */
};

/* Reads the error in a parsed body. Returns 0 when the body is an error in
 * one of the shapes above, -1 when it is not (a completion, say). */
int ig_oaerror_read(json_t *body, struct ig_oaerror *out);
void ig_oaerror_clear(struct ig_oaerror *e);
/* The HTTP status an error names in its integer code (400..599), else 0. */
unsigned ig_oaerror_status(const struct ig_oaerror *e);

/* e (its message set) in OpenAI's shape, as a malloc'd JSON text; a member
 * it lacks is null, its type the one for `status`. */
char *ig_oaerror_to_json(const struct ig_oaerror *e, unsigned status);

/* A JSON string even of bytes that are not UTF-8 (a client's path, a
 * backend's body): those bytes, and control characters, become '?', so an
 * error body can always be built. */
json_t *ig_oaerror_string(const char *s);

/* An error answer of a server with the given status, in OpenAI's shape:
 * NULL when body already is (relay it as it is), else a malloc'd JSON text
 * that keeps the server's message, type, param and code (a body that is not
 * JSON becomes the message). */
char *ig_oaerror_normalize(unsigned status, const char *body, size_t len);

#endif
