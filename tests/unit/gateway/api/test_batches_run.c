/* Unit tests for the Batch API's runner (src/gateway/api/batches_run.c,
 * included to reach its static functions): a result the disk refuses is
 * kept, in order behind the others, and written when the disk takes it
 * again (nothing lost, the batch paused meanwhile); a resumed batch reads
 * only the lines no result file holds; a batch's share of its models'
 * slots; what is retried. No transfer is started. */
#include "../../../../src/gateway/api/batches_run.c"

#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "conf/conf.h"
#include "sched/scheduler.h"
#include "../../check_main.h"

static char root[64];

static char *path_of(const char *name)
{
	return ig_strdupf("%s/%s", root, name);
}

static void make_root(void)
{
	strcpy(root, "/tmp/ig-test-batches-run-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(root));
	ig_log_set_level(IG_LOG_ERROR);
}

static void put(const char *name, const char *text)
{
	char *p = path_of(name);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
	free(p);
}

static char *slurp(const char *name)
{
	static char buf[4096];
	char *p = path_of(name);
	FILE *f = fopen(p, "r");
	free(p);
	if (!f)
		return strcpy(buf, "(none)");
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void clean_root(const char **names)
{
	for (; *names; names++) {
		char *p = path_of(*names);
		unlink(p);
		free(p);
	}
	rmdir(root);
}

static void batch_init(struct ig_batches *bs, struct ig_batch *b, const char *id)
{
	memset(b, 0, sizeof(*b));
	b->bs = bs;
	snprintf(b->id, sizeof(b->id), "%s", id);
	ig_list_init(&b->items);
	ig_list_init(&b->pending);
	b->out.fd = b->err.fd = -1;
}

START_TEST(results_the_disk_refuses_wait_in_order_and_nothing_is_lost)
{
	make_root();
	struct ig_batches bs;
	memset(&bs, 0, sizeof(bs));
	struct ig_batch b;
	batch_init(&bs, &b, "batch_full");
	char *err = NULL, *errs = path_of("errors.jsonl");
	ck_assert_int_eq(ig_journal_open(&b.out, "/dev/full", &err), 0); /* a disk with no room */
	ck_assert_int_eq(ig_journal_open(&b.err, errs, &err), 0);
	b.journals_open = true;

	emit(&bs, &b, 0, strdup("{\"custom_id\":\"a\"}\n"), 18);
	ck_assert_str_eq(b.paused, "cannot write the results to data_dir: No space left on device (paused; nothing is "
				   "lost)");
	/* the errors file has room, but its line waits behind the first: the
	 * files keep the order the answers came in */
	emit(&bs, &b, 1, strdup("{\"custom_id\":\"b\"}\n"), 18);
	emit(&bs, &b, 0, strdup("{\"custom_id\":\"c\"}\n"), 18);
	ck_assert_str_eq(slurp("errors.jsonl"), "");
	ck_assert_int_eq(b.completed + b.failed, 0);

	/* still full: nothing moves */
	ig_batch_flush_pending(&bs, &b);
	ck_assert_int_eq(b.completed + b.failed, 0);
	ck_assert(*b.paused);

	/* room again */
	char *outs = path_of("output.jsonl");
	ig_journal_close(&b.out);
	ck_assert_int_eq(ig_journal_open(&b.out, outs, &err), 0);
	ig_batch_flush_pending(&bs, &b);
	ck_assert_str_eq(slurp("output.jsonl"), "{\"custom_id\":\"a\"}\n{\"custom_id\":\"c\"}\n");
	ck_assert_str_eq(slurp("errors.jsonl"), "{\"custom_id\":\"b\"}\n");
	ck_assert_int_eq(b.completed, 2);
	ck_assert_int_eq(b.failed, 1);
	ck_assert_uint_eq(bs.lines_ok, 2);
	ck_assert_uint_eq(bs.lines_failed, 1);
	ck_assert_str_eq(b.paused, "");
	ck_assert(ig_list_empty(&b.pending));

	/* and the next one goes straight in */
	emit(&bs, &b, 0, strdup("{\"custom_id\":\"d\"}\n"), 18);
	ck_assert_int_eq(b.completed, 3);
	ig_batch_run_clear(&b);
	free(outs);
	free(errs);
	clean_root((const char *[]){"output.jsonl", "errors.jsonl", NULL});
}
END_TEST

static const char *line(const char *id)
{
	static char buf[256];
	snprintf(buf, sizeof(buf),
		 "{\"custom_id\":\"%s\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\","
		 "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}}\n",
		 id);
	return buf;
}

START_TEST(a_resumed_batch_reads_only_the_lines_not_done)
{
	make_root();
	char input[4096] = "";
	strcat(input, line("a"));
	strcat(input, line("b"));
	strcat(input, "{\"custom_id\": \"broken\", \"body\": \n"); /* changed under us since it was checked */
	strcat(input, line("c"));
	strcat(input, line("d"));
	put("input.jsonl", input);
	/* an earlier run answered a (output) and c (errors) */
	put("output.jsonl", "{\"id\":\"batch_req_1\",\"custom_id\":\"a\",\"response\":{\"status_code\":200},\"error\":null}\n");
	put("errors.jsonl", "{\"id\":\"batch_req_2\",\"custom_id\":\"c\",\"response\":{\"status_code\":400},\"error\":null}\n");

	struct ig_batches bs;
	memset(&bs, 0, sizeof(bs));
	struct ig_batch b;
	batch_init(&bs, &b, "batch_resume");
	char *err = NULL, *in = path_of("input.jsonl"), *out = path_of("output.jsonl"), *errs = path_of("errors.jsonl");
	ig_journal_done_init(&b.done);
	ck_assert_msg(ig_journal_done_load(&b.done, out, errs, &err) == 0, "%s", err);
	b.done_loaded = true;
	ck_assert_int_eq(ig_corpus_open(&b.rd, in, &err), 0);
	b.rd_open = true;

	struct ig_corpus_line l;
	ck_assert_int_eq(next_line(&b, &l), 1);
	ck_assert_str_eq(l.custom_id, "b");
	ck_assert_str_eq(l.model, "m");
	ig_corpus_line_clear(&l);
	ck_assert_int_eq(next_line(&b, &l), 1);
	ck_assert_str_eq(l.custom_id, "d");
	ig_corpus_line_clear(&l);
	ck_assert(!b.input_done);
	ck_assert_int_eq(next_line(&b, &l), 0);
	ck_assert(b.input_done);
	ck_assert_int_eq(next_line(&b, &l), 0);

	ig_batch_run_clear(&b);
	free(in);
	free(out);
	free(errs);
	clean_root((const char *[]){"input.jsonl", "output.jsonl", "errors.jsonl", NULL});
}
END_TEST

START_TEST(a_batch_shares_its_models_slots)
{
	struct ig_conf cfg;
	struct ig_gw gw;
	memset(&cfg, 0, sizeof(cfg));
	memset(&gw, 0, sizeof(gw));
	gw.cfg = &cfg;
	ig_sched_init(&gw.sched);
	char *m[] = {"m"};
	struct ig_backend *be = ig_backend_fleet_add(&gw.fleet, "http://127.0.0.1:9", 1, 0);
	ck_assert_int_eq(ig_backend_set_models(be, m, 1), 0);
	atomic_store(&be->state, IG_BACKEND_UP);
	ck_assert_int_eq(ig_sched_rebuild(&gw.sched, &gw.fleet), 0);

	struct ig_batches bs;
	memset(&bs, 0, sizeof(bs));
	bs.gw = &gw;
	ig_list_init(&bs.all);
	struct ig_batch b1, b2;
	batch_init(&bs, &b1, "batch_1");
	batch_init(&bs, &b2, "batch_2");

	/* a restart: no model seen yet, one line teaches the first */
	ck_assert_int_eq(share_of(&bs, &b1), 1);

	b1.models[0] = "m";
	b1.n_models = 1;
	b1.status = IG_BATCH_IN_PROGRESS;
	ig_list_append(&bs.all, &b1.link);
	/* a backend without any limit counts 64, and an eighth more and 4 keep it full */
	ck_assert_int_eq(share_of(&bs, &b1), 64 + 8 + 4);
	ck_assert(model_up(&gw, "m"));
	ck_assert(!model_up(&gw, "other"));

	/* its limit known (load reports: 16 slots) */
	atomic_store(&be->slots, 16);
	ck_assert_int_eq(share_of(&bs, &b1), 16 + 2 + 4);
	/* slots kept for the other classes: a bulk line may take the rest */
	be->reserve_slots = 6;
	ck_assert_int_eq(share_of(&bs, &b1), 10 + 1 + 4);
	be->reserve_slots = 0;

	/* two batches on the model split it */
	b2.models[0] = "m";
	b2.n_models = 1;
	b2.status = IG_BATCH_IN_PROGRESS;
	ig_list_append(&bs.all, &b2.link);
	ck_assert_int_eq(share_of(&bs, &b1), 11);
	ck_assert_int_eq(share_of(&bs, &b2), 11);

	/* batch_max_inflight caps it */
	cfg.batch_max_inflight = 5;
	ck_assert_int_eq(share_of(&bs, &b1), 5);
	cfg.batch_max_inflight = 0;

	/* its backend down: nothing is sent, the model is not up */
	atomic_store(&be->state, IG_BACKEND_DOWN);
	ck_assert_int_eq(ig_sched_rebuild(&gw.sched, &gw.fleet), 0);
	ck_assert_int_eq(share_of(&bs, &b1), 0);
	ck_assert(!model_up(&gw, "m"));

	ig_sched_free(&gw.sched);
	ig_backend_fleet_free(&gw.fleet);
}
END_TEST

/* What a line's answer does: sent again (up to 8 tries, 1 s, 2 s, ... 30 s
 * apart) or written as it is. */
START_TEST(what_is_retried)
{
	ck_assert(retryable(0));   /* no answer: the connection failed */
	ck_assert(retryable(408));
	ck_assert(retryable(429));
	ck_assert(retryable(500));
	ck_assert(retryable(503));
	ck_assert(!retryable(200));
	ck_assert(!retryable(400)); /* the client's mistake: written to errors.jsonl */
	ck_assert(!retryable(404));
	ck_assert(!retryable(413));
}
END_TEST

IG_CHECK_MAIN("batches_run", results_the_disk_refuses_wait_in_order_and_nothing_is_lost,
	      a_resumed_batch_reads_only_the_lines_not_done, a_batch_shares_its_models_slots, what_is_retried)
