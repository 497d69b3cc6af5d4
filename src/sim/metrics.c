/* What the simulator reports about itself, as the servers it imitates do:
 * the Prometheus text of /metrics (SGLang's or vLLM's series, then the
 * simulator's own), the load reports of /v1/loads and /get_load (SGLang),
 * and /sim/state, its live counts for tests. Each builds a body from the
 * engine's counters and returns it; the HTTP side (server.c) answers with
 * it. Not here: the counting itself (engine.c), any answer to a request. */
#include "config.h"
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/buf.h"
#include "infergate/kvpub.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "metrics.h"

static char *dump(json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
	json_decref(j);
	if (!s)
		abort();
	return s;
}

/* Token capacity of one rank's KV cache, for /v1/loads: a fixed number,
 * as SGLang's max_total_num_tokens is fixed at startup. */
#define SIM_KV_TOKENS 1048576

static const char *const flavor_names[] = {"sglang", "vllm"};

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double round_to(double v, double unit)
{
	return round(v / unit) * unit;
}

/* A rank's KV budget: the step profile's, else a large nominal one. */
static long kv_total(const struct sim *s, const struct sim_rank *rk)
{
	return sim_conf_steps(s->conf) ? rk->kv.total : SIM_KV_TOKENS;
}

/* Prompt tokens found cached over those served (0 with classic). */
static double hit_rate(const struct sim_rank *rk)
{
	return rk->prompt_tokens ? (double)rk->cached_tokens / (double)rk->prompt_tokens : 0;
}

/* One rank's entry of /v1/loads, GetLoadsReqOutput's core fields (after
 * sgl-project/sglang python/sglang/srt/managers/io_struct.py and
 * python/sglang/srt/observability/scheduler_metrics_mixin.py get_loads).
 * num_total_tokens is taken as the tokens the rank holds plus those its
 * queue brings, so /get_load's num_pending_tokens (total - used) is the
 * queue's tokens: our reading, not confirmed in SGLang's source. */
static json_t *rank_load(struct sim *s, const struct sim_rank *rk, uint64_t now, double ts)
{
	long used, pending;
	double tps;
	sim_engine_rank_tokens(&s->eng, rk, now, &used, &pending, &tps);
	return json_pack("{s:i, s:f, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f, s:I}",
			 "dp_rank", rk->idx, "timestamp", ts,
			 "num_running_reqs", (json_int_t)rk->running,
			 "num_waiting_reqs", (json_int_t)rk->waiting,
			 "num_used_tokens", (json_int_t)used,
			 "num_total_tokens", (json_int_t)(used + pending),
			 "max_total_num_tokens", (json_int_t)kv_total(s, rk),
			 "token_usage", round_to((double)used / (double)kv_total(s, rk), 1e-4),
			 "gen_throughput", round_to(tps, 1e-2),
			 "cache_hit_rate", round_to(hit_rate(rk), 1e-4),
			 "utilization", round_to((double)rk->running / (double)s->conf->max_running, 1e-4),
			 "max_running_requests", (json_int_t)s->conf->max_running);
}

/* The ranks a ?dp_rank=K query selects (q: K, or NULL): [*lo, *hi).
 * Returns 0, or -1 when K is not an integer (FastAPI's validation: 400). */
static int rank_range(const struct sim *s, const char *q, long *lo, long *hi)
{
	*lo = 0;
	*hi = s->eng.nranks;
	if (!q)
		return 0;
	char *end;
	errno = 0;
	long k = strtol(q, &end, 10);
	if (*q == '\0' || *end != '\0' || errno != 0)
		return -1;
	/* A rank that does not exist matches nothing: an empty list. */
	*lo = k >= 0 && k < s->eng.nranks ? k : 0;
	*hi = k >= 0 && k < s->eng.nranks ? k + 1 : 0;
	return 0;
}

/* GET /v1/loads (after sgl-project/sglang
 * python/sglang/srt/entrypoints/v1_loads.py get_loads): the
 * include/format parameters are not modelled. */
