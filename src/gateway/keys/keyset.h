/* API keys: the keys file. Only SHA-256 digests are stored (never the
 * keys); a request's bearer token is hashed once and looked up by its
 * digest, the match confirmed with a constant-time compare.
 *
 * Two formats, told apart by the first character:
 *   - JSON: {"keys": [{"name": "alice", "sha256": "<64 hex>", "priority"?,
 *     "weight"?, "max_inflight"?, "rpm"?, "tpm"?, "models"?, "status"?,
 *     "disabled"?}, ...]}: named keys with settings and limits;
 *   - lines: one hex digest per line ('#' comments, blank lines): each a
 *     key with no settings, named by the first 12 digits of its digest.
 * Not here: what the settings do (scheduler.c, ratelimit.c, proxy.c). */
#ifndef IG_KEYSET_H
#define IG_KEYSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IG_DIGEST_LEN 32
#define IG_KEY_NAME_MAX 64

/* One key of the file. */
struct ig_keyent {
	char name[IG_KEY_NAME_MAX + 1]; /* its "name", or 12 digest digits (line format) */
	unsigned char digest[IG_DIGEST_LEN];
	int priority;                /* default class (enum ig_class), -1 none */
	long weight;                 /* fair share, 1..1000 (1 unset) */
	long max_inflight;           /* 0 = no cap */
	long rpm, tpm;               /* requests / tokens per minute, 0 = no limit */
	char **models;               /* allowed models, NULL = any */
	size_t n_models;
	bool disabled;               /* 401 */
	bool status;                 /* may read the status endpoints with auth_status 1
				      * (/metrics, /status, /health/backends: every key's
				      * names and counts), as an admin key may */
};

struct ig_keyset {
	struct ig_keyent *v;
	size_t n;
	uint32_t *index;             /* open addressing by digest: entry + 1, 0 empty */
	size_t index_cap;            /* a power of two, over twice n */
	bool enabled;                /* a file was configured (even if empty: then
				      * nothing passes) */
	bool json;                   /* the file was the JSON format */
};

/* Reads a keys file (either format). path NULL or "" gives a disabled set.
 * with_limits: settings allowed (the API keys file; the admin keys file
 * takes names, digests and "disabled" only). Returns 0, or -1 with *err
 * (malloc'd) listing every problem, one per line, each naming the file,
 * the entry (its index and name) and the field. */
int ig_keyset_load(struct ig_keyset *ks, const char *what, const char *path, bool with_limits, char **err);
void ig_keyset_free(struct ig_keyset *ks);
/* The SHA-256 of the key in an Authorization value ("Bearer KEY").
 * Returns 0, or -1 when there is no bearer key. */
int ig_keyset_digest(const char *authorization, unsigned char out[IG_DIGEST_LEN]);
/* The SHA-256 of a client's key: the bearer key of `authorization`, else
 * the whole of `x_api_key` (Anthropic's header, which its SDKs and Claude
 * Code send: @anthropic-ai/sdk client.ts apiKeyAuth). Either may be NULL.
 * Returns 0, or -1 when neither holds a key. */
int ig_keyset_client_digest(const char *authorization, const char *x_api_key, unsigned char out[IG_DIGEST_LEN]);
/* The entry whose digest is d, or NULL. */
const struct ig_keyent *ig_keyset_find(const struct ig_keyset *ks, const unsigned char d[IG_DIGEST_LEN]);
/* The entry of an Authorization value's key, or NULL (disabled ones too). */
const struct ig_keyent *ig_keyset_check(const struct ig_keyset *ks, const char *authorization);
/* A digest in lower-case hex (65 bytes out). */
void ig_keyset_hex(const unsigned char d[IG_DIGEST_LEN], char out[2 * IG_DIGEST_LEN + 1]);
/* The digest of 64 hex digits. Returns 0, or -1 when it is not one. */
int ig_keyset_unhex(const char *hex, unsigned char out[IG_DIGEST_LEN]);
/* Hex SHA-256 of key (65 bytes out). */
void ig_keyset_hash(const char *key, size_t len, char out[2 * IG_DIGEST_LEN + 1]);
/* Whether a key may use the model (its served name or the alias it was
 * asked by). */
bool ig_keyset_model_allowed(const struct ig_keyent *k, const char *model, const char *alias);

#endif
