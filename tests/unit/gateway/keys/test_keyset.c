/* Unit tests for the keys file (src/gateway/keys/keyset.c): both formats, every
 * problem listed with its entry and field, lookups among 10,000 keys,
 * allowed models. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../check_main.h"
#include "infergate/buf.h"
#include "keys/keyset.h"

static char *write_tmp(const char *text)
{
	static char path[64];
	snprintf(path, sizeof(path), "/tmp/ig-keyset-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static const char *hex_of(const char *key)
{
	static char hex[65];
	ig_keyset_hash(key, strlen(key), hex);
	return hex;
}

START_TEST(line_format_keys_have_no_settings)
{
	char text[300], *err = NULL;
	struct ig_keyset ks;
	snprintf(text, sizeof(text), "# comment\n\n  %s  \n", hex_of("alpha"));
	char *path = write_tmp(text);
	ck_assert_int_eq(ig_keyset_load(&ks, "api_keys_file", path, true, &err), 0);
	ck_assert(ks.enabled && !ks.json);
	ck_assert_uint_eq(ks.n, 1);
	const struct ig_keyent *e = ig_keyset_check(&ks, "Bearer alpha");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(e->name, "8ed3f6ad685b"); /* 12 digits of its digest */
	ck_assert(!e->rpm && !e->tpm && !e->models && !e->disabled && e->weight == 1 && e->priority == -1);
	ck_assert_ptr_null(ig_keyset_check(&ks, "Bearer beta"));
	ck_assert_ptr_null(ig_keyset_check(&ks, "alpha"));
	ck_assert_ptr_null(ig_keyset_check(&ks, NULL));
	ig_keyset_free(&ks);
	unlink(path);
}
END_TEST

START_TEST(json_entries_carry_settings)
{
	char text[1200], *err = NULL;
	struct ig_keyset ks;
	int n = snprintf(text, sizeof(text), "{\"keys\": [{\"name\": \"team-a\", \"sha256\": \"%s\", \"priority\": "
			 "\"low\", \"weight\": 3, \"max_inflight\": 8, \"rpm\": 60, \"tpm\": 90000, \"models\": [\"m1\", "
			 "\"m2\"]},", hex_of("a"));
	snprintf(text + n, sizeof(text) - (size_t)n, " {\"name\": \"b@x.org\", \"sha256\": \"%s\", \"disabled\": true, "
		 "\"status\": true}]}", hex_of("b"));
	char *path = write_tmp(text);
	ck_assert_msg(ig_keyset_load(&ks, "api_keys_file", path, true, &err) == 0, "%s", err);
	ck_assert(ks.json);
	const struct ig_keyent *a = ig_keyset_check(&ks, "Bearer a"), *b = ig_keyset_check(&ks, "Bearer b");
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_str_eq(a->name, "team-a");
	ck_assert_int_eq(a->priority, 2);
	ck_assert_int_eq(a->weight, 3);
	ck_assert_int_eq(a->max_inflight, 8);
	ck_assert_int_eq(a->rpm, 60);
	ck_assert_int_eq(a->tpm, 90000);
	ck_assert(ig_keyset_model_allowed(a, "m2", NULL));
	ck_assert(ig_keyset_model_allowed(a, "served", "m1")); /* asked by an allowed alias */
	ck_assert(!ig_keyset_model_allowed(a, "m3", NULL));
	ck_assert(ig_keyset_model_allowed(b, "anything", NULL));
	ck_assert(b->disabled);
	ck_assert(b->status && !a->status); /* the status right: given, or not */
	ig_keyset_free(&ks);
	/* The admin file takes names, digests and disabled only. */
	ck_assert_int_eq(ig_keyset_load(&ks, "admin_keys_file", path, false, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "keys[0] 'team-a': rpm: admin keys take only"));
	free(err);
	unlink(path);
}
END_TEST