char *sim_metrics_loads(struct sim *s, const char *dp_rank)
{
	long lo, hi;
	if (rank_range(s, dp_rank, &lo, &hi) < 0)
		return NULL;
	double ts = wall_now();
	time_t secs = (time_t)ts;
	struct tm tm;
	char iso[64];
	gmtime_r(&secs, &tm);
	size_t n = strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%S", &tm);
	/* datetime.now(timezone.utc).isoformat() */
	snprintf(iso + n, sizeof(iso) - n, ".%06ld+00:00", (long)((ts - (double)secs) * 1e6) % 1000000);
	json_t *loads = json_array();
	uint64_t now = ig_now_us();
	for (long i = lo; i < hi; i++)
		json_array_append_new(loads, rank_load(s, &s->eng.ranks[i], now, ts));
	return dump(json_pack("{s:s, s:s, s:s, s:i, s:o}", "timestamp", iso, "version", PACKAGE_VERSION,
			      "accelerator", "sim", "num_accelerators", 1, "loads", loads));
}

/* GET /get_load, deprecated in SGLang for /v1/loads but still answered:
 * one object per rank (after sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py get_load). SGLang warns on
 * every call; once is enough here. */
char *sim_metrics_get_load(struct sim *s)
{
	if (!s->load_warned) {
		ig_log_warn("Endpoint '/get_load' is deprecated and will be removed in a future version. "
			    "Please use '/v1/loads' instead.");
		s->load_warned = true;
	}
	json_t *arr = json_array();
	uint64_t now = ig_now_us();
	double ts = wall_now();
	for (long i = 0; i < s->eng.nranks; i++) {
		const struct sim_rank *rk = &s->eng.ranks[i];
		long used, pending;
		double tps;
		sim_engine_rank_tokens(&s->eng, rk, now, &used, &pending, &tps);
		json_t *e = json_pack("{s:i, s:I, s:I, s:I, s:I, s:f}", "dp_rank", rk->idx,
				      "num_reqs", (json_int_t)(rk->running + rk->waiting),
				      "num_waiting_reqs", (json_int_t)rk->waiting,
				      "num_tokens", (json_int_t)(used + pending),
				      "num_pending_tokens", (json_int_t)pending,
				      "ts_tic", ts);
		if (sim_conf_steps(s->conf)) /* the KV figures, step profiles only */
			json_object_update_new(e, json_pack("{s:I, s:I, s:f, s:f}", "num_used_tokens", (json_int_t)used,
							    "max_total_num_tokens", (json_int_t)rk->kv.total,
							    "token_usage", round_to((double)used / (double)rk->kv.total, 1e-4),
							    "cache_hit_rate", round_to(hit_rate(rk), 1e-4)));
		json_array_append_new(arr, e);
	}
	return dump(arr);
}

/* GET /server_info (and its older name /get_server_info): SGLang answers
 * every field of its ServerArgs at the top level, then the scheduler's
 * info and the version (after sgl-project/sglang
 * python/sglang/srt/entrypoints/http_server.py get_server_info:
 * {**dataclasses.asdict(server_args), **scheduler_info, "version", ...});
 * here the fields the simulator has, with SGLang's names and defaults. */
char *sim_metrics_server_info(struct sim *s)
{
	const struct sim_conf *c = s->conf;
	json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:s, s:b, s:b, s:b, s:I, s:n, s:b, s:s}",
			      "model_path", c->model, "served_model_name", c->model,
			      "max_running_requests", (json_int_t)c->max_running,
			      "dp_size", (json_int_t)c->dp_ranks, "schedule_policy", "fcfs",
			      "enable_priority_scheduling", c->priority_scheduling,
			      "disable_priority_preemption", c->no_preemption,
			      "schedule_low_priority_values_first", c->low_first,
			      "priority_scheduling_preemption_threshold", (json_int_t)c->preempt_threshold,
			      "default_priority_value", "abort_on_priority_when_disabled", 0,
			      "version", PACKAGE_VERSION);
	if (c->context_length > 0)
		json_object_set_new(o, "context_length", json_integer((json_int_t)c->context_length));
	if (c->flavor == SIM_FLAVOR_SGLANG) { /* its LoRA settings, with ServerArgs' names */
		json_object_set_new(o, "enable_lora", json_boolean(c->enable_lora));
		json_object_set_new(o, "max_loras_per_batch", json_integer((json_int_t)c->max_loras));
		json_object_set_new(o, "max_loaded_loras",
				    c->max_loaded_loras > 0 ? json_integer((json_int_t)c->max_loaded_loras) : json_null());
	}
	if (sim_conf_steps(c))
		json_object_set_new(o, "max_total_num_tokens", json_integer((json_int_t)c->steps.kv_tokens));
	return dump(o);
}

