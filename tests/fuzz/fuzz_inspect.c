/* libFuzzer target: the gateway's request inspector (admission.c
 * ig_admission_body), the only code that reads a client's body. Includes
 * admission.c, as the unit tests do.
 * Checks beyond "no crash": a refused body gets a 400 whose error body is
 * OpenAI-shaped JSON; an accepted one is a JSON object whose "stream" is
 * absent, null or a boolean and whose "model" is a non-empty string; a body
 * naming the alias "a" is forwarded naming "served-a", a stream that did not
 * ask for usage is forwarded with stream_options.include_usage true (as the
 * member in front of the original bytes when it had no stream_options),
 * every other member unchanged, and any other body is forwarded byte for
 * byte; its token estimate for a key's tpm is at least 1. */
#include "../../src/gateway/path/admission.c"

#include <stdio.h>

#include "infergate/oaerror.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_admission a;
	struct ig_waiter w;
	struct ig_buf body;
	struct ig_key key;

	memset(&key, 0, sizeof(key));
	key.tpm.limit = 1000; /* a key with a tpm: the estimate is made */
	memset(&cfg, 0, sizeof(cfg));
	static struct ig_routes routes; /* the built-in table, made once: the request is a chat one */
	if (!routes.n)
		ig_routes_default(&routes);
	cfg.routes = routes;
	cfg.stream_usage = 1;
	cfg.default_max_tokens = 16;
	memset(&gw, 0, sizeof(gw));
	memset(&w, 0, sizeof(w));
	ig_admission_init(&a);
	struct ig_model_alias alias = {"a", "served-a"};
	cfg.aliases = &alias;
	cfg.n_aliases = 1;
	gw.cfg = &cfg;
	a.key = &key;
	ig_buf_init(&body);
	ig_buf_append(&body, data, size);
	json_error_t jerr;
	json_t *parsed = json_loadb((const char *)data, size, 0, &jerr);

	int rc = ig_admission_body(&gw, &a, NULL, &body, parsed, &jerr, &w);
	if (rc < 0) {
		if (a.err.status != 400 || !a.err.code || !a.err.message || strlen(a.err.message) == 0)
			abort();
		char *eb = ig_oaerror_json(a.err.message, a.err.type ? a.err.type : "invalid_request_error",
					   a.err.param, a.err.code);
		json_t *e = json_loads(eb, 0, NULL);
		json_t *msg = json_object_get(json_object_get(e, "error"), "message");
		if (!json_is_string(msg) || json_string_length(msg) == 0)
			abort();
		json_decref(e);
		free(eb);
	} else {
		if (a.err.status)
			abort();
		json_t *o = json_loadb((const char *)data, size, 0, NULL);
		if (!json_is_object(o))
			abort();
		json_t *s = json_object_get(o, "stream");
		if (s && !json_is_boolean(s) && !json_is_null(s))
			abort();
		if (a.stream != json_is_true(s))
			abort();
		json_t *m = json_object_get(o, "model");
		if (!json_is_string(m) || json_string_length(m) == 0)
			abort();
		bool aliased = strcmp(json_string_value(m), "a") == 0;
		if (strcmp(a.model, aliased ? "served-a" : json_string_value(m)) != 0 || !a.alias != !aliased)
			abort();
		json_t *so = json_object_get(o, "stream_options");
		bool added = a.stream && !json_is_true(json_object_get(so, "include_usage"));
		if (added != a.usage_added || a.tok_estimate < 1)
			abort();
		static const char member[] = "\"stream_options\":{\"include_usage\":true},";
		if (added && !aliased && !so) {
			/* the member right after the object's '{', the rest as sent */
			const char *brace = memchr(data, '{', size);
			size_t at = (size_t)(brace - (const char *)data) + 1, mn = sizeof(member) - 1;
			if (body.len != size + mn || memcmp(body.data, data, at) != 0 ||
			    memcmp(body.data + at, member, mn) != 0 ||
			    memcmp(body.data + at + mn, data + at, size - at) != 0)
				abort();
		} else if (aliased || added) {
			json_t *fwd = json_loadb(body.data, body.len, 0, NULL);
			if (aliased)
				json_object_set_new(o, "model", json_string("served-a"));
			if (added) {
				if (!json_is_object(so))
					json_object_set_new(o, "stream_options", so = json_object());
				json_object_set_new(so, "include_usage", json_true());
			}
			if (!json_equal(fwd, o))
				abort();
			json_decref(fwd);
		} else if (body.len != size || memcmp(body.data, data, size) != 0) {
			abort();
		}
		json_decref(o);
	}
	a.key = NULL; /* the fuzzer's own: not a clients.c reference to let go of */
	ig_admission_free(&gw, &a, true);
	free(w.pick.chain);
	ig_buf_free(&body);
	return 0;
}
