/* events.h - lifecycle events of the tables, published on the broker's
 * reserved channels (-locks, -flights, -leaders).  Never a result payload. */
#ifndef COORD_EVENTS_H
#define COORD_EVENTS_H

#include <stddef.h>
#include <stdint.h>

struct broker;
struct lock_req;

/* what: granted, released, lost (reason: stolen, expired). */
void events_lock(struct broker *b, const char *what, const struct lock_req *r,
                 const char *reason);

/* what: started, joined, completed, failed, promoted, owner_lost, fenced.
 * skey is the scoped key (scope_len bytes of scope after 4 length bytes). */
void events_flight(struct broker *b, const char *what, uint64_t flight, uint64_t fence,
                   const uint8_t *skey, size_t sklen, uint32_t scope_len,
                   const char *reason);

/* what: elected, renewed, lost, resigned, disabled, enabled. */
void events_leader(struct broker *b, const char *what, const uint8_t *skey, size_t sklen,
                   uint32_t scope_len, uint64_t generation, const char *reason);

#endif
