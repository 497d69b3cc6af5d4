/* The gateway's JSON self-reports: /health (for load balancers and curl
 * -f), /health/backends (per-backend and per-model detail), /health/capacity,
 * /v1/models (the served models and their aliases), /admin/keys, and the
 * status page's history (sampled by reactor 0's timer). Each builds a body
 * from the tables and counters; none changes state. Split from metrics.c,
 * which keeps the counting and the Prometheus text (/metrics).
 */
#include "config.h"
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/metrics.h"
#include "fleet/kvevents.h"
#include "infergate/buf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "net/rx.h"
#include "net/servertls.h"
#include "obs/trace.h"
#include "sched/affinity.h"
#include "sched/kvindex.h"
#include "sched/policy.h"

static char *dump(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
	json_decref(j);
	return s;
}

char *ig_metrics_health_json(struct ig_gw *gw, unsigned *status)
{
	size_t k = ig_backend_fleet_healthy(&gw->fleet);
	*status = k > 0 ? 200 : 503;
	return dump(json_pack("{s:s, s:I, s:I}", "status", k > 0 ? "ok" : "unavailable",
			      "healthy_backends", (json_int_t)k, "backends", (json_int_t)gw->fleet.n));
}

json_t *ig_metrics_backend_json(const struct ig_cluster_view *v, const struct ig_backend *b, uint64_t now)
{
	json_t *o = json_pack("{s:I, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			      "id", (json_int_t)b->id, "url", b->url,
			      "state", ig_backend_state_name(atomic_load(&b->state)),
			      "admin", ig_backend_admin_name(atomic_load(&b->admin)),
			      "weight", (json_int_t)b->weight, "max_inflight", (json_int_t)b->max_inflight,
			      "inflight", (json_int_t)atomic_load(&b->inflight),
			      "served", (json_int_t)atomic_load(&b->served),
			      "failures", (json_int_t)atomic_load(&b->failures),
			      "retried", (json_int_t)atomic_load(&b->retried),
			      "aborted", (json_int_t)atomic_load(&b->aborted),
			      "prompt_tokens", (json_int_t)atomic_load(&b->prompt_tokens),
			      "completion_tokens", (json_int_t)atomic_load(&b->completion_tokens));
	if (b->dp_rank >= 0) /* a data-parallel rank of the server rank 0's entry is (backend.h) */
		json_object_update_new(o, json_pack("{s:i, s:I, s:s}", "dp_rank", b->dp_rank, "server_id",
						    (json_int_t)b->server->id, "key", b->key));
	/* its half of prefill/decode pairs (backends[].role, path/try_pd.c) */
	static const char *const roles[] = {"both", "prefill", "decode"};
	json_object_set_new(o, "role", json_string(roles[b->role >= 0 && b->role < 3 ? b->role : 0]));
	if (b->role != IG_ROLE_BOTH) {
		json_object_set_new(o, "engine", json_string(b->engine == IG_ENGINE_SGLANG ? "sglang" : "vllm"));
		json_object_set_new(o, "pairs", json_integer((json_int_t)atomic_load(&b->pd_pairs)));
	}
	if (b->role == IG_ROLE_PREFILL && b->engine == IG_ENGINE_SGLANG)
		json_object_set_new(o, "bootstrap_port", json_integer(b->bootstrap_port));
	json_t *probe = json_object();
	if (b->last_probe_ms) {
		json_object_set_new(probe, "ok", json_boolean(b->last_probe_ok));
		json_object_set_new(probe, "status", json_integer(b->last_probe_status));
		json_object_set_new(probe, "latency_ms", json_real(b->last_probe_latency_ms));
		json_object_set_new(probe, "age_ms", json_integer((json_int_t)(now - b->last_probe_ms)));
		if (!b->last_probe_ok)
			json_object_set_new(probe, "error", json_string(b->last_probe_error));
	}
	json_object_set_new(probe, "slow", json_integer((json_int_t)atomic_load(&b->probes_slow)));
	json_object_set_new(o, "last_probe", probe);
	if (b->discover)
		json_object_set_new(o, "discovered_from", json_string(b->discover));
	if (atomic_load(&b->rests) > 0) /* 429/503 answers with Retry-After (proxy.c) */
		json_object_set_new(o, "retry_after", json_pack("{s:I, s:I}", "answers", (json_int_t)atomic_load(&b->rests),
							       "resting_ms", (json_int_t)(atomic_load(&b->rest_until_ms) > now
											  ? atomic_load(&b->rest_until_ms) - now : 0)));
	uint64_t until = atomic_load(&b->breaker_until_ms);
	json_object_set_new(o, "breaker", json_pack("{s:s, s:i, s:I, s:I}", "state", ig_backend_breaker_state(b),
						    "failures_in_a_row", b->breaker_fails, "opened",
						    (json_int_t)atomic_load(&b->breaker_opened), "open_ms_left",
						    (json_int_t)(until > now ? until - now : 0)));
	if (atomic_load(&b->slots) > 0)
		json_object_set_new(o, "learned_slots", json_integer(atomic_load(&b->slots)));
	/* the limit in force and where it comes from (capacity.h) */
	json_object_set_new(o, "limit", json_integer(ig_backend_limit(b)));
	json_object_set_new(o, "limit_from", json_string(ig_backend_limit_from(b)));
	if (b->learn.reported > 0)
		json_object_set_new(o, "reported_slots", json_integer(b->learn.reported));
	long others = ig_cluster_others_inflight(v, b), cap = ig_cluster_claim_cap(v, b);
	if (others > 0) /* other gateways' requests there (cluster_view.h) */
		json_object_set_new(o, "others_inflight", json_integer(others));
	if (cap != 0) /* its part of the free slots until the next sync (cluster_view.h) */
		json_object_set_new(o, "cluster_cap", json_integer(cap > 0 ? cap : 0));
	/* how the class reaches it (proxy.c) and what it does with it (health.c) */
	long step;
	int field = ig_backend_priority_field(b, &step);
	unsigned learned = (unsigned)atomic_load(&b->prio_sched);
	json_object_set_new(o, "priority_scheduling",
			    json_pack("{s:s, s:s, s:b, s:o, s:o}", "sent_as",
				      field == 1 ? "larger first" : field == 2 ? "smaller first" : "not sent",
				      "from", b->priority_field == 3 ? "priority_field none"
				      : b->priority_field ? "priority_field" : learned ? "server_info" : "none",
				      "preempts", ig_backend_preempts(b),
				      "high_value", field ? json_integer(field == 1 ? step : -step) : json_null(),
				      "preemption_threshold", learned & IG_PRIO_PREEMPTS
				      ? json_integer(atomic_load(&b->prio_threshold)) : json_null()));
	json_object_set_new(o, "models", ig_backend_model_names(b));
	json_object_set_new(o, "models_from", json_string(b->models_conf ? "config" : b->models ? "backend"
							  : b->models_any ? "any" : "unknown"));
	if (b->reported_load >= 0) {
		json_object_set_new(o, "reported_load", json_integer(b->reported_load));
		json_object_set_new(o, "reported_waiting", json_integer(b->reported_waiting));
		if (b->load_path)
			json_object_set_new(o, "load_path", json_string(b->load_path));
		json_object_set_new(o, "external_load", json_integer(atomic_load(&b->external_load)));
		json_object_set_new(o, "stale_reports", json_integer((json_int_t)b->learn.stale));
	}
	return o;
}

