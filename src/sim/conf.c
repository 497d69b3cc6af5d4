/* infergate-sim's flags. One table gives every flag's type,
 * bounds, default and help text, so --help, validation and defaults cannot
 * disagree. Everything is validated before the server starts: a bad flag
 * exits 2 in the first millisecond with a message naming it. */
#include "config.h"
#include <jansson.h>
#include <limits.h>
#include <netdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/log.h"
#include "infergate/util.h"
#include "conf.h"

enum ftype {
	F_LISTEN, /* HOST:PORT */
	F_STRING, /* non-empty text */
	F_LONG,   /* integer within [min, max] */
	F_DOUBLE, /* number within [min, max] */
	F_LEVEL,  /* log level name */
	F_CHOICE, /* one of the metavar's "a|b" words, stored as its index (int) */
	F_BOOL,   /* takes no value: present = true (bool); "=0"/"=1" also work */
};

static const struct flag {
	const char *name;
	enum ftype type;
	const char *metavar;
	double min, max;
	const char *def;
	size_t off;
	const char *help;
} flags[] = {
	{"--listen", F_LISTEN, "HOST:PORT", 0, 0, "127.0.0.1:30000", offsetof(struct sim_conf, listen),
	 "address to listen on (port 0: any free port, logged at start)"},
	{"--model", F_STRING, "NAME", 0, 0, "sim-model", offsetof(struct sim_conf, model),
	 "model name in /v1/models and in answers that name none"},
	{"--tokens-per-second", F_DOUBLE, "N", 0, 1e6, "100", offsetof(struct sim_conf, tokens_per_second),
	 "decode speed of each request; 0 = unpaced (as fast as possible)"},
	{"--ttft-ms", F_LONG, "N", 0, 3600000, "50", offsetof(struct sim_conf, ttft_ms),
	 "delay from admission to the first token, milliseconds"},
	{"--max-running", F_LONG, "N", 1, 100000, "256", offsetof(struct sim_conf, max_running),
	 "requests decoded at once (batch slots); the rest wait in a FIFO queue"},
	{"--output-tokens", F_LONG, "N", 0, 100000, "0", offsetof(struct sim_conf, output_tokens),
	 "answer length in tokens; 0 = 16..256 chosen by the prompt (max_tokens caps either)"},
	{"--fail-rate", F_DOUBLE, "P", 0, 1, "0", offsetof(struct sim_conf, fail_rate),
	 "fraction of completions answered with a 500 error"},
	{"--seed", F_LONG, "N", 0, (double)LONG_MAX, "0", offsetof(struct sim_conf, seed),
	 "seed of the answer text and of --fail-rate draws"},
	{"--log-level", F_LEVEL, "LEVEL", 0, 0, "info", offsetof(struct sim_conf, log_level),
	 "debug, info, warn or error"},
	{"--flavor", F_CHOICE, "sglang|vllm", 0, 0, "sglang", offsetof(struct sim_conf, flavor),
	 "which server to imitate: metric names and labels, error shapes, load endpoints"},
	{"--health-delay-ms", F_LONG, "N", 0, 600000, "0", offsetof(struct sim_conf, health_delay_ms),
	 "GET /health and /health_generate answer after N ms (SGLang runs a one-token generation)"},
	{"--dp-ranks", F_LONG, "N", 1, 64, "1", offsetof(struct sim_conf, dp_ranks),
	 "data-parallel ranks, each with its own --max-running slots and FIFO; requests go round-robin"},
	{"--enable-priority-scheduling", F_BOOL, "", 0, 0, "0", offsetof(struct sim_conf, priority_scheduling),
	 "accept an integer \"priority\" per request and print per-priority gauge series "
	 "(sglang; scheduling stays FIFO)"},
	{"--metrics-refresh", F_CHOICE, "live|sglang", 0, 0, "live", offsetof(struct sim_conf, metrics_refresh),
	 "sglang: the /metrics running/queue gauges change only when SGLang would log stats "
	 "(prefill batch, every 40 decode steps, every 30 s idle)"},
	{"--api-key", F_STRING, "KEY", 0, 0, NULL, offsetof(struct sim_conf, api_key),
	 "require 'Authorization: Bearer KEY' (or x-api-key, sglang) as the real server does"},
	{"--context-length", F_LONG, "N", 0, 100000000, "0", offsetof(struct sim_conf, context_length),
	 "reject prompts + max_tokens that do not fit N tokens with the server's 400; 0 = no check"},
	{"--stream-fail-rate", F_DOUBLE, "P", 0, 1, "0", offsetof(struct sim_conf, stream_fail_rate),
	 "fraction of streams that end with an error event after half their tokens (HTTP 200 already sent)"},
};
#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

