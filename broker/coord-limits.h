/* coord-limits.h - the broker's fixed limits, each named once with its trade-off.
 *
 * Limits a deployment may want to change are options (broker_options in
 * broker.h, --max-* flags); these are the ones that protect the broker from
 * a single client and need no tuning.  Error texts are built from these
 * names, never typed again.  The limits a client can see (sizes and
 * durations it is refused past, lists it is cut at) are the protocol's:
 * protocol/coord-wire-limits.h, included here; this file keeps the ones
 * only the broker's own working shows. */
#ifndef COORD_LIMITS_H
#define COORD_LIMITS_H

#include <stdint.h>
#include "coord-wire-limits.h"

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

/* The broker-wide budget of held state (budget.h) by default, in entries:
 * locks held, requests waiting, flights owned or watched, subscriptions.
 * An entry costs a few hundred bytes with its name, so the default bounds
 * them near 0.5 GiB for all clients together; a machine's users hold
 * thousands, not millions.  Lower: a flood of clients is refused sooner;
 * higher: more memory before anyone is refused.  --max-held sets it. */
#define LIMIT_HELD_DEFAULT 1048576u

/* Single-flight gates: disabled key prefixes (the kill switch, an
 * operator's few) and keys in backoff at once (each holds a failure's
 * text for at most LIMIT_WAIT_MS; past the cap a backoff is not kept). */
#define LIMIT_DISABLED_PREFIXES 1024u
#define LIMIT_BACKOFFS 65536u
/* At exit, the leases of every live etcd term are revoked at once, all of
 * them within this (ms).  Revoking lets another broker lead at once; a
 * lease not revoked in time expires by itself (its lease_ms later).
 * Longer: more terms handed over at once when etcd is slow; shorter: a
 * SIGTERM with etcd out of reach exits sooner (systemd waits 90 s). */
#define LIMIT_EXIT_REVOKE_MS 2000u
/* The TTL (seconds) a term's etcd lease asks for, whatever the term's own
 * lease_ms: etcd raises it to its minimum, ceil(1.5 x its election
 * timeout) (2 s with etcd's default 1 s election timeout, 1 s with 666 ms
 * or less), and the broker keeps what etcd granted.  The lease is what
 * another machine waits out when this broker dies (kill -9, power):
 * failover takes 2/3..1 TTL plus etcd's expiry sweep (up to 0.5 s).  The
 * price of a short one: a keepalive every TTL/3 per term, and a term is
 * lost (ledger-unavailable) when etcd acknowledges none for TTL - TTL/5
 * (an etcd leader election or disk stall that long costs the term).
 * Longer: terms ride out longer etcd stalls, failover after a broker's
 * death waits longer. */
#define LIMIT_ETCD_LEASE_TTL_S 1u

/* Memory given back to the system: after a connection that held at least
 * LIMIT_TRIM_ENTRIES locks, flights, subscriptions and waiting requests
 * closes (or had LIMIT_TRIM_BYTES of buffers), malloc_trim(0) runs, at
 * most once per LIMIT_TRIM_INTERVAL_MS.  A trim walks the heap (a few ms
 * for hundreds of MiB): rare enough not to cost latency, often enough
 * that a burst's memory is not kept for the broker's life. */
#define LIMIT_TRIM_ENTRIES 4096u
#define LIMIT_TRIM_BYTES (4u << 20)
#define LIMIT_TRIM_INTERVAL_MS 1000u

/* Bytes kept free after the last list entry (the closing fields, such as
 * "truncated": true). */
#define LIMIT_LIST_TAIL 64u

/* The largest result by reference the broker takes by default (hello's
 * max_ref_bytes; coordd --max-ref-bytes N).  Its bytes never pass through
 * the broker's buffers (followers get descriptors of the owner's sealed
 * memfd), so this is not a memory bound of the broker's but what one key's
 * durable record may make the data dir hold (DATA_DIR/results) and what a
 * follower is handed to map.  Larger: bigger artefacts deduplicated; smaller:
 * less disk per record.  1 GiB: far above what a coordination result is,
 * below what fills a home directory by accident. */
#define LIMIT_MAX_REF_BYTES_DEFAULT (1ull << 30)

#endif
