/* infergate-sim's flags, one table read by the flag library
 * (include/infergate/flags.h): --help, validation and defaults come from it. Everything is validated before the server starts: a bad flag
 * exits 2 in the first millisecond with a message naming it. */
#include "config.h"
#include <jansson.h>
#include <limits.h>
#include <netdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "infergate/chattmpl.h"
#include "infergate/flags.h"
#include "infergate/kvpub.h"
#include "infergate/log.h"
#include "infergate/tokenizer.h"
#include "infergate/util.h"
#include "conf.h"
#include "lora.h"

/* --listen: HOST:PORT, resolved now so a bad host fails before anything
 * starts. */
static int parse_listen(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	struct sim_conf *c = target;
	char *host = NULL;
	int port;
	if (ig_parse_hostport(what, v, &host, &port, err) < 0)
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
		*err = ig_strdupf("%s: cannot resolve host '%s' in '%s' (%s)", what, host, v, gai_strerror(rc));
		free(host);
		return -1;
	}
	memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
	c->addrlen = res->ai_addrlen;
	freeaddrinfo(res);
	free(c->listen_host);
	c->listen_host = host;
	c->listen_port = port;
	free(*(char **)((char *)target + f->off));
	*(char **)((char *)target + f->off) = strdup(v);
	return 0;
}

/* A name the simulator prints in JSON and metrics labels: 1..256 bytes of
 * UTF-8, no control characters. */
static int check_name(void *target IG_UNUSED, const struct ig_flag *f IG_UNUSED, const char *what,
		      const char *v, char **err)
{
	json_t *j = json_string(v); /* NULL when v is not UTF-8 */
	bool utf8 = j != NULL;
	size_t n = strlen(v);
	json_decref(j);
	if (n == 0 || n > 256 || !utf8) {
		*err = ig_strdupf("%s: '%s' is not a valid name (1..256 bytes of UTF-8)", what, v);
		return -1;
	}
	for (const char *p = v; *p; p++) {
		if ((unsigned char)*p < 0x20) {
			*err = ig_strdupf("%s: '%s' contains a control character", what, v);
			return -1;
		}
	}
	return 0;
}

/* --dp-rank-slowdown RANK=FACTOR, repeatable: kept as given until the end,
 * where --dp-ranks is known (resolve_slowdown). */
static int parse_slowdown(void *target, const struct ig_flag *f IG_UNUSED, const char *what, const char *v,
			  char **err)
{
	struct sim_conf *c = target;
	if (!strchr(v, '=') || strchr(v, ';')) {
		*err = ig_strdupf("%s: '%s' is not RANK=FACTOR", what, v);
		return -1;
	}
	char *all = c->slowdown_arg ? ig_strdupf("%s;%s", c->slowdown_arg, v) : strdup(v);
	if (!all)
		return -1;
	free(c->slowdown_arg);
	c->slowdown_arg = all;
	return 0;
}

/* --lora-modules / --lora-paths NAME=PATH, one per value (sim_lora_expand_argv
 * turned argparse's "flag A B C" into one flag per value). A name ends up
 * in JSON and a metric label: a valid name, and no comma (the metric joins
 * names with commas). */
static int parse_lora(void *target, const struct ig_flag *f, const char *what, const char *v, char **err)
{
	struct sim_conf *c = target;
	char *name, *path;
	if (sim_lora_split(v, &name, &path) < 0) {
		*err = ig_strdupf("%s: '%s' is not NAME=PATH", what, v);
		return -1;
	}
	if (check_name(target, f, what, name, err) < 0 ||
	    (strchr(name, ',') && (*err = ig_strdupf("%s: '%s': an adapter's name has no comma", what, name)))) {
		free(name);
		free(path);
		return -1;
	}
	char **n = realloc(c->lora_names, (c->nloras + 1) * sizeof(*n));
	if (n)
		c->lora_names = n;
	char **p = realloc(c->lora_paths, (c->nloras + 1) * sizeof(*p));
	if (p)
		c->lora_paths = p;
	if (!n || !p) {
		free(name);
		free(path);
		return -1;
	}
	c->lora_from_modules = strcmp(f->name, "--lora-modules") == 0;
	c->lora_names[c->nloras] = name;
	c->lora_paths[c->nloras++] = path;
	return 0;
}

