/* lockops.c - the lock.* ops: a client's use of the lock table.
 *
 * A client lock is a table request (struct lock_req) plus what the client
 * side needs: the waiting acquire (a pending request, cancellable) and the
 * link into its connection's locks, released when the connection goes. */
#include <stdlib.h>
#include <string.h>
#include "coord-ops.h"
#include "coord-limits.h"
#include "errors.h"
#include "locks.h"
#include "ops.h"

struct client_lock {
    struct lock_req r;
    struct pending p;              /* the acquire, while it waits */
    struct list conn_link;         /* conn->locks, while held */
};

static const struct lock_owner client_owner;

/* Client locks freed lately, reused before calloc: a lock cycle allocates
 * nothing.  LOCK_CACHE bounds what a burst leaves behind (a few KiB).
 * Under AddressSanitizer nothing is cached, so a use after free is still
 * reported where it happens. */
#if defined(__SANITIZE_ADDRESS__)
#define LOCK_CACHE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOCK_CACHE 0
#endif
#endif
#ifndef LOCK_CACHE
#define LOCK_CACHE 64
#endif

#if LOCK_CACHE > 0
static struct client_lock *lock_cache[LOCK_CACHE];
static unsigned lock_cached;
#endif

static struct client_lock *client_lock_new(void)
{
#if LOCK_CACHE > 0
    if (lock_cached > 0) {
        struct client_lock *cl = lock_cache[--lock_cached];
        memset(cl, 0, sizeof *cl);
        return cl;
    }
#endif
    return calloc(1, sizeof(struct client_lock));
}

static void client_lock_free(struct client_lock *cl)
{
#if LOCK_CACHE > 0
    if (lock_cached < LOCK_CACHE) {
        lock_cache[lock_cached++] = cl;
        return;
    }
#endif
    free(cl);
}

static struct client_lock *client_lock_of(struct lock_req *r)
{
    return (struct client_lock *)((char *)r - offsetof(struct client_lock, r));
}

static void reply_granted(struct client_lock *cl, uint64_t rid)
{
    struct conn *c = cl->r.conn;
    list_append(&c->locks, &cl->conn_link);
    /* granted: true, lock, token, the keys written as their bytes */
    uint8_t pairs[14 + 9 + 6 + 9], *p = pairs;
    memcpy(p, "\xa7" "granted" "\xc3" "\xa4" "lock", 14);
    p = coord_put_uint(p + 14, cl->r.id);
    memcpy(p, "\xa5" "token", 6);
    p = coord_put_uint(p + 6, cl->r.token);
    conn_reply_with(c, rid, pairs, (size_t)(p - pairs), 3);
}

static void client_granted(struct lock_req *r)
{
    struct client_lock *cl = client_lock_of(r);
    pending_finish(&cl->p);
    reply_granted(cl, cl->p.rid);
}

static void client_lost(struct lock_req *r, enum reason why, const struct lock_req *by)
{
    (void)by;
    struct client_lock *cl = client_lock_of(r);
    size_t nlen;
    const uint8_t *name = lock_req_name(r, &nlen);
    coord_enc e;
    conn_enc_begin_event(r->conn, &e, coord_event_name(COORD_EV_LOCK_LOST));
    coord_enc_kv_uint(&e, "lock", r->id);
    coord_enc_kv_name(&e, "name", name, nlen);
    coord_enc_kv_cstr(&e, "reason", reason_name(why));
    coord_enc_kv_uint(&e, "token", r->token);
    conn_enc_finish(r->conn, &e);
    list_del(&cl->conn_link);
    client_lock_free(cl);
}

static void client_failed(struct lock_req *r, int code)
{
    struct client_lock *cl = client_lock_of(r);
    pending_finish(&cl->p);
    conn_reply_error(r->conn, cl->p.rid, code,
                     code == COORD_ETIMEOUT ? "lock not granted within timeout_ms" : NULL);
    client_lock_free(cl);
}

static const struct lock_owner client_owner = {
    client_granted, client_lost, client_failed, false,
};

/* cancel (ABORTED) or shutdown (SHUTTING_DOWN) of a waiting acquire */
static void client_abort(struct pending *p, int code)
{
    struct client_lock *cl = list_entry(p, struct client_lock, p);
    pending_finish(p);
    conn_reply_error(cl->r.conn, p->rid, code, NULL);
    locks_release(&cl->r);
    client_lock_free(cl);
}

/* the connection is gone: its waiting acquire just leaves the queue */
static void client_drop(struct pending *p)
{
    struct client_lock *cl = list_entry(p, struct client_lock, p);
    pending_finish(p);
    locks_release(&cl->r);
    client_lock_free(cl);
}

