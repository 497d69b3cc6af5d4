/* Gateway configuration: one table (read by the flag library,
 * include/infergate/flags.h) gives the JSON key, the flag, the type, bounds,
 * default and help text, so that parsing, validation, --help and
 * --check-config can never disagree. Every problem is collected (not just the
 * first) and names the key or flag and the bad value.
 * Not here: acting on the configuration (main.c) or reloading it. */
#include "config.h"
#include <curl/curl.h>
#include <errno.h>
#include <libgen.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "infergate/buf.h"
#include "infergate/flags.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "conf.h"
#include "redis.h"
#include "redismsg.h"
#include "servertls.h"
#include "policy_list.h"

/* --policy's words, from the policies' table. */
#define LB_BAR(id, name, help) "|" name
#define LB_SPACE(id, name, help) " " name
#define LB_HELP(id, name, help) " " name " (" help ");"

static const char *const class_names[IG_NCLASSES] = {"high", "normal", "low"};
/* backends[].priority_field, by value (0: learned) */
static const char *const priority_fields[] = {NULL, "sglang", "vllm", "none"};

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

static void models_free(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void ig_conf_backend_clear(struct ig_backend_conf *bc)
{
	free(bc->url);
	models_free(bc->models, bc->n_models);
	*bc = (struct ig_backend_conf){0};
}

int ig_conf_backend_copy(struct ig_backend_conf *dst, const struct ig_backend_conf *src)
{
	*dst = *src;
	dst->url = strdup(src->url);
	dst->models = src->n_models ? calloc(src->n_models, sizeof(*dst->models)) : NULL;
	bool ok = dst->url && (!src->n_models || dst->models);
	for (size_t i = 0; ok && i < src->n_models; i++)
		ok = (dst->models[i] = strdup(src->models[i])) != NULL;
	if (!ok) {
		if (!dst->models)
			dst->n_models = 0; /* else: the strdup'd ones, NULL after them */
		ig_conf_backend_clear(dst);
		return -1;
	}
	return 0;
}

static void backends_clear(struct ig_conf *cfg)
{
	for (size_t i = 0; i < cfg->n_backends; i++)
		ig_conf_backend_clear(&cfg->backends[i]);
	free(cfg->backends);
	cfg->backends = NULL;
	cfg->n_backends = 0;
}

static void pairs_clear(struct ig_model_alias **v, size_t *n)
{
	for (size_t i = 0; i < *n; i++) {
		free((*v)[i].alias);
		free((*v)[i].model);
	}
	free(*v);
	*v = NULL;
	*n = 0;
}

static void aliases_clear(struct ig_conf *cfg)
{
	pairs_clear(&cfg->aliases, &cfg->n_aliases);
}

static void fallbacks_clear(struct ig_conf *cfg)
{
	pairs_clear(&cfg->fallbacks, &cfg->n_fallbacks);
}

static int parse_backend_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
static void parse_backends_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
				struct ig_buf *errs);
static int parse_alias_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
static void parse_keys_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
			    struct ig_buf *errs);
static void parse_aliases_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
			       struct ig_buf *errs);
static int parse_fallback_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err);
static void parse_fallbacks_json(void *target, const struct ig_flag *f, json_t *v, const char *where,
				 struct ig_buf *errs);

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

