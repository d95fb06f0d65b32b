/* events.h - lifecycle events of the tables, published on the broker's
 * reserved channels (-locks, -flights, -leaders) of the scope of the thing
 * they describe (taken from its scoped key).  Never a result payload. */
#ifndef COORD_EVENTS_H
#define COORD_EVENTS_H

#include <stddef.h>
#include <stdint.h>
#include "reasons.h"

struct lock_req;

/* what: granted, released, lost (reason: stolen, expired). */
void events_lock(const char *what, const struct lock_req *r, enum reason reason);

/* what: started, joined, completed, failed, promoted, owner_lost, fenced. */
void events_flight(const char *what, uint64_t flight, uint64_t fence,
                   const uint8_t *skey, size_t sklen, enum reason reason);

/* what: elected, renewed, lost, resigned, disabled, enabled. */
void events_leader(const char *what, const uint8_t *skey, size_t sklen,
                   uint64_t generation, enum reason reason);
/* The same with an incident's text (incident_len 0: none) and a rollout
 * mode (enum ws_mode, -1: none). */
void events_leader_ex(const char *what, const uint8_t *skey, size_t sklen,
                      uint64_t generation, enum reason reason,
                      const uint8_t *incident, size_t incident_len, int mode);

#endif
