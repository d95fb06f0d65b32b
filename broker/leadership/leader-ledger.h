/* leader-ledger.h - the leader ledger: where leadership's durable state
 * lives, behind one interface.
 *
 * Leadership (leaders.c) keeps what is live in memory: who leads, leases,
 * the campaigns that wait.  Everything that must survive a crash, or be
 * shared with other machines, is the ledger's: each workstream's last
 * generation and disabled flag, the values committed and the op ids
 * applied.  Two facts make the fence: a generation is stored before it is
 * handed out, and a commit is applied only if its generation is the one
 * stored, in the same atomic step that records its op id.
 *
 * Every call is asynchronous.  The caller fills a request it owns
 * (struct ll_req) and hands it to ll_submit; the backend answers through
 * req->done on the loop thread, never inside ll_submit.  A request carries
 * copies of all it needs: a backend touches only the request and its own
 * storage.  The backend is chosen at start by name (leader-ledger.c):
 * "local" is LMDB (leader-lmdb.c, on the broker's ledger and its writer
 * thread); "etcd" is a cluster shared by several machines' brokers
 * (leader-etcd.c, through etcd's JSON gateway).
 *
 * What a backend decides, it decides inside its own atomic step, never from
 * the broker's memory: the generation of a commit, claim or abandon against
 * the stored one; the rollout mode (READ_ONLY) against the stored
 * descriptor; the pin of a campaign against the stored pin.  Live state
 * (who leads now, draining) is the caller's.
 *
 * status: 0, or a negative COORD_E* code: FENCED (commit, claim, abandon:
 * not the stored generation), DISABLED (bump of a disabled workstream),
 * PROTOCOL_PINNED (bump, define), READ_ONLY (commit, claim, abandon in
 * shadow or read-only mode), LIMIT (claim past LIMIT_CLAIMS), STORAGE (why
 * in req->why when known), UNAVAILABLE (a remote ledger out of reach: the
 * outcome of a write is then unknown). */
#ifndef COORD_LEADER_LEDGER_H
#define COORD_LEADER_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "leader-desc.h"
#include "store.h"

enum ll_op {
    LL_LOAD,           /* -> generation, disabled, descriptor */
    LL_BUMP,           /* a term starts: generation = max(stored + 1, floor) and
                          its history entry, stored; DISABLED refuses (unless
                          incident), PROTOCOL_PINNED refuses; raises the ratchet */
    LL_TERM_END,       /* the term `generation` ended (term.ended_ms, term.reason) */
    LL_COMMIT,         /* at most once per op_id, only from the stored generation;
                          settles its claim; key_len 0 and !has_key: no value */
    LL_READ,           /* key -> value, generation of its commit */
    LL_SET_DISABLED,   /* disable advances the generation (fences the leader) */
    LL_DEFINE,         /* patch -> descriptor (leader-desc.h ws_desc_define) */
    LL_CLAIM,          /* op_id claimed by generation (out: claim) */
    LL_ABANDON,        /* op_id settled as never to be done; value = reason */
    LL_PENDING,        /* read: unsettled claims, oldest first, at most limit */
    LL_HISTORY,        /* read: terms, newest first, at most limit */
};

/* LL_CLAIM's answer (status 0). */
struct ll_claim {
    bool claimed;                  /* the caller's generation owns it now */
    bool reconcile;                /* ... taken over from previous_generation */
    bool applied;                  /* not claimed: committed by generation */
    bool abandoned;                /* not claimed: abandoned */
    uint64_t previous_generation, claimed_ms, generation;
};

/* An entry of LL_PENDING's answer. */
struct ll_pending {
    uint8_t *op_id;                /* into the request's answer buffer */
    size_t op_len;
    uint64_t generation, claimed_ms;
};

