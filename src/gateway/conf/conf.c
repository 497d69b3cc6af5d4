/* Gateway configuration: one table (read by the flag library,
 * include/infergate/flags.h) gives the JSON key, the flag, the type, bounds,
 * default and help text, so that parsing, validation, --help and
 * --check-config can never disagree. Every problem is collected (not just the
 * first) and names the key or flag and the bad value. The table is the
 * modules' parts concatenated (conf_parts.c lists them; each module's rows
 * and check are in its own file): here are its machinery, the core's rows
 * (the process's own settings) and the checks that span modules.
 * Not here: acting on the configuration (main.c) or reloading it. */
#include "config.h"
#include <errno.h>
#include <jansson.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"

static const char *const class_names[IG_NCLASSES] = {"high", "normal", "low"};


const char *ig_conf_class_name(int klass)
{
	return klass >= 0 && klass < IG_NCLASSES ? class_names[klass] : "?";
}

int ig_conf_class_parse(const char *v)
{
	for (int c = 0; c < IG_NCLASSES; c++)
		if (strcmp(v, class_names[c]) == 0)
			return c;
	return -1;
}


static void parse_routes_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
			      struct ig_buf *errs)
{
	ig_routes_parse_json(&((struct ig_conf *)target)->routes, v, where, errs);
}

/* trusted_proxies: a flag's value (or the file's string) is the list
 * "ADDR[/BITS],..." as given; the file may give a JSON list of them. Read
 * into cfg->trusted_proxies when the configuration is finished. */
static int parse_trusted_flag(void *target, const struct ig_flag *f IG_UNUSED, const char *what IG_UNUSED,
			      const char *v, char **err IG_UNUSED)
{
	struct ig_conf *cfg = target;
	free(cfg->trusted_proxies_text);
	if (!(cfg->trusted_proxies_text = strdup(v)))
		abort();
	return 0;
}

static void parse_trusted_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
			       struct ig_buf *errs)
{
	struct ig_buf b;
	if (json_is_string(v)) {
		parse_trusted_flag(target, f, NULL, json_string_value(v), NULL);
		return;
	}
	if (!json_is_array(v)) {
		ig_flags_problem(errs, "%s: key 'trusted_proxies' must be a list of addresses or networks "
				 "([\"10.0.0.0/8\", \"fd00::/8\"])", where);
		return;
	}
	ig_buf_init(&b);
	size_t i;
	json_t *e;
	json_array_foreach(v, i, e) {
		if (!json_is_string(e) || strchr(json_string_value(e), ',')) {
			char *text = json_dumps(e, JSON_ENCODE_ANY | JSON_COMPACT);
			ig_flags_problem(errs, "%s: trusted_proxies[%zu]: %s is not an address or network (a string: "
					 "ADDR or ADDR/BITS)", where, i, text ? text : "?");
			free(text);
			continue;
		}
		ig_buf_printf(&b, "%s%s", i ? "," : "", json_string_value(e));
	}
	ig_buf_append(&b, "", 1);
	parse_trusted_flag(target, f, NULL, b.data, NULL);
	ig_buf_free(&b);
}

/* --config is read before the other flags (conf_from_args); here it only
 * takes its value. */
static int parse_config_flag(void *target IG_UNUSED, const struct ig_flag *f IG_UNUSED, const char *what IG_UNUSED,
			     const char *v IG_UNUSED, char **err IG_UNUSED)
{
	return 0;
}

