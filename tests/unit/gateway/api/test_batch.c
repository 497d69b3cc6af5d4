/* Unit tests for one batch (src/gateway/api/batch.c): the Batch object as
 * OpenAI shows it; batch.json written and read back by a restart with
 * everything it needs, and what is not a batch refused (a bad id, a torn
 * or foreign file); validation problems kept up to the limit and counted;
 * the list in order of creation; the fence that keeps two gateways from
 * writing one batch's results. */
#include "config.h"
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/batch.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "../../check_main.h"

#define ID "batch_0123456789abcdef01234567"

static char root[64];
static struct ig_batches bs;

static void setup(bool clustered)
{
	strcpy(root, "/tmp/ig-test-batch-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	memset(&bs, 0, sizeof(bs));
	bs.dir = root;
	bs.clustered = clustered;
	ig_list_init(&bs.all);
	ig_log_set_level(IG_LOG_ERROR);
}

static void teardown(void)
{
	char *d = ig_strdupf("%s/%s", root, ID);
	ig_batch_remove_dir(d);
	free(d);
	rmdir(root);
}

static struct ig_batch *sample(void)
{
	struct ig_batch *b = ig_batch_new(&bs, ID);
	ck_assert_ptr_nonnull(b);
	snprintf(b->owner, sizeof(b->owner), "%s", "key-hash");
	snprintf(b->input_file_id, sizeof(b->input_file_id), "%s", "file-abc");
	snprintf(b->endpoint, sizeof(b->endpoint), "%s", "/v1/embeddings");
	b->ep = IG_EP_EMBEDDINGS;
	b->status = IG_BATCH_IN_PROGRESS;
	b->created_at = 1700000000;
	b->in_progress_at = 1700000005;
	b->expires_at = 1700086400;
	b->total = 10;
	b->completed = 4;
	b->failed = 1;
	b->inflight = 3;
	b->metadata = json_pack("{s:s}", "run", "nightly");
	return b;
}

START_TEST(the_batch_object_is_openais)
{
	setup(false);
	struct ig_batch *b = sample();
	json_t *o = ig_batch_json(b);
	ck_assert_str_eq(json_string_value(json_object_get(o, "id")), ID);
	ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "batch");
	ck_assert_str_eq(json_string_value(json_object_get(o, "endpoint")), "/v1/embeddings");
	ck_assert_str_eq(json_string_value(json_object_get(o, "status")), "in_progress");
	ck_assert_str_eq(json_string_value(json_object_get(o, "completion_window")), "24h");
	ck_assert(json_is_null(json_object_get(o, "errors")));
	ck_assert(json_is_null(json_object_get(o, "output_file_id")));
	ck_assert(json_is_null(json_object_get(o, "completed_at")));
	ck_assert_int_eq(json_integer_value(json_object_get(o, "in_progress_at")), 1700000005);
	json_t *rc = json_object_get(o, "request_counts");
	ck_assert_int_eq(json_integer_value(json_object_get(rc, "total")), 10);
	ck_assert_int_eq(json_integer_value(json_object_get(rc, "completed")), 4);
	ck_assert_int_eq(json_integer_value(json_object_get(rc, "failed")), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "metadata"), "run")), "nightly");
	json_t *ig = json_object_get(o, "infergate");
	ck_assert_int_eq(json_integer_value(json_object_get(ig, "in_flight")), 3);
	ck_assert(json_is_null(json_object_get(ig, "paused")));
	ck_assert_ptr_null(json_object_get(ig, "run_here")); /* alone: nothing to say */
	ck_assert_ptr_null(json_object_get(o, "owner"));    /* the owner is never shown */
	json_decref(o);

	/* problems are OpenAI's errors list; several gateways say who runs it */
	ig_batch_problem(b, "invalid_json", 3, NULL, "Line %d is not JSON.", 3);
	bs.clustered = true;
	b->ours = true;
	b->fence = 42;
	o = ig_batch_json(b);
	json_t *errs = json_object_get(o, "errors");
	ck_assert_str_eq(json_string_value(json_object_get(errs, "object")), "list");
	json_t *e0 = json_array_get(json_object_get(errs, "data"), 0);
	ck_assert_str_eq(json_string_value(json_object_get(e0, "code")), "invalid_json");
	ck_assert_str_eq(json_string_value(json_object_get(e0, "message")), "Line 3 is not JSON.");
	ck_assert_int_eq(json_integer_value(json_object_get(e0, "line")), 3);
	ck_assert(json_is_null(json_object_get(e0, "param")));
	json_t *rh = json_object_get(json_object_get(o, "infergate"), "run_here");
	ck_assert(json_is_true(json_object_get(rh, "held")));
	ck_assert_int_eq(json_integer_value(json_object_get(rh, "fencing_token")), 42);
	json_decref(o);
	ig_batch_drop(b);
	teardown();
}
END_TEST

