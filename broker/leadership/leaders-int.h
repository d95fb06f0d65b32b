/* leaders-int.h - what the files of leadership share: the workstream in
 * memory, the request that runs on it, and the ledger call that answers a
 * client (workstreams.c owns them).  leaders.c owns terms and campaigns;
 * the other leader-*.c files are ops on a loaded workstream. */
#ifndef COORD_LEADERS_INT_H
#define COORD_LEADERS_INT_H

#include "broker.h"
#include "deadline.h"
#include "hashmap.h"
#include "leader-ledger.h"
#include "reasons.h"

struct campaign;
struct cfg_apply;

struct workstream {
    struct hentry h;               /* keyed by the scoped workstream (skey.h) */
    uint8_t *skey;
    bool loaded;
    struct ll_req load;            /* while !loaded */
    struct list waiting;           /* struct lreq, until loaded */
    uint64_t generation;           /* last one stored */
    bool disabled;
    struct ws_desc desc;           /* as stored (defaults when never defined) */
    unsigned campaigns_waiting;    /* queued on the leader lock */
    unsigned campaigns;            /* campaigns alive (waiting, bumping, leading) */
    /* the leadership lock's name campaigns use: the descriptor's lock name
     * in force when the first of them came (a new one applies once none
     * holds or waits for the old, so two names never grant two leaders) */
    uint16_t lock_len;
    uint8_t lock[8 + LIMIT_LOCK_NAME];
    /* the live leader, if any */
    struct campaign *term;         /* the leader's campaign, or NULL */
    uint64_t live_generation;      /* 0: nobody may commit */
    struct deadline lease;
    uint64_t lease_ms;
    uint64_t elected_ms;
    bool draining;
    enum reason drain_reason;      /* REASON_SELF, _REQUESTED, _MAX_HOLD */
    struct deadline hold;          /* max hold reached; then, draining, the fence */
    bool over_hold, hold_fencing;  /* past the fence point (counted); draining for it */
    uint64_t ended_us;             /* the last term's end (latency stats) */
    unsigned refs;                 /* campaigns, requests and jobs using it */
};

/* A leader.* request, with the fields its op needs.  On the stack while
 * its workstream is in memory; copied to the heap (with its bytes) when it
 * must wait for the workstream to load. */
struct lreq {
    struct list link;              /* ws->waiting */
    struct conn_job job;
    void (*run)(struct lreq *q, struct workstream *ws);
    uint64_t generation, lease_ms, timeout_ms, limit;
    bool if_available, steal, have_timeout, disable, has_key;
    bool internal;                 /* the broker's own (config), no conn */
    struct cfg_apply *cfg;         /* config: the file's application */
    struct ws_protocol protocol;   /* campaign */
    const uint8_t *caps;           /* campaign: its capabilities, "a,b" */
    size_t caps_len;
    struct ws_patch patch;         /* define */
    const uint8_t *op_id, *key, *value, *text;   /* text: incident or reason */
    size_t op_len, key_len, value_len, text_len;
};

/* workstreams.c: the cache and the ledger it loads from.  init opens the
 * ledger --ledger names (0, or -1 with err); stop closes it. */
int workstreams_init(struct broker *b, char *err, size_t errsize);
void workstreams_stop(void);
bool workstreams_stopping(void);
/* The open ledger, or NULL once stopped. */
struct leader_ledger *workstreams_ledger(void);
size_t workstreams_count(void);
/* The workstream of a scoped key, if in memory. */
struct workstream *workstreams_find(const uint8_t *key, size_t len);
/* Drops ws from memory when nothing uses it (its stored state is loaded
 * again when it is next used). */
void workstreams_maybe_free(struct workstream *ws);

/* Runs q on the workstream name of c's scope, now or once loaded.  The
 * name is checked here (too long: replied). */
void leaders_with_workstream(struct conn *c, uint64_t rid, coord_bytes name, struct lreq *q);
/* The same for a scoped key; c NULL: the broker's own request (q->internal). */
void leaders_with_key(struct conn *c, uint64_t rid, const uint8_t *key, size_t klen,
                      struct lreq *q);
/* The scoped key of name into key (SKEY_HEADER + LIMIT_WORKSTREAM bytes):
 * its length, or 0 after replying that it is too long. */
