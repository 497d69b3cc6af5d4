/* The gateway's self-reports: /health (for load balancers and curl -f),
 * /health/backends (per-backend and per-model detail), /v1/models (the
 * served models and their aliases) and /metrics (Prometheus text). Each builds a body from
 * counters; none changes state. */
#include "config.h"
#include <jansson.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infergate/buf.h"
#include "affinity.h"
#include "metrics.h"
#include "servertls.h"
#include "policy.h"
#include "rx.h"
#include "trace.h"
#include "infergate/util.h"

/* The histograms' bucket bounds, in seconds (Prometheus's le). */
static const double bounds[IG_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
						2.5, 5, 10, 30, 60, 120, 300, 600};

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


struct ig_metrics_sources {
	struct ig_metrics_source *v;
	size_t n, cap;
};

int ig_metrics_register(struct ig_gw *gw, const struct ig_metrics_source *src)
{
	struct ig_metrics_sources *r = gw->reports;
	if (!r && !(r = gw->reports = calloc(1, sizeof(*r))))
		return -1;
	struct ig_metrics_source *v = ig_grow(r->v, &r->cap, r->n, sizeof(*v), 4);
	if (!v)
		return -1;
	r->v = v;
	r->v[r->n++] = *src;
	return 0;
}

void ig_metrics_unregister(struct ig_gw *gw, const void *arg)
{
	struct ig_metrics_sources *r = gw->reports;
	for (size_t i = 0; r && i < r->n;)
		if (r->v[i].arg == arg)
			memmove(&r->v[i], &r->v[i + 1], (--r->n - i) * sizeof(*r->v));
		else
			i++;
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

/* A model's entry of the per-model series, or NULL before its first answer. */
static struct ig_model_stats *model_stats(const struct ig_stats *s, const char *name)
{
	for (size_t i = 0; i < s->nmodels; i++)
		if (strcmp(s->models[i].model, name) == 0)
			return &s->models[i];
	return NULL;
}

/* The upper bound of the bucket that holds a model's 95th percentile time
 * to first token (its histogram), -1 without one. */
static double model_ttft_p95(const struct ig_gw *gw, const char *name)
{
	const struct ig_model_stats *m = model_stats(&gw->stats, name);
	if (!m || m->ttft.n == 0)
		return -1;
	const struct ig_metrics_hist *h = &m->ttft;
	uint64_t want = (h->n * 95 + 99) / 100, cum = 0;
	for (int b = 0; b < IG_HIST_BUCKETS; b++)
		if ((cum += h->counts[b]) >= want)
			return bounds[b];
	return bounds[IG_HIST_BUCKETS - 1];
}

static json_t *models_detail(struct ig_gw *gw)
{
	json_t *o = json_object();
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		json_t *urls = json_array();
		for (size_t j = 0; j < m->nbackends; j++)
			json_array_append_new(urls, json_string(m->backends[j]->url));
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

/* Proxied requests received: the reactors' counts together. */
static uint64_t requests_received(const struct ig_gw *gw)
{
	uint64_t n = 0;
	for (size_t i = 0; i < gw->nrx; i++)
		n += gw->rx[i].requests;
	return n;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void ig_metrics_sample(struct ig_gw *gw)
{
	struct ig_stats *s = &gw->stats;
	int64_t now = wall_ms();
	if (s->history_n && s->history[(s->history_at + IG_HISTORY_S - 1) % IG_HISTORY_S].t_ms / 1000 == now / 1000)
		return; /* this second's is taken */
	if (!s->history && !(s->history = calloc(IG_HISTORY_S, sizeof(*s->history))))
		return;
	s->history[s->history_at] = (struct ig_history_sample){now, requests_received(gw), s->completion_tokens,
								(long)gw->nreqs, (long)gw->sched.qlen,
								(long)ig_backend_fleet_healthy(&gw->fleet)};
	s->history_at = (s->history_at + 1) % IG_HISTORY_S;
	if (s->history_n < IG_HISTORY_S)
		s->history_n++;
}

char *ig_metrics_history_json(struct ig_gw *gw)
{
	const struct ig_stats *s = &gw->stats;
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
		json_array_append_new(arr, o);
	}
	json_t *g = json_pack("{s:s, s:f, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
			      "version", PACKAGE_VERSION,
			      "uptime_s", (double)(now - gw->started_ms) / 1000.0,
			      "requests", (json_int_t)requests_received(gw),
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
					      (json_int_t)gw->stats.queue_wait[c].n));
	if (gw->report_gateway)
		gw->report_gateway(gw, g);
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
		const struct ig_metrics_source *src = &gw->reports->v[i];
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

static void observe(struct ig_metrics_hist *h, double seconds)
{
	int i = 0;
	while (i < IG_HIST_BUCKETS && seconds > bounds[i])
		i++;
	h->counts[i]++;
	h->sum += seconds;
	h->n++;
}

void ig_metrics_observe(struct ig_gw *gw, int route, unsigned status, bool stream_error, const char *backend,
			uint64_t duration_us, int64_t ttfb_us)
{
	struct ig_stats *s = &gw->stats;

	if (route < 0 || (size_t)route >= gw->cfg->routes.n || !status)
		return;
	if (stream_error)
		s->stream_errors++;
	observe(&s->duration[route], (double)duration_us / 1e6);
	if (ttfb_us >= 0)
		observe(&s->ttfb[route], (double)ttfb_us / 1e6);
	for (size_t i = 0; i < s->ncounts; i++) {
		struct ig_reqcount *c = &s->counts[i];
		if (c->route == route && c->status == status && strcmp(c->backend, backend) == 0) {
			c->n++;
			return;
		}
	}
	struct ig_reqcount *v = realloc(s->counts, (s->ncounts + 1) * sizeof(*v));
	if (!v)
		return;
	s->counts = v;
	s->counts[s->ncounts++] = (struct ig_reqcount){route, status, strdup(backend), 1};
}

void ig_metrics_observe_model(struct ig_gw *gw, const char *model, uint64_t duration_us, int64_t ttft_us,
			      long prompt_tokens, long completion_tokens)
{
	struct ig_stats *s = &gw->stats;
	if (!model)
		return;
	struct ig_model_stats *m = model_stats(s, model);
	if (!m) {
		if (s->nmodels >= 256) /* models are few: a name per request would be a leak */
			return;
		struct ig_model_stats *v = realloc(s->models, (s->nmodels + 1) * sizeof(*v));
		if (!v)
			return;
		s->models = v;
		m = &s->models[s->nmodels++];
		memset(m, 0, sizeof(*m));
		m->model = strdup(model);
	}
	observe(&m->duration, (double)duration_us / 1e6);
	if (ttft_us >= 0) {
		observe(&m->ttft, (double)ttft_us / 1e6);
		if (completion_tokens > 1 && duration_us > (uint64_t)ttft_us)
			observe(&m->tpot, (double)(duration_us - (uint64_t)ttft_us) / 1e6 / (double)(completion_tokens - 1));
	}
	if (prompt_tokens > 0)
		m->prompt_tokens += (uint64_t)prompt_tokens;
	if (completion_tokens > 0)
		m->completion_tokens += (uint64_t)completion_tokens;
}

void ig_metrics_observe_wait(struct ig_gw *gw, int klass, uint64_t waited_ms)
{
	if (klass >= 0 && klass < IG_NCLASSES)
		observe(&gw->stats.queue_wait[klass], (double)waited_ms / 1000.0);
}

void ig_metrics_free(struct ig_gw *gw)
{
	if (gw->reports)
		free(gw->reports->v);
	free(gw->reports);
	gw->reports = NULL;
	for (size_t i = 0; i < gw->stats.ncounts; i++)
		free(gw->stats.counts[i].backend);
	free(gw->stats.counts);
	gw->stats.counts = NULL;
	gw->stats.ncounts = 0;
	free(gw->stats.history);
	gw->stats.history = NULL;
	for (size_t i = 0; i < gw->stats.nmodels; i++)
		free(gw->stats.models[i].model);
	free(gw->stats.models);
	gw->stats.models = NULL;
	gw->stats.nmodels = 0;
}

/* The series of one histogram with one label (key="value"), cumulative as
 * Prometheus wants; the HELP and TYPE lines are the caller's. */
static void hist_series(struct ig_buf *b, const char *name, const char *key, const char *value,
			const struct ig_metrics_hist *h)
{
	uint64_t cum = 0;
	struct ig_buf lv;
	ig_buf_init(&lv);
	ig_buf_printf(&lv, "%s=\"", key);
	ig_buf_prom_label(&lv, value);
	ig_buf_append(&lv, "\"", 2); /* with its NUL */
	const char *l = ig_buf_head(&lv);
	for (int i = 0; i < IG_HIST_BUCKETS; i++) {
		cum += h->counts[i];
		ig_buf_printf(b, "%s_bucket{%s,le=\"%g\"} %lu\n", name, l, bounds[i], (unsigned long)cum);
	}
	cum += h->counts[IG_HIST_BUCKETS];
	ig_buf_printf(b, "%s_bucket{%s,le=\"+Inf\"} %lu\n", name, l, (unsigned long)cum);
	ig_buf_printf(b, "%s_sum{%s} %.6f\n%s_count{%s} %lu\n", name, l, h->sum, name, l, (unsigned long)h->n);
	ig_buf_free(&lv);
}

static void print_hist(struct ig_buf *b, const struct ig_conf *cfg, const char *name, const char *help,
		       const struct ig_metrics_hist *h)
{
	ig_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (int r = 0; (size_t)r < cfg->routes.n; r++)
		if (r < IG_ROUTES_SHOWN || h[r].n > 0) /* the others once used */
			hist_series(b, name, "route", ig_route_path(cfg, r), &h[r]);
}

/* One per-backend series; `get` reads the value. */
static void per_backend(struct ig_buf *b, struct ig_gw *gw, const char *name, const char *type,
			const char *help, unsigned long (*get)(const struct ig_backend *))
{
	ig_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	for (size_t i = 0; i < gw->fleet.n; i++) {
		ig_buf_printf(b, "%s{backend=\"", name);
		ig_buf_prom_label(b, gw->fleet.v[i]->url);
		ig_buf_printf(b, "\"} %lu\n", get(gw->fleet.v[i]));
	}
}

static unsigned long get_up(const struct ig_backend *x) { return atomic_load(&x->state) == IG_BACKEND_UP; }
static unsigned long get_enabled(const struct ig_backend *x) { return atomic_load(&x->admin) == IG_ADMIN_ENABLED; }
static unsigned long get_inflight(const struct ig_backend *x) { return (unsigned long)atomic_load(&x->inflight); }
static unsigned long get_limit(const struct ig_backend *x) { return (unsigned long)ig_backend_limit(x); }
static unsigned long get_served(const struct ig_backend *x) { return atomic_load(&x->served); }
static unsigned long get_failures(const struct ig_backend *x) { return atomic_load(&x->failures); }
static unsigned long get_retried(const struct ig_backend *x) { return atomic_load(&x->retried); }
static unsigned long get_rests(const struct ig_backend *x) { return atomic_load(&x->rests); }
static unsigned long get_breaker(const struct ig_backend *x)
{
	const char *s = ig_backend_breaker_state(x);
	return s[0] == 'c' ? 0 : s[0] == 'o' ? 1 : 2;
}
static unsigned long get_breaker_opened(const struct ig_backend *x) { return atomic_load(&x->breaker_opened); }
static unsigned long get_aborted(const struct ig_backend *x) { return atomic_load(&x->aborted); }
static unsigned long get_ptok(const struct ig_backend *x) { return atomic_load(&x->prompt_tokens); }
static unsigned long get_ctok(const struct ig_backend *x) { return atomic_load(&x->completion_tokens); }

static void per_model(struct ig_buf *b, struct ig_gw *gw)
{
	static const struct {
		const char *name, *type, *help;
	} series[] = {
		{"infergate_model_queue_depth", "gauge", "Requests waiting for a slot, per model."},
		{"infergate_model_inflight", "gauge", "Requests on a backend, per model."},
		{"infergate_model_backends_healthy", "gauge", "Healthy backends that serve the model."},
		{"infergate_model_requests_total", "counter", "Requests dispatched or queued, per model."},
		{"infergate_model_queued_total", "counter", "Requests that waited in the model's queue."},
		{"infergate_model_queue_rejected_total", "counter", "Requests refused with 429 (the model's queue full)."},
		{"infergate_model_queue_timeouts_total", "counter", "Requests that waited too long (503), per model."},
	};
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		ig_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", series[k].name, series[k].help, series[k].name,
			      series[k].type);
		for (size_t i = 0; i < gw->sched.n; i++) {
			const struct ig_model *m = gw->sched.v[i];
			uint64_t v[] = {m->qlen, (uint64_t)m->inflight, ig_sched_healthy(m), m->requests, m->queued,
					m->rejected, m->timeouts};
			ig_buf_printf(b, "%s{model=\"", series[k].name);
			ig_buf_prom_label(b, m->name);
			ig_buf_printf(b, "\"} %llu\n", (unsigned long long)v[k]);
		}
	}
}

