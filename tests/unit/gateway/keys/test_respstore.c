/* Unit tests for the Responses store (src/gateway/keys/respstore.c): an id put
 * is found with its backend until it expires; a window that is full gives
 * up its oldest entry; ids never put are unknown. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../../src/gateway/keys/respstore.c" /* to fill one window */
#include "../../check_main.h"

static int get(struct ig_respstore *r, const char *id, uint64_t now)
{
	return ig_respstore_get(r, id, strlen(id), 0, now);
}

START_TEST(found_until_it_expires)
{
	struct ig_respstore *r = ig_respstore_new();
	ck_assert_ptr_nonnull(r);
	uint64_t t = r->t0_ms;
	ig_respstore_put(r, "resp_a", 6, 3, 0, t);
	ig_respstore_put(r, "resp_b", 6, 5, 0, t + 1000);
	ck_assert_int_eq(get(r, "resp_a", t + 2000), 3);
	ck_assert_int_eq(get(r, "resp_b", t + 2000), 5);
	ck_assert_int_eq(get(r, "resp_c", t + 2000), -1);
	ig_respstore_put(r, "resp_a", 6, 4, 0, t + 3000); /* put again: the newer backend */
	ck_assert_int_eq(get(r, "resp_a", t + 3000), 4);
	ck_assert_int_eq(get(r, "resp_b", t + 1000 + IG_RESPSTORE_TTL_MS + 1000), -1);
	ck_assert_uint_eq(ig_respstore_bytes(r), sizeof(*r) + IG_RESPSTORE_SLOTS * 24);
	ig_respstore_free(r);
}
END_TEST

START_TEST(a_full_window_gives_up_its_oldest)
{
	struct ig_respstore *r = ig_respstore_new();
	uint64_t t = r->t0_ms;
	/* ids that land in one window: the first one's, found by search */
	char ids[WINDOW + 1][32];
	size_t base = (size_t)fingerprint(r, "seed", 4) & (IG_RESPSTORE_SLOTS - 1), k = 0;
	for (unsigned long i = 0; k < WINDOW + 1; i++) {
		char id[32];
		snprintf(id, sizeof(id), "resp_%lu", i);
		if (((size_t)fingerprint(r, id, strlen(id)) & (IG_RESPSTORE_SLOTS - 1)) == base)
			memcpy(ids[k++], id, sizeof(id));
	}
	for (size_t i = 0; i < WINDOW; i++)
		ig_respstore_put(r, ids[i], strlen(ids[i]), (int)i, 0, t + i * 1000);
	for (size_t i = 0; i < WINDOW; i++)
		ck_assert_int_eq(get(r, ids[i], t + 10000), (int)i);
	ig_respstore_put(r, ids[WINDOW], strlen(ids[WINDOW]), 99, 0, t + 20000);
	ck_assert_int_eq(get(r, ids[WINDOW], t + 20000), 99);
	ck_assert_int_eq(get(r, ids[0], t + 20000), -1); /* the oldest went */
	ck_assert_int_eq(get(r, ids[1], t + 20000), 1);
	ig_respstore_free(r);
}
END_TEST

START_TEST(another_keys_id_is_not_found)
{
	struct ig_respstore *r = ig_respstore_new();
	uint32_t alice = ig_respstore_owner("aa11"), bob = ig_respstore_owner("bb22");
	ck_assert_uint_ne(alice, 0);
	ck_assert_uint_ne(alice, bob);
	ck_assert_uint_eq(ig_respstore_owner(""), 0);
	ig_respstore_put(r, "resp_a", 6, 2, alice, r->t0_ms);
	ck_assert_int_eq(ig_respstore_get(r, "resp_a", 6, alice, r->t0_ms), 2);
	ck_assert_int_eq(ig_respstore_get(r, "resp_a", 6, bob, r->t0_ms), -1);
	ck_assert_int_eq(ig_respstore_get(r, "resp_a", 6, 0, r->t0_ms), -1);
	ig_respstore_free(r);
}
END_TEST

IG_CHECK_MAIN("respstore", found_until_it_expires, a_full_window_gives_up_its_oldest, another_keys_id_is_not_found)
