/* Unit tests for the arithmetic of a cluster's shares
 * (src/gateway/cluster/cluster_share.c): scripted states of the other gateways, as
 * redismsg.c checked them, and this gateway's, made into the view that the
 * scheduler, the policies and admission read (cluster_view.h); the numbers
 * asserted are those readers': the others' slots on a backend, this
 * gateway's cap there and on a key, the others' waiting and headroom for a
 * model, a key's shares of its limits. */
#include "config.h"
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster_share.h"
#include "fleet/backend.h"
#include "keys/clients.h"
#include "net/redismsg.h"
#include "sched/cluster_view.h"

#include "../../check_main.h"

#define URL_A "http://10.0.0.1:8000"
#define URL_B "http://10.0.0.2:8000"
#define KEY "5f2b5e5a7d5d4e0b8c1f3a2e9d6c7b8a5f2b5e5a7d5d4e0b8c1f3a2e9d6c7b8a"

/* The others' states, checked as a sync's reply's are. */
struct script {
	struct ig_state st[8];
	size_t n;
};

static void state(struct script *s, const char *text)
{
	struct ig_redismsg_bad bad;
	ck_assert_msg(ig_redismsg_state(text, strlen(text), &s->st[s->n], &bad) == 0, "refused: %s", bad.why);
	s->n++;
}

/* A sync of this gateway ("gw-a") with the scripted others. */
static struct ig_share_sync sync_of(const struct script *s, long live_last, uint64_t now,
				    const struct ig_cluster_view *prev)
{
	return (struct ig_share_sync){.joined = s != NULL, .states = s ? s->st : NULL, .nstates = s ? s->n : 0,
				      .live_last = live_last, .now_ms = now, .redis_now_ms = 1700000000000LL,
				      .sync_ms = 100, .prev = prev};
}

static const struct ig_share_model model_a = {.name = "model-a"};

/* Reads as the scheduler does: through the view's functions. */
static struct ig_backend backend(int id, const char *url)
{
	return (struct ig_backend){.id = id, .url = (char *)url};
}

START_TEST(two_gateways_split_a_backends_free_slots)
{
	/* a backend that states 8 slots; gw-b runs 5 there, gw-a 2; nothing
	 * waits anywhere: all weigh the same */
	struct script s = {0};
	state(&s, "g gw-b\nb " URL_A " 5\n");
	struct ig_share_backend b = {.id = 1, .url = URL_A, .inflight = 2, .sent = 2, .cur = 8, .stated = true};
	struct ig_share_mine me = {.name = "gw-a", .backends = &b, .nbackends = 1, .models = &model_a, .nmodels = 1};
	struct ig_share_news news;
	struct ig_share_sync sy = sync_of(&s, 2, 1000, NULL);
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	ck_assert_ptr_nonnull(v);
	struct ig_backend be = backend(1, URL_A);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &be), 5);
	/* the one slot free is its: 3, in force once the others counted it
	 * (it told them 2) */
	ck_assert_int_eq(ig_cluster_view_backend(v, 1)->claim_next, 3);
	ck_assert_int_eq(ig_cluster_claim_cap(v, &be), 2);
	ck_assert(ig_cluster_view_backend(v, 1)->shared);
	ck_assert(v->joined);

	/* gw-b computing from the same claims: together no more than 8 */
	struct script t = {0};
	state(&t, "g gw-a\nb " URL_A " 2\n");
	struct ig_share_backend bb = {.id = 7, .url = URL_A, .inflight = 5, .sent = 5, .cur = 8, .stated = true};
	struct ig_share_mine them = {.name = "gw-b", .backends = &bb, .nbackends = 1};
	struct ig_share_sync sy2 = sync_of(&t, 2, 1000, NULL);
	struct ig_cluster_view *w = ig_cluster_share_view(&sy2, &them, &news);
	ck_assert_ptr_nonnull(w);
	ck_assert_int_le(ig_cluster_view_backend(v, 1)->claim_next + ig_cluster_view_backend(w, 7)->claim_next, 8);
	ck_assert_int_eq(ig_cluster_view_backend(w, 7)->others_inflight, 2);

	/* a backend without a stated capacity (max_inflight set, or no
	 * reports): nobody else's requests are subtracted, no cap */
	b.stated = false;
	ig_cluster_view_free(v);
	v = ig_cluster_share_view(&sy, &me, &news);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &be), 0);
	ck_assert_int_eq(ig_cluster_claim_cap(v, &be), 0);
	ig_cluster_view_free(v);
	ig_cluster_view_free(w);
}
END_TEST