/* A counter with one label: its n values. */
static void by_label(struct ig_buf *b, const char *name, const char *help, const char *label,
		     const char *const *values, const uint64_t *v, size_t n)
{
	ig_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
	for (size_t i = 0; i < n; i++)
		ig_buf_printf(b, "%s{%s=\"%s\"} %lu\n", name, label, values[i], (unsigned long)v[i]);
}

static void per_model_ttfb(struct ig_buf *b, struct ig_gw *gw)
{
	ig_buf_printf(b, "# HELP infergate_model_ttfb_p95_seconds The 95th percentile of its backends' time to "
		      "first byte over its last 256 answers (hedge.after_ms -1); 0 until 32.\n"
		      "# TYPE infergate_model_ttfb_p95_seconds gauge\n");
	for (size_t i = 0; i < gw->sched.n; i++) {
		const struct ig_model *m = gw->sched.v[i];
		ig_buf_printf(b, "infergate_model_ttfb_p95_seconds{model=\"");
		ig_buf_prom_label(b, m->name);
		ig_buf_printf(b, "\"} %.3f\n", (double)m->ttfb_p95_ms / 1000.0);
	}
}

static void per_model_headroom(struct ig_buf *b, struct ig_gw *gw)
{
	static const struct {
		const char *name, *help;
	} series[] = {
		{"infergate_model_headroom_slots", "Slots for high and normal requests, learned from their traffic "
						   "(headroom.max_percent)."},
		{"infergate_model_headroom_kept_slots", "Of them, those kept free of new low work: the rest go over "
							"the slots of backends that preempt (headroom.overshoot)."},
		{"infergate_model_interactive_arrivals_per_second", "High and normal requests a second, over the "
								   "last 10 s (the headroom's rate)."},
		{"infergate_model_interactive_busy_seconds", "How long a high or normal request holds a slot (EWMA; "
							    "the headroom's time)."},
	};
	for (size_t k = 0; k < sizeof(series) / sizeof(series[0]); k++) {
		ig_buf_printf(b, "# HELP %s %s\n# TYPE %s gauge\n", series[k].name, series[k].help, series[k].name);
		for (size_t i = 0; i < gw->sched.n; i++) {
			const struct ig_model *m = gw->sched.v[i];
			double v = k == 0 ? (double)m->headroom.slots : k == 1 ? (double)m->kept_slots
				   : k == 2 ? m->headroom.rate : m->headroom.busy_s;
			ig_buf_printf(b, "%s{model=\"", series[k].name);
			ig_buf_prom_label(b, m->name);
			ig_buf_printf(b, "\"} %.3f\n", v);
		}
	}
}

