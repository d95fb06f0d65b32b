/* flights.c - libcoord's single-flight and completion-record calls:
 * flight.join (blocking and async), flight.complete, flight.fail,
 * flight.list, reading flight.abort events, coord_once on top of them, and
 * record.get/list/purge.  Built on the public request/reply calls of
 * client.c, like locks.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* The broker's limits on a failure (flight.fail refuses longer ones). */
#define MAX_ERR_CODE 256
#define MAX_ERR_MESSAGE 4096

/* A malloc'd C string of the string field key of m ("" when absent; cut at
 * an embedded NUL). */
static char *dup_str_field(coord_map m, const char *key)
{
    const char *s;
    size_t n;
    coord__map_bytes(m, key, &s, &n);
    const char *nul = n ? memchr(s, '\0', n) : NULL;
    if (nul)
        n = (size_t)(nul - s);
    return coord__dup_bytes(s, n);
}

/* A string cut to at most max bytes (a malloc'd copy when cut, else s). */
static const char *cut_str(const char *s, size_t max, char **copy)
{
    *copy = NULL;
    if (!s || strlen(s) <= max)
        return s;
    *copy = coord__dup_bytes(s, max);
    return *copy ? *copy : "";
}

COORD_API void coord_flight_clear(coord_flight *f)
{
    if (!f)
        return;
    free(f->result);
    free(f->error_code);
    free(f->error_message);
    memset(f, 0, sizeof *f);
}

COORD_API void coord_record_clear(coord_record *r)
{
    if (!r)
        return;
    free(r->result);
    free(r->error_code);
    free(r->error_message);
    memset(r, 0, sizeof *r);
}

/* ---- flight.join ---- */

static coord_req_t *join_req(const void *key, size_t key_len, const coord_flight_opts *o)
{
    coord_req_t *r = coord__req_new(COORD_OP_FLIGHT_JOIN);
    if (!r)
        return NULL;
    coord_req_str(r, "key", key, key_len);
    if (o) {
        if (o->owner_ttl_ms)
            coord_req_uint(r, "owner_ttl_ms", o->owner_ttl_ms);
        if (o->wait_ms)
            coord_req_uint(r, "wait_ms", o->wait_ms);
        if (o->max_age_ms)
            coord_req_uint(r, "max_age_ms", o->max_age_ms);
        if (o->abort_when_orphaned)
            coord_req_bool(r, "abort_when_orphaned", true);
    }
    return r;
}

static bool role_is(const char *s, size_t n, const char *want)
{
    return s && n == strlen(want) && memcmp(s, want, n) == 0;
}

/* Reads an ok:true reply of flight.join into *out (zeroed first): 0,
 * COORD_EPROTOCOL (the reply makes no sense) or COORD_ENOMEM; *out is
 * zeroed on errors. */
static int join_result(coord_t *c, const coord_reply_t *reply, coord_flight *out)
{
    coord_map m = coord_reply_map(reply);
    const char *role = NULL;
    size_t rn = 0;
    memset(out, 0, sizeof *out);
    coord_map_str(m, "role", &role, &rn);
    coord_map_uint(m, "fence", &out->fence);
    if (role_is(role, rn, "owner")) {
        if (!coord_map_uint(m, "flight", &out->flight) ||
            !coord_map_uint(m, "fence", &out->fence))
            goto bad;
        out->role = COORD_FLIGHT_OWNER;
        return 0;
    }
    if (role_is(role, rn, "result")) {
        const void *p = NULL;
        size_t n = 0;
        const char *src = NULL;
        size_t sn = 0;
        if (!coord_map_bin(m, "result", &p, &n))
            goto bad;
        coord_map_uint(m, "age_ms", &out->age_ms);
        if (coord_map_str(m, "source", &src, &sn))
            out->from_record = role_is(src, sn, "record");
        out->result = coord__dup_bytes(p, n);
        if (!out->result)
            goto nomem;
        out->result_len = n;
        out->role = COORD_FLIGHT_RESULT;
        return 0;
    }
    if (role_is(role, rn, "failed")) {
        coord_map err;
        if (!coord_map_map(m, "error", &err))
            goto bad;
        coord_map_bool(m, "retryable", &out->retryable);
        out->error_code = dup_str_field(err, "code");
        out->error_message = dup_str_field(err, "message");
        if (!out->error_code || !out->error_message)
            goto nomem;
        out->role = COORD_FLIGHT_FAILED;
        return 0;
    }
bad:
    coord_flight_clear(out);
    coord__set_error(c, "%s: reply without a known role and its fields",
                     coord_op_name(COORD_OP_FLIGHT_JOIN));
    return COORD_EPROTOCOL;
nomem:
    coord_flight_clear(out);
    coord__set_error(c, "out of memory");
    return COORD_ENOMEM;
}

