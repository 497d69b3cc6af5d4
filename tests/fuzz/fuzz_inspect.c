/* libFuzzer target: the gateway's request inspector (proxy.c inspect_body),
 * the only code that parses a client's body. Includes proxy.c to reach the
 * static function, as the unit tests do.
 * Checks beyond "no crash": a refused body gets a 400 whose error body is
 * OpenAI-shaped JSON; an accepted one is a JSON object whose "stream" is
 * absent, null or a boolean. */
#include "../../src/gateway/proxy.c"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_req req;

	memset(&cfg, 0, sizeof(cfg));
	memset(&gw, 0, sizeof(gw));
	memset(&req, 0, sizeof(req));
	gw.cfg = &cfg;
	req.gw = &gw;
	req.max_tokens = -1;
	ig_buf_init(&req.body);
	ig_buf_append(&req.body, data, size);

	int rc = inspect_body(&req);
	if (rc < 0) {
		if (req.err_status != 400 || !req.err_body)
			abort();
		json_t *e = json_loads(req.err_body, 0, NULL);
		json_t *msg = json_object_get(json_object_get(e, "error"), "message");
		if (!json_is_string(msg) || json_string_length(msg) == 0)
			abort();
		json_decref(e);
	} else {
		if (req.err_status || req.err_body)
			abort();
		json_t *o = json_loadb((const char *)data, size, 0, NULL);
		if (!json_is_object(o))
			abort();
		json_t *s = json_object_get(o, "stream");
		if (s && !json_is_boolean(s) && !json_is_null(s))
			abort();
		if (req.stream != json_is_true(s))
			abort();
		json_decref(o);
	}
	free(req.model);
	free(req.err_body);
	ig_buf_free(&req.body);
	return 0;
}