START_TEST(three_gateways_waiting_for_a_model)
{
	struct script s = {0};
	state(&s, "g gw-b\nm model-a 3\nh model-a 4\n");
	state(&s, "g gw-c\nm model-a 2\nm model-x 9\n"); /* a model this gateway has no entry for */
	struct ig_share_model models[] = {{.name = "model-a", .qlen = 1}, {.name = "model-b", .qlen = 2}};
	struct ig_share_mine me = {.name = "gw-a", .models = models, .nmodels = 2};
	struct ig_share_news news;
	struct ig_share_sync sy = sync_of(&s, 3, 1000, NULL);
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	ck_assert_int_eq(ig_cluster_others_waiting(v, "model-a"), 5);
	ck_assert_int_eq(ig_cluster_others_headroom(v, "model-a"), 4);
	ck_assert_int_eq(ig_cluster_others_waiting(v, "model-b"), 0);
	ck_assert_int_eq(ig_cluster_others_waiting(v, "model-x"), 0);
	ck_assert(v->hurry); /* they hold interactive work waiting: sync sooner */
	uint64_t run = ig_cluster_waiting_run(v, "model-a");
	ck_assert_uint_ne(run, 0);
	ck_assert_uint_eq(ig_cluster_waiting_run(v, "model-b"), 0);
	/* model-b's requests wait here and nobody else's hold them back: drain */
	ck_assert(news.drain);

	/* the next sync: they still wait, the same run */
	sy.prev = v;
	struct ig_cluster_view *w = ig_cluster_share_view(&sy, &me, &news);
	ck_assert_uint_eq(w->seq, v->seq + 1);
	ck_assert_uint_eq(ig_cluster_waiting_run(w, "model-a"), run);
	/* then they do not, then they do again: a new run */
	struct script none = {0};
	state(&none, "g gw-b\n");
	state(&none, "g gw-c\n");
	struct ig_share_sync sy3 = sync_of(&none, 3, 1100, w);
	struct ig_cluster_view *x = ig_cluster_share_view(&sy3, &me, &news);
	ck_assert_uint_eq(ig_cluster_waiting_run(x, "model-a"), 0);
	ck_assert(!x->hurry);
	struct ig_share_sync sy4 = sync_of(&s, 3, 1200, x);
	struct ig_cluster_view *y = ig_cluster_share_view(&sy4, &me, &news);
	ck_assert_uint_ne(ig_cluster_waiting_run(y, "model-a"), run);
	ck_assert_uint_ne(ig_cluster_waiting_run(y, "model-a"), 0);
	ig_cluster_view_free(v);
	ig_cluster_view_free(w);
	ig_cluster_view_free(x);
	ig_cluster_view_free(y);
}
END_TEST