#define OFF(field) offsetof(struct sim_conf, field)
static const struct ig_flag flags[] = {
	{.name = "--listen", .type = IG_FLAG_CUSTOM, .off = OFF(listen), .def = "127.0.0.1:30000",
	 .metavar = "HOST:PORT", .parse = parse_listen,
	 .help = "address to listen on (port 0: any free port, logged at start)"},
	{.name = "--model", .type = IG_FLAG_STRING, .off = OFF(model), .def = "sim-model", .metavar = "NAME",
	 .parse = check_name, .help = "model name in /v1/models and in answers that name none"},
	{.name = "--tokens-per-second", .type = IG_FLAG_DOUBLE, .off = OFF(tokens_per_second), .min = 0,
	 .max = 1e6, .def = "100", .metavar = "N",
	 .help = "decode speed of each request; 0 = unpaced (as fast as possible)"},
	{.name = "--ttft-ms", .type = IG_FLAG_LONG, .off = OFF(ttft_ms), .min = 0, .max = 3600000, .def = "50",
	 .metavar = "N", .help = "delay from admission to the first token, milliseconds"},
	{.name = "--max-running", .type = IG_FLAG_LONG, .off = OFF(max_running), .min = 1, .max = 100000,
	 .metavar = "N",
	 .help = "requests decoded at once (batch slots); the rest wait in a FIFO queue (default: the "
		 "profile's, 256 for classic)"},
	{.name = "--profile", .type = IG_FLAG_CHOICE, .off = OFF(profile), .def = "classic",
	 .metavar = "classic|h100-8b|b200-27b-mtp",
	 .help = "engine model: classic paces each request alone (--tokens-per-second, --ttft-ms); the others "
		 "run decode steps over the batch, with a KV budget and a prefix cache (docs/simulator.md)"},
	{.name = "--step-ms", .type = IG_FLAG_DOUBLE, .off = OFF(steps.step_ms), .min = 0.01, .max = 10000,
	 .metavar = "X", .help = "step profiles: a decode step's base time, ms"},
	{.name = "--step-per-request-us", .type = IG_FLAG_DOUBLE, .off = OFF(steps.per_request_us), .min = 0,
	 .max = 1e6, .metavar = "X", .help = "step profiles: added to a step per running request, microseconds"},
	{.name = "--step-per-context-ns", .type = IG_FLAG_DOUBLE, .off = OFF(steps.per_context_ns), .min = 0,
	 .max = 1e6, .metavar = "X",
	 .help = "step profiles: added to a step per token of context of the running requests, nanoseconds"},
	{.name = "--tokens-per-step", .type = IG_FLAG_DOUBLE, .off = OFF(steps.tokens_per_step), .min = 0.1,
	 .max = 64, .metavar = "X",
	 .help = "step profiles: output tokens per request per step (MTP / speculative decoding: above 1)"},
	{.name = "--prefill-tokens-per-second", .type = IG_FLAG_DOUBLE, .off = OFF(steps.prefill_tps), .min = 1,
	 .max = 1e9, .metavar = "X", .help = "step profiles: prefill speed, prompt tokens per second"},
	{.name = "--chunked-prefill", .type = IG_FLAG_LONG, .off = OFF(steps.chunk), .min = 16, .max = 10000000,
	 .metavar = "N", .help = "step profiles: prompt tokens prefilled per step at most (the rest next step)"},
	{.name = "--kv-tokens", .type = IG_FLAG_LONG, .off = OFF(steps.kv_tokens), .min = 64, .max = 1000000000,
	 .metavar = "N",
	 .help = "step profiles: KV budget in tokens (running requests and the prefix cache); a request "
		 "waits until its uncached prompt and --output-reserve fit"},
	{.name = "--output-reserve", .type = IG_FLAG_LONG, .off = OFF(steps.output_reserve), .min = 0,
	 .max = 1000000, .metavar = "N",
	 .help = "step profiles: KV tokens kept free per admitted request for its output (at most its max)"},
	{.name = "--time-scale", .type = IG_FLAG_DOUBLE, .off = OFF(time_scale), .min = 0.001, .max = 1e6,
	 .def = "1", .metavar = "X",
	 .help = "step profiles: simulated time runs X times faster than the clock (a run of minutes in "
		 "seconds; reported speeds stay simulated)"},
	{.name = "--output-tokens", .type = IG_FLAG_LONG, .off = OFF(output_tokens), .min = 0, .max = 100000,
	 .def = "0", .metavar = "N",
	 .help = "answer length in tokens; 0 = 16..256 chosen by the prompt (max_tokens caps either)"},
	{.name = "--fail-rate", .type = IG_FLAG_DOUBLE, .off = OFF(fail_rate), .min = 0, .max = 1, .def = "0",
	 .metavar = "P", .help = "fraction of completions answered with a 500 error"},
	{.name = "--seed", .type = IG_FLAG_LONG, .off = OFF(seed), .min = 0, .max = (double)LONG_MAX, .def = "0",
	 .metavar = "N", .help = "seed of the answer text and of --fail-rate draws"},
	{.name = "--log-level", .type = IG_FLAG_CHOICE, .off = OFF(log_level), .def = "info",
	 .metavar = "debug|info|warn|error", .bad = "%s: '%s' is not one of debug, info, warn, error",
	 .help = "what to log"},
	{.name = "--flavor", .type = IG_FLAG_CHOICE, .off = OFF(flavor), .def = "sglang", .metavar = "sglang|vllm",
	 .help = "which server to imitate: metric names and labels, error shapes, load endpoints"},
	{.name = "--health-delay-ms", .type = IG_FLAG_LONG, .off = OFF(health_delay_ms), .min = 0, .max = 600000,
	 .def = "0", .metavar = "N",
	 .help = "GET /health and /health_generate answer after N ms (SGLang runs a one-token generation)"},
	{.name = "--dp-ranks", .type = IG_FLAG_LONG, .off = OFF(dp_ranks), .min = 1, .max = 64, .def = "1",
	 .metavar = "N",
	 .help = "data-parallel ranks, each with its own --max-running slots and FIFO; requests go round-robin"},
	{.name = "--enable-priority-scheduling", .type = IG_FLAG_SWITCH, .off = OFF(priority_scheduling),
	 .help = "accept an integer \"priority\" per request: larger values run first (a request without one "
		 "runs last), a waiting request preempts a running one more than "
		 "--priority-scheduling-preemption-threshold below it when the slots are full, and the gauges "
		 "get per-priority series (sglang)"},
	{.name = "--schedule-low-priority-values-first", .type = IG_FLAG_SWITCH, .off = OFF(low_first),
	 .help = "with priority scheduling, smaller values run first"},
	{.name = "--disable-priority-preemption", .type = IG_FLAG_SWITCH, .off = OFF(no_preemption),
	 .help = "with priority scheduling, never preempt a running request"},
	{.name = "--priority-scheduling-preemption-threshold", .type = IG_FLAG_LONG, .off = OFF(preempt_threshold),
	 .min = 0, .max = 1000000000, .def = "10", .metavar = "N",
	 .help = "a waiting request preempts a running one only when its priority is more than N better"},
	{.name = "--metrics-refresh", .type = IG_FLAG_CHOICE, .off = OFF(metrics_refresh), .def = "live",
	 .metavar = "live|sglang",
	 .help = "sglang: the /metrics running/queue gauges change only when SGLang would log stats "
		 "(prefill batch, every 40 decode steps, every 30 s idle)"},
	{.name = "--api-key", .type = IG_FLAG_STRING, .off = OFF(api_key), .metavar = "KEY", .parse = check_name,
	 .help = "require 'Authorization: Bearer KEY' (or x-api-key, sglang) as the real server does"},
	{.name = "--context-length", .type = IG_FLAG_LONG, .off = OFF(context_length), .min = 0, .max = 100000000,
	 .def = "0", .metavar = "N",
	 .help = "reject prompts + max_tokens that do not fit N tokens with the server's 400; 0 = no check"},
	{.name = "--kv-events", .type = IG_FLAG_STRING, .off = OFF(kv_events), .metavar = "ENDPOINT",
	 .help = "step profiles: publish the prefix cache's changes as vLLM and SGLang publish their KV events "
		 "(ZMQ PUB, msgpack), bound on ENDPOINT, e.g. tcp://*:5557 (a port * takes a free one, logged); "
		 "rank N on the port plus N. Blocks of 16 tokens, a token 4 bytes of prompt text (docs/simulator.md)"},
	{.name = "--kv-events-replay", .type = IG_FLAG_STRING, .off = OFF(kv_events_replay), .metavar = "ENDPOINT",
	 .help = "with --kv-events: a ZMQ ROUTER endpoint answering replay requests from the last 10000 batches"},
	{.name = "--tokenizer", .type = IG_FLAG_STRING, .off = OFF(tokenizer), .metavar = "PATH",
	 .help = "a model's tokenizer.json (Hugging Face's format): prompts are counted and cached in its token ids, "
		 "which the KV events carry, and chat messages rendered by the chat template of the "
		 "tokenizer_config.json beside it, as a real engine does; without it a token is 4 bytes of text"},
	{.name = "--kv-events-format", .type = IG_FLAG_CHOICE, .off = OFF(kv_events_format), .def = "vllm",
	 .metavar = "vllm|sglang",
	 .help = "with --kv-events: vLLM's batches, or SGLang's (one BlockStored per block, signed hashes)"},
	{.name = "--stream-fail-rate", .type = IG_FLAG_DOUBLE, .off = OFF(stream_fail_rate), .min = 0, .max = 1,
	 .def = "0", .metavar = "P",
	 .help = "fraction of streams that end with an error event after half their tokens (HTTP 200 already sent)"},
	{.name = "--disaggregation-mode", .type = IG_FLAG_CHOICE, .off = OFF(pd_mode), .def = "null",
	 .metavar = "null|prefill|decode",
	 .help = "SGLang's prefill/decode disaggregation: prefill computes prompts and hands their KV over "
		 "(bootstrap_host/_port/_room in the body), decode takes it and decodes (sglang)"},
	{.name = "--disaggregation-bootstrap-port", .type = IG_FLAG_LONG, .off = OFF(bootstrap_port), .min = 0,
	 .max = 65535, .def = "8998", .metavar = "N",
	 .help = "prefill: the bootstrap listener's port, on the --listen host (0: any free port, logged at start)"},
	{.name = "--disaggregation-transfer-timeout-ms", .type = IG_FLAG_LONG, .off = OFF(pd_timeout_ms), .min = 1,
	 .max = 86400000, .def = "300000", .metavar = "N",
	 .help = "a KV hand-over not done in N ms fails: the decode answers 500, an SGLang prefill too "
		 "(SGLang's bootstrap and waiting timeouts, 300 s; simulated time)"},
	{.name = "--disaggregation-fail-transfer", .type = IG_FLAG_SWITCH, .off = OFF(pd_fail),
	 .help = "fault: a prefill computes but never hands its KV over (its decode times out or fails)"},
	{.name = "--kv-transfer-config", .type = IG_FLAG_STRING, .off = OFF(kv_transfer_config), .metavar = "JSON",
	 .help = "vLLM's, e.g. '{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}': each request "
		 "is a prefill (kv_transfer_params.do_remote_decode) or a decode (do_remote_prefill) or whole (vllm)"},
	{.name = "--nixl-side-channel-port", .type = IG_FLAG_LONG, .off = OFF(nixl_port), .min = 0, .max = 65535,
	 .def = "5600", .metavar = "N",
	 .help = "with --kv-transfer-config: the side channel decodes read blocks from (VLLM_NIXL_SIDE_CHANNEL_PORT; "
		 "0: any free port, logged at start)"},
	{.name = "--nixl-abort-request-timeout-s", .type = IG_FLAG_DOUBLE, .off = OFF(nixl_abort_s), .min = 0.001,
	 .max = 86400, .def = "480", .metavar = "X",
	 .help = "with --kv-transfer-config: a prefill's blocks no decode read are freed after X s "
		 "(VLLM_NIXL_ABORT_REQUEST_TIMEOUT; simulated time)"},
	{.name = "--kv-bytes-per-token", .type = IG_FLAG_LONG, .off = OFF(kv_bytes_per_token), .min = 1,
	 .max = 100000000, .def = "131072", .metavar = "N",
	 .help = "KV bytes a prompt token moves in a hand-over (an 8B Llama: 32 layers x 8 KV heads x 128 x K,V x "
		 "2 bytes)"},
	{.name = "--transfer-gbps", .type = IG_FLAG_DOUBLE, .off = OFF(transfer_gbps), .min = 0.001, .max = 100000,
	 .def = "25", .metavar = "X",
	 .help = "KV hand-over bandwidth, GB/s (25: a 200 Gb/s RDMA link; simulated time)"},
	{.name = "--dp-rank-slowdown", .type = IG_FLAG_CUSTOM, .off = OFF(slowdown_arg), .metavar = "RANK=FACTOR",
	 .parse = parse_slowdown,
	 .help = "rank RANK runs FACTOR times slower (0.01..1000): its TTFT and token intervals, or its decode "
		 "steps; repeatable"},
	{.name = "--enable-lora", .type = IG_FLAG_SWITCH, .off = OFF(enable_lora),
	 .help = "serve LoRA adapters (--lora-modules / --lora-paths, and loaded at run time)"},
	{.name = "--max-loras", .type = IG_FLAG_LONG, .off = OFF(vllm_max_loras), .min = 1, .max = 1024,
	 .metavar = "N",
	 .help = "vllm: distinct adapters in a batch (and GPU slots); a request for another waits (default 1)"},
	{.name = "--max-cpu-loras", .type = IG_FLAG_LONG, .off = OFF(vllm_max_cpu_loras), .min = 1, .max = 100000,
	 .metavar = "N",
	 .help = "vllm: adapters in the CPU cache, at least --max-loras; checked, not modelled (an adapter out "
		 "of it costs what one out of the GPU slots does)"},
	{.name = "--lora-modules", .type = IG_FLAG_CUSTOM, .off = OFF(lora_names), .metavar = "NAME=PATH",
	 .parse = parse_lora, .help = "vllm: adapters served from the start; several values may follow the flag"},
	{.name = "--lora-paths", .type = IG_FLAG_CUSTOM, .off = OFF(lora_paths), .metavar = "NAME=PATH",
	 .parse = parse_lora,
	 .help = "sglang: adapters served from the start (a bare PATH is its own name); several values may follow "
		 "the flag; implies --enable-lora"},
	{.name = "--max-loras-per-batch", .type = IG_FLAG_LONG, .off = OFF(sglang_max_per_batch), .min = 1,
	 .max = 1024, .metavar = "N",
	 .help = "sglang: distinct adapters in a batch, the base model counted (default 8)"},
	{.name = "--max-loaded-loras", .type = IG_FLAG_LONG, .off = OFF(sglang_max_loaded), .min = 1, .max = 100000,
	 .metavar = "N", .help = "sglang: adapters loaded at once; a load beyond is refused (default: no limit)"},
	{.name = "--allow-runtime-lora-updating", .type = IG_FLAG_SWITCH, .off = OFF(lora_runtime),
	 .help = "vllm: POST /v1/load_lora_adapter and /v1/unload_lora_adapter allowed (vLLM's "
		 "VLLM_ALLOW_RUNTIME_LORA_UPDATING=1); sglang always has /load_lora_adapter"},
	{.name = "--lora-load-ms", .type = IG_FLAG_LONG, .off = OFF(lora_load_ms), .min = 0, .max = 600000,
	 .def = "0", .metavar = "N",
	 .help = "an adapter's load into a rank's GPU slot, ms of simulated time, paid by the request that needs "
		 "it"},
};

