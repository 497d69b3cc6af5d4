/* The engine's running requests by deadline (deadlines.h): a binary
 * min-heap on deadline_us. Moved out of engine.c. */
#include "config.h"
#include <stdlib.h>

#include "deadlines.h"

static void heap_set(struct sim_deadlines *h, size_t i, struct sim_req *r)
{
	h->v[i] = r;
	r->heap_idx = (long)i;
}

static void sift_up(struct sim_deadlines *h, size_t i)
{
	struct sim_req *r = h->v[i];
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (h->v[p]->deadline_us <= r->deadline_us)
			break;
		heap_set(h, i, h->v[p]);
		i = p;
	}
	heap_set(h, i, r);
}

static void sift_down(struct sim_deadlines *h, size_t i)
{
	struct sim_req *r = h->v[i];
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->len)
			break;
		if (c + 1 < h->len && h->v[c + 1]->deadline_us < h->v[c]->deadline_us)
			c++;
		if (r->deadline_us <= h->v[c]->deadline_us)
			break;
		heap_set(h, i, h->v[c]);
		i = c;
	}
	heap_set(h, i, r);
}

void sim_deadlines_push(struct sim_deadlines *h, struct sim_req *r)
{
	if (h->len == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 256;
		struct sim_req **v = realloc(h->v, cap * sizeof(*v));
		if (!v)
			abort(); /* a few KB; nothing sensible to do without it */
		h->v = v;
		h->cap = cap;
	}
	heap_set(h, h->len++, r);
	sift_up(h, h->len - 1);
}

void sim_deadlines_remove(struct sim_deadlines *h, struct sim_req *r)
{
	if (r->heap_idx < 0)
		return;
	size_t i = (size_t)r->heap_idx;
	r->heap_idx = -1;
	h->len--;
	if (i == h->len)
		return;
	heap_set(h, i, h->v[h->len]);
	sift_down(h, i);
	sift_up(h, (size_t)h->v[i]->heap_idx);
}

void sim_deadlines_later(struct sim_deadlines *h, struct sim_req *r)
{
	sift_down(h, (size_t)r->heap_idx);
}

void sim_deadlines_reorder(struct sim_deadlines *h)
{
	for (size_t i = h->len / 2; i-- > 0;)
		sift_down(h, i);
}

void sim_deadlines_free(struct sim_deadlines *h)
{
	free(h->v);
	h->v = NULL;
	h->len = h->cap = 0;
}
