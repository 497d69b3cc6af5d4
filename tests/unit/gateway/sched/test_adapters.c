/* Unit tests for LoRA adapters as a resource (src/gateway/sched/adapters.c,
 * included to reach its static functions): what is an adapter (configured,
 * listed with a parent), where its request goes, the one load started when
 * the servers holding it are full, the least recently used idle adapter let
 * go of at max_loras, and what an engine's answer to a load or an unload
 * means. No socket: a load's end is fed as its transfer would end. */
#include "../../../../src/gateway/sched/adapters.c"

#include <check.h>

#include "sched/scheduler.h"
#include "../../check_main.h"

struct fix {
	struct ig_conf cfg;
	struct ig_model_conf model;
	struct ig_gw gw;
	struct ig_rx rx;
	struct ig_backend *b0, *b1;
	const struct ig_policy *p;
};

static char *names[] = {"a1", "a2", "a3"}, *paths[] = {"/a1", "/a2", "/a3"};

static void fix_init(struct fix *f)
{
	static char *m0[] = {"base", "a1"}, *m1[] = {"base"};
	memset(f, 0, sizeof(*f));
	f->model = (struct ig_model_conf){.name = "base", .adapter_names = names, .adapter_paths = paths, .n_adapters = 3};
	f->cfg.models = &f->model;
	f->cfg.n_models = 1;
	f->cfg.health_timeout_ms = 1000;
	f->cfg.backend_api_key = "";
	f->gw.cfg = &f->cfg;
	f->gw.rx = &f->rx;
	f->gw.nrx = 1;
	f->rx.gw = &f->gw;
	ig_rx_self = &f->rx;
	ig_log_set_level(IG_LOG_ERROR);
	ck_assert_int_eq(ig_adapters_init(&f->gw), 0);
	f->b0 = ig_backend_fleet_add(&f->gw.fleet, "http://127.0.0.1:9", 1, 1);
	f->b1 = ig_backend_fleet_add(&f->gw.fleet, "http://127.0.0.1:10", 1, 1);
	ck_assert_int_eq(ig_backend_set_models(f->b0, m0, 2), 0);
	ck_assert_int_eq(ig_backend_set_models(f->b1, m1, 1), 0);
	f->b0->max_loras = f->b1->max_loras = 2;
	atomic_store(&f->b0->state, IG_BACKEND_UP);
	atomic_store(&f->b1->state, IG_BACKEND_UP);
	for (size_t i = 0; i < ig_policy_count(); i++)
		if (strcmp(ig_policy_name((int)i), "least-loaded") == 0)
			f->p = ig_policy_get((int)i);
	ck_assert_ptr_nonnull(f->p);
}

static void fix_free(struct fix *f)
{
	/* the jobs never started: nothing is in a multi */
	ig_adapters_free(&f->gw);
	ig_stats_free(&f->gw);
	ig_backend_fleet_free(&f->gw.fleet);
}

static enum ig_pick pick(struct fix *f, const char *model, struct ig_backend **out, bool *adapter)
{
	struct ig_pick_req rq = {0};
	unsigned rotor = 0;
	enum ig_pick got = IG_PICK_NONE;
	*out = NULL;
	*adapter = ig_adapters_pick(&f->gw, model, f->p, NULL, &rotor, &rq, out, &got);
	return got;
}

static size_t njobs(const struct ig_adapters *as)
{
	size_t n = 0;
	for (const struct job *j = as->jobs; j; j = j->next)
		n++;
	return n;
}

/* The first pending job ends with an answer of `status` carrying `body`,
 * as job_done hands it on (the transfer is not run). */
static void end_job(struct fix *f, long status, const char *body)
{
	struct job *j = f->gw.adapters->jobs;
	ck_assert_ptr_nonnull(j);
	ig_buf_append(&j->body, body, strlen(body));
	j->started = true;
	j->started_us = ig_now_us();
	job_end(j, CURLE_OK, status);
}