static const struct ig_flag core_head[] = {
	{.name = "--config", .type = IG_FLAG_CUSTOM, .metavar = "FILE", .parse = parse_config_flag,
	 .help = "JSON configuration (the keys in brackets below); flags override it"},
	{.name = "--check-config", .type = IG_FLAG_SWITCH, .off = IG_CONF_OFF(check_only),
	 .help = "validate, print the effective configuration, exit 0 (or 2)"},
	{.name = "--listen", .key = "listen", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(listen), .def = "127.0.0.1:8080",
	 .metavar = "HOST:PORT", .help = "address to serve on"},
	{.name = "--admin-listen", .key = "admin_listen", .type = IG_FLAG_STRING, .off = IG_CONF_OFF(admin_listen), .def = "",
	 .metavar = "HOST:PORT",
	 .help = "serve the admin API, /metrics and the status page on this address instead (the listen address "
		 "then answers 404 for them; the health routes stay on both), e.g. 127.0.0.1:8081"},
};
static const struct ig_flag core_inflight[] = {
	{.name = "--max-inflight", .key = "max_inflight", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(max_inflight), .min = 0,
	 .max = 1000000, .def = "0", .metavar = "N",
	 .help = "default per-backend limit of requests in flight (0 = none)"},
};
static const struct ig_flag core_routes[] = {
	{.key = "routes", .type = IG_FLAG_CUSTOM, .parse_json = parse_routes_json,
	 .help = "what is forwarded (restart to change): a list of built-in routes' paths (/v1/chat/completions, "
		 "/v1/completions, /v1/embeddings, /v1/responses, /v1/rerank, /v1/score, /tokenize, /detokenize, "
		 "/generate, /pooling, /classify: the default) or {\"path\", \"methods\": [\"POST\", \"PUT\"], "
		 "\"model\": \"required|optional\", \"stream\", \"usage\": \"usage|meta_info|none\", "
		 "\"stream_options\", \"output\", \"responses\"}"},
};
static const struct ig_flag core_body[] = {
	{.name = "--max-body-bytes", .key = "max_body_bytes", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(max_body_bytes),
	 .min = 1024, .max = 17179869184.0, .def = "33554432", .metavar = "N",
	 .help = "largest request body accepted (then 413)"},
};
static const struct ig_flag core_server[] = {
	{.name = "--shutdown-grace-s", .key = "shutdown_grace_s", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(shutdown_grace_s),
	 .min = 0, .max = 86400, .def = "30", .metavar = "N",
	 .help = "on SIGTERM/SIGINT, how long in-flight requests may finish"},
	{.name = "--workers", .key = "workers", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(workers), .min = 0,
	 .max = IG_MAX_WORKERS, .def = "0", .metavar = "N",
	 .help = "reactor threads, each with its own share of the client connections; 0: one per core "
		 "but one, 1 to 4"},
	{.name = "--max-connections", .key = "max_connections", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(max_connections),
	 .min = 16, .max = 1000000, .def = "20000", .metavar = "N", .help = "client connections held at once"},
	{.name = "--header-buffer-bytes", .key = "header_buffer_bytes", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(header_buffer_bytes), .min = 4096, .max = 1048576, .def = "16384", .metavar = "N",
	 .help = "each client connection's buffer: the request headers and 64 bytes per header line must fit "
		 "(about 500 bytes less; more is 431); every connection, a held stream too, keeps it"},
	{.name = "--client-timeout-s", .key = "client_timeout_s", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(client_timeout_s),
	 .min = 1, .max = 86400, .def = "60", .metavar = "N",
	 .help = "a client connection idle this long (no byte while we wait for its request) is closed"},
	{.name = "--client-header-timeout-s", .key = "client_header_timeout_s", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(client_header_timeout_s), .min = 0, .max = 86400, .def = "10", .metavar = "N",
	 .help = "a request's headers must be whole within N seconds of a new connection's accept, or of the "
		 "next request's first byte on a kept-alive one (nginx's client_header_timeout; slow senders that "
		 "stay under client_timeout_s are cut too): a 408, or a close if nothing was sent (0 = no "
		 "deadline)"},
	{.name = "--max-connections-per-ip", .key = "max_connections_per_ip", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(max_connections_per_ip), .min = 0, .max = 1000000, .def = "0", .metavar = "N",
	 .help = "client connections one address may hold at once (nginx's limit_conn); one more is answered 429 "
		 "and closed at accept; through trusted_proxies, requests at once per client they name (0 = no cap)"},
	{.name = "--trusted-proxies", .key = "trusted_proxies", .type = IG_FLAG_CUSTOM, .def = "",
	 .metavar = "CIDR[,CIDR...]", .parse = parse_trusted_flag, .parse_json = parse_trusted_json,
	 .help = "proxies (addresses or networks, IPv4 or IPv6) whose X-Forwarded-For is believed: from one of "
		 "them, a request's client is the last address in it that is not one of them (nginx's "
		 "set_real_ip_from, real_ip_recursive on), for the access log, max_connections_per_ip and the spans; "
		 "in the file a list; empty = none"},
	{.name = "--log-level", .key = "log_level", .type = IG_FLAG_CHOICE, .off = IG_CONF_OFF(log_level), .def = "info",
	 .metavar = "debug|info|warn|error", .bad = "%s: unknown level '%s' (debug, info, warn, error)",
	 .help = "what to log"},
};
static const struct ig_flag core_tokens[] = {
	{.name = "--default-max-tokens", .key = "default_max_tokens", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(default_max_tokens), .min = 0, .max = 10000000, .def = "1024", .metavar = "N",
	 .help = "output tokens a request that names no max_tokens is taken to ask for: charged to its key's "
		 "tpm at admission (then corrected by its usage) and counted by policy least-tokens"},
	{.name = "--stream-usage", .key = "stream_usage", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(stream_usage), .min = 0,
	 .max = 1, .def = "1", .metavar = "0|1",
	 .help = "1 = a streamed request without stream_options.include_usage is sent with it and the usage "
		 "chunk is removed from what the client gets, so its tokens are counted"},
};

