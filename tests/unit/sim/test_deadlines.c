/* Unit tests for src/sim/deadlines.c: the running requests come out in
 * deadline order whatever order they went in and left, each knowing its
 * place. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "deadlines.h"
#include "infergate/util.h"
#include "../check_main.h"

#define N 1000

static void check_order(const struct sim_deadlines *h)
{
	for (size_t i = 0; i < h->len; i++) {
		ck_assert_int_eq(h->v[i]->heap_idx, (long)i);
		if (i)
			ck_assert_uint_le(h->v[(i - 1) / 2]->deadline_us, h->v[i]->deadline_us);
	}
}

START_TEST(deadline_order_through_pushes_removals_and_moves)
{
	static struct sim_req r[N];
	struct sim_deadlines h = {0};
	uint64_t st = 42;
	for (int i = 0; i < N; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].heap_idx = -1;
		r[i].deadline_us = ig_rand_next(&st) % 100000;
		sim_deadlines_push(&h, &r[i]);
	}
	check_order(&h);
	for (int i = 0; i < N; i += 3) /* every third leaves */
		sim_deadlines_remove(&h, &r[i]);
	sim_deadlines_remove(&h, &r[0]); /* out already: nothing */
	ck_assert_int_eq(r[0].heap_idx, -1);
	check_order(&h);
	for (int i = 1; i < N; i += 3) { /* some move later */
		r[i].deadline_us += 50000;
		sim_deadlines_later(&h, &r[i]);
	}
	check_order(&h);
	for (int i = 2; i < N; i += 3) /* others earlier, all at once */
		r[i].deadline_us /= 7;
	sim_deadlines_reorder(&h);
	check_order(&h);
	/* taken from the top, they come out sorted */
	uint64_t last = 0;
	size_t n = h.len;
	for (size_t k = 0; k < n; k++) {
		struct sim_req *top = h.v[0];
		ck_assert_uint_ge(top->deadline_us, last);
		last = top->deadline_us;
		sim_deadlines_remove(&h, top);
	}
	ck_assert_uint_eq(h.len, 0);
	sim_deadlines_free(&h);
	ck_assert_ptr_null(h.v);
}
END_TEST

IG_CHECK_MAIN("sim_deadlines", deadline_order_through_pushes_removals_and_moves)