#define OFF(f) offsetof(struct ig_conf, f)
static const struct ig_flag keys[] = {
	{.name = "--config", .type = IG_FLAG_CUSTOM, .metavar = "FILE", .parse = parse_config_flag,
	 .help = "JSON configuration (the keys in brackets below); flags override it"},
	{.name = "--check-config", .type = IG_FLAG_SWITCH, .off = OFF(check_only),
	 .help = "validate, print the effective configuration, exit 0 (or 2)"},
	{.name = "--listen", .key = "listen", .type = IG_FLAG_STRING, .off = OFF(listen), .def = "127.0.0.1:8080",
	 .metavar = "HOST:PORT", .help = "address to serve on"},
	{.name = "--admin-listen", .key = "admin_listen", .type = IG_FLAG_STRING, .off = OFF(admin_listen), .def = "",
	 .metavar = "HOST:PORT",
	 .help = "serve the admin API, /metrics and the status page on this address instead (the listen address "
		 "then answers 404 for them; the health routes stay on both), e.g. 127.0.0.1:8081"},
	{.name = "--server-tls-cert", .key = "server_tls.cert_file", .type = IG_FLAG_STRING, .off = OFF(server_tls_cert),
	 .def = "", .metavar = "FILE",
	 .help = "HTTPS for clients: the PEM certificate (then its chain), with server_tls.key_file; re-read on SIGHUP"},
	{.name = "--server-tls-key", .key = "server_tls.key_file", .type = IG_FLAG_STRING, .off = OFF(server_tls_key),
	 .def = "", .metavar = "FILE", .help = "HTTPS for clients: the PEM private key of server_tls.cert_file"},
	{.name = "--server-tls-client-ca", .key = "server_tls.client_ca_file", .type = IG_FLAG_STRING,
	 .off = OFF(server_tls_client_ca), .def = "", .metavar = "FILE",
	 .help = "HTTPS for clients: PEM CA certificates; a client must show a certificate one of them signed "
		 "(mutual TLS), else its handshake fails"},
	{.name = "--server-tls-priorities", .key = "server_tls.priorities", .type = IG_FLAG_STRING,
	 .off = OFF(server_tls_priorities), .def = IG_SERVERTLS_DEFAULT_PRIORITIES, .metavar = "STRING",
	 .help = "HTTPS for clients: GnuTLS priority string (protocol versions, cipher suites); the default allows "
		 "TLS 1.2 and 1.3 with GnuTLS's NORMAL suites"},
	{.name = "--server-tls-session-tickets", .key = "server_tls.session_tickets", .type = IG_FLAG_LONG,
	 .off = OFF(server_tls_tickets), .min = 0, .max = 1, .def = "1", .metavar = "0|1",
	 .help = "HTTPS for clients: 1 gives clients session tickets, so one that comes back resumes without a "
		 "full handshake; 0: every connection a full handshake"},
	{.name = "--backend", .key = "backends", .type = IG_FLAG_CUSTOM, .metavar = "URL",
	 .parse = parse_backend_flag, .parse_json = parse_backends_json,
	 .help = "backend base URL, URL#MODEL,MODEL... to name the models it serves (else they are learned "
		 "from its /v1/models); repeatable, replaces the file's list; in the file a list of URL strings "
		 "or {\"url\", \"weight\", \"max_inflight\", \"models\": [...]}"},
	{.name = "--model-alias", .key = "model_aliases", .type = IG_FLAG_CUSTOM, .metavar = "ALIAS=MODEL",
	 .parse = parse_alias_flag, .parse_json = parse_aliases_json,
	 .help = "a client's model name that is served as MODEL (the forwarded body names MODEL); repeatable, "
		 "replaces the file's map; in the file {\"ALIAS\": \"MODEL\", ...}"},
	{.name = "--model-fallback", .key = "model_fallbacks", .type = IG_FLAG_CUSTOM,
	 .metavar = "MODEL=FALLBACK[,FALLBACK...]", .parse = parse_fallback_flag, .parse_json = parse_fallbacks_json,
	 .help = "when no backend of MODEL is up, or its queue is full, a request for it runs on FALLBACK "
		 "(tried in order; the answer says so in X-Infergate-Fallback); repeatable, replaces the file's "
		 "map; in the file {\"MODEL\": [\"FALLBACK\", ...]}"},
	{.name = "--discover", .type = IG_FLAG_CUSTOM, .metavar = "URL", .parse = parse_backend_flag,
	 .help = "backend URL whose host is a DNS name: every address it resolves to becomes a backend "
		 "(URL#MODEL,... as for --backend; repeatable; in the file {\"discover\": URL} in backends)"},
	{.name = "--discover-interval-s", .key = "discover_interval_s", .type = IG_FLAG_LONG,
	 .off = OFF(discover_interval_s), .min = 1, .max = 86400, .def = "10", .metavar = "N",
	 .help = "how often discovered names are resolved again"},
	/* The choices, the default (the first row) and the help come from the
	 * policies' table (policy_list.h): a new policy needs no line here. */
	{.name = "--policy", .key = "policy", .type = IG_FLAG_CHOICE, .off = OFF(policy), .def = IG_LB_DEFAULT,
	 .metavar = IG_LB_LIST(LB_BAR) + 1,
	 .bad = "%s: unknown policy '%s' (one of:" IG_LB_LIST(LB_SPACE) ")",
	 .help = "how a backend is chosen:" IG_LB_LIST(LB_HELP)},
	{.name = "--cache-threshold-percent", .key = "cache_aware.threshold_percent", .type = IG_FLAG_LONG,
	 .off = OFF(cache_threshold_percent), .min = 1, .max = 100, .def = "50", .metavar = "N",
	 .help = "cache-aware: a request goes to the backend sent its longest prefix when that covers N% of its "
		 "prompt's blocks (SGLang's gateway: cache_threshold 0.5), else to the least loaded"},
	{.name = "--cache-balance-abs", .key = "cache_aware.balance_abs", .type = IG_FLAG_LONG,
	 .off = OFF(cache_balance_abs), .min = 0, .max = 1000000, .def = "32", .metavar = "N",
	 .help = "cache-aware load guard: the preferred backend is passed over when it has more than N requests "
		 "in flight beyond the least loaded..."},
	{.name = "--cache-balance-rel", .key = "cache_aware.balance_rel", .type = IG_FLAG_DOUBLE,
	 .off = OFF(cache_balance_rel), .min = 1, .max = 1000, .def = "1.5", .metavar = "X",
	 .help = "...and more than X times as many (SGLang's balance_abs_threshold / balance_rel_threshold)"},
	{.name = "--cache-max-blocks", .key = "cache_aware.max_blocks", .type = IG_FLAG_LONG,
	 .off = OFF(cache_max_blocks), .min = 16, .max = 100000000, .def = "32768", .metavar = "N",
	 .help = "cache-aware: prefix blocks (64 bytes of prompt each) remembered per backend, least recently "
		 "used forgotten first; 32768 take at most about 0.9 MB per backend"},
	{.name = "--health-path", .key = "health.path", .type = IG_FLAG_STRING, .off = OFF(health_path),
	 .def = "/health", .metavar = "PATH", .help = "path probed on each backend"},
	{.name = "--health-interval-ms", .key = "health.interval_ms", .type = IG_FLAG_LONG,
	 .off = OFF(health_interval_ms), .min = 50, .max = 3600000, .def = "2000", .metavar = "N",
	 .help = "time between probes of one backend"},
	{.name = "--health-timeout-ms", .key = "health.timeout_ms", .type = IG_FLAG_LONG,
	 .off = OFF(health_timeout_ms), .min = 10, .max = 600000, .def = "5000", .metavar = "N",
	 .help = "a probe slower than this fails, unless the backend is answering requests meanwhile "
		 "(SGLang's /health runs a generation and takes over 1 s)"},
	{.name = "--health-rise", .key = "health.rise", .type = IG_FLAG_LONG, .off = OFF(health_rise), .min = 1,
	 .max = 100, .def = "2", .metavar = "N", .help = "consecutive successes that bring a backend up"},
	{.name = "--health-fall", .key = "health.fall", .type = IG_FLAG_LONG, .off = OFF(health_fall), .min = 1,
	 .max = 100, .def = "3", .metavar = "N", .help = "consecutive failures that take a backend down"},
	{.name = "--retries", .key = "retries", .type = IG_FLAG_LONG, .off = OFF(retries), .min = 0, .max = 20,
	 .def = "2", .metavar = "N", .help = "retries on another backend before any byte reached the client"},
	{.name = "--retry-budget-percent", .key = "retry_budget.percent", .type = IG_FLAG_LONG,
	 .off = OFF(retry_budget_percent), .min = 0, .max = 1000, .def = "20", .metavar = "P",
	 .help = "retries over the last 10 s: at most P% of the requests (plus the minimum below), so that a "
		 "failing fleet is not hit by a storm of retries"},
	{.name = "--retry-budget-min-per-s", .key = "retry_budget.min_per_s", .type = IG_FLAG_LONG,
	 .off = OFF(retry_budget_min_per_s), .min = 0, .max = 100000, .def = "10", .metavar = "N",
	 .help = "retries a second always allowed, whatever the share"},
	{.name = "--max-inflight", .key = "max_inflight", .type = IG_FLAG_LONG, .off = OFF(max_inflight), .min = 0,
	 .max = 1000000, .def = "0", .metavar = "N",
	 .help = "default per-backend limit of requests in flight (0 = none)"},
	{.name = "--queue-size", .key = "queue_size", .type = IG_FLAG_LONG, .off = OFF(queue_size), .min = 0,
	 .max = 1000000, .def = "16384", .metavar = "N",
	 .help = "requests that may wait when every backend is at its limit (then 429)"},
	{.name = "--queue-timeout-ms", .key = "queue_timeout_ms", .type = IG_FLAG_LONG, .off = OFF(queue_timeout_ms),
	 .min = 1, .max = 3600000, .def = "60000", .metavar = "N",
	 .help = "longest wait in the queue of a request of class normal (then 503 + Retry-After)"},
	{.name = "--queue-timeout-high-ms", .key = "queue_timeout_high_ms", .type = IG_FLAG_LONG,
	 .off = OFF(queue_timeout_high_ms), .min = 1, .max = 3600000, .def = "60000", .metavar = "N",
	 .help = "the same for class high"},
	{.name = "--queue-timeout-low-ms", .key = "queue_timeout_low_ms", .type = IG_FLAG_LONG,
	 .off = OFF(queue_timeout_low_ms), .min = 1, .max = 86400000, .def = "600000", .metavar = "N",
	 .help = "the same for class low (bulk runs: with learned slot counts this queue stands in for the "
		 "backends' own, which have no timeout)"},
	{.name = "--scheduling", .key = "scheduling", .type = IG_FLAG_CHOICE, .off = OFF(scheduling),
	 .def = "priority", .metavar = "priority|fifo", .bad = "%s: unknown scheduling '%s' (priority, fifo)",
	 .help = "priority: classes high > normal > low (X-Infergate-Priority), fair shares between keys; "
		 "fifo: one queue per model in arrival order"},
	{.name = "--low-share-percent", .key = "low_share_percent", .type = IG_FLAG_LONG,
	 .off = OFF(low_share_percent), .min = 1, .max = 50, .def = "5", .metavar = "N",
	 .help = "dispatches guaranteed to class low while higher classes wait (5: one in 20), so a bulk "
		 "run is never starved"},
	{.key = "routes", .type = IG_FLAG_CUSTOM, .parse_json = parse_routes_json,
	 .help = "what is forwarded (restart to change): a list of built-in routes' paths (/v1/chat/completions, "
		 "/v1/completions, /v1/embeddings, /v1/responses, /v1/rerank, /v1/score, /tokenize, /detokenize, "
		 "/generate, /pooling, /classify: the default) or {\"path\", \"methods\": [\"POST\", \"PUT\"], "
		 "\"model\": \"required|optional\", \"stream\", \"usage\": \"usage|meta_info|none\", "
		 "\"stream_options\", \"output\", \"responses\"}"},
	{.name = "--data-dir", .key = "data_dir", .type = IG_FLAG_STRING, .off = OFF(data_dir), .def = "",
	 .metavar = "DIR",
	 .help = "where the Files and Batch APIs keep uploads and batches (DIR/files, DIR/batches; made if "
		 "missing, must be writable: checked at start); empty = both are off"},
	{.name = "--files-max-bytes", .key = "files.max_bytes", .type = IG_FLAG_LONG, .off = OFF(files_max_bytes),
	 .min = 1024, .max = 1099511627776.0, .def = "4294967296", .metavar = "N",
	 .help = "largest file uploaded to /v1/files (then 413; 4 GiB holds the 902,087-line corpus many times)"},
	{.name = "--batch-max-inflight", .key = "batches.max_inflight", .type = IG_FLAG_LONG,
	 .off = OFF(batch_max_inflight), .min = 0, .max = 100000, .def = "0", .metavar = "N",
	 .help = "requests of one batch (the Batch API) in flight at most; 0 = its share of the learned slots of "
		 "its model's backends, split between the batches running"},
	{.name = "--batch-retention-s", .key = "batches.retention_s", .type = IG_FLAG_LONG,
	 .off = OFF(batch_retention_s), .min = 0, .max = 315360000, .def = "2592000", .metavar = "S",
	 .help = "a finished batch and its output and error files are removed S seconds after it ended (30 days, "
		 "as OpenAI); 0 = kept for ever"},
	{.key = "api_key_settings", .type = IG_FLAG_CUSTOM, .parse_json = parse_keys_json,
	 .help = "per API key: {\"SHA256 HEX\": {\"priority\", \"weight\", \"max_inflight\"}}"},
	{.name = "--max-body-bytes", .key = "max_body_bytes", .type = IG_FLAG_LONG, .off = OFF(max_body_bytes),
	 .min = 1024, .max = 17179869184.0, .def = "33554432", .metavar = "N",
	 .help = "largest request body accepted (then 413)"},
	{.name = "--connect-timeout-ms", .key = "timeouts.connect_ms", .type = IG_FLAG_LONG, .off = OFF(connect_ms),
	 .min = 1, .max = 600000, .def = "2000", .metavar = "N", .help = "backend connect timeout"},
	{.name = "--idle-timeout-s", .key = "timeouts.idle_s", .type = IG_FLAG_LONG, .off = OFF(idle_s), .min = 1,
	 .max = 86400, .def = "600", .metavar = "N", .help = "a backend silent this long is abandoned (504)"},
	{.name = "--ttft-timeout-ms", .key = "timeouts.ttft_ms", .type = IG_FLAG_LONG, .off = OFF(ttft_ms), .min = 0,
	 .max = 86400000, .def = "0", .metavar = "N",
	 .help = "a streamed request whose backend sends no first event in N ms is retried on another (0 = no limit)"},
	{.name = "--token-gap-timeout-ms", .key = "timeouts.token_gap_ms", .type = IG_FLAG_LONG, .off = OFF(token_gap_ms),
	 .min = 0, .max = 86400000, .def = "0", .metavar = "N",
	 .help = "a stream whose backend sends no event for N ms after its first is continued on another (0 = only "
		 "timeouts.idle_s)"},
	{.name = "--ttft-timeout-high-ms", .key = "timeouts.ttft_high_ms", .type = IG_FLAG_LONG, .off = OFF(ttft_high_ms),
	 .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.ttft_ms for requests of class high (-1 = the same)"},
	{.name = "--ttft-timeout-low-ms", .key = "timeouts.ttft_low_ms", .type = IG_FLAG_LONG, .off = OFF(ttft_low_ms),
	 .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.ttft_ms for requests of class low (-1 = the same)"},
	{.name = "--token-gap-timeout-high-ms", .key = "timeouts.token_gap_high_ms", .type = IG_FLAG_LONG,
	 .off = OFF(token_gap_high_ms), .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.token_gap_ms for requests of class high (-1 = the same)"},
	{.name = "--token-gap-timeout-low-ms", .key = "timeouts.token_gap_low_ms", .type = IG_FLAG_LONG,
	 .off = OFF(token_gap_low_ms), .min = -1, .max = 86400000, .def = "-1", .metavar = "N",
	 .help = "timeouts.token_gap_ms for requests of class low (-1 = the same)"},
	{.name = "--breaker-failures", .key = "breaker.failures", .type = IG_FLAG_LONG, .off = OFF(breaker_failures),
	 .min = 0, .max = 1000, .def = "5", .metavar = "N",
	 .help = "N request failures in a row open a backend's circuit breaker: no request for breaker.open_ms, "
		 "then one trial at a time (0 = no breaker)"},
	{.name = "--breaker-open-ms", .key = "breaker.open_ms", .type = IG_FLAG_LONG, .off = OFF(breaker_open_ms),
	 .min = 100, .max = 3600000, .def = "5000", .metavar = "N",
	 .help = "how long an open breaker takes no request; it doubles each time a trial fails, up to 8x"},
	{.name = "--idempotency-ttl-s", .key = "idempotency.ttl_s", .type = IG_FLAG_LONG, .off = OFF(idem_ttl_s),
	 .min = 0, .max = 2592000, .def = "86400", .metavar = "S",
	 .help = "a POST with an Idempotency-Key runs once: a duplicate joins it or gets its answer for S seconds "
		 "(0 = the header is not read)"},
	{.name = "--idempotency-max-bytes", .key = "idempotency.max_bytes", .type = IG_FLAG_LONG,
	 .off = OFF(idem_max_bytes), .min = 0, .max = 68719476736.0, .def = "268435456", .metavar = "N",
	 .help = "the answers kept for Idempotency-Key take at most N bytes of memory (the oldest go first)"},
	{.name = "--hedge-after-ms", .key = "hedge.after_ms", .type = IG_FLAG_LONG, .off = OFF(hedge_after_ms),
	 .min = -1, .max = 86400000, .def = "0", .metavar = "N",
	 .help = "a request of class high or normal with no byte from its backend after N ms is sent to another "
		 "with a free slot too; the first to answer wins (0 = no hedging; -1 = after its model's learned p95 "
		 "time to first byte)"},
	{.name = "--hedge-budget-percent", .key = "hedge.budget_percent", .type = IG_FLAG_LONG,
	 .off = OFF(hedge_budget_percent), .min = 0, .max = 100, .def = "5", .metavar = "P",
	 .help = "hedges over the last minute stay within P% of the requests (and the retry budget)"},
	{.name = "--headroom-max-percent", .key = "headroom.max_percent", .type = IG_FLAG_LONG,
	 .off = OFF(headroom_max_percent), .min = 0, .max = 90, .def = "25", .metavar = "P",
	 .help = "slots kept free of new low (bulk) work for high and normal requests are learned from their "
		 "arrival rate and how long they hold a slot, up to P% of a model's slots (0 = none kept: priority "
		 "alone; a backend's reserve_slots overrides it)"},
	{.name = "--tracing-endpoint", .key = "tracing.endpoint", .type = IG_FLAG_STRING, .off = OFF(trace_endpoint),
	 .def = "", .metavar = "URL",
	 .help = "send OpenTelemetry spans (OTLP/HTTP, JSON) of every sampled request to URL, e.g. "
		 "http://collector:4318/v1/traces; empty = no tracing unless OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or "
		 "OTEL_EXPORTER_OTLP_ENDPOINT is set (then its /v1/traces)"},
	{.name = "--tracing-headers", .key = "tracing.headers", .type = IG_FLAG_STRING, .off = OFF(trace_headers),
	 .def = "", .metavar = "K=V,...",
	 .help = "headers of the export requests, URL-encoded values (default: OTEL_EXPORTER_OTLP_TRACES_HEADERS or "
		 "OTEL_EXPORTER_OTLP_HEADERS)"},
	{.name = "--tracing-sample-ratio", .key = "tracing.sample_ratio", .type = IG_FLAG_DOUBLE,
	 .off = OFF(trace_ratio), .min = 0, .max = 1, .def = "1", .metavar = "R",
	 .help = "share of new traces recorded; a client's traceparent decides for its own (parent-based; "
		 "default: OTEL_TRACES_SAMPLER_ARG, else 1)"},
	{.name = "--tracing-service-name", .key = "tracing.service_name", .type = IG_FLAG_STRING,
	 .off = OFF(trace_service), .def = "infergate", .metavar = "NAME",
	 .help = "the spans' service.name (default: OTEL_SERVICE_NAME, else infergate)"},
	{.name = "--tracing-schedule-delay-ms", .key = "tracing.schedule_delay_ms", .type = IG_FLAG_LONG,
	 .off = OFF(trace_delay_ms), .min = 1, .max = 600000, .def = "5000", .metavar = "N",
	 .help = "spans are sent at least every N ms, or when 512 are waiting (default: OTEL_BSP_SCHEDULE_DELAY, "
		 "else 5000)"},
	{.name = "--headroom-overshoot", .key = "headroom.overshoot", .type = IG_FLAG_LONG,
	 .off = OFF(headroom_overshoot), .min = 0, .max = 64, .def = "1", .metavar = "N",
	 .help = "a high or normal request that finds no free slot may go up to N over the slots of a backend "
		 "that preempts lower priorities (SGLang with --enable-priority-scheduling, learned from its "
		 "/server_info), which then preempts a low one; those N count as headroom (0 = never)"},
	{.name = "--hedge-low", .key = "hedge.low", .type = IG_FLAG_SWITCH, .off = OFF(hedge_low), .def = "false",
	 .help = "requests of class low are hedged too (by default a bulk run's stragglers wait: its tail matters "
		 "less than the fleet's work)"},
	{.name = "--continue-max", .key = "continue.max", .type = IG_FLAG_LONG, .off = OFF(continue_max), .min = 0,
	 .max = IG_CONT_MAX, .def = "2", .metavar = "N",
	 .help = "a stream whose backend fails after its first event goes on on another backend, at most N times (0 = "
		 "it ends with an error event)"},
	{.name = "--shutdown-grace-s", .key = "shutdown_grace_s", .type = IG_FLAG_LONG, .off = OFF(shutdown_grace_s),
	 .min = 0, .max = 86400, .def = "30", .metavar = "N",
	 .help = "on SIGTERM/SIGINT, how long in-flight requests may finish"},
	{.name = "--workers", .key = "workers", .type = IG_FLAG_LONG, .off = OFF(workers), .min = 0,
	 .max = IG_MAX_WORKERS, .def = "0", .metavar = "N",
	 .help = "reactor threads, each with its own share of the client connections; 0: one per core "
		 "but one, 1 to 4"},
	{.name = "--max-connections", .key = "max_connections", .type = IG_FLAG_LONG, .off = OFF(max_connections),
	 .min = 16, .max = 1000000, .def = "20000", .metavar = "N", .help = "client connections held at once"},
	{.name = "--header-buffer-bytes", .key = "header_buffer_bytes", .type = IG_FLAG_LONG,
	 .off = OFF(header_buffer_bytes), .min = 4096, .max = 1048576, .def = "16384", .metavar = "N",
	 .help = "each client connection's buffer: the request headers and 64 bytes per header line must fit "
		 "(about 500 bytes less; more is 431); every connection, a held stream too, keeps it"},
	{.name = "--client-timeout-s", .key = "client_timeout_s", .type = IG_FLAG_LONG, .off = OFF(client_timeout_s),
	 .min = 1, .max = 86400, .def = "60", .metavar = "N",
	 .help = "a client connection idle this long (no byte while we wait for its request) is closed"},
	{.name = "--client-header-timeout-s", .key = "client_header_timeout_s", .type = IG_FLAG_LONG,
	 .off = OFF(client_header_timeout_s), .min = 0, .max = 86400, .def = "10", .metavar = "N",
	 .help = "a request's headers must be whole within N seconds of a new connection's accept, or of the "
		 "next request's first byte on a kept-alive one (nginx's client_header_timeout; slow senders that "
		 "stay under client_timeout_s are cut too): a 408, or a close if nothing was sent (0 = no "
		 "deadline)"},
	{.name = "--max-connections-per-ip", .key = "max_connections_per_ip", .type = IG_FLAG_LONG,
	 .off = OFF(max_connections_per_ip), .min = 0, .max = 1000000, .def = "0", .metavar = "N",
	 .help = "client connections one address may hold at once (nginx's limit_conn); one more is answered 429 "
		 "and closed at accept; through trusted_proxies, requests at once per client they name (0 = no cap)"},
	{.name = "--trusted-proxies", .key = "trusted_proxies", .type = IG_FLAG_CUSTOM, .def = "",
	 .metavar = "CIDR[,CIDR...]", .parse = parse_trusted_flag, .parse_json = parse_trusted_json,
	 .help = "proxies (addresses or networks, IPv4 or IPv6) whose X-Forwarded-For is believed: from one of "
		 "them, a request's client is the last address in it that is not one of them (nginx's "
		 "set_real_ip_from, real_ip_recursive on), for the access log, max_connections_per_ip and the spans; "
		 "in the file a list; empty = none"},
	{.name = "--log-level", .key = "log_level", .type = IG_FLAG_CHOICE, .off = OFF(log_level), .def = "info",
	 .metavar = "debug|info|warn|error", .bad = "%s: unknown level '%s' (debug, info, warn, error)",
	 .help = "what to log"},
	{.name = "--access-log", .key = "access_log", .type = IG_FLAG_STRING, .off = OFF(access_log), .def = "",
	 .metavar = "FILE", .help = "JSON line per request to this file ('-' = stdout; reopened on SIGUSR1)"},
	{.name = "--api-keys-file", .key = "api_keys_file", .type = IG_FLAG_STRING, .off = OFF(api_keys_file),
	 .def = "", .metavar = "FILE",
	 .help = "API keys: JSON {\"keys\": [{\"name\", \"sha256\", \"priority\", \"weight\", \"max_inflight\", "
		 "\"rpm\", \"tpm\", \"models\", \"status\", \"disabled\"}]} or one SHA-256 hex digest per line "
		 "(see --new-key, --hash-key); re-read on SIGHUP; empty = no keys needed"},
	{.name = "--default-max-tokens", .key = "default_max_tokens", .type = IG_FLAG_LONG,
	 .off = OFF(default_max_tokens), .min = 0, .max = 10000000, .def = "1024", .metavar = "N",
	 .help = "output tokens a request that names no max_tokens is taken to ask for: charged to its key's "
		 "tpm at admission (then corrected by its usage) and counted by policy least-tokens"},
	{.name = "--stream-usage", .key = "stream_usage", .type = IG_FLAG_LONG, .off = OFF(stream_usage), .min = 0,
	 .max = 1, .def = "1", .metavar = "0|1",
	 .help = "1 = a streamed request without stream_options.include_usage is sent with it and the usage "
		 "chunk is removed from what the client gets, so its tokens are counted"},
	{.name = "--admin-keys-file", .key = "admin_keys_file", .type = IG_FLAG_STRING, .off = OFF(admin_keys_file),
	 .def = "", .metavar = "FILE", .help = "file of SHA-256 digests of admin keys; empty = admin API off"},
	{.name = "--auth-status", .key = "auth_status", .type = IG_FLAG_LONG, .off = OFF(auth_status), .min = 0,
	 .max = 1, .def = "0", .metavar = "0|1",
	 .help = "1 = /metrics, /status and /health/backends (every key's names and counts) need an admin key, "
		 "or an API key given \"status\": true in the keys file; a tenant's own key gets a 403"},
	{.name = "--load-source", .key = "load_source", .type = IG_FLAG_CHOICE, .off = OFF(load_from_backend),
	 .def = "backend", .metavar = "gateway|backend", .bad = "%s: unknown source '%s' (gateway, backend)",
	 .help = "backend = requests in flight here plus the backend's own running + waiting, read every "
		 "health interval; a backend is held to what it states it runs at once, or to what it ran when "
		 "it queued, and until either is known to a cap that grows while it does not queue; the rest "
		 "waits here; gateway = only requests in flight here (no limit but max_inflight)"},
	{.name = "--load-path", .key = "load_path", .type = IG_FLAG_STRING, .off = OFF(load_path), .def = "auto",
	 .metavar = "PATH",
	 .help = "with load_source backend: auto (/v1/loads, then /metrics, then /get_load, until one tells), "
		 "/metrics (SGLang or vLLM gauges), /v1/loads or /get_load (SGLang JSON; /v1/loads also states "
		 "the server's max_running_requests, the limit from its first report)"},
	{.name = "--backend-api-key", .key = "backend_api_key", .type = IG_FLAG_STRING, .off = OFF(backend_api_key),
	 .def = "", .metavar = "KEY",
	 .help = "bearer token sent to backends (the client's key is never forwarded when keys are on)"},
	{.name = "--tls-ca-file", .key = "tls.ca_file", .type = IG_FLAG_STRING, .off = OFF(tls_ca_file), .def = "",
	 .metavar = "FILE", .help = "https backends: PEM CA certificates to verify them with (default: the system's)"},
	{.name = "--tls-client-cert", .key = "tls.client_cert", .type = IG_FLAG_STRING, .off = OFF(tls_client_cert),
	 .def = "", .metavar = "FILE", .help = "https backends: PEM client certificate (mutual TLS), with tls.client_key"},
	{.name = "--tls-client-key", .key = "tls.client_key", .type = IG_FLAG_STRING, .off = OFF(tls_client_key),
	 .def = "", .metavar = "FILE", .help = "https backends: the PEM private key of tls.client_cert"},
	{.name = "--tls-verify", .key = "tls.verify", .type = IG_FLAG_LONG, .off = OFF(tls_verify), .min = 0, .max = 1,
	 .def = "1", .metavar = "0|1", .help = "https backends: 0 = accept any certificate and host name (tests only)"},
	{.name = "--cluster-redis", .key = "cluster.redis_url", .type = IG_FLAG_STRING, .off = OFF(cluster_redis),
	 .def = "", .metavar = "URL",
	 .help = "several gateways as one: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], where they share "
		 "per-key limits, backends' slots, classes, stored responses, files and batches and see each "
		 "other; rediss:// for TLS (the cluster.redis_tls_* keys); empty = this gateway alone"},
	{.name = "--cluster-redis-tls-ca-file", .key = "cluster.redis_tls_ca_file", .type = IG_FLAG_STRING,
	 .off = OFF(cluster_redis_tls_ca), .def = "", .metavar = "FILE",
	 .help = "rediss://: PEM CA certificates Redis's certificate is verified with (default: the system's); "
		 "its name is verified too (cluster.redis_tls_server_name)"},
	{.name = "--cluster-redis-tls-client-cert", .key = "cluster.redis_tls_client_cert", .type = IG_FLAG_STRING,
	 .off = OFF(cluster_redis_tls_cert), .def = "", .metavar = "FILE",
	 .help = "rediss://: PEM client certificate shown to Redis (its tls-auth-clients), with "
		 "cluster.redis_tls_client_key"},
	{.name = "--cluster-redis-tls-client-key", .key = "cluster.redis_tls_client_key", .type = IG_FLAG_STRING,
	 .off = OFF(cluster_redis_tls_key), .def = "", .metavar = "FILE",
	 .help = "rediss://: the PEM private key of cluster.redis_tls_client_cert"},
	{.name = "--cluster-redis-tls-server-name", .key = "cluster.redis_tls_server_name", .type = IG_FLAG_STRING,
	 .off = OFF(cluster_redis_tls_name), .def = "", .metavar = "NAME",
	 .help = "rediss://: the DNS name or IP address Redis's certificate must carry, and the SNI sent "
		 "(default: the URL's host)"},
	{.name = "--cluster-name", .key = "cluster.name", .type = IG_FLAG_STRING, .off = OFF(cluster_name), .def = "",
	 .metavar = "NAME", .help = "this gateway's name among them, unique among the live ones (default: its "
		 "listen HOST:PORT, the machine's name for 0.0.0.0); letters, digits and . _ : - only"},
	{.name = "--cluster-sync-ms", .key = "cluster.sync_ms", .type = IG_FLAG_LONG, .off = OFF(cluster_sync_ms),
	 .min = 10, .max = 60000, .def = "100", .metavar = "N",
	 .help = "how often a gateway tells Redis it is alive and reads who else is; one silent for 3 periods "
		 "has left"},
	{.name = "--cluster-lease-s", .key = "cluster.lease_s", .type = IG_FLAG_LONG, .off = OFF(cluster_lease_s),
	 .min = 1, .max = 3600, .def = "10", .metavar = "N",
	 .help = "a batch is run by the one gateway that holds its lease in Redis; a gateway that dies "
		 "loses it after N seconds, and another takes the batch over from its journal"},
};

static const struct ig_flags spec = {
	.prog = "infergate",
	.usage = "Usage: infergate [--config FILE] [--backend URL]... [options]\n"
		 "       infergate --hash-key < key   (print the SHA-256 digest of an API key)\n"
		 "       infergate --new-key NAME     (print a new random key and its keys-file entry)\n"
		 "An OpenAI-compatible gateway in front of N inference servers.\n\n"
		 "Options ([file: KEY] is the key in the --config file; flags override the file):\n",
	.flags = keys,
	.n = sizeof(keys) / sizeof(keys[0]),
	.unknown = "unknown flag '%s' (see --help)",
	.missing = "%s: missing value",
	.positional = "unexpected argument '%s' (flags start with --; see --help)",
	.all_problems = true,
};

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
	/* curl decodes a percent-encoded host ("%ff") into raw bytes: only a
	 * DNS name, an IPv4 or a bracketed IPv6 address is a backend's host. */
	if (strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_[]:") != strlen(host)) {
		*why = "the host must be a DNS name (letters, digits, '.', '-', '_'; an international name in its "
		       "xn-- form) or an IP address";
		goto done;
	}
	if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK && query) {
		*why = "a backend URL takes no query string";
		goto done;
	}
	curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
	curl_url_get(u, CURLUPART_PATH, &path, 0);
	for (const char *c = path ? path : ""; *c; c++) {
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f) {
			*why = "the path must be ASCII (percent-encode other bytes)";
			goto done;
		}
	}
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

const char *ig_conf_bad_model_name(const char *m)
{
	if (!*m)
		return "empty";
	if (strlen(m) > 256)
		return "longer than 256 bytes";
	for (const char *c = m; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return "has a control character";
	return NULL;
}

/* Adds a model name to a backend's list. Returns 0, or -1 with *err. */
static int add_model(struct ig_backend_conf *bc, const char *where, const char *m, char **err)
{
	const char *why = ig_conf_bad_model_name(m);
	if (why) {
		*err = ig_strdupf("%s: model name '%s' is %s", where, m, why);
		return -1;
	}
	for (size_t i = 0; i < bc->n_models; i++) {
		if (strcmp(bc->models[i], m) == 0) {
			*err = ig_strdupf("%s: model '%s' is listed twice", where, m);
			return -1;
		}
	}
	char **v = realloc(bc->models, (bc->n_models + 1) * sizeof(*v));
	if (!v || !(v[bc->n_models] = strdup(m)))
		abort();
	bc->models = v;
	bc->n_models++;
	return 0;
}

/* Adds a backend at url with the other settings of proto, whose models it
 * takes. Returns 0, or -1 with *err naming `where` (the models freed). */
static int add_backend(struct ig_conf *cfg, const char *where, const char *url, struct ig_backend_conf *proto,
		       char **err)
{
	const char *why = NULL;
	char *norm = ig_conf_normalise_url(url, &why);
	if (!norm) {
		*err = ig_strdupf("%s: '%s' is not a valid backend URL (%s)", where, url, why);
		goto fail;
	}
	for (size_t i = 0; i < cfg->n_backends; i++) {
		if (strcmp(cfg->backends[i].url, norm) == 0) {
			*err = ig_strdupf("%s: backend '%s' is listed twice", where, url);
			free(norm);
			goto fail;
		}
	}
	cfg->backends = realloc(cfg->backends, (cfg->n_backends + 1) * sizeof(*cfg->backends));
	if (!cfg->backends)
		abort();
	proto->url = norm;
	cfg->backends[cfg->n_backends++] = *proto;
	return 0;
fail:
	models_free(proto->models, proto->n_models);
	return -1;
}

/* --backend and --discover, URL or URL#MODEL,MODEL: the first of them
 * replaces the file's list. */
static int parse_backend_flag(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	struct ig_conf *cfg = target;
	struct ig_backend_conf proto = {.weight = 1, .max_inflight = -1, .discover = strcmp(f->name, "--discover") == 0};
	if (!cfg->backends_from_flags) {
		backends_clear(cfg);
		cfg->backends_from_flags = true;
	}
	const char *hash = strchr(v, '#');
	char *url = hash ? strndup(v, (size_t)(hash - v)) : strdup(v);
	if (hash && !hash[1]) {
		*err = ig_strdupf("%s: '%s': no model after '#' (URL#MODEL,MODEL...)", what, v);
		free(url);
		return -1;
	}
	if (hash) {
		char *list = strdup(hash + 1), *rest = list, *m;
		while ((m = strsep(&rest, ","))) {
			int rc = *m ? add_model(&proto, what, m, err) : -1;
			if (rc < 0) {
				if (!*m)
					*err = ig_strdupf("%s: '%s': an empty model name in the list after '#'", what, v);
				free(list);
				free(url);
				models_free(proto.models, proto.n_models);
				return -1;
			}
		}
		free(list);
	}
	int rc = add_backend(cfg, what, url, &proto, err);
	free(url);
	return rc;
}

static void backend_or_problem(struct ig_conf *cfg, struct ig_buf *errs, const char *where, const char *url,
			       struct ig_backend_conf *proto)
{
	char *err = NULL;
	if (add_backend(cfg, where, url, proto, &err) < 0) {
		ig_flags_problem(errs, "%s", err);
		free(err);
	}
}

static void parse_backends_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
				struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	size_t i;
	json_t *b;

	if (!json_is_array(v)) {
		ig_flags_problem(errs, "%s: key 'backends' must be a list", where);
		return;
	}
	backends_clear(cfg);
	json_array_foreach(v, i, b) {
		char ctx[512];
		snprintf(ctx, sizeof(ctx), "%s: backends[%zu]", where, i);
		struct ig_backend_conf proto = {.weight = 1, .max_inflight = -1};
		if (json_is_string(b)) {
			backend_or_problem(cfg, errs, ctx, json_string_value(b), &proto);
			continue;
		}
		if (!json_is_object(b)) {
			ig_flags_problem(errs, "%s must be a URL string or an object with \"url\"", ctx);
			continue;
		}
		const char *bk;
		json_t *bv, *url = json_object_get(b, "url"), *disc = json_object_get(b, "discover");
		int ok = 1;
		json_object_foreach(b, bk, bv) {
			if (strcmp(bk, "url") == 0 || strcmp(bk, "discover") == 0)
				continue;
			if (strcmp(bk, "models") == 0) {
				size_t mi;
				json_t *mv;
				char mctx[600];
				snprintf(mctx, sizeof(mctx), "%s.models", ctx);
				if (!json_is_array(bv) || json_array_size(bv) == 0) {
					ig_flags_problem(errs, "%s must be a non-empty list of model names", mctx);
					ok = 0;
					continue;
				}
				json_array_foreach(bv, mi, mv) {
					char *err = NULL;
					if (!json_is_string(mv)) {
						ig_flags_problem(errs, "%s[%zu] must be a string", mctx, mi);
						ok = 0;
					} else if (add_model(&proto, mctx, json_string_value(mv), &err) < 0) {
						ig_flags_problem(errs, "%s", err);
						free(err);
						ok = 0;
					}
				}
				continue;
			}
			if (strcmp(bk, "priority_field") == 0) {
				const char *pv = json_string_value(bv);
				proto.priority_field = -1;
				for (int p = 1; p < 4 && pv; p++)
					if (strcmp(pv, priority_fields[p]) == 0)
						proto.priority_field = p;
				if (proto.priority_field < 0) {
					ig_flags_problem(errs, "%s.priority_field: must be \"sglang\", \"vllm\" or \"none\"", ctx);
					ok = 0;
				}
				continue;
			}
			if (strcmp(bk, "reserve_slots") == 0) {
				if (!json_is_integer(bv) || json_integer_value(bv) < 0 || json_integer_value(bv) > 1000000) {
					ig_flags_problem(errs, "%s.reserve_slots: must be an integer in 0..1000000", ctx);
					ok = 0;
				} else {
					proto.reserve_slots = (long)json_integer_value(bv);
				}
				continue;
			}
			if (strcmp(bk, "weight") == 0 || strcmp(bk, "max_inflight") == 0) {
				long lo = bk[0] == 'w' ? 1 : 0, hi = bk[0] == 'w' ? 1000 : 1000000;
				if (!json_is_integer(bv) || json_integer_value(bv) < lo || json_integer_value(bv) > hi) {
					char *txt = json_dumps(bv, JSON_ENCODE_ANY);
					ig_flags_problem(errs, "%s.%s: %s is not an integer in %ld..%ld", ctx, bk, txt ? txt : "?", lo, hi);
					free(txt);
					ok = 0;
				} else if (bk[0] == 'w') {
					proto.weight = (long)json_integer_value(bv);
				} else {
					proto.max_inflight = (long)json_integer_value(bv);
				}
				continue;
			}
			ig_flags_problem(errs,
					 "%s: unknown key '%s' (expected url or discover, weight, max_inflight, models, "
					 "reserve_slots, priority_field)",
					 ctx, bk);
			ok = 0;
		}
		if (!!url == !!disc || !json_is_string(url ? url : disc)) {
			ig_flags_problem(errs, "%s: give one of \"url\" or \"discover\", as a string", ctx);
			ok = 0;
		}
		proto.discover = disc != NULL;
		if (ok)
			backend_or_problem(cfg, errs, ctx, json_string_value(url ? url : disc), &proto);
		else
			models_free(proto.models, proto.n_models);
	}
}

/* The error for a pair of model names (an alias or a fallback) when
 * either is not a model name, else NULL. */
static char *bad_pair(const char *where, const char *a, const char *b)
{
	const char *why = ig_conf_bad_model_name(a);
	if (why || (why = ig_conf_bad_model_name(b)))
		return ig_strdupf("%s: '%s' -> '%s': a model name is %s", where, a, b, why);
	return NULL;
}

/* Appends {a, b} to a list of pairs (aliases, fallbacks). */
static void pair_append(struct ig_model_alias **v, size_t *n, const char *a, const char *b)
{
	struct ig_model_alias *grown = realloc(*v, (*n + 1) * sizeof(*grown));
	if (!grown)
		abort();
	*v = grown;
	grown[(*n)++] = (struct ig_model_alias){strdup(a), strdup(b)};
}

/* Adds alias -> model. Returns 0, or -1 with *err. */
static int add_alias(struct ig_conf *cfg, const char *where, const char *alias, const char *model, char **err)
{
	if ((*err = bad_pair(where, alias, model)))
		return -1;
	if (strcmp(alias, model) == 0) {
		*err = ig_strdupf("%s: '%s' is an alias of itself", where, alias);
		return -1;
	}
	for (size_t i = 0; i < cfg->n_aliases; i++) {
		if (strcmp(cfg->aliases[i].alias, alias) == 0) {
			*err = ig_strdupf("%s: alias '%s' is given twice", where, alias);
			return -1;
		}
	}
	pair_append(&cfg->aliases, &cfg->n_aliases, alias, model);
	return 0;
}

static int parse_alias_flag(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
			    char **err)
{
	struct ig_conf *cfg = target;
	if (!cfg->aliases_from_flags) {
		aliases_clear(cfg);
		cfg->aliases_from_flags = true;
	}
	const char *eq = strchr(v, '=');
	if (!eq) {
		*err = ig_strdupf("%s: '%s' is not ALIAS=MODEL", what, v);
		return -1;
	}
	char *alias = strndup(v, (size_t)(eq - v));
	int rc = add_alias(cfg, what, alias, eq + 1, err);
	free(alias);
	return rc;
}

static void parse_aliases_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
			       struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	const char *alias;
	json_t *m;

	if (!json_is_object(v)) {
		ig_flags_problem(errs, "%s: key 'model_aliases' must be an object {\"ALIAS\": \"MODEL\"}", where);
		return;
	}
	aliases_clear(cfg);
	json_object_foreach(v, alias, m) {
		char *err = NULL, ctx[600];
		snprintf(ctx, sizeof(ctx), "%s: model_aliases", where);
		if (!json_is_string(m))
			ig_flags_problem(errs, "%s.%s must be a model name (a string)", ctx, alias);
		else if (add_alias(cfg, ctx, alias, json_string_value(m), &err) < 0) {
			ig_flags_problem(errs, "%s", err);
			free(err);
		}
	}
}

