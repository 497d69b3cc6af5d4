/* API keys: only SHA-256 digests are stored (never the keys); a request's
 * bearer token is hashed and compared in constant time with every digest. */
#ifndef IG_KEYSET_H
#define IG_KEYSET_H

#include <stddef.h>

#define IG_DIGEST_LEN 32

struct ig_keyset {
	unsigned char (*digests)[IG_DIGEST_LEN];
	size_t n;
	int enabled;    /* a file was configured (even if empty: then nothing passes) */
};

/* Reads a file of hex digests (blank lines and '#' comments allowed).
 * path NULL or "" gives a disabled set. Returns 0, or -1 with *err naming
 * the file, the line and the problem. */
int ig_keyset_load(struct ig_keyset *ks, const char *what, const char *path, char **err);
void ig_keyset_free(struct ig_keyset *ks);
/* 1 when the Authorization header value ("Bearer KEY") matches a digest. */
int ig_keyset_check(const struct ig_keyset *ks, const char *authorization);
/* Hex SHA-256 of key (65 bytes out). */
void ig_keyset_hash(const char *key, size_t len, char out[2 * IG_DIGEST_LEN + 1]);

#endif
