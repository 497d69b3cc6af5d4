/* Per-model pools and queues (scheduler.h). An entry's pool is recomputed from
 * the backend table on every change to it, not at each request, so routing
 * a request costs one lookup of its model's name.
 * Not here: when a request is queued, started or refused (dispatch.c), or
 * which backend of a pool is picked (policy.c). */
#include "config.h"
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "conf/conf.h"
#include "infergate/log.h"
#include "infergate/util.h"
#include "sched/scheduler.h"

void ig_sched_init(struct ig_sched *s)
{
	memset(s, 0, sizeof(*s));
	s->low_every = 20;
}

void ig_sched_configure(struct ig_sched *s, const struct ig_conf *cfg)
{
	s->low_every = (unsigned)((100 + cfg->low_share_percent / 2) / cfg->low_share_percent);
}

/* ---- queues ---- */

/* Adds w to its key's FIFO in its class, at the end or (front) the head;
 * a flow made for it starts with tag. Returns 0 or -1. */
static int put(struct ig_model *m, struct ig_sched_entry *e, bool front, double tag)
{
	struct ig_class_queue *q = &m->q[e->klass];
	struct ig_flow *f;
	IG_LIST_FOREACH(f, &q->flows, struct ig_flow, link)
		if (f->key == e->key)
			goto found;
	if (!(f = calloc(1, sizeof(*f))))
		return -1;
	f->key = e->key;
	f->tag = tag;
	ig_list_init(&f->queue);
	ig_list_append(&q->flows, &f->link);
found:
	if (front)
		ig_list_insert(&f->queue, &e->link);
	else
		ig_list_append(&f->queue, &e->link);
	f->qlen++;
	e->flow = f;
	e->key->waiting++;
	q->qlen++;
	m->qlen++;
	return 0;
}

int ig_sched_enqueue(struct ig_sched *s IG_UNUSED, struct ig_model *m, struct ig_sched_entry *e)
{
	return put(m, e, false, m->q[e->klass].vtime); /* a newly busy key starts level with the others */
}

int ig_sched_requeue_front(struct ig_sched *s IG_UNUSED, struct ig_model *m, struct ig_sched_entry *e, double tag)
{
	return put(m, e, true, tag);
}

void ig_sched_dequeue(struct ig_sched *s IG_UNUSED, struct ig_model *m, struct ig_sched_entry *e)
{
	struct ig_flow *f = e->flow;
	if (!f)
		return;
	ig_list_del(&e->link);
	e->flow = NULL;
	f->qlen--;
	e->key->waiting--;
	m->q[e->klass].qlen--;
	m->qlen--;
	if (f->qlen == 0) {
		ig_list_del(&f->link);
		free(f);
	}
}

/* The flow of class c to serve next: the smallest tag among keys under
 * their cap (the first such in the list on a tie), or NULL. */
static struct ig_flow *next_flow(struct ig_class_queue *q, const struct ig_cluster_view *v)
{
	struct ig_flow *f, *best = NULL;
	IG_LIST_FOREACH(f, &q->flows, struct ig_flow, link) {
		if (ig_cluster_key_capped(v, f->key))
			continue;
		if (!best || f->tag < best->tag)
			best = f;
	}
	return best;
}

struct ig_sched_entry *ig_sched_next(struct ig_sched *s, struct ig_model *m, const struct ig_cluster_view *v)
{
	struct ig_flow *hi = NULL, *low = next_flow(&m->q[IG_CLASS_LOW], v);
	for (int c = IG_CLASS_HIGH; c < IG_CLASS_LOW && !hi; c++)
		hi = next_flow(&m->q[c], v);
	struct ig_flow *f = hi;
	/* low's guaranteed turn: one dispatch in low_every while it waits. */
	if (low && (!hi || m->since_low + 1 >= s->low_every))
		f = low;
	return f ? IG_LIST_FIRST(&f->queue, struct ig_sched_entry, link) : NULL;
}

void ig_sched_dispatch(struct ig_sched *s, struct ig_model *m, struct ig_sched_entry *e)
{
	struct ig_flow *f = e->flow;
	struct ig_class_queue *q = &m->q[e->klass];
	bool low_waits = m->q[IG_CLASS_LOW].qlen > (e->klass == IG_CLASS_LOW);

	q->vtime = f->tag;
	f->tag += 1.0 / (double)(e->key->weight > 0 ? e->key->weight : 1);
	if (e->klass == IG_CLASS_LOW)
		m->since_low = 0;
	else if (low_waits)
		m->since_low++;
	e->key->completed++;
	ig_sched_dequeue(s, m, e);
}

