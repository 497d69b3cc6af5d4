/* Unit tests for SIGHUP (src/gateway/core/reload.c): a gateway set up as the
 * program does (ig_boot_init, no reactor running) from a configuration
 * file, which is then changed and reloaded: backends added (probed before
 * they serve), removed ones drained, changed ones reconfigured, the policy
 * changed, what needs a restart kept; a configuration or a key file with a
 * problem refused with the running one untouched; the key files' checks. */
#include "config.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "core/boot.h"
#include "core/conf_parts.h"
#include "core/reload.h"
#include "fleet/backend.h"
#include "gateway.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "keys/keyset.h"
#include "sched/policy.h"
#include "../../check_main.h"

/* The modules' rows and checks, as main.c registers them. */
__attribute__((constructor)) static void register_table(void)
{
	if (ig_conf_parts_register() < 0)
		abort();
}

static char dir[64], conf_path[128], keys_path[128];
static struct ig_conf cfg;
static struct ig_gw gw;
static char *argv[4];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

static void setup(const char *first)
{
	snprintf(dir, sizeof(dir), "/tmp/ig-test-reload-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(conf_path, sizeof(conf_path), "%s/config.json", dir);
	snprintf(keys_path, sizeof(keys_path), "%s/api.keys", dir);
	write_file(conf_path, first);
	argv[0] = "infergate";
	argv[1] = "--config";
	argv[2] = conf_path;
	char *err = NULL;
	ig_log_set_level(IG_LOG_ERROR);
	ck_assert_msg(ig_conf_from_args(&cfg, 3, argv, &err) == 0, "%s", err);
	ck_assert_int_eq(ig_boot_init(&gw, &cfg), 0);
	gw.argc = 3;
	gw.argv = argv;
}

static void teardown(void)
{
	ig_boot_free(&gw);
	ig_conf_free(&cfg);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	ck_assert_int_eq(system(cmd), 0);
}

static struct ig_backend *backend(const char *url)
{
	return ig_backend_fleet_find_url(&gw.fleet, url);
}

START_TEST(backends_and_policy_follow_the_file)
{
	setup("{\"listen\": \"127.0.0.1:0\", \"log_level\": \"error\", \"workers\": 1, \"policy\": \"round-robin\","
	      " \"backends\": [\"http://127.0.0.1:30001\", {\"url\": \"http://127.0.0.1:30002\", \"weight\": 1}]}");
	struct ig_backend *a = backend("http://127.0.0.1:30001"), *b = backend("http://127.0.0.1:30002");
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	int b_id = b->id;
	atomic_store(&a->inflight, 1); /* a request runs there */

	write_file(conf_path,
		   "{\"listen\": \"127.0.0.1:9999\", \"log_level\": \"error\", \"workers\": 1, \"policy\": \"least-loaded\","
		   " \"backends\": [{\"url\": \"http://127.0.0.1:30002\", \"weight\": 5, \"models\": [\"llama\"]},"
		   " \"http://127.0.0.1:30003\"]}");
	ck_assert_int_eq(ig_reload(&gw), 0);
	/* the one gone drains (its request in flight finishes), then goes */
	ck_assert_int_eq(atomic_load(&a->admin), IG_ADMIN_REMOVING);
	ck_assert_ptr_eq(backend("http://127.0.0.1:30001"), a);
	/* the one kept is the same backend, reconfigured */
	ck_assert_ptr_eq(backend("http://127.0.0.1:30002"), b);
	ck_assert_int_eq(b->id, b_id);
	ck_assert_int_eq(b->weight, 5);
	ck_assert_int_eq(ig_backend_serves(b, "llama"), IG_SERVES_YES);
	/* the new one is probed before it serves */
	struct ig_backend *c = backend("http://127.0.0.1:30003");
	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(c->probe);
	ck_assert_int_eq(atomic_load(&c->state), IG_BACKEND_DOWN);
	ck_assert_str_eq(ig_policy_name(gw.cfg->policy), "least-loaded");
	/* the listen address needs a restart: kept */
	ck_assert_str_eq(gw.cfg->listen, "127.0.0.1:0");
	ck_assert(gw.drain_pending);

	/* a is named again before it was removed: it serves again */
	write_file(conf_path, "{\"listen\": \"127.0.0.1:0\", \"log_level\": \"error\", \"workers\": 1,"
			      " \"backends\": [\"http://127.0.0.1:30001\", \"http://127.0.0.1:30002\"]}");
	ck_assert_int_eq(ig_reload(&gw), 0);
	ck_assert_int_eq(atomic_load(&a->admin), IG_ADMIN_ENABLED);
	ck_assert_ptr_eq(backend("http://127.0.0.1:30001"), a);
	/* c had nothing in flight: removed at once */
	ck_assert_ptr_null(backend("http://127.0.0.1:30003"));
	ck_assert_uint_eq(gw.fleet.n, 2);
	atomic_store(&a->inflight, 0);
	teardown();
}
END_TEST

START_TEST(a_bad_file_keeps_the_running_configuration)
{
	setup("{\"listen\": \"127.0.0.1:0\", \"log_level\": \"error\", \"workers\": 1, \"policy\": \"round-robin\","
	      " \"backends\": [\"http://127.0.0.1:30001\"]}");
	struct ig_backend *a = backend("http://127.0.0.1:30001");

	write_file(conf_path, "{\"backends\": [\"http://127.0.0.1:30009\"], \"policy\": \"least-loaded\",");
	ck_assert_int_eq(ig_reload(&gw), -1);
	write_file(conf_path, "{\"backends\": [\"http://127.0.0.1:30009\"], \"policy\": \"no-such-policy\"}");
	ck_assert_int_eq(ig_reload(&gw), -1);
	/* a key file with a line that is no key: refused too */
	write_file(keys_path, "not-a-hash\n");
	char conf[512];
	snprintf(conf, sizeof(conf),
		 "{\"listen\": \"127.0.0.1:0\", \"log_level\": \"error\", \"workers\": 1, \"api_keys_file\": \"%s\","
		 " \"backends\": [\"http://127.0.0.1:30009\"]}",
		 keys_path);
	write_file(conf_path, conf);
	ck_assert_int_eq(ig_reload(&gw), -1);

	ck_assert_uint_eq(gw.fleet.n, 1);
	ck_assert_ptr_eq(backend("http://127.0.0.1:30001"), a);
	ck_assert_int_eq(atomic_load(&a->admin), IG_ADMIN_ENABLED);
	ck_assert_ptr_null(backend("http://127.0.0.1:30009"));
	ck_assert_str_eq(ig_policy_name(gw.cfg->policy), "round-robin");
	ck_assert(!gw.api_keys.enabled);
	teardown();
}
END_TEST

START_TEST(the_key_files_are_checked_together)
{
	setup("{\"listen\": \"127.0.0.1:0\", \"log_level\": \"error\", \"workers\": 1,"
	      " \"backends\": [\"http://127.0.0.1:30001\"]}");
	char hex[2 * IG_DIGEST_LEN + 1];
	ig_keyset_hash("k1", 2, hex);
	write_file(keys_path, hex);
	struct ig_conf c;
	char *err = NULL;
	char *args[] = {"infergate", "--backend", "http://127.0.0.1:30001", "--api-keys-file", keys_path,
			"--auth-status", "1"};
	ck_assert_msg(ig_conf_from_args(&c, 7, args, &err) == 0, "%s", err);
	/* /metrics and /status would be closed to every key */
	ck_assert_int_eq(ig_reload_check_files(&c, &err), -1);
	ck_assert_ptr_nonnull(strstr(err, "auth_status: 1, but no key may read /metrics"));
	free(err);
	err = NULL;
	c.auth_status = 0;
	ck_assert_int_eq(ig_reload_check_files(&c, &err), 0);

	/* taken at start (and at a reload): the key is known */
	ck_assert_int_eq(ig_reload_files(&gw, &c, &err), 0);
	ck_assert(gw.api_keys.enabled);
	ck_assert_uint_eq(gw.api_keys.n, 1);
	ig_conf_free(&c);
	teardown();
}
END_TEST

IG_CHECK_MAIN("reload", backends_and_policy_follow_the_file, a_bad_file_keeps_the_running_configuration,
	      the_key_files_are_checked_together)
