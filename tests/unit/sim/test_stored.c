/* Unit tests for the simulator's stored Responses (src/sim/stored.c): an
 * answer kept is found again by its id with what it takes to write it
 * again; the ring keeps the last SIM_STORED, the oldest going first; a long
 * model name is not kept in part. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "sim.h"
#include "stored.h"
#include "../check_main.h"

static void put(struct sim *s, long i, const char *model_json)
{
	struct sim_req r;
	memset(&r, 0, sizeof(r));
	snprintf(r.id, sizeof(r.id), "resp_%ld", i);
	snprintf(r.prev_id, sizeof(r.prev_id), "%s", i > 0 ? "resp_0" : "");
	r.model_json = (char *)model_json;
	r.created = 1700000000 + i;
	r.text_seed = (uint64_t)i * 7;
	r.prompt_tokens = 10 + i;
	r.n_tokens = 20 + i;
	r.length_cut = i % 2;
	sim_stored_put(s, &r);
}

START_TEST(an_answer_is_found_again_by_its_id)
{
	struct sim s;
	memset(&s, 0, sizeof(s));
	ck_assert_ptr_null(sim_stored_find(&s, "resp_0")); /* nothing kept yet */
	put(&s, 0, "\"llama\"");
	put(&s, 1, "\"llama\"");
	const struct sim_stored *e = sim_stored_find(&s, "resp_1");
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(e->prev_id, "resp_0");
	ck_assert_str_eq(e->model, "\"llama\"");
	ck_assert_int_eq(e->created, 1700000001);
	ck_assert_uint_eq(e->text_seed, 7);
	ck_assert_int_eq(e->prompt_tokens, 11);
	ck_assert_int_eq(e->n_tokens, 21);
	ck_assert(e->length_cut);
	ck_assert_ptr_null(sim_stored_find(&s, "resp_2"));
	ck_assert_ptr_null(sim_stored_find(&s, "resp_")); /* whole ids only */

	/* a model name too long to keep whole is not kept in part */
	char longname[300];
	memset(longname, 'm', sizeof(longname) - 1);
	longname[0] = '"';
	longname[sizeof(longname) - 2] = '"';
	longname[sizeof(longname) - 1] = '\0';
	put(&s, 2, longname);
	ck_assert_str_eq(sim_stored_find(&s, "resp_2")->model, "\"?\"");
	free(s.stored);
}
END_TEST

START_TEST(the_ring_keeps_the_last_ones)
{
	struct sim s;
	memset(&s, 0, sizeof(s));
	for (long i = 0; i < SIM_STORED + 10; i++)
		put(&s, i, "\"m\"");
	ck_assert_uint_eq(s.nstored, SIM_STORED + 10);
	for (long i = 0; i < 10; i++) { /* the oldest went */
		char id[32];
		snprintf(id, sizeof(id), "resp_%ld", i);
		ck_assert_ptr_null(sim_stored_find(&s, id));
	}
	char id[32];
	snprintf(id, sizeof(id), "resp_%ld", 10L);
	ck_assert_ptr_nonnull(sim_stored_find(&s, id));
	snprintf(id, sizeof(id), "resp_%ld", (long)SIM_STORED + 9);
	ck_assert_int_eq(sim_stored_find(&s, id)->n_tokens, 20 + SIM_STORED + 9);
	free(s.stored);
}
END_TEST

IG_CHECK_MAIN("stored", an_answer_is_found_again_by_its_id, the_ring_keeps_the_last_ones)
