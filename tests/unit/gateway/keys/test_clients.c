/* Unit tests for the clients' state by API key (src/gateway/keys/clients.c):
 * settings from the configuration and the keys file, buckets and usage
 * kept across reloads, keys that go with their last request. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "keys/clients.h"
#include "../../check_main.h"

/* Keys the configuration names keep their settings; others go with their
 * last request. */
START_TEST(keys_come_and_go)
{
	struct ig_clients s;
	ig_clients_init(&s);
	struct ig_key_conf kc = {.priority = IG_CLASS_LOW, .weight = 3, .max_inflight = 7};
	memset(kc.digest, 'a', 64);
	kc.digest[64] = '\0';
	struct ig_conf cfg = {.low_share_percent = 5, .keys = &kc, .n_keys = 1};
	ck_assert_int_eq(ig_clients_configure(&s, &cfg, NULL, 0), 0);
	struct ig_key *k = ig_clients_get(&s, kc.digest);
	ck_assert_int_eq(k->weight, 3);
	ck_assert_int_eq(k->klass, IG_CLASS_LOW);
	struct ig_key *t = ig_clients_get(&s, "other");
	t->refs++;
	ck_assert_uint_eq(s.nkeys, 2);
	ig_clients_release(&s, t);
	ck_assert_uint_eq(s.nkeys, 1);
	cfg.n_keys = 0;
	ig_clients_configure(&s, &cfg, NULL, 0);
	ck_assert_uint_eq(s.nkeys, 0);
	ig_clients_free(&s);
}
END_TEST

/* Keys of the keys file: found among 10,000 by digest, their buckets and
 * usage kept across a reload that keeps them, gone when left out. */
START_TEST(keys_file_keys_keep_their_buckets_across_reloads)
{
	struct ig_clients s;
	struct ig_conf cfg = {.low_share_percent = 5};
	struct ig_keyset ks = {0};
	ig_clients_init(&s);
	ks.n = 10000;
	ks.v = calloc(ks.n, sizeof(*ks.v));
	for (size_t i = 0; i < ks.n; i++) {
		ks.v[i] = (struct ig_keyent){.priority = -1, .weight = 1, .rpm = 60};
		memcpy(ks.v[i].digest, &i, sizeof(i));
	}
	ks.v[5].weight = 4;
	ck_assert_int_eq(ig_clients_configure(&s, &cfg, &ks, 1000), 0);
	ck_assert_uint_eq(s.nkeys, 10000);
	char hex[65];
	ig_keyset_hex(ks.v[5].digest, hex);
	struct ig_key *k = ig_clients_find(&s, hex);
	ck_assert_ptr_nonnull(k);
	ck_assert_ptr_eq(k->ent, &ks.v[5]);
	ck_assert_int_eq(k->weight, 4);
	ck_assert_int_eq(ig_bucket_remaining(&k->rpm), 60);
	k->rpm.level = 10; /* ten left */
	k->prompt_tokens = 99;
	/* reloaded with the same keys: the level and the usage stay */
	ck_assert_int_eq(ig_clients_configure(&s, &cfg, &ks, 1000), 0);
	ck_assert_ptr_eq(ig_clients_find(&s, hex), k);
	ck_assert_int_eq(ig_bucket_remaining(&k->rpm), 10);
	ck_assert_int_eq(k->prompt_tokens, 99);
	/* reloaded without them: unheld keys go, a held one waits for its request */
	k->refs++;
	ks.n = 0;
	ck_assert_int_eq(ig_clients_configure(&s, &cfg, &ks, 1000), 0);
	ck_assert_uint_eq(s.nkeys, 1);
	ck_assert_ptr_null(k->ent);
	ck_assert(k->rpm.limit == 0);
	ig_clients_release(&s, k);
	ck_assert_uint_eq(s.nkeys, 0);
	free(ks.v);
	ig_clients_free(&s);
}
END_TEST

IG_CHECK_MAIN("clients", keys_come_and_go, keys_file_keys_keep_their_buckets_across_reloads)
