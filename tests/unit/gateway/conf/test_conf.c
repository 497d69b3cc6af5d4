/* Unit tests for the gateway's configuration (src/gateway/conf/conf.c). */
#include "config.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf/conf.h"
#include "core/conf_parts.h"
#include "../../check_main.h"

/* The modules' rows and checks, as main.c registers them. */
__attribute__((constructor)) static void register_table(void)
{
	if (ig_conf_parts_register() < 0)
		abort();
}

static char *write_tmp(const char *text)
{
	char *path = strdup("/tmp/igcfgXXXXXX");
	int fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static int load_args(struct ig_conf *cfg, char **err, int argc, ...)
{
	char *argv[32] = {"infergate"};
	va_list ap;
	va_start(ap, argc);
	for (int i = 0; i < argc; i++)
		argv[i + 1] = va_arg(ap, char *);
	va_end(ap);
	return ig_conf_from_args(cfg, argc + 1, argv, err);
}

START_TEST(config_file_and_flag_override)
{
	char *path = write_tmp("{\"backends\": [\"http://a:1/\", {\"url\": \"http://b:2\", \"weight\": 3, "
			       "\"max_inflight\": 5}], \"health\": {\"fall\": 4}, \"retries\": 1}");
	struct ig_conf cfg;
	char *err = NULL;
	ck_assert_int_eq(load_args(&cfg, &err, 4, "--config", path, "--retries", "3"), 0);
	ck_assert_uint_eq(cfg.n_backends, 2);
	ck_assert_str_eq(cfg.backends[0].url, "http://a:1");
	ck_assert_int_eq(cfg.backends[1].weight, 3);
	ck_assert_int_eq(cfg.backends[1].max_inflight, 5);
	ck_assert_int_eq(cfg.health_fall, 4);
	ck_assert_int_eq(cfg.health_rise, 2);
	ck_assert_int_eq(cfg.retries, 3);
	ck_assert_str_eq(cfg.listen_host, "127.0.0.1");
	ck_assert_int_eq(cfg.listen_port, 8080);
	ig_conf_free(&cfg);
	unlink(path);
	free(path);
}
END_TEST

START_TEST(config_names_every_problem)
{
	char *path = write_tmp("{\"backends\": [\"http://a:1\", \"http://a:1/\", 7], \"polcy\": \"x\", "
			       "\"health\": {\"rise\": 0}, \"timeouts\": {\"idle\": 1}}");
	struct ig_conf cfg;
	char *err = NULL;
	ck_assert_int_eq(load_args(&cfg, &err, 2, "--config", path), -1);
	ck_assert_ptr_nonnull(strstr(err, "listed twice"));
	ck_assert_ptr_nonnull(strstr(err, "backends[2]"));
	ck_assert_ptr_nonnull(strstr(err, "unknown key 'polcy' (did you mean 'policy'?)"));
	ck_assert_ptr_nonnull(strstr(err, "health.rise"));
	ck_assert_ptr_nonnull(strstr(err, "timeouts.idle"));
	free(err);
	ig_conf_free(&cfg);
	unlink(path);
	free(path);
}
END_TEST

/* curl decodes "%ff" in a host to a raw byte: such a URL is refused, so
 * that --check-config can print every backend it accepted (as UTF-8 JSON). */
START_TEST(config_backend_url_bytes)
{
	struct ig_conf cfg;
	char *err = NULL;
	ck_assert_int_eq(load_args(&cfg, &err, 6, "--backend", "http://%ff/", "--backend", "http://h/\xc3",
				   "--backend", "http://h/%ff/"),
			 -1);
	ck_assert_ptr_nonnull(strstr(err, "--backend: 'http://%ff/' is not a valid backend URL (the host must be"));
	ck_assert_ptr_null(strstr(err, "http://h/%ff/"));
	ig_conf_free(&cfg);
	free(err);
	err = NULL;
	ck_assert_int_eq(load_args(&cfg, &err, 2, "--backend", "http://h/a\xc3\xa4"), -1);
	ck_assert_ptr_nonnull(strstr(err, "the path must be ASCII"));
	ig_conf_free(&cfg);
	free(err);
	err = NULL;
	ck_assert_int_eq(load_args(&cfg, &err, 2, "--backend", "http://[::1]:9/v1%ff/"), 0);
	ck_assert_str_eq(cfg.backends[0].url, "http://[::1]:9/v1%ff");
	char *js = ig_conf_to_json(&cfg);
	ck_assert_ptr_nonnull(strstr(js, "\"url\": \"http://[::1]:9/v1%ff\""));
	free(js);
	ig_conf_free(&cfg);
}
END_TEST

/* trusted_proxies: a list in the file (or one string), a flag replacing
 * it, each bad entry named; client_header_timeout_s and
 * max_connections_per_ip with their defaults and bounds. */
START_TEST(connection_keys)
{
	char *path = write_tmp("{\"backends\": [\"http://a:1\"], \"trusted_proxies\": [\"10.0.0.0/8\", \"::1\"], "
			       "\"max_connections_per_ip\": 20}");
	struct ig_conf cfg;
	char *err = NULL;
	ck_assert_int_eq(load_args(&cfg, &err, 2, "--config", path), 0);
	ck_assert_uint_eq(cfg.trusted_proxies.n, 2);
	ck_assert_int_eq(cfg.trusted_proxies.v[0].bits, 8);
	ck_assert_int_eq(cfg.max_connections_per_ip, 20);
	ck_assert_int_eq(cfg.client_header_timeout_s, 10);
	char *js = ig_conf_to_json(&cfg);
	ck_assert_ptr_nonnull(strstr(js, "\"trusted_proxies\": [\n    \"10.0.0.0/8\",\n    \"::1/128\"\n  ]"));
	free(js);
	ig_conf_free(&cfg);
	ck_assert_int_eq(load_args(&cfg, &err, 6, "--config", path, "--trusted-proxies", "192.0.2.0/24",
				   "--client-header-timeout-s", "0"), 0);
	ck_assert_uint_eq(cfg.trusted_proxies.n, 1);
	ck_assert_int_eq(cfg.client_header_timeout_s, 0);
	ig_conf_free(&cfg);
	unlink(path);
	free(path);
	path = write_tmp("{\"backends\": [\"http://a:1\"], \"trusted_proxies\": [\"10.0.0.0/8\", 7, \"a,b\"], "
			 "\"max_connections_per_ip\": -1}");
	ck_assert_int_eq(load_args(&cfg, &err, 2, "--config", path), -1);
	ck_assert_ptr_nonnull(strstr(err, "trusted_proxies[1]: 7 is not an address or network"));
	ck_assert_ptr_nonnull(strstr(err, "trusted_proxies[2]: \"a,b\" is not an address or network"));
	ck_assert_ptr_nonnull(strstr(err, "max_connections_per_ip"));
	free(err);
	err = NULL;
	ig_conf_free(&cfg);
	unlink(path);
	free(path);
	ck_assert_int_eq(load_args(&cfg, &err, 4, "--backend", "http://a:1", "--trusted-proxies", "10.0.0.0/8, 10.0.0.0/40"),
			 -1);
	ck_assert_ptr_nonnull(strstr(err, "trusted_proxies: '10.0.0.0/40' is not an IP address or network"));
	free(err);
	ig_conf_free(&cfg);
}
END_TEST

IG_CHECK_MAIN("conf", config_file_and_flag_override, config_names_every_problem, config_backend_url_bytes,
	      connection_keys)
