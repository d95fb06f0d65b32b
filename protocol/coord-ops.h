/* coord-ops.h - the wire vocabulary of coord: every op a request can name
 * and every event the broker sends, one list for the broker, the library
 * and the CLI (as coord-codes.h is for the error codes).
 *
 * The op list is in the broker's dispatch order, which is also the order of
 * the `requests` map in stats; a new op goes at the end of its group.  The
 * look-ups are inline and header-only: the names are a small fixed table,
 * and a user of the list needs nothing but this file. */
#ifndef COORD_PROTO_OPS_H
#define COORD_PROTO_OPS_H

#include <stddef.h>
#include <string.h>

/* X(enum suffix, wire name) */
#define COORD_OPS(X)                                \
    X(HELLO,            "hello")                    \
    X(PING,             "ping")                     \
    X(CANCEL,           "cancel")                   \
    X(STATS,            "stats")                    \
    X(LOCK_ACQUIRE,     "lock.acquire")             \
    X(LOCK_RELEASE,     "lock.release")             \
    X(LOCK_RENEW,       "lock.renew")               \
    X(LOCK_QUERY,       "lock.query")               \
    X(FLIGHT_JOIN,      "flight.join")              \
    X(FLIGHT_COMPLETE,  "flight.complete")          \
    X(FLIGHT_FAIL,      "flight.fail")              \
    X(FLIGHT_LIST,      "flight.list")              \
    X(FLIGHT_DISABLE,   "flight.disable")           \
    X(FLIGHT_ENABLE,    "flight.enable")            \
    X(FLIGHT_DISABLED,  "flight.disabled")          \
    X(FLIGHT_UNREF,     "flight.unref")             \
    X(RECORD_GET,       "record.get")               \
    X(RECORD_LIST,      "record.list")              \
    X(RECORD_PURGE,     "record.purge")             \
    X(LEADER_CAMPAIGN,  "leader.campaign")          \
    X(LEADER_RENEW,     "leader.renew")             \
    X(LEADER_RESIGN,    "leader.resign")            \
    X(LEADER_COMMIT,    "leader.commit")            \
    X(LEADER_READ,      "leader.read")              \
    X(LEADER_INFO,      "leader.info")              \
    X(LEADER_DISABLE,   "leader.disable")           \
    X(LEADER_ENABLE,    "leader.enable")            \
    X(LEADER_DEFINE,    "leader.define")            \
    X(LEADER_DESCRIBE,  "leader.describe")          \
    X(LEADER_DRAIN,     "leader.drain")             \
    X(LEADER_HISTORY,   "leader.history")           \
    X(LEADER_CLAIM,     "leader.claim")             \
    X(LEADER_ABANDON,   "leader.abandon")           \
    X(LEADER_PENDING,   "leader.pending")           \
    X(LEADER_CHECK,     "leader.check")             \
    X(SUB_SUBSCRIBE,    "sub.subscribe")            \
    X(SUB_UNSUBSCRIBE,  "sub.unsubscribe")          \
    X(SUB_PUBLISH,      "sub.publish")      \
    X(BROKER_RELOAD,    "broker.reload")

/* X(enum suffix, wire name): the `ev` of the frames without a rid. */
#define COORD_EVENTS(X)                             \
    X(LOCK_LOST,        "lock.lost")                \
    X(FLIGHT_ABORT,     "flight.abort")             \
    X(FLIGHT_UPDATED,   "flight.updated")           \
    X(LEADER_LOST,      "leader.lost")              \
    X(LEADER_DRAIN,     "leader.drain")             \
    X(LEADER_MODE,      "leader.mode")              \
    X(MESSAGE,          "message")                  \
    X(LIFECYCLE,        "lifecycle")

enum coord_op {
#define COORD_X_ENUM(name, wire) COORD_OP_##name,
    COORD_OPS(COORD_X_ENUM)
#undef COORD_X_ENUM
    COORD_OP_COUNT
};

enum coord_event {
#define COORD_X_ENUM(name, wire) COORD_EV_##name,
    COORD_EVENTS(COORD_X_ENUM)
#undef COORD_X_ENUM
    COORD_EV_COUNT
};

/* A wire name and its length (names are compared with the length first). */
struct coord_wire_name {
    const char *name;
    size_t len;
};

static inline const struct coord_wire_name *coord__op_names(void)
{
    static const struct coord_wire_name names[] = {
#define COORD_X_ROW(name, wire) { wire, sizeof wire - 1 },
        COORD_OPS(COORD_X_ROW)
#undef COORD_X_ROW
    };
    return names;
}

static inline const struct coord_wire_name *coord__event_names(void)
{
    static const struct coord_wire_name names[] = {
#define COORD_X_ROW(name, wire) { wire, sizeof wire - 1 },
        COORD_EVENTS(COORD_X_ROW)
#undef COORD_X_ROW
    };
    return names;
}

/* Wire name of op ("lock.acquire"), or NULL when op is not in the list.
 * Static storage. */
static inline const char *coord_op_name(enum coord_op op)
{
    return (unsigned)op < COORD_OP_COUNT ? coord__op_names()[op].name : NULL;
}

/* The op named by the len bytes at name (not NUL-ended), or -1. */
static inline int coord_op_from_name(const void *name, size_t len)
{
    const struct coord_wire_name *t = coord__op_names();
    for (int i = 0; i < COORD_OP_COUNT; i++)
        if (t[i].len == len && memcmp(t[i].name, name, len) == 0)
            return i;
    return -1;
}

/* Wire name of ev ("lock.lost"), or NULL when ev is not in the list.
 * Static storage. */
static inline const char *coord_event_name(enum coord_event ev)
{
    return (unsigned)ev < COORD_EV_COUNT ? coord__event_names()[ev].name : NULL;
}

/* The event named by the len bytes at name (not NUL-ended), or -1. */
static inline int coord_event_from_name(const void *name, size_t len)
{
    const struct coord_wire_name *t = coord__event_names();
    for (int i = 0; i < COORD_EV_COUNT; i++)
        if (t[i].len == len && memcmp(t[i].name, name, len) == 0)
            return i;
    return -1;
}

#endif
