/* events.h - lifecycle events of the tables, published on the broker's
 * reserved channels (-locks, -flights, -leaders) of the scope of the thing
 * they describe (taken from its scoped key).  Never a result payload. */
#ifndef COORD_EVENTS_H
#define COORD_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "reasons.h"

struct lock_req;

#include "channels.h"

/* what: granted, released, lost (reason: stolen, expired).  Inline up to
 * the check whether anyone listens, which nearly always says no. */
void events_lock_publish(const char *what, const struct lock_req *r, enum reason reason);
static inline void events_lock(const char *what, const struct lock_req *r,
                               enum reason reason)
{
    if (channels_watched(CH_LOCKS))
        events_lock_publish(what, r, reason);
}

struct conn;

/* A flight's transition as -flights shows it.  what: started, joined,
 * completed, failed, promoted, owner_lost, fenced, purged, superseded,
 * follower_timeout, read_failed. */
struct flight_event {
    const char *what;
    uint64_t flight, fence;
    const uint8_t *skey;
    size_t sklen;
    enum reason reason;
    const struct conn *owner;      /* the owner concerned, NULL: none */
    uint64_t started_ms;           /* wall clock: that owner's start, 0: none */
    uint64_t deadline_ms;          /* wall clock: its owner_ttl_ms ends, 0: none */
    const uint8_t *version;        /* that owner's version */
    size_t version_len;
    bool failed;                   /* code and retryable are set */
    const uint8_t *code;
    size_t code_len;
    bool retryable;
    int64_t duration_ms;           /* the owner's run, -1: none */
    int64_t wait_ms;               /* a follower's wait, -1: none */
};
void events_flight(const struct flight_event *ev);

/* what: elected, renewed, lost, resigned, disabled, enabled. */
void events_leader(const char *what, const uint8_t *skey, size_t sklen,
                   uint64_t generation, enum reason reason);
/* The same with an incident's text (incident_len 0: none) and a rollout
 * mode (enum ws_mode, -1: none). */
void events_leader_ex(const char *what, const uint8_t *skey, size_t sklen,
                      uint64_t generation, enum reason reason,
                      const uint8_t *incident, size_t incident_len, int mode);

#endif