START_TEST(requests_go_where_the_adapter_is)
{
	struct fix f;
	fix_init(&f);
	struct ig_backend *b;
	bool adapter;
	/* the base model is no adapter: the dispatcher's own pick */
	pick(&f, "base", &b, &adapter);
	ck_assert(!adapter);
	pick(&f, "nope", &b, &adapter);
	ck_assert(!adapter);
	/* a1 is on b0 (named there): there, again and again */
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_OK);
		ck_assert(adapter);
		ck_assert_ptr_eq(b, f.b0);
		ig_adapters_started(&f.gw, "a1", b);
		ig_adapters_ended(&f.gw, "a1", b);
		ig_policy_release(b);
	}
	ck_assert_uint_eq(njobs(f.gw.adapters), 0);
	fix_free(&f);
}
END_TEST

START_TEST(one_load_when_the_holders_are_full)
{
	struct fix f;
	fix_init(&f);
	struct ig_backend *b;
	bool adapter;
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_OK); /* b0's one slot taken */
	/* the next ones wait: one load on b1, however many ask */
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_BUSY);
	ck_assert_uint_eq(njobs(f.gw.adapters), 1);
	struct job *j = f.gw.adapters->jobs;
	ck_assert(!j->unload);
	ck_assert_int_eq(j->backend, f.b1->id);
	json_t *e = json_object();
	ig_adapters_report_backend(&f.gw, f.b1, e);
	ck_assert_str_eq(json_string_value(json_array_get(json_object_get(json_object_get(e, "lora"), "loading"), 0)),
			 "a1");
	json_decref(e);
	/* loaded (vLLM says so when it is there already, too) */
	f.gw.drain_pending = false;
	end_job(&f, 400, "{\"error\":{\"message\":\"The lora adapter 'a1' has already been loaded.\"}}");
	ck_assert(f.gw.drain_pending);
	ck_assert_uint_eq(njobs(f.gw.adapters), 0);
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_OK);
	ck_assert_ptr_eq(b, f.b1);
	struct slot *s = slot_of(find(f.gw.adapters, "a1", false), f.b1, false);
	ck_assert_uint_eq(s->loads_ok, 1);
	/* both full now, both hold it: wait, no load */
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_BUSY);
	ck_assert_uint_eq(njobs(f.gw.adapters), 0);
	fix_free(&f);
}
END_TEST

START_TEST(a_failed_load_pauses_that_server)
{
	struct fix f;
	fix_init(&f);
	struct ig_backend *b;
	bool adapter;
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_OK);
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_BUSY);
	end_job(&f, 400, "{\"error\":{\"message\":\"no such file\"}}");
	struct slot *s = slot_of(find(f.gw.adapters, "a1", false), f.b1, false);
	ck_assert_uint_eq(s->loads_failed, 1);
	/* its requests wait for b0 rather than asking b1 again at once */
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_BUSY);
	ck_assert_uint_eq(njobs(f.gw.adapters), 0);
	fix_free(&f);
}
END_TEST

START_TEST(the_least_recently_used_idle_adapter_makes_room)
{
	struct fix f;
	fix_init(&f);
	struct ig_adapters *as = f.gw.adapters;
	struct ig_backend *b;
	bool adapter;
	/* b1 holds a2 (used at 10) and a3 (used at 20): full at max_loras 2 */
	for (int i = 1; i < 3; i++) {
		struct slot *s = slot_of(find(as, names[i], true), f.b1, true);
		s->resident = true;
		s->changed_ms = 1;
		s->used_us = (uint64_t)i * 10;
	}
	ck_assert_int_eq(held(as, f.b1), 2);
	ck_assert_str_eq(victim(as, f.b1)->name, "a2");
	/* a2 has a request there: a3 goes instead */
	slot_of(find(as, "a2", false), f.b1, false)->inflight = 1;
	ck_assert_str_eq(victim(as, f.b1)->name, "a3");
	slot_of(find(as, "a2", false), f.b1, false)->inflight = 0;
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_OK); /* b0 full */
	ck_assert_int_eq(pick(&f, "a1", &b, &adapter), IG_PICK_BUSY);
	ck_assert_uint_eq(njobs(as), 1);
	ck_assert(as->jobs->unload);
	ck_assert_str_eq(as->v[as->jobs->a].name, "a2");
	ck_assert_str_eq(as->v[as->jobs->then].name, "a1");
	end_job(&f, 200, "Success: LoRA adapter 'a2' removed successfully.");
	/* unloaded (vLLM's 404 naming it would say the same): the load is next */
	ck_assert_uint_eq(slot_of(find(as, "a2", false), f.b1, false)->unloads_ok, 1);
	ck_assert(!resident(&f.cfg, find(as, "a2", false), f.b1));
	ck_assert_uint_eq(njobs(as), 1);
	ck_assert(!as->jobs->unload);
	ck_assert(find(as, "a1", false)->loading);
	end_job(&f, 200, "Success: LoRA adapter 'a1' added successfully.");
	ck_assert(resident(&f.cfg, find(as, "a1", false), f.b1));
	ck_assert_int_eq(held(as, f.b1), 2);
	fix_free(&f);
}
END_TEST

