/* coord-codes.h - the error codes of coord, one table for the broker, the
 * library and the CLI.  Installed beside coord.h because the library returns
 * these numbers.
 *
 * The first block are the wire codes of protocol v1 (the string travels in
 * the 'code' field of an error reply).  The second block exists only inside
 * the client library: things that go wrong before or after the wire. */
#ifndef COORD_CODES_H
#define COORD_CODES_H

/* The wire protocol version this code speaks (hello's proto). */
#define COORD_PROTO_VERSION 1

/* X(enum suffix, value, wire name or NULL, short text) */
#define COORD_ERRORS(X)                                                        \
    X(BAD_FRAME,       -1, "BAD_FRAME",       "malformed frame")               \
    X(HELLO_REQUIRED,  -2, "HELLO_REQUIRED",  "hello must be the first request") \
    X(PROTO_VERSION,   -3, "PROTO_VERSION",   "unsupported protocol version")  \
    X(BAD_REQUEST,     -4, "BAD_REQUEST",     "bad request field")             \
    X(UNKNOWN_OP,      -5, "UNKNOWN_OP",      "unknown operation")             \
    X(INVALID_OPTIONS, -6, "INVALID_OPTIONS", "invalid combination of options") \
    X(NAME_RESERVED,   -7, "NAME_RESERVED",   "name is reserved for the broker") \
    X(TOO_LARGE,       -8, "TOO_LARGE",       "value too large")               \
    X(LIMIT,           -9, "LIMIT",           "broker limit reached")          \
    X(ABORTED,        -10, "ABORTED",         "request aborted")               \
    X(TIMEOUT,        -11, "TIMEOUT",         "timed out")                     \
    X(FENCED,         -12, "FENCED",          "stale fence or generation")     \
    X(NOT_FOUND,      -13, "NOT_FOUND",       "not found")                     \
    X(UNKNOWN_LOCK,   -14, "UNKNOWN_LOCK",    "lock not held by this connection") \
    X(DISABLED,       -15, "DISABLED",        "workstream disabled")           \
    X(STORAGE,        -16, "STORAGE",         "storage error")                 \
    X(SHUTTING_DOWN,  -17, "SHUTTING_DOWN",   "broker is shutting down")       \
    X(PROTOCOL_PINNED,-18, "PROTOCOL_PINNED", "protocol older than the workstream's pin") \
    X(POLICY,         -19, "POLICY",          "forbidden by the workstream's descriptor") \
    X(READ_ONLY,      -20, "READ_ONLY",       "workstream is in a read-only rollout mode") \
    X(DRAINING,       -21, "DRAINING",        "leader is draining")            \
    X(UNAVAILABLE,    -22, "UNAVAILABLE",     "ledger unavailable (outcome unknown)") \
    X(CONNECT,        -50, NULL,              "cannot reach the broker")       \
    X(CLOSED,         -51, NULL,              "connection to the broker closed") \
    X(PROTOCOL,       -52, NULL,              "broker sent a malformed reply") \
    X(NOMEM,          -53, NULL,              "out of memory")                 \
    X(INVAL,          -54, NULL,              "invalid argument")              \
    X(SYS,            -55, NULL,              "system call failed (see errno)") \
    X(AGAIN,          -56, NULL,              "no reply yet")                  \
    X(UNKNOWN,        -57, NULL,              "unknown error code from broker") \
    X(OVERFLOW,       -58, NULL,              "too many events queued unread") \
    X(UNSUPPORTED,    -59, NULL,              "the broker does not take descriptors")

enum coord_error {
    COORD_OK = 0,
#define COORD_X_ENUM(name, value, wire, text) COORD_E##name = (value),
    COORD_ERRORS(COORD_X_ENUM)
#undef COORD_X_ENUM
};

#endif
