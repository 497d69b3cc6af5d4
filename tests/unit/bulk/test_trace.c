/* Unit tests for src/bulk/trace.c: a Mooncake trace read whole and checked
 * (each bad line named, nothing kept), the window, the reuse bound, and the
 * synthetic text of hash ids: the same bytes for the same id wherever it
 * appears, so two prompts share exactly the prefix their ids share. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../src/batchfile/corpus.c"
#include "../../../src/batchfile/idset.c"
#include "../../../src/bulk/trace.c"
#include "../check_main.h"

static char *write_tmp(const char *text)
{
	char *path = strdup("/tmp/ig-trace-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static const struct ig_trace_opts whole_trace = {0, 0, 0, 512};

/* Loads text; returns the problems ("" none) and the status. */
static int load(const char *text, const struct ig_trace_opts *o, struct ig_trace *t, char **problems)
{
	char *path = write_tmp(text);
	struct ig_buf pb;
	long n = 0;
	ig_buf_init(&pb);
	int rc = ig_trace_load(t, path, o, &pb, &n);
	*problems = strdup(ig_buf_head(&pb));
	ig_buf_free(&pb);
	unlink(path);
	free(path);
	return rc;
}

START_TEST(a_mooncake_trace_is_read_with_its_window_and_reuse_bound)
{
	const char *text =
		"{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 10, \"hash_ids\": [0, 1]}\n"
		"{\"timestamp\": 500, \"input_length\": 1500, \"output_length\": 0, \"hash_ids\": [0, 1, 2]}\n"
		"\n"
		"{\"timestamp\": 2500, \"input_length\": 512, \"output_length\": 7, \"hash_ids\": [9]}\n";
	struct ig_trace t;
	char *pb;
	ck_assert_int_eq(load(text, &whole_trace, &t, &pb), 0);
	ck_assert_str_eq(pb, "");
	ck_assert_int_eq(t.kind, IG_TRACE_MOONCAKE);
	ck_assert_uint_eq(t.n, 3);
	ck_assert_int_eq(t.lines, 3);
	ck_assert_int_eq(t.v[1].line, 2);
	ck_assert_int_eq(t.v[2].line, 4);
	ck_assert_int_eq(t.v[1].at_ms, 500);
	ck_assert_int_eq(t.v[1].input_len, 1500);
	ck_assert_uint_eq(t.v[1].n_ids, 3);
	ck_assert_int_eq(t.ids[t.v[1].ids_off + 2], 2);
	/* tokens: 1000 + 1500 + 512; seen before: the second request's
	 * blocks 0 and 1, 1024 tokens */
	ck_assert_uint_eq(t.tokens, 3012);
	ck_assert_uint_eq(t.tokens_seen, 1024);
	ck_assert_uint_eq(t.blocks, 6);
	ck_assert_uint_eq(t.blocks_seen, 2);
	ck_assert_double_eq_tol(ig_trace_reuse_bound(&t), 1024.0 / 3012.0, 1e-9);
	ig_trace_free(&t);
	free(pb);

	/* a window from 0.4 s for 2 s: the second request, its time from 0.4 s */
	struct ig_trace_opts w = {0.4, 2.0, 0, 512};
	ck_assert_int_eq(load(text, &w, &t, &pb), 0);
	ck_assert_uint_eq(t.n, 1);
	ck_assert_int_eq(t.v[0].line, 2);
	ck_assert_int_eq(t.v[0].at_ms, 100);
	ck_assert_uint_eq(t.v[0].ids_off, 0); /* the ids of requests outside are not kept */
	ck_assert_uint_eq(t.n_ids, 3);
	ck_assert_uint_eq(t.tokens_seen, 0); /* nothing before it in the window */
	ig_trace_free(&t);
	free(pb);
}
END_TEST

START_TEST(bad_lines_are_each_named_and_nothing_is_kept)
{
	struct ig_trace t;
	char *pb;
	const char *text =
		"{\"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
		"{\"timestamp\": 5, \"input_length\": -3, \"output_length\": 1, \"hash_ids\": [1]}\n"
		"{\"timestamp\": 9, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
		"{\"timestamp\": 4, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n"
		"{\"timestamp\": 12, \"input_length\": 600, \"output_length\": 1, \"hash_ids\": [1]}\n"
		"{\"timestamp\": 13, \"input_length\": 6, \"output_length\": 1, \"hash_ids\": [-1]}\n"
		"not json\n"
		"{\"timestamp\": 14, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}\n";
	ck_assert_int_eq(load(text, &whole_trace, &t, &pb), -1);
	ck_assert_ptr_nonnull(strstr(pb, "line 1: no \"timestamp\""));
	ck_assert_ptr_nonnull(strstr(pb, "line 2: \"input_length\" is -3: not a whole number of at least 1"));
	ck_assert_ptr_nonnull(strstr(pb, "line 4: timestamp 4 is before line 3's 9"));
	ck_assert_ptr_nonnull(strstr(pb, "line 5: 1 hash_ids for an input_length of 600: blocks of 512 tokens need 2"));
	ck_assert_ptr_nonnull(strstr(pb, "line 6: hash_ids[0] is not a whole number of at least 0"));
	ck_assert_ptr_nonnull(strstr(pb, "line 7: not JSON"));
	ck_assert_ptr_nonnull(strstr(pb, "line 8: a Batch line in a trace of Mooncake lines (line 1)"));
	ig_trace_free(&t);
	free(pb);

	ck_assert_int_eq(load("", &whole_trace, &t, &pb), -1);
	ck_assert_ptr_nonnull(strstr(pb, "has no request lines"));
	ig_trace_free(&t);
	free(pb);

	struct ig_trace_opts late = {100, 0, 0, 512};
	ck_assert_int_eq(load("{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n",
			      &late, &t, &pb), -1);
	ck_assert_ptr_nonnull(strstr(pb, "--start 100 --duration 0: no request"));
	ig_trace_free(&t);
	free(pb);
}
END_TEST