/* Adds model -> fallback (tried in the order added). Returns 0, or -1 with *err. */
static int add_fallback(struct ig_conf *cfg, const char *where, const char *model, const char *fallback, char **err)
{
	if ((*err = bad_pair(where, model, fallback)))
		return -1;
	if (strcmp(model, fallback) == 0) {
		*err = ig_strdupf("%s: '%s' falls back to itself", where, model);
		return -1;
	}
	for (size_t i = 0; i < cfg->n_fallbacks; i++)
		if (strcmp(cfg->fallbacks[i].alias, model) == 0 && strcmp(cfg->fallbacks[i].model, fallback) == 0) {
			*err = ig_strdupf("%s: '%s' -> '%s' is given twice", where, model, fallback);
			return -1;
		}
	pair_append(&cfg->fallbacks, &cfg->n_fallbacks, model, fallback);
	return 0;
}

static int parse_fallback_flag(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
			       char **err)
{
	struct ig_conf *cfg = target;
	if (!cfg->fallbacks_from_flags) {
		fallbacks_clear(cfg);
		cfg->fallbacks_from_flags = true;
	}
	const char *eq = strchr(v, '=');
	if (!eq || eq == v || !eq[1]) {
		*err = ig_strdupf("%s: '%s' is not MODEL=FALLBACK[,FALLBACK...]", what, v);
		return -1;
	}
	char *model = strndup(v, (size_t)(eq - v)), *list = strdup(eq + 1), *save = NULL;
	int rc = 0;
	for (char *fb = strtok_r(list, ",", &save); fb && rc == 0; fb = strtok_r(NULL, ",", &save))
		rc = add_fallback(cfg, what, model, fb, err);
	free(model);
	free(list);
	return rc;
}