void sim_conf_print_help(FILE *out)
{
	fprintf(out,
		"Usage: infergate-sim [FLAGS]\n"
		"A simulated SGLang or vLLM inference server: OpenAI chat and text completions,\n"
		"streamed or not, with deterministic text, batch slots, pacing and fault injection.\n\n"
		"Flags:\n");
	for (size_t i = 0; i < NFLAGS; i++) {
		char left[64];
		snprintf(left, sizeof(left), "%s%s%s", flags[i].name, flags[i].metavar[0] ? " " : "",
			 flags[i].metavar);
		if (flags[i].type == F_BOOL)
			fprintf(out, "  %-30s %s (default off)\n", left, flags[i].help);
		else
			fprintf(out, "  %-30s %s (default %s)\n", left, flags[i].help,
				flags[i].def ? flags[i].def : "none");
	}
	fprintf(out, "  %-30s %s\n  %-30s %s\n", "--help", "print this help and exit",
		"--version", "print the version and exit");
	fprintf(out,
		"\nEndpoints: POST /v1/chat/completions, POST /v1/completions, GET /health,\n"
		"GET /health_generate, GET /v1/models, GET /metrics; sglang only: GET /v1/loads,\n"
		"GET /get_load, GET /get_model_info. Test control (never needs the key):\n"
		"GET /sim/state, GET|POST /sim/fault ({\"mode\": \"ok\"|\"error\"|\"hang\"|\"slow\"|\"down\"}).\n");
}

/* Stores one flag's value. Returns 0 or -1 with *err. */
static int set_flag(struct sim_conf *c, const struct flag *f, const char *v, char **err)
{
	char *base = (char *)c;
	long l;
	double d;

	switch (f->type) {
	case F_LISTEN: {
		char *host = NULL;
		int port;
		if (ig_parse_hostport(f->name, v, &host, &port, err) < 0)
			return -1;
		struct addrinfo hints, *res = NULL;
		char ps[16];
		memset(&hints, 0, sizeof(hints));
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
		snprintf(ps, sizeof(ps), "%d", port);
		int rc = getaddrinfo(host, ps, &hints, &res);
		if (rc != 0 || !res) {
			*err = ig_strdupf("%s: cannot resolve host '%s' in '%s' (%s)", f->name, host, v, gai_strerror(rc));
			free(host);
			return -1;
		}
		memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
		c->addrlen = res->ai_addrlen;
		freeaddrinfo(res);
		free(c->listen_host);
		c->listen_host = host;
		c->listen_port = port;
		break;
	}
	case F_STRING: {
		json_t *j = json_string(v); /* NULL when v is not UTF-8 */
		bool utf8 = j != NULL;
		size_t n = strlen(v);
		json_decref(j);
		if (n == 0 || n > 256 || !utf8) {
			*err = ig_strdupf("%s: '%s' is not a valid name (1..256 bytes of UTF-8)", f->name, v);
			return -1;
		}
		for (const char *p = v; *p; p++) {
			if ((unsigned char)*p < 0x20) {
				*err = ig_strdupf("%s: '%s' contains a control character", f->name, v);
				return -1;
			}
		}
		break;
	}
	case F_LONG:
		if (ig_parse_long(f->name, v, (long)f->min, f->max >= (double)LONG_MAX ? LONG_MAX : (long)f->max,
				  &l, err) < 0)
			return -1;
		*(long *)(base + f->off) = l;
		return 0;
	case F_DOUBLE:
		if (ig_parse_double(f->name, v, f->min, f->max, &d, err) < 0)
			return -1;
		*(double *)(base + f->off) = d;
		return 0;
	case F_LEVEL: {
		enum ig_log_level lv;
		if (ig_log_level_parse(v, &lv) < 0) {
			*err = ig_strdupf("%s: '%s' is not one of debug, info, warn, error", f->name, v);
			return -1;
		}
		break;
	}
	case F_CHOICE: {
		size_t vl = strlen(v);
		int idx = 0;
		for (const char *w = f->metavar; *w; idx++) {
			size_t wl = strcspn(w, "|");
			if (wl == vl && strncmp(w, v, vl) == 0) {
				*(int *)(base + f->off) = idx;
				return 0;
			}
			w += wl + (w[wl] == '|');
		}
		*err = ig_strdupf("%s: '%s' is not one of %s", f->name, v, f->metavar);
		return -1;
	}
	case F_BOOL:
		if (strcmp(v, "1") == 0 || strcmp(v, "true") == 0) {
			*(bool *)(base + f->off) = true;
		} else if (strcmp(v, "0") == 0 || strcmp(v, "false") == 0) {
			*(bool *)(base + f->off) = false;
		} else {
			*err = ig_strdupf("%s: '%s' is not 0, 1, true or false (the flag alone means 1)", f->name, v);
			return -1;
		}
		return 0;
	}
	char **slot = (char **)(base + f->off);
	free(*slot);
	*slot = strdup(v);
	if (!*slot)
		abort();
	return 0;
}

