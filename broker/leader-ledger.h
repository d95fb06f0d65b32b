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
 * storage.  The backend is chosen at start: "local" is LMDB
 * (leader-lmdb.c, on the broker's ledger and its writer thread).
 *
 * status: 0, or a negative COORD_E* code: FENCED (commit: not the stored
 * generation), DISABLED (bump of a disabled workstream), STORAGE (why in
 * req->why when known), UNAVAILABLE (a remote ledger out of reach: the
 * outcome of a write is then unknown). */
#ifndef COORD_LEADER_LEDGER_H
#define COORD_LEADER_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "ledger.h"

enum ll_op {
    LL_LOAD,           /* -> generation, disabled */
    LL_BUMP,           /* generation = max(stored + 1, floor), stored; DISABLED refuses */
    LL_COMMIT,         /* at most once per op_id, only from the stored generation */
    LL_READ,           /* key -> value, generation of its commit */
    LL_SET_DISABLED,   /* disable advances the generation (fences the leader) */
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
    uint64_t generation;           /* COMMIT: the committer's; BUMP, SET_DISABLED: floor */
    bool disable;                  /* SET_DISABLED */
    /* out */
    int status;
    const char *why;               /* STORAGE: the ledger's words, or NULL */
    uint64_t out_generation;       /* LOAD, BUMP, SET_DISABLED: stored; READ: its commit's;
                                      COMMIT duplicate: the one that applied it */
    bool out_disabled;             /* LOAD */
    bool duplicate;                /* COMMIT: op_id applied before */
    uint8_t *out_value;            /* READ: owned by the request */
    size_t out_value_len;
    /* the backend's */
    struct ledger_job job;
    struct ll_req *next_done;
};

/* Fills r with copies of ws and the op's bytes (each may be NULL/0).
 * 0, or -1 out of memory. */
int ll_req_init(struct ll_req *r, enum ll_op op, const uint8_t *ws, size_t ws_len,
                const uint8_t *op_id, size_t op_len, const uint8_t *key, size_t key_len,
                const uint8_t *value, size_t value_len);
void ll_req_free(struct ll_req *r);

struct leader_ledger;

/* The backend named name ("local") on the broker's ledger.  0 or -1. */
int ll_open(struct leader_ledger **out, const char *name, struct ledger *ledger,
            uv_loop_t *loop, char *err, size_t errsize);
void ll_submit(struct leader_ledger *l, struct ll_req *r);
/* Its name, as descriptors report it (canonical_fence). */
const char *ll_name(const struct leader_ledger *l);
/* Before the ledger closes: answers what is pending. */
void ll_close(struct leader_ledger *l);

#endif