/* model_fallbacks: {"MODEL": ["FALLBACK", ...]} (or one name as a string). */
static void parse_fallbacks_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
				 struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	const char *model;
	json_t *list;

	if (!json_is_object(v)) {
		ig_flags_problem(errs, "%s: key 'model_fallbacks' must be an object {\"MODEL\": [\"FALLBACK\", ...]}",
				 where);
		return;
	}
	fallbacks_clear(cfg);
	json_object_foreach(v, model, list) {
		char ctx[600];
		snprintf(ctx, sizeof(ctx), "%s: model_fallbacks", where);
		json_t *one = json_is_string(list) ? json_pack("[O]", list) : json_incref(list);
		size_t i;
		json_t *fb;
		if (!json_is_array(one) || json_array_size(one) == 0)
			ig_flags_problem(errs, "%s.%s must be a list of model names", ctx, model);
		json_array_foreach(one, i, fb) {
			char *err = NULL;
			if (!json_is_string(fb)) {
				ig_flags_problem(errs, "%s.%s[%zu] must be a model name (a string)", ctx, model, i);
			} else if (add_fallback(cfg, ctx, model, json_string_value(fb), &err) < 0) {
				ig_flags_problem(errs, "%s", err);
				free(err);
			}
		}
		json_decref(one);
	}
}