static const struct ig_flags spec = {
	.prog = "infergate-sim",
	.usage = "Usage: infergate-sim [FLAGS]\n"
		 "A simulated SGLang or vLLM inference server: OpenAI chat and text completions,\n"
		 "streamed or not, with deterministic text, batch slots, pacing and fault injection.\n\n"
		 "Flags:\n",
	.epilog = "\nEndpoints: POST /v1/chat/completions, POST /v1/completions, POST /v1/responses,\n"
		  "GET /v1/responses/{id}, POST /v1/responses/{id}/cancel, POST /v1/embeddings,\n"
		  "POST /v1/rerank, POST /v1/score, POST /classify, POST /tokenize, POST /detokenize,\n"
		  "GET /health, GET /v1/models, GET /metrics; sglang only: POST /generate,\n"
		  "GET /health_generate, GET /v1/loads, GET /get_load, GET /get_model_info, GET /server_info (and\n"
		  "  /get_server_info), GET|POST /flush_cache, POST /load_lora_adapter, /unload_lora_adapter;\n"
		  "vllm only: POST /pooling, /rerank, /v2/rerank, /score, and with\n"
		  "--allow-runtime-lora-updating POST /v1/load_lora_adapter, /v1/unload_lora_adapter.\n"
		  "Test control (never needs the key):\n"
		  "GET /sim/state, GET|POST /sim/fault ({\"mode\": \"ok\"|\"error\"|\"hang\"|\"slow\"|\"down\", \"max_running\": N};\n"
		  "with \"probes\": N the mode lasts N /health answers, then the one before comes back),\n"
		  "GET|POST /sim/hold ({\"after_tokens\": N}: every generation stops after N tokens,\n"
		  "streams having sent them, until the next POST; null: none stop; classic profile).\n",
	.flags = flags,
	.n = sizeof(flags) / sizeof(flags[0]),
	.unknown = "unknown flag '%s'",
	.missing = "%s: missing value (expected %s)",
	.positional = "unexpected argument '%s' (flags start with --)",
};

