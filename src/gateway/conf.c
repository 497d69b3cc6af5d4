/* Gateway configuration: one table of keys gives the JSON key, the flag, the
 * type, bounds, default and help text, so that parsing, validation, --help and
 * --check-config can never disagree. Every problem is collected (not just the
 * first) and names the key or flag and the bad value.
 * Not here: acting on the configuration (main.c) or reloading it. */
#include "config.h"
#include <curl/curl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/buf.h"
#include "conf.h"
#include "infergate/util.h"

enum ktype {
	K_INT,      /* long within [min, max] */
	K_STR,      /* string */
	K_LISTEN,   /* HOST:PORT */
	K_POLICY,   /* one of the policy names */
	K_BACKENDS, /* list of URLs or {url | discover, weight, max_inflight} */
	K_DISCOVER, /* flag only: one discovered name */
};

struct key {
	const char *key;  /* JSON path: "retries", "health.interval_ms" */
	const char *flag; /* command-line flag, NULL if file only */
	enum ktype type;
	size_t off;
	long min, max, def;
	const char *sdef;
	const char *help;
};

#define OFF(f) offsetof(struct ig_conf, f)
static const struct key keys[] = {
	{"listen", "--listen", K_LISTEN, OFF(listen), 0, 0, 0, "127.0.0.1:8080",
	 "address to serve on, HOST:PORT"},
	{"backends", "--backend", K_BACKENDS, OFF(backends), 0, 0, 0, NULL,
	 "backend base URL (repeatable; replaces the file's list); in the file a list of URL strings or {\"url\", \"weight\", \"max_inflight\"}"},
	{"backends", "--discover", K_DISCOVER, OFF(backends), 0, 0, 0, NULL,
	 "backend URL whose host is a DNS name: every address it resolves to becomes a backend (repeatable; "
	 "in the file {\"discover\": URL})"},
	{"discover_interval_s", "--discover-interval-s", K_INT, OFF(discover_interval_s), 1, 86400, 10, NULL,
	 "how often discovered names are resolved again"},
	{"policy", "--policy", K_POLICY, OFF(policy_name), 0, 0, 0, "least-loaded",
	 "least-loaded | round-robin | random | power-of-two"},
	{"health.path", "--health-path", K_STR, OFF(health_path), 0, 0, 0, "/health",
	 "path probed on each backend"},
	{"health.interval_ms", "--health-interval-ms", K_INT, OFF(health_interval_ms), 50, 3600000, 2000, NULL,
	 "time between probes of one backend"},
	{"health.timeout_ms", "--health-timeout-ms", K_INT, OFF(health_timeout_ms), 10, 600000, 5000, NULL,
	 "a probe slower than this fails, unless the backend is answering requests meanwhile "
	 "(SGLang's /health runs a generation and takes over 1 s)"},
	{"health.rise", "--health-rise", K_INT, OFF(health_rise), 1, 100, 2, NULL,
	 "consecutive successes that bring a backend up"},
	{"health.fall", "--health-fall", K_INT, OFF(health_fall), 1, 100, 3, NULL,
	 "consecutive failures that take a backend down"},
	{"retries", "--retries", K_INT, OFF(retries), 0, 20, 2, NULL,
	 "retries on another backend before any byte reached the client"},
	{"max_inflight", "--max-inflight", K_INT, OFF(max_inflight), 0, 1000000, 0, NULL,
	 "default per-backend limit of requests in flight (0 = none)"},
	{"queue_size", "--queue-size", K_INT, OFF(queue_size), 0, 1000000, 16384, NULL,
	 "requests that may wait when every backend is at its limit (then 429)"},
	{"queue_timeout_ms", "--queue-timeout-ms", K_INT, OFF(queue_timeout_ms), 1, 3600000, 600000, NULL,
	 "longest wait in the queue (then 503); with learned slot counts this queue stands in for the "
	 "backends' own, which have no timeout"},
	{"max_body_bytes", "--max-body-bytes", K_INT, OFF(max_body_bytes), 1024, 1L << 34, 32L << 20, NULL,
	 "largest request body accepted (then 413)"},
	{"timeouts.connect_ms", "--connect-timeout-ms", K_INT, OFF(connect_ms), 1, 600000, 2000, NULL,
	 "backend connect timeout"},
	{"timeouts.idle_s", "--idle-timeout-s", K_INT, OFF(idle_s), 1, 86400, 600, NULL,
	 "a backend silent this long is abandoned (504)"},
	{"shutdown_grace_s", "--shutdown-grace-s", K_INT, OFF(shutdown_grace_s), 0, 86400, 30, NULL,
	 "on SIGTERM/SIGINT, how long in-flight requests may finish"},
	{"max_connections", "--max-connections", K_INT, OFF(max_connections), 16, 1000000, 20000, NULL,
	 "client connections held at once"},
	{"client_timeout_s", "--client-timeout-s", K_INT, OFF(client_timeout_s), 1, 86400, 60, NULL,
	 "a client connection idle this long (no byte while we wait for its request) is closed"},
	{"log_level", "--log-level", K_STR, OFF(log_level), 0, 0, 0, "info",
	 "debug | info | warn | error"},
	{"access_log", "--access-log", K_STR, OFF(access_log), 0, 0, 0, "",
	 "JSON line per request to this file ('-' = stdout; reopened on SIGUSR1)"},
	{"api_keys_file", "--api-keys-file", K_STR, OFF(api_keys_file), 0, 0, 0, "",
	 "file of SHA-256 hex digests of accepted API keys (see --hash-key); empty = no keys needed"},
	{"admin_keys_file", "--admin-keys-file", K_STR, OFF(admin_keys_file), 0, 0, 0, "",
	 "file of SHA-256 digests of admin keys; empty = admin API off"},
	{"auth_status", "--auth-status", K_INT, OFF(auth_status), 0, 1, 0, NULL,
	 "1 = /metrics, /status and /health/backends need an API key too"},
	{"load_source", "--load-source", K_STR, OFF(load_source), 0, 0, 0, "backend",
	 "backend = requests in flight here plus the backend's own running + waiting, read every health "
	 "interval; a backend that queues is held to what it runs at once (learned max_inflight) and the "
	 "rest waits here; gateway = only requests in flight here"},
	{"load_path", "--load-path", K_STR, OFF(load_path), 0, 0, 0, "auto",
	 "with load_source backend: auto (/metrics, then /v1/loads, then /get_load, until one tells), "
	 "/metrics (SGLang or vLLM gauges), /v1/loads or /get_load (SGLang JSON)"},
	{"backend_api_key", "--backend-api-key", K_STR, OFF(backend_api_key), 0, 0, 0, "",
	 "bearer token sent to backends (the client's key is never forwarded when keys are on)"},
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

const char *ig_conf_policy_name(enum ig_policy p)
{
	static const char *names[] = {"least-loaded", "round-robin", "random", "power-of-two"};
	return names[p];
}

static int policy_parse(const char *s, enum ig_policy *out)
{
	for (int p = IG_POLICY_LEAST_LOADED; p <= IG_POLICY_POWER_OF_TWO; p++) {
		if (strcmp(s, ig_conf_policy_name((enum ig_policy)p)) == 0) {
			*out = (enum ig_policy)p;
			return 0;
		}
	}
	return -1;
}

#define FIELD(cfg, k, T) ((T *)((char *)(cfg) + (k)->off))

static void problem(struct ig_buf *errs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(struct ig_buf *errs, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	ig_buf_printf(errs, "%s\n", s);
	free(s);
}

static void backends_clear(struct ig_conf *cfg)
{
	for (size_t i = 0; i < cfg->n_backends; i++)
		free(cfg->backends[i].url);
	free(cfg->backends);
	cfg->backends = NULL;
	cfg->n_backends = 0;
}

char *ig_conf_normalise_url(const char *in, const char **why)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *query = NULL, *out = NULL;

	if (curl_url_set(u, CURLUPART_URL, in, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
		*why = "not a URL";
		goto done;
	}
	curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
	if (!scheme || (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
		*why = "scheme must be http or https";
		goto done;
	}
	if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !host || !*host) {
		*why = "no host";
		goto done;
	}
	if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK && query) {
		*why = "a backend URL takes no query string";
		goto done;
	}
	curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
	curl_url_get(u, CURLUPART_PATH, &path, 0);
	size_t plen = path ? strlen(path) : 0;
	while (plen > 0 && path[plen - 1] == '/')
		plen--;
	out = ig_strdupf("%s://%s:%s%.*s", scheme, host, port ? port : "80", (int)plen, path ? path : "");
done:
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_free(query);
	curl_url_cleanup(u);
	return out;
}

static void add_backend(struct ig_conf *cfg, struct ig_buf *errs, const char *where,
			const char *url, long weight, long max_inflight, int discover)
{
	const char *why = NULL;
	char *norm = ig_conf_normalise_url(url, &why);
	if (!norm) {
		problem(errs, "%s: '%s' is not a valid backend URL (%s)", where, url, why);
		return;
	}
	for (size_t i = 0; i < cfg->n_backends; i++) {
		if (strcmp(cfg->backends[i].url, norm) == 0) {
			problem(errs, "%s: backend '%s' is listed twice", where, url);
			free(norm);
			return;
		}
	}
	cfg->backends = realloc(cfg->backends, (cfg->n_backends + 1) * sizeof(*cfg->backends));
	if (!cfg->backends)
		abort();
	cfg->backends[cfg->n_backends++] = (struct ig_backend_conf){norm, weight, max_inflight, discover};
}

/* Sets one key from a string (flag) value. */
static void set_from_string(struct ig_conf *cfg, const struct key *k, const char *what,
			    const char *val, struct ig_buf *errs)
{
	char *err = NULL;
	long v;

	switch (k->type) {
	case K_INT:
		if (ig_parse_long(what, val, k->min, k->max, &v, &err) < 0) {
			problem(errs, "%s", err);
			free(err);
		} else {
			*FIELD(cfg, k, long) = v;
		}
		break;
	case K_STR:
	case K_LISTEN:
	case K_POLICY:
		free(*FIELD(cfg, k, char *));
		*FIELD(cfg, k, char *) = strdup(val);
		break;
	case K_BACKENDS:
		add_backend(cfg, errs, what, val, 1, -1, 0);
		break;
	case K_DISCOVER:
		add_backend(cfg, errs, what, val, 1, -1, 1);
		break;
	}
}

static int levenshtein(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 40 || lb > 40)
		return 99;
	int d[41][41];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (int)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (int)j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
			d[i][j] = c < del ? (c < ins ? c : ins) : (del < ins ? del : ins);
		}
	return d[la][lb];
}

