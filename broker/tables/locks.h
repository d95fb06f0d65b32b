/* locks.h - named lock queues with Web Locks semantics, leases and fencing
 * tokens.
 *
 * The table knows requests (struct lock_req), not who asked: its users
 * embed a lock_req in their own struct and hear about it through their
 * lock_owner callbacks, as libuv's handles know nothing of their users.
 * Two users exist: the lock.* ops (lockops.c) and leadership (leaders.c),
 * which queues campaigns on reserved names ("-leader/<workstream>") so that
 * lock.query shows who leads and who waits. */
#ifndef COORD_LOCKS_H
#define COORD_LOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include "broker.h"
#include "deadline.h"
#include "hashmap.h"
#include "list.h"
#include "reasons.h"

enum lock_mode { LOCK_EXCLUSIVE = 0, LOCK_SHARED = 1 };

struct lock_req;

/* What a request's owner hears, always from the table's own work (a
 * release, a timer), never from inside locks_request.  After lost and
 * failed the table is done with the request: the owner may free it. */
struct lock_owner {
    void (*granted)(struct lock_req *r);                   /* after waiting */
    /* stolen (by: the thief's request), expired (by NULL) */
    void (*lost)(struct lock_req *r, enum reason why, const struct lock_req *by);
    void (*failed)(struct lock_req *r, int code);          /* never granted */
    /* only a request of the same owner may steal it (leadership: a steal
     * goes through leader.campaign and its steal policy) */
    bool guarded;
};

struct lock_queue;

/* A request, owned by its user (who allocates it, zeroed, and frees it
 * once the table has handed it back).  The fields are the table's; the
 * user reads id, token, granted, mode and conn. */
struct lock_req {
    struct hentry by_id;           /* locks.by_id while granted */
    uint64_t id;
    uint64_t token;
    struct lock_queue *q;
    struct conn *conn;             /* whose: scope, lock.query, limits */
    const struct lock_owner *owner;
    uint8_t mode;
    bool granted;
    struct list qlink;             /* q->held or q->waiting */
    struct list order_link;        /* global grant or request order */
    struct deadline timer;         /* wait timeout, then lease */
    uint64_t lease_ms;
    uint64_t since_ms;             /* requested, then granted */
    uint64_t since_us;             /* the same, for the latency stats */
};

struct lock_request_args {
    const uint8_t *name;
    uint32_t name_len;
    uint8_t mode;
    bool if_available;
    bool steal;
    uint64_t timeout_ms;           /* 0: wait forever */
    uint64_t lease_ms;             /* 0: none */
};

/* What locks_request did with r. */
enum lock_outcome {
    LOCK_GRANTED = 0,              /* granted at once (no callback) */
    LOCK_QUEUED,                   /* owner->granted or ->failed later */
    LOCK_NOT_AVAILABLE,            /* if_available and not grantable now */
    LOCK_NO_MEMORY,
    LOCK_CONN_LIMIT,               /* LIMIT_CONN_LOCKS held by c */
    LOCK_BUDGET,                   /* the broker-wide budget is full (budget.h) */
    LOCK_GUARDED,                  /* a steal of a guarded owner's lock */
};

void locks_init(struct broker *b);
/* Queues, grants or refuses r for c.  Only LOCK_GRANTED and LOCK_QUEUED
 * keep r in the table. */
enum lock_outcome locks_request(struct lock_req *r, struct conn *c,
                                const struct lock_request_args *a,
                                const struct lock_owner *owner);
/* Answers a refused request: {granted:false}, or LIMIT. */
void locks_reply_refused(struct conn *c, uint64_t rid, enum lock_outcome o);
/* Releases a granted lock or withdraws a waiting request (no callback);
 * the table is done with r when it returns. */
void locks_release(struct lock_req *r);
void locks_renew(struct lock_req *r, uint64_t lease_ms);
/* A granted lock by id, or NULL. */
struct lock_req *locks_find(uint64_t id);
/* Counts for stats. */
void locks_counts(uint64_t *held, uint64_t *pending, uint64_t *names);
/* The request's name, and its scoped key (skey.h), inside the queue. */
const uint8_t *lock_req_name(const struct lock_req *r, size_t *len);
const uint8_t *lock_req_skey(const struct lock_req *r, size_t *len);
/* lock.query's lists: each request in grant (held) or request order, in
 * c's scope; encode returns true to stop (truncated). */
bool locks_walk(struct conn *c, bool held,
                bool (*each)(struct lock_req *r, void *ud), void *ud);

/* lockops.c */
void lockops_conn_closed(struct conn *c);

#endif