/* Per model: the GenAI latency histograms and tokens by kind. */
static void per_model_genai(struct ig_buf *b, struct ig_gw *gw)
{
	static const struct {
		const char *name, *help;
		size_t off;
	} h[] = {
		{"infergate_model_time_to_first_token_seconds", "Streams: time from the request to its first token, "
								"per model (answered requests).",
		 offsetof(struct ig_model_stats, ttft)},
		{"infergate_model_time_per_output_token_seconds", "Streams: (duration - time to first token) / "
								  "(output tokens - 1), per model.",
		 offsetof(struct ig_model_stats, tpot)},
		{"infergate_model_request_duration_seconds", "Time from the request to the end of its answer, per "
							     "model (answered requests).",
		 offsetof(struct ig_model_stats, duration)},
	};
	const struct ig_stats *s = &gw->stats;
	for (size_t k = 0; k < sizeof(h) / sizeof(h[0]); k++) {
		ig_buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", h[k].name, h[k].help, h[k].name);
		for (size_t i = 0; i < s->nmodels; i++)
			hist_series(b, h[k].name, "model", s->models[i].model,
				    (const struct ig_metrics_hist *)((const char *)&s->models[i] + h[k].off));
	}
	ig_buf_printf(b, "# HELP infergate_model_tokens_total Tokens of answered requests per model, by kind "
		      "(from their usage).\n# TYPE infergate_model_tokens_total counter\n");
	for (size_t i = 0; i < s->nmodels; i++)
		for (int k = 0; k < 2; k++) {
			ig_buf_printf(b, "infergate_model_tokens_total{model=\"");
			ig_buf_prom_label(b, s->models[i].model);
			ig_buf_printf(b, "\",kind=\"%s\"} %llu\n", k ? "completion" : "prompt",
				      (unsigned long long)(k ? s->models[i].completion_tokens : s->models[i].prompt_tokens));
		}
}