static const char *suggest(const char *path)
{
	const char *best = NULL;
	int bestd = 3;
	static char sect[64];
	for (size_t i = 0; i < NKEYS; i++) {
		int d = levenshtein(path, keys[i].key);
		if (d < bestd) {
			bestd = d;
			best = keys[i].key;
		}
		/* Also the section names ("health" for "helth"). */
		const char *dot = strchr(keys[i].key, '.');
		if (dot && (size_t)(dot - keys[i].key) < sizeof(sect)) {
			char name[64];
			snprintf(name, sizeof(name), "%.*s", (int)(dot - keys[i].key), keys[i].key);
			d = levenshtein(path, name);
			if (d < bestd) {
				bestd = d;
				snprintf(sect, sizeof(sect), "%s", name);
				best = sect;
			}
		}
	}
	return best;
}

static void unknown_key(struct ig_buf *errs, const char *where, const char *path)
{
	const char *s = suggest(path);
	if (s)
		problem(errs, "%s: unknown key '%s' (did you mean '%s'?)", where, path, s);
	else
		problem(errs, "%s: unknown key '%s'", where, path);
}

static void json_backends(struct ig_conf *cfg, json_t *v, const char *where, struct ig_buf *errs)
{
	size_t i;
	json_t *b;

	if (!json_is_array(v)) {
		problem(errs, "%s: key 'backends' must be a list", where);
		return;
	}
	backends_clear(cfg);
	json_array_foreach(v, i, b) {
		char ctx[512];
		snprintf(ctx, sizeof(ctx), "%s: backends[%zu]", where, i);
		if (json_is_string(b)) {
			add_backend(cfg, errs, ctx, json_string_value(b), 1, -1, 0);
			continue;
		}
		if (!json_is_object(b)) {
			problem(errs, "%s must be a URL string or an object with \"url\"", ctx);
			continue;
		}
		const char *bk;
		json_t *bv, *url = json_object_get(b, "url"), *disc = json_object_get(b, "discover");
		long weight = 1, maxin = -1;
		int ok = 1;
		json_object_foreach(b, bk, bv) {
			if (strcmp(bk, "url") == 0 || strcmp(bk, "discover") == 0)
				continue;
			if (strcmp(bk, "weight") == 0 || strcmp(bk, "max_inflight") == 0) {
				long lo = bk[0] == 'w' ? 1 : 0, hi = bk[0] == 'w' ? 1000 : 1000000;
				if (!json_is_integer(bv) || json_integer_value(bv) < lo || json_integer_value(bv) > hi) {
					char *txt = json_dumps(bv, JSON_ENCODE_ANY);
					problem(errs, "%s.%s: %s is not an integer in %ld..%ld", ctx, bk, txt ? txt : "?", lo, hi);
					free(txt);
					ok = 0;
				} else if (bk[0] == 'w') {
					weight = (long)json_integer_value(bv);
				} else {
					maxin = (long)json_integer_value(bv);
				}
				continue;
			}
			problem(errs, "%s: unknown key '%s' (expected url or discover, weight, max_inflight)", ctx, bk);
			ok = 0;
		}
		if (!!url == !!disc || !json_is_string(url ? url : disc)) {
			problem(errs, "%s: give one of \"url\" or \"discover\", as a string", ctx);
			continue;
		}
		if (ok)
			add_backend(cfg, errs, ctx, json_string_value(url ? url : disc), weight, maxin, disc != NULL);
	}
}