START_TEST(a_gateway_gone_stale_leaves_its_slots)
{
	struct script s = {0};
	state(&s, "g gw-b\nb " URL_A " 6\n");
	struct ig_share_backend b = {.id = 1, .url = URL_A, .inflight = 2, .sent = 2, .cur = 8, .stated = true};
	struct ig_share_key k = {.digest = KEY, .inflight = 1, .weight = 1, .max_inflight = 4, .sent = 1, .completed = 3};
	struct ig_share_mine me = {.name = "gw-a", .backends = &b, .nbackends = 1, .keys = &k, .nkeys = 1};
	struct ig_share_news news;
	struct ig_share_sync sy = sync_of(&s, 2, 1000, NULL);
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	struct ig_backend be = backend(1, URL_A);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &be), 6);
	ck_assert_int_eq(ig_cluster_claim_cap(v, &be), 2); /* 2 + 6 of 8: none free */

	/* gw-b's state expired (Redis dropped it after the live window): this
	 * gateway is the only live one; no cap, nobody else there, and the
	 * scheduler is told to look at its queue again */
	struct script alone = {0};
	struct ig_share_sync sy2 = sync_of(&alone, 2, 1400, v);
	struct ig_cluster_view *w = ig_cluster_share_view(&sy2, &me, &news);
	ck_assert_int_eq(ig_cluster_others_inflight(w, &be), 0);
	ck_assert_int_eq(ig_cluster_claim_cap(w, &be), 0);
	ck_assert(news.drain);
	struct ig_key key = {.digest = KEY, .max_inflight = 4, .inflight = 1};
	ck_assert_int_eq(ig_cluster_key_cap(w, &key), 0); /* all of its max_inflight */

	/* Redis away (not joined) after seeing 2 gateways: each keeps its even
	 * part of what it shares, as the others it saw still send there */
	struct ig_share_sync sy3 = sync_of(NULL, 2, 1500, w);
	struct ig_cluster_view *x = ig_cluster_share_view(&sy3, &me, &news);
	ck_assert(!x->joined);
	ck_assert_int_eq(ig_cluster_others_inflight(x, &be), 0);
	ck_assert_int_eq(ig_cluster_claim_cap(x, &be), 4);
	ck_assert_int_eq(ig_cluster_key_cap(x, &key), 2);
	ck_assert(news.drain);
	ig_cluster_view_free(v);
	ig_cluster_view_free(w);
	ig_cluster_view_free(x);
}
END_TEST

START_TEST(a_key_split_across_gateways)
{
	/* key KEY has max_inflight 4; 3 wait here, none run; at gw-b 2 wait
	 * and it holds 2 */
	struct script s = {0};
	state(&s, "g gw-b\nk " KEY " 2 1 2\n");
	struct ig_share_key k = {.digest = KEY, .waiting = 3, .weight = 1, .max_inflight = 4, .sent = 0};
	struct ig_share_mine me = {.name = "gw-a", .keys = &k, .nkeys = 1};
	struct ig_share_news news;
	struct ig_share_sync sy = sync_of(&s, 2, 1000, NULL);
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	struct ig_key key = {.digest = KEY, .max_inflight = 4, .inflight = 0};
	/* its part is the 2 free, but it told the others it holds none: none
	 * more until they count it */
	ck_assert_int_eq(ig_cluster_view_key(v, KEY)->claim_next, 2);
	ck_assert_int_eq(ig_cluster_key_cap(v, &key), -1);
	ck_assert(ig_cluster_key_capped(v, &key));
	/* the next state claims 2 (my_state: its cap when higher than its
	 * requests): in force */
	k.sent = 2;
	sy.prev = v;
	struct ig_cluster_view *w = ig_cluster_share_view(&sy, &me, &news);
	ck_assert_int_eq(ig_cluster_key_cap(w, &key), 2);
	ck_assert(!ig_cluster_key_capped(w, &key));
	key.inflight = 2;
	ck_assert(ig_cluster_key_capped(w, &key));
	/* gw-b computes its part from the same claims: 2 and 2 of 4 */
	struct script t = {0};
	state(&t, "g gw-a\nk " KEY " 3 1 2\n");
	struct ig_share_key kb = {.digest = KEY, .waiting = 2, .weight = 1, .max_inflight = 4, .inflight = 2, .sent = 2};
	struct ig_share_mine them = {.name = "gw-b", .keys = &kb, .nkeys = 1};
	struct ig_share_sync syb = sync_of(&t, 2, 1000, NULL);
	struct ig_cluster_view *x = ig_cluster_share_view(&syb, &them, &news);
	ck_assert_int_le(ig_cluster_view_key(w, KEY)->claim_next + ig_cluster_view_key(x, KEY)->claim_next, 4);
	/* a key this gateway has not run for 10 s claims nothing */
	struct ig_share_key idle = {.digest = KEY, .weight = 1, .max_inflight = 4};
	struct ig_share_mine me2 = {.name = "gw-a", .keys = &idle, .nkeys = 1};
	struct ig_share_sync late = sync_of(&s, 2, 1000 + 10001, w);
	struct ig_cluster_view *y = ig_cluster_share_view(&late, &me2, &news);
	ck_assert_int_eq(ig_cluster_key_cap(y, &key), -1);
	/* a key with no max_inflight is never capped, whatever the others */
	struct ig_key free_key = {.digest = KEY, .inflight = 100};
	ck_assert(!ig_cluster_key_capped(y, &free_key));
	ig_cluster_view_free(v);
	ig_cluster_view_free(w);
	ig_cluster_view_free(x);
	ig_cluster_view_free(y);
}
END_TEST