/* The trace exporter's counts (trace.h), with tracing on. */
static void tracing(struct ig_buf *b, struct ig_gw *gw)
{
	if (!gw->tracer)
		return;
	struct ig_tracer_stats st;
	ig_tracer_stats(gw->tracer, &st);
	ig_buf_printf(b, "# HELP infergate_trace_spans_exported_total Spans the collector took.\n"
		      "# TYPE infergate_trace_spans_exported_total counter\ninfergate_trace_spans_exported_total %llu\n"
		      "# HELP infergate_trace_spans_dropped_total Spans dropped: the export queue was full (a slow or "
		      "absent collector).\n"
		      "# TYPE infergate_trace_spans_dropped_total counter\ninfergate_trace_spans_dropped_total %llu\n"
		      "# HELP infergate_trace_spans_failed_total Spans of export requests the collector refused or "
		      "never answered.\n"
		      "# TYPE infergate_trace_spans_failed_total counter\ninfergate_trace_spans_failed_total %llu\n"
		      "# HELP infergate_trace_exports_total Export requests sent.\n"
		      "# TYPE infergate_trace_exports_total counter\ninfergate_trace_exports_total %llu\n"
		      "# HELP infergate_trace_queue_spans Spans waiting to be sent.\n"
		      "# TYPE infergate_trace_queue_spans gauge\ninfergate_trace_queue_spans %ld\n"
		      "# HELP infergate_trace_requests_unrecorded_total Sampled requests whose spans were not even "
		      "built: the export queue was full.\n"
		      "# TYPE infergate_trace_requests_unrecorded_total counter\n"
		      "infergate_trace_requests_unrecorded_total %llu\n",
		      st.exported, st.dropped, st.failed, st.batches, st.queued, st.unrecorded);
}