/* What --check-config shows of the core's CUSTOM rows. */
static json_t *core_json(const struct ig_flag *k, const struct ig_conf *cfg)
{
	json_t *v = NULL;
	if (k->parse_json == parse_routes_json) {
		v = ig_routes_to_json(&cfg->routes);
	} else if (k->parse_json == parse_trusted_json) {
		v = json_array();
		for (size_t t = 0; t < cfg->trusted_proxies.n; t++) {
			char a[INET6_ADDRSTRLEN];
			ig_addr_text(&cfg->trusted_proxies.v[t].net, a, sizeof(a));
			json_array_append_new(v, json_sprintf("%s/%d", a, cfg->trusted_proxies.v[t].bits));
		}
	}
	return v;
}

/* The core's rows: the process's own settings (where it listens, its
 * threads and connections, what it forwards, its logs). */
const struct ig_conf_part ig_conf_core_head = IG_CONF_PART(core_head);
const struct ig_conf_part ig_conf_core_inflight = IG_CONF_PART(core_inflight);
const struct ig_conf_part ig_conf_core_routes = IG_CONF_PART(core_routes, .to_json = core_json);
const struct ig_conf_part ig_conf_core_body = IG_CONF_PART(core_body);
const struct ig_conf_part ig_conf_core_server = IG_CONF_PART(core_server, .to_json = core_json);
const struct ig_conf_part ig_conf_core_tokens = IG_CONF_PART(core_tokens);

/* The rows of every part, in order, and the part of each. */
#define MAX_ROWS 256
static struct ig_flag table[MAX_ROWS];
static const struct ig_conf_part *part_of[MAX_ROWS];
static const struct ig_conf_part *const *parts;
static size_t nparts;
static const ig_conf_check_fn *checks;
static size_t nchecks;

static struct ig_flags spec = {
	.prog = "infergate",
	.usage = "Usage: infergate [--config FILE] [--backend URL]... [options]\n"
		 "       infergate --hash-key < key   (print the SHA-256 digest of an API key)\n"
		 "       infergate --new-key NAME     (print a new random key and its keys-file entry)\n"
		 "An OpenAI-compatible gateway in front of N inference servers.\n\n"
		 "Options ([file: KEY] is the key in the --config file; flags override the file):\n",
	.unknown = "unknown flag '%s' (see --help)",
	.missing = "%s: missing value",
	.positional = "unexpected argument '%s' (flags start with --; see --help)",
	.all_problems = true,
};

int ig_conf_register(const struct ig_conf_part *const *p, size_t np, const ig_conf_check_fn *c, size_t nc)
{
	size_t n = 0;
	for (size_t i = 0; i < np; i++) {
		for (size_t r = 0; r < p[i]->n; r++) {
			if (n == MAX_ROWS) {
				fprintf(stderr, "ig_conf_register: more than %d rows\n", MAX_ROWS);
				return -1;
			}
			part_of[n] = p[i];
			table[n++] = p[i]->rows[r];
		}
	}
	parts = p;
	nparts = np;
	checks = c;
	nchecks = nc;
	spec.flags = table;
	spec.n = n;
	return 0;
}

static void need_table(void)
{
	if (spec.n == 0) {
		fprintf(stderr, "infergate: no configuration table (ig_conf_register not called)\n");
		abort();
	}
}
static void load_file(struct ig_conf *cfg, const char *path, struct ig_buf *errs)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);

	if (!root) {
		if (jerr.line > 0)
			ig_flags_problem(errs, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
		else
			ig_flags_problem(errs, "%s: %s", path, jerr.text);
		return;
	}
	if (!json_is_object(root)) {
		ig_flags_problem(errs, "%s: the configuration must be a JSON object", path);
		json_decref(root);
		return;
	}
	ig_flags_from_json(&spec, cfg, root, path, errs);
	json_decref(root);
}

static void set_defaults(struct ig_conf *cfg)
{
	need_table();
	char *err = NULL;
	memset(cfg, 0, sizeof(*cfg));
	if (ig_flags_defaults(&spec, cfg, &err) < 0)
		abort(); /* a bad default in the table above */
}

/* The file a TLS key names, open for reading; NULL with the problem said. */
static BIO *tls_file(struct ig_buf *errs, const char *key, const char *path)
{
	BIO *b = BIO_new_file(path, "r");
	if (!b)
		ig_flags_problem(errs, "%s: %s: %s", key, path, strerror(errno));
	return b;
}

