/* Unit tests for what src/gateway/cluster/cluster.c does with a value Redis gave
 * that was refused (ig_cluster_count_bad): counted by kind in
 * infergate_cluster_bad_messages_total (every kind of redismsg.h at 0 from
 * the start, the transport's as they come, "other" past the table) and in
 * /health/backends, logged once per kind with what was refused shown
 * printable. (A key's share of its limits, which no figure that is not a
 * number lifts, is test_cluster_share.c's.) The counts live in cluster_sync.c,
 * the cluster's Redis I/O, whose other work runs against a real Redis in
 * tests/integration/test_cluster*.py. */
#include "../../../../src/gateway/cluster/cluster.c"

#include <check.h>
#include <fcntl.h>

#include "../../check_main.h"

/* What fn logs to stderr while it runs. */
static char *logged(void (*fn)(struct ig_cluster *), struct ig_cluster *c)
{
	char path[] = "/tmp/ig-cluster-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(2);
	ck_assert_int_ge(fd, 0);
	fflush(stderr);
	dup2(fd, 2);
	fn(c);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	off_t n = lseek(fd, 0, SEEK_END);
	char *out = calloc(1, (size_t)n + 1);
	ck_assert_int_eq(pread(fd, out, (size_t)n, 0), n);
	close(fd);
	unlink(path);
	return out;
}

static void three_bad_figures_and_a_transports_kind(struct ig_cluster *c)
{
	ig_cluster_count_bad(c, IG_BAD_KEY_SYNC, "figure 1 'nan' of 'nan 0 0 0 0 0'");
	ig_cluster_count_bad(c, IG_BAD_KEY_SYNC, "figure 3 'inf'");
	ig_cluster_count_bad(c, IG_BAD_KEY_SYNC, "figure 5 '-1e309'");
	ig_cluster_count_bad(c, "pubsub_channel", "a channel that is an integer\x1b[2J\n");
}

START_TEST(a_refused_value_is_counted_by_kind_and_logged_once)
{
	struct ig_cluster *c = calloc(1, sizeof(*c));
	c->name = "gw-a";
	c->shown = "redis://127.0.0.1:6379/0";
	ig_cluster_sync_bad_init(c);
	char *log = logged(three_bad_figures_and_a_transports_kind, c);
	/* once per kind, naming the first value and the series */
	ck_assert_ptr_nonnull(strstr(log, "cluster: a bad key_sync from Redis, dropped: figure 1 'nan'"));
	ck_assert_ptr_nonnull(strstr(log, "infergate_cluster_bad_messages_total{kind=\"key_sync\"}"));
	ck_assert_ptr_null(strstr(log, "figure 3"));
	ck_assert_ptr_nonnull(strstr(log, "a bad pubsub_channel from Redis, dropped: a channel that is an integer?[2J?"));
	ck_assert_ptr_null(strchr(log, '\x1b'));
	free(log);

	struct ig_buf b;
	ig_buf_init(&b);
	report_prom(c, &b);
	ig_buf_append(&b, "", 1);
	const char *m = ig_buf_head(&b);
	ck_assert_ptr_nonnull(strstr(m, "# TYPE infergate_cluster_bad_messages_total counter\n"));
	ck_assert_ptr_nonnull(strstr(m, "infergate_cluster_bad_messages_total{kind=\"key_sync\"} 3\n"));
	ck_assert_ptr_nonnull(strstr(m, "infergate_cluster_bad_messages_total{kind=\"pubsub_channel\"} 1\n"));
	for (size_t i = 0; i < ig_redismsg_nkinds; i++) { /* every kind, seen or not */
		char want[128];
		snprintf(want, sizeof(want), "infergate_cluster_bad_messages_total{kind=\"%s\"} ", ig_redismsg_kinds[i]);
		ck_assert_msg(strstr(m, want), "no series for %s", ig_redismsg_kinds[i]);
	}
	ck_assert_ptr_nonnull(strstr(m, "infergate_cluster_bad_messages_total{kind=\"sync\"} 0\n"));
	ig_buf_free(&b);

	json_t *o = report_json(c);
	json_t *bad = json_object_get(o, "bad_messages");
	ck_assert_int_eq(json_integer_value(json_object_get(bad, "key_sync")), 3);
	ck_assert_int_eq(json_integer_value(json_object_get(bad, "pubsub_channel")), 1);
	ck_assert_ptr_null(json_object_get(bad, "sync")); /* only those seen */
	json_decref(o);

	/* more kinds than the table holds: the rest as "other", still counted */
	static const char *const many[] = {"k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09",
					   "k10", "k11", "k12", "k13", "k14", "k15", "k16", "k17", "k18", "k19",
					   "k20", "k21", "k22", "k23", "k24", "k25"};
	int saved = dup(2), devnull = open("/dev/null", O_WRONLY);
	dup2(devnull, 2);
	for (size_t i = 0; i < sizeof(many) / sizeof(*many); i++)
		ig_cluster_count_bad(c, many[i], "x");
	dup2(saved, 2);
	close(saved);
	close(devnull);
	ck_assert_int_eq((int)c->nbad, BAD_KINDS_MAX);
	ck_assert_str_eq(c->bad[BAD_KINDS_MAX - 1].kind, "other");
	uint64_t sum = 0;
	for (size_t i = 0; i < c->nbad; i++)
		sum += c->bad[i].n;
	ck_assert_uint_eq(sum, 4 + sizeof(many) / sizeof(*many)); /* none lost */
	ig_cluster_count_bad(NULL, IG_BAD_SYNC, "no cluster: logged only");
	free(c);
}
END_TEST

IG_CHECK_MAIN("cluster", a_refused_value_is_counted_by_kind_and_logged_once)
