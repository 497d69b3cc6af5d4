/* The gateway's configuration: one typed struct filled from a JSON file and
 * then from flags, through one table of keys that also gives bounds,
 * defaults and --help text. The table is the concatenation of the modules'
 * parts (each module declares its rows, and its check, in its own .c: as
 * nginx's ngx_command_t or HAProxy's cfg_register_keywords); the program
 * lists them once (conf_parts.c) and registers them before any ig_conf_*
 * call. Validation is complete before anything starts. */
#ifndef IG_CONF_H
#define IG_CONF_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "infergate/buf.h"
#include "infergate/flags.h"

#include "conf/peer.h"
#include "conf/routes.h"

#define IG_CONT_MAX 5 /* continue.max's ceiling */

struct ig_backend_conf {
	char *url;          /* normalised: scheme://host[:port][/prefix], no trailing slash */
	long weight;        /* relative capacity, 1..1000 */
	long max_inflight;  /* 0 = unlimited */
	int discover;       /* url names a DNS name: every address it resolves to
			     * becomes a backend (discover.c) */
	char **models;      /* the models it serves; NULL: learned from its /v1/models */
	size_t n_models;
	long reserve_slots; /* slots a bulk (low) request may not take */
	int priority_field; /* 0 learned (health.c: the server's /server_info); 1 "sglang",
			     * 2 "vllm": the class goes into the body's "priority" for a
			     * backend that schedules by it; 3 "none": never */
	/* Its engines' KV events (fleet/kvevents.c): the ZMQ PUB endpoint to
	 * subscribe to and the replay ROUTER, "tcp://HOST:PORT" or
	 * "ipc://PATH"; NULL: derived from kv_events.port (and replay_port)
	 * with the URL's host, or none. */
	char *kv_events;
	char *kv_events_replay;
	int kv_format;      /* 0 kv_events.format; 1 "vllm", 2 "sglang" */
	long dp_ranks;      /* its data-parallel ranks, each a backend entry of its
			     * own (backend.h), rank r publishing KV events on
			     * port + r (vLLM's offset_endpoint_port); 0 = 1;
			     * written by: reload (the running count kept) */
	/* Prefill/decode disaggregation (path/try_pd.c): what it does of a
	 * request, which engine it is (the pair's protocol), and an SGLang
	 * prefill server's bootstrap port (its --disaggregation-bootstrap-port). */
	int role;           /* enum ig_pd_role */
	int engine;         /* enum ig_pd_engine */
	long bootstrap_port; /* 0: SGLang's default, 8998 */
	long max_loras;     /* LoRA adapters the gateway keeps loaded there at
			     * once (sched/adapters.c); 0: learned (vLLM's
			     * max_lora, SGLang's max_loras_per_batch), else
			     * none loaded by the gateway */
};

/* backends[].role: an ordinary server (both), or one half of a pair. */
enum ig_pd_role {
	IG_ROLE_BOTH,       /* prefills and decodes its requests itself */
	IG_ROLE_PREFILL,    /* computes a prompt's KV and hands it over */
	IG_ROLE_DECODE,     /* decodes from a KV handed over by a prefill server */
};

/* backends[].engine: whose disaggregation protocol the server speaks. */
enum ig_pd_engine {
	IG_ENGINE_UNSET,
	IG_ENGINE_SGLANG,   /* both at once, bootstrap_host/port/room in the body */
	IG_ENGINE_VLLM,     /* prefill first, its kv_transfer_params to the decode */
};

#define IG_PD_SGLANG_BOOTSTRAP_PORT 8998 /* SGLang's --disaggregation-bootstrap-port default */

/* Priority classes of requests (the scheduler serves them in this order). */
enum ig_class {
	IG_CLASS_HIGH,   /* X-Infergate-Priority: high */
	IG_CLASS_NORMAL, /* the default */
	IG_CLASS_LOW,    /* bulk runs (infergate-bulk sends it) */
	IG_NCLASSES,
};

/* cache_aware.mode: how the cache-aware policy weighs a prefix match
 * against load (lb_cache_aware.c). */
enum ig_cache_mode {
	IG_CACHE_COST,      /* the least prefill and KV to wait behind (Dynamo's KV router cost) */
	IG_CACHE_THRESHOLD, /* a match over threshold_percent wins unless imbalanced (SGLang's router) */
};

const char *ig_conf_class_name(int klass);
/* The class named (case-sensitive "high", "normal", "low"), or -1. */
int ig_conf_class_parse(const char *s);

/* What the configuration says of one API key (by the SHA-256 of the key). */
struct ig_key_conf {
	char digest[65];     /* lower-case hex */
	int priority;        /* its requests' default class (enum ig_class), -1 none */
	long weight;         /* its share within a class, 1..1000 */
	long max_inflight;   /* its requests on backends at once, 0 = no cap */
};