START_TEST(a_backend_only_one_gateway_sees)
{
	/* gw-b runs on a backend this gateway does not have, and not on ours */
	struct script s = {0};
	state(&s, "g gw-b\nb " URL_B " 7\n");
	struct ig_share_backend b = {.id = 3, .url = URL_A, .inflight = 1, .sent = 1, .cur = 4, .stated = true};
	struct ig_share_mine me = {.name = "gw-a", .backends = &b, .nbackends = 1};
	struct ig_share_news news;
	struct ig_share_sync sy = sync_of(&s, 2, 1000, NULL);
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	struct ig_backend be = backend(3, URL_A), other = backend(4, URL_B);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &be), 0);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &other), 0); /* not in the view */
	ck_assert_int_eq(ig_cluster_claim_cap(v, &other), 0);
	/* its part: what it holds and half the 3 free (gw-b weighs the same),
	 * the odd one by turn; never more than the 4 there are */
	long next = ig_cluster_view_backend(v, 3)->claim_next;
	ck_assert_int_ge(next, 2);
	ck_assert_int_le(next, 3);
	ig_cluster_view_free(v);
}
END_TEST

START_TEST(hostile_numbers_already_validated)
{
	/* the largest numbers redismsg.c lets through, from three gateways:
	 * sums far from overflowing, and no slot more for this one */
	struct script s = {0};
	const char *names[] = {"gw-b", "gw-c", "gw-d"};
	char *kept[3];
	for (size_t i = 0; i < 3; i++) {
		char text[512];
		snprintf(text, sizeof(text), "g %s\nb " URL_A " 1000000000\nm model-a 1000000000\nh model-a 1000000000\n"
			 "k " KEY " 1000000000 1000 1000000000\n", names[i]);
		kept[i] = strdup(text); /* the state points into its text */
		state(&s, kept[i]);
	}
	struct ig_share_backend b = {.id = 1, .url = URL_A, .inflight = 1, .sent = 1, .cur = 8, .stated = true};
	struct ig_share_key k = {.digest = KEY, .waiting = 1, .weight = 1, .max_inflight = 4, .inflight = 1, .sent = 1};
	struct ig_share_mine me = {.name = "gw-a", .backends = &b, .nbackends = 1, .models = &model_a, .nmodels = 1,
				   .keys = &k, .nkeys = 1};
	struct ig_share_news news;
	struct ig_share_sync sy = sync_of(&s, 4, 1000, NULL);
	struct ig_cluster_view *v = ig_cluster_share_view(&sy, &me, &news);
	ck_assert_ptr_nonnull(v);
	struct ig_backend be = backend(1, URL_A);
	ck_assert_int_eq(ig_cluster_others_inflight(v, &be), 3000000000L);
	ck_assert_int_eq(ig_cluster_others_waiting(v, "model-a"), 3000000000L);
	ck_assert_int_eq(ig_cluster_others_headroom(v, "model-a"), 3000000000L);
	/* what it holds it keeps (its fair part is at least that), nothing more */
	ck_assert_int_eq(ig_cluster_claim_cap(v, &be), 1);
	struct ig_key key = {.digest = KEY, .max_inflight = 4, .inflight = 1};
	ck_assert_int_eq(ig_cluster_key_cap(v, &key), 1);
	ck_assert(ig_cluster_key_capped(v, &key));
	for (size_t i = 0; i < 3; i++)
		free(kept[i]);
	ig_cluster_view_free(v);
}
END_TEST

