/* Unit tests for model fallbacks (src/gateway/path/try_fallback.c, included
 * to reach fallback_with): a request that dispatch refuses because its
 * model has no backend up or a full queue runs on the model's fallbacks, in
 * the configured order, each tried once, skipping those its key may not
 * use; its body names the model it runs on; when none is left the client
 * reads the last refusal. Fake exchanges; dispatch's answers are scripted. */
#include "../../../../src/gateway/path/try_fallback.c"

#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "../../check_main.h"

/* Dispatch's scripted answers, one per submit, and what it was handed. */
struct step {
	enum ig_dispatch_result res;
	const char *code; /* its refusal's code when res is FAILED */
	unsigned status;
};
static const struct step *script;
static size_t n_script, n_submits;
static char seen_model[8][64], seen_body_model[8][64];
static struct ig_req *cur;

static enum ig_dispatch_result fake_submit(struct ig_gw *gw IG_UNUSED, struct ig_waiter *w)
{
	ck_assert_uint_lt(n_submits, n_script);
	ck_assert_ptr_eq(w, &cur->wait);
	ck_assert_str_eq(w->m->name, w->model); /* held model and named model agree */
	snprintf(seen_model[n_submits], sizeof(seen_model[0]), "%s", w->model);
	json_t *root = json_loadb(cur->body.data, cur->body.len, 0, NULL);
	ck_assert_ptr_nonnull(root);
	snprintf(seen_body_model[n_submits], sizeof(seen_body_model[0]), "%s",
		 json_string_value(json_object_get(root, "model")));
	ck_assert_int_eq(json_integer_value(json_object_get(root, "max_tokens")), 7); /* the rest kept */
	json_decref(root);
	const struct step *s = &script[n_submits++];
	if (s->res == IG_DISPATCH_FAILED) {
		cur->refused_code = s->code;
		cur->err_status = s->status;
		free(cur->err_body);
		cur->err_body = strdup(s->code);
	}
	return s->res;
}

struct fake {
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_model_alias fb[4];
	struct ig_keyent ent;
	struct ig_key key;
	struct ig_req req;
};

/* Model "big" with fallbacks mid, small, tiny (in that order); "other"
 * has one of its own, listed between them; the request for "big" was
 * refused with `code`. */
static struct fake *fake_new(const char *code, unsigned status)
{
	struct fake *f = calloc(1, sizeof(*f));
	f->fb[0] = (struct ig_model_alias){"big", "mid"};
	f->fb[1] = (struct ig_model_alias){"other", "elsewhere"};
	f->fb[2] = (struct ig_model_alias){"big", "small"};
	f->fb[3] = (struct ig_model_alias){"big", "tiny"};
	f->cfg.fallbacks = f->fb;
	f->cfg.n_fallbacks = 4;
	f->gw.cfg = &f->cfg;
	ig_sched_init(&f->gw.sched);
	struct ig_req *r = &f->req;
	r->gw = &f->gw;
	snprintf(r->request_id, sizeof(r->request_id), "r1");
	r->adm.model = "big";
	const char *body = "{\"model\":\"big\",\"max_tokens\":7}";
	ig_buf_append(&r->body, body, strlen(body));
	r->wait.model = "big";
	r->wait.m = ig_sched_get(&f->gw.sched, &f->gw.fleet, "big");
	ck_assert_ptr_nonnull(r->wait.m);
	ig_sched_hold(r->wait.m);
	r->refused_code = code;
	r->err_status = status;
	r->err_body = strdup(code);
	cur = r;
	n_submits = 0;
	return f;
}

static void fake_free(struct fake *f)
{
	ig_sched_release(&f->gw.sched, f->req.wait.m);
	ig_sched_free(&f->gw.sched);
	ig_buf_free(&f->req.body);
	free(f->req.err_body);
	free(f->req.fallback);
	free(f);
}

static void run_script(const struct step *s, size_t n)
{
	script = s;
	n_script = n;
}

/* No backend of "big" up: "mid" is tried first; refused too, "small";
 * "small" takes it. The body names "small", the request says it runs on
 * "small", the earlier refusal is gone, "tiny" is never asked. */
START_TEST(fallbacks_are_tried_in_order_until_one_takes_it)
{
	struct fake *f = fake_new("no_healthy_backend", 503);
	const struct step s[] = {{IG_DISPATCH_FAILED, "no_healthy_backend", 503}, {IG_DISPATCH_QUEUED, NULL, 0}};
	run_script(s, 2);
	ck_assert(fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 2);
	ck_assert_str_eq(seen_model[0], "mid");
	ck_assert_str_eq(seen_body_model[0], "mid");
	ck_assert_str_eq(seen_model[1], "small");
	ck_assert_str_eq(seen_body_model[1], "small");
	ck_assert_str_eq(f->req.fallback, "small"); /* X-Infergate-Fallback: small */
	ck_assert_str_eq(f->req.wait.model, "small");
	ck_assert_ptr_eq(f->req.wait.m, ig_sched_find(&f->gw.sched, "small"));
	ck_assert_int_eq(f->req.wait.m->refs, 1); /* held once, by the request */
	ck_assert_ptr_null(ig_sched_find(&f->gw.sched, "big")); /* let go of (no backend names it) */
	ck_assert_ptr_null(ig_sched_find(&f->gw.sched, "mid"));
	ck_assert_ptr_null(f->req.refused_code);
	ck_assert_ptr_null(f->req.err_body);
	ck_assert_uint_eq(f->req.err_status, 0);
	fake_free(f);
}
END_TEST

