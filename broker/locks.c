/* locks.c - the lock table.
 *
 * One FIFO queue per (scope, name).  A request is granted only when it is
 * at the head of its queue and compatible with every holder, so nothing
 * barges past a waiting request; consecutive shared requests at the head
 * are granted together.  Every operation touches only its own queue: the
 * cost of a grant does not depend on other names or their waiters.  The
 * global lists exist only for lock.query's ordering. */
#include <stdlib.h>
#include <string.h>
#include "errors.h"
#include "ledger.h"
#include "locks.h"
#include "ops.h"
#include "events.h"
#include "coord-limits.h"

struct lock_queue {
    struct hentry h;
    uint8_t *key;                  /* scoped_key(scope, name) */
    uint32_t scope_len;
    struct list held;
    struct list waiting;
    unsigned nheld;
    bool held_exclusive;
    uint8_t keybuf[];               /* the key, in the same allocation */
};

static struct {
    struct broker *b;
    struct hashmap queues;
    struct hashmap by_id;
    struct list held_order;        /* lock.query: grant order */
    struct list pending_order;     /* lock.query: request order */
    uint64_t next_id;
    uint64_t token_counter;
    uint64_t nheld, npending;
} L;

void locks_init(struct broker *b)
{
    L.b = b;
    hashmap_init(&L.queues);
    hashmap_init(&L.by_id);
    list_init(&L.held_order);
    list_init(&L.pending_order);
}

void locks_counts(uint64_t *held, uint64_t *pending, uint64_t *names)
{
    *held = L.nheld;
    *pending = L.npending;
    *names = L.queues.count;
}

const uint8_t *lock_req_name(const struct lock_req *r, uint32_t *len)
{
    const struct lock_queue *q = r->q;
    *len = (uint32_t)(q->h.keylen - 4 - q->scope_len);
    return q->key + 4 + q->scope_len;
}

/* Strictly increasing for every name across every grant and restart: the
 * durable epoch in the high half, a counter in the low half. */
static uint64_t next_token(void)
{
    if (++L.token_counter >= (1ull << 32)) {
        uint64_t e = ledger_next_epoch(L.b->ledger);
        if (e)
            L.b->epoch = e;
        L.token_counter = 1;
    }
    return (L.b->epoch << 32) | L.token_counter;
}

/* The lookup key is built on the stack: a lock cycle allocates only what
 * it keeps (the request, and the queue of a name not yet in use). */
static struct lock_queue *queue_get(struct conn *c, const uint8_t *name,
                                    uint32_t len, bool create)
{
    uint8_t stack[4 + LIMIT_SCOPE + LIMIT_NAME];
    size_t klen = 4 + (size_t)c->scope_len + len;
    uint8_t *key = klen <= sizeof stack ? stack : NULL;
    if (!key)
        return NULL;
    coord_put_be32(key, c->scope_len);
    if (c->scope_len)
        memcpy(key + 4, c->scope, c->scope_len);
    if (len)
        memcpy(key + 4 + c->scope_len, name, len);
    struct hentry *e = hashmap_get(&L.queues, key, klen);
    if (e || !create)
        return e ? (struct lock_queue *)e : NULL;
    struct lock_queue *q = calloc(1, sizeof *q + klen);
    if (!q)
        return NULL;
    q->key = q->keybuf;
    memcpy(q->key, key, klen);
    q->scope_len = c->scope_len;
    q->h.key = q->key;
    q->h.keylen = klen;
    list_init(&q->held);
    list_init(&q->waiting);
    if (hashmap_put(&L.queues, &q->h) < 0) {
        free(q);
        return NULL;
    }
    return q;
}

static void queue_maybe_free(struct lock_queue *q)
{
    if (!list_empty(&q->held) || !list_empty(&q->waiting))
        return;
    hashmap_del(&L.queues, &q->h);
    free(q);
}

static bool compatible(const struct lock_queue *q, uint8_t mode)
{
    return q->nheld == 0 || (mode == LOCK_SHARED && !q->held_exclusive);
}

static void on_lease_expired(struct deadline *d);