START_TEST(a_keys_shares_of_its_limits)
{
	struct ig_cluster_view_key e = {0};
	double req, tok;
	/* this gateway asked 3 of 10 requests/s, 300 of 1000 tokens; the
	 * others' buckets held more than the whole limit (cut to it) */
	struct ig_key_figures f = {.mreq = 3, .mtok = 300, .req = 10, .tok = 1000, .lreq = 1e12, .ltok = 5};
	ig_cluster_share_key_figures(&e, &f, 60, 6000, 2, &req, &tok);
	struct ig_key_figures g = {.mreq = 7, .mtok = 700, .req = 10, .tok = 1000};
	double req2, tok2;
	struct ig_cluster_view_key e2 = {.digest = KEY};
	ig_cluster_share_key_figures(&e2, &g, 60, 6000, 2, &req2, &tok2);
	ck_assert_double_eq_tol(req + req2, 1.0, 1e-9);
	ck_assert_double_eq_tol(tok + tok2, 1.0, 1e-9);
	ck_assert(req < req2);
	ck_assert_double_eq(e.others_req, 60);
	ck_assert_double_eq(e.others_tok, 5);
	ck_assert_uint_eq(e.retry_floor_ms, 2000); /* 60 s x 2 gateways / 60 rpm */
	ck_assert_double_eq_tol(ig_cluster_share_key_even(&e, 60, 3), 1.0 / 3, 1e-9);
	ck_assert_double_eq(e.others_req, 0);
	ck_assert_uint_eq(e.retry_floor_ms, 3000);
	ck_assert_double_eq_tol(ig_cluster_share_key_even(&e, 60, 1), 1.0, 1e-9);
	ck_assert_uint_eq(e.retry_floor_ms, 0); /* alone: no floor */

	/* the view read by admission: the key sync's entry, nothing else changed */
	struct ig_share_key k = {.digest = KEY, .max_inflight = 0};
	struct ig_cluster_view *v = ig_cluster_share_rekey(NULL, &k, 1);
	v->keys[0] = e2;
	ig_cluster_view_seal(v);
	struct ig_key key = {.digest = KEY};
	ck_assert_double_eq(ig_cluster_others_req(v, &key), 0);
	ck_assert_uint_eq(ig_cluster_retry_floor(v, &key), 2000);
	ck_assert_uint_eq(ig_cluster_retry_floor(NULL, &key), 0); /* no cluster */
	ig_cluster_view_free(v);
}
END_TEST

/* A gateway's share of a key's limit (moved from test_redis.c): even with no demand,
 * following demand otherwise, a small part kept by the idle; shares add up
 * to 1 over gateways that see the same figures. */
START_TEST(limit_shares_follow_demand)
{
	ck_assert_double_eq_tol(ig_cluster_share(0, 0, 4), 0.25, 1e-9);
	ck_assert_double_eq_tol(ig_cluster_share(0, 0, 1), 1.0, 1e-9);
	ck_assert_double_eq_tol(ig_cluster_share(5, 15, 4), 0.25, 1e-9); /* spread evenly: a quarter */
	double busy = ig_cluster_share(10, 0, 4), idle = ig_cluster_share(0, 10, 4);
	ck_assert(busy > 0.93 && busy < 0.94);                          /* (10 + 0.25) / 11 */
	ck_assert_double_eq_tol(busy + 3 * idle, 1.0, 1e-9);
	double a = ig_cluster_share(3, 7, 2), b = ig_cluster_share(7, 3, 2);
	ck_assert_double_eq_tol(a + b, 1.0, 1e-9);
	ck_assert(a < b);
	ck_assert_double_eq_tol(ig_cluster_share(-1, -1, 0), 1.0, 1e-9); /* nonsense in: alone */
}
END_TEST

static long claim(long total, const long *held, const double *w, size_t n, size_t me, unsigned long long turn)
{
	return ig_cluster_claim(total, held, w, n, me, turn);
}