/* The profiles' knobs. Where the numbers come from: docs/simulator.md,
 * engine profiles. */
static const struct sim_steps profiles[] = {
	[SIM_PROFILE_H100_8B] = {.step_ms = 6.2, .per_request_us = 30, .per_context_ns = 40, .tokens_per_step = 1,
				 .prefill_tps = 60000, .chunk = 8192, .kv_tokens = 420000, .output_reserve = 128},
	[SIM_PROFILE_B200_27B] = {.step_ms = 9.5, .per_request_us = 40, .per_context_ns = 35, .tokens_per_step = 2.4,
				  .prefill_tps = 40000, .chunk = 8192, .kv_tokens = 236000, .output_reserve = 128},
};
static const long profile_max_running[] = {256, 512, 256};

/* --tokenizer: the tokenizer, and the chat template beside it when its
 * tokenizer_config.json has one (as the gateway finds it: prompt.c).
 * Returns 0, or -1 with *err naming the flag and the file. */
static int load_tokenizer(struct sim_conf *c, char **err)
{
	char why[512] = "";
	if (!(c->tok = ig_tokenizer_load(c->tokenizer, why, sizeof(why)))) {
		*err = ig_strdupf("--tokenizer: '%s': %s", c->tokenizer, why);
		return -1;
	}
	char *cfg = ig_chattmpl_beside(c->tokenizer);
	if (cfg && !(c->tmpl = ig_chattmpl_load(cfg, why, sizeof(why)))) {
		*err = ig_strdupf("--tokenizer: '%s': %s", cfg, why);
		free(cfg);
		return -1;
	}
	free(cfg);
	return 0;
}