void ig_conf_check_tls_files(struct ig_buf *errs, const char *const names[3], const char *ca_file,
			     const char *client_cert, const char *client_key)
{
	X509 *cert = NULL;
	EVP_PKEY *key = NULL;
	BIO *b;

	if (*ca_file) {
		long n = 0;
		if ((b = tls_file(errs, names[0], ca_file))) {
			X509 *x;
			while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL))) {
				n++;
				X509_free(x);
			}
			BIO_free(b);
			if (n == 0)
				ig_flags_problem(errs, "%s: %s: no PEM certificate in it", names[0], ca_file);
		}
		ERR_clear_error();
	}
	if (!*client_cert != !*client_key)
		ig_flags_problem(errs, "%s: given without %s", *client_cert ? names[1] : names[2],
				 *client_cert ? names[2] : names[1]);
	if (*client_cert) {
		b = tls_file(errs, names[1], client_cert);
		if (b && !(cert = PEM_read_bio_X509(b, NULL, NULL, NULL)))
			ig_flags_problem(errs, "%s: %s: not a PEM certificate", names[1], client_cert);
		BIO_free(b);
	}
	if (*client_key) {
		b = tls_file(errs, names[2], client_key);
		if (b && !(key = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL)))
			ig_flags_problem(errs, "%s: %s: not a PEM private key (or it needs a passphrase)", names[2],
					 client_key);
		BIO_free(b);
	}
	if (cert && key && X509_check_private_key(cert, key) != 1)
		ig_flags_problem(errs, "%s: %s is not the key of %s %s", names[2], client_key, names[1], client_cert);
	X509_free(cert);
	EVP_PKEY_free(key);
	ERR_clear_error();
}

void ig_conf_check_trusted(struct ig_conf *cfg, struct ig_buf *errs)
{
	char *err = NULL;
	if (ig_cidrs_parse(&cfg->trusted_proxies, "trusted_proxies", cfg->trusted_proxies_text, &err) < 0) {
		ig_flags_problem(errs, "%s", err);
		free(err);
	}
}

/* The listen addresses (the core's rules), then the modules' checks in the
 * program's order; derives fields from strings. */
static void finish(struct ig_conf *cfg, const char *where_listen, struct ig_buf *errs)
{
	char *err = NULL;

	free(cfg->listen_host);
	cfg->listen_host = NULL;
	if (ig_parse_hostport(where_listen, cfg->listen, &cfg->listen_host, &cfg->listen_port, &err) < 0) {
		ig_flags_problem(errs, "%s", err);
		free(err);
	}
	free(cfg->admin_listen_host);
	cfg->admin_listen_host = NULL;
	cfg->admin_listen_port = 0;
	if (*cfg->admin_listen) {
		if (ig_parse_hostport("admin_listen", cfg->admin_listen, &cfg->admin_listen_host, &cfg->admin_listen_port,
				      &err) < 0) {
			ig_flags_problem(errs, "%s", err);
			free(err);
			err = NULL;
		} else if (strcmp(cfg->admin_listen, cfg->listen) == 0) {
			ig_flags_problem(errs, "admin_listen: '%s' is the listen address; give the admin API an address "
					 "of its own", cfg->admin_listen);
		}
	}
	if (!cfg->routes.from_file)
		ig_routes_default(&cfg->routes);
	for (size_t i = 0; i < nchecks; i++)
		checks[i](cfg, errs);
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

void ig_conf_print_help(FILE *out)
{
	need_table();
	ig_flags_print_help(&spec, out);
}

int ig_conf_from_args(struct ig_conf *cfg, int argc, char **argv, char **err)
{
	struct ig_buf errs;
	const char *config_path = NULL;

	ig_buf_init(&errs);
	/* First the file, so that flags override it wherever they stand. */
	for (int i = 1; i < argc; i++) {
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
	int rc = ig_flags_parse(&spec, cfg, argc, argv, NULL, &errs);
	if (rc > 0) {
		ig_buf_free(&errs);
		return 1;
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
	ig_flags_free(&spec, cfg);
	for (size_t i = 0; i < nparts; i++)
		if (parts[i]->clear)
			parts[i]->clear(cfg);
	ig_routes_clear(&cfg->routes);
	ig_cidrs_free(&cfg->trusted_proxies);
	free(cfg->trusted_proxies_text);
	cfg->trusted_proxies_text = NULL;
	free(cfg->listen_host);
	free(cfg->admin_listen_host);
	free(cfg->config_path);
	cfg->listen_host = cfg->admin_listen_host = cfg->config_path = NULL;
}

char *ig_conf_to_json(const struct ig_conf *cfg)
{
	json_t *root = json_object();
	for (size_t i = 0; i < spec.n; i++) {
		const struct ig_flag *k = &table[i];
		json_t *v = NULL;
		if (!k->key)
			continue; /* a flag only (--discover entries are shown under "backends") */
		if (part_of[i]->to_json)
			v = part_of[i]->to_json(k, cfg);
		if (!v)
			v = ig_flags_value_json(k, cfg);
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
