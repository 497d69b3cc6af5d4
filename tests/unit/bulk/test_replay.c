/* Unit tests for src/bulk/replay.c: the flags (defaults, the CSV's name,
 * bad values named), and the preflight: an existing output, a bad trace or
 * an unreachable server stop the replay before anything is sent, with exit
 * code 2 and no file written. The run itself: tests/integration/test_replay.py. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../../src/bulk/stream.c"
#include "../../../src/bulk/report.c"
#include "../../../src/bulk/autoconc.c"
#include "../../../src/bulk/replay.c"
#include "../check_main.h"

START_TEST(flags_have_their_defaults_and_bad_values_are_named)
{
	struct replay_opts o;
	char *err = NULL;
	char *ok[] = {"replay", "--input", "t.jsonl", "--output", "/tmp/r.jsonl", "--url", "http://h:1/v1/"};
	ck_assert_int_eq(parse_flags(7, ok, &o, &err), 0);
	ck_assert_str_eq(o.url, "http://h:1");
	ck_assert_str_eq(o.csv, "/tmp/r.seconds.csv");
	ck_assert_double_eq(o.speed, 1);
	ck_assert_double_eq(o.time_scale, 1);
	ck_assert_double_eq(o.slo_ttft_ms, 2000);
	ck_assert_double_eq(o.slo_tpot_ms, 100);
	ck_assert_int_eq(o.bytes_per_token, 4);
	ck_assert_int_eq(o.block_tokens, 512);
	ck_assert_int_eq(o.endpoint, 0);
	ck_assert_int_eq(o.priority, 3); /* none: no header */
	ig_flags_free(&spec, &o);

	char *bad[] = {"replay", "--input", "t", "--output", "o", "--speed", "0", "--endpoint", "embeddings",
		       "--plot", "a'b.png"};
	ck_assert_int_eq(parse_flags(11, bad, &o, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "--speed"));
	ck_assert_ptr_nonnull(strstr(err, "--endpoint: 'embeddings' is not chat or completions"));
	ck_assert_ptr_nonnull(strstr(err, "--plot: 'a'b.png'"));
	free(err);
	ig_flags_free(&spec, &o);

	char *none[] = {"replay", "--output", "o"};
	ck_assert_int_eq(parse_flags(3, none, &o, &err), -1);
	ck_assert_str_eq(err, "--input is required (see replay --help)");
	free(err);
	ig_flags_free(&spec, &o);
}
END_TEST

static char *write_tmp(const char *text)
{
	char *path = strdup("/tmp/ig-replay-XXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static int exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

START_TEST(the_preflight_stops_before_anything_is_sent)
{
	char *good = write_tmp("{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n");
	char *bad = write_tmp("{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n"
			      "{\"timestamp\": 1, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": [1]}\n");
	char out[] = "/tmp/ig-replay-out-XXXXXX";
	ck_assert_ptr_nonnull(mkdtemp(out));
	char *o1 = ig_strdupf("%s/r.jsonl", out), *csv = ig_strdupf("%s/r.seconds.csv", out);

	/* a trace out of order: exit 2, nothing written */
	char *a1[] = {"replay", "--input", bad, "--output", o1, "--url", "http://127.0.0.1:1"};
	ck_assert_int_eq(ig_replay_main(7, a1), BULK_EXIT_USAGE);
	ck_assert(!exists(o1) && !exists(csv));
	/* a good trace, no server: exit 2 */
	char *a2[] = {"replay", "--input", good, "--output", o1, "--url", "http://127.0.0.1:1"};
	ck_assert_int_eq(ig_replay_main(7, a2), BULK_EXIT_USAGE);
	ck_assert(!exists(o1) && !exists(csv));
	/* an existing output is not overwritten */
	FILE *f = fopen(o1, "w");
	fputs("old\n", f);
	fclose(f);
	ck_assert_int_eq(ig_replay_main(7, a2), BULK_EXIT_USAGE);
	f = fopen(o1, "r");
	char line[16] = "";
	ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
	fclose(f);
	ck_assert_str_eq(line, "old\n");
	ck_assert(!exists(csv));
	unlink(o1);
	rmdir(out);
	unlink(good);
	unlink(bad);
	free(good);
	free(bad);
	free(o1);
	free(csv);
}
END_TEST

IG_CHECK_MAIN("replay", flags_have_their_defaults_and_bad_values_are_named, the_preflight_stops_before_anything_is_sent)