static void json_value(struct ig_conf *cfg, const struct key *k, json_t *v, const char *where,
		       struct ig_buf *errs)
{
	char *txt;

	switch (k->type) {
	case K_INT:
		if (!json_is_integer(v) || json_integer_value(v) < k->min || json_integer_value(v) > k->max) {
			txt = json_dumps(v, JSON_ENCODE_ANY);
			problem(errs, "%s: key '%s': %s is not an integer in %ld..%ld", where, k->key,
				txt ? txt : "?", k->min, k->max);
			free(txt);
			return;
		}
		*FIELD(cfg, k, long) = (long)json_integer_value(v);
		return;
	case K_STR:
	case K_LISTEN:
	case K_POLICY:
		if (!json_is_string(v)) {
			txt = json_dumps(v, JSON_ENCODE_ANY);
			problem(errs, "%s: key '%s': %s is not a string", where, k->key, txt ? txt : "?");
			free(txt);
			return;
		}
		free(*FIELD(cfg, k, char *));
		*FIELD(cfg, k, char *) = strdup(json_string_value(v));
		return;
	case K_BACKENDS:
		json_backends(cfg, v, where, errs);
		return;
	case K_DISCOVER:
		return; /* flag only */
	}
}

static const struct key *find_key(const char *path)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(keys[i].key, path) == 0)
			return &keys[i];
	return NULL;
}

