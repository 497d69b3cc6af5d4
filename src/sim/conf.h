/* infergate-sim's flags (conf.c): what the simulated server is told at start. */
#ifndef IG_SIM_CONF_H
#define IG_SIM_CONF_H

#include <stdbool.h>
#include <stdio.h>
#include <sys/socket.h>

/* Which real server the simulator imitates (--flavor; the order is the
 * flag's metavar "sglang|vllm"). */
enum sim_flavor {
	SIM_FLAVOR_SGLANG, /* sglang: gauges, flat errors, /v1/loads and /get_load */
	SIM_FLAVOR_VLLM,   /* vllm: gauges, nested errors, the model name checked */
};

/* When the SGLang gauges in /metrics change (--metrics-refresh, "live|sglang"). */
enum sim_refresh {
	SIM_REFRESH_LIVE,   /* at every scrape */
	SIM_REFRESH_SGLANG, /* only when SGLang's scheduler would log its stats */
};

/* The wire format of --kv-events (--kv-events-format, "vllm|sglang"). */
enum sim_kv_format {
	SIM_KV_FORMAT_VLLM,   /* vLLM's array_like batches, a store of n blocks one event */
	SIM_KV_FORMAT_SGLANG, /* SGLang's: one BlockStored per block (page) */
};

/* The engine model (--profile): classic paces each request on its own;
 * the others run decode steps over the whole batch (engine.c). */
enum sim_profile {
	SIM_PROFILE_CLASSIC,  /* fixed tokens/s per request, unlimited memory, no cache */
	SIM_PROFILE_H100_8B,  /* a Llama-3-8B-class model on one H100 */
	SIM_PROFILE_B200_27B, /* a 27B-class model on one B200 with MTP (the seed's fleet) */
};

/* A step model's knobs (a profile's values, each overridable by a flag). */
struct sim_steps {
	double step_ms;           /* a decode step of one running request */
	double per_request_us;    /* added per running request */
	double per_context_ns;    /* added per token of context of the running requests */
	double tokens_per_step;   /* output tokens per request per step (MTP: > 1) */
	double prefill_tps;       /* prompt tokens per second of prefill */
	long chunk;               /* prefill tokens per step at most (chunked prefill) */
	long kv_tokens;           /* the KV budget */
	long output_reserve;      /* KV kept free per admitted request for its output */
};

/* --disaggregation-mode (SGLang's, "null|prefill|decode"). */
enum sim_pd_mode {
	SIM_PD_MODE_NULL,    /* co-located: prefill and decode here */
	SIM_PD_MODE_PREFILL, /* computes prompts, hands their KV to a decode server */
	SIM_PD_MODE_DECODE,  /* decodes from KV a prefill server computed */
};

struct sim_conf {
	char *listen;             /* "HOST:PORT" as given */
	char *listen_host;
	int listen_port;
	struct sockaddr_storage addr; /* resolved --listen */
	socklen_t addrlen;
	char *model;
	double tokens_per_second; /* per request; 0 = unpaced */
	long ttft_ms;
	long max_running;         /* batch slots */
	long output_tokens;       /* 0 = a deterministic length per prompt */
	double fail_rate;         /* fraction of completions answered 500 */
	long seed;
	int log_level;            /* enum ig_log_level */
	int flavor;               /* enum sim_flavor */
	long health_delay_ms;     /* /health answers after this long */
	long dp_ranks;            /* data-parallel ranks, each with max_running slots */
	bool priority_scheduling; /* the queue by "priority", preemption, per-priority series (sglang) */
	bool low_first;           /* --schedule-low-priority-values-first */
	bool no_preemption;       /* --disable-priority-preemption */
	long preempt_threshold;   /* --priority-scheduling-preemption-threshold */
	int metrics_refresh;      /* enum sim_refresh */
	char *api_key;            /* NULL: no key needed */
	long context_length;      /* 0: prompts and max_tokens are not checked */
	double stream_fail_rate;  /* fraction of streams that fail midway */
	int profile;              /* enum sim_profile */
	struct sim_steps steps;   /* its knobs (not used by classic) */
	double time_scale;        /* simulated time runs this many times faster */
	char *kv_events;          /* the KV events' PUB endpoint; NULL: none published */
	char *kv_events_replay;   /* their replay (ROUTER) endpoint; NULL: none */
	int kv_events_format;     /* enum sim_kv_format */
	char *tokenizer;          /* --tokenizer: a tokenizer.json's path; NULL: 4 bytes a token */
	struct ig_tokenizer *tok; /* it, loaded by sim_conf_from_args; NULL: none */
	struct ig_chattmpl *tmpl; /* the chat template beside it (tokenizer_config.json), NULL: none */
	/* prefill/decode disaggregation (pd.c) */
	int pd_mode;              /* enum sim_pd_mode (sglang) */
	long bootstrap_port;      /* --disaggregation-bootstrap-port (sglang prefill) */
	long pd_timeout_ms;       /* --disaggregation-transfer-timeout-ms */
	bool pd_fail;             /* --disaggregation-fail-transfer: compute, never hand over */
	char *kv_transfer_config; /* --kv-transfer-config JSON (vllm); NULL: none */
	bool kv_recompute;        /* its kv_load_failure_policy is "recompute" (default "fail") */
	char *engine_id;          /* its engine_id, or a uuid4 made at start */
	long nixl_port;           /* --nixl-side-channel-port */
	double nixl_abort_s;      /* --nixl-abort-request-timeout-s */
	long kv_bytes_per_token;  /* --kv-bytes-per-token */
	double transfer_gbps;     /* --transfer-gbps, GB/s */
	/* requested data-parallel ranks */
	double *rank_slowdown;    /* --dp-rank-slowdown: a factor per rank (dp_ranks of
				   * them, 1: normal); NULL: none given */
	char *slowdown_arg;       /* the flag's values as given, ';'-joined, until resolved */
	/* LoRA adapters (lora.c) */
	bool enable_lora;         /* --enable-lora (sglang: also implied by --lora-paths) */
	long max_loras;           /* distinct adapters in a batch: vllm --max-loras, sglang
				   * --max-loras-per-batch */
	long max_loaded_loras;    /* adapters known at once: vllm --max-cpu-loras, sglang
				   * --max-loaded-loras; 0: no limit */
	char **lora_names, **lora_paths; /* --lora-modules / --lora-paths, in order */
	size_t nloras;
	bool lora_from_modules;   /* they came from --lora-modules (else --lora-paths) */
	bool lora_runtime;        /* --allow-runtime-lora-updating (vllm's env var) */
	long lora_load_ms;        /* --lora-load-ms: an adapter's load into a GPU slot */
	long vllm_max_loras, vllm_max_cpu_loras, sglang_max_per_batch, sglang_max_loaded; /* as given; -1 not */
};

struct ig_tokenizer;
struct ig_chattmpl;

/* Whether the engine runs decode steps (any profile but classic). */
static inline bool sim_conf_steps(const struct sim_conf *c)
{
	return c->profile != SIM_PROFILE_CLASSIC;
}

/* Fills conf from argv. Returns 0; 1 after printing --help or --version
 * (exit 0); -1 with *err (malloc'd) naming the flag and value (exit 2). */
int sim_conf_from_args(struct sim_conf *conf, int argc, char **argv, char **err);
void sim_conf_free(struct sim_conf *conf);
void sim_conf_print_help(FILE *out);

#endif
