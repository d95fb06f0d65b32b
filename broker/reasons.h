/* reasons.h - why something ended (a lock lost, a flight's owner replaced, a
 * leadership over): one enum for the code, one table of the names the wire
 * carries in `reason` fields.  Code never compares reason strings.
 * Append only: leadership's history stores a term's reason by its number. */
#ifndef COORD_REASONS_H
#define COORD_REASONS_H

#define COORD_REASONS(X) \
    X(REASON_NONE, NULL) \
    X(REASON_STOLEN, "stolen")             /* lock, leadership */ \
    X(REASON_EXPIRED, "expired")           /* lease not renewed */ \
    X(REASON_DISCONNECTED, "disconnected") /* a leader's connection closed */ \
    X(REASON_DISABLED, "disabled")         /* leader.disable */ \
    X(REASON_RESIGNED, "resigned")         /* leader.resign */ \
    X(REASON_DEADLINE, "deadline")         /* a flight owner past owner_ttl_ms */ \
    X(REASON_ORPHANED, "orphaned")         /* a flight's last follower left */ \
    X(REASON_DISCONNECT, "disconnect")     /* a flight owner's connection closed */ \
    X(REASON_INCIDENT, "incident")         /* leadership broken by an incident steal */ \
    X(REASON_MAX_HOLD, "max_hold")         /* a term past its descriptor's max hold */ \
    X(REASON_REQUESTED, "requested")       /* a drain asked by another connection */ \
    X(REASON_SELF, "self")                 /* a drain the leader announced */ \
    X(REASON_RESTART, "restart")           /* a term live when its broker stopped */ \
    X(REASON_LEDGER_UNAVAILABLE, "ledger-unavailable") /* a remote ledger out of reach */ \
    X(REASON_ABORTED, "aborted")           /* a term stored but never handed out */ \
    X(REASON_PURGED, "purged")             /* a flight under a record.purge (logout) */ \
    X(REASON_SUPERSEDED, "superseded")     /* a flight owner replaced by a fresh join */

enum reason {
#define REASON_ENUM(id, name) id,
    COORD_REASONS(REASON_ENUM)
#undef REASON_ENUM
};

/* The wire name, NULL for REASON_NONE. */
static inline const char *reason_name(enum reason r)
{
    static const char *const names[] = {
#define REASON_NAME(id, name) name,
        COORD_REASONS(REASON_NAME)
#undef REASON_NAME
    };
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : NULL;
}

#endif