START_TEST(every_problem_is_listed)
{
	char text[1200], *err = NULL;
	struct ig_keyset ks;
	snprintf(text, sizeof(text),
		 "{\"keys\": [{\"name\": \"ok\", \"sha256\": \"%s\"}, {\"name\": \"x y\", \"sha256\": \"12\"},"
		 " {\"name\": \"r\", \"sha256\": \"%s\", \"rpm\": \"60\", \"tpm\": 0, \"disabled\": 1, \"oops\": 1,"
		 " \"status\": \"yes\"},"
		 " 7], \"extra\": 1}", hex_of("a"), hex_of("a"));
	char *path = write_tmp(text);
	ck_assert_int_eq(ig_keyset_load(&ks, "api_keys_file", path, true, &err), -1);
	const char *want[] = {"unknown key 'extra'", "keys[1]: name: must be 1..64 characters",
			      "keys[1]: sha256: must be the key's SHA-256", "keys[2] 'r': rpm: must be an integer in "
			      "1..1000000000, got \"60\"", "keys[2] 'r': tpm: must be an integer", "keys[2] 'r': disabled: "
			      "must be true or false", "keys[2] 'r': unknown field 'oops'",
			      "keys[2] 'r': status: must be true or false", "keys[2] 'r': sha256: the same "
			      "digest as keys[0] 'ok'", "keys[3]: must be an object"};
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		ck_assert_msg(strstr(err, want[i]), "missing '%s' in:\n%s", want[i], err);
	ck_assert_uint_eq(ks.n, 0); /* nothing kept */
	free(err);
	unlink(path);
	path = write_tmp("{\"keys\": [");
	ck_assert_int_eq(ig_keyset_load(&ks, "api_keys_file", path, true, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, path));
	free(err);
	unlink(path);
	ck_assert_int_eq(ig_keyset_load(&ks, "api_keys_file", "/nonexistent/keys", true, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "cannot read '/nonexistent/keys'"));
	free(err);
}
END_TEST

START_TEST(ten_thousand_keys_are_found_by_digest)
{
	struct ig_buf b;
	char *err = NULL;
	struct ig_keyset ks;
	ig_buf_init(&b);
	for (int i = 0; i < 10000; i++) {
		char key[32];
		snprintf(key, sizeof(key), "key-%d", i);
		ig_buf_printf(&b, "%s\n", hex_of(key));
	}
	ig_buf_append(&b, "", 1);
	char *path = write_tmp(b.data);
	ig_buf_free(&b);
	ck_assert_int_eq(ig_keyset_load(&ks, "api_keys_file", path, true, &err), 0);
	ck_assert_uint_eq(ks.n, 10000);
	ck_assert_uint_ge(ks.index_cap, 20000);
	for (int i = 0; i < 10000; i += 7) {
		char auth[40];
		snprintf(auth, sizeof(auth), "Bearer key-%d", i);
		const struct ig_keyent *e = ig_keyset_check(&ks, auth);
		ck_assert_ptr_nonnull(e);
		ck_assert_ptr_eq(e, &ks.v[i]);
	}
	ck_assert_ptr_null(ig_keyset_check(&ks, "Bearer key-10000"));
	ig_keyset_free(&ks);
	unlink(path);
}
END_TEST

/* A client's key in Authorization: Bearer, else in Anthropic's x-api-key:
 * the same digest for the same key either way; the bearer key wins. */
START_TEST(a_key_in_x_api_key_is_the_same_key)
{
	unsigned char a[IG_DIGEST_LEN], b[IG_DIGEST_LEN], c[IG_DIGEST_LEN];
	ck_assert_int_eq(ig_keyset_client_digest("Bearer sk-one", NULL, a), 0);
	ck_assert_int_eq(ig_keyset_client_digest(NULL, "sk-one", b), 0);
	ck_assert_mem_eq(a, b, IG_DIGEST_LEN);
	ck_assert_int_eq(ig_keyset_client_digest("Bearer sk-one", "sk-two", c), 0);
	ck_assert_mem_eq(a, c, IG_DIGEST_LEN);
	ck_assert_int_eq(ig_keyset_client_digest("Basic xyz", "sk-one", c), 0); /* no bearer: the header */
	ck_assert_mem_eq(a, c, IG_DIGEST_LEN);
	ck_assert_int_eq(ig_keyset_client_digest(NULL, NULL, c), -1);
	ck_assert_int_eq(ig_keyset_client_digest("Bearer ", "", c), -1);
}
END_TEST

IG_CHECK_MAIN("keyset", line_format_keys_have_no_settings, json_entries_carry_settings, every_problem_is_listed,
	      ten_thousand_keys_are_found_by_digest, a_key_in_x_api_key_is_the_same_key)