int sim_conf_from_args(struct sim_conf *c, int argc, char **argv, char **err)
{
	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < NFLAGS; i++)
		if (flags[i].def && set_flag(c, &flags[i], flags[i].def, err) < 0)
			return -1; /* a bad default is a bug; say so anyway */

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			sim_conf_print_help(stdout);
			return 1;
		}
		if (strcmp(a, "--version") == 0) {
			printf("infergate-sim %s\n", PACKAGE_VERSION);
			return 1;
		}
		if (strncmp(a, "--", 2) != 0) {
			*err = ig_strdupf("unexpected argument '%s' (flags start with --)", a);
			return -1;
		}
		const char *eq = strchr(a, '=');
		size_t nl = eq ? (size_t)(eq - a) : strlen(a);
		const struct flag *f = NULL;
		for (size_t k = 0; k < NFLAGS; k++)
			if (strlen(flags[k].name) == nl && strncmp(flags[k].name, a, nl) == 0)
				f = &flags[k];
		if (!f) {
			*err = ig_strdupf("unknown flag '%.*s'", (int)nl, a);
			return -1;
		}
		const char *v;
		if (eq) {
			v = eq + 1;
		} else if (f->type == F_BOOL) {
			v = "1"; /* a switch: the next argument is not its value */
		} else if (i + 1 < argc) {
			v = argv[++i];
		} else {
			*err = ig_strdupf("%s: missing value (expected %s)", f->name, f->metavar);
			return -1;
		}
		if (set_flag(c, f, v, err) < 0)
			return -1;
	}
	/* These only change what SGLang prints: with vLLM's names they would
	 * silently do nothing, and a test relying on them would prove nothing. */
	if (c->flavor == SIM_FLAVOR_VLLM && c->metrics_refresh == SIM_REFRESH_SGLANG) {
		*err = ig_strdupf("--metrics-refresh: 'sglang' needs --flavor sglang");
		return -1;
	}
	if (c->flavor == SIM_FLAVOR_VLLM && c->priority_scheduling) {
		*err = ig_strdupf("--enable-priority-scheduling: needs --flavor sglang (vLLM prints no per-priority series)");
		return -1;
	}
	return 0;
}

void sim_conf_free(struct sim_conf *c)
{
	free(c->listen);
	free(c->listen_host);
	free(c->model);
	free(c->log_level);
	free(c->api_key);
	memset(c, 0, sizeof(*c));
}