COORD_API int coord_flight_join(coord_t *c, const void *key, size_t key_len,
                                const coord_flight_opts *o, coord_flight *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !out || !coord__bytes_ok(key, key_len))
        return COORD_EINVAL;
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, join_req(key, key_len, o), &reply);
    if (rc < 0)
        return rc;
    rc = join_result(c, reply, out);
    coord_reply_free(reply);
    return rc;
}

struct join_ctx {
    coord_flight_cb cb;
    void *ud;
};

/* Runs exactly once per request (client.c guarantees it, COORD_ECLOSED
 * included), so the context is freed here. */
static void on_join_reply(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct join_ctx ctx = *(struct join_ctx *)ud;
    free(ud);
    coord_flight f;
    memset(&f, 0, sizeof f);
    if (status == 0)
        status = join_result(c, reply, &f);
    if (ctx.cb)
        ctx.cb(c, status, &f, ctx.ud);
    coord_flight_clear(&f);
}

COORD_API int coord_flight_join_async(coord_t *c, const void *key, size_t key_len,
                                      const coord_flight_opts *o, coord_flight_cb cb,
                                      void *ud, uint64_t *rid_out)
{
    if (rid_out)
        *rid_out = 0;
    if (!c || !coord__bytes_ok(key, key_len))
        return COORD_EINVAL;
    struct join_ctx *ctx = malloc(sizeof *ctx);
    if (ctx) {
        ctx->cb = cb;
        ctx->ud = ud;
    }
    return coord__send_ctx(c, join_req(key, key_len, o), on_join_reply, ctx, rid_out);
}

/* ---- complete, fail, list ---- */

COORD_API int coord_flight_complete(coord_t *c, uint64_t flight, uint64_t fence,
                                    const void *result, size_t len, uint64_t keep_ms,
                                    uint64_t *delivered)
{
    if (delivered)
        *delivered = 0;
    if (!c || !coord__bytes_ok(result, len))
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_FLIGHT_COMPLETE);
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "flight", flight);
    coord_req_uint(r, "fence", fence);
    coord_req_bin(r, "result", result, len);
    if (keep_ms)
        coord_req_uint(r, "keep_ms", keep_ms);
    return coord__call_uint(c, r, "delivered", delivered);
}

COORD_API int coord_flight_fail(coord_t *c, uint64_t flight, uint64_t fence,
                                const char *code, const char *message,
                                bool retryable, uint64_t keep_ms)
{
    if (!c)
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_FLIGHT_FAIL);
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "flight", flight);
    coord_req_uint(r, "fence", fence);
    coord_req_strmap2(r, "error", "code", code ? code : "FAILED",
                      "message", message ? message : "");
    coord_req_bool(r, "retryable", retryable);
    if (keep_ms)
        coord_req_uint(r, "keep_ms", keep_ms);
    return coord__call_free(c, r, NULL);
}

COORD_API int coord_flight_list(coord_t *c, coord_reply_t **reply)
{
    if (reply)
        *reply = NULL;
    if (!c || !reply)
        return COORD_EINVAL;
    return coord__call_free(c, coord__req_new(COORD_OP_FLIGHT_LIST), reply);
}