const char *ig_conf_fallback(const struct ig_conf *cfg, const char *name, size_t i)
{
	for (size_t k = 0; k < cfg->n_fallbacks; k++)
		if (strcmp(cfg->fallbacks[k].alias, name) == 0 && i-- == 0)
			return cfg->fallbacks[k].model;
	return NULL;
}

/* api_key_settings: {"<sha256 hex>": {"priority"?, "weight"?, "max_inflight"?}}. */
static void parse_keys_json(void *target, const struct ig_flag *f IG_UNUSED, json_t *v, const char *where,
			    struct ig_buf *errs)
{
	struct ig_conf *cfg = target;
	const char *digest;
	json_t *o;

	if (!json_is_object(v)) {
		ig_flags_problem(errs, "%s: key 'api_key_settings' must be an object {\"SHA256 HEX\": {...}}", where);
		return;
	}
	free(cfg->keys);
	cfg->keys = calloc(json_object_size(v) + 1, sizeof(*cfg->keys));
	cfg->n_keys = 0;
	if (!cfg->keys)
		abort();
	json_object_foreach(v, digest, o) {
		struct ig_key_conf k = {.priority = -1, .weight = 1, .max_inflight = 0};
		size_t n = strlen(digest);
		bool hex = n == 64 && strspn(digest, "0123456789abcdef") == 64;
		if (!hex) {
			ig_flags_problem(errs, "%s: api_key_settings: '%.80s' is not a SHA-256 digest in lower-case hex "
				 "(infergate --hash-key < key prints it)", where, digest);
			continue;
		}
		if (!json_is_object(o)) {
			ig_flags_problem(errs, "%s: api_key_settings.%.12s...: must be an object", where, digest);
			continue;
		}
		const char *name;
		json_t *x;
		json_object_foreach(o, name, x) {
			if (strcmp(name, "priority") == 0) {
				k.priority = json_is_string(x) ? ig_conf_class_parse(json_string_value(x)) : -1;
				if (k.priority < 0)
					ig_flags_problem(errs, "%s: api_key_settings.%.12s....priority: must be \"high\", "
						 "\"normal\" or \"low\"", where, digest);
			} else if (strcmp(name, "weight") == 0 || strcmp(name, "max_inflight") == 0) {
				long lo = name[0] == 'w' ? 1 : 0, hi = name[0] == 'w' ? 1000 : 1000000;
				if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
					ig_flags_problem(errs, "%s: api_key_settings.%.12s....%s: must be an integer in %ld..%ld",
							 where, digest, name, lo, hi);
				else if (name[0] == 'w')
					k.weight = (long)json_integer_value(x);
				else
					k.max_inflight = (long)json_integer_value(x);
			} else {
				ig_flags_problem(errs, "%s: api_key_settings.%.12s...: unknown key '%s' (priority, weight, "
					 "max_inflight)", where, digest, name);
			}
		}
		snprintf(k.digest, sizeof(k.digest), "%s", digest);
		cfg->keys[cfg->n_keys++] = k;
	}
}