size_t leaders_ws_key(struct conn *c, uint64_t rid, coord_bytes name, uint8_t *key);
/* True when gen is ws's live generation, else replies FENCED. */
bool leaders_live(struct conn *c, uint64_t rid, struct workstream *ws, uint64_t gen);
const uint8_t *leaders_ws_name(const struct workstream *ws, size_t *len);
void leaders_ws_unref(struct workstream *ws);
/* The ledger's name (canonical_fence), and a submit: r is answered through
 * r->done from the loop, never inside the call (once the ledger is closed:
 * SHUTTING_DOWN). */
const char *leaders_ledger_name(void);
void leaders_submit(struct ll_req *r);
/* The leadership lock's name for ws under descriptor d (its lock_name,
 * else "-leader/<workstream>") into out (8 + LIMIT_WORKSTREAM bytes): its
 * length. */
size_t leaders_lock_name(const struct workstream *ws, const struct ws_desc *d, uint8_t *out);
/* NULL when canonical fence s names the ledger this broker runs ("local",
 * or "server-lease-ledger"/"etcd" with --ledger etcd), else msg, saying
 * why not (naming field, and --ledger etcd). */
const char *leaders_fence_check(const char *field, const uint8_t *s, size_t len, char *msg,
                                size_t size);
/* A define was stored: the live term sees it (mode event, max hold). */
void leaders_defined(struct workstream *ws, const struct ws_desc *old);

/* A ledger request answering a client (commit, claim, define, ...). */
struct ll_call {
    struct ll_req req;
    struct conn_job job;
    struct workstream *ws;         /* referenced, or NULL */
    struct cfg_apply *cfg;         /* a descriptor file's store: told when done */
};

/* A call for c's request rid with copies of q's bytes (q may be NULL); NULL
 * after replying LIMIT.  ll_call_end answers nothing: it frees. */
struct ll_call *ll_call_new(struct conn *c, uint64_t rid, struct workstream *ws,
                            enum ll_op op, const uint8_t *skey, size_t sklen,
                            const struct lreq *q, void (*done)(struct ll_req *));
void ll_call_end(struct ll_call *call);
/* The reply's preamble: the connection to answer on, or NULL when it is
 * gone or when the call failed (then its error, with why, is sent here). */
struct conn *ll_call_answer(struct ll_call *call, const char *why);

/* A descriptor file's application (leader-config.c owns it): a define of
 * the fields it names, applied to the scoped workstream key now or once it
 * is loaded, in memory at once (so no campaign queued behind it sees the
 * old descriptor), then stored; `disabled` as a disable or enable when it
 * differs.  The stored ratchet may only raise the file's protocol floor.
 * done is called once every part has ended (the load, the define's store,
 * the switch's store), from the loop, never inside ll_submit; status is the
 * first failure (0: applied and stored). */
enum cfg_part { CFG_LOAD, CFG_DEFINE, CFG_SWITCH };
struct cfg_apply {
    struct ws_patch patch;         /* the file's; run_config's once adjusted */
    int8_t disabled;               /* -1 absent, else the kill switch */
    bool adjusted;                 /* patch went through the ratchet (stored as is) */
    bool retry;                    /* again: only the parts that failed */
    bool redo_define, redo_switch; /* which failed */
    unsigned pending;              /* parts under way (+1 while it runs) */
    int status;                    /* the first failure, or 0 */
    enum cfg_part failed;          /* its part */
    char why[200];
    void (*done)(struct cfg_apply *a);
};
void leaders_apply_config(const uint8_t *key, size_t klen, struct cfg_apply *a);
/* A part of a's ended with status (why: NULL for the code's name). */
void cfg_part_done(struct cfg_apply *a, enum cfg_part part, int status, const char *why);

/* Counters of stats (leaders.c owns them). */
struct leader_counters {
    uint64_t elected, lost, commits, duplicates, fenced;
    /* max hold: terms elected under one, drained at it, fenced at it (max
     * hold + one lease), and live past that fence point (the SLO misses) */
    uint64_t terms_max_hold, terms_reached_max_hold, terms_fenced_max_hold;
    uint64_t terms_over_max_hold;
    uint64_t claims, claims_reconciled, abandons;
};
extern struct leader_counters leader_counts;

/* a text field (incident, reason, op_id) of 1..max bytes, else replied */
bool leaders_text_ok(struct conn *c, uint64_t rid, const char *field, coord_bytes b,
                     size_t max, bool required);

#endif