/* The aliases that name m, as a JSON array. */
static json_t *aliases_of(const struct ig_gw *gw, const char *model)
{
	json_t *a = json_array();
	for (size_t i = 0; i < gw->cfg->n_aliases; i++)
		if (strcmp(gw->cfg->aliases[i].model, model) == 0)
			json_array_append_new(a, json_string(gw->cfg->aliases[i].alias));
	return a;
}

/* Per model: its pool, queue and counters. */
/* A model's learned headroom and why it is what it is. */
static json_t *headroom_json(const struct ig_gw *gw, const struct ig_model *m)
{
	const struct ig_headroom *h = &m->headroom;
	char why[256];
	if (m->reserve_set)
		snprintf(why, sizeof(why), "a backend of it has reserve_slots: that number holds, none is learned");
	else if (gw->cfg->headroom_max_percent <= 0)
		snprintf(why, sizeof(why), "headroom.max_percent is 0: priority alone");
	else if (h->slots <= 0)
		snprintf(why, sizeof(why), "no high or normal request in the last %d s: low work may take every slot",
			 IG_HEADROOM_WINDOW_S);
	else
		snprintf(why, sizeof(why),
			 "%.2f high and normal requests/s x %.2f s each holds a slot = %.2f slots in use, + its square "
			 "root for the tail: %ld%s", h->rate, h->busy_s, h->in_use, h->slots,
			 h->capped ? " (capped at headroom.max_percent of the pool)" : "");
	long others = ig_cluster_others_headroom(gw->cluster_view, m->name);
	if (!m->reserve_set && m->overshoot_slots > 0 && h->slots + others > 0) {
		size_t at = strlen(why);
		snprintf(why + at, sizeof(why) - at, "; %ld go over the slots of %ld backend(s) that preempt low work "
			 "(headroom.overshoot): %ld kept", m->overshoot_slots, m->preempting, m->kept_slots);
	}
	return json_pack("{s:I, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:I, s:s}", "slots", (json_int_t)h->slots,
			 "kept_slots", (json_int_t)m->kept_slots, "overshoot_slots", (json_int_t)m->overshoot_slots,
			 "arrivals_per_s", h->rate, "busy_s", h->busy_s, "in_use", h->in_use,
			 "others_slots", (json_int_t)others, "pool_slots", (json_int_t)m->pool_slots,
			 "free_slots", (json_int_t)m->free_slots, "why", why);
}