void lockops_conn_closed(struct conn *c)
{
    while (!list_empty(&c->locks)) {
        struct client_lock *cl = list_entry(list_shift(&c->locks), struct client_lock, conn_link);
        locks_release(&cl->r);
        client_lock_free(cl);
    }
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
    bool have_timeout = false;
    /* most acquires send none of these: one test says so */
    if (!coord_fields_lack(f, coord_key_bit("if_available") | coord_key_bit("steal") |
                                  coord_key_bit("timeout_ms") | coord_key_bit("lease_ms"))) {
        coord_field_bool(f, "if_available", false, &a->if_available);
        coord_field_bool(f, "steal", false, &a->steal);
        have_timeout = coord_field_uint(f, "timeout_ms", false, &a->timeout_ms);
        coord_field_uint(f, "lease_ms", false, &a->lease_ms);
    }
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
    struct client_lock *cl = client_lock_new();
    if (!cl) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    list_init(&cl->conn_link);
    list_init(&cl->p.link);
    enum lock_outcome o = locks_request(&cl->r, c, &a, &client_owner);
    if (o == LOCK_GRANTED) {
        reply_granted(cl, rid);
        return;
    }
    if (o != LOCK_QUEUED) {
        client_lock_free(cl);
        locks_reply_refused(c, rid, o);
        return;
    }
    cl->p.abort = client_abort;
    cl->p.drop = client_drop;
    if (pending_start(c, &cl->p, rid, COORD_OP_LOCK_ACQUIRE) < 0) {   /* memory: replied */
        locks_release(&cl->r);
        client_lock_free(cl);
    }
}

/* Finds a lock held by c, or replies UNKNOWN_LOCK. */
static struct client_lock *held_by(struct conn *c, uint64_t rid, uint64_t id)
{
    struct lock_req *r = locks_find(id);
    if (!r || r->conn != c || r->owner != &client_owner) {
        conn_reply_error(c, rid, COORD_EUNKNOWN_LOCK,
                         "no such lock held by this connection");
        return NULL;
    }
    return client_lock_of(r);
}

void op_lock_release(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t id = 0;
    coord_field_uint(f, "lock", true, &id);
    if (!fields_ok(c, rid, f))
        return;
    struct client_lock *cl = held_by(c, rid, id);
    if (!cl)
        return;
    list_del(&cl->conn_link);
    locks_release(&cl->r);
    client_lock_free(cl);
    conn_reply_ok(c, rid);
}

void op_lock_renew(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t id = 0, lease_ms = 0;
    coord_field_uint(f, "lock", true, &id);
    coord_field_uint(f, "lease_ms", true, &lease_ms);
    if (!fields_ok(c, rid, f) || !duration_ok(c, rid, "lease_ms", lease_ms, LIMIT_WAIT_MS))
        return;
    struct client_lock *cl = held_by(c, rid, id);
    if (!cl)
        return;
    locks_renew(&cl->r, lease_ms);
    conn_reply_ok(c, rid);
}

/* ---- lock.query ---- */

struct query {
    struct conn *c;
    coord_enc *e;
    bool held;
    uint64_t now;
};

/* One entry; true (stop, truncated) when it would outgrow the frame. */
static bool query_entry(struct lock_req *r, void *ud)
{
    struct query *qy = ud;
    coord_enc *e = qy->e;
    size_t nlen;
    const uint8_t *name = lock_req_name(r, &nlen);
    coord_enc_mark m = coord_enc_mark_here(e);
    coord_enc_map_begin(e);
    coord_enc_kv_name(e, "name", name, nlen);
    coord_enc_kv_cstr(e, "mode", r->mode == LOCK_SHARED ? "shared" : "exclusive");
    coord_enc_kv_uint(e, "conn", r->conn->id);
    coord_enc_kv_cstr(e, "client", r->conn->client ? r->conn->client : "");
    coord_enc_kv_uint(e, "pid", r->conn->pid);
    if (qy->held) {
        coord_enc_kv_uint(e, "token", r->token);
        coord_enc_kv_uint(e, "lock", r->id);
    }
    coord_enc_kv_uint(e, "age_ms", qy->now - r->since_ms);
    coord_enc_map_end(e);
    return list_entry_overflows(qy->c, e, &m);
}

void op_lock_query(struct conn *c, uint64_t rid, coord_fields *f)
{
    (void)f;
    coord_enc e;
    struct query qy = { c, &e, true, broker_now_ms(c->b) };
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_key(&e, "held");
    coord_enc_array_begin(&e);
    bool cut = locks_walk(c, true, query_entry, &qy);
    coord_enc_array_end(&e);
    coord_enc_key(&e, "pending");
    coord_enc_array_begin(&e);
    qy.held = false;
    if (!cut)
        cut = locks_walk(c, false, query_entry, &qy);
    coord_enc_array_end(&e);
    if (cut)
        coord_enc_kv_bool(&e, "truncated", true);
    conn_enc_finish(c, &e);
}
