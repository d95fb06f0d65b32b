/* locks.h - named lock queues with Web Locks semantics, leases and fencing
 * tokens.  Clients reach them through lock.* ops; the leader table takes
 * reserved names through the same queues (with its own callbacks), so
 * lock.query shows leadership too. */
#ifndef COORD_LOCKS_H
#define COORD_LOCKS_H

#include <stdbool.h>
#include <stdint.h>
#include "broker.h"
#include "deadline.h"
#include "hashmap.h"
#include "list.h"

enum lock_mode { LOCK_EXCLUSIVE = 0, LOCK_SHARED = 1 };

struct lock_req;

/* What a request's owner hears.  The lock table frees the request after
 * lost and failed return; after granted it stays until released. */
struct lock_owner {
    void (*granted)(struct lock_req *r);
    void (*lost)(struct lock_req *r, const char *reason);   /* stolen, expired */
    void (*failed)(struct lock_req *r, int code);           /* never granted */
};

struct lock_queue;

struct lock_req {
    struct pending p;              /* the client's waiting acquire */
    struct hentry by_id;           /* locks.by_id while granted */
    uint64_t id;
    uint64_t token;
    struct lock_queue *q;
    struct conn *conn;
    const struct lock_owner *owner;
    void *owner_data;
    uint8_t mode;
    bool granted;
    struct list qlink;             /* q->held or q->waiting */
    struct list conn_link;         /* conn->locks (client locks, held) */
    struct list order_link;        /* global grant or request order */
    struct deadline timer;         /* wait timeout, then lease */
    uint64_t lease_ms;
    uint64_t since_ms;             /* requested, then granted */
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

void locks_init(struct broker *b);
/* Queue, grant or refuse a request (rid: the request that asked).  Returns the request (granted or
 * waiting: owner->granted has run when granted at once), or NULL with
 * *refused set: 1 = not available (if_available), -1 = out of memory. */
struct lock_req *locks_request(struct conn *c, uint64_t rid,
                               const struct lock_request_args *a,
                               const struct lock_owner *owner, void *owner_data,
                               int *refused);
/* Answers a request locks_request refused: {granted:false} when not
 * available (if_available), LIMIT when out of memory. */
void locks_reply_refused(struct conn *c, uint64_t rid, int refused);
/* Release a granted lock or withdraw a waiting request (no callback). */
void locks_release(struct lock_req *r);
void locks_renew(struct lock_req *r, uint64_t lease_ms);
void locks_conn_closed(struct conn *c);
/* Counts for stats. */
void locks_counts(uint64_t *held, uint64_t *pending, uint64_t *names);
const uint8_t *lock_req_name(const struct lock_req *r, uint32_t *len);

#endif
