/* locks.c - libcoord's lock calls: lock.acquire (blocking and async),
 * lock.release, lock.renew, lock.query, and reading lock.lost events.
 * Everything is built on the public request/reply calls of client.c. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* The lock.acquire request for name and o; NULL when out of memory. */
static coord_req_t *acquire_req(const void *name, size_t name_len,
                                const coord_lock_opts *o)
{
    coord_req_t *r = coord__req_new(COORD_OP_LOCK_ACQUIRE);
    if (!r)
        return NULL;
    coord_req_str(r, "name", name, name_len);
    if (o) {
        if (o->shared)
            coord_req_cstr(r, "mode", "shared");
        if (o->if_available)
            coord_req_bool(r, "if_available", true);
        if (o->steal)
            coord_req_bool(r, "steal", true);
        if (o->timeout_ms)
            coord_req_uint(r, "timeout_ms", o->timeout_ms);
        if (o->lease_ms)
            coord_req_uint(r, "lease_ms", o->lease_ms);
    }
    return r;
}

/* Reads an ok:true reply of lock.acquire: 0 (granted, lock and token set),
 * COORD_LOCK_BUSY, or COORD_EPROTOCOL when the reply makes no sense. */
static int acquire_result(const coord_reply_t *reply, uint64_t *lock,
                          uint64_t *token)
{
    coord_map m = coord_reply_map(reply);
    bool granted;
    *lock = *token = 0;
    if (!coord_map_bool(m, "granted", &granted))
        return COORD_EPROTOCOL;
    if (!granted)
        return COORD_LOCK_BUSY;
    if (!coord_map_uint(m, "lock", lock) || !coord_map_uint(m, "token", token)) {
        *lock = *token = 0;
        return COORD_EPROTOCOL;
    }
    return 0;
}

COORD_API int coord_lock_acquire(coord_t *c, const void *name, size_t name_len,
                                 const coord_lock_opts *o, uint64_t *lock,
                                 uint64_t *token)
{
    uint64_t l = 0, t = 0;
    if (lock)
        *lock = 0;
    if (token)
        *token = 0;
    if (!c || !coord__bytes_ok(name, name_len))
        return COORD_EINVAL;
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, acquire_req(name, name_len, o), &reply);
    coord__wait_timed_out(c, rc, "lock not granted", o ? o->timeout_ms : 0);
    if (rc < 0)
        return rc;
    rc = acquire_result(reply, &l, &t);
    coord_reply_free(reply);
    if (rc == COORD_EPROTOCOL)
        coord__set_error(c, "%s: reply without granted/lock/token",
                         coord_op_name(COORD_OP_LOCK_ACQUIRE));
    else if (rc == COORD_LOCK_BUSY)
        coord__set_error(c, "%s: not granted at once (if_available)",
                         coord_op_name(COORD_OP_LOCK_ACQUIRE));
    if (lock)
        *lock = l;
    if (token)
        *token = t;
    return rc;
}

struct acquire_ctx {
    coord_lock_cb cb;
    void *ud;
    uint64_t timeout_ms;
};

/* Runs exactly once per request (client.c guarantees it, COORD_ECLOSED
 * included), so the context is freed here. */
static void on_acquire_reply(coord_t *c, int status, const coord_reply_t *reply,
                             void *ud)
{
    struct acquire_ctx ctx = *(struct acquire_ctx *)ud;
    free(ud);
    uint64_t lock = 0, token = 0;
    coord__wait_timed_out(c, status, "lock not granted", ctx.timeout_ms);
    if (status == 0) {
        status = acquire_result(reply, &lock, &token);
        if (status == COORD_EPROTOCOL)
            coord__set_error(c, "%s: reply without granted/lock/token",
                             coord_op_name(COORD_OP_LOCK_ACQUIRE));
    }
    if (ctx.cb)
        ctx.cb(c, status, lock, token, ctx.ud);
}

COORD_API int coord_lock_acquire_async(coord_t *c, const void *name, size_t name_len,
                                       const coord_lock_opts *o, coord_lock_cb cb,
                                       void *ud, uint64_t *rid_out)
{
    if (rid_out)
        *rid_out = 0;
    if (!c || !coord__bytes_ok(name, name_len))
        return COORD_EINVAL;
    struct acquire_ctx *ctx = malloc(sizeof *ctx);
    if (ctx) {
        ctx->cb = cb;
        ctx->ud = ud;
        ctx->timeout_ms = o ? o->timeout_ms : 0;
    }
    return coord__send_ctx(c, acquire_req(name, name_len, o), on_acquire_reply, ctx,
                           rid_out);
}

COORD_API int coord_lock_release(coord_t *c, uint64_t lock)
{
    if (!c)
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_LOCK_RELEASE);
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "lock", lock);
    return coord__call_free(c, r, NULL);
}

COORD_API int coord_lock_renew(coord_t *c, uint64_t lock, uint64_t lease_ms)
{
    if (!c)
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_LOCK_RENEW);
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "lock", lock);
    coord_req_uint(r, "lease_ms", lease_ms);
    return coord__call_free(c, r, NULL);
}

COORD_API int coord_lock_query(coord_t *c, coord_reply_t **reply)
{
    if (reply)
        *reply = NULL;
    if (!c || !reply)
        return COORD_EINVAL;
    return coord__call_free(c, coord__req_new(COORD_OP_LOCK_QUERY), reply);
}

COORD_API bool coord_event_lock_lost(const coord_reply_t *ev, coord_lock_lost *out)
{
    if (!coord__event_is(ev, COORD_EV_LOCK_LOST))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    coord_map_uint(m, "lock", &out->lock);
    coord_map_uint(m, "token", &out->token);
    coord__map_bytes(m, "name", &out->name, &out->name_len);
    coord__map_bytes(m, "reason", &out->reason, &out->reason_len);
    return true;
}