void ig_sched_expire(struct ig_sched *s IG_UNUSED, struct ig_model *m, uint64_t now_ms,
		     void (*fn)(struct ig_sched_entry *e, void *arg), void *arg)
{
	for (int c = 0; c < IG_NCLASSES; c++) {
		struct ig_flow *f, *next;
		IG_LIST_FOREACH_SAFE(f, next, &m->q[c].flows, struct ig_flow, link) {
			struct ig_sched_entry *e;
			/* fn frees f with its last waiter: stop at that one. */
			for (size_t left = f->qlen; left > 0; left--) {
				e = IG_LIST_FIRST(&f->queue, struct ig_sched_entry, link);
				if (e->deadline_ms > now_ms)
					break;
				fn(e, arg);
			}
		}
	}
}

static void model_free(struct ig_model *m)
{
	free(m->name);
	free(m->backends);
	free(m);
}

void ig_sched_free(struct ig_sched *s)
{
	for (size_t i = 0; i < s->n; i++)
		model_free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

struct ig_model *ig_sched_find(const struct ig_sched *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->v[i]->name, name) == 0)
			return s->v[i];
	return NULL;
}

/* m's pool: the backends of the table that serve it, and whether one of
 * them names it (m->named). Returns 0 or -1. */
static int pool_of(struct ig_model *m, const struct ig_fleet *fleet)
{
	struct ig_backend **v = fleet->n ? malloc(fleet->n * sizeof(*v)) : NULL;
	size_t k = 0;
	if (fleet->n && !v)
		return -1;
	m->named = false;
	m->pairs = false;
	for (size_t i = 0; i < fleet->n; i++) {
		struct ig_backend *b = fleet->v[i];
		bool names = ig_backend_names_model(b, m->name);
		if (!names && ig_backend_serves(b, m->name) != IG_SERVES_YES)
			continue;
		v[k++] = b;
		m->named = m->named || names;
		m->pairs = m->pairs || b->role == IG_ROLE_PREFILL;
	}
	free(m->backends);
	m->backends = v;
	m->nbackends = k;
	return 0;
}

static struct ig_model *add(struct ig_sched *s, const char *name)
{
	struct ig_model **v = ig_grow(s->v, &s->cap, s->n, sizeof(*v), 8);
	if (!v)
		return NULL;
	s->v = v;
	struct ig_model *m = calloc(1, sizeof(*m));
	if (!m || !(m->name = strdup(name))) {
		free(m);
		return NULL;
	}
	for (int c = 0; c < IG_NCLASSES; c++)
		ig_list_init(&m->q[c].flows);
	s->v[s->n++] = m;
	return m;
}

static void remove_at(struct ig_sched *s, size_t i)
{
	model_free(s->v[i]);
	memmove(&s->v[i], &s->v[i + 1], (s->n - i - 1) * sizeof(*s->v));
	s->n--;
	if (s->next > i)
		s->next--;
}

int ig_sched_rebuild(struct ig_sched *s, const struct ig_fleet *fleet)
{
	s->unknown_up = s->unknown_down = 0;
	for (size_t i = 0; i < fleet->n; i++) {
		const struct ig_backend *b = fleet->v[i];
		if (!b->models_conf && !b->models && !b->models_any) {
			/* Up, coming up or not probed yet: its list may come any moment. */
			if (atomic_load(&b->state) == IG_BACKEND_UP || b->coming_up || b->last_probe_ms == 0)
				s->unknown_up++;
			else
				s->unknown_down++;
			continue;
		}
		json_t *names = ig_backend_model_names(b), *n;
		size_t j;
		json_array_foreach(names, j, n) {
			if (!ig_sched_find(s, json_string_value(n)) && !add(s, json_string_value(n))) {
				json_decref(names);
				return -1;
			}
		}
		json_decref(names);
	}
	for (size_t i = s->n; i-- > 0;) {
		struct ig_model *m = s->v[i];
		if (pool_of(m, fleet) < 0)
			return -1;
		if (!m->named && m->refs == 0)
			remove_at(s, i);
	}
	return 0;
}

struct ig_model *ig_sched_get(struct ig_sched *s, const struct ig_fleet *fleet, const char *name)
{
	struct ig_model *m = ig_sched_find(s, name);
	if (m)
		return m;
	if (!(m = add(s, name)))
		return NULL;
	if (pool_of(m, fleet) < 0) {
		remove_at(s, s->n - 1);
		return NULL;
	}
	return m;
}