/* Fills the knobs not given from the profile; a step knob with classic is
 * a mistake (it would do nothing). Returns 0 or -1 with *err. */
static int apply_profile(struct sim_conf *c, char **err)
{
	double *given[] = {&c->steps.step_ms, &c->steps.per_request_us, &c->steps.per_context_ns,
			   &c->steps.tokens_per_step, &c->steps.prefill_tps};
	long *given_l[] = {&c->steps.chunk, &c->steps.kv_tokens, &c->steps.output_reserve};
	static const char *const names[] = {"--step-ms", "--step-per-request-us", "--step-per-context-ns",
					    "--tokens-per-step", "--prefill-tokens-per-second", "--chunked-prefill",
					    "--kv-tokens", "--output-reserve"};
	if (c->max_running < 0)
		c->max_running = profile_max_running[c->profile];
	if (c->profile == SIM_PROFILE_CLASSIC) {
		for (size_t i = 0; i < 8; i++) {
			if (i < 5 ? *given[i] >= 0 : *given_l[i - 5] >= 0) {
				*err = ig_strdupf("%s: the classic profile has no decode steps; choose --profile h100-8b or "
						  "b200-27b-mtp", names[i]);
				return -1;
			}
		}
		if (c->time_scale != 1) {
			*err = ig_strdupf("--time-scale: the classic profile paces with --tokens-per-second; choose a step "
					  "profile");
			return -1;
		}
		memset(&c->steps, 0, sizeof(c->steps));
		return 0;
	}
	const struct sim_steps *p = &profiles[c->profile];
	const double pd[] = {p->step_ms, p->per_request_us, p->per_context_ns, p->tokens_per_step, p->prefill_tps};
	const long pl[] = {p->chunk, p->kv_tokens, p->output_reserve};
	for (size_t i = 0; i < 5; i++)
		if (*given[i] < 0)
			*given[i] = pd[i];
	for (size_t i = 0; i < 3; i++)
		if (*given_l[i] < 0)
			*given_l[i] = pl[i];
	return 0;
}

