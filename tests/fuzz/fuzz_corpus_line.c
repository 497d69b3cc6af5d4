/* libFuzzer target: infergate-bulk's corpus line parser (ig_corpus_parse).
 * The first byte picks the flag defaults (model, endpoint, stream,
 * max_tokens), the rest is one line. An accepted line must give a body that
 * is a JSON object with a string model, a custom_id without NUL, and
 * "stream" matching l.stream; a refused one must say why, naming the line. */
#include "config.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bulk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	struct ig_corpus_defaults d = {
		.model = (data[0] & 1) ? "m" : NULL,
		.max_tokens = (data[0] & 2) ? 16 : -1,
		.temperature = 0.5,
		.have_temperature = (data[0] >> 2) & 1,
		.endpoint = (int)((data[0] >> 3) % 3) - 1, /* -1 auto, chat, completions */
		.stream = (data[0] >> 5) & 1,
	};
	struct ig_corpus_line l;
	char *err = NULL;
	int rc = ig_corpus_parse((const char *)data + 1, size - 1, 7, &d, &l, &err);
	if (rc < 0) {
		if (!err || strncmp(err, "line 7", 6) != 0)
			abort();
		free(err);
		return 0;
	}
	if (!json_is_object(l.body) || !l.custom_id || !*l.custom_id || !l.model || !*l.model)
		abort();
	if (l.ep >= IG_EP_COUNT)
		abort();
	/* A shorthand line's custom_id is ours, never sent upstream (a Batch
	 * line's body is the user's and goes as it is). */
	json_t *in = json_loadb((const char *)data + 1, size - 1, 0, NULL);
	int batch = json_object_get(in, "body") || json_object_get(in, "url");
	json_decref(in);
	if (!batch && json_object_get(l.body, "custom_id"))
		abort();
	if (l.stream != json_is_true(json_object_get(l.body, "stream")))
		abort();
	char *s = json_dumps(l.body, JSON_COMPACT);
	if (!s)
		abort();
	free(s);
	ig_corpus_line_clear(&l);
	return 0;
}