/* GET /sim/state: what tests and people want to know, always live. */
char *sim_metrics_state(struct sim *s)
{
	json_t *ranks = json_array();
	for (long i = 0; i < s->eng.nranks; i++) {
		json_t *r = json_pack("{s:I, s:I, s:I, s:f}", "num_running_reqs", (json_int_t)s->eng.ranks[i].running,
				      "num_waiting_reqs", (json_int_t)s->eng.ranks[i].waiting, "requests_served",
				      (json_int_t)s->eng.ranks[i].served, "slowdown", s->eng.ranks[i].slowdown);
		/* --enable-lora: the adapters running there, by name */
		json_t *lr = json_object();
		for (size_t k = 0; s->eng.lora && k < s->eng.loras.n; k++)
			if (s->eng.loras.a[k].running[i] > 0)
				json_object_set_new(lr, s->eng.loras.a[k].name,
						    json_integer((json_int_t)s->eng.loras.a[k].running[i]));
		if (s->eng.lora)
			json_object_set_new(r, "lora_running", lr);
		else
			json_decref(lr);
		/* --kv-events: subscriptions heard, so that a test publishes
		 * only once its subscriber is there (PUB/SUB's slow joiner) */
		if (s->eng.ranks[i].kvpub)
			json_object_set_new(r, "kv_event_subscribers",
					    json_integer(ig_kvpub_subscribers(s->eng.ranks[i].kvpub)));
		json_array_append_new(ranks, r);
	}
	json_t *tps = json_array(); /* the last 16 traceparents received, oldest first */
	size_t n = s->ntraceparents < 16 ? s->ntraceparents : 16;
	for (size_t i = s->ntraceparents - n; i < s->ntraceparents; i++)
		json_array_append_new(tps, json_string(s->traceparents[i % 16]));
	json_t *st = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:o, s:o}",
			      "requests_received", (json_int_t)s->eng.st.received,
			      "requests_preempted", (json_int_t)s->eng.st.preempted,
			      "num_running_reqs", (json_int_t)s->eng.running,
			      "num_waiting_reqs", (json_int_t)s->eng.waiting,
			      "num_hung_reqs", (json_int_t)s->eng.hung,
			      "max_running_requests", (json_int_t)s->conf->max_running,
			      "fault", sim_engine_fault_name(s->eng.fault),
			      "flavor", flavor_names[s->conf->flavor],
			      "ranks", ranks, "traceparents", tps);
	if (s->eng.lora)
		json_object_set_new(st, "lora_loads", json_integer((json_int_t)s->eng.lora_loads));
	if (s->pd) /* prefill/decode disaggregation: the hand-overs (pd.c) */
		json_object_set_new(st, "pd", json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "transfers_sent",
							(json_int_t)s->pd_st.sent, "transfers_received",
							(json_int_t)s->pd_st.received, "transfers_failed",
							(json_int_t)s->pd_st.failed, "bytes_sent",
							(json_int_t)s->pd_st.bytes_sent, "bytes_received",
							(json_int_t)s->pd_st.bytes_received, "rooms_held",
							(json_int_t)s->pd_st.held, "decodes_asking",
							(json_int_t)s->pd_st.asking));
	return dump(st);
}

static void metric(struct ig_buf *o, const char *name, const char *type, const char *help,
		   const char *model, uint64_t value)
{
	ig_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s{model_name=\"", name, help, name, type, name);
	ig_buf_prom_label(o, model);
	ig_buf_printf(o, "\"} %llu\n", (unsigned long long)value);
}