/* The upper bound of the bucket that holds a model's 95th percentile time
 * to first token (its histogram), -1 without one. */
static double model_ttft_p95(const struct ig_gw *gw, const char *name)
{
	const struct ig_model_stats *m = ig_stats_model_stats(&gw->metrics, name);
	if (!m || m->ttft.n == 0)
		return -1;
	const struct ig_metrics_hist *h = &m->ttft;
	uint64_t want = (h->n * 95 + 99) / 100, cum = 0;
	for (int b = 0; b < IG_HIST_BUCKETS; b++)
		if ((cum += h->counts[b]) >= want)
			return ig_stats_bounds[b];
	return ig_stats_bounds[IG_HIST_BUCKETS - 1];
}

static json_t *models_detail(struct ig_gw *gw)
{
	json_t *o = json_object();
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		json_t *urls = json_array();
		for (size_t j = 0; j < m->nbackends; j++)
			json_array_append_new(urls, json_string(m->backends[j]->key));
		json_t *waiting = json_object();
		for (int c = 0; c < IG_NCLASSES; c++)
			json_object_set_new(waiting, ig_conf_class_name(c), json_integer((json_int_t)m->q[c].qlen));
		json_object_set_new(o, m->name,
				    json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "backends", urls,
					      "waiting", waiting,
					      "backends_healthy", (json_int_t)ig_sched_healthy(m),
					      "queue_depth", (json_int_t)m->qlen, "inflight", (json_int_t)m->inflight,
					      "requests", (json_int_t)m->requests, "queued", (json_int_t)m->queued,
					      "queue_rejected", (json_int_t)m->rejected,
					      "queue_timeouts", (json_int_t)m->timeouts, "aliases", aliases_of(gw, m->name)));
		json_object_set_new(json_object_get(o, m->name), "headroom", headroom_json(gw, m));
		double p95 = model_ttft_p95(gw, m->name);
		if (p95 >= 0) /* its streams' time to first token, the bucket's bound (metrics histograms) */
			json_object_set_new(json_object_get(o, m->name), "ttft_p95_s", json_real(p95));
		long others = ig_cluster_others_waiting(gw->cluster_view, m->name);
		if (others > 0) /* high and normal ones other gateways hold (cluster_view.h) */
			json_object_set_new(json_object_get(o, m->name), "others_waiting", json_integer((json_int_t)others));
	}
	return o;
}

/* What a model's pool takes at once, for a client that keeps it full
 * (infergate-bulk --concurrency auto): over its usable backends, the sum of
 * each one's capacity (max_inflight, else the slots it states or that were
 * learned) for classes high and normal ("slots") and for low ("slots_low":
 * less reserve_slots); "unknown" counts usable backends with neither,
 * "learning" those of them that are capped by a ramp until their load
 * reports tell (the others take whatever comes), "ramp" the sum of those
 * caps. */