/* A client's name for a model and the served name it stands for. */
struct ig_model_alias {
	char *alias;
	char *model;
};

#define IG_MAX_WORKERS 64

struct ig_conf {
	char *config_path;          /* the file read, NULL when flags only */
	char *listen;               /* "HOST:PORT" as given */
	char *listen_host;
	int listen_port;
	char *admin_listen;         /* "HOST:PORT" of the admin listener; "" = none */
	char *admin_listen_host;
	int admin_listen_port;
	char *server_tls_cert;      /* PEM certificate (and chain) of HTTPS for clients; "" = plain HTTP */
	char *server_tls_key;       /* its PEM private key */
	char *server_tls_client_ca; /* PEM CAs a client's certificate must come from; "" = none asked */
	char *server_tls_priorities; /* GnuTLS priority string: versions and cipher suites */
	long server_tls_tickets;    /* 1: session tickets (resumption) */
	struct ig_backend_conf *backends;
	size_t n_backends;
	int policy;                 /* the routing policy: its row in policy_list.h */
	char *health_path;
	long health_interval_ms;
	long health_timeout_ms;
	long health_rise;
	long health_fall;
	long retries;
	long ttft_ms;               /* a stream's first byte within this, else retried (0: no limit) */
	long token_gap_ms;          /* a stream's next event within this, else continued (0: idle_s only) */
	long ttft_high_ms, ttft_low_ms; /* the same for classes high and low; -1: as ttft_ms */
	long token_gap_high_ms, token_gap_low_ms; /* -1: as token_gap_ms */
	long breaker_failures;      /* request failures in a row that open a backend's breaker (0: none) */
	long breaker_open_ms;       /* how long it stays open first (doubling, up to 8x) */
	long idem_ttl_s;            /* Idempotency-Key answers kept this long (0: the header is not read) */
	long idem_max_bytes;        /* ... up to this many bytes (the oldest go first) */
	long hedge_after_ms;        /* a request with no byte after this is hedged (0: never) */
	long hedge_budget_percent;  /* hedges per minute, of the requests */
	bool hedge_low;             /* class low is hedged too */
	bool anthropic_translate;   /* Anthropic's Messages sent as chat completions (path/xlate.c) */
	long headroom_max_percent;  /* learned headroom's cap, of a pool's slots (0: none learned) */
	long headroom_overshoot;    /* high/normal over a preempting backend's slots (dispatch.c) */
	/* tracing (trace.h); OTEL_* variables fill what the configuration leaves at its default */
	char *trace_endpoint;       /* OTLP/HTTP traces URL; "" off; written by: trace */
	char *trace_headers;        /* "k=v,k2=v2"; written by: trace */
	char *trace_service;        /* service.name; written by: trace */
	double trace_ratio;         /* of new (root) traces sampled; written by: trace */
	long trace_delay_ms;        /* a batch at least this often; written by: trace */
	long continue_max;          /* continuations of a broken stream (cont.h), <= IG_CONT_MAX */
	long retry_budget_percent;  /* retries over the last 10 s: at most this share of */
	long retry_budget_min_per_s; /* the requests, plus this many a second (dispatch.c) */
	long max_inflight;          /* default per-backend limit, 0 = none */
	long queue_size;
	long queue_timeout_ms;      /* class normal */
	long queue_timeout_high_ms;
	long queue_timeout_low_ms;
	int scheduling;             /* 0 "priority", 1 "fifo" */
	long low_share_percent;     /* low's guaranteed share of dispatches while others wait */
	struct ig_key_conf *keys;   /* api_key_settings */
	size_t n_keys;
	long max_body_bytes;
	long connect_ms;
	long idle_s;
	long shutdown_grace_s;
	long workers;                /* reactors (threads), 0 = one per core, at most IG_MAX_WORKERS */
	long max_connections;
	long header_buffer_bytes;    /* each client connection's buffer (MHD's pool): headers beyond it are 431 */
	long client_timeout_s;      /* idle client connections are closed after this */
	long client_header_timeout_s; /* a request's head must be whole within this (0: no deadline) */
	long max_connections_per_ip; /* open connections per client address (0: no cap) */
	char *trusted_proxies_text; /* trusted_proxies as given, "ADDR[/BITS],..." */
	struct ig_cidrs trusted_proxies; /* parsed: whose X-Forwarded-For is believed */
	int log_level;              /* enum ig_log_level */
	char *access_log;           /* path, "-" for stdout, "" for none */
	char *api_keys_file;        /* the keys file (keyset.h); "" = open */
	long cache_threshold_percent; /* cache-aware: the share of the prompt a match must cover */
	long cache_balance_abs;     /* ...unless its backend has this many more in flight */
	double cache_balance_rel;   /* ...and this many times as many as the least loaded */
	long cache_max_blocks;      /* prefix blocks remembered per backend */
	/* kv_events (fleet/kvevents.c): every backend without its own endpoint
	 * subscribes to tcp://ITS_HOST:kv_port; 0 = none */
	long kv_port;
	long kv_replay_port;        /* the replay ROUTER's port, 0 = none */
	int kv_format;              /* 0 "vllm", 1 "sglang" (enum ig_kv_flavor) */
	/* prefill/decode pairs (path/try_pd.c): each half's policy (rows of
	 * policy_list.h), the prompt below which a server that can prefill
	 * alone takes the request, how long a pair's hand-over may take */
	int pd_prefill_policy;
	int pd_decode_policy;
	long pd_min_prompt_tokens;
	long pd_transfer_timeout_ms;
	bool pd_pairs;              /* some backend is a prefill server; written by: conf_fleet */
	long kv_stale_after_ms;     /* requests sent this long ago and no batch since: stale */
	long kv_max_blocks;         /* the exact index's bound, (source, block) pairs (kept on a
				     * reload: the index is made once); written by: reload */
	int cache_mode;             /* cache-aware: IG_CACHE_COST or IG_CACHE_THRESHOLD */
	double cache_prefill_weight; /* cost mode: a prompt token to prefill against a token of KV held */
	long default_max_tokens;    /* the output a request without max_tokens is taken
				     * to ask for (tpm charges, least-tokens) */
	long stream_usage;          /* 1: ask streams for usage, hide it from clients
				     * that did not */
	char *admin_keys_file;      /* same, for /admin; "" = admin API off */
	long auth_status;           /* 1: /metrics, /status, /health/backends need a key */
	char *backend_api_key;      /* sent to backends as a bearer token */
	/* https:// backends (and their probes): "" = curl's defaults */
	char *tls_ca_file;          /* PEM CAs to verify them with, instead of the system's */
	char *tls_client_cert;      /* PEM certificate shown to them (mTLS), with tls_client_key */
	char *tls_client_key;
	long tls_verify;            /* 0: no certificate or host name check */
	int load_from_backend;      /* load_source: 0 "gateway", 1 "backend" */
	char *load_path;            /* polled for the backend's own queue */
	int load_path_auto;         /* load_path == "auto"; written by: loadreport */
	long discover_interval_s;   /* how often discovered names are resolved again */
	struct ig_model_alias *aliases; /* model_aliases */
	size_t n_aliases;
	struct ig_model_alias *fallbacks; /* model_fallbacks: {alias: the model, model:
					   * its fallback}, in the order tried */
	size_t n_fallbacks;
	bool fallbacks_from_flags;  /* a --model-fallback replaced the file's map */
	struct ig_model_conf *models; /* models[]: what the gateway knows of a model
				       * itself (its tokenizer); written by: prompt, reload
				       * (kept across a reload) */
	size_t n_models;            /* written by: prompt, reload */
	bool models_from_flags;     /* a --tokenizer replaced the file's list; written by: prompt */
	struct ig_routes routes;    /* what is forwarded, and how (routes.h) */
	char *data_dir;             /* files and batches; "" = the Files API off */
	long files_max_bytes;       /* largest upload */
	long batch_max_inflight;    /* a batch's requests in flight at most, 0 = its share of the slots */
	long batch_retention_s;     /* finished batches and their files kept this long, 0 = for ever */
	char *cluster_redis;        /* cluster.redis_url; "" = no cluster */
	char *cluster_redis_tls_ca; /* rediss://: PEM CAs Redis's certificate is verified with; "" = the system's */
	char *cluster_redis_tls_cert; /* rediss://: PEM client certificate (tls-auth-clients), with the key */
	char *cluster_redis_tls_key;
	char *cluster_redis_tls_name; /* rediss://: the name its certificate must carry; "" = the URL's host */
	char *cluster_name;         /* cluster.name (the listen address by default); written by: cluster */
	long cluster_sync_ms;       /* how often it syncs with Redis */
	long cluster_lease_s;       /* a batch's lease: how long a silent holder keeps it */
	bool backends_from_flags;   /* a --backend or --discover replaced the file's list */
	bool aliases_from_flags;    /* a --model-alias replaced the file's map */
	bool check_only;            /* --check-config */
};

