/* locks.c - the lock table.
 *
 * One FIFO queue per (scope, name).  A request is granted only when it is
 * at the head of its queue and compatible with every holder, so nothing
 * barges past a waiting request; consecutive shared requests at the head
 * are granted together.  Every operation touches only its own queue: the
 * cost of a grant does not depend on other names or their waiters.  The
 * global lists exist only for lock.query's ordering.
 *
 * Requests belong to their users (lockops.c, leaders.c): the table links
 * them, grants them and tells their owner, and never frees one. */
#include <stdlib.h>
#include <string.h>
#include "budget.h"
#include "coord-limits.h"
#include "errors.h"
#include "events.h"
#include "histo.h"
#include "ids.h"
#include "locks.h"
#include "ops.h"
#include "skey.h"

struct lock_queue {
    struct hentry h;               /* keyed by the scoped name (skey.h) */
    struct list held;
    struct list waiting;
    struct list idle_link;         /* L.idle while empty and kept */
    unsigned nheld;
    bool held_exclusive;
    uint8_t keybuf[];              /* the key, in the same allocation */
};

static struct {
    struct broker *b;
    struct hashmap queues;
    struct hashmap by_id;
    struct list held_order;        /* lock.query: grant order */
    struct list pending_order;     /* lock.query: request order */
    uint64_t next_id;
    uint64_t nheld, npending;
    /* Empty queues kept in the table, oldest first: a name locked over and
     * over (the common case) finds its queue instead of allocating and
     * hashing it in again each cycle.  IDLE_QUEUES bounds what that keeps
     * (a few hundred KiB at most); past it the oldest goes. */
    struct list idle;
    unsigned nidle;
} L;

#define IDLE_QUEUES 1024

void locks_init(struct broker *b)
{
    L.b = b;
    hashmap_init(&L.queues);
    hashmap_init(&L.by_id);
    list_init(&L.held_order);
    list_init(&L.pending_order);
    list_init(&L.idle);
}

void locks_counts(uint64_t *held, uint64_t *pending, uint64_t *names)
{
    *held = L.nheld;
    *pending = L.npending;
    *names = L.queues.count - L.nidle;
}

const uint8_t *lock_req_name(const struct lock_req *r, size_t *len)
{
    return skey_name(r->q->h.key, r->q->h.keylen, len);
}

const uint8_t *lock_req_skey(const struct lock_req *r, size_t *len)
{
    *len = r->q->h.keylen;
    return r->q->h.key;
}

struct lock_req *locks_find(uint64_t id)
{
    struct hentry *e = hashmap_get(&L.by_id, &id, sizeof id);
    return e ? list_entry(e, struct lock_req, by_id) : NULL;
}

/* The lookup key is built on the stack: a lock cycle allocates only what
 * it keeps (the request, and the queue of a name not yet in use). */
static struct lock_queue *queue_get(struct conn *c, const uint8_t *name,
                                    uint32_t len, bool create)
{
    uint8_t key[SKEY_HEADER + LIMIT_SCOPE + LIMIT_NAME];
    if (skey_size(c->scope_len, len) > sizeof key)
        return NULL;
    size_t klen = skey_write(key, c->scope, c->scope_len, name, len);
    struct hentry *e = hashmap_get(&L.queues, key, klen);
    if (e) {
        struct lock_queue *q = (struct lock_queue *)e;
        if (list_linked(&q->idle_link)) {
            list_del(&q->idle_link);
            L.nidle--;
        }
        return q;
    }
    if (!create)
        return NULL;
    struct lock_queue *q = calloc(1, sizeof *q + klen);
    if (!q)
        return NULL;
    memcpy(q->keybuf, key, klen);
    q->h.key = q->keybuf;
    q->h.keylen = klen;
    list_init(&q->held);
    list_init(&q->waiting);
    list_init(&q->idle_link);
    if (hashmap_put(&L.queues, &q->h) < 0) {
        free(q);
        return NULL;
    }
    return q;
}