char *ig_metrics_capacity_json(struct ig_gw *gw)
{
	json_t *models = json_object();
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		long slots = 0, slots_low = 0, unknown = 0, learning = 0, ramp = 0, healthy = 0;
		for (size_t j = 0; j < m->nbackends; j++) {
			const struct ig_backend *b = m->backends[j];
			if (!ig_backend_usable(b))
				continue;
			healthy++;
			long all = ig_policy_limit(gw->cluster_view, b, false), low = ig_policy_limit(gw->cluster_view, b, true);
			if (ig_backend_capacity(b) == 0) {
				/* a ramp is no capacity: counted as unknown, and its
				 * cap in "ramp" */
				unknown++;
				learning += atomic_load(&b->ramp) > 0;
				ramp += atomic_load(&b->ramp);
				continue;
			}
			slots += all > 0 ? all : 0;
			slots_low += low > 0 ? low : 0;
		}
		json_object_set_new(models, m->name,
				    json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}", "slots", (json_int_t)slots,
					      "slots_low", (json_int_t)slots_low, "unknown", (json_int_t)unknown,
					      "learning", (json_int_t)learning, "ramp", (json_int_t)ramp,
					      "backends_healthy", (json_int_t)healthy, "inflight", (json_int_t)m->inflight,
					      "queue_depth", (json_int_t)m->qlen, "aliases", aliases_of(gw, m->name)));
	}
	return dump(json_pack("{s:o}", "models", models));
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ig_metrics_sample(struct ig_gw *gw)
{
	struct ig_metrics_stats *s = &gw->metrics;
	int64_t now = wall_ms();
	if (s->history_n && s->history[(s->history_at + IG_HISTORY_S - 1) % IG_HISTORY_S].t_ms / 1000 == now / 1000)
		return; /* this second's is taken */
	if (!s->history && !(s->history = calloc(IG_HISTORY_S, sizeof(*s->history))))
		return;
	s->history[s->history_at] = (struct ig_history_sample){now, ig_stats_requests_received(gw), gw->stats.completion_tokens,
								(long)gw->nreqs, (long)gw->sched.qlen,
								(long)ig_backend_fleet_healthy(&gw->fleet)};
	s->history_at = (s->history_at + 1) % IG_HISTORY_S;
	if (s->history_n < IG_HISTORY_S)
		s->history_n++;
}

char *ig_metrics_history_json(struct ig_gw *gw)
{
	const struct ig_metrics_stats *s = &gw->metrics;
	json_t *samples = json_array();
	for (size_t i = 0; i < s->history_n; i++) {
		const struct ig_history_sample *h =
			&s->history[(s->history_at + IG_HISTORY_S - s->history_n + i) % IG_HISTORY_S];
		json_array_append_new(samples, json_pack("[I, I, I, I, I, I]", (json_int_t)h->t_ms, (json_int_t)h->requests,
							 (json_int_t)h->ctokens, (json_int_t)h->inflight,
							 (json_int_t)h->queued, (json_int_t)h->healthy));
	}
	return dump(json_pack("{s:i, s:i, s:[s, s, s, s, s, s], s:o}", "interval_s", 1, "window_s", IG_HISTORY_S,
			      "fields", "t_ms", "requests", "completion_tokens", "inflight", "queued", "healthy_backends",
			      "samples", samples));
}

static uint64_t key_tokens(const struct ig_key *k)
{
	return k->prompt_tokens + k->completion_tokens;
}