COORD_API bool coord_event_flight_abort(const coord_reply_t *ev, coord_flight_abort *out)
{
    if (!coord__event_is(ev, COORD_EV_FLIGHT_ABORT))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    coord_map_uint(m, "flight", &out->flight);
    coord_map_uint(m, "fence", &out->fence);
    coord__map_bytes(m, "reason", &out->reason, &out->reason_len);
    return true;
}

/* ---- coord_once ---- */

/* Completes (ok) or fails the flight we own with the work's outcome, and
 * fills *out with it.  Takes ownership of result, code and msg. */
static int owner_finish(coord_t *c, const coord_flight *own, int wrc, void *result,
                        size_t len, char *code, char *msg, uint64_t keep_ms,
                        coord_flight *out)
{
    int rc;
    if (wrc == COORD_WORK_OK) {
        free(code);
        free(msg);
        rc = coord_flight_complete(c, own->flight, own->fence, result, len, keep_ms, NULL);
        if (rc == COORD_ETOO_LARGE && keep_ms)
            /* the key cannot be stored as a record (or the result is too
             * big, which the next try tells): deliver it unkept */
            rc = coord_flight_complete(c, own->flight, own->fence, result, len, 0, NULL);
        if (rc == COORD_ETOO_LARGE) {
            /* nobody must wait for a result that can never travel */
            char text[160];
            snprintf(text, sizeof text, "the owner's result of %zu bytes does not fit "
                     "a frame", len);
            coord_flight_fail(c, own->flight, own->fence, "TOO_LARGE", text, false, 0);
            coord__set_error(c, "%s", text);
        }
        if (rc < 0) {
            free(result);
            return rc;
        }
        out->role = COORD_FLIGHT_RESULT;
        if (!result) {
            out->result = coord__dup_bytes("", 0);
        } else {
            /* the work's buffer has no room for our NUL: make some */
            char *p = realloc(result, len + 1);
            if (p)
                p[len] = '\0';
            else
                free(result);
            out->result = p;
        }
        if (!out->result) {
            coord__set_error(c, "out of memory (the result was delivered)");
            return COORD_ENOMEM;
        }
        out->result_len = len;
        out->fence = own->fence;
        out->flight = own->flight;
        out->ran = true;
        return 0;
    }

    free(result);
    bool retryable = wrc == COORD_WORK_RETRYABLE;
    char *cc, *mc;
    const char *cs = cut_str(code && code[0] ? code : "WORK_FAILED", MAX_ERR_CODE, &cc);
    const char *ms = cut_str(msg ? msg : "", MAX_ERR_MESSAGE, &mc);
    /* a retryable failure is never served from a record: don't let it
     * replace an older good one */
    rc = coord_flight_fail(c, own->flight, own->fence, cs, ms, retryable,
                           retryable ? 0 : keep_ms);
    if (rc == COORD_ETOO_LARGE && keep_ms && !retryable)
        rc = coord_flight_fail(c, own->flight, own->fence, cs, ms, retryable, 0);
    if (rc == 0) {
        out->role = COORD_FLIGHT_FAILED;
        out->error_code = coord__dup_bytes(cs, strlen(cs));
        out->error_message = coord__dup_bytes(ms, strlen(ms));
        out->retryable = retryable;
        out->fence = own->fence;
        out->flight = own->flight;
        out->ran = true;
        if (!out->error_code || !out->error_message) {
            coord_flight_clear(out);
            coord__set_error(c, "out of memory");
            rc = COORD_ENOMEM;
        }
    }
    free(cc);
    free(mc);
    free(code);
    free(msg);
    return rc;
}