static void queue_free(struct lock_queue *q)
{
    hashmap_del(&L.queues, &q->h);
    free(q);
}

/* An empty queue joins the idle ones (the oldest of which may go). */
static void queue_maybe_free(struct lock_queue *q)
{
    if (!list_empty(&q->held) || !list_empty(&q->waiting) || list_linked(&q->idle_link))
        return;
    if (L.nidle >= IDLE_QUEUES) {
        struct lock_queue *old = list_entry(L.idle.next, struct lock_queue, idle_link);
        list_del(&old->idle_link);
        L.nidle--;
        queue_free(old);
    }
    list_append(&L.idle, &q->idle_link);
    L.nidle++;
}

static bool compatible(const struct lock_queue *q, uint8_t mode)
{
    return q->nheld == 0 || (mode == LOCK_SHARED && !q->held_exclusive);
}

static void on_lease_expired(struct deadline *d);

/* Makes r a holder.  The owner hears of it only when r had waited. */
static void grant(struct lock_req *r)
{
    struct lock_queue *q = r->q;
    bool waited = list_linked(&r->qlink);
    if (waited) {
        list_del(&r->qlink);
        list_del(&r->order_link);
        L.npending--;
    }
    deadline_cancel(&r->timer);
    r->granted = true;
    r->conn->nlocks_held++;
    budget_take();
    r->token = ids_next();     /* increasing for every name, across restarts */
    /* a request granted at once was stamped by locks_request just now */
    uint64_t us = waited ? now_us() : r->since_us;
    latency_add(LAT_LOCK_WAIT, waited ? us - r->since_us : 0);
    r->since_us = us;
    r->since_ms = broker_now_ms(L.b);
    list_append(&q->held, &r->qlink);
    q->nheld++;
    q->held_exclusive = r->mode == LOCK_EXCLUSIVE;
    list_append(&L.held_order, &r->order_link);
    L.nheld++;
    r->by_id.key = (const uint8_t *)&r->id;
    r->by_id.keylen = sizeof r->id;
    hashmap_put(&L.by_id, &r->by_id);
    if (r->lease_ms)
        deadline_set(&r->timer, r->since_ms + r->lease_ms, on_lease_expired);
    events_lock("granted", r, REASON_NONE);
    if (waited)
        r->owner->granted(r);
}

/* Grant from the head while compatible, then drop an empty queue. */
static void queue_process(struct lock_queue *q)
{
    while (!list_empty(&q->waiting)) {
        struct lock_req *head = list_entry(q->waiting.next, struct lock_req, qlink);
        if (!compatible(q, head->mode))
            break;
        grant(head);
    }
    queue_maybe_free(q);
}

/* Unlink r from everything; the caller processes the queue. */
static void unlink_req(struct lock_req *r)
{
    struct lock_queue *q = r->q;
    deadline_cancel(&r->timer);
    list_del(&r->qlink);
    list_del(&r->order_link);
    if (r->granted) {
        latency_add(LAT_LOCK_HOLD, now_us() - r->since_us);
        r->conn->nlocks_held--;
        budget_give();
        q->nheld--;
        if (q->nheld == 0)
            q->held_exclusive = false;
        L.nheld--;
        hashmap_del(&L.by_id, &r->by_id);
    } else {
        L.npending--;
    }
}

void locks_release(struct lock_req *r)
{
    struct lock_queue *q = r->q;
    unlink_req(r);
    if (r->granted)
        events_lock("released", r, REASON_NONE);
    queue_process(q);
}

/* A holder loses its lock (stolen, expired): tell the owner. */
static void lose(struct lock_req *r, enum reason why, const struct lock_req *by)
{
    unlink_req(r);
    events_lock("lost", r, why);
    r->owner->lost(r, why, by);
}

static void on_lease_expired(struct deadline *d)
{
    struct lock_req *r = list_entry(d, struct lock_req, timer);
    struct lock_queue *q = r->q;
    lose(r, REASON_EXPIRED, NULL);
    queue_process(q);
}