START_TEST(a_restart_reads_back_what_it_needs)
{
	setup(false);
	struct ig_batch *b = sample();
	b->expiring = true;
	snprintf(b->output_file_id, sizeof(b->output_file_id), "%s", "file-out");
	ig_batch_problem(b, "missing_model", 7, "body.model", "Line 7 names no model.");
	ck_assert_int_eq(mkdir(b->dir, 0700), 0);
	char *text = ig_batch_text(b);
	ck_assert_ptr_nonnull(text);
	ck_assert_ptr_null(strstr(text, "in_flight")); /* what only this process knows is not saved */
	ck_assert_int_eq(ig_batch_write_json(b->dir, b->id, text), 0);
	free(text);

	struct ig_batch *r = ig_batch_load(&bs, ID);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->status, IG_BATCH_IN_PROGRESS);
	ck_assert_str_eq(r->owner, "key-hash");
	ck_assert_str_eq(r->input_file_id, "file-abc");
	ck_assert_str_eq(r->output_file_id, "file-out");
	ck_assert_str_eq(r->error_file_id, "");
	ck_assert_str_eq(r->endpoint, "/v1/embeddings");
	ck_assert_int_eq(r->ep, IG_EP_EMBEDDINGS);
	ck_assert_int_eq(r->created_at, 1700000000);
	ck_assert_int_eq(r->in_progress_at, 1700000005);
	ck_assert_int_eq(r->expires_at, 1700086400);
	ck_assert_int_eq(r->total, 10);
	ck_assert_int_eq(r->completed, 4);
	ck_assert_int_eq(r->failed, 1);
	ck_assert(r->expiring);
	ck_assert_str_eq(json_string_value(json_object_get(r->metadata, "run")), "nightly");
	ck_assert_uint_eq(json_array_size(r->errors), 1);
	ck_assert_str_eq(json_string_value(json_object_get(json_array_get(r->errors, 0), "param")), "body.model");

	/* another gateway's copy takes it whole */
	struct ig_batch *c = ig_batch_new(&bs, ID);
	ig_batch_take_state(c, r);
	ck_assert_int_eq(c->status, IG_BATCH_IN_PROGRESS);
	ck_assert_int_eq(c->n_problems, 1);
	ck_assert_str_eq(c->output_file_id, "file-out");
	ig_batch_drop(c);
	ig_batch_drop(r);

	/* not a batch: a torn file, a status nobody knows, an id that is a path */
	char *p = ig_batch_path(b, "batch.json");
	FILE *f = fopen(p, "w");
	fputs("{\"status\": \"in_prog", f);
	fclose(f);
	ck_assert_ptr_null(ig_batch_load(&bs, ID));
	f = fopen(p, "w");
	fputs("{\"status\": \"paused\", \"endpoint\": \"/v1/chat/completions\"}", f);
	fclose(f);
	ck_assert_ptr_null(ig_batch_load(&bs, ID));
	free(p);
	ck_assert(!ig_batch_id_valid("../../etc"));
	ck_assert(!ig_batch_id_valid("batch_0123456789ABCDEF01234567")); /* lower-case hex only */
	ck_assert(!ig_batch_id_valid("batch_0123456789abcdef0123456"));
	ck_assert(ig_batch_id_valid(ID));
	ck_assert_ptr_null(ig_batch_load(&bs, "batch_../../x"));
	ig_batch_drop(b);
	teardown();
}
END_TEST

START_TEST(problems_are_kept_to_the_limit_and_counted)
{
	setup(false);
	struct ig_batch *b = ig_batch_new(&bs, ID);
	for (int i = 1; i <= IG_BATCH_MAX_ERRORS + 20; i++)
		ig_batch_problem(b, "invalid_request", i, "body", "Line %d: bad.", i);
	ck_assert_uint_eq(json_array_size(b->errors), IG_BATCH_MAX_ERRORS);
	ck_assert_int_eq(b->n_problems, IG_BATCH_MAX_ERRORS + 20);
	ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(b->errors, 0), "line")), 1);
	/* a problem of no one line */
	ig_batch_drop(b);
	b = ig_batch_new(&bs, ID);
	ig_batch_problem(b, "empty_file", 0, NULL, "The input file has no request.");
	ck_assert(json_is_null(json_object_get(json_array_get(b->errors, 0), "line")));

	/* a batch's models, each once, at most IG_BATCH_MAX_MODELS */
	for (int i = 0; i < IG_BATCH_MAX_MODELS + 4; i++) {
		char m[16];
		snprintf(m, sizeof(m), "m%d", i % (IG_BATCH_MAX_MODELS + 2));
		ig_batch_note_model(b, m);
		ig_batch_note_model(b, m);
	}
	ck_assert_uint_eq(b->n_models, IG_BATCH_MAX_MODELS);
	for (size_t i = 0; i < b->n_models; i++)
		free(b->models[i]);
	ig_batch_drop(b);
	teardown();
}
END_TEST

