/* OpenAI-shaped error bodies, built with jansson so messages are escaped. */
#include "config.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/oaerror.h"

/* A JSON string even for bytes that are not UTF-8 (a client's path, say):
 * those bytes become '?', so an error body can always be built. */
static json_t *safe_string(const char *s)
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
				"message", safe_string(message ? message : ""),
				"type", type ? type : "server_error",
				"param", param ? safe_string(param) : json_null(),
				"code", code ? safe_string(code) : json_null());
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
