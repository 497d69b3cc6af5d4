/* OpenAI-shaped error bodies: {"error": {"message", "type", "param", "code"}}.
 * Every program that answers HTTP builds its errors here, so they agree. */
#ifndef IG_OAERROR_H
#define IG_OAERROR_H

/* Returns a malloc'd JSON text. type is e.g. "invalid_request_error",
 * "server_error", "rate_limit_error"; param and code may be NULL (JSON null). */
char *ig_oaerror_json(const char *message, const char *type, const char *param, const char *code);

/* The OpenAI error type that goes with an HTTP status. */
const char *ig_oaerror_type_for_status(unsigned status);

#endif