/* models[]: a model's tokenizer.json and chat template (tokenizer_config.json;
 * by default the one beside the tokenizer, when there is one). */
struct ig_model_conf {
	char *name;                 /* written by: prompt */
	char *tokenizer;            /* path; written by: prompt */
	char *chat_template;        /* path, NULL: none given; written by: prompt */
	/* models[].adapters: the LoRA adapters of this base model, by name,
	 * with the path a server loads each from (sched/adapters.c); an
	 * adapter's name is a model name for clients, keys and limits. */
	char **adapter_names;       /* written by: prompt */
	char **adapter_paths;       /* written by: prompt */
	size_t n_adapters;          /* written by: prompt */
};

/* A row's field: .off = IG_CONF_OFF(retries). */
#define IG_CONF_OFF(f) offsetof(struct ig_conf, f)

/* One module's rows of the table, consecutive in --help (a module whose rows
 * stand apart in --help has two parts). */
struct ig_conf_part {
	const struct ig_flag *rows;
	size_t n;
	/* The value --check-config shows of one of its CUSTOM rows, or NULL
	 * for the library's (ig_flags_value_json). NULL: the library's always. */
	json_t *(*to_json)(const struct ig_flag *row, const struct ig_conf *cfg);
	/* Frees what its CUSTOM rows hold (the library frees the STRING ones). */
	void (*clear)(struct ig_conf *cfg);
};
#define IG_CONF_PART(rows_, ...) {.rows = rows_, .n = sizeof(rows_) / sizeof(rows_[0]), __VA_ARGS__}