static void on_wait_timeout(struct deadline *d)
{
    struct lock_req *r = list_entry(d, struct lock_req, timer);
    struct lock_queue *q = r->q;
    L.b->stats.timeouts++;
    unlink_req(r);
    r->owner->failed(r, COORD_ETIMEOUT);
    queue_process(q);      /* a blocked head leaving may unblock shared */
}

void locks_renew(struct lock_req *r, uint64_t lease_ms)
{
    r->lease_ms = lease_ms;
    if (lease_ms)
        deadline_set(&r->timer, broker_now_ms(L.b) + lease_ms, on_lease_expired);
    else
        deadline_cancel(&r->timer);
}

enum lock_outcome locks_request(struct lock_req *r, struct conn *c,
                                const struct lock_request_args *a,
                                const struct lock_owner *owner)
{
    if (c->nlocks_held >= LIMIT_CONN_LOCKS)
        return LOCK_CONN_LIMIT;
    if (budget_full())
        return LOCK_BUDGET;
    struct lock_queue *q = queue_get(c, a->name, a->name_len, true);
    if (!q)
        return LOCK_NO_MEMORY;
    if (a->if_available && (!list_empty(&q->waiting) || !compatible(q, a->mode))) {
        queue_maybe_free(q);
        return LOCK_NOT_AVAILABLE;
    }
    if (a->steal)
        for (struct list *it = q->held.next; it != &q->held; it = it->next) {
            const struct lock_req *h = list_entry(it, struct lock_req, qlink);
            if (h->owner->guarded && h->owner != owner) {
                queue_maybe_free(q);
                return LOCK_GUARDED;
            }
        }
    r->id = ++L.next_id;
    r->q = q;
    r->conn = c;
    r->owner = owner;
    r->mode = a->mode;
    r->granted = false;
    r->lease_ms = a->lease_ms;
    r->since_ms = broker_now_ms(L.b);
    r->since_us = now_us();
    list_init(&r->qlink);
    list_init(&r->order_link);

    if (a->steal) {
        /* break every holder, then go first; waiters stay queued */
        while (!list_empty(&q->held))
            lose(list_entry(q->held.next, struct lock_req, qlink), REASON_STOLEN, r);
        grant(r);
        return LOCK_GRANTED;
    }
    if (list_empty(&q->waiting) && compatible(q, a->mode)) {
        grant(r);
        return LOCK_GRANTED;
    }
    list_append(&q->waiting, &r->qlink);
    list_append(&L.pending_order, &r->order_link);
    L.npending++;
    if (a->timeout_ms)
        deadline_set(&r->timer, r->since_ms + a->timeout_ms, on_wait_timeout);
    return LOCK_QUEUED;
}

void locks_reply_refused(struct conn *c, uint64_t rid, enum lock_outcome o)
{
    if (o == LOCK_CONN_LIMIT) {
        reply_conn_limit(c, rid, "locks held", LIMIT_CONN_LOCKS);
        return;
    }
    if (o == LOCK_BUDGET) {
        budget_refuse(c, rid);
        return;
    }
    if (o == LOCK_GUARDED) {
        conn_reply_error(c, rid, COORD_EPOLICY, "a workstream's leader holds this lock: "
                         "take leadership with leader.campaign steal, under its steal policy");
        return;
    }
    if (o != LOCK_NOT_AVAILABLE) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_bool(&e, "granted", false);
    conn_enc_finish(c, &e);
}

bool locks_walk(struct conn *c, bool held,
                bool (*each)(struct lock_req *r, void *ud), void *ud)
{
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, held ? &L.held_order : &L.pending_order) {
        struct lock_req *r = list_entry(pos, struct lock_req, order_link);
        if (skey_in_scope(r->q->h.key, c->scope, c->scope_len) && each(r, ud))
            return true;
    }
    return false;
}