/* A full queue (429 queue_full) is a reason to fall back as well, and a
 * fallback that starts at once ends the search. */
START_TEST(a_full_queue_falls_back_too)
{
	struct fake *f = fake_new("queue_full", 429);
	const struct step s[] = {{IG_DISPATCH_STARTED, NULL, 0}};
	run_script(s, 1);
	ck_assert(fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 1);
	ck_assert_str_eq(f->req.fallback, "mid");
	fake_free(f);
}
END_TEST

/* Every fallback refuses: each was tried once, in order, and the client
 * reads the last refusal (tiny's), not the first. */
START_TEST(none_left_leaves_the_last_refusal)
{
	struct fake *f = fake_new("no_healthy_backend", 503);
	const struct step s[] = {{IG_DISPATCH_FAILED, "no_healthy_backend", 503},
				 {IG_DISPATCH_FAILED, "queue_full", 429},
				 {IG_DISPATCH_FAILED, "no_healthy_backend", 503}};
	run_script(s, 3);
	ck_assert(!fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 3); /* not twice, nor "elsewhere" (another model's) */
	ck_assert_str_eq(seen_model[0], "mid");
	ck_assert_str_eq(seen_model[1], "small");
	ck_assert_str_eq(seen_model[2], "tiny");
	ck_assert_str_eq(f->req.refused_code, "no_healthy_backend");
	ck_assert_uint_eq(f->req.err_status, 503);
	ck_assert_str_eq(f->req.err_body, "no_healthy_backend");
	ck_assert_str_eq(f->req.fallback, "tiny");
	fake_free(f);
}
END_TEST

/* A fallback that refuses for another reason (not "no backend" nor a full
 * queue) ends the search there: that refusal is the client's. */
START_TEST(another_kind_of_refusal_stops_the_search)
{
	struct fake *f = fake_new("no_healthy_backend", 503);
	const struct step s[] = {{IG_DISPATCH_FAILED, "rate_limited", 429}};
	run_script(s, 1);
	ck_assert(!fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 1);
	ck_assert_str_eq(f->req.refused_code, "rate_limited");
	fake_free(f);

	/* and a first refusal of that kind does not fall back at all */
	f = fake_new("rate_limited", 429);
	run_script(s, 0);
	ck_assert(!fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 0);
	ck_assert_ptr_null(f->req.fallback);
	ck_assert_str_eq(f->req.err_body, "rate_limited");
	fake_free(f);
}
END_TEST

/* A key limited to some models skips the fallbacks it may not use. */
START_TEST(a_keys_forbidden_fallbacks_are_skipped)
{
	struct fake *f = fake_new("no_healthy_backend", 503);
	static char *allowed[] = {"big", "tiny"};
	f->ent.models = allowed;
	f->ent.n_models = 2;
	f->key.ent = &f->ent;
	f->req.adm.key = &f->key;
	const struct step s[] = {{IG_DISPATCH_QUEUED, NULL, 0}};
	run_script(s, 1);
	ck_assert(fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 1);
	ck_assert_str_eq(seen_model[0], "tiny");
	ck_assert_str_eq(f->req.fallback, "tiny");
	fake_free(f);

	/* none it may use: the first refusal stands, untouched */
	f = fake_new("no_healthy_backend", 503);
	static char *only[] = {"big"};
	f->ent.models = only;
	f->ent.n_models = 1;
	f->key.ent = &f->ent;
	f->req.adm.key = &f->key;
	run_script(s, 0);
	ck_assert(!fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 0);
	ck_assert_str_eq(f->req.refused_code, "no_healthy_backend");
	ck_assert_str_eq(f->req.wait.model, "big");
	const char *orig = "{\"model\":\"big\",\"max_tokens\":7}";
	ck_assert_uint_eq(f->req.body.len, strlen(orig)); /* the body untouched */
	ck_assert_int_eq(memcmp(f->req.body.data, orig, f->req.body.len), 0);
	fake_free(f);
}
END_TEST

/* A model without fallbacks, or a body that is not a JSON object: false,
 * nothing submitted. */
START_TEST(no_fallback_configured_or_no_json_body)
{
	struct fake *f = fake_new("no_healthy_backend", 503);
	f->cfg.n_fallbacks = 0;
	run_script(NULL, 0);
	ck_assert(!fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 0);
	fake_free(f);

	f = fake_new("no_healthy_backend", 503);
	ig_buf_reset(&f->req.body);
	ig_buf_append(&f->req.body, "[1]", 3);
	ck_assert(!fallback_with(&f->req, fake_submit));
	ck_assert_uint_eq(n_submits, 0);
	ck_assert_uint_eq(f->req.err_status, 503);
	fake_free(f);
}
END_TEST

IG_CHECK_MAIN("try_fallback", fallbacks_are_tried_in_order_until_one_takes_it, a_full_queue_falls_back_too,
	      none_left_leaves_the_last_refusal, another_kind_of_refusal_stops_the_search,
	      a_keys_forbidden_fallbacks_are_skipped, no_fallback_configured_or_no_json_body)
