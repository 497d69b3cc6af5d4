/* infergate: configuration, then the reactor. Every configuration problem is
 * reported here, before a socket is opened or a request sent. */
#include "config.h"
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keyset.h"
#include "conf.h"
#include "reactor.h"
#include "infergate/log.h"

/* --hash-key: the digest to put in api_keys_file, from a key on stdin, so
 * the key itself never appears in a command line or a file. */
static int hash_key(void)
{
	char key[4096], hex[2 * IG_DIGEST_LEN + 1];
	size_t n = fread(key, 1, sizeof(key) - 1, stdin);
	while (n > 0 && (key[n - 1] == '\n' || key[n - 1] == '\r'))
		n--;
	if (n == 0) {
		fprintf(stderr, "infergate: --hash-key: no key on standard input\n");
		return 2;
	}
	ig_keyset_hash(key, n, hex);
	printf("%s\n", hex);
	return 0;
}

int main(int argc, char **argv)
{
	struct ig_conf cfg;
	struct ig_gw gw;
	char *err = NULL;
	int rc;

	ig_log_set_ident("infergate");
	if (argc == 2 && strcmp(argv[1], "--hash-key") == 0)
		return hash_key();
	rc = ig_conf_from_args(&cfg, argc, argv, &err);
	if (rc == 1) {
		ig_conf_free(&cfg);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "infergate: configuration error%s:\n", cfg.check_only ? "s" : "");
		for (char *line = strtok(err, "\n"); line; line = strtok(NULL, "\n"))
			fprintf(stderr, "  %s\n", line);
		free(err);
		ig_conf_free(&cfg);
		return 2;
	}
	if (cfg.check_only) {
		char *s = ig_conf_to_json(&cfg);
		printf("%s\n", s);
		free(s);
		ig_conf_free(&cfg);
		return 0;
	}
	ig_log_set_level((enum ig_log_level)cfg.log_level);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = ig_reactor_init(&gw, &cfg);
	gw.argc = argc;
	gw.argv = argv;
	if (rc < 0) {
		ig_reactor_free(&gw);
		ig_conf_free(&cfg);
		curl_global_cleanup();
		return 2;
	}
	rc = ig_reactor_run(&gw);
	ig_reactor_free(&gw);
	ig_conf_free(&cfg);
	curl_global_cleanup();
	return rc;
}