void ig_sched_release(struct ig_sched *s, struct ig_model *m)
{
	if (--m->refs > 0)
		return;
	for (size_t i = 0; i < s->n; i++) {
		if (s->v[i] != m)
			continue;
		/* Kept while a backend names it; otherwise it was made for
		 * requests (of a name no backend is known to serve). */
		if (!m->named)
			remove_at(s, i);
		return;
	}
}

size_t ig_sched_healthy(const struct ig_model *m)
{
	size_t k = 0;
	for (size_t i = 0; i < m->nbackends; i++)
		k += (size_t)ig_backend_usable(m->backends[i]);
	return k;
}

size_t ig_sched_waiting(const struct ig_sched *s, int klass)
{
	size_t k = 0;
	for (size_t i = 0; i < s->n; i++)
		k += s->v[i]->q[klass].qlen;
	return k;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

void ig_sched_ttfb(struct ig_model *m, uint64_t ms)
{
	m->ttfb_ms[m->ttfb_at] = ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
	m->ttfb_at = (m->ttfb_at + 1) % IG_TTFB_SAMPLES;
	if (m->ttfb_n < IG_TTFB_SAMPLES)
		m->ttfb_n++;
	if (m->ttfb_n < IG_TTFB_MIN || m->ttfb_at % 16 != 0)
		return; /* the p95 is sorted out every 16 answers */
	uint32_t v[IG_TTFB_SAMPLES];
	memcpy(v, m->ttfb_ms, m->ttfb_n * sizeof(v[0]));
	qsort(v, m->ttfb_n, sizeof(v[0]), cmp_u32);
	m->ttfb_p95_ms = v[m->ttfb_n * 95 / 100];
}

void ig_sched_budget_window(const struct ig_sched *s, uint64_t sec, uint64_t *requests, uint64_t *retries)
{
	*requests = *retries = 0;
	for (size_t i = 0; i < IG_RETRY_WINDOW_S; i++)
		if (s->budget_sec[i] + IG_RETRY_WINDOW_S > sec && s->budget_sec[i] <= sec) {
			*requests += s->budget_req[i];
			*retries += s->budget_retry[i];
		}
}

/* ---- Settings: this module's rows of the configuration table (conf.h),
 * registered at boot by conf_parts.c ---- */
static const struct ig_flag scheduler_rows[] = {
	{.name = "--queue-size", .key = "queue_size", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(queue_size), .min = 0,
	 .max = 1000000, .def = "16384", .metavar = "N",
	 .help = "requests that may wait when every backend is at its limit (then 429)"},
	{.name = "--queue-timeout-ms", .key = "queue_timeout_ms", .type = IG_FLAG_LONG, .off = IG_CONF_OFF(queue_timeout_ms),
	 .min = 1, .max = 3600000, .def = "60000", .metavar = "N",
	 .help = "longest wait in the queue of a request of class normal (then 503 + Retry-After)"},
	{.name = "--queue-timeout-high-ms", .key = "queue_timeout_high_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(queue_timeout_high_ms), .min = 1, .max = 3600000, .def = "60000", .metavar = "N",
	 .help = "the same for class high"},
	{.name = "--queue-timeout-low-ms", .key = "queue_timeout_low_ms", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(queue_timeout_low_ms), .min = 1, .max = 86400000, .def = "600000", .metavar = "N",
	 .help = "the same for class low (bulk runs: with learned slot counts this queue stands in for the "
		 "backends' own, which have no timeout)"},
	{.name = "--scheduling", .key = "scheduling", .type = IG_FLAG_CHOICE, .off = IG_CONF_OFF(scheduling),
	 .def = "priority", .metavar = "priority|fifo", .bad = "%s: unknown scheduling '%s' (priority, fifo)",
	 .help = "priority: classes high > normal > low (X-Infergate-Priority), fair shares between keys; "
		 "fifo: one queue per model in arrival order"},
	{.name = "--low-share-percent", .key = "low_share_percent", .type = IG_FLAG_LONG,
	 .off = IG_CONF_OFF(low_share_percent), .min = 1, .max = 50, .def = "5", .metavar = "N",
	 .help = "dispatches guaranteed to class low while higher classes wait (5: one in 20), so a bulk "
		 "run is never starved"},
};
const struct ig_conf_part ig_scheduler_conf = IG_CONF_PART(scheduler_rows);