char *ig_metrics_backends_json(struct ig_gw *gw)
{
	json_t *arr = json_array();
	uint64_t now = ig_now_ms();
	for (size_t i = 0; i < gw->fleet.n; i++) {
		json_t *o = ig_metrics_backend_json(gw->cluster_view, gw->fleet.v[i], now);
		if (gw->report_backend) /* the routing policy's view of it */
			gw->report_backend(gw, gw->fleet.v[i], o);
		ig_kvevents_report(gw->fleet.kvevents, gw->fleet.v[i], o); /* its engines' KV events */
		json_array_append_new(arr, o);
	}
	json_t *g = json_pack("{s:s, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			      "version", PACKAGE_VERSION,
			      "uptime_s", (double)(now - gw->started_ms) / 1000.0,
			      "requests", (json_int_t)ig_stats_requests_received(gw),
			      "inflight", (json_int_t)gw->nreqs,
			      "queue_depth", (json_int_t)gw->sched.qlen,
			      "healthy_backends", (json_int_t)ig_backend_fleet_healthy(&gw->fleet),
			      "backends", (json_int_t)gw->fleet.n,
			      "prompt_tokens", (json_int_t)gw->stats.prompt_tokens,
			      "completion_tokens", (json_int_t)gw->stats.completion_tokens);
	uint64_t wreq, wretry;
	ig_sched_budget_window(&gw->sched, ig_now_ms() / 1000, &wreq, &wretry);
	json_object_set_new(g, "retry_budget", json_pack("{s:I, s:I, s:I}", "requests_10s", (json_int_t)wreq,
							  "retries_10s", (json_int_t)wretry, "denied",
							  (json_int_t)gw->sched.retries_denied));
	json_t *classes = json_object();
	for (int c = 0; c < IG_NCLASSES; c++)
		json_object_set_new(classes, ig_conf_class_name(c),
				    json_pack("{s:I, s:I, s:I}", "waiting", (json_int_t)ig_sched_waiting(&gw->sched, c), "inflight",
					      (json_int_t)gw->sched.class_inflight[c], "dispatched_after_wait",
					      (json_int_t)gw->metrics.queue_wait[c].n));
	if (gw->report_gateway)
		gw->report_gateway(gw, g);
	if (gw->fleet.kvindex) { /* the exact prefix index, all its sources (kvindex.h) */
		struct ig_kvindex_stats st;
		ig_kvindex_stats(gw->fleet.kvindex, IG_KVINDEX_ALL, &st);
		json_object_set_new(g, "kv_index", json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "blocks",
							     (json_int_t)st.blocks, "bytes", (json_int_t)st.bytes,
							     "sources", (json_int_t)gw->fleet.kv_nsrc, "orphans",
							     (json_int_t)st.orphans, "full", (json_int_t)st.full, "bad",
							     (json_int_t)st.bad, "other_medium", (json_int_t)st.other_medium));
	}
	json_object_set_new(g, "scheduling", json_string(gw->cfg->scheduling ? "fifo" : "priority"));
	json_object_set_new(g, "reactors", json_integer((json_int_t)gw->nrx));
	json_object_set_new(g, "classes", classes);
	json_t *keys = json_array();
	/* the five keys that used the most tokens here (the status page) */
	const struct ig_key *top[5] = {0};
	for (size_t i = 0; i < gw->clients.nkeys; i++) {
		const struct ig_key *k = gw->clients.keys[i];
		uint64_t t = key_tokens(k);
		if (!k->digest[0]) /* an open gateway's one client: no key to name */
			continue;
		for (size_t j = 0; t > 0 && j < 5; j++) {
			if (top[j] && key_tokens(top[j]) >= t)
				continue;
			memmove(top + j + 1, top + j, (4 - j) * sizeof(*top));
			top[j] = k;
			break;
		}
	}
	json_t *top_keys = json_array();
	for (size_t j = 0; j < 5 && top[j]; j++) {
		char shown[13];
		snprintf(shown, sizeof(shown), "%.12s", top[j]->digest);
		json_array_append_new(top_keys, json_pack("{s:s, s:o, s:I, s:I, s:I, s:o}", "key", shown, "name",
							  top[j]->ent ? json_string(top[j]->ent->name) : json_null(),
							  "tokens", (json_int_t)key_tokens(top[j]),
							  "inflight", (json_int_t)top[j]->inflight,
							  "waiting", (json_int_t)top[j]->waiting,
							  "priority", top[j]->klass >= 0 ? json_string(ig_conf_class_name(top[j]->klass))
							  : json_null()));
	}
	for (size_t i = 0; i < gw->clients.nkeys; i++) {
		const struct ig_key *k = gw->clients.keys[i];
		/* Only keys in use (here, or lately: their demand is shared
		 * with a cluster): a keys file may name thousands (/admin/keys
		 * lists them all). */
		if (!k->refs && !k->completed && k->rate_req == 0 && k->rate_tok == 0 &&
		    ig_cluster_others_req(gw->cluster_view, k) <= 0 && ig_cluster_others_tok(gw->cluster_view, k) <= 0)
			continue;
		/* The first 12 hex digits name a key well enough, and say little of it. */
		char shown[13];
		snprintf(shown, sizeof(shown), "%.12s", k->digest);
		json_t *e = json_pack("{s:s, s:o, s:I, s:I, s:I, s:o, s:I}", "key", shown,
				      "name", k->ent ? json_string(k->ent->name) : json_null(),
				      "weight", (json_int_t)k->weight, "max_inflight", (json_int_t)k->max_inflight,
				      "inflight", (json_int_t)k->inflight,
				      "priority", k->klass >= 0 ? json_string(ig_conf_class_name(k->klass)) : json_null(),
				      "dispatched_from_queue", (json_int_t)k->completed);
		long kcap = ig_cluster_key_cap(gw->cluster_view, k);
		if (kcap != 0) /* its part of max_inflight until the next sync (cluster_view.h) */
			json_object_set_new(e, "cluster_inflight_cap", json_integer(kcap > 0 ? kcap : 0));
		if (k->waiting > 0)
			json_object_set_new(e, "waiting", json_integer((json_int_t)k->waiting));
		if (k->ent && (k->ent->rpm || k->ent->tpm)) /* this gateway's part of its limits (cluster.h) */
			json_object_set_new(e, "limit_share", json_pack("{s:f, s:f}", "requests", k->share_req, "tokens",
									 k->share_tok));
		json_array_append_new(keys, e);
	}
	json_t *out = json_pack("{s:o, s:o, s:o, s:o, s:o}", "gateway", g, "backends", arr, "models", models_detail(gw),
				"keys", keys, "top_keys", top_keys);
	for (size_t i = 0; gw->reports && i < gw->reports->n; i++) {
		const struct ig_metrics_source *src = &gw->reports->v[i].src;
		if (src->json)
			json_object_set_new(out, src->name, src->json(src->arg));
	}
	return dump(out);
}

