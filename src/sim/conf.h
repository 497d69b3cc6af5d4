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
	bool priority_scheduling; /* per-priority gauge series (sglang) */
	int metrics_refresh;      /* enum sim_refresh */
	char *api_key;            /* NULL: no key needed */
	long context_length;      /* 0: prompts and max_tokens are not checked */
	double stream_fail_rate;  /* fraction of streams that fail midway */
};

/* Fills conf from argv. Returns 0; 1 after printing --help or --version
 * (exit 0); -1 with *err (malloc'd) naming the flag and value (exit 2). */
int sim_conf_from_args(struct sim_conf *conf, int argc, char **argv, char **err);
void sim_conf_free(struct sim_conf *conf);
void sim_conf_print_help(FILE *out);

#endif
