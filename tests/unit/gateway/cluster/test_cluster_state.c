/* Unit tests for the view made from this gateway's tables
 * (src/gateway/cluster/cluster_state.c): a sync's states and the gateway's
 * backends, models and keys put in force as gw->cluster_view, read back
 * as the scheduler reads it; the state told to the others, whose claims
 * are what the next sync's caps are held to; capacity learning told a
 * backend's slots are shared; the keys' limits at an even split. */
#include "config.h"
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_state.h"
#include "fleet/backend.h"
#include "gateway.h"
#include "keys/clients.h"
#include "net/redismsg.h"
#include "sched/cluster_view.h"
#include "sched/scheduler.h"

#include "../../check_main.h"

#define URL "http://127.0.0.1:9"
#define KEY "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

struct fix {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_backend *b;
	struct ig_model *m;
	struct ig_cluster_state st;
};

static void fix_init(struct fix *f)
{
	static char *ma[] = {"model-a"};
	memset(f, 0, sizeof(*f));
	f->gw.cfg = &f->cfg;
	ig_sched_init(&f->gw.sched);
	ig_clients_init(&f->gw.clients);
	f->b = ig_backend_fleet_add(&f->gw.fleet, URL, 1, 0);
	ck_assert_ptr_nonnull(f->b);
	ck_assert_int_eq(ig_backend_set_models(f->b, ma, 1), 0);
	f->b->learn.reported = 8; /* it states 8 slots */
	f->b->learn.cur = 8;
	ck_assert_int_eq(ig_sched_rebuild(&f->gw.sched, &f->gw.fleet), 0);
	f->m = ig_sched_find(&f->gw.sched, "model-a");
	ck_assert_ptr_nonnull(f->m);
	f->st = (struct ig_cluster_state){.gw = &f->gw, .name = "gw-a", .sync_ms = 100, .live_last = 2,
					  .redis_now_ms = 1700000000000LL};
}

static void fix_free(struct fix *f)
{
	ig_cluster_state_free(&f->st);
	ck_assert_ptr_null(f->gw.cluster_view);
	ig_sched_free(&f->gw.sched);
	ig_clients_free(&f->gw.clients);
	ig_backend_fleet_free(&f->gw.fleet);
}

/* A sync's reply as ig_redismsg_sync leaves it: the others' states. */
static struct ig_sync sync_of(struct ig_state *st, size_t n, const char *const *texts)
{
	struct ig_redismsg_bad bad;
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(ig_redismsg_state(texts[i], strlen(texts[i]), &st[i], &bad) == 0, "%s", bad.why);
	return (struct ig_sync){.now = 1700000000000LL, .states = st, .nstates = n};
}

START_TEST(a_sync_is_put_in_force_whole)
{
	struct fix f;
	fix_init(&f);
	ck_assert_ptr_null(f.gw.cluster_view);
	atomic_store(&f.b->inflight, 2);
	const char *texts[] = {"g gw-b\nb " URL " 5\nm model-a 3\nh model-a 2\n"};
	struct ig_state st[1];
	struct ig_sync sy = sync_of(st, 1, texts);
	ig_cluster_state_take(&f.st, &sy);
	const struct ig_cluster_view *v = f.gw.cluster_view;
	ck_assert_ptr_nonnull(v);
	ck_assert_int_eq(ig_cluster_others_inflight(v, f.b), 5);
	ck_assert_int_eq(ig_cluster_others_waiting(v, "model-a"), 3);
	ck_assert_int_eq(ig_cluster_others_headroom(v, "model-a"), 2);
	ck_assert(f.b->learn.shared); /* capacity.c learns it as a total */
	ck_assert(f.st.hurry);
	/* nothing was claimed yet: none more until the others count a claim */
	ck_assert_int_eq(ig_cluster_claim_cap(v, f.b), -1);
	ck_assert(f.gw.drain_pending);

	/* the state it tells them claims its part (2 held, 1 free: 3) */
	char *text = ig_cluster_state_text(&f.st);
	ck_assert_ptr_nonnull(text);
	ck_assert_ptr_nonnull(strstr(text, "g gw-a\n"));
	ck_assert_ptr_nonnull(strstr(text, "b " URL " 3\n"));
	free(text);
	/* the next sync's reply counts that claim: 3 in force */
	f.gw.drain_pending = false;
	ig_cluster_state_take(&f.st, &sy);
	ck_assert_ptr_ne(f.gw.cluster_view, NULL);
	ck_assert_int_eq(ig_cluster_claim_cap(f.gw.cluster_view, f.b), 3);
	ck_assert(f.gw.drain_pending); /* more than before */

	/* alone (Redis away) after two gateways: an even part, nobody seen */
	ig_cluster_state_take(&f.st, NULL);
	ck_assert_int_eq(ig_cluster_others_inflight(f.gw.cluster_view, f.b), 0);
	ck_assert_int_eq(ig_cluster_claim_cap(f.gw.cluster_view, f.b), 4);
	ck_assert_int_eq(ig_cluster_others_waiting(f.gw.cluster_view, "model-a"), 0);
	fix_free(&f);
}
END_TEST

START_TEST(a_keys_limits_at_an_even_split)
{
	struct fix f;
	fix_init(&f);
	static struct ig_keyent ent = {.name = "team", .rpm = 60, .tpm = 6000};
	struct ig_key *k = ig_clients_get(&f.gw.clients, KEY);
	ck_assert_ptr_nonnull(k);
	k->ent = &ent;
	k->configured = true;
	ck_assert(ig_cluster_state_limited(k));
	ig_cluster_state_even(&f.st);
	ck_assert_double_eq_tol(k->share_req, 0.5, 1e-9);
	ck_assert_double_eq_tol(k->share_tok, 0.5, 1e-9);
	ck_assert_uint_eq(ig_cluster_retry_floor(f.gw.cluster_view, k), 2000); /* 60 s x 2 / 60 */
	ck_assert_double_eq(ig_cluster_others_req(f.gw.cluster_view, k), 0);
	/* a key with a max_inflight, 1 running, and another gateway holding 2
	 * of its 4: its part is claimed in the state */
	k->max_inflight = 4;
	k->inflight = 1;
	k->waiting = 1;
	const char *texts[] = {"g gw-b\nk " KEY " 1 1 2\n"};
	struct ig_state st[1];
	struct ig_sync sy = sync_of(st, 1, texts);
	ig_cluster_state_take(&f.st, &sy);
	char *text = ig_cluster_state_text(&f.st);
	ck_assert_ptr_nonnull(strstr(text, "k " KEY " 1 1 2\n")); /* 1 held, 1 free of its part */
	free(text);
	ig_cluster_state_take(&f.st, &sy);
	ck_assert_int_eq(ig_cluster_key_cap(f.gw.cluster_view, k), 2);
	ck_assert(!ig_cluster_key_capped(f.gw.cluster_view, k));
	/* the rate-limit part stays through a sync */
	ck_assert_uint_eq(ig_cluster_retry_floor(f.gw.cluster_view, k), 2000);
	k->ent = NULL;
	k->inflight = 0;
	k->waiting = 0;
	fix_free(&f);
}
END_TEST

IG_CHECK_MAIN("cluster_state", a_sync_is_put_in_force_whole, a_keys_limits_at_an_even_split)