static int is_section(const char *name)
{
	size_t n = strlen(name);
	for (size_t i = 0; i < NKEYS; i++)
		if (strncmp(keys[i].key, name, n) == 0 && keys[i].key[n] == '.')
			return 1;
	return 0;
}

static void load_file(struct ig_conf *cfg, const char *path, struct ig_buf *errs)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	const char *name;
	json_t *v;

	if (!root) {
		if (jerr.line > 0)
			problem(errs, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
		else
			problem(errs, "%s: %s", path, jerr.text);
		return;
	}
	if (!json_is_object(root)) {
		problem(errs, "%s: the configuration must be a JSON object", path);
		json_decref(root);
		return;
	}
	json_object_foreach(root, name, v) {
		const struct key *k = find_key(name);
		if (k) {
			json_value(cfg, k, v, path, errs);
		} else if (is_section(name)) {
			if (!json_is_object(v)) {
				problem(errs, "%s: key '%s' must be an object", path, name);
				continue;
			}
			const char *sub;
			json_t *sv;
			json_object_foreach(v, sub, sv) {
				char full[256];
				snprintf(full, sizeof(full), "%s.%s", name, sub);
				const struct key *sk = find_key(full);
				if (sk)
					json_value(cfg, sk, sv, path, errs);
				else
					unknown_key(errs, path, full);
			}
		} else {
			unknown_key(errs, path, name);
		}
	}
	json_decref(root);
}

