/* The keys file (keyset.h): parsed and checked whole (every problem listed,
 * none applied), then indexed by digest. A request's key is hashed once
 * (SHA-256 through EVP) and found through the index; the match is confirmed
 * with CRYPTO_memcmp. The index is probed by the digest's first bytes: the
 * digest of an unknown key is as unpredictable as the key, so the time a
 * lookup takes says nothing an attacker could steer towards a stored one.
 * Not here: which routes need which key set (server.c), what the limits do
 * (ratelimit.c, proxy.c). */
#include "config.h"
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"
#include "infergate/buf.h"
#include "infergate/util.h"
#include "keys/keyset.h"

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* 64 hex digits (either case) into 32 bytes. Returns 0 or -1. */
static int parse_digest(const char *p, size_t n, unsigned char d[IG_DIGEST_LEN])
{
	if (n != 2 * IG_DIGEST_LEN)
		return -1;
	for (int i = 0; i < IG_DIGEST_LEN; i++) {
		int hi = hexval((unsigned char)p[2 * i]), lo = hexval((unsigned char)p[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		d[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

static void short_name(struct ig_keyent *k)
{
	char hex[2 * IG_DIGEST_LEN + 1];
	ig_keyset_hex(k->digest, hex);
	snprintf(k->name, sizeof(k->name), "%.12s", hex);
}

static size_t slot_of(const unsigned char d[IG_DIGEST_LEN], size_t cap)
{
	uint64_t h;
	memcpy(&h, d, sizeof(h));
	return (size_t)h & (cap - 1);
}

/* Builds the index. Returns 0 or -1 (out of memory). */
static int index_build(struct ig_keyset *ks)
{
	size_t cap = 16;
	while (cap < 2 * ks->n + 2)
		cap *= 2;
	ks->index = calloc(cap, sizeof(*ks->index));
	if (!ks->index)
		return -1;
	ks->index_cap = cap;
	for (size_t i = 0; i < ks->n; i++) {
		size_t s = slot_of(ks->v[i].digest, cap);
		while (ks->index[s])
			s = (s + 1) & (cap - 1);
		ks->index[s] = (uint32_t)(i + 1);
	}
	return 0;
}

const struct ig_keyent *ig_keyset_find(const struct ig_keyset *ks, const unsigned char d[IG_DIGEST_LEN])
{
	if (!ks->index_cap)
		return NULL;
	for (size_t s = slot_of(d, ks->index_cap);; s = (s + 1) & (ks->index_cap - 1)) {
		uint32_t i = ks->index[s];
		if (!i)
			return NULL;
		if (CRYPTO_memcmp(ks->v[i - 1].digest, d, IG_DIGEST_LEN) == 0)
			return &ks->v[i - 1];
	}
}

/* ---- the line format ---- */

static int load_lines(struct ig_keyset *ks, FILE *f, const char *what, const char *path, struct ig_buf *errs)
{
	char line[512];
	int lineno = 0;
	size_t cap = 0;

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
		unsigned char d[IG_DIGEST_LEN];
		if (end - p != 2 * IG_DIGEST_LEN) {
			ig_buf_printf(errs, "%s: %s:%d: expected a SHA-256 hex digest (64 hex digits, see infergate "
				      "--hash-key), got %zu characters\n", what, path, lineno, (size_t)(end - p));
			continue;
		}
		if (parse_digest(p, (size_t)(end - p), d) < 0) {
			ig_buf_printf(errs, "%s: %s:%d: not a hex digest\n", what, path, lineno);
			continue;
		}
		struct ig_keyent *v = ig_grow(ks->v, &cap, ks->n, sizeof(*v), 16);
		if (!v)
			return -1;
		ks->v = v;
		struct ig_keyent *k = &ks->v[ks->n++];
		*k = (struct ig_keyent){.priority = -1, .weight = 1};
		memcpy(k->digest, d, IG_DIGEST_LEN);
		short_name(k);
	}
	return 0;
}

/* ---- the JSON format ---- */

static bool good_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > IG_KEY_NAME_MAX)
		return false;
	for (const char *c = s; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("._:@-", *c))
			return false;
	return true;
}

/* An integer field in lo..hi into *out, or a problem. */
static void get_long(struct ig_buf *errs, const char *at, const char *field, json_t *x, long lo, long hi, long *out)
{
	if (json_is_integer(x) && json_integer_value(x) >= lo && json_integer_value(x) <= hi) {
		*out = (long)json_integer_value(x);
		return;
	}
	char *got = json_dumps(x, JSON_ENCODE_ANY | JSON_COMPACT);
	ig_buf_printf(errs, "%s: %s: must be an integer in %ld..%ld, got %.60s\n", at, field, lo, hi, got ? got : "?");
	free(got);
}

static void get_models(struct ig_buf *errs, const char *at, json_t *x, struct ig_keyent *k)
{
	if (!json_is_array(x) || json_array_size(x) == 0) {
		ig_buf_printf(errs, "%s: models: must be a non-empty list of model names (leave it out to allow "
			      "every model)\n", at);
		return;
	}
	k->models = calloc(json_array_size(x), sizeof(*k->models));
	if (!k->models)
		abort();
	for (size_t i = 0; i < json_array_size(x); i++) {
		const char *m = json_string_value(json_array_get(x, i));
		const char *why = m ? ig_conf_bad_model_name(m) : "not a string";
		if (why) {
			ig_buf_printf(errs, "%s: models[%zu]: %s\n", at, i, why);
			continue;
		}
		if (!(k->models[k->n_models++] = strdup(m)))
			abort();
	}
}

static const char *const fields_all = "name, sha256, priority, weight, max_inflight, rpm, tpm, models, status, "
				       "disabled";

static void parse_entry(struct ig_keyset *ks, json_t *o, size_t i, const char *where, bool with_limits,
			struct ig_buf *errs)
{
	struct ig_keyent *k = &ks->v[ks->n];
	char at[IG_KEY_NAME_MAX + 600];
	const char *name = json_string_value(json_object_get(o, "name"));

	*k = (struct ig_keyent){.priority = -1, .weight = 1};
	if (name && good_name(name))
		snprintf(at, sizeof(at), "%s: keys[%zu] '%s'", where, i, name);
	else
		snprintf(at, sizeof(at), "%s: keys[%zu]", where, i);
	if (!json_is_object(o)) {
		ig_buf_printf(errs, "%s: must be an object {\"name\": ..., \"sha256\": ...}\n", at);
		return;
	}
	bool have_digest = false;
	const char *field;
	json_t *x;
	json_object_foreach(o, field, x) {
		bool limit = true;
		if (strcmp(field, "name") == 0) {
			limit = false;
			if (!name || !good_name(name))
				ig_buf_printf(errs, "%s: name: must be 1..%d characters of letters, digits and ._:@-\n", at,
					      IG_KEY_NAME_MAX);
			else
				snprintf(k->name, sizeof(k->name), "%s", name);
		} else if (strcmp(field, "sha256") == 0) {
			limit = false;
			const char *s = json_string_value(x);
			if (!s || parse_digest(s, strlen(s), k->digest) < 0)
				ig_buf_printf(errs, "%s: sha256: must be the key's SHA-256 in 64 hex digits (infergate "
					      "--hash-key < KEYFILE prints it; never the key itself)\n", at);
			else
				have_digest = true;
		} else if (strcmp(field, "disabled") == 0) {
			limit = false;
			if (!json_is_boolean(x))
				ig_buf_printf(errs, "%s: disabled: must be true or false\n", at);
			k->disabled = json_is_true(x);
		} else if (strcmp(field, "status") == 0) {
			/* an admin key reads them anyway: a right of API keys only */
			if (!json_is_boolean(x))
				ig_buf_printf(errs, "%s: status: must be true or false\n", at);
			k->status = json_is_true(x);
		} else if (strcmp(field, "priority") == 0) {
			k->priority = json_is_string(x) ? ig_conf_class_parse(json_string_value(x)) : -1;
			if (k->priority < 0)
				ig_buf_printf(errs, "%s: priority: must be \"high\", \"normal\" or \"low\"\n", at);
		} else if (strcmp(field, "weight") == 0) {
			get_long(errs, at, field, x, 1, 1000, &k->weight);
		} else if (strcmp(field, "max_inflight") == 0) {
			get_long(errs, at, field, x, 0, 1000000, &k->max_inflight);
		} else if (strcmp(field, "rpm") == 0) {
			get_long(errs, at, field, x, 1, 1000000000L, &k->rpm);
		} else if (strcmp(field, "tpm") == 0) {
			get_long(errs, at, field, x, 1, 4000000000000L, &k->tpm);
		} else if (strcmp(field, "models") == 0) {
			get_models(errs, at, x, k);
		} else {
			ig_buf_printf(errs, "%s: unknown field '%.80s' (fields: %s)\n", at, field, fields_all);
			continue;
		}
		if (limit && !with_limits)
			ig_buf_printf(errs, "%s: %s: admin keys take only name, sha256 and disabled\n", at, field);
	}
	if (!json_object_get(o, "name"))
		ig_buf_printf(errs, "%s: name: missing (every key has a name: it is what logs and metrics show)\n", at);
	if (!json_object_get(o, "sha256"))
		ig_buf_printf(errs, "%s: sha256: missing (infergate --new-key NAME prints a key and its entry)\n", at);
	/* against the entries kept so far (an entry with a problem is not) */
	for (size_t j = 0; j < ks->n; j++) {
		if (k->name[0] && strcmp(ks->v[j].name, k->name) == 0)
			ig_buf_printf(errs, "%s: name: '%s' is also the name of keys[%zu]\n", at, k->name, j);
		if (have_digest && memcmp(ks->v[j].digest, k->digest, IG_DIGEST_LEN) == 0)
			ig_buf_printf(errs, "%s: sha256: the same digest as keys[%zu] '%s'\n", at, j, ks->v[j].name);
	}
}

static void entry_clear(struct ig_keyent *k)
{
	for (size_t i = 0; i < k->n_models; i++)
		free(k->models[i]);
	free(k->models);
	k->models = NULL;
	k->n_models = 0;
}

static int load_json(struct ig_keyset *ks, const char *what, const char *path, bool with_limits,
		     struct ig_buf *errs)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	char where[600];

	snprintf(where, sizeof(where), "%s %s", what, path);
	if (!root) {
		ig_buf_printf(errs, "%s:%d:%d: %s\n", where, jerr.line, jerr.column, jerr.text);
		return 0;
	}
	json_t *keys = json_object_get(root, "keys");
	const char *field;
	json_t *x;
	json_object_foreach(root, field, x)
		if (strcmp(field, "keys") != 0)
			ig_buf_printf(errs, "%s: unknown key '%.80s' (the file is {\"keys\": [...]})\n", where, field);
	if (!json_is_array(keys)) {
		ig_buf_printf(errs, "%s: must be an object {\"keys\": [{\"name\": ..., \"sha256\": ...}, ...]}\n", where);
		json_decref(root);
		return 0;
	}
	size_t n = json_array_size(keys);
	ks->v = calloc(n + 1, sizeof(*ks->v));
	if (!ks->v) {
		json_decref(root);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		size_t before = errs->len;
		parse_entry(ks, json_array_get(keys, i), i, where, with_limits, errs);
		if (errs->len == before)
			ks->n++;
		else
			entry_clear(&ks->v[ks->n]);
	}
	json_decref(root);
	return 0;
}

int ig_keyset_load(struct ig_keyset *ks, const char *what, const char *path, bool with_limits, char **err)
{
	struct ig_buf errs;
	int c, rc = 0;

	memset(ks, 0, sizeof(*ks));
	if (!path || !*path)
		return 0;
	FILE *f = fopen(path, "r");
	if (!f) {
		*err = ig_strdupf("%s: cannot read '%s': %s", what, path, strerror(errno));
		return -1;
	}
	ks->enabled = true;
	ig_buf_init(&errs);
	while ((c = getc(f)) != EOF && isspace(c))
		;
	ks->json = c == '{' || c == '[';
	rewind(f);
	if (ks->json) {
		fclose(f);
		rc = load_json(ks, what, path, with_limits, &errs);
	} else {
		rc = load_lines(ks, f, what, path, &errs);
		fclose(f);
	}
	if (rc == 0 && errs.len == 0 && index_build(ks) == 0) {
		ig_buf_free(&errs);
		return 0;
	}
	if (errs.len && errs.data[errs.len - 1] == '\n')
		errs.data[--errs.len] = '\0';
	*err = errs.len ? strdup(errs.data) : ig_strdupf("%s: out of memory", what);
	ig_buf_free(&errs);
	ig_keyset_free(ks);
	return -1;
}

void ig_keyset_free(struct ig_keyset *ks)
{
	for (size_t i = 0; i < ks->n; i++)
		entry_clear(&ks->v[i]);
	free(ks->v);
	free(ks->index);
	memset(ks, 0, sizeof(*ks));
}

static void sha256(const char *key, size_t len, unsigned char out[IG_DIGEST_LEN])
{
	unsigned int n = 0;
	EVP_Digest(key, len, out, &n, EVP_sha256(), NULL);
}

int ig_keyset_digest(const char *authorization, unsigned char out[IG_DIGEST_LEN])
{
	if (!authorization || strncasecmp(authorization, "Bearer ", 7) != 0)
		return -1;
	const char *key = authorization + 7;
	while (*key == ' ')
		key++;
	if (!*key)
		return -1;
	sha256(key, strlen(key), out);
	return 0;
}

int ig_keyset_client_digest(const char *authorization, const char *x_api_key, unsigned char out[IG_DIGEST_LEN])
{
	if (ig_keyset_digest(authorization, out) == 0)
		return 0;
	if (!x_api_key || !*x_api_key)
		return -1;
	sha256(x_api_key, strlen(x_api_key), out);
	return 0;
}

const struct ig_keyent *ig_keyset_check(const struct ig_keyset *ks, const char *authorization)
{
	unsigned char d[IG_DIGEST_LEN];
	if (ig_keyset_digest(authorization, d) < 0)
		return NULL;
	const struct ig_keyent *k = ig_keyset_find(ks, d);
	OPENSSL_cleanse(d, sizeof(d));
	return k;
}

void ig_keyset_hex(const unsigned char d[IG_DIGEST_LEN], char out[2 * IG_DIGEST_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < IG_DIGEST_LEN; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[2 * IG_DIGEST_LEN] = '\0';
}

int ig_keyset_unhex(const char *hex, unsigned char out[IG_DIGEST_LEN])
{
	return parse_digest(hex, strlen(hex), out);
}

void ig_keyset_hash(const char *key, size_t len, char out[2 * IG_DIGEST_LEN + 1])
{
	unsigned char d[IG_DIGEST_LEN];
	sha256(key, len, d);
	ig_keyset_hex(d, out);
}

bool ig_keyset_model_allowed(const struct ig_keyent *k, const char *model, const char *alias)
{
	if (!k || !k->models)
		return true;
	for (size_t i = 0; i < k->n_models; i++)
		if (strcmp(k->models[i], model) == 0 || (alias && strcmp(k->models[i], alias) == 0))
			return true;
	return false;
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag keyset_rows[] = {
	{.name = "--api-keys-file", .key = "api_keys_file", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(api_keys_file),
	 .def = "", .metavar = "FILE",
	 .help = "API keys: JSON {\"keys\": [{\"name\", \"sha256\", \"priority\", \"weight\", \"max_inflight\", "
		 "\"rpm\", \"tpm\", \"models\", \"status\", \"disabled\"}]} or one SHA-256 hex digest per line "
		 "(see --new-key, --hash-key); re-read on SIGHUP; empty = no keys needed"},
};
const struct ig_conf_part ig_keyset_conf = IG_CONF_PART(keyset_rows);