static void grant(struct lock_req *r)
{
    struct lock_queue *q = r->q;
    if (list_linked(&r->qlink)) {          /* it was waiting */
        list_del(&r->qlink);
        list_del(&r->order_link);
        L.npending--;
    }
    deadline_cancel(&r->timer);
    r->granted = true;
    r->conn->nlocks_held++;
    r->token = next_token();
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
    events_lock(L.b, "granted", r, NULL);
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

/* Unlink r from everything; the caller frees it and processes the queue. */
static void unlink_req(struct lock_req *r)
{
    struct lock_queue *q = r->q;
    deadline_cancel(&r->timer);
    list_del(&r->qlink);
    list_del(&r->order_link);
    if (list_linked(&r->conn_link))
        list_del(&r->conn_link);
    if (r->granted) {
        r->conn->nlocks_held--;
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
    bool was_granted = r->granted;
    unlink_req(r);
    if (was_granted)
        events_lock(L.b, "released", r, NULL);
    free(r);
    queue_process(q);
}

/* A holder loses its lock (stolen, expired): tell the owner, then free. */
static void lose(struct lock_req *r, const char *reason)
{
    unlink_req(r);
    events_lock(L.b, "lost", r, reason);
    r->owner->lost(r, reason);
    free(r);
}

static void on_lease_expired(struct deadline *d)
{
    struct lock_req *r = list_entry(d, struct lock_req, timer);
    struct lock_queue *q = r->q;
    lose(r, "expired");
    queue_process(q);
}

static void on_wait_timeout(struct deadline *d)
{
    struct lock_req *r = list_entry(d, struct lock_req, timer);
    struct lock_queue *q = r->q;
    L.b->stats.timeouts++;
    unlink_req(r);
    r->owner->failed(r, COORD_ETIMEOUT);
    free(r);
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

struct lock_req *locks_request(struct conn *c, uint64_t rid,
                               const struct lock_request_args *a,
                               const struct lock_owner *owner, void *owner_data,
                               int *refused)
{
    *refused = 0;
    if (c->nlocks_held >= LIMIT_CONN_LOCKS) {
        *refused = -2;
        return NULL;
    }
    struct lock_queue *q = queue_get(c, a->name, a->name_len, true);
    if (!q) {
        *refused = -1;
        return NULL;
    }
    if (a->if_available && (!list_empty(&q->waiting) || !compatible(q, a->mode))) {
        *refused = 1;
        queue_maybe_free(q);
        return NULL;
    }
    struct lock_req *r = calloc(1, sizeof *r);
    if (!r) {
        *refused = -1;
        queue_maybe_free(q);
        return NULL;
    }
    r->id = ++L.next_id;
    r->p.rid = rid;
    r->p.conn = c;
    r->q = q;
    r->conn = c;
    r->owner = owner;
    r->owner_data = owner_data;
    r->mode = a->mode;
    r->lease_ms = a->lease_ms;
    r->since_ms = broker_now_ms(L.b);
    list_init(&r->qlink);
    list_init(&r->conn_link);
    list_init(&r->order_link);
    list_init(&r->p.link);

    if (a->steal) {
        /* break every holder, then go first; waiters stay queued */
        while (!list_empty(&q->held))
            lose(list_entry(q->held.next, struct lock_req, qlink), "stolen");
        grant(r);
        return r;
    }
    if (list_empty(&q->waiting) && compatible(q, a->mode)) {
        grant(r);
        return r;
    }
    list_append(&q->waiting, &r->qlink);
    list_append(&L.pending_order, &r->order_link);
    L.npending++;
    if (a->timeout_ms)
        deadline_set(&r->timer, r->since_ms + a->timeout_ms, on_wait_timeout);
    return r;
}

void locks_conn_closed(struct conn *c)
{
    while (!list_empty(&c->locks)) {
        struct lock_req *r = list_entry(c->locks.next, struct lock_req, conn_link);
        locks_release(r);
    }
}

/* ---- the client side: lock.* ops ---- */

static void client_granted(struct lock_req *r)
{
    struct conn *c = r->conn;
    pending_finish(&r->p);
    list_append(&c->locks, &r->conn_link);
    coord_enc e;
    conn_enc_begin_reply(c, &e, r->p.rid);
    coord_enc_kv_bool(&e, "granted", true);
    coord_enc_kv_uint(&e, "lock", r->id);
    coord_enc_kv_uint(&e, "token", r->token);
    conn_enc_finish(c, &e);
}

static void client_lost(struct lock_req *r, const char *reason)
{
    uint32_t nlen;
    const uint8_t *name = lock_req_name(r, &nlen);
    coord_enc e;
    conn_enc_begin_event(r->conn, &e, "lock.lost");
    coord_enc_kv_uint(&e, "lock", r->id);
    coord_enc_kv_name(&e, "name", name, nlen);
    coord_enc_kv_cstr(&e, "reason", reason);
    coord_enc_kv_uint(&e, "token", r->token);
    conn_enc_finish(r->conn, &e);
}

static void client_failed(struct lock_req *r, int code)
{
    pending_finish(&r->p);
    conn_reply_error(r->conn, r->p.rid, code,
                     code == COORD_ETIMEOUT ? "lock not granted within timeout_ms" : NULL);
}

static const struct lock_owner client_owner = {
    client_granted, client_lost, client_failed,
};

/* cancel (ABORTED) or shutdown (SHUTTING_DOWN) of a waiting acquire */
static void client_abort(struct pending *p, int code)
{
    struct lock_req *r = list_entry(p, struct lock_req, p);
    struct lock_queue *q = r->q;
    unlink_req(r);
    client_failed(r, code);
    free(r);
    queue_process(q);
}

/* the connection is gone: its waiting acquire just leaves the queue */
static void client_drop(struct pending *p)
{
    struct lock_req *r = list_entry(p, struct lock_req, p);
    pending_finish(p);
    struct lock_queue *q = r->q;
    unlink_req(r);
    free(r);
    queue_process(q);
}

void locks_reply_refused(struct conn *c, uint64_t rid, int refused)
{
    if (refused == -2) {
        reply_conn_limit(c, rid, "locks held", LIMIT_CONN_LOCKS);
        return;
    }
    if (refused != 1) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_bool(&e, "granted", false);
    conn_enc_finish(c, &e);
}

/* Reads and checks lock.acquire's options; replies and returns false when
 * they are refused. */
static bool read_acquire_args(struct conn *c, uint64_t rid, coord_fields *f,
                              struct lock_request_args *a)
{
    coord_bytes name = { NULL, 0 }, mode = { NULL, 0 };
    memset(a, 0, sizeof *a);
    coord_field_str(f, "name", true, &name);
    bool have_mode = coord_field_str(f, "mode", false, &mode);
    coord_field_bool(f, "if_available", false, &a->if_available);
    coord_field_bool(f, "steal", false, &a->steal);
    bool have_timeout = coord_field_uint(f, "timeout_ms", false, &a->timeout_ms);
    coord_field_uint(f, "lease_ms", false, &a->lease_ms);
    if (!fields_ok(c, rid, f) || !name_size_ok(c, rid, "name", name.len) ||
        !duration_ok(c, rid, "timeout_ms", a->timeout_ms, LIMIT_WAIT_MS) ||
        !duration_ok(c, rid, "lease_ms", a->lease_ms, LIMIT_WAIT_MS))
        return false;
    const char *bad = NULL;
    if (have_mode && coord_bytes_eq(mode, "shared"))
        a->mode = LOCK_SHARED;
    else if (have_mode && !coord_bytes_eq(mode, "exclusive"))
        bad = "mode must be \"exclusive\" or \"shared\"";
    if (!bad && a->steal && a->if_available)
        bad = "steal and if_available cannot be combined";
    else if (!bad && a->steal && a->mode == LOCK_SHARED)
        bad = "steal needs mode exclusive";
    else if (!bad && have_timeout && (a->steal || a->if_available))
        bad = "timeout_ms cannot be combined with steal or if_available";
    if (bad) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, bad);
        return false;
    }
    if (name.len > 0 && name.ptr[0] == '-') {
        conn_reply_error(c, rid, COORD_ENAME_RESERVED,
                         "lock names starting with '-' are the broker's");
        return false;
    }
    a->name = name.ptr;
    a->name_len = name.len;
    return true;
}

void op_lock_acquire(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lock_request_args a;
    if (!read_acquire_args(c, rid, f, &a))
        return;
    /* the waiting slot is checked first, so a refusal queues nothing */
    if (pending_check(c, rid) < 0)
        return;
    int refused;
    struct lock_req *r = locks_request(c, rid, &a, &client_owner, NULL, &refused);
    if (!r) {
        locks_reply_refused(c, rid, refused);
        return;
    }
    if (r->granted)
        return;                 /* replied by client_granted */
    r->p.abort = client_abort;
    r->p.drop = client_drop;
    if (pending_start(c, &r->p, rid, "lock.acquire") < 0) {   /* memory: replied */
        struct lock_queue *q = r->q;
        unlink_req(r);
        free(r);
        queue_process(q);
    }
}

/* Finds a lock held by c, or replies UNKNOWN_LOCK. */
static struct lock_req *held_by(struct conn *c, uint64_t rid, uint64_t id)
{
    struct hentry *e = hashmap_get(&L.by_id, &id, sizeof id);
    struct lock_req *r = e ? list_entry(e, struct lock_req, by_id) : NULL;
    if (!r || r->conn != c || r->owner != &client_owner) {
        conn_reply_error(c, rid, COORD_EUNKNOWN_LOCK,
                         "no such lock held by this connection");
        return NULL;
    }
    return r;
}

void op_lock_release(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t id = 0;
    coord_field_uint(f, "lock", true, &id);
    if (!fields_ok(c, rid, f))
        return;
    struct lock_req *r = held_by(c, rid, id);
    if (!r)
        return;
    locks_release(r);
    conn_reply_ok(c, rid);
}

void op_lock_renew(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t id = 0, lease_ms = 0;
    coord_field_uint(f, "lock", true, &id);
    coord_field_uint(f, "lease_ms", true, &lease_ms);
    if (!fields_ok(c, rid, f) || !duration_ok(c, rid, "lease_ms", lease_ms, LIMIT_WAIT_MS))
        return;
    struct lock_req *r = held_by(c, rid, id);
    if (!r)
        return;
    locks_renew(r, lease_ms);
    conn_reply_ok(c, rid);
}

static bool same_scope(const struct lock_queue *q, const struct conn *c)
{
    return q->scope_len == c->scope_len &&
           memcmp(q->key + 4, c->scope, c->scope_len) == 0;
}

/* Entries stop before the reply outgrows the frame limit ("truncated"). */
static bool query_list(struct conn *c, coord_enc *e, struct list *order,
                       bool held, uint64_t now)
{
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, order) {
        struct lock_req *r = list_entry(pos, struct lock_req, order_link);
        if (!same_scope(r->q, c))
            continue;
        uint32_t nlen;
        const uint8_t *name = lock_req_name(r, &nlen);
        coord_enc_mark m = coord_enc_mark_here(e);
        coord_enc_map_begin(e);
        coord_enc_kv_name(e, "name", name, nlen);
        coord_enc_kv_cstr(e, "mode", r->mode == LOCK_SHARED ? "shared" : "exclusive");
        coord_enc_kv_uint(e, "conn", r->conn->id);
        coord_enc_kv_cstr(e, "client", r->conn->client ? r->conn->client : "");
        coord_enc_kv_uint(e, "pid", r->conn->pid);
        if (held) {
            coord_enc_kv_uint(e, "token", r->token);
            coord_enc_kv_uint(e, "lock", r->id);
        }
        coord_enc_kv_uint(e, "age_ms", now - r->since_ms);
        coord_enc_map_end(e);
        if (list_entry_overflows(c, e, &m))
            return true;
    }
    return false;
}

void op_lock_query(struct conn *c, uint64_t rid, coord_fields *f)
{
    (void)f;
    uint64_t now = broker_now_ms(c->b);
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_key(&e, "held");
    coord_enc_array_begin(&e);
    bool cut = query_list(c, &e, &L.held_order, true, now);
    coord_enc_array_end(&e);
    coord_enc_key(&e, "pending");
    coord_enc_array_begin(&e);
    if (!cut)
        cut = query_list(c, &e, &L.pending_order, false, now);
    coord_enc_array_end(&e);
    if (cut)
        coord_enc_kv_bool(&e, "truncated", true);
    conn_enc_finish(c, &e);
}
