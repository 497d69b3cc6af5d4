/* The backend table, built once from the configuration. */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/backend.h"

int ig_pool_init(struct ig_pool *pool, const struct ig_config *cfg)
{
	memset(pool, 0, sizeof(*pool));
	pool->v = calloc(cfg->n_backends, sizeof(*pool->v));
	if (!pool->v)
		return -1;
	for (size_t i = 0; i < cfg->n_backends; i++) {
		struct ig_backend *b = calloc(1, sizeof(*b));
		if (!b)
			return -1;
		b->id = (int)i;
		b->url = strdup(cfg->backends[i].url);
		b->weight = cfg->backends[i].weight;
		b->max_inflight = cfg->backends[i].max_inflight;
		atomic_init(&b->state, IG_BACKEND_DOWN);
		pool->v[pool->n++] = b;
	}
	return 0;
}

void ig_pool_free(struct ig_pool *pool)
{
	for (size_t i = 0; i < pool->n; i++) {
		json_decref(pool->v[i]->models);
		free(pool->v[i]->url);
		free(pool->v[i]);
	}
	free(pool->v);
	pool->v = NULL;
	pool->n = 0;
}

size_t ig_pool_healthy(const struct ig_pool *pool)
{
	size_t k = 0;
	for (size_t i = 0; i < pool->n; i++)
		k += atomic_load(&pool->v[i]->state) == IG_BACKEND_UP;
	return k;
}

const char *ig_backend_state_name(int state)
{
	return state == IG_BACKEND_UP ? "up" : "down";
}