START_TEST(batch_lines_need_a_timestamp_each_or_a_rate)
{
	struct ig_trace t;
	char *pb;
	const char *stamped = "{\"timestamp\": 0, \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n"
			      "{\"timestamp\": 250, \"prompt\": \"b\"}\n";
	ck_assert_int_eq(load(stamped, &whole_trace, &t, &pb), 0);
	ck_assert_int_eq(t.kind, IG_TRACE_BATCH);
	ck_assert_uint_eq(t.n, 2);
	ck_assert_int_eq(t.v[1].at_ms, 250);
	ck_assert_int_eq(t.v[1].input_len, -1);
	ck_assert_int_eq(ig_trace_reuse_bound(&t) < 0, 1);
	ig_trace_free(&t);
	free(pb);

	const char *mixed = "{\"timestamp\": 0, \"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n";
	ck_assert_int_eq(load(mixed, &whole_trace, &t, &pb), -1);
	ck_assert_ptr_nonnull(strstr(pb, "line 2 has no \"timestamp\" (line 1 has one)"));
	ig_trace_free(&t);
	free(pb);

	const char *none = "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n{\"prompt\": \"c\"}\n";
	ck_assert_int_eq(load(none, &whole_trace, &t, &pb), -1);
	ck_assert_ptr_nonnull(strstr(pb, "line 1: no \"timestamp\""));
	ck_assert_ptr_nonnull(strstr(pb, "--rate N"));
	ig_trace_free(&t);
	free(pb);
	struct ig_trace_opts rate = {0, 0, 4, 512};
	ck_assert_int_eq(load(none, &rate, &t, &pb), 0);
	ck_assert_int_eq(t.v[2].at_ms, 500);
	ig_trace_free(&t);
	free(pb);
}
END_TEST

START_TEST(hash_ids_give_the_same_text_and_prompts_share_their_prefix)
{
	struct ig_buf a, b;
	ig_buf_init(&a);
	ig_buf_init(&b);
	ig_trace_block_text(&a, 7, 2048);
	ig_trace_block_text(&b, 7, 300);
	ck_assert_uint_eq(a.len, 2048);
	ck_assert_uint_eq(b.len, 300);
	ck_assert_int_eq(memcmp(a.data, b.data, 300), 0); /* a shorter block is a prefix */
	for (size_t i = 0; i < a.len; i++)
		ck_assert(a.data[i] == ' ' || (a.data[i] >= 'a' && a.data[i] <= 'z'));
	ck_assert_ptr_nonnull(memchr(a.data, ' ', a.len));
	ig_buf_reset(&b);
	ig_trace_block_text(&b, 8, 2048);
	ck_assert_int_ne(memcmp(a.data, b.data, 64), 0);
	ig_buf_free(&a);
	ig_buf_free(&b);

	/* two requests that share their first two ids of three */
	struct ig_trace t;
	char *pb;
	const char *text = "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 1, \"hash_ids\": [3, 4, 5]}\n"
			   "{\"timestamp\": 1, \"input_length\": 1200, \"output_length\": 1, \"hash_ids\": [3, 4, 6]}\n";
	ck_assert_int_eq(load(text, &whole_trace, &t, &pb), 0);
	ig_buf_init(&a);
	ig_buf_init(&b);
	ig_trace_prompt(&a, &t, &t.v[0], 512, 4);
	ig_trace_prompt(&b, &t, &t.v[1], 512, 4);
	ck_assert_uint_eq(a.len, 4400);
	ck_assert_uint_eq(b.len, 4800);
	ck_assert_int_eq(memcmp(a.data, b.data, 4096), 0);
	ck_assert_int_ne(memcmp(a.data + 4096, b.data + 4096, 64), 0);
	/* another byte ratio: the same ids, the same shared prefix */
	ig_buf_reset(&a);
	ig_trace_prompt(&a, &t, &t.v[0], 512, 3);
	ck_assert_uint_eq(a.len, 3300);
	ig_buf_free(&a);
	ig_buf_free(&b);
	ig_trace_free(&t);
	free(pb);
}
END_TEST

IG_CHECK_MAIN("trace", a_mooncake_trace_is_read_with_its_window_and_reuse_bound,
	      bad_lines_are_each_named_and_nothing_is_kept, batch_lines_need_a_timestamp_each_or_a_rate,
	      hash_ids_give_the_same_text_and_prompts_share_their_prefix)
