/* The one doubly linked list of the tree: intrusive and circular, with a
 * head that is itself a link, after HAProxy's include/haproxy/list.h and
 * Linux's list.h. An object is on a list through a `struct ig_list` field
 * of its own; the same object can be on several lists through several
 * fields. No allocation, O(1) insert and delete, and a deleted link points
 * to itself, so deleting twice or testing membership is safe.
 *
 *	struct ig_list reqs;                 // the head
 *	struct req { struct ig_list link; }; // the element
 *	ig_list_init(&reqs);
 *	ig_list_append(&reqs, &r->link);
 *	IG_LIST_FOREACH_SAFE(it, tmp, &reqs, struct req, link) ig_list_del(&it->link);
 */
#ifndef IG_LIST_H
#define IG_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct ig_list {
	struct ig_list *next, *prev;
};

/* The object that holds link `l` in its field `member`. */
#define IG_LIST_ELEM(l, type, member) ((type *)(void *)((char *)(l) - offsetof(type, member)))

/* An empty list, or a link on no list. */
static inline void ig_list_init(struct ig_list *l) { l->next = l->prev = l; }

static inline bool ig_list_empty(const struct ig_list *l) { return l->next == l; }

/* A link that is on a list (its own fields point elsewhere). */
static inline bool ig_list_linked(const struct ig_list *l) { return l->next != l; }

/* Adds `el` at the end of list `head` (`el` must be on no list). */
static inline void ig_list_append(struct ig_list *head, struct ig_list *el)
{
	el->prev = head->prev;
	el->next = head;
	head->prev->next = el;
	head->prev = el;
}

/* Adds `el` at the front of list `head`. */
static inline void ig_list_insert(struct ig_list *head, struct ig_list *el)
{
	el->next = head->next;
	el->prev = head;
	head->next->prev = el;
	head->next = el;
}

/* Takes `el` off its list (a link on no list stays as it is). */
static inline void ig_list_del(struct ig_list *el)
{
	el->prev->next = el->next;
	el->next->prev = el->prev;
	ig_list_init(el);
}

/* The first element, or NULL when the list is empty. */
#define IG_LIST_FIRST(head, type, member) \
	(ig_list_empty(head) ? NULL : IG_LIST_ELEM((head)->next, type, member))

/* Walks the list; `it` may not be deleted inside (use _SAFE for that). */
#define IG_LIST_FOREACH(it, head, type, member)                                    \
	for (it = IG_LIST_ELEM((head)->next, type, member); &it->member != (head); \
	     it = IG_LIST_ELEM(it->member.next, type, member))

/* Walks the list; `it` may be deleted (or freed) inside, `tmp` is the next. */
#define IG_LIST_FOREACH_SAFE(it, tmp, head, type, member)                               \
	for (it = IG_LIST_ELEM((head)->next, type, member),                             \
	    tmp = IG_LIST_ELEM(it->member.next, type, member);                          \
	     &it->member != (head);                                                     \
	     it = tmp, tmp = IG_LIST_ELEM(tmp->member.next, type, member))

#endif
