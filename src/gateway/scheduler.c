/* Per-model pools and queues (scheduler.h). An entry's pool is recomputed from
 * the backend table on every change to it, not at each request, so routing
 * a request costs one lookup of its model's name.
 * Not here: what a waiting request does (proxy.c) or which backend of a
 * pool is picked (router.c). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "scheduler.h"

void ig_sched_init(struct ig_sched *s)
{
	memset(s, 0, sizeof(*s));
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

/* m's pool: the backends of the table that serve it. Returns 0 or -1. */
static int pool_of(struct ig_model *m, const struct ig_pool *pool, bool *named)
{
	struct ig_backend **v = pool->n ? malloc(pool->n * sizeof(*v)) : NULL;
	size_t k = 0;
	if (pool->n && !v)
		return -1;
	*named = false;
	for (size_t i = 0; i < pool->n; i++) {
		struct ig_backend *b = pool->v[i];
		if (ig_backend_serves(b, m->name) != IG_SERVES_YES)
			continue;
		v[k++] = b;
		/* Served by name, not only by a backend that takes any model. */
		if (ig_backend_names_model(b, m->name))
			*named = true;
	}
	free(m->backends);
	m->backends = v;
	m->nbackends = k;
	return 0;
}

static struct ig_model *add(struct ig_sched *s, const char *name)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 8;
		struct ig_model **v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return NULL;
		s->v = v;
		s->cap = cap;
	}
	struct ig_model *m = calloc(1, sizeof(*m));
	if (!m || !(m->name = strdup(name))) {
		free(m);
		return NULL;
	}
	ig_list_init(&m->queue);
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

int ig_sched_rebuild(struct ig_sched *s, const struct ig_pool *pool)
{
	s->unknown_up = s->unknown_down = 0;
	for (size_t i = 0; i < pool->n; i++) {
		const struct ig_backend *b = pool->v[i];
		if (!b->models_conf && !b->models && !b->models_any) {
			/* Up, or not probed yet: its list may come any moment. */
			if (atomic_load(&b->state) == IG_BACKEND_UP || b->last_probe_ms == 0)
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
		bool named;
		if (pool_of(m, pool, &named) < 0)
			return -1;
		if (!named && m->refs == 0)
			remove_at(s, i);
	}
	return 0;
}

struct ig_model *ig_sched_get(struct ig_sched *s, const struct ig_pool *pool, const char *name)
{
	struct ig_model *m = ig_sched_find(s, name);
	bool named;
	if (m)
		return m;
	if (!(m = add(s, name)))
		return NULL;
	if (pool_of(m, pool, &named) < 0) {
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
		bool named = false;
		for (size_t b = 0; b < m->nbackends && !named; b++)
			named = ig_backend_names_model(m->backends[b], m->name);
		if (!named)
			remove_at(s, i);
		return;
	}
}

size_t ig_sched_healthy(const struct ig_model *m)
{
	size_t k = 0;
	for (size_t i = 0; i < m->nbackends; i++)
		k += (size_t)ig_backend_routable(m->backends[i]);
	return k;
}

size_t ig_sched_waiting(const struct ig_sched *s)
{
	size_t k = 0;
	for (size_t i = 0; i < s->n; i++)
		k += s->v[i]->qlen;
	return k;
}
