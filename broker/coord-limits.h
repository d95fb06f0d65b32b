/* coord-limits.h - the broker's fixed limits, each named once with its trade-off.
 *
 * Limits a deployment may want to change are options (broker_options in
 * broker.h, --max-* flags); these are the ones that protect the broker from
 * a single client and need no tuning.  Error texts are built from these
 * names, never typed again. */
#ifndef COORD_LIMITS_H
#define COORD_LIMITS_H

#include <stdint.h>

/* Bytes of frames one connection may make the broker process in one loop
 * turn (one read of this size).  Larger: fewer wake-ups for a pipelining
 * client; smaller: a bystander's reply waits less behind it.  64 KiB is
 * about 1,500 small requests, well under a millisecond of work. */
#define LIMIT_READ_PER_TURN (64u * 1024)

/* Bytes all connections together may hold in partial frames (a frame whose
 * length arrived but whose body has not).  Past it the connection holding
 * the largest partial frame is cut off.  A frame is at most max_frame, so
 * this allows max_frame-sized uploads from many clients at once, while 200
 * clients parked one byte short of 1 MiB cannot take 200 MiB. */
#define LIMIT_PARTIAL_TOTAL (64u << 20)

/* Output backpressure.  After a request whose processing leaves at least
 * the pause mark queued to its connection, the broker reads and dispatches
 * none of that connection's further requests until its output drains below
 * the mark again: a pipelining client slows down to the pace it reads at,
 * it is never cut for it.  The mark is LIMIT_OUTBUF_PAUSE, or less when
 * --max-outbuf leaves less room than that above one max_frame reply
 * (max_outbuf - max_frame - COORD_FRAME_HEADER).  Larger: more replies in
 * flight per write (a bit more throughput for small replies); smaller:
 * less memory held per pipelining client.  256 KiB is above a unix
 * socket's buffer, so the kernel's queue stays full. */
#define LIMIT_OUTBUF_PAUSE (256u * 1024)
/* The least pause mark --max-outbuf may leave: a --max-outbuf below
 * max_frame + COORD_FRAME_HEADER + this is refused at start (one largest
 * reply could never be queued). */
#define LIMIT_OUTBUF_MIN_MARK 1024u
/* A paused connection (above the mark) whose output makes no progress at
 * all (the kernel takes none of it) for this long is cut off: it is not
 * reading.  Longer: a client stopped in a debugger or a long GC pause keeps
 * its locks; shorter: a stuck client's locks are freed sooner.  Output
 * past --max-outbuf (events it does not read, or deferred replies) cuts at
 * once, whatever the time. */
#define LIMIT_OUTBUF_STALL_MS 10000u

/* Per connection: locks held (leaderships included), flights owned, and
 * channel subscriptions.  Past them the request gets LIMIT.  One process
 * has no use for more; a runaway one cannot grow the broker without bound
 * (a held lock costs about 400 bytes). */
#define LIMIT_CONN_LOCKS 65536u
#define LIMIT_CONN_FLIGHTS 65536u
#define LIMIT_CONN_SUBS 65536u

/* The broker-wide budget of held state (budget.h) by default, in entries:
 * locks held, requests waiting, flights owned or watched, subscriptions.
 * An entry costs a few hundred bytes with its name, so the default bounds
 * them near 0.5 GiB for all clients together; a machine's users hold
 * thousands, not millions.  Lower: a flood of clients is refused sooner;
 * higher: more memory before anyone is refused.  --max-held sets it. */
#define LIMIT_HELD_DEFAULT 1048576u

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

/* Single-flight gates: disabled key prefixes (the kill switch, an
 * operator's few) and keys in backoff at once (each holds a failure's
 * text for at most LIMIT_WAIT_MS; past the cap a backoff is not kept). */
#define LIMIT_DISABLED_PREFIXES 1024u
#define LIMIT_BACKOFFS 65536u
/* Callers served a stale result that asked to hear when its revalidation
 * ends (notify), per connection. */
#define LIMIT_CONN_WATCHES 65536u
/* A flight's version (flight.join's version: the version of the code that
 * runs the work), bytes.  Kept inline in every flight and waiting join,
 * and in the completion record; a build id or a semver fits. */
#define LIMIT_FLIGHT_VERSION 64u

/* At exit, the leases of every live etcd term are revoked at once, all of
 * them within this (ms).  Revoking lets another broker lead at once; a
 * lease not revoked in time expires by itself (its lease_ms later).
 * Longer: more terms handed over at once when etcd is slow; shorter: a
 * SIGTERM with etcd out of reach exits sooner (systemd waits 90 s). */
#define LIMIT_EXIT_REVOKE_MS 2000u

/* Memory given back to the system: after a connection that held at least
 * LIMIT_TRIM_ENTRIES locks, flights, subscriptions and waiting requests
 * closes (or had LIMIT_TRIM_BYTES of buffers), malloc_trim(0) runs, at
 * most once per LIMIT_TRIM_INTERVAL_MS.  A trim walks the heap (a few ms
 * for hundreds of MiB): rare enough not to cost latency, often enough
 * that a burst's memory is not kept for the broker's life. */
#define LIMIT_TRIM_ENTRIES 4096u
#define LIMIT_TRIM_BYTES (4u << 20)
#define LIMIT_TRIM_INTERVAL_MS 1000u

/* A flight's failure: error code and message from the owner (bytes). */
#define LIMIT_ERROR_CODE 256u
#define LIMIT_ERROR_MESSAGE 4096u

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
/* Bytes kept free after the last list entry (the closing fields, such as
 * "truncated": true). */
#define LIMIT_LIST_TAIL 64u

#endif
