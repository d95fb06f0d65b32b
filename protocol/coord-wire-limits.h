/* coord-wire-limits.h - the limits a client can see, each named once with
 * its trade-off: the sizes, counts and durations past which a request is
 * refused (INVALID_OPTIONS, TOO_LARGE, LIMIT) or a list is cut, and the
 * defaults a request gets when it names none.  Beside the error codes
 * (coord-codes.h) because both are the protocol's: the broker enforces
 * them, and the clients (libcoord, client/python, client/node) bound what
 * they send by them; tests/clients/check_constants.py checks the Python and
 * Node copies against this file.  The broker's own limits, which no client
 * sees, are broker/coord-limits.h. */
#ifndef COORD_WIRE_LIMITS_H
#define COORD_WIRE_LIMITS_H

/* Bytes kept free in a reply frame for the fields around a payload (rid,
 * ok, fence, ages, source): a result, value or message may be at most
 * max_frame minus this.  The broker's smallest max_frame leaves 768 bytes
 * of payload. */
#define LIMIT_REPLY_OVERHEAD 256u
/* The smallest --max-frame.  Names (locks, keys, channels) are at most
 * 1024 bytes and at most max_frame - LIMIT_REPLY_OVERHEAD, so that every
 * event and reply that carries one fits the frame limit too. */
#define LIMIT_MIN_FRAME 1024u
#define LIMIT_NAME 1024u
/* hello's scope, client name and instance id (bytes). */
#define LIMIT_SCOPE 1024u
#define LIMIT_CLIENT_NAME 256u
#define LIMIT_INSTANCE 128u

/* Durations in requests (milliseconds).  Waits, leases and owner TTLs are
 * at most a day; keep_ms (how long a record lives) and max_age_ms (the age
 * of a record a join accepts) at most a year.  Larger values are refused
 * with INVALID_OPTIONS rather than clamped, so a unit mistake (seconds as
 * microseconds) is seen at once; and no deadline can wrap. */
#define LIMIT_WAIT_MS (24ull * 3600 * 1000)
#define LIMIT_KEEP_MS (366ull * 24 * 3600 * 1000)

/* Leadership: scope and workstream together, a committed key and an op id
 * (bytes).  They make LMDB keys (at most 511 bytes): u16 + scoped
 * workstream + key or op id. */
#define LIMIT_WORKSTREAM 200u
#define LIMIT_LEADER_KEY 256u
#define LIMIT_OP_ID 256u

/* Leadership: the lease a campaign gets when it names none (lease_ms
 * absent or 0), in milliseconds.  A leader that stops renewing (killed
 * without its connection closing, frozen by SIGSTOP or a debugger, its
 * machine suspended, its heartbeats delayed) keeps the workstream until
 * its lease runs out, so the lease bounds how long a workstream goes
 * without a working leader: 1.5 s, renewed every lease/3 (500 ms) by the
 * clients, keeps a frozen leader's replacement under 2 s.  The price: a
 * leader stalled longer than its lease (a GC pause, a swapped-out process,
 * a renew stuck behind a busy event loop) loses its term and its late
 * writes are FENCED, which is the point; work that must survive long
 * stalls asks for a longer lease_ms explicitly. */
#define LEADER_DEFAULT_LEASE_MS 1500u

/* A completion record's scope and key together (bytes): LMDB keys are at
 * most 511 bytes, and the expiry index adds 8 before and after. */
#define LIMIT_RECORD_KEY 480u

/* A channel message (bytes): one publish is copied to every subscriber's
 * output, so a large one multiplies; 64 KiB is plenty for notifications. */
#define LIMIT_MESSAGE (64u * 1024)

/* A flight's failure: error code and message from the owner (bytes). */
#define LIMIT_ERROR_CODE 256u
#define LIMIT_ERROR_MESSAGE 4096u

/* Per connection: locks held (leaderships included), flights owned, and
 * channel subscriptions.  Past them the request gets LIMIT.  One process
 * has no use for more; a runaway one cannot grow the broker without bound
 * (a held lock costs about 400 bytes). */
#define LIMIT_CONN_LOCKS 65536u
#define LIMIT_CONN_FLIGHTS 65536u
#define LIMIT_CONN_SUBS 65536u

/* Callers served a stale result that asked to hear when its revalidation
 * ends (notify), per connection. */
#define LIMIT_CONN_WATCHES 65536u

/* Leadership descriptors and outbox.
 * Protocol names: 1..64 bytes of A-Z a-z 0-9 . _ -, a version 1..2^32-1. */
#define LIMIT_PROTOCOL_NAME 64u
/* A descriptor's fallback: text the broker only stores and returns. */
#define LIMIT_FALLBACK 64u
/* A descriptor's lock name (lockName): the leadership lock's name. */
#define LIMIT_LOCK_NAME 200u
/* Its capabilities, "a,b" (desc-file.h's normalised form). */
#define LIMIT_CAPS_TEXT 255u
/* A flight's version (flight.join's version: the version of the code that
 * runs the work), bytes.  Kept inline in every flight and waiting join,
 * and in the completion record; a build id or a semver fits. */
#define LIMIT_FLIGHT_VERSION 64u
/* An incident's text, and an abandon's reason. */
#define LIMIT_INCIDENT 256u
/* Terms kept per workstream (leader.history answers at most these). */
#define LIMIT_HISTORY 100u
/* Unsettled claims per workstream: a leader that claims without ever
 * settling is told LIMIT before its pending list outgrows a reply's walk. */
#define LIMIT_CLAIMS 100000u
/* leader.pending answers at most this many per request. */
#define LIMIT_PENDING_LIST 1000u

/* Results by reference (a sealed memfd passed with SCM_RIGHTS):
 * descriptors a connection may have sent and not yet claimed with a frame
 * that declares one (result_fd); past it, BAD_FRAME.  A well-behaved client
 * has at most one queued (its frame arrives with it).  The largest result
 * by reference is the broker's option (hello's max_ref_bytes;
 * LIMIT_MAX_REF_BYTES_DEFAULT in broker/coord-limits.h). */
#define LIMIT_FDS_QUEUED 4u
/* result_ref a connection without descriptors may hold at once (each is an
 * open descriptor in the broker until flight.unref or close).  Past it a
 * result by reference is refused to it with LIMIT. */
#define LIMIT_CONN_REFS 1024u

#endif
