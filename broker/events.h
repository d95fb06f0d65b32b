/* events.h - lifecycle events of the tables, published on the broker's
 * reserved channels (-locks, -flights, -leaders).  Never a result payload. */
#ifndef COORD_EVENTS_H
#define COORD_EVENTS_H

struct broker;
struct lock_req;

/* what: granted, released, lost (reason: stolen, expired). */
void events_lock(struct broker *b, const char *what, const struct lock_req *r,
                 const char *reason);

#endif