/* --kv-transfer-config, checked as vLLM's KVTransferConfig checks the
 * fields used here (vllm/config/kv_transfer.py: kv_role one of its three
 * roles, required with kv_connector; kv_load_failure_policy "recompute" or
 * "fail", default "fail"; unknown fields refused). Only NixlConnector is
 * modelled. Returns 0 or -1 with *err. */
static int check_kv_transfer_config(struct sim_conf *c, char **err)
{
	static const char *const known[] = {"kv_connector", "engine_id", "kv_buffer_device", "kv_buffer_size",
					    "kv_role", "kv_rank", "kv_parallel_size", "kv_ip", "kv_port",
					    "kv_connector_extra_config", "kv_connector_module_path",
					    "enable_permute_local_kv", "kv_load_failure_policy"};
	json_t *j = json_loads(c->kv_transfer_config, 0, NULL), *v;
	const char *key, *why = NULL;
	if (!json_is_object(j)) {
		*err = ig_strdupf("--kv-transfer-config: '%s' is not a JSON object", c->kv_transfer_config);
		json_decref(j);
		return -1;
	}
	json_object_foreach(j, key, v) {
		size_t i = 0;
		while (i < sizeof(known) / sizeof(known[0]) && strcmp(key, known[i]) != 0)
			i++;
		if (i == sizeof(known) / sizeof(known[0])) {
			*err = ig_strdupf("--kv-transfer-config: unknown field '%s'", key);
			json_decref(j);
			return -1;
		}
	}
	const char *conn = json_string_value(json_object_get(j, "kv_connector"));
	const char *role = json_string_value(json_object_get(j, "kv_role"));
	json_t *pol = json_object_get(j, "kv_load_failure_policy"), *eid = json_object_get(j, "engine_id");
	if (!conn || strcmp(conn, "NixlConnector") != 0)
		why = "kv_connector must be \"NixlConnector\" (the one infergate-sim models)";
	else if (!role)
		why = "Please specify kv_role when kv_connector is set, supported roles are kv_producer, kv_consumer, "
		      "kv_both";
	else if (strcmp(role, "kv_producer") != 0 && strcmp(role, "kv_consumer") != 0 && strcmp(role, "kv_both") != 0)
		why = "kv_role must be one of kv_producer, kv_consumer, kv_both";
	else if (pol && !json_is_null(pol) && (!json_is_string(pol) || (strcmp(json_string_value(pol), "fail") != 0 &&
								       strcmp(json_string_value(pol), "recompute") != 0)))
		why = "kv_load_failure_policy must be \"recompute\" or \"fail\"";
	else if (eid && !json_is_null(eid) && (!json_is_string(eid) || json_string_length(eid) == 0 ||
					       json_string_length(eid) > 128))
		why = "engine_id must be a string of 1..128 bytes";
	if (why) {
		*err = ig_strdupf("--kv-transfer-config: %s", why);
		json_decref(j);
		return -1;
	}
	c->kv_recompute = json_is_string(pol) && strcmp(json_string_value(pol), "recompute") == 0;
	if (json_is_string(eid)) {
		c->engine_id = strdup(json_string_value(eid));
	} else { /* KVTransferConfig.__post_init__: str(uuid.uuid4()) */
		char h[33];
		ig_random_hex(h, 32);
		c->engine_id = ig_strdupf("%.8s-%.4s-4%.3s-a%.3s-%.12s", h, h + 8, h + 12, h + 15, h + 18);
	}
	json_decref(j);
	return 0;
}

