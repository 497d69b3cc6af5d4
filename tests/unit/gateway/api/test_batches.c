/* Unit tests for the Batch API's state machine (src/gateway/api/batches.c and
 * the stages it drives): validating -> failed with the lines named, or
 * -> in_progress with the counts the result files hold -> finalizing ->
 * completed / cancelled / expired, and a restart that resumes where the
 * files say. No socket and no I/O thread (a job and its done run at once,
 * as bio.h says); the lines a test lets run are already in the result
 * files, as after a crash, so no transfer is started. */
#include "../../../../src/gateway/api/batches.c"
#include "api/metrics.h"
#include "net/rx.h"

#include <check.h>
#include <ftw.h>

#include "../../check_main.h"

struct fixture {
	char root[64];
	struct ig_conf cfg;
	struct ig_gw gw;
	struct ig_rx rx[1];
	struct ig_batches *bs;
};

static int rm_one(const char *p, const struct stat *st IG_UNUSED, int flag IG_UNUSED, struct FTW *f IG_UNUSED)
{
	return remove(p);
}

static char *in_root(struct fixture *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *in_root(struct fixture *f, const char *fmt, ...)
{
	char name[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	return ig_strdupf("%s/%s", f->root, name);
}

static void open_store(struct fixture *f)
{
	char *dir = in_root(f, "%s", "batches"), *err = NULL;
	f->bs = ig_batches_open(&f->gw, dir, &err);
	ck_assert_msg(f->bs != NULL, "%s", err);
	f->gw.batches = f->bs;
	free(dir);
}

static void setup(struct fixture *f)
{
	memset(f, 0, sizeof(*f));
	strcpy(f->root, "/tmp/ig-test-batches-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->root));
	ig_log_set_level(IG_LOG_ERROR);
	ig_routes_default(&f->cfg.routes);
	f->gw.cfg = &f->cfg;
	f->gw.rx = f->rx;
	f->gw.nrx = 1;
	f->gw.listen_fd = -1;
	f->rx[0].gw = &f->gw;
	ig_sched_init(&f->gw.sched);
	struct ig_backend *b = ig_backend_fleet_add(&f->gw.fleet, "http://127.0.0.1:9", 1, 0);
	b->models_conf = calloc(1, sizeof(char *));
	b->models_conf[0] = strdup("m");
	b->n_models_conf = 1;
	atomic_store(&b->state, IG_BACKEND_UP);
	ck_assert_int_eq(ig_sched_rebuild(&f->gw.sched, &f->gw.fleet), 0);
	char *dir = in_root(f, "%s", "files"), *err = NULL;
	f->gw.files = ig_files_open(dir, false, &err);
	ck_assert_ptr_nonnull(f->gw.files);
	free(dir);
	open_store(f);
}

static void teardown(struct fixture *f)
{
	ig_batches_free(f->bs);
	ig_files_free(f->gw.files);
	ig_stats_free(&f->gw);
	ig_sched_free(&f->gw.sched);
	ig_backend_fleet_free(&f->gw.fleet);
	ig_routes_clear(&f->cfg.routes);
	nftw(f->root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* An input file of the owner "" (no keys), as an upload leaves it. */
static void input(struct fixture *f, const char *id, const char *text)
{
	char *p = in_root(f, "%s.tmp", id);
	FILE *out = fopen(p, "w");
	fputs(text, out);
	fclose(out);
	struct ig_file file = {.created_at = 1};
	snprintf(file.id, sizeof(file.id), "%s", id);
	snprintf(file.purpose, sizeof(file.purpose), "batch");
	snprintf(file.filename, sizeof(file.filename), "in.jsonl");
	ck_assert_int_eq(ig_files_adopt_disk(f->gw.files, p, &file), 0);
	ck_assert_int_eq(ig_files_add(f->gw.files, &file), 0);
	free(p);
}

/* POST /v1/batches, as batches_api.c makes one. */
static struct ig_batch *create(struct fixture *f, const char *file_id)
{
	char id[40] = "batch_";
	ig_random_hex(id + 6, 24);
	struct ig_batch *b = ig_batch_new(f->bs, id);
	snprintf(b->input_file_id, sizeof(b->input_file_id), "%s", file_id);
	snprintf(b->endpoint, sizeof(b->endpoint), "/v1/chat/completions");
	b->ep = IG_EP_CHAT;
	b->metadata = json_null();
	b->created_at = ig_wall_s();
	b->expires_at = b->created_at + IG_BATCH_EXPIRY_S;
	char *text = ig_batch_text(b);
	ck_assert_int_eq(mkdir(b->dir, 0700), 0);
	ck_assert_int_eq(ig_batch_write_json(b->dir, b->id, text), 0);
	free(text);
	ig_list_append(&f->bs->all, &b->link);
	f->bs->nbatches++;
	return b;
}

static void tick(struct fixture *f, int n)
{
	for (int i = 0; i < n; i++)
		ig_batches_tick(f->bs, ig_now_ms());
}

static const char *line(const char *id, const char *model)
{
	static char buf[256];
	snprintf(buf, sizeof(buf), "{\"custom_id\":\"%s\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\","
				   "\"body\":{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}}\n",
		 id, model);
	return buf;
}

/* A result line in a batch's output (ok) or errors file, as a run that
 * stopped left it. Returns its length. */
static size_t result_in(const char *dir, const char *id, bool ok)
{
	size_t len;
	json_t *body = json_pack("{s:s}", "id", "x");
	char *l = ok ? ig_journal_ok_line(id, 200, "req", NULL, body, &len)
		     : ig_journal_error_line(id, 500, "req", NULL, body, "server_error", "boom", &len);
	char *p = ig_strdupf("%s/%s", dir, ok ? "output.jsonl" : "errors.jsonl");
	FILE *out = fopen(p, "a");
	fwrite(l, 1, len, out);
	fclose(out);
	free(p);
	free(l);
	json_decref(body);
	return len;
}

static void result(struct ig_batch *b, const char *id, bool ok)
{
	result_in(b->dir, id, ok);
}

static const char *status(const struct ig_batch *b)
{
	return ig_batch_status_names[b->status];
}

START_TEST(a_valid_batch_runs_to_completed_and_its_results_become_files)
{
	struct fixture f;
	setup(&f);
	char text[1024] = "";
	strcat(text, line("a", "m"));
	strcat(text, line("b", "m"));
	strcat(text, "\n"); /* a blank line is no request */
	strcat(text, line("c", "m"));
	input(&f, "file-in", text);
	struct ig_batch *b = create(&f, "file-in");
	/* done before (a crash): a and b in the output, c in the errors */
	result(b, "a", true);
	result(b, "b", true);
	result(b, "c", false);
	ck_assert_str_eq(status(b), "validating");
	tick(&f, 2);
	ck_assert_str_eq(status(b), "in_progress");
	ck_assert_int_eq(b->total, 3);
	ck_assert_int_eq(b->completed, 2);
	ck_assert_int_eq(b->failed, 1);
	ck_assert(b->in_progress_at > 0);
	tick(&f, 1); /* every line is done: nothing sent, it finalizes */
	ck_assert_str_eq(status(b), "completed");
	ck_assert_int_eq(b->inflight, 0);
	const struct ig_file *out = ig_files_find(f.gw.files, b->output_file_id, "");
	const struct ig_file *err = ig_files_find(f.gw.files, b->error_file_id, "");
	ck_assert_ptr_nonnull(out);
	ck_assert_ptr_nonnull(err);
	ck_assert_str_eq(out->purpose, "batch_output");
	ck_assert_int_gt(out->bytes, 0);
	/* what the API shows */
	json_t *o = ig_batch_json(b);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "request_counts"), "total")), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "request_counts"), "completed")), 2);
	ck_assert(json_is_integer(json_object_get(o, "completed_at")));
	json_decref(o);
	/* /metrics, through the source batches registered */
	char *m = ig_metrics_text(&f.gw);
	ck_assert_ptr_nonnull(strstr(m, "infergate_batches{status=\"completed\"} 1\n"));
	free(m);
	/* a restart reads the same back */
	char id[40];
	snprintf(id, sizeof(id), "%s", b->id);
	ig_batches_free(f.bs);
	open_store(&f);
	b = IG_LIST_FIRST(&f.bs->all, struct ig_batch, link);
	ck_assert_str_eq(b->id, id);
	ck_assert_str_eq(status(b), "completed");
	ck_assert_int_eq(b->completed, 2);
	ck_assert_int_eq(b->failed, 1);
	teardown(&f);
}
END_TEST

