/* Unit tests for the Batch API's validation (src/gateway/api/batches_check.c,
 * included to reach its static functions): what a client reads in a failed
 * batch's errors for its input file: a line that is not a request, a url
 * that is not the batch's endpoint, a custom_id used twice, too many
 * models, an empty or unreadable file; slices that stop and go on; and at
 * the end the models checked against the backends' lists (waiting while a
 * list is unknown), the problems in line order. No thread: slices run here. */
#include "../../../../src/gateway/api/batches_check.c"

#include <check.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "sched/scheduler.h"
#include "../../check_main.h"

static char root[64];
static char input[128];

static void make_root(void)
{
	strcpy(root, "/tmp/ig-test-batches-check-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(input, sizeof(input), "%s/input.jsonl", root);
	ig_log_set_level(IG_LOG_ERROR);
}

static void clean_root(void)
{
	unlink(input);
	char *d = ig_strdupf("%s/batch", root);
	ig_batch_remove_dir(d);
	free(d);
	rmdir(root);
}

static FILE *start_input(void)
{
	FILE *f = fopen(input, "w");
	ck_assert_ptr_nonnull(f);
	return f;
}

static void put_line(FILE *f, const char *id, const char *url, const char *model)
{
	fprintf(f,
		"{\"custom_id\":\"%s\",\"method\":\"POST\",\"url\":\"%s\",\"body\":{\"model\":\"%s\",\"messages\":"
		"[{\"role\":\"user\",\"content\":\"hi\"}]}}\n",
		id, url, model);
}

static struct ig_batch_check *check_of(const char *path)
{
	struct ig_batch_check *v = calloc(1, sizeof(*v));
	v->path = strdup(path);
	v->ep = IG_EP_CHAT;
	snprintf(v->endpoint, sizeof(v->endpoint), "%s", "/v1/chat/completions");
	v->problems = json_array();
	v->models = calloc(VMODELS, sizeof(*v->models));
	ck_assert_int_eq(ig_idset_init(&v->ids, 0), 0);
	ck_assert_int_eq(ig_idset_init(&v->ambiguous, 0), 0);
	return v;
}

/* One slice, as the I/O thread runs it. */
static void slice(struct ig_batch_check *v)
{
	struct vjob vj = {.v = v};
	validate_run(&vj.job);
}

static json_t *problem(struct ig_batch_check *v, size_t i)
{
	return json_array_get(v->problems, i);
}

static const char *pstr(json_t *p, const char *k)
{
	return json_string_value(json_object_get(p, k));
}

static long pline(json_t *p)
{
	return (long)json_integer_value(json_object_get(p, "line"));
}

START_TEST(each_bad_line_is_named)
{
	make_root();
	FILE *f = start_input();
	put_line(f, "a", "/v1/chat/completions", "llama");
	fputs("{\"custom_id\": \"b\", \"method\": \"POST\", \"url\": \n", f);          /* line 2: not JSON */
	fputs("{\"custom_id\":\"c\",\"method\":\"POST\",\"url\":\"/v1/completions\",\"body\":{\"model\":"
	      "\"llama\",\"prompt\":\"hi\"}}\n", f);                                 /* line 3: another endpoint */
	put_line(f, "a", "/v1/chat/completions", "qwen");                         /* line 4: a again */
	fputs("\n", f);                                                           /* a blank line is no request */
	put_line(f, "e", "/v1/chat/completions", "llama");
	fclose(f);

	struct ig_batch_check *v = check_of(input);
	slice(v);
	ck_assert(v->eof);
	ck_assert_int_eq(v->total, 5);
	ck_assert_uint_eq(json_array_size(v->problems), 3);
	ck_assert_int_eq(v->n_problems, 3);
	ck_assert_str_eq(pstr(problem(v, 0), "code"), "invalid_request");
	ck_assert_int_eq(pline(problem(v, 0)), 2);
	ck_assert_str_eq(pstr(problem(v, 1), "code"), "invalid_url");
	ck_assert_int_eq(pline(problem(v, 1)), 3);
	ck_assert_str_eq(pstr(problem(v, 1), "param"), "url");
	ck_assert_str_eq(pstr(problem(v, 1), "message"),
			 "The url '/v1/completions' does not match the batch's endpoint '/v1/chat/completions'.");
	/* the second look over the file finds the string twice */
	ck_assert_str_eq(pstr(problem(v, 2), "code"), "duplicate_custom_id");
	ck_assert_int_eq(pline(problem(v, 2)), 4);
	ck_assert_str_eq(pstr(problem(v, 2), "message"), "Duplicate custom_id 'a' (first at line 1).");
	/* the models the lines name, with their lines */
	ck_assert_uint_eq(v->n_models, 2);
	ck_assert_str_eq(v->models[0].name, "llama");
	ck_assert_int_eq(v->models[0].count, 3);
	ck_assert_int_eq(v->models[0].lines[2], 6);
	ck_assert_str_eq(v->models[1].name, "qwen");
	ig_batch_check_free(v);
	clean_root();
}
END_TEST

START_TEST(empty_unreadable_and_too_many_models)
{
	make_root();
	FILE *f = start_input();
	fclose(f);
	struct ig_batch_check *v = check_of(input);
	slice(v);
	ck_assert(v->eof);
	ck_assert_str_eq(pstr(problem(v, 0), "code"), "empty_file");
	ck_assert_str_eq(pstr(problem(v, 0), "param"), "input_file_id");
	ck_assert(json_is_null(json_object_get(problem(v, 0), "line")));
	ig_batch_check_free(v);

	v = check_of("/nonexistent-ig/input.jsonl");
	slice(v);
	ck_assert(v->eof);
	ck_assert_str_eq(pstr(problem(v, 0), "code"), "invalid_file");
	ck_assert_ptr_nonnull(strstr(pstr(problem(v, 0), "message"), "The input file cannot be read: "));
	ig_batch_check_free(v);

	f = start_input();
	for (int i = 0; i < VMODELS + 2; i++) {
		char id[16], model[16];
		snprintf(id, sizeof(id), "r%d", i);
		snprintf(model, sizeof(model), "model-%d", i);
		put_line(f, id, "/v1/chat/completions", model);
	}
	fclose(f);
	v = check_of(input);
	slice(v);
	ck_assert_uint_eq(v->n_models, VMODELS);
	ck_assert_int_eq(v->n_problems, 2);
	ck_assert_str_eq(pstr(problem(v, 0), "message"), "More than 64 different models in one batch.");
	ck_assert_int_eq(pline(problem(v, 0)), VMODELS + 1);
	ck_assert_str_eq(pstr(problem(v, 0), "param"), "body.model");
	ig_batch_check_free(v);
	clean_root();
}
END_TEST

START_TEST(a_long_file_is_read_in_slices)
{
	make_root();
	FILE *f = start_input();
	for (int i = 0; i < SLICE_LINES + 3; i++) {
		char id[16];
		snprintf(id, sizeof(id), "r%d", i);
		put_line(f, id, "/v1/chat/completions", "llama");
	}
	put_line(f, "r7", "/v1/chat/completions", "llama"); /* a duplicate far from its first */
	fclose(f);
	struct ig_batch_check *v = check_of(input);
	slice(v);
	ck_assert(!v->eof); /* the thread's other jobs get their turn */
	ck_assert_int_eq(v->total, SLICE_LINES);
	slice(v);
	ck_assert(v->eof);
	ck_assert_int_eq(v->total, SLICE_LINES + 4);
	ck_assert_int_eq(v->n_problems, 1);
	ck_assert_str_eq(pstr(problem(v, 0), "code"), "duplicate_custom_id");
	ck_assert_int_eq(pline(problem(v, 0)), SLICE_LINES + 4);
	ig_batch_check_free(v);
	clean_root();
}
END_TEST

START_TEST(models_are_checked_at_the_end)
{
	make_root();
	struct ig_conf cfg;
	struct ig_gw gw;
	memset(&cfg, 0, sizeof(cfg));
	memset(&gw, 0, sizeof(gw));
	gw.cfg = &cfg;
	ig_sched_init(&gw.sched);
	struct ig_backend *known = ig_backend_fleet_add(&gw.fleet, "http://127.0.0.1:9", 1, 0);
	char *m[] = {"llama"};
	ck_assert_int_eq(ig_backend_set_models(known, m, 1), 0);
	atomic_store(&known->state, IG_BACKEND_UP);
	/* an up backend whose list is not read yet */
	struct ig_backend *unknown = ig_backend_fleet_add(&gw.fleet, "http://127.0.0.1:10", 1, 0);
	atomic_store(&unknown->state, IG_BACKEND_UP);
	ck_assert_int_eq(ig_sched_rebuild(&gw.sched, &gw.fleet), 0);

	struct ig_batches bs;
	memset(&bs, 0, sizeof(bs));
	bs.gw = &gw;
	bs.dir = root;
	ig_list_init(&bs.all);
	struct ig_batch *b = ig_batch_new(&bs, "batch");
	ck_assert_int_eq(mkdir(b->dir, 0700), 0);
	b->status = IG_BATCH_VALIDATING;
	snprintf(b->endpoint, sizeof(b->endpoint), "%s", "/v1/chat/completions");

	FILE *f = start_input();
	put_line(f, "a", "/v1/chat/completions", "llama");
	put_line(f, "b", "/v1/chat/completions", "gpt-9");
	fputs("not json\n", f);
	put_line(f, "d", "/v1/chat/completions", "gpt-9");
	fclose(f);
	b->v = check_of(input);
	slice(b->v);
	ck_assert(ig_batch_check_ready(b));

	/* gpt-9 may be the unknown list's: it waits, reading nothing again */
	ig_batch_check_finish(&bs, b);
	ck_assert_int_eq(b->status, IG_BATCH_VALIDATING);
	ck_assert_str_eq(b->paused, "waiting for the backends' model lists");
	ck_assert_ptr_nonnull(b->v);

	/* the list is known now, without it: the batch fails, its problems in line order */
	char *other[] = {"qwen"};
	ck_assert_int_eq(ig_backend_set_models(unknown, other, 1), 0);
	ck_assert_int_eq(ig_sched_rebuild(&gw.sched, &gw.fleet), 0);
	ig_batch_check_finish(&bs, b);
	ck_assert_int_eq(b->status, IG_BATCH_FAILED);
	ck_assert_str_eq(b->paused, "");
	ck_assert_ptr_null(b->v);
	ck_assert_int_eq(b->total, 4);
	ck_assert_int_eq(b->n_problems, 3);
	long lines[] = {2, 3, 4};
	const char *codes[] = {"model_not_found", "invalid_request", "model_not_found"};
	for (size_t i = 0; i < 3; i++) {
		json_t *p = json_array_get(b->errors, i);
		ck_assert_int_eq(pline(p), lines[i]);
		ck_assert_str_eq(pstr(p, "code"), codes[i]);
	}
	ck_assert_str_eq(pstr(json_array_get(b->errors, 0), "message"),
			 "The model 'gpt-9' does not exist or is not served here.");
	ck_assert_uint_eq(b->n_models, 1); /* llama counts for its share */
	ck_assert_str_eq(b->models[0], "llama");
	free(b->models[0]);
	ig_batch_drop(b);
	ig_sched_free(&gw.sched);
	ig_backend_fleet_free(&gw.fleet);
	clean_root();
}
END_TEST

IG_CHECK_MAIN("batches_check", each_bad_line_is_named, empty_unreadable_and_too_many_models,
	      a_long_file_is_read_in_slices, models_are_checked_at_the_end)
