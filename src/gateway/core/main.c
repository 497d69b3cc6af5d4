/* infergate: configuration, then the bootstrap (boot.c) and the reactors.
 * Every configuration problem is reported here, before a socket is opened
 * or a request sent. */
#include "config.h"
#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "core/boot.h"
#include "core/conf_parts.h"
#include "core/reactor.h"
#include "core/reload.h"
#include "infergate/log.h"
#include "keys/keyset.h"

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

/* --new-key NAME: a new random key (32 bytes from OpenSSL's generator, in
 * hex after "ig-") on the first line, its keys-file entry on the second. */
static int new_key(const char *name)
{
	unsigned char raw[32];
	char key[3 + 2 * sizeof(raw) + 1] = "ig-", hex[2 * IG_DIGEST_LEN + 1];
	if (!*name || strlen(name) > IG_KEY_NAME_MAX || strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
							       "0123456789._:@-") != strlen(name)) {
		fprintf(stderr, "infergate: --new-key: the name '%s' must be 1..%d characters of letters, digits and "
			"._:@-\n", name, IG_KEY_NAME_MAX);
		return 2;
	}
	if (RAND_bytes(raw, sizeof(raw)) != 1) {
		fprintf(stderr, "infergate: --new-key: no random bytes from OpenSSL\n");
		return 1;
	}
	ig_keyset_hex(raw, key + 3);
	OPENSSL_cleanse(raw, sizeof(raw));
	ig_keyset_hash(key, strlen(key), hex);
	printf("%s\n{\"name\": \"%s\", \"sha256\": \"%s\"}\n", key, name, hex);
	OPENSSL_cleanse(key, sizeof(key));
	fprintf(stderr, "infergate: line 1 is the key: give it to its user, it is not stored anywhere; line 2 is its "
		"entry for the keys file (api_keys_file), where limits can be added\n");
	return 0;
}

int main(int argc, char **argv)
{
	struct ig_conf cfg;
	struct ig_gw gw;
	char *err = NULL;
	int rc;

	ig_log_set_ident("infergate");
	if (ig_conf_parts_register() < 0)
		return 2;
	if (argc == 2 && strcmp(argv[1], "--hash-key") == 0)
		return hash_key();
	if (argc >= 2 && strcmp(argv[1], "--new-key") == 0) {
		if (argc != 3) {
			fprintf(stderr, "infergate: usage: infergate --new-key NAME\n");
			return 2;
		}
		return new_key(argv[2]);
	}
	rc = ig_conf_from_args(&cfg, argc, argv, &err);
	if (rc == 1) {
		ig_conf_free(&cfg);
		return 0;
	}
	if (rc == 0 && ig_reload_check_files(&cfg, &err) < 0)
		rc = -1; /* the key files, checked before anything starts */
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
	rc = ig_boot_init(&gw, &cfg);
	gw.argc = argc;
	gw.argv = argv;
	if (rc < 0) {
		ig_boot_free(&gw);
		ig_conf_free(&cfg);
		curl_global_cleanup();
		return 2;
	}
	rc = ig_reactor_run(&gw);
	ig_boot_free(&gw);
	ig_conf_free(&cfg);
	curl_global_cleanup();
	return rc;
}