/* The disaggregation flags of one flavor need that flavor; the fault needs
 * a side that hands KV over. Returns 0 or -1 with *err. */
static int check_pd(struct sim_conf *c, char **err)
{
	if (c->flavor == SIM_FLAVOR_VLLM && c->pd_mode != SIM_PD_MODE_NULL) {
		*err = ig_strdupf("--disaggregation-mode: needs --flavor sglang (vLLM: --kv-transfer-config)");
		return -1;
	}
	if (c->flavor == SIM_FLAVOR_SGLANG && c->kv_transfer_config) {
		*err = ig_strdupf("--kv-transfer-config: needs --flavor vllm (SGLang: --disaggregation-mode)");
		return -1;
	}
	if (c->kv_transfer_config && check_kv_transfer_config(c, err) < 0)
		return -1;
	if (c->pd_fail && c->pd_mode != SIM_PD_MODE_PREFILL && !c->kv_transfer_config) {
		*err = ig_strdupf("--disaggregation-fail-transfer: needs --disaggregation-mode prefill or "
				  "--kv-transfer-config");
		return -1;
	}
	return 0;
}

/* --dp-rank-slowdown's values, now that --dp-ranks is known. */
static int resolve_slowdown(struct sim_conf *c, char **err)
{
	if (!c->slowdown_arg)
		return 0;
	c->rank_slowdown = malloc((size_t)c->dp_ranks * sizeof(*c->rank_slowdown));
	if (!c->rank_slowdown)
		return -1;
	for (long i = 0; i < c->dp_ranks; i++)
		c->rank_slowdown[i] = 1;
	char *save = NULL;
	for (char *v = strtok_r(c->slowdown_arg, ";", &save); v; v = strtok_r(NULL, ";", &save)) {
		char *end, *eq = strchr(v, '=');
		long rank = strtol(v, &end, 10);
		double f = strtod(eq + 1, &end);
		if (eq == v || rank < 0 || rank >= c->dp_ranks || *end || !(f >= 0.01 && f <= 1000)) {
			*err = ig_strdupf("--dp-rank-slowdown: '%s' is not RANK=FACTOR with RANK 0..%ld and FACTOR 0.01..1000",
					  v, c->dp_ranks - 1);
			return -1;
		}
		c->rank_slowdown[rank] = f;
	}
	return 0;
}

/* The LoRA flags of one flavor need it, and need --enable-lora; the
 * limits take the flavor's defaults (vLLM's LoRAConfig: max_loras 1,
 * max_cpu_loras = max_loras, vllm/config/lora.py; SGLang's ServerArgs:
 * max_loras_per_batch 8, max_loaded_loras None, python/sglang/srt/server_args.py). */
static int check_lora(struct sim_conf *c, char **err)
{
	bool vllm = c->flavor == SIM_FLAVOR_VLLM;
	const char *other = NULL;
	if (vllm && (c->sglang_max_per_batch >= 0 || c->sglang_max_loaded >= 0))
		other = c->sglang_max_per_batch >= 0 ? "--max-loras-per-batch" : "--max-loaded-loras";
	else if (!vllm && (c->vllm_max_loras >= 0 || c->vllm_max_cpu_loras >= 0 || c->lora_runtime))
		other = c->vllm_max_loras >= 0 ? "--max-loras" : c->vllm_max_cpu_loras >= 0 ? "--max-cpu-loras"
										: "--allow-runtime-lora-updating";
	if (other) {
		*err = ig_strdupf("%s: needs --flavor %s", other, vllm ? "sglang" : "vllm");
		return -1;
	}
	if (c->nloras && c->lora_from_modules != vllm) {
		*err = ig_strdupf("%s: needs --flavor %s", vllm ? "--lora-paths" : "--lora-modules", vllm ? "sglang" : "vllm");
		return -1;
	}
	if (!vllm && c->nloras)
		c->enable_lora = true; /* SGLang's ServerArgs turns it on for --lora-paths */
	if (!c->enable_lora && (c->nloras || c->vllm_max_loras >= 0 || c->vllm_max_cpu_loras >= 0 ||
				c->sglang_max_per_batch >= 0 || c->sglang_max_loaded >= 0 || c->lora_runtime)) {
		*err = ig_strdupf("%s: needs --enable-lora", c->nloras ? "--lora-modules" : "a LoRA limit");
		return -1;
	}
	c->max_loras = vllm ? (c->vllm_max_loras >= 0 ? c->vllm_max_loras : 1)
			    : (c->sglang_max_per_batch >= 0 ? c->sglang_max_per_batch : 8);
	/* vLLM's CPU cache evicts (an adapter evicted is read from its path
	 * again); it never refuses one: max_cpu_loras limits no registration,
	 * and it is checked as LoRAConfig checks it (vllm/config/lora.py). */
	if (vllm && c->vllm_max_cpu_loras >= 0 && c->vllm_max_cpu_loras < c->max_loras) {
		*err = ig_strdupf("--max-cpu-loras: max_cpu_loras (%ld) must be >= max_loras (%ld)", c->vllm_max_cpu_loras,
				  c->max_loras);
		return -1;
	}
	c->max_loaded_loras = vllm || c->sglang_max_loaded < 0 ? 0 : c->sglang_max_loaded;
	if (c->max_loaded_loras > 0 && (long)c->nloras > c->max_loaded_loras) {
		*err = ig_strdupf("%s: %zu adapters, more than %s %ld", vllm ? "--lora-modules" : "--lora-paths", c->nloras,
				  vllm ? "--max-cpu-loras" : "--max-loaded-loras", c->max_loaded_loras);
		return -1;
	}
	for (size_t i = 0; i < c->nloras; i++)
		for (size_t j = 0; j < i; j++)
			if (strcmp(c->lora_names[i], c->lora_names[j]) == 0) {
				*err = ig_strdupf("%s: the adapter name '%s' is given twice",
						  vllm ? "--lora-modules" : "--lora-paths", c->lora_names[i]);
				return -1;
			}
	return 0;
}