static void help_type(struct ig_buf *o, const char *name, const char *type, const char *help)
{
	ig_buf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* SGLang's label set, sorted by name as prometheus_client prints it:
 * dp_rank only with more than one rank, priority only with
 * --enable-priority-scheduling ("" for totals). After sgl-project/sglang
 * python/sglang/srt/observability/scheduler_metrics_mixin.py init_metrics. */
static void sglang_sample(struct ig_buf *o, struct sim *s, const char *name, const struct sim_rank *rk,
			  const char *priority, double value)
{
	ig_buf_printf(o, "%s{", name);
	if (s->eng.nranks > 1)
		ig_buf_printf(o, "dp_rank=\"%d\",", rk->idx);
	ig_buf_printf(o, "engine_type=\"unified\",model_name=\"");
	ig_buf_prom_label(o, s->conf->model);
	ig_buf_printf(o, "\",moe_ep_rank=\"0\",pp_rank=\"0\",");
	if (s->conf->priority_scheduling)
		ig_buf_printf(o, "priority=\"%s\",", priority);
	/* prometheus_client prints floats: 4.0, 0.8125 */
	if (value == floor(value) && fabs(value) < 1e15)
		ig_buf_printf(o, "tp_rank=\"0\"} %.1f\n", value);
	else
		ig_buf_printf(o, "tp_rank=\"0\"} %.6g\n", value);
}

/* One SGLang gauge over the ranks: the total under priority="", then one
 * series per priority the rank has seen (after sgl-project/sglang
 * python/sglang/srt/observability/metrics_collector.py _log_gauge_queue_count). */
static void sglang_gauge(struct ig_buf *o, struct sim *s, const char *name, const char *help, bool running)
{
	help_type(o, name, "gauge", help);
	for (long i = 0; i < s->eng.nranks; i++) {
		const struct sim_gauges *g = &s->eng.ranks[i].snap;
		sglang_sample(o, s, name, &s->eng.ranks[i], "", (double)(running ? g->running : g->waiting));
		for (size_t k = 0; k < g->nprio; k++) {
			char prio[24];
			snprintf(prio, sizeof(prio), "%ld", g->prio[k].priority);
			sglang_sample(o, s, name, &s->eng.ranks[i], prio,
				      (uint64_t)(running ? g->prio[k].running : g->prio[k].waiting));
		}
	}
}

enum rank_counter {
	C_PROMPT,     /* prompt tokens of served requests */
	C_GENERATION, /* tokens produced */
	C_REQUESTS,   /* served requests */
};

static uint64_t rank_counter(const struct sim_rank *rk, enum rank_counter c)
{
	switch (c) {
	case C_PROMPT:     return rk->prompt_tokens;
	case C_GENERATION: return rk->generation_tokens;
	default:           return rk->finished_stop + rk->finished_length;
	}
}

static void sglang_counter(struct ig_buf *o, struct sim *s, const char *name, const char *help,
			   enum rank_counter c)
{
	help_type(o, name, "counter", help);
	for (long i = 0; i < s->eng.nranks; i++)
		sglang_sample(o, s, name, &s->eng.ranks[i], "", (double)rank_counter(&s->eng.ranks[i], c));
}

static void sglang_metrics(struct ig_buf *o, struct sim *s)
{
	for (long i = 0; i < s->eng.nranks; i++)
		sim_engine_gauges(&s->eng, &s->eng.ranks[i]); /* live: read now; sglang: the last log */
	sglang_gauge(o, s, "sglang:num_running_reqs", "The number of running requests.", true);
	sglang_gauge(o, s, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", false);
	sglang_counter(o, s, "sglang:prompt_tokens_total", "Number of prefill tokens processed.", C_PROMPT);
	sglang_counter(o, s, "sglang:generation_tokens_total", "Number of generation tokens processed.",
		       C_GENERATION);
	sglang_counter(o, s, "sglang:num_requests_total", "Number of requests processed.", C_REQUESTS);
	/* SGLang's scheduler gauges of memory, cache and speed (after
	 * sgl-project/sglang python/sglang/srt/observability/metrics_collector.py
	 * SchedulerMetricsCollector: token_usage, cache_hit_rate, gen_throughput). */
	static const char *const fg[][2] = {{"sglang:token_usage", "The token usage."},
					    {"sglang:cache_hit_rate", "The prefix cache hit rate."},
					    {"sglang:gen_throughput", "The generation throughput (token/s)."}};
	uint64_t now = ig_now_us();
	for (int k = 0; k < 3; k++) {
		help_type(o, fg[k][0], "gauge", fg[k][1]);
		for (long i = 0; i < s->eng.nranks; i++) {
			const struct sim_rank *rk = &s->eng.ranks[i];
			long used, pending;
			double tps;
			sim_engine_rank_tokens(&s->eng, rk, now, &used, &pending, &tps);
			double v = k == 0 ? round_to((double)used / (double)kv_total(s, rk), 1e-4)
				 : k == 1 ? round_to(hit_rate(rk), 1e-4) : round_to(tps, 1e-2);
			sglang_sample(o, s, fg[k][0], rk, "", v);
		}
	}
}

/* vLLM labels each series with model_name and engine (the DP rank), always
 * live: the engine refreshes them every step (after vllm-project/vllm
 * vllm/v1/metrics/loggers.py PrometheusStatLogger). */
static void vllm_sample(struct ig_buf *o, struct sim *s, const char *name, long engine, const char *extra,
			uint64_t value)
{
	ig_buf_printf(o, "%s{engine=\"%ld\",%smodel_name=\"", name, engine, extra);
	ig_buf_prom_label(o, s->conf->model);
	ig_buf_printf(o, "\"} %llu.0\n", (unsigned long long)value);
}

static void vllm_metrics(struct ig_buf *o, struct sim *s)
{
	help_type(o, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
	for (long i = 0; i < s->eng.nranks; i++)
		vllm_sample(o, s, "vllm:num_requests_running", i, "", (uint64_t)s->eng.ranks[i].running);
	help_type(o, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
	for (long i = 0; i < s->eng.nranks; i++)
		vllm_sample(o, s, "vllm:num_requests_waiting", i, "", (uint64_t)s->eng.ranks[i].waiting);
	help_type(o, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
	for (long i = 0; i < s->eng.nranks; i++)
		vllm_sample(o, s, "vllm:prompt_tokens_total", i, "", s->eng.ranks[i].prompt_tokens);
	help_type(o, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
	for (long i = 0; i < s->eng.nranks; i++)
		vllm_sample(o, s, "vllm:generation_tokens_total", i, "", s->eng.ranks[i].generation_tokens);
	help_type(o, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
	for (long i = 0; i < s->eng.nranks; i++) {
		vllm_sample(o, s, "vllm:request_success_total", i, "finished_reason=\"length\",",
			    s->eng.ranks[i].finished_length);
		vllm_sample(o, s, "vllm:request_success_total", i, "finished_reason=\"stop\",",
			    s->eng.ranks[i].finished_stop);
	}
	if (s->eng.lora) { /* the waiting requests per adapter, over the ranks */
		long *waiting = calloc(s->eng.loras.n + 1, sizeof(*waiting));
		if (!waiting)
			return;
		for (long i = 0; i < s->eng.nranks; i++) {
			const struct sim_req *r;
			IG_LIST_FOREACH(r, &s->eng.ranks[i].queue, const struct sim_req, qlink)
				if (r->lora >= 0)
					waiting[r->lora]++;
		}
		sim_loras_metric(&s->eng.loras, waiting, wall_now(), o);
		free(waiting);
	}
}

/* The KV hand-overs. The engines' own failure counters: SGLang's
 * sglang:num_bootstrap_failed_reqs_total (a prefill no decode took) and
 * sglang:num_transfer_failed_reqs_total (python/sglang/srt/observability/
 * metrics_collector.py), vLLM's vllm:nixl_num_failed_transfers and
 * vllm:nixl_num_kv_expired_reqs (blocks freed unread; NixlPromMetrics in
 * vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py, counters
 * printed with _total); the counts of hand-overs and bytes are the
 * simulator's own names (the engines have histograms, not these). */
static void pd_metrics(struct ig_buf *o, struct sim *s)
{
	const char *m = s->conf->model;
	const struct sim_pd_stats *p = &s->pd_st;
	if (s->conf->flavor == SIM_FLAVOR_VLLM) {
		metric(o, "vllm:nixl_num_failed_transfers_total", "counter", "Number of failed NIXL KV Cache transfers.", m,
		       p->failed - p->expired);
		metric(o, "vllm:nixl_num_kv_expired_reqs_total", "counter",
		       "Number of requests whose KV blocks expired before a decode read them.", m, p->expired);
	} else {
		metric(o, "sglang:num_bootstrap_failed_reqs_total", "counter", "The number of bootstrap failed requests.", m,
		       p->bootstrap_failed);
		metric(o, "sglang:num_transfer_failed_reqs_total", "counter", "The number of transfer failed requests.", m,
		       p->failed - p->bootstrap_failed);
	}
	metric(o, "infergate_sim_kv_transfers_sent_total", "counter", "KV hand-overs completed as the prefill side.", m,
	       p->sent);
	metric(o, "infergate_sim_kv_transfers_received_total", "counter", "KV hand-overs completed as the decode side.",
	       m, p->received);
	metric(o, "infergate_sim_kv_transfers_failed_total", "counter",
	       "KV hand-overs that failed or timed out, either side.", m, p->failed);
	metric(o, "infergate_sim_kv_transfer_bytes_sent_total", "counter", "KV bytes handed over as the prefill side.", m,
	       p->bytes_sent);
	metric(o, "infergate_sim_kv_transfer_bytes_received_total", "counter", "KV bytes received as the decode side.", m,
	       p->bytes_received);
	metric(o, "infergate_sim_kv_rooms_held", "gauge", "Prompts whose KV waits for its decode.", m,
	       (uint64_t)(p->held > 0 ? p->held : 0));
}

char *sim_metrics_text(struct sim *s)
{
	struct ig_buf o;
	const char *m = s->conf->model;

	ig_buf_init(&o);
	if (s->conf->flavor == SIM_FLAVOR_VLLM)
		vllm_metrics(&o, s);
	else
		sglang_metrics(&o, s);
	metric(&o, "infergate_sim_requests_served_total", "counter", "Completions generated to the end.", m, s->eng.st.served);
	metric(&o, "infergate_sim_requests_aborted_total", "counter", "Completions stopped because the client disconnected.", m, s->eng.st.aborted);
	metric(&o, "infergate_sim_requests_failed_total", "counter", "Completions answered 500 by fault injection (--fail-rate, mode error).", m, s->eng.st.failed);
	metric(&o, "infergate_sim_requests_rejected_total", "counter", "Completions answered 503 in mode down.", m, s->eng.st.rejected);
	metric(&o, "infergate_sim_requests_invalid_total", "counter", "Requests answered 4xx.", m, s->eng.st.invalid);
	metric(&o, "infergate_sim_requests_stream_failed_total", "counter",
	       "Streams ended by an error event midway (--stream-fail-rate).", m, s->eng.st.stream_failed);
	if (s->pd) /* prefill/decode disaggregation (pd.c) */
		pd_metrics(&o, s);
	if (s->eng.lora) /* neither engine counts these (SGLang prints no LoRA metric) */
		metric(&o, "infergate_sim_lora_loads_total", "counter", "LoRA adapters loaded into a rank's GPU slot.", m,
		       s->eng.lora_loads);
	metric(&o, "infergate_sim_num_hung_reqs", "gauge", "Completions held without an answer in mode hang.", m, (uint64_t)s->eng.hung);
	metric(&o, "infergate_sim_max_running_reqs", "gauge", "Batch slots (--max-running).", m, (uint64_t)s->conf->max_running);
	ig_buf_printf(&o, "# HELP infergate_sim_fault_mode The fault mode in force (1) and the others (0).\n"
		      "# TYPE infergate_sim_fault_mode gauge\n");
	for (int f = SIM_FAULT_OK; f <= SIM_FAULT_DOWN; f++)
		ig_buf_printf(&o, "infergate_sim_fault_mode{mode=\"%s\"} %d\n", sim_engine_fault_name((enum sim_fault)f),
			      (int)s->eng.fault == f);
	if (ig_buf_append(&o, "", 1) < 0)
		abort();
	return o.data; /* off is 0: never consumed */
}