START_TEST(listed_adapters_are_known_and_lists_after_a_change_win)
{
	struct fix f;
	fix_init(&f);
	struct ig_adapters *as = f.gw.adapters;
	/* b1 learns its list from /v1/models: vLLM's adapters carry a parent */
	ck_assert_int_eq(ig_backend_set_models(f.b1, NULL, 0), 0);
	f.b1->models = json_pack("[{s:s, s:s, s:n}, {s:s, s:s, s:s}]", "id", "base", "root", "base", "parent", "id",
				 "listed", "root", "/l", "parent", "base");
	f.b1->models_at_ms = 100;
	struct adapter *a = find(as, "listed", true);
	ck_assert_ptr_nonnull(a);
	ck_assert_str_eq(a->base, "base");
	ck_assert_str_eq(a->path, "/l");
	ck_assert(resident(&f.cfg, a, f.b1));
	/* we unloaded it at 200: an older list does not bring it back ... */
	struct slot *s = slot_of(a, f.b1, true);
	s->changed_ms = 200;
	s->resident = false;
	ck_assert(!resident(&f.cfg, a, f.b1));
	/* ... one read well after does */
	f.b1->models_at_ms = 200 + 1000 + 1;
	ck_assert(resident(&f.cfg, a, f.b1));
	json_decref(f.b1->models);
	f.b1->models = NULL;
	fix_free(&f);
}
END_TEST

START_TEST(what_an_answer_means)
{
	struct job j = {0};
	ig_buf_init(&j.body);
	struct {
		bool unload, sglang;
		CURLcode result;
		long status;
		const char *body;
		int want;
	} cases[] = {
		{false, false, CURLE_OK, 200, "Success: LoRA adapter 'x' added successfully.", 1},
		{false, false, CURLE_OK, 404, "{\"detail\":\"Not Found\"}", -1},             /* no such route: SGLang's */
		{false, false, CURLE_OK, 400, "The lora adapter 'x' has already been loaded.", 1},
		{false, false, CURLE_COULDNT_CONNECT, 0, "", 0},
		{false, true, CURLE_OK, 200, "{\"success\":true,\"error_message\":null}", 1},
		{false, true, CURLE_OK, 400, "{\"success\":false,\"error_message\":\"max_loaded_loras\"}", 0},
		{false, true, CURLE_OK, 400, "{\"success\":false,\"error_message\":\"... already exists.\"}", 1},
		{true, false, CURLE_OK, 404, "{\"error\":{\"message\":\"cannot be found\"}}", 1},
		{true, true, CURLE_OK, 400, "{\"success\":false,\"error_message\":\"LoRA with name x does not exist.\"}", 1},
		{true, false, CURLE_OK, 500, "oops", 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ig_buf_reset(&j.body);
		ig_buf_append(&j.body, cases[i].body, strlen(cases[i].body));
		j.unload = cases[i].unload;
		j.sglang = cases[i].sglang;
		ck_assert_msg(outcome(&j, cases[i].result, cases[i].status) == cases[i].want, "case %zu", i);
	}
	ig_buf_free(&j.body);
}
END_TEST

IG_CHECK_MAIN("adapters", requests_go_where_the_adapter_is, one_load_when_the_holders_are_full,
	      a_failed_load_pauses_that_server, the_least_recently_used_idle_adapter_makes_room,
	      listed_adapters_are_known_and_lists_after_a_change_win, what_an_answer_means)
