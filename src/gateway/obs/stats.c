/* What the gateway counts of its requests, and the modules' reports
 * registered (stats.h). No I/O. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "net/rx.h"
#include "obs/stats.h"

/* The histograms' bucket bounds, in seconds (Prometheus's le). */
const double ig_stats_bounds[IG_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
						2.5, 5, 10, 30, 60, 120, 300, 600};

int ig_stats_register_at(struct ig_gw *gw, const struct ig_metrics_source *src, int order)
{
	struct ig_metrics_sources *r = gw->reports;
	if (!r && !(r = gw->reports = calloc(1, sizeof(*r))))
		return -1;
	struct ig_metrics_entry *v = ig_grow(r->v, &r->cap, r->n, sizeof(*v), 4);
	if (!v)
		return -1;
	r->v = v;
	r->v[r->n++] = (struct ig_metrics_entry){*src, order};
	return 0;
}

int ig_stats_register(struct ig_gw *gw, const struct ig_metrics_source *src)
{
	return ig_stats_register_at(gw, src, IG_METRICS_ORDER_LAST);
}

void ig_stats_unregister(struct ig_gw *gw, const void *arg)
{
	struct ig_metrics_sources *r = gw->reports;
	for (size_t i = 0; r && i < r->n;)
		if (r->v[i].src.arg == arg)
			memmove(&r->v[i], &r->v[i + 1], (--r->n - i) * sizeof(*r->v));
		else
			i++;
}

/* A model's entry of the per-model series, or NULL before its first answer. */
struct ig_model_stats *ig_stats_model_stats(const struct ig_metrics_stats *s, const char *name)
{
	for (size_t i = 0; i < s->nmodels; i++)
		if (strcmp(s->models[i].model, name) == 0)
			return &s->models[i];
	return NULL;
}

/* Proxied requests received: the reactors' counts together. */
uint64_t ig_stats_requests_received(const struct ig_gw *gw)
{
	uint64_t n = 0;
	for (size_t i = 0; i < gw->nrx; i++)
		n += gw->rx[i].requests;
	return n;
}


static void observe(struct ig_metrics_hist *h, double seconds)
{
	int i = 0;
	while (i < IG_HIST_BUCKETS && seconds > ig_stats_bounds[i])
		i++;
	h->counts[i]++;
	h->sum += seconds;
	h->n++;
}

void ig_stats_observe(struct ig_gw *gw, int route, unsigned status, bool stream_error, const char *backend,
			uint64_t duration_us, int64_t ttfb_us)
{
	struct ig_metrics_stats *s = &gw->metrics;

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

void ig_stats_observe_model(struct ig_gw *gw, const char *model, uint64_t duration_us, int64_t ttft_us,
			      long prompt_tokens, long completion_tokens)
{
	struct ig_metrics_stats *s = &gw->metrics;
	if (!model)
		return;
	struct ig_model_stats *m = ig_stats_model_stats(s, model);
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

void ig_stats_observe_wait(struct ig_gw *gw, int klass, uint64_t waited_ms)
{
	if (klass >= 0 && klass < IG_NCLASSES)
		observe(&gw->metrics.queue_wait[klass], (double)waited_ms / 1000.0);
}

void ig_stats_free(struct ig_gw *gw)
{
	if (gw->reports)
		free(gw->reports->v);
	free(gw->reports);
	gw->reports = NULL;
	for (size_t i = 0; i < gw->metrics.ncounts; i++)
		free(gw->metrics.counts[i].backend);
	free(gw->metrics.counts);
	gw->metrics.counts = NULL;
	gw->metrics.ncounts = 0;
	free(gw->metrics.history);
	gw->metrics.history = NULL;
	for (size_t i = 0; i < gw->metrics.nmodels; i++)
		free(gw->metrics.models[i].model);
	free(gw->metrics.models);
	gw->metrics.models = NULL;
	gw->metrics.nmodels = 0;
}