/* HTTPS for clients (servertls.h), with server_tls set. */
static void server_tls(struct ig_buf *b, struct ig_gw *gw)
{
	if (!gw->tls)
		return;
	struct ig_servertls_stats st;
	ig_servertls_stats(gw->tls, &st);
	ig_buf_printf(b, "# HELP infergate_tls_handshakes_total Client connections to the HTTPS listeners by how "
		      "their handshake ended: ok; failed (a ClientHello, then no finished handshake: a version or "
		      "suite refused, no or a refused client certificate, stalled and timed out); not_tls (closed "
		      "before a ClientHello: plain HTTP, garbage, a TCP check).\n"
		      "# TYPE infergate_tls_handshakes_total counter\n"
		      "infergate_tls_handshakes_total{result=\"ok\"} %llu\n"
		      "infergate_tls_handshakes_total{result=\"failed\"} %llu\n"
		      "infergate_tls_handshakes_total{result=\"not_tls\"} %llu\n"
		      "# HELP infergate_tls_certificate_reloads_total Certificates read again on SIGHUP, by result "
		      "(failed: the running one kept).\n"
		      "# TYPE infergate_tls_certificate_reloads_total counter\n"
		      "infergate_tls_certificate_reloads_total{result=\"ok\"} %llu\n"
		      "infergate_tls_certificate_reloads_total{result=\"failed\"} %llu\n"
		      "# HELP infergate_tls_certificate_expiry_timestamp_seconds When the certificate new connections "
		      "get expires (Unix time).\n"
		      "# TYPE infergate_tls_certificate_expiry_timestamp_seconds gauge\n"
		      "infergate_tls_certificate_expiry_timestamp_seconds{serial=\"%s\"} %lld\n",
		      (unsigned long long)st.handshakes_ok, (unsigned long long)st.handshakes_failed,
		      (unsigned long long)st.not_tls,
		      (unsigned long long)st.reloads_ok, (unsigned long long)st.reloads_failed, st.serial,
		      (long long)st.not_after);
}

static void per_class(struct ig_buf *b, struct ig_gw *gw)
{
	ig_buf_printf(b, "# HELP infergate_class_queue_depth Requests waiting, per priority class.\n"
		      "# TYPE infergate_class_queue_depth gauge\n");
	for (int c = 0; c < IG_NCLASSES; c++)
		ig_buf_printf(b, "infergate_class_queue_depth{class=\"%s\"} %zu\n", ig_conf_class_name(c),
			      ig_sched_waiting(&gw->sched, c));
	ig_buf_printf(b, "# HELP infergate_class_inflight Requests on a backend, per priority class.\n"
		      "# TYPE infergate_class_inflight gauge\n");
	for (int c = 0; c < IG_NCLASSES; c++)
		ig_buf_printf(b, "infergate_class_inflight{class=\"%s\"} %ld\n", ig_conf_class_name(c),
			      gw->sched.class_inflight[c]);
	const char *name = "infergate_queue_wait_seconds";
	ig_buf_printf(b, "# HELP %s Time requests waited in a queue for a slot, per priority class.\n"
		      "# TYPE %s histogram\n", name, name);
	for (int c = 0; c < IG_NCLASSES; c++)
		hist_series(b, name, "class", ig_conf_class_name(c), &gw->stats.queue_wait[c]);
}

/* A key's label: its name in the keys file (never the key, nor its digest). */
static void key_series(struct ig_buf *b, const char *name, const struct ig_key *k, const char *more, uint64_t v)
{
	ig_buf_printf(b, "%s{key=\"", name);
	ig_buf_prom_label(b, k->ent->name);
	ig_buf_printf(b, "\"%s} %llu\n", more, (unsigned long long)v);
}