/* A module's check, run once the file and the flags are read: cross-field
 * rules, files that must be readable, values derived from others. Each
 * problem is a line in errs naming the key (ig_flags_problem). */
typedef void (*ig_conf_check_fn)(struct ig_conf *cfg, struct ig_buf *errs);

/* Installs the program's table: the parts' rows in this order (--help's, the
 * reference's, --check-config's), and the checks, run in this order (their
 * problems are printed in it). Called before any other ig_conf_* function;
 * again replaces the table. Returns 0, or -1 when the rows are more than
 * the table holds (a bug: said on stderr). */
int ig_conf_register(const struct ig_conf_part *const *parts, size_t nparts, const ig_conf_check_fn *checks,
		     size_t nchecks);
/* The checks that span modules, for the program's list: trusted_proxies
 * parsed. */
void ig_conf_check_trusted(struct ig_conf *cfg, struct ig_buf *errs);
/* TLS files can be read and go together: every problem named by its key
 * (names: the CA file's, the client certificate's, its key's); "" = not
 * given. For the backends' tls.* and cluster.redis_tls_*. */
void ig_conf_check_tls_files(struct ig_buf *errs, const char *const names[3], const char *ca_file,
			     const char *client_cert, const char *client_key);

/* Builds the configuration from argv (which may name --config FILE).
 * Returns 0; 1 when the caller should exit 0 having printed something
 * (--help, --version); -1 with every problem written to *err (malloc'd,
 * one per line). --check-config sets cfg->check_only. */
int ig_conf_from_args(struct ig_conf *cfg, int argc, char **argv, char **err);
/* Loads and validates a JSON file into a fresh config (for reload).
 * Returns 0 or -1 with *err. */
int ig_conf_from_file(struct ig_conf *cfg, const char *path, char **err);
void ig_conf_free(struct ig_conf *cfg);
/* The effective configuration as JSON (malloc'd). */
char *ig_conf_to_json(const struct ig_conf *cfg);
/* A backend URL in canonical form (scheme://host:port[/prefix]); malloc'd,
 * or NULL with *why set. */
char *ig_conf_normalise_url(const char *in, const char **why);
void ig_conf_print_help(FILE *out);
/* A deep copy of src into dst (its url and models malloc'd anew). Returns
 * 0 or -1 (out of memory: dst empty). */
int ig_conf_backend_copy(struct ig_backend_conf *dst, const struct ig_backend_conf *src);
/* Frees what a backend entry holds and empties it. */
void ig_conf_backend_clear(struct ig_backend_conf *bc);
/* Why a KV events endpoint is refused (not tcp://HOST:PORT nor
 * ipc://PATH, a bad host, a port out of range, also for rank ranks - 1 at
 * port + ranks - 1), or NULL. */
const char *ig_conf_kv_endpoint_bad(const char *ep, long ranks);
/* Why a model name is refused (empty, over 256 bytes, a control
 * character: names go to logs and metric labels), or NULL. */
const char *ig_conf_bad_model_name(const char *m);
/* The served name a client's model name stands for (an alias's target), or
 * NULL when it is no alias. */
const char *ig_conf_alias_target(const struct ig_conf *cfg, const char *name);
/* The i-th fallback of model `name` (model_fallbacks), or NULL past the last. */
const char *ig_conf_fallback(const struct ig_conf *cfg, const char *name, size_t i);

#endif
