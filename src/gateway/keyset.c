/* API key checks with OpenSSL: SHA-256 through EVP, comparison with
 * CRYPTO_memcmp against every stored digest (no early exit), so the time
 * taken says nothing about which bytes matched.
 * Not here: which routes need which key set (server.c). */
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "keyset.h"
#include "infergate/util.h"

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int ig_keyset_load(struct ig_keyset *ks, const char *what, const char *path, char **err)
{
	char line[512];
	int lineno = 0;

	memset(ks, 0, sizeof(*ks));
	if (!path || !*path)
		return 0;
	FILE *f = fopen(path, "r");
	if (!f) {
		*err = ig_strdupf("%s: cannot read '%s': %s", what, path, strerror(errno));
		return -1;
	}
	ks->enabled = 1;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		char *p = line, *end;
		while (isspace((unsigned char)*p))
			p++;
		end = p + strlen(p);
		while (end > p && isspace((unsigned char)end[-1]))
			*--end = '\0';
		if (!*p || *p == '#')
			continue;
		if (end - p != 2 * IG_DIGEST_LEN) {
			*err = ig_strdupf("%s: %s:%d: expected a SHA-256 hex digest (64 hex digits, see infergate "
					  "--hash-key), got %zu characters", what, path, lineno, (size_t)(end - p));
			goto fail;
		}
		unsigned char d[IG_DIGEST_LEN];
		for (int i = 0; i < IG_DIGEST_LEN; i++) {
			int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
			if (hi < 0 || lo < 0) {
				*err = ig_strdupf("%s: %s:%d: not a hex digest", what, path, lineno);
				goto fail;
			}
			d[i] = (unsigned char)(hi << 4 | lo);
		}
		void *v = realloc(ks->digests, (ks->n + 1) * sizeof(*ks->digests));
		if (!v)
			goto fail;
		ks->digests = v;
		memcpy(ks->digests[ks->n++], d, IG_DIGEST_LEN);
	}
	fclose(f);
	return 0;
fail:
	fclose(f);
	ig_keyset_free(ks);
	return -1;
}

void ig_keyset_free(struct ig_keyset *ks)
{
	free(ks->digests);
	memset(ks, 0, sizeof(*ks));
}

static void sha256(const char *key, size_t len, unsigned char out[IG_DIGEST_LEN])
{
	unsigned int n = 0;
	EVP_Digest(key, len, out, &n, EVP_sha256(), NULL);
}

int ig_keyset_check(const struct ig_keyset *ks, const char *authorization)
{
	unsigned char d[IG_DIGEST_LEN];
	int ok = 0;

	if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
		return 0;
	const char *key = authorization + 7;
	while (*key == ' ')
		key++;
	if (!*key)
		return 0;
	sha256(key, strlen(key), d);
	for (size_t i = 0; i < ks->n; i++)
		ok |= CRYPTO_memcmp(d, ks->digests[i], IG_DIGEST_LEN) == 0;
	OPENSSL_cleanse(d, sizeof(d));
	return ok;
}

void ig_keyset_hash(const char *key, size_t len, char out[2 * IG_DIGEST_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char d[IG_DIGEST_LEN];
	sha256(key, len, d);
	for (int i = 0; i < IG_DIGEST_LEN; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[2 * IG_DIGEST_LEN] = '\0';
}