START_TEST(the_list_is_in_order_of_creation)
{
	setup(false);
	const char *ids[] = {"batch_000000000000000000000003", "batch_000000000000000000000001",
			     "batch_000000000000000000000002", "batch_000000000000000000000000"};
	int64_t at[] = {200, 100, 200, 300};
	struct ig_batch *v[4];
	for (int i = 0; i < 4; i++) {
		v[i] = ig_batch_new(&bs, ids[i]);
		v[i]->created_at = at[i];
		ig_batch_insert(&bs, v[i]);
	}
	ck_assert_uint_eq(bs.nbatches, 4);
	const char *want[] = {ids[1], ids[2], ids[0], ids[3]}; /* by time, then by id */
	int k = 0;
	struct ig_batch *b;
	IG_LIST_FOREACH(b, &bs.all, struct ig_batch, link)
		ck_assert_str_eq(b->id, want[k++]);
	ck_assert_ptr_eq(ig_batch_find(&bs, ids[2]), v[2]);
	ck_assert_ptr_null(ig_batch_find(&bs, ID));
	for (int i = 0; i < 4; i++)
		ig_batch_drop(v[i]);
	rmdir(root);
}
END_TEST

static void write_fence(const char *dir, const char *tok)
{
	char *p = ig_strdupf("%s/fence", dir);
	FILE *f = fopen(p, "w");
	fputs(tok, f);
	fclose(f);
	free(p);
}

START_TEST(the_fence_keeps_a_batch_to_one_gateway)
{
	setup(true);
	struct ig_batch *b = ig_batch_new(&bs, ID);
	ck_assert(!b->ours); /* clustered: not ours until its lease is */
	ck_assert_int_eq(mkdir(b->dir, 0700), 0);
	write_fence(b->dir, "5");
	char *p = ig_batch_path(b, "fence");
	b->fence_fd = open(p, O_RDONLY);
	b->ours = true;
	b->fence = 5;
	ck_assert_int_eq(ig_batch_fence_lock(b), 0);
	ig_batch_fence_unlock(b);

	/* the I/O thread's check by path */
	ck_assert_int_eq(ig_batch_fence_check_path(b->dir, 0), -2);
	int fd = ig_batch_fence_check_path(b->dir, 5);
	ck_assert_int_ge(fd, 0);
	close(fd);
	errno = 0;
	ck_assert_int_eq(ig_batch_fence_check_path(b->dir, 4), -1);
	ck_assert_int_eq(errno, EPERM);

	/* another gateway is taking it over (an exclusive lock): lost */
	int other = open(p, O_RDONLY);
	ck_assert_int_eq(flock(other, LOCK_EX), 0);
	ck_assert_int_eq(ig_batch_fence_lock(b), -1);
	ck_assert(!b->ours);
	ck_assert(b->releasing);
	ck_assert_uint_eq(bs.leases_lost, 1);
	close(other);

	/* it took it: the fence holds its token; ours again, then lost again */
	b->ours = true;
	b->fence = 5;
	write_fence(b->dir, "6");
	ck_assert_int_eq(ig_batch_fence_lock(b), -1);
	ck_assert(!b->ours);
	ck_assert_int_eq(b->fence, 0);
	ck_assert_uint_eq(bs.leases_lost, 2);
	ck_assert_int_eq(ig_batch_fence_lock(b), -1); /* nothing more is written */

	/* alone, there is no fence */
	bs.clustered = false;
	ck_assert_int_eq(ig_batch_fence_lock(b), 0);
	close(b->fence_fd);
	free(p);
	ig_batch_drop(b);
	teardown();
}
END_TEST

IG_CHECK_MAIN("batch", the_batch_object_is_openais, a_restart_reads_back_what_it_needs,
	      problems_are_kept_to_the_limit_and_counted, the_list_is_in_order_of_creation,
	      the_fence_keeps_a_batch_to_one_gateway)
