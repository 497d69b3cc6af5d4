/* Idempotency-Key's answers (idem.h). */
#include "config.h"
#include <stdlib.h>
#include <string.h>

#include "infergate/util.h"
#include "path/idem.h"

#define ENTRY_OVERHEAD 256 /* bytes an entry costs besides its answer and scope */

void ig_idem_init(struct ig_idem *s, size_t max_bytes, uint64_t ttl_ms)
{
	memset(s, 0, sizeof(*s));
	ig_list_init(&s->entries);
	ig_list_init(&s->shared);
	s->max_bytes = max_bytes;
	s->ttl_ms = ttl_ms;
	s->secret = ig_secret64();
}

/* What an entry counts in s->bytes: its answer once whole. */
static size_t cost(const struct ig_idem_entry *e)
{
	return ENTRY_OVERHEAD + strlen(e->scope) + (e->done ? e->bytes.len : 0);
}

static void entry_free(struct ig_idem_entry *e)
{
	ig_list_del(&e->share_link);
	free(e->claim);
	free(e->scope);
	free(e->content_type);
	ig_buf_free(&e->bytes);
	free(e);
}

static size_t slot(const struct ig_idem *s, const char *scope)
{
	return (size_t)(ig_hash64(scope, strlen(scope), s->secret) & (s->ntab - 1));
}

/* Out of the store (its chain, its list, its bytes); freed now, or by its
 * last reference. */
static void drop(struct ig_idem *s, struct ig_idem_entry *e)
{
	if (e->dropped)
		return;
	for (struct ig_idem_entry **p = &s->tab[slot(s, e->scope)]; *p; p = &(*p)->next)
		if (*p == e) {
			*p = e->next;
			break;
		}
	ig_list_del(&e->link);
	s->n--;
	s->bytes -= cost(e);
	e->dropped = true;
	if (e->refs == 0)
		entry_free(e);
}

void ig_idem_free(struct ig_idem *s)
{
	for (size_t i = 0; i < s->ntab; i++)
		while (s->tab[i]) {
			s->tab[i]->refs = 0; /* the requests are gone before the store */
			drop(s, s->tab[i]);
		}
	free(s->tab);
	s->tab = NULL;
	s->ntab = 0;
}

struct ig_idem_entry *ig_idem_find(struct ig_idem *s, const char *scope)
{
	if (!s->ntab)
		return NULL;
	for (struct ig_idem_entry *e = s->tab[slot(s, scope)]; e; e = e->next)
		if (strcmp(e->scope, scope) == 0)
			return e;
	return NULL;
}

static int grow(struct ig_idem *s)
{
	size_t n = s->ntab ? s->ntab * 2 : 64;
	struct ig_idem_entry **tab = calloc(n, sizeof(*tab));
	if (!tab)
		return -1;
	for (size_t i = 0; i < s->ntab; i++)
		for (struct ig_idem_entry *e = s->tab[i], *next; e; e = next) {
			next = e->next;
			size_t k = (size_t)(ig_hash64(e->scope, strlen(e->scope), s->secret) & (n - 1));
			e->next = tab[k];
			tab[k] = e;
		}
	free(s->tab);
	s->tab = tab;
	s->ntab = n;
	return 0;
}

struct ig_idem_entry *ig_idem_private(void)
{
	struct ig_idem_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	ig_buf_init(&e->bytes);
	ig_list_init(&e->waiting);
	ig_list_init(&e->link); /* on the list of ended ones when it ends */
	ig_list_init(&e->share_link);
	e->dropped = true;
	e->refs = 1;
	return e;
}

struct ig_idem_entry *ig_idem_add(struct ig_idem *s, const char *scope, const unsigned char digest[32])
{
	if (s->n >= s->ntab && grow(s) < 0)
		return NULL;
	struct ig_idem_entry *e = ig_idem_private();
	if (!e || !(e->scope = strdup(scope))) {
		free(e);
		return NULL;
	}
	e->dropped = false;
	memcpy(e->digest, digest, 32);
	size_t k = slot(s, scope);
	e->next = s->tab[k];
	s->tab[k] = e;
	s->n++;
	s->bytes += cost(e);
	return e;
}

int ig_idem_append(struct ig_idem_entry *e, const void *p, size_t n)
{
	if (e->failed || e->done)
		return 0;
	if (ig_buf_append(&e->bytes, p, n) < 0) {
		e->failed = true;
		return -1;
	}
	return 0;
}

void ig_idem_end(struct ig_idem *s, struct ig_idem_entry *e, bool failed, uint64_t now_ms)
{
	if (e->done)
		return;
	e->done = true;
	e->failed = e->failed || failed;
	e->done_ms = now_ms;
	if (!e->dropped) {
		s->bytes += e->bytes.len; /* cost() counts them from now */
		ig_list_append(&s->entries, &e->link); /* by end: the oldest first */
	}
	if (e->failed)
		drop(s, e); /* readers already joined keep it until they are done */
	ig_idem_expire(s, now_ms);
}

void ig_idem_fail(struct ig_idem *s, struct ig_idem_entry *e, unsigned status, const char *body, uint64_t now_ms)
{
	if (e->done)
		return;
	if (!e->status) {
		e->status = status;
		free(e->content_type);
		e->content_type = strdup("application/json");
		ig_buf_reset(&e->bytes);
		ig_buf_append(&e->bytes, body, strlen(body));
	}
	ig_idem_end(s, e, true, now_ms);
	if (s->wake)
		s->wake(e);
}

void ig_idem_put(struct ig_idem *s, struct ig_idem_entry *e)
{
	if (--e->refs > 0)
		return;
	if (e->dropped)
		entry_free(e);
	else if (e->done && e->failed)
		drop(s, e);
}

void ig_idem_expire(struct ig_idem *s, uint64_t now_ms)
{
	struct ig_idem_entry *e, *next;
	IG_LIST_FOREACH_SAFE(e, next, &s->entries, struct ig_idem_entry, link) {
		/* only ended ones are here, by end: a running one is kept */
		if (now_ms - e->done_ms < s->ttl_ms && s->bytes <= s->max_bytes)
			break;
		drop(s, e);
	}
}