const char *ig_conf_alias_target(const struct ig_conf *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_aliases; i++)
		if (strcmp(cfg->aliases[i].alias, name) == 0)
			return cfg->aliases[i].model;
	return NULL;
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

/* TLS files can be read and go together: every problem named by its key
 * (keys: the CA file's, the client certificate's, its key's). */
static void check_tls_files(struct ig_buf *errs, const char *const names[3], const char *ca_file,
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

/* The backends' TLS files, at start and on reload, before any backend is
 * asked. */
static void check_tls(const struct ig_conf *cfg, struct ig_buf *errs)
{
	static const char *const names[3] = {"tls.ca_file", "tls.client_cert", "tls.client_key"};
	check_tls_files(errs, names, cfg->tls_ca_file, cfg->tls_client_cert, cfg->tls_client_key);
}

/* HTTPS for clients: the files read and checked as they will be served
 * (servertls.c), every problem named by its key. */
static void check_server_tls(const struct ig_conf *cfg, struct ig_buf *errs)
{
	if (!*cfg->server_tls_cert && !*cfg->server_tls_key) {
		if (*cfg->server_tls_client_ca)
			ig_flags_problem(errs, "server_tls.client_ca_file: given without server_tls.cert_file and key_file "
					 "(client certificates are asked for over HTTPS only)");
		return;
	}
	struct ig_servertls_files f = {cfg->server_tls_cert, cfg->server_tls_key, cfg->server_tls_client_ca,
				       cfg->server_tls_priorities, cfg->server_tls_tickets != 0};
	ig_servertls_check(&f, errs);
}

/* data_dir exists (or is made) and takes a new file: checked before
 * anything starts, as a full or read-only disk found hours later loses
 * uploads. */
static void check_data_dir(const struct ig_conf *cfg, struct ig_buf *errs)
{
	const char *d = cfg->data_dir;
	struct stat st;
	if (!*d)
		return;
	if (cfg->check_only && stat(d, &st) < 0 && errno == ENOENT) {
		/* --check-config changes nothing: the directory it would make */
		char *copy = strdup(d);
		const char *parent = copy ? dirname(copy) : ".";
		if (access(parent, W_OK | X_OK) < 0)
			ig_flags_problem(errs, "data_dir: cannot make '%s': %s: %s", d, parent, strerror(errno));
		free(copy);
		return;
	}
	if (mkdir(d, 0700) < 0 && errno != EEXIST) {
		ig_flags_problem(errs, "data_dir: cannot make '%s': %s", d, strerror(errno));
		return;
	}
	if (stat(d, &st) < 0 || !S_ISDIR(st.st_mode)) {
		ig_flags_problem(errs, "data_dir: '%s' is not a directory", d);
		return;
	}
	char *probe = ig_strdupf("%s/.write-test-%ld", d, (long)getpid());
	int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, "x", 1) != 1)
		ig_flags_problem(errs, "data_dir: '%s' is not writable: %s", d, strerror(errno));
	if (fd >= 0)
		close(fd);
	unlink(probe);
	free(probe);
}

