/* libFuzzer target: the gateway's configuration file parser
 * (ig_conf_from_file), fed through an in-memory file (memfd). On success
 * the effective configuration must print as JSON and load again to the same
 * text: what --check-config shows is what the gateway runs with. */
#include "config.h"
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "conf/conf.h"
#include "core/conf_parts.h"

/* The modules' rows and checks, as main.c registers them. */
__attribute__((constructor)) static void register_table(void)
{
	if (ig_conf_parts_register() < 0)
		abort();
}

static int memfd = -1;

static int load(const uint8_t *data, size_t size, struct ig_conf *cfg, char **err)
{
	char path[64];
	if (memfd < 0)
		memfd = memfd_create("fuzz-config", 0);
	if (memfd < 0 || ftruncate(memfd, 0) < 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	return ig_conf_from_file(cfg, path, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ig_conf cfg;
	char *err = NULL;

	if (load(data, size, &cfg, &err) < 0) {
		if (!err || !*err)
			abort(); /* a refused file must say why */
		free(err);
		ig_conf_free(&cfg);
		return 0;
	}
	char *js = ig_conf_to_json(&cfg);
	if (!js)
		abort();
	/* Round trip: the printed configuration is itself valid and stable. */
	struct ig_conf again;
	char *err2 = NULL;
	if (load((const uint8_t *)js, strlen(js), &again, &err2) < 0) {
		fprintf(stderr, "printed configuration does not load:\n%s\n%s\n", js, err2);
		abort();
	}
	char *js2 = ig_conf_to_json(&again);
	if (strcmp(js, js2) != 0) {
		fprintf(stderr, "round trip differs:\n%s\n---\n%s\n", js, js2);
		abort();
	}
	free(js);
	free(js2);
	ig_conf_free(&again);
	ig_conf_free(&cfg);
	return 0;
}