START_TEST(slots_split_by_weight_and_never_beyond_the_total)
{
	long none[3] = {0, 0, 0};
	double even[3] = {1, 1, 1}, w13[2] = {1, 3};
	/* nothing held, equal weights: 8 slots as 4 and 4; 7 as 3 and 4 in
	 * some order, the odd one turning with `turn` */
	ck_assert_int_eq(claim(8, none, even, 2, 0, 0), 4);
	ck_assert_int_eq(claim(8, none, even, 2, 1, 0), 4);
	for (unsigned long long t = 0; t < 4; t++) {
		long a = claim(7, none, even, 2, 0, t), b = claim(7, none, even, 2, 1, t);
		ck_assert_int_eq(a + b, 7);
		ck_assert(a == 3 || a == 4);
	}
	/* weights 1 and 3 (a key of weight 1 waits at one, of 3 at the other) */
	ck_assert_int_eq(claim(8, none, w13, 2, 0, 0), 2);
	ck_assert_int_eq(claim(8, none, w13, 2, 1, 0), 6);
	/* one holds all 8 while the other, of weight 3, waits: cut to its 2 */
	long all[2] = {8, 0};
	ck_assert_int_eq(claim(8, all, w13, 2, 0, 0), 2);
	ck_assert_int_eq(claim(8, all, w13, 2, 1, 0), -1); /* none free yet */
	/* both hold 8 of 8 (each ran alone while Redis was away): each cut to
	 * its fair part, not both holding on for good */
	long both[2] = {8, 8};
	ck_assert_int_eq(claim(8, both, w13, 2, 0, 0), 2);
	ck_assert_int_eq(claim(8, both, w13, 2, 1, 0), 6);
	/* with nothing waiting (weight 0) while the other waits: it keeps what
	 * it holds (take_states decides when it lets go) and gets no part */
	long some[2] = {3, 1};
	double idle[2] = {0, 1};
	ck_assert_int_eq(claim(8, some, idle, 2, 0, 0), 3);
	ck_assert_int_eq(claim(8, some, idle, 2, 1, 0), 5);
	/* any claims and weights: together no more than the total */
	srand(7);
	for (int round = 0; round < 20000; round++) {
		size_t n = 1 + (size_t)(rand() % 5);
		long total = 1 + rand() % 40, held[5], left = total, sum = 0;
		double w[5];
		for (size_t g = 0; g < n; g++) {
			held[g] = left > 0 ? rand() % (left + 1) : 0;
			left -= held[g];
			w[g] = rand() % 3 == 0 ? 0 : (double)(1 + rand() % 4);
		}
		unsigned long long turn = (unsigned long long)rand();
		for (size_t g = 0; g < n; g++) {
			long c = claim(total, held, w, n, g, turn);
			sum += c > 0 ? c : 0;
		}
		ck_assert_msg(sum <= total, "round %d: %ld of %ld", round, sum, total);
	}
}
END_TEST

START_TEST(no_figure_that_is_not_a_number_lifts_a_share)
{
	const double odd[] = {NAN, -NAN, INFINITY, -INFINITY, 1e308, -1, 0};
	for (size_t i = 0; i < sizeof(odd) / sizeof(*odd); i++)
		for (size_t j = 0; j < sizeof(odd) / sizeof(*odd); j++) {
			double s = ig_cluster_share(odd[i], odd[j], 2), t = ig_cluster_share(odd[j], odd[i], 2);
			ck_assert_msg(isfinite(s) && s > 0 && s <= 1, "share(%g, %g) = %g", odd[i], odd[j], s);
			ck_assert_msg(s + t <= 1 + 1e-9, "share(%g, %g) + share(%g, %g) = %g", odd[i], odd[j], odd[j],
				      odd[i], s + t);
		}
	/* NaN is no demand: the even split of two with none */
	ck_assert_double_eq_tol(ig_cluster_share(NAN, NAN, 2), 0.5, 1e-9);
}
END_TEST

IG_CHECK_MAIN("cluster_share", two_gateways_split_a_backends_free_slots, three_gateways_waiting_for_a_model,
	      a_gateway_gone_stale_leaves_its_slots, a_key_split_across_gateways, a_backend_only_one_gateway_sees,
	      hostile_numbers_already_validated, a_keys_shares_of_its_limits,
	      no_figure_that_is_not_a_number_lifts_a_share, limit_shares_follow_demand,
	      slots_split_by_weight_and_never_beyond_the_total)