START_TEST(a_bad_file_fails_validation_naming_its_lines_and_sends_nothing)
{
	struct fixture f;
	setup(&f);
	char text[2048] = "{not json\n";                        /* 1 */
	strcat(text, "{\"custom_id\":\"u\",\"method\":\"POST\",\"url\":\"/v1/completions\","
		     "\"body\":{\"model\":\"m\",\"prompt\":\"p\"}}\n"); /* 2: not the batch's endpoint */
	strcat(text, line("x", "nope"));                         /* 3: not served here */
	strcat(text, line("d", "m"));                            /* 4 */
	strcat(text, line("d", "m"));                            /* 5: the same custom_id */
	strcat(text, line("ok", "m"));                           /* 6 */
	input(&f, "file-bad", text);
	struct ig_batch *b = create(&f, "file-bad");
	tick(&f, 3);
	ck_assert_str_eq(status(b), "failed");
	ck_assert_int_eq(b->total, 6);
	ck_assert_int_eq(b->completed + b->failed, 0);
	ck_assert(!*b->output_file_id && !*b->error_file_id);
	static const struct {
		const char *code;
		long line;
	} want[] = {{"invalid_request", 1}, {"invalid_url", 2}, {"model_not_found", 3}, {"duplicate_custom_id", 5}};
	ck_assert_uint_eq(json_array_size(b->errors), 4);
	for (size_t i = 0; i < 4; i++) {
		json_t *e = json_array_get(b->errors, i);
		ck_assert_str_eq(json_string_value(json_object_get(e, "code")), want[i].code);
		ck_assert_int_eq(json_integer_value(json_object_get(e, "line")), want[i].line);
	}
	ck_assert_ptr_nonnull(strstr(json_string_value(json_object_get(json_array_get(b->errors, 2), "message")),
				     "'nope'"));
	/* the message names no flag of infergate-bulk's */
	ck_assert_ptr_null(strstr(json_string_value(json_object_get(json_array_get(b->errors, 0), "message")), "--"));
	teardown(&f);
}
END_TEST