struct ll_req {
    enum ll_op op;
    void (*done)(struct ll_req *r);
    void *ud;                      /* the caller's */
    /* in: the scoped workstream (skey.h) and the op's bytes, in one
     * allocation the request owns (ll_req_free) */
    uint8_t *ws;
    size_t ws_len;
    uint8_t *op_id, *key, *value;
    size_t op_len, key_len, value_len;
    bool has_key;                  /* COMMIT: key given (else only op_id is recorded) */
    uint64_t generation;           /* COMMIT, CLAIM, ABANDON: the caller's;
                                      BUMP, SET_DISABLED: floor; TERM_END: the term's */
    bool disable;                  /* SET_DISABLED */
    bool incident;                 /* BUMP: granted even while disabled */
    uint64_t now_ms;               /* DEFINE, CLAIM, ABANDON: wall clock */
    uint32_t limit;                /* PENDING, HISTORY */
    struct ws_patch patch;         /* DEFINE */
    struct ws_term term;           /* BUMP: the new term (generation and mode are
                                      the backend's); TERM_END: ended_ms, reason */
    /* BUMP, for a remote ledger where another machine may lead: */
    uint64_t lease_ms;             /* the term's lease */
    uint64_t deadline_ms;          /* broker_now_ms when a wait gives up (0: never):
                                      TIMEOUT, or UNAVAILABLE when out of reach */
    bool no_wait;                  /* if_available: busy instead of waiting */
    bool steal;                    /* take the term from another machine */
    /* out */
    int status;
    const char *why;               /* STORAGE: the ledger's words, or NULL */
    uint64_t out_generation;       /* LOAD, BUMP, SET_DISABLED: stored; READ: its commit's;
                                      COMMIT duplicate, ABANDON applied: the one that applied it */
    bool out_disabled;             /* LOAD */
    bool duplicate;                /* COMMIT: op_id applied before; ABANDON: it was applied */
    bool out_abandoned;            /* COMMIT: op_id was abandoned (nothing done) */
    struct ws_desc desc;           /* LOAD, BUMP, DEFINE: the stored descriptor */
    struct ll_claim claim;         /* CLAIM */
    uint8_t *out_value;            /* READ: owned by the request */
    size_t out_value_len;
    struct ll_pending *pending;    /* PENDING: n_out entries, owned by the request */
    struct ws_term *terms;         /* HISTORY: n_out entries, owned by the request */
    size_t n_out;
    bool truncated;                /* PENDING: more than limit */
    bool busy;                     /* BUMP with no_wait: another machine leads
                                      (status 0, nothing stored) */
    /* the backend's */
    struct store_job job;
    struct ll_req *next_done;
    void *be;
};

/* Fills r with copies of ws and the op's bytes (each may be NULL/0).
 * 0, or -1 out of memory. */
int ll_req_init(struct ll_req *r, enum ll_op op, const uint8_t *ws, size_t ws_len,
                const uint8_t *op_id, size_t op_len, const uint8_t *key, size_t key_len,
                const uint8_t *value, size_t value_len);
void ll_req_free(struct ll_req *r);

struct leader_ledger;
struct broker;
struct coord_enc;

/* A backend.  open reads its settings from b->opt and keeps what it needs
 * in *state; submit answers r later through r->done, on the loop thread
 * (never inside submit); close answers what is pending with
 * COORD_ESHUTTING_DOWN (or lets it finish) and frees state. */
struct ll_backend {
    const char *name;              /* --ledger NAME, and canonical_fence */
    int (*open)(void **state, struct broker *b, char *err, size_t errsize);
    void (*submit)(void *state, struct ll_req *r);
    void (*close)(void *state);
    /* optional: the caller no longer wants r (a campaign cancelled while its
     * BUMP waits); r is still answered, ABORTED unless already decided */
    void (*cancel)(void *state, struct ll_req *r);
    /* optional: false while the ledger is out of reach (else reachable) */
    bool (*reachable)(void *state);
    /* optional: the backend's own stats fields, appended to `stats` */
    void (*stats)(void *state, struct coord_enc *e);
    /* a term's LL_TERM_END must be submitted before the next term's
     * LL_BUMP (etcd: the end revokes the lease that holds the leader key
     * the bump waits for); else it goes after, so that the bump never
     * waits behind it (LMDB: one batch less on the transition) */
    bool term_end_first;
};
extern const struct ll_backend ll_backend_lmdb, ll_backend_etcd;

/* leaders.c: a backend's word that a term it granted is over although
 * nobody ended it here (its remote lease could have expired: reason
 * REASON_LEDGER_UNAVAILABLE; another machine took or disabled it).  The
 * live leader of that generation, if any, is fenced and told. */
void ll_term_lost(const uint8_t *ws, size_t ws_len, uint64_t generation, int reason);

/* The backend b->opt.leader_ledger names.  0, or -1 with err filled. */
int ll_open(struct leader_ledger **out, struct broker *b, char *err, size_t errsize);
void ll_submit(struct leader_ledger *l, struct ll_req *r);
/* Its name, as descriptors report it (canonical_fence). */
const char *ll_name(const struct leader_ledger *l);
/* The backend's term_end_first. */
bool ll_term_end_first(const struct leader_ledger *l);
void ll_cancel(struct leader_ledger *l, struct ll_req *r);
bool ll_reachable(const struct leader_ledger *l);
/* The backend's stats fields into e (none for LMDB). */
void ll_stats(const struct leader_ledger *l, struct coord_enc *e);
/* Before the ledger closes: answers what is pending, frees l. */
void ll_close(struct leader_ledger *l);

#endif