/* The entry a backend's own /v1/models gave for `name` (the first backend
 * that lists it), or NULL. */
static json_t *backend_entry(const struct ig_model *m)
{
	for (size_t i = 0; i < m->nbackends; i++) {
		size_t j;
		json_t *e;
		json_array_foreach(m->backends[i]->models, j, e) {
			const char *id = json_string_value(json_object_get(e, "id"));
			if (id && strcmp(id, m->name) == 0)
				return e;
		}
	}
	return NULL;
}

/* OpenAI's list shape: the served models (a backend's own entry when it
 * gave one), then the aliases; each with an "infergate" object telling how
 * many backends serve it and how many of them are healthy. */
char *ig_metrics_models_json(struct ig_gw *gw, const struct ig_keyent *key)
{
	json_t *data = json_array();
	json_int_t created = (json_int_t)(time(NULL) - (time_t)((ig_now_ms() - gw->started_ms) / 1000));
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		if (!m->named)
			continue; /* a name only backends taking any model would serve */
		if (!ig_keyset_model_allowed(key, m->name, NULL))
			continue;
		json_t *own = backend_entry(m);
		json_t *e = own ? json_deep_copy(own)
				: json_pack("{s:s, s:s, s:I, s:s}", "id", m->name, "object", "model", "created", created,
					    "owned_by", "infergate");
		json_object_set_new(e, "infergate", json_pack("{s:I, s:I}", "backends", (json_int_t)m->nbackends,
							      "backends_healthy", (json_int_t)ig_sched_healthy(m)));
		json_array_append_new(data, e);
	}
	for (size_t i = 0; i < gw->cfg->n_aliases; i++) {
		const struct ig_model_alias *a = &gw->cfg->aliases[i];
		const struct ig_model *m = ig_sched_find(&gw->sched, a->model);
		if (!ig_keyset_model_allowed(key, a->model, a->alias))
			continue;
		json_array_append_new(data, json_pack("{s:s, s:s, s:I, s:s, s:s, s:{s:s, s:I, s:I}}", "id", a->alias,
						      "object", "model", "created", created, "owned_by", "infergate",
						      "root", a->model, "infergate", "alias_of", a->model, "backends",
						      (json_int_t)(m ? m->nbackends : 0), "backends_healthy",
						      (json_int_t)(m ? ig_sched_healthy(m) : 0)));
	}
	return dump(json_pack("{s:s, s:o}", "object", "list", "data", data));
}