void sim_conf_print_help(FILE *out)
{
	ig_flags_print_help(&spec, out);
}

int sim_conf_from_args(struct sim_conf *c, int argc, char **argv, char **err)
{
	struct ig_buf errs;

	memset(c, 0, sizeof(*c));
	if (ig_flags_defaults(&spec, c, err) < 0)
		return -1; /* a bad default is a bug; say so anyway */
	ig_buf_init(&errs);
	/* Knobs without a default take the profile's unless given. */
	c->max_running = -1;
	c->steps = (struct sim_steps){-1, -1, -1, -1, -1, -1, -1, -1};
	c->vllm_max_loras = c->vllm_max_cpu_loras = c->sglang_max_per_batch = c->sglang_max_loaded = -1;
	int xargc;
	char **xargv = sim_lora_expand_argv(argc, argv, &xargc);
	if (!xargv)
		return -1;
	int rc = ig_flags_parse(&spec, c, xargc, xargv, NULL, &errs);
	free(xargv);
	if (rc < 0) {
		*err = ig_flags_errors(&errs);
		return -1;
	}
	ig_buf_free(&errs);
	if (rc > 0)
		return 1;
	if (apply_profile(c, err) < 0)
		return -1;
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
	if ((c->kv_events_replay || c->kv_events_format != SIM_KV_FORMAT_VLLM) && !c->kv_events) {
		*err = ig_strdupf("%s: needs --kv-events", c->kv_events_replay ? "--kv-events-replay" : "--kv-events-format");
		return -1;
	}
	if (c->kv_events && c->profile == SIM_PROFILE_CLASSIC) {
		*err = ig_strdupf("--kv-events: the classic profile has no prefix cache; choose --profile h100-8b or "
				  "b200-27b-mtp");
		return -1;
	}
	/* The endpoints of every rank are checked now (binding comes at start). */
	const char *eps[] = {c->kv_events, c->kv_events_replay};
	for (int i = 0; i < 2; i++) {
		char ep[256];
		if (eps[i] && ((strncmp(eps[i], "tcp://", 6) != 0 && strncmp(eps[i], "inproc://", 9) != 0) ||
			       ig_kvpub_offset_endpoint(eps[i], (int)c->dp_ranks - 1, ep, sizeof(ep)) < 0)) {
			*err = ig_strdupf("%s: '%s' is not tcp://HOST:PORT or inproc://NAME%s", i ? "--kv-events-replay" : "--kv-events",
					  eps[i], c->dp_ranks > 1 ? " with a port for each --dp-ranks" : "");
			return -1;
		}
	}
	if (c->tokenizer && load_tokenizer(c, err) < 0)
		return -1;
	if (check_pd(c, err) < 0)
		return -1;
	if (!c->priority_scheduling && (c->low_first || c->no_preemption)) {
		*err = ig_strdupf("%s: needs --enable-priority-scheduling",
				  c->low_first ? "--schedule-low-priority-values-first" : "--disable-priority-preemption");
		return -1;
	}
	if (resolve_slowdown(c, err) < 0 || check_lora(c, err) < 0)
		return -1;
	return 0;
}

void sim_conf_free(struct sim_conf *c)
{
	ig_tokenizer_free(c->tok);
	ig_chattmpl_free(c->tmpl);
	ig_flags_free(&spec, c);
	free(c->listen);
	free(c->listen_host);
	free(c->engine_id);
	free(c->slowdown_arg);
	free(c->rank_slowdown);
	for (size_t i = 0; i < c->nloras; i++) {
		free(c->lora_names[i]);
		free(c->lora_paths[i]);
	}
	free(c->lora_names);
	free(c->lora_paths);
	memset(c, 0, sizeof(*c));
}