static void set_defaults(struct ig_conf *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];
		if (k->type == K_INT)
			*FIELD(cfg, k, long) = k->def;
		else if (k->type != K_BACKENDS && k->type != K_DISCOVER && k->sdef)
			*FIELD(cfg, k, char *) = strdup(k->sdef);
	}
}

/* Checks the cross-field rules and derives typed fields from strings. */
static void finish(struct ig_conf *cfg, const char *where_listen, struct ig_buf *errs)
{
	char *err = NULL;

	free(cfg->listen_host);
	cfg->listen_host = NULL;
	if (ig_parse_hostport(where_listen, cfg->listen, &cfg->listen_host, &cfg->listen_port, &err) < 0) {
		problem(errs, "%s", err);
		free(err);
	}
	if (policy_parse(cfg->policy_name, &cfg->policy) < 0)
		problem(errs, "policy: unknown policy '%s' (least-loaded, round-robin, random, power-of-two)",
			cfg->policy_name);
	if (cfg->health_path[0] != '/')
		problem(errs, "health.path: '%s' must start with '/'", cfg->health_path);
	if (strcmp(cfg->log_level, "debug") && strcmp(cfg->log_level, "info") &&
	    strcmp(cfg->log_level, "warn") && strcmp(cfg->log_level, "error"))
		problem(errs, "log_level: unknown level '%s' (debug, info, warn, error)", cfg->log_level);
	if (strcmp(cfg->load_source, "gateway") != 0 && strcmp(cfg->load_source, "backend") != 0)
		problem(errs, "load_source: unknown source '%s' (gateway, backend)", cfg->load_source);
	cfg->load_from_backend = strcmp(cfg->load_source, "backend") == 0;
	cfg->load_path_auto = strcmp(cfg->load_path, "auto") == 0;
	if (cfg->load_path[0] != '/' && !cfg->load_path_auto)
		problem(errs, "load_path: '%s' must be auto or a path starting with '/'", cfg->load_path);
	if (cfg->n_backends == 0)
		problem(errs, "backends: no backend given (use --backend URL or \"backends\" in the config file)");
	for (size_t i = 0; i < cfg->n_backends; i++)
		if (cfg->backends[i].max_inflight < 0)
			cfg->backends[i].max_inflight = cfg->max_inflight;
}

static char *take_errors(struct ig_buf *errs)
{
	ig_buf_append(errs, "", 1);
	char *s = strdup(ig_buf_head(errs));
	ig_buf_free(errs);
	return s;
}

int ig_conf_from_file(struct ig_conf *cfg, const char *path, char **err)
{
	struct ig_buf errs;
	ig_buf_init(&errs);
	set_defaults(cfg);
	cfg->config_path = strdup(path);
	load_file(cfg, path, &errs);
	if (ig_buf_pending(&errs) == 0)
		finish(cfg, "listen", &errs);
	if (ig_buf_pending(&errs)) {
		*err = take_errors(&errs);
		return -1;
	}
	ig_buf_free(&errs);
	return 0;
}

static const struct key *find_flag(const char *flag)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].flag && strcmp(keys[i].flag, flag) == 0)
			return &keys[i];
	return NULL;
}

void ig_conf_print_help(FILE *out)
{
	fprintf(out,
		"Usage: infergate [--config FILE] [--backend URL]... [options]\n"
		"An OpenAI-compatible gateway in front of N inference servers.\n\n"
		"  --config FILE         JSON configuration (keys below); flags override it\n"
		"  --check-config        validate, print the effective configuration, exit 0 (or 2)\n"
		"  --hash-key            read an API key on stdin, print its SHA-256 digest\n"
		"  --help, --version\n\n"
		"Options (config key in brackets, default after '='):\n");
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];
		char def[64] = "";
		if (k->type == K_INT)
			snprintf(def, sizeof(def), " =%ld", k->def);
		else if (k->sdef)
			snprintf(def, sizeof(def), " =%s", k->sdef);
		fprintf(out, "  %-22s [%s]%s\n      %s\n", k->flag ? k->flag : "", k->key, def, k->help);
	}
}

