/* breaks.h - deliberately broken behaviours, for the fault suite's own
 * tests: does its checker catch a broker that breaks an invariant?
 *
 * Compiled only into the test binary coordd-broken (COORD_TEST_BREAKS,
 * broker/meson.build); in coordd every BROKEN(x) is the constant 0 and the
 * code behind it is gone.  coordd-broken reads COORD_TEST_BREAK=name at
 * start; one name per invariant of the leadership fault gate:
 *   stale-write      claims accepted whatever their generation
 *   pending-drop     leader.pending lists nothing
 *   mode-ignored     claims and commits accepted in shadow / read-only
 *   no-ratchet       a newer version's grant does not raise the pin
 *   wipe-generation  generations not floored by the id allocator
 *   max-hold-kept    a term past its max hold is drained, never fenced
 *   claim-applied    a claim of an applied op answers claimed (fresh)
 *   disabled-ignored campaigns pass a disabled workstream
 *   long-lease       the default leadership lease is 30 s again
 *   etcd-fail-open   a commit etcd does not answer is answered applied
 *   etcd-poll        the etcd ledger as before its watch: a campaign
 *                    waiting for another machine's term re-reads the
 *                    leader key every 100 ms (no watch), and a term's
 *                    etcd lease is its lease_ms rounded up to seconds
 *                    (the failover measurement's baseline; the watch
 *                    test fails with it)
 *   superseded-accepted  a superseded flight owner's late result is
 *                    accepted (single-flight's stale-owner invariant)
 *   wipe-forgets-config  a start that creates the ledger (no data.mdb
 *                    was there: a first start or a wiped data dir) does
 *                    not read the config dir's descriptor files (SIGHUP
 *                    and broker.reload still do): a wipe loses the
 *                    files' policy until the next reload
 *   etcd-desc-unordered  descriptor writes of one workstream run at once
 *                    on the etcd ledger (each define's read and Txn
 *                    racing the others'), as before they were queued */
#ifndef COORD_BREAKS_H
#define COORD_BREAKS_H

#define COORD_BREAK_NAMES(X) \
    X(STALE_WRITE, "stale-write") \
    X(PENDING_DROP, "pending-drop") \
    X(MODE_IGNORED, "mode-ignored") \
    X(NO_RATCHET, "no-ratchet") \
    X(WIPE_GENERATION, "wipe-generation") \
    X(MAX_HOLD_KEPT, "max-hold-kept") \
    X(CLAIM_APPLIED, "claim-applied") \
    X(DISABLED_IGNORED, "disabled-ignored") \
    X(LONG_LEASE, "long-lease") \
    X(ETCD_FAIL_OPEN, "etcd-fail-open") \
    X(ETCD_POLL, "etcd-poll") \
    X(SUPERSEDED_ACCEPTED, "superseded-accepted") \
    X(WIPE_FORGETS_CONFIG, "wipe-forgets-config") \
    X(ETCD_DESC_UNORDERED, "etcd-desc-unordered")

enum {
#define BREAK_ENUM(id, name) BREAK_BIT_##id,
    COORD_BREAK_NAMES(BREAK_ENUM)
#undef BREAK_ENUM
};

#ifdef COORD_TEST_BREAKS
extern unsigned coord_breaks;
#define BROKEN(id) ((coord_breaks >> BREAK_BIT_##id) & 1u)
/* Reads COORD_TEST_BREAK; -1 (with the name in err) when unknown. */
int breaks_init(char *err, size_t errsize);
#else
#define BROKEN(id) 0
#endif

#endif