START_TEST(validation_waits_for_the_backends_model_lists)
{
	struct fixture f;
	setup(&f);
	/* a second backend, up, whose models are not known yet */
	struct ig_backend *other = ig_backend_fleet_add(&f.gw.fleet, "http://127.0.0.1:10", 1, 0);
	atomic_store(&other->state, IG_BACKEND_UP);
	ck_assert_int_eq(ig_sched_rebuild(&f.gw.sched, &f.gw.fleet), 0);
	ck_assert_uint_gt(f.gw.sched.unknown_up, 0);
	input(&f, "file-w", line("a", "later"));
	struct ig_batch *b = create(&f, "file-w");
	tick(&f, 3);
	ck_assert_str_eq(status(b), "validating");
	ck_assert_str_eq(b->paused, "waiting for the backends' model lists");
	/* its list comes: it serves the model */
	other->models_conf = calloc(1, sizeof(char *));
	other->models_conf[0] = strdup("later");
	other->n_models_conf = 1;
	ck_assert_int_eq(ig_sched_rebuild(&f.gw.sched, &f.gw.fleet), 0);
	result(b, "a", true); /* (done already: the test sends nothing) */
	tick(&f, 1);
	ck_assert_str_eq(status(b), "in_progress");
	ck_assert_str_eq(b->paused, "");
	teardown(&f);
}
END_TEST

START_TEST(cancel_keeps_what_finished_and_ends_cancelled)
{
	struct fixture f;
	setup(&f);
	char text[1024] = "";
	strcat(text, line("a", "m"));
	strcat(text, line("b", "m"));
	input(&f, "file-c", text);
	struct ig_batch *b = create(&f, "file-c");
	result(b, "a", true);
	tick(&f, 2);
	ck_assert_str_eq(status(b), "in_progress");
	/* what POST /v1/batches/ID/cancel does, on whichever reactor: the status only */
	ig_batch_set_status(b, IG_BATCH_CANCELLING);
	ck_assert(b->cancelling_at > 0);
	tick(&f, 1);
	ck_assert_str_eq(status(b), "cancelled");
	ck_assert_int_eq(b->completed, 1);
	ck_assert_ptr_nonnull(ig_files_find(f.gw.files, b->output_file_id, ""));
	ck_assert(!*b->error_file_id); /* no failed line: no errors file */
	teardown(&f);
}
END_TEST

START_TEST(a_batch_past_its_window_expires)
{
	struct fixture f;
	setup(&f);
	input(&f, "file-e", line("a", "m"));
	struct ig_batch *b = create(&f, "file-e");
	b->expires_at = ig_wall_s() - 1;
	tick(&f, 2);
	ck_assert_str_eq(status(b), "expired");
	ck_assert_int_eq(b->in_progress_at, 0);
	teardown(&f);
}
END_TEST

START_TEST(a_restart_resumes_with_the_counts_of_the_result_files)
{
	struct fixture f;
	setup(&f);
	char text[1024] = "";
	strcat(text, line("a", "m"));
	strcat(text, line("b", "m"));
	strcat(text, line("c", "m"));
	input(&f, "file-r", text);
	struct ig_batch *b = create(&f, "file-r");
	tick(&f, 2);
	ck_assert_str_eq(status(b), "in_progress");
	char id[40];
	snprintf(id, sizeof(id), "%s", b->id);
	ig_batches_free(f.bs); /* the gateway stops (no line was sent) */
	/* meanwhile, as if a run had written them before a crash: a, and a torn line */
	char *dir = in_root(&f, "batches/%s", id);
	size_t whole = result_in(dir, "a", true);
	char *p = ig_strdupf("%s/output.jsonl", dir);
	FILE *out = fopen(p, "a");
	fputs("{\"id\":\"batch_req_x\",\"custom_id\":\"b\",\"respo", out); /* the crash cut it */
	fclose(out);
	open_store(&f);
	b = IG_LIST_FIRST(&f.bs->all, struct ig_batch, link);
	ck_assert_str_eq(status(b), "in_progress");
	ck_assert_int_eq(b->completed, 1); /* before any tick or request */
	ck_assert_int_eq(b->failed, 0);
	struct stat st;
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_int_eq(st.st_size, (off_t)whole); /* the torn line is cut: b is sent again */
	free(p);
	free(dir);
	teardown(&f);
}
END_TEST

IG_CHECK_MAIN("batches", a_valid_batch_runs_to_completed_and_its_results_become_files,
	      a_bad_file_fails_validation_naming_its_lines_and_sends_nothing,
	      validation_waits_for_the_backends_model_lists, cancel_keeps_what_finished_and_ends_cancelled,
	      a_batch_past_its_window_expires, a_restart_resumes_with_the_counts_of_the_result_files)