/* Usage of the keys of the keys file that have been used. */
static void per_key(struct ig_buf *b, struct ig_gw *gw)
{
	const struct ig_clients *s = &gw->clients;
	char more[64];
	ig_buf_printf(b, "# HELP infergate_key_requests_total Requests answered, by API key (its name in the keys "
		      "file) and status.\n# TYPE infergate_key_requests_total counter\n");
	for (size_t i = 0; i < s->nkeys; i++) {
		const struct ig_key *k = s->keys[i];
		for (size_t j = 0; k->ent && j < k->nstatus; j++) {
			snprintf(more, sizeof(more), ",code=\"%u\"", k->status[j].status);
			key_series(b, "infergate_key_requests_total", k, more, k->status[j].n);
		}
	}
	ig_buf_printf(b, "# HELP infergate_key_tokens_total Tokens reported in answers' usage, by API key.\n"
		      "# TYPE infergate_key_tokens_total counter\n");
	for (size_t i = 0; i < s->nkeys; i++) {
		const struct ig_key *k = s->keys[i];
		if (k->ent && k->nstatus) {
			key_series(b, "infergate_key_tokens_total", k, ",kind=\"prompt\"", k->prompt_tokens);
			key_series(b, "infergate_key_tokens_total", k, ",kind=\"completion\"", k->completion_tokens);
		}
	}
	ig_buf_printf(b, "# HELP infergate_key_rate_limited_total Requests refused with 429 by the key's rate "
		      "limit (rpm: requests, tpm: tokens).\n# TYPE infergate_key_rate_limited_total counter\n");
	for (size_t i = 0; i < s->nkeys; i++) {
		const struct ig_key *k = s->keys[i];
		if (k->ent && (k->ent->rpm || k->ent->tpm) && k->nstatus) {
			key_series(b, "infergate_key_rate_limited_total", k, ",limit=\"requests\"", k->limited_requests);
			key_series(b, "infergate_key_rate_limited_total", k, ",limit=\"tokens\"", k->limited_tokens);
		}
	}
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

char *ig_metrics_text(struct ig_gw *gw)
{
	struct ig_buf b;
	const struct ig_stats *s = &gw->stats;
	static const char *uperr[] = {"none", "connect", "reset", "timeout", "status", "other"};

	ig_buf_init(&b);
	ig_buf_printf(&b, "# HELP infergate_build_info Build information.\n# TYPE infergate_build_info gauge\n"
		      "infergate_build_info{version=\"%s\"} 1\n", PACKAGE_VERSION);
	ig_buf_printf(&b, "# HELP infergate_uptime_seconds Seconds since start.\n# TYPE infergate_uptime_seconds gauge\n"
		      "infergate_uptime_seconds %.3f\n", (double)(ig_now_ms() - gw->started_ms) / 1000.0);
	ig_buf_printf(&b, "# HELP infergate_requests_received_total Proxied requests received.\n"
		      "# TYPE infergate_requests_received_total counter\ninfergate_requests_received_total %lu\n",
		      (unsigned long)requests_received(gw));
	ig_buf_printf(&b, "# HELP infergate_requests_total Proxied requests answered, by route, status and backend "
		      "(a 200 stream that carried an error event counts as the error's status).\n"
		      "# TYPE infergate_requests_total counter\n");
	for (size_t i = 0; i < s->ncounts; i++) {
		ig_buf_printf(&b, "infergate_requests_total{route=\"");
		ig_buf_prom_label(&b, ig_route_path(gw->cfg, s->counts[i].route));
		ig_buf_printf(&b, "\",code=\"%u\",backend=\"", s->counts[i].status);
		ig_buf_prom_label(&b, s->counts[i].backend);
		ig_buf_printf(&b, "\"} %lu\n", (unsigned long)s->counts[i].n);
	}
	ig_buf_printf(&b, "# HELP infergate_responses_total Responses sent (all routes), by status class.\n"
		      "# TYPE infergate_responses_total counter\n");
	for (int c = 1; c <= 5; c++)
		ig_buf_printf(&b, "infergate_responses_total{code=\"%dxx\"} %lu\n", c, (unsigned long)s->responses[c]);
	print_hist(&b, gw->cfg, "infergate_request_duration_seconds", "Time from request to the end of the answer.",
		   s->duration);
	print_hist(&b, gw->cfg, "infergate_stream_first_byte_seconds", "Streams: time from request to the first byte relayed.",
		   s->ttfb);
	ig_buf_printf(&b, "# HELP infergate_inflight_requests Proxied requests being handled.\n"
		      "# TYPE infergate_inflight_requests gauge\ninfergate_inflight_requests %zu\n", gw->nreqs);
	ig_buf_printf(&b, "# HELP infergate_reactor_connections Client connections each reactor (thread) holds.\n"
		      "# TYPE infergate_reactor_connections gauge\n");
	for (size_t i = 0; i < gw->nrx; i++)
		ig_buf_printf(&b, "infergate_reactor_connections{reactor=\"%zu\"} %ld\n", i, gw->rx[i].conns);
	ig_buf_printf(&b, "# HELP infergate_reactor_connections_total Client connections each reactor was given.\n"
		      "# TYPE infergate_reactor_connections_total counter\n");
	for (size_t i = 0; i < gw->nrx; i++)
		ig_buf_printf(&b, "infergate_reactor_connections_total{reactor=\"%zu\"} %lu\n", i,
			      (unsigned long)gw->rx[i].accepted);
	ig_buf_printf(&b, "# HELP infergate_client_hangups_total Client connections whose client closed its side "
		      "before the gateway did (each closed then, whatever it was doing).\n"
		      "# TYPE infergate_client_hangups_total counter\ninfergate_client_hangups_total %lu\n"
		      "# HELP infergate_client_header_timeouts_total Client connections cut because their request's "
		      "headers took longer than client_header_timeout_s.\n"
		      "# TYPE infergate_client_header_timeouts_total counter\n"
		      "infergate_client_header_timeouts_total %lu\n"
		      "# HELP infergate_per_ip_refused_total Over max_connections_per_ip: connections refused at "
		      "accept, requests through a trusted proxy refused at their headers.\n"
		      "# TYPE infergate_per_ip_refused_total counter\n"
		      "infergate_per_ip_refused_total{stage=\"accept\"} %lu\n"
		      "infergate_per_ip_refused_total{stage=\"request\"} %lu\n",
		      (unsigned long)s->client_hangups, (unsigned long)s->header_timeouts,
		      (unsigned long)s->per_ip_refused[0], (unsigned long)s->per_ip_refused[1]);
	if (gw->nrx > 1) {
		/* read under the lock: the holder's current stretch is not in it yet */
		ig_buf_printf(&b, "# HELP infergate_lock_acquisitions_total Times a reactor took the gateway's lock.\n"
			      "# TYPE infergate_lock_acquisitions_total counter\ninfergate_lock_acquisitions_total %lu\n"
			      "# HELP infergate_lock_contended_total Of them, times another reactor held it.\n"
			      "# TYPE infergate_lock_contended_total counter\ninfergate_lock_contended_total %lu\n"
			      "# HELP infergate_lock_held_seconds_total Time the lock was held, all reactors.\n"
			      "# TYPE infergate_lock_held_seconds_total counter\ninfergate_lock_held_seconds_total %.6f\n",
			      (unsigned long)gw->lock_taken, (unsigned long)gw->lock_contended, (double)gw->lock_held_ns / 1e9);
	}
	ig_buf_printf(&b, "# HELP infergate_reactor_requests_total Proxied requests each reactor received.\n"
		      "# TYPE infergate_reactor_requests_total counter\n");
	for (size_t i = 0; i < gw->nrx; i++)
		ig_buf_printf(&b, "infergate_reactor_requests_total{reactor=\"%zu\"} %lu\n", i,
			      (unsigned long)gw->rx[i].requests);
	ig_buf_printf(&b, "# HELP infergate_retries_total Requests moved to another backend.\n"
		      "# TYPE infergate_retries_total counter\ninfergate_retries_total %lu\n", (unsigned long)s->retries);
	static const char *const cont_why[IG_CONT_NREASONS] = {"reset", "error_event", "stall"};
	by_label(&b, "infergate_stream_continuations_total",
		 "Broken streams continued on another backend, by why they broke.", "reason", cont_why, s->continued,
		 IG_CONT_NREASONS);
	ig_buf_printf(&b, "# HELP infergate_stream_continuation_prompt_tokens_total Prompt tokens the continuations "
		      "sent again (the backend work a continuation costs).\n"
		      "# TYPE infergate_stream_continuation_prompt_tokens_total counter\n"
		      "infergate_stream_continuation_prompt_tokens_total %lu\n", (unsigned long)s->cont_prompt_tokens);
	static const char *const hedge_what[4] = {"sent", "won", "lost", "not_sent"};
	by_label(&b, "infergate_hedges_total",
		 "Requests with no byte after hedge.after_ms sent to a second backend too, and how their races ended.",
		 "outcome", hedge_what, s->hedges, 4);
	ig_buf_printf(&b, "# HELP infergate_hedge_waste_seconds_total Backend time of the attempts that lost a race "
		      "(dropped at the winner's first byte, or when they had one).\n"
		      "# TYPE infergate_hedge_waste_seconds_total counter\ninfergate_hedge_waste_seconds_total %.3f\n",
		      (double)s->hedge_waste_us / 1e6);
	ig_buf_printf(&b, "# HELP infergate_hedge_waste_prompt_tokens_total The prompts the attempts that lost a race "
		      "were sent, in tokens (4 bytes of text a token): the prefill they may have cost.\n"
		      "# TYPE infergate_hedge_waste_prompt_tokens_total counter\n"
		      "infergate_hedge_waste_prompt_tokens_total %lu\n", (unsigned long)s->hedge_waste_prompt_tokens);
	static const char *const idem_what[4] = {"ran", "joined", "replayed", "conflict"};
	by_label(&b, "infergate_idempotency_requests_total", "Requests with an Idempotency-Key, by what became of them.",
		 "outcome", idem_what, s->idem, 4);
	ig_buf_printf(&b, "# HELP infergate_idempotency_stored_bytes Memory the Idempotency-Key answers take.\n"
		      "# TYPE infergate_idempotency_stored_bytes gauge\ninfergate_idempotency_stored_bytes %zu\n"
		      "# HELP infergate_idempotency_keys Idempotency-Key answers kept or running.\n"
		      "# TYPE infergate_idempotency_keys gauge\ninfergate_idempotency_keys %zu\n",
		      gw->idem.bytes, gw->idem.n);
	ig_buf_printf(&b, "# HELP infergate_retries_denied_total Retries the retry budget refused.\n"
		      "# TYPE infergate_retries_denied_total counter\ninfergate_retries_denied_total %lu\n",
		      (unsigned long)gw->sched.retries_denied);
	ig_buf_printf(&b, "# HELP infergate_client_aborts_total Requests whose client left first.\n"
		      "# TYPE infergate_client_aborts_total counter\ninfergate_client_aborts_total %lu\n",
		      (unsigned long)s->client_aborts);
	ig_buf_printf(&b, "# HELP infergate_queue_depth Requests waiting for a backend slot.\n"
		      "# TYPE infergate_queue_depth gauge\ninfergate_queue_depth %zu\n", gw->sched.qlen);
	ig_buf_printf(&b, "# HELP infergate_queue_rejected_total Requests refused with 429 (queue full).\n"
		      "# TYPE infergate_queue_rejected_total counter\ninfergate_queue_rejected_total %lu\n",
		      (unsigned long)s->queue_rejected);
	ig_buf_printf(&b, "# HELP infergate_queue_timeouts_total Requests that waited too long (503).\n"
		      "# TYPE infergate_queue_timeouts_total counter\ninfergate_queue_timeouts_total %lu\n",
		      (unsigned long)s->queue_timeouts);
	ig_buf_printf(&b, "# HELP infergate_stream_errors_total Streams answered 200 that carried an error event "
		      "(the backend's, or the gateway's when a backend failed mid-stream).\n"
		      "# TYPE infergate_stream_errors_total counter\ninfergate_stream_errors_total %lu\n",
		      (unsigned long)s->stream_errors);
	ig_buf_printf(&b, "# HELP infergate_upstream_errors_total Upstream failures by type.\n"
		      "# TYPE infergate_upstream_errors_total counter\n");
	for (int e = IG_UPERR_CONNECT; e <= IG_UPERR_OTHER; e++)
		ig_buf_printf(&b, "infergate_upstream_errors_total{type=\"%s\"} %lu\n", uperr[e],
			      (unsigned long)s->upstream_errors[e]);
	ig_buf_printf(&b, "# HELP infergate_tokens_total Tokens reported in responses' usage.\n"
		      "# TYPE infergate_tokens_total counter\n"
		      "infergate_tokens_total{kind=\"prompt\"} %lu\ninfergate_tokens_total{kind=\"completion\"} %lu\n",
		      (unsigned long)s->prompt_tokens, (unsigned long)s->completion_tokens);
	per_model(&b, gw);
	per_model_ttfb(&b, gw);
	per_model_headroom(&b, gw);
	per_model_genai(&b, gw);
	tracing(&b, gw);
	server_tls(&b, gw);
	per_class(&b, gw);
	per_key(&b, gw);
	per_backend(&b, gw, "infergate_backend_up", "gauge", "Backend health (1 up, 0 down).", get_up);
	per_backend(&b, gw, "infergate_backend_enabled", "gauge", "1 unless drained or being removed.", get_enabled);
	per_backend(&b, gw, "infergate_backend_inflight", "gauge", "Requests in flight per backend.", get_inflight);
	per_backend(&b, gw, "infergate_backend_limit", "gauge",
		    "Requests allowed in flight per backend: max_inflight, or the slot count learned from the "
		    "backend's own load report (0 = no limit).", get_limit);
	per_backend(&b, gw, "infergate_backend_served_total", "counter", "Responses relayed per backend.", get_served);
	per_backend(&b, gw, "infergate_backend_failures_total", "counter",
		    "Failed transfers per backend (connect, reset, timeout, 502/503/504).", get_failures);
	per_backend(&b, gw, "infergate_backend_retried_total", "counter",
		    "Requests moved from this backend to another.", get_retried);
	per_backend(&b, gw, "infergate_backend_breaker_state", "gauge",
		    "Its circuit breaker: 0 closed, 1 open (no request), 2 half-open (one trial at a time).", get_breaker);
	per_backend(&b, gw, "infergate_backend_breaker_opened_total", "counter",
		    "Times its circuit breaker opened (breaker.failures request failures in a row, or a failed trial).",
		    get_breaker_opened);
	per_backend(&b, gw, "infergate_backend_retry_after_total", "counter",
		    "429 or 503 answers with Retry-After: the backend was sent nothing new for that long.", get_rests);
	per_backend(&b, gw, "infergate_backend_aborted_total", "counter",
		    "Transfers cut because the client left.", get_aborted);
	per_backend(&b, gw, "infergate_backend_prompt_tokens_total", "counter", "Prompt tokens per backend.", get_ptok);
	per_backend(&b, gw, "infergate_backend_completion_tokens_total", "counter", "Completion tokens per backend.",
		    get_ctok);
	ig_buf_printf(&b, "# HELP infergate_backend_probes_total Health probes by result (slow: timed out while "
		      "requests were answered, not counted as a failure).\n"
		      "# TYPE infergate_backend_probes_total counter\n");
	static const char *results[] = {"ok", "failed", "slow"};
	for (size_t i = 0; i < gw->fleet.n; i++) {
		const struct ig_backend *x = gw->fleet.v[i];
		unsigned long v[] = {atomic_load(&x->probes_ok), atomic_load(&x->probes_failed),
				     atomic_load(&x->probes_slow)};
		for (int k = 0; k < 3; k++) {
			ig_buf_printf(&b, "infergate_backend_probes_total{backend=\"");
			ig_buf_prom_label(&b, x->url);
			ig_buf_printf(&b, "\",result=\"%s\"} %lu\n", results[k], v[k]);
		}
	}
	for (size_t i = 0; gw->reports && i < gw->reports->n; i++)
		if (gw->reports->v[i].prom)
			gw->reports->v[i].prom(gw->reports->v[i].arg, &b);
	ig_buf_append(&b, "", 1);
	char *out = strdup(ig_buf_head(&b));
	ig_buf_free(&b);
	return out;
}