json_t *ig_metrics_keys_json(struct ig_gw *gw)
{
	json_t *arr = json_array();
	uint64_t now = ig_now_ms();
	for (size_t i = 0; i < gw->api_keys.n; i++) {
		const struct ig_keyent *e = &gw->api_keys.v[i];
		char hex[2 * IG_DIGEST_LEN + 1];
		ig_keyset_hex(e->digest, hex);
		struct ig_key *k = ig_clients_find(&gw->clients, hex); /* configured: present */
		if (!k)
			continue;
		json_t *models = json_null(), *status = json_object();
		if (e->models) {
			models = json_array();
			for (size_t j = 0; j < e->n_models; j++)
				json_array_append_new(models, json_string(e->models[j]));
		}
		uint64_t requests = 0;
		for (size_t j = 0; j < k->nstatus; j++) {
			char code[16];
			snprintf(code, sizeof(code), "%u", k->status[j].status);
			json_object_set_new(status, code, json_integer((json_int_t)k->status[j].n));
			requests += k->status[j].n;
		}
		json_t *limits = json_object();
		struct ig_bucket *bk[2] = {&k->rpm, &k->tpm};
		const char *names[2] = {"requests", "tokens"};
		for (int j = 0; j < 2; j++) {
			char reset[32];
			if (bk[j]->limit <= 0)
				continue;
			ig_bucket_refill(bk[j], now);
			ig_ratelimit_duration(reset, sizeof(reset), ig_bucket_reset_ms(bk[j]));
			json_object_set_new(limits, names[j], json_pack("{s:I, s:I, s:s}", "limit", (json_int_t)bk[j]->limit,
									"remaining", (json_int_t)ig_bucket_remaining(bk[j]),
									"reset", reset));
		}
		json_t *usage = json_pack("{s:I, s:o, s:I, s:I, s:I, s:I, s:I}", "requests", (json_int_t)requests,
					  "by_status", status, "prompt_tokens", (json_int_t)k->prompt_tokens,
					  "completion_tokens", (json_int_t)k->completion_tokens,
					  "rate_limited_requests", (json_int_t)k->limited_requests,
					  "rate_limited_tokens", (json_int_t)k->limited_tokens, "inflight",
					  (json_int_t)k->inflight);
		json_array_append_new(arr, json_pack("{s:s, s:s%, s:b, s:o, s:I, s:I, s:o, s:o, s:o, s:o, s:o}",
						     "name", e->name, "sha256_prefix", hex, (size_t)12,
						     "disabled", e->disabled,
						     "priority", e->priority >= 0 ? json_string(ig_conf_class_name(e->priority))
										  : json_null(),
						     "weight", (json_int_t)e->weight, "max_inflight", (json_int_t)e->max_inflight,
						     "rpm", e->rpm ? json_integer(e->rpm) : json_null(),
						     "tpm", e->tpm ? json_integer(e->tpm) : json_null(),
						     "models", models, "limits", limits, "usage", usage));
	}
	return json_pack("{s:I, s:s, s:o}", "count", (json_int_t)json_array_size(arr), "file",
			 gw->cfg->api_keys_file, "keys", arr);
}

/* Reactor 0's tick (rx.h: ig_rx_every). */
static void sample_timer(struct ig_rx *rx, uint64_t now_ms IG_UNUSED, void *arg IG_UNUSED)
{
	ig_metrics_sample(rx->gw);
}

int ig_metrics_start(struct ig_gw *gw)
{
	return ig_rx_every(gw, IG_RX_HOME, IG_RX_TICK_MS, IG_RX_ORDER_METRICS, sample_timer, NULL);
}