COORD_API int coord_once(coord_t *c, const void *key, size_t key_len,
                         const coord_flight_opts *o, uint64_t keep_ms,
                         coord_work_fn work, void *ud, coord_flight *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !work || !out || !coord__bytes_ok(key, key_len))
        return COORD_EINVAL;
    coord_flight f;
    int rc = coord_flight_join(c, key, key_len, o, &f);
    if (rc < 0)
        return rc;
    if (f.role != COORD_FLIGHT_OWNER) {
        *out = f;               /* a follower's (or a record's) outcome */
        return 0;
    }
    void *result = NULL;
    size_t len = 0;
    char *code = NULL, *msg = NULL;
    int wrc = work(ud, &result, &len, &code, &msg);
    if (wrc == COORD_WORK_OK && !result && len) {
        free(code);
        free(msg);
        coord_flight_fail(c, f.flight, f.fence, "WORK_FAILED",
                          "work returned no result bytes", true, 0);
        coord__set_error(c, "coord_once: work returned len %zu without a result", len);
        return COORD_EINVAL;
    }
    rc = owner_finish(c, &f, wrc, result, len, code, msg, keep_ms, out);
    if (rc < 0)
        memset(out, 0, sizeof *out);
    return rc;
}

/* ---- records ---- */

COORD_API int coord_record_get(coord_t *c, const void *key, size_t key_len,
                               coord_record *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !out || !coord__bytes_ok(key, key_len))
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_RECORD_GET);
    if (!r)
        return COORD_ENOMEM;
    coord_req_str(r, "key", key, key_len);
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    coord_map m = coord_reply_map(reply);
    const char *st = NULL;
    size_t sn = 0;
    coord_map_str(m, "status", &st, &sn);
    coord_map_uint(m, "fence", &out->fence);
    coord_map_uint(m, "created_ms", &out->created_ms);
    coord_map_uint(m, "expires_ms", &out->expires_ms);
    rc = 0;
    if (role_is(st, sn, "completed")) {
        const void *p = NULL;
        size_t n = 0;
        if (!coord_map_bin(m, "result", &p, &n)) {
            rc = COORD_EPROTOCOL;
        } else if (!(out->result = coord__dup_bytes(p, n))) {
            rc = COORD_ENOMEM;
        } else {
            out->result_len = n;
        }
    } else if (role_is(st, sn, "failed")) {
        coord_map err;
        out->failed = true;
        coord_map_bool(m, "retryable", &out->retryable);
        if (!coord_map_map(m, "error", &err)) {
            rc = COORD_EPROTOCOL;
        } else {
            out->error_code = dup_str_field(err, "code");
            out->error_message = dup_str_field(err, "message");
            if (!out->error_code || !out->error_message)
                rc = COORD_ENOMEM;
        }
    } else {
        rc = COORD_EPROTOCOL;
    }
    coord_reply_free(reply);
    if (rc < 0) {
        coord_record_clear(out);
        if (rc == COORD_ENOMEM)
            coord__set_error(c, "out of memory");
        else
            coord__set_error(c, "%s: reply without status and its fields",
                             coord_op_name(COORD_OP_RECORD_GET));
    }
    return rc;
}

COORD_API int coord_record_list(coord_t *c, const void *prefix, size_t prefix_len,
                                unsigned limit, coord_reply_t **reply)
{
    if (reply)
        *reply = NULL;
    if (!c || !reply || !coord__bytes_ok(prefix, prefix_len))
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_RECORD_LIST);
    if (!r)
        return COORD_ENOMEM;
    if (prefix_len)
        coord_req_str(r, "prefix", prefix, prefix_len);
    if (limit)
        coord_req_uint(r, "limit", limit);
    return coord__call_free(c, r, reply);
}

COORD_API int coord_record_purge(coord_t *c, const void *prefix, size_t prefix_len,
                                 uint64_t *deleted)
{
    if (deleted)
        *deleted = 0;
    if (!c || !coord__bytes_ok(prefix, prefix_len))
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_RECORD_PURGE);
    if (!r)
        return COORD_ENOMEM;
    coord_req_str(r, "prefix", prefix ? prefix : "", prefix_len);
    return coord__call_uint(c, r, "deleted", deleted);
}
