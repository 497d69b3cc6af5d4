/* libFuzzer target: the gateway's request inspector (proxy.c inspect_body),
 * the only code that parses a client's body. Includes proxy.c to reach the
 * static function, as the unit tests do.
 * Checks beyond "no crash": a refused body gets a 400 whose error body is
 * OpenAI-shaped JSON; an accepted one is a JSON object whose "stream" is
 * absent, null or a boolean and whose "model" is a non-empty string; a body
 * naming the alias "a" is forwarded naming "served-a", every other member
 * unchanged, and any other body is forwarded byte for byte. */
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
	struct ig_model_alias alias = {"a", "served-a"};
	cfg.aliases = &alias;
	cfg.n_aliases = 1;
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
		json_t *m = json_object_get(o, "model");
		if (!json_is_string(m) || json_string_length(m) == 0)
			abort();
		bool aliased = strcmp(json_string_value(m), "a") == 0;
		if (strcmp(req.model, aliased ? "served-a" : json_string_value(m)) != 0 || !req.alias != !aliased)
			abort();
		if (aliased) {
			json_t *fwd = json_loadb(req.body.data, req.body.len, 0, NULL);
			json_object_set_new(o, "model", json_string("served-a"));
			if (!json_equal(fwd, o))
				abort();
			json_decref(fwd);
		} else if (req.body.len != size || memcmp(req.body.data, data, size) != 0) {
			abort();
		}
		json_decref(o);
	}
	free(req.model);
	free(req.alias);
	free(req.err_body);
	ig_buf_free(&req.body);
	return 0;
}