/* rediss://: the files readable and going together, then loaded as the
 * connections will (a key that is not the certificate's, a CA file
 * OpenSSL refuses); the TLS keys without rediss:// are a mistake (the
 * link would be plain while the keys say it is not). */
static void check_redis_tls(const struct ig_conf *cfg, const struct ig_redis_url *u, struct ig_buf *errs)
{
	static const char *const names[3] = {"cluster.redis_tls_ca_file", "cluster.redis_tls_client_cert",
					    "cluster.redis_tls_client_key"};
	const char *given = NULL;
	if (*cfg->cluster_redis_tls_ca)
		given = names[0];
	else if (*cfg->cluster_redis_tls_cert)
		given = names[1];
	else if (*cfg->cluster_redis_tls_key)
		given = names[2];
	else if (*cfg->cluster_redis_tls_name)
		given = "cluster.redis_tls_server_name";
	if (!u->tls) {
		if (given)
			ig_flags_problem(errs, "%s: given with a redis:// URL, which is plain TCP (rediss:// is TLS)", given);
		return;
	}
	size_t n = strlen(cfg->cluster_redis_tls_name);
	if (n > 253 || strspn(cfg->cluster_redis_tls_name,
			      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-:") != n)
		ig_flags_problem(errs, "cluster.redis_tls_server_name: '%s' is not a DNS name or an IP address",
				 cfg->cluster_redis_tls_name);
	size_t before = errs->len;
	check_tls_files(errs, names, cfg->cluster_redis_tls_ca, cfg->cluster_redis_tls_cert, cfg->cluster_redis_tls_key);
	if (errs->len != before)
		return; /* said by key already */
	struct ig_redis_tls_files f = {cfg->cluster_redis_tls_ca, cfg->cluster_redis_tls_cert, cfg->cluster_redis_tls_key,
				       cfg->cluster_redis_tls_name};
	char *err = NULL;
	struct ig_redis_tls *t = ig_redis_tls_new(&f, u->host, &err);
	if (!t)
		ig_flags_problem(errs, "cluster.redis_url: TLS: %s", err);
	free(err);
	ig_redis_tls_free(t);
}

/* The cluster section: a URL Redis can be reached at, a name of the
 * allowed characters (the listen address when none is given). */
static void check_cluster(struct ig_conf *cfg, struct ig_buf *errs)
{
	if (!*cfg->cluster_redis)
		return;
	struct ig_redis_url u;
	char *err = NULL;
	if (ig_redis_url_parse(cfg->cluster_redis, &u, &err) < 0) {
		ig_flags_problem(errs, "cluster.redis_url: %s", err);
		free(err);
	} else {
		check_redis_tls(cfg, &u, errs);
		ig_redis_url_free(&u);
	}
	if (!*cfg->cluster_name) {
		/* HOST:PORT, with the machine's name for a wildcard address
		 * (0.0.0.0:8080 would name every gateway alike) */
		char host[256] = "";
		const char *h = cfg->listen_host ? cfg->listen_host : "";
		if ((!*h || strcmp(h, "0.0.0.0") == 0 || strcmp(h, "::") == 0) && gethostname(host, sizeof(host) - 1) == 0)
			h = host;
		free(cfg->cluster_name);
		cfg->cluster_name = ig_strdupf("%s:%d", h, cfg->listen_port);
	}
	if (!ig_redismsg_name_ok(cfg->cluster_name, strlen(cfg->cluster_name))) /* as the others' names in Redis */
		ig_flags_problem(errs, "cluster.name: '%s' must be 1 to 64 letters, digits, '.', '_', ':' or '-'",
				 cfg->cluster_name);
}

/* The OpenTelemetry variables, as the SDKs read them, where the
 * configuration leaves a tracing setting at its default; then the
 * settings checked (trace.h). */
static void check_tracing(struct ig_conf *cfg, struct ig_buf *errs)
{
	const char *v;
	if (!*cfg->trace_endpoint) {
		if ((v = getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) && *v) {
			free(cfg->trace_endpoint);
			cfg->trace_endpoint = strdup(v);
		} else if ((v = getenv("OTEL_EXPORTER_OTLP_ENDPOINT")) && *v) {
			free(cfg->trace_endpoint);
			size_t n = strlen(v);
			cfg->trace_endpoint = ig_strdupf("%.*s/v1/traces", (int)(n && v[n - 1] == '/' ? n - 1 : n), v);
		}
	}
	if (!*cfg->trace_endpoint)
		return;
	if (strncmp(cfg->trace_endpoint, "http://", 7) != 0 && strncmp(cfg->trace_endpoint, "https://", 8) != 0)
		ig_flags_problem(errs, "tracing.endpoint: '%s' must be an http:// or https:// URL", cfg->trace_endpoint);
	if ((v = getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")) || (v = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")))
		if (*v && strcmp(v, "http/json") != 0)
			ig_flags_problem(errs, "%s: '%s': infergate exports OTLP over HTTP as JSON only (set it to http/json)",
					 getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ? "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
					 : "OTEL_EXPORTER_OTLP_PROTOCOL", v);
	if (!*cfg->trace_headers && (((v = getenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS")) && *v) ||
				     ((v = getenv("OTEL_EXPORTER_OTLP_HEADERS")) && *v))) {
		free(cfg->trace_headers);
		cfg->trace_headers = strdup(v);
	}
	if (strcmp(cfg->trace_service, "infergate") == 0 && (v = getenv("OTEL_SERVICE_NAME")) && *v) {
		free(cfg->trace_service);
		cfg->trace_service = strdup(v);
	}
	char *end;
	if (cfg->trace_ratio == 1 && (v = getenv("OTEL_TRACES_SAMPLER_ARG")) && *v) {
		double r = strtod(v, &end);
		if (*end || !(r >= 0 && r <= 1))
			ig_flags_problem(errs, "OTEL_TRACES_SAMPLER_ARG: '%s' is not a ratio from 0 to 1", v);
		else
			cfg->trace_ratio = r;
	}
	if (cfg->trace_delay_ms == 5000 && (v = getenv("OTEL_BSP_SCHEDULE_DELAY")) && *v) {
		long d = strtol(v, &end, 10);
		if (*end || d < 1 || d > 600000)
			ig_flags_problem(errs, "OTEL_BSP_SCHEDULE_DELAY: '%s' is not a delay of 1 to 600000 ms", v);
		else
			cfg->trace_delay_ms = d;
	}
	for (const char *h = cfg->trace_headers, *p; h && *h; h = p ? p + 1 : NULL) {
		p = strchr(h, ',');
		size_t n = p ? (size_t)(p - h) : strlen(h);
		const char *eq = memchr(h, '=', n);
		if (!eq || eq == h)
			ig_flags_problem(errs, "tracing.headers: '%.*s' is not key=value", (int)n, h);
	}
}

/* Checks the cross-field rules and derives fields from strings. */
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
	if (cfg->health_path[0] != '/')
		ig_flags_problem(errs, "health.path: '%s' must start with '/'", cfg->health_path);
	check_cluster(cfg, errs);
	cfg->load_path_auto = strcmp(cfg->load_path, "auto") == 0;
	if (cfg->load_path[0] != '/' && !cfg->load_path_auto)
		ig_flags_problem(errs, "load_path: '%s' must be auto or a path starting with '/'", cfg->load_path);
	if (cfg->n_backends == 0)
		ig_flags_problem(errs, "backends: no backend given (use --backend URL or \"backends\" in the config file)");
	for (size_t i = 0; i < cfg->n_backends; i++)
		if (cfg->backends[i].max_inflight < 0)
			cfg->backends[i].max_inflight = cfg->max_inflight;
	/* An alias names a served model, never another alias; a configured
	 * model name cannot be an alias (which would it be?). */
	for (size_t i = 0; i < cfg->n_aliases; i++) {
		const struct ig_model_alias *a = &cfg->aliases[i];
		if (ig_conf_alias_target(cfg, a->model))
			ig_flags_problem(errs, "model_aliases: '%s' -> '%s', which is itself an alias (name the served model)",
					 a->alias, a->model);
		for (size_t b = 0; b < cfg->n_backends; b++)
			for (size_t m = 0; m < cfg->backends[b].n_models; m++)
				if (strcmp(cfg->backends[b].models[m], a->alias) == 0)
					ig_flags_problem(errs, "model_aliases: '%s' is also a model that backend %s serves",
							 a->alias, cfg->backends[b].url);
	}
	if (!cfg->routes.from_file)
		ig_routes_default(&cfg->routes);
	check_tls(cfg, errs);
	check_server_tls(cfg, errs);
	check_data_dir(cfg, errs);
	check_tracing(cfg, errs);
	if (ig_cidrs_parse(&cfg->trusted_proxies, "trusted_proxies", cfg->trusted_proxies_text, &err) < 0) {
		ig_flags_problem(errs, "%s", err);
		free(err);
		err = NULL;
	}
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
	backends_clear(cfg);
	aliases_clear(cfg);
	fallbacks_clear(cfg);
	ig_routes_clear(&cfg->routes);
	ig_cidrs_free(&cfg->trusted_proxies);
	free(cfg->trusted_proxies_text);
	cfg->trusted_proxies_text = NULL;
	free(cfg->keys);
	cfg->keys = NULL;
	cfg->n_keys = 0;
	free(cfg->listen_host);
	free(cfg->admin_listen_host);
	free(cfg->config_path);
	cfg->listen_host = cfg->admin_listen_host = cfg->config_path = NULL;
}

char *ig_conf_to_json(const struct ig_conf *cfg)
{
	json_t *root = json_object();
	for (size_t i = 0; i < spec.n; i++) {
		const struct ig_flag *k = &keys[i];
		json_t *v;
		if (!k->key)
			continue; /* a flag only (--discover entries are shown under "backends") */
		if (k->parse_json == parse_backends_json) {
			v = json_array();
			for (size_t b = 0; b < cfg->n_backends; b++) {
				const struct ig_backend_conf *bc = &cfg->backends[b];
				json_t *o = json_pack("{s:s, s:I, s:I}", bc->discover ? "discover" : "url", bc->url,
						      "weight", (json_int_t)bc->weight, "max_inflight",
						      (json_int_t)bc->max_inflight);
				if (bc->reserve_slots)
					json_object_set_new(o, "reserve_slots", json_integer(bc->reserve_slots));
				if (bc->priority_field)
					json_object_set_new(o, "priority_field",
							    json_string(priority_fields[bc->priority_field]));
				if (bc->n_models) {
					json_t *ms = json_array();
					for (size_t m = 0; m < bc->n_models; m++)
						json_array_append_new(ms, json_string(bc->models[m]));
					json_object_set_new(o, "models", ms);
				}
				json_array_append_new(v, o);
			}
		} else if (k->parse_json == parse_keys_json) {
			v = json_object();
			for (size_t ki = 0; ki < cfg->n_keys; ki++) {
				const struct ig_key_conf *kc = &cfg->keys[ki];
				json_t *o = json_pack("{s:I, s:I}", "weight", (json_int_t)kc->weight, "max_inflight",
						      (json_int_t)kc->max_inflight);
				if (kc->priority >= 0)
					json_object_set_new(o, "priority", json_string(ig_conf_class_name(kc->priority)));
				json_object_set_new(v, kc->digest, o);
			}
		} else if (k->parse_json == parse_routes_json) {
			v = ig_routes_to_json(&cfg->routes);
		} else if (k->parse_json == parse_trusted_json) {
			v = json_array();
			for (size_t t = 0; t < cfg->trusted_proxies.n; t++) {
				char a[INET6_ADDRSTRLEN];
				ig_addr_text(&cfg->trusted_proxies.v[t].net, a, sizeof(a));
				json_array_append_new(v, json_sprintf("%s/%d", a, cfg->trusted_proxies.v[t].bits));
			}
		} else if (k->parse_json == parse_aliases_json) {
			v = json_object();
			for (size_t a = 0; a < cfg->n_aliases; a++)
				json_object_set_new(v, cfg->aliases[a].alias, json_string(cfg->aliases[a].model));
		} else if (k->parse_json == parse_fallbacks_json) {
			v = json_object();
			for (size_t a = 0; a < cfg->n_fallbacks; a++) {
				json_t *l = json_object_get(v, cfg->fallbacks[a].alias);
				if (!l)
					json_object_set_new(v, cfg->fallbacks[a].alias, l = json_array());
				json_array_append_new(l, json_string(cfg->fallbacks[a].model));
			}
		} else {
			v = ig_flags_value_json(k, cfg);
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
