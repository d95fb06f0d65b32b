/* list.h - intrusive doubly linked lists: every table of the broker links
 * its entries through one of these, so unlinking is O(1) and allocation
 * free. */
#ifndef COORD_LIST_H
#define COORD_LIST_H

#include <stddef.h>
#include <stdbool.h>

struct list {
    struct list *prev, *next;
};

#define LIST_INIT(name) { &(name), &(name) }

static inline void list_init(struct list *l) { l->prev = l->next = l; }
static inline bool list_empty(const struct list *l) { return l->next == l; }
/* A node unlinked with list_del is self-linked, so this tells membership. */
static inline bool list_linked(const struct list *n) { return n->next != n; }

static inline void list_insert_before(struct list *pos, struct list *n)
{
    n->prev = pos->prev;
    n->next = pos;
    pos->prev->next = n;
    pos->prev = n;
}

static inline void list_append(struct list *head, struct list *n)
{
    list_insert_before(head, n);
}

static inline void list_del(struct list *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}

/* Unlinks and returns the first node of a list that is not empty.  The
 * loop that empties a list while freeing its entries, `while
 * (!list_empty(h)) drop(list_entry(list_shift(h), ...))`, written with it
 * rather than with h->next: the store to h->next is then direct, and
 * clang's analyzer sees the list move on (through n->prev it cannot, and
 * reports the freed entry as used again). */
static inline struct list *list_shift(struct list *head)
{
    struct list *n = head->next;
    head->next = n->next;
    n->next->prev = head;
    n->prev = n->next = n;
    return n;
}

#define list_entry(ptr, type, member) \
    ((type *)((char *)(ptr) - offsetof(type, member)))

#define list_first(head, type, member) \
    (list_empty(head) ? NULL : list_entry((head)->next, type, member))

/* Safe against removal of the current node. */
#define list_for_each_safe(pos, tmp, head) \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
         (pos) = (tmp), (tmp) = (pos)->next)

#endif