int ig_conf_from_args(struct ig_conf *cfg, int argc, char **argv, int *check_only, char **err)
{
	struct ig_buf errs;
	const char *config_path = NULL;
	int flag_backends = 0;

	ig_buf_init(&errs);
	*check_only = 0;
	/* First pass: the file, so that flags override it wherever they stand. */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			ig_conf_print_help(stdout);
			return 1;
		}
		if (strcmp(argv[i], "--version") == 0) {
			printf("infergate %s\n", PACKAGE_VERSION);
			return 1;
		}
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			config_path = argv[++i];
		else if (strncmp(argv[i], "--config=", 9) == 0)
			config_path = argv[i] + 9;
	}
	set_defaults(cfg);
	if (config_path) {
		cfg->config_path = strdup(config_path);
		load_file(cfg, config_path, &errs);
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *val = NULL;
		char name[128];
		const char *eq = strchr(a, '=');

		if (strncmp(a, "--", 2) != 0) {
			problem(&errs, "unexpected argument '%s' (flags start with --; see --help)", a);
			continue;
		}
		if (eq) {
			snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
			val = eq + 1;
		} else {
			snprintf(name, sizeof(name), "%s", a);
		}
		if (strcmp(name, "--check-config") == 0) {
			*check_only = 1;
			continue;
		}
		int is_config = strcmp(name, "--config") == 0;
		const struct key *k = is_config ? NULL : find_flag(name);
		if (!k && !is_config) {
			problem(&errs, "unknown flag '%s' (see --help)", name);
			continue;
		}
		if (!val) {
			if (i + 1 >= argc) {
				problem(&errs, "%s: missing value", name);
				continue;
			}
			val = argv[++i];
		}
		if (is_config)
			continue;
		if ((k->type == K_BACKENDS || k->type == K_DISCOVER) && !flag_backends) {
			backends_clear(cfg); /* flags replace the file's list */
			flag_backends = 1;
		}
		set_from_string(cfg, k, name, val, &errs);
	}
	finish(cfg, cfg->config_path ? "listen" : "--listen", &errs);
	if (ig_buf_pending(&errs)) {
		*err = take_errors(&errs);
		return -1;
	}
	ig_buf_free(&errs);
	return 0;
}

void ig_conf_free(struct ig_conf *cfg)
{
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];
		if (k->type != K_INT && k->type != K_BACKENDS && k->type != K_DISCOVER) {
			free(*FIELD(cfg, k, char *));
			*FIELD(cfg, k, char *) = NULL;
		}
	}
	backends_clear(cfg);
	free(cfg->listen_host);
	free(cfg->config_path);
	cfg->listen_host = cfg->config_path = NULL;
}

char *ig_conf_to_json(const struct ig_conf *cfg)
{
	json_t *root = json_object();
	for (size_t i = 0; i < NKEYS; i++) {
		const struct key *k = &keys[i];
		json_t *v = NULL;
		switch (k->type) {
		case K_INT:
			v = json_integer(*FIELD(cfg, k, long));
			break;
		case K_STR:
		case K_LISTEN:
		case K_POLICY:
			v = json_string(*FIELD(cfg, k, char *));
			break;
		case K_BACKENDS:
			v = json_array();
			for (size_t b = 0; b < cfg->n_backends; b++)
				json_array_append_new(v, json_pack("{s:s, s:I, s:I}",
								   cfg->backends[b].discover ? "discover" : "url",
								   cfg->backends[b].url,
								   "weight", (json_int_t)cfg->backends[b].weight,
								   "max_inflight", (json_int_t)cfg->backends[b].max_inflight));
			break;
		case K_DISCOVER:
			continue; /* shown under "backends" */
		}
		const char *dot = strchr(k->key, '.');
		if (dot) {
			char sect[64];
			snprintf(sect, sizeof(sect), "%.*s", (int)(dot - k->key), k->key);
			json_t *s = json_object_get(root, sect);
			if (!s) {
				s = json_object();
				json_object_set_new(root, sect, s);
			}
			json_object_set_new(s, dot + 1, v);
		} else {
			json_object_set_new(root, k->key, v);
		}
	}
	char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	return s;
}
