/* flights.c - libcoord's single-flight and completion-record calls:
 * flight.join (blocking and async, with stale-while-revalidate),
 * flight.complete, flight.fail (with a backoff), flight.list, the kill
 * switch (flight.disable/enable/disabled), reading flight.abort and
 * flight.updated events, coord_once on top of them (with its fallback when
 * the broker cannot be reached), and record.get/list/purge.  Built on the
 * public request/reply calls of client.c, like locks.c. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
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
    if (f->by_ref && f->result_fd >= 0)
        close(f->result_fd);
    free(f->result);
    free(f->stale_result);
    free(f->error_code);
    free(f->error_message);
    free(f->version);
    memset(f, 0, sizeof *f);
}

/* A result by reference read into *result (by_ref cleared, fd closed). */
static int load_ref(bool *by_ref, int *fd, void **result, size_t len)
{
    if (!*by_ref)
        return 0;
    void *p = NULL;
    int rc = *fd >= 0 ? coord__read_fd(*fd, len, &p) : COORD_EINVAL;
    if (rc < 0)
        return rc;
    close(*fd);
    *fd = -1;
    free(*result);
    *result = p;
    *by_ref = false;
    return 0;
}

COORD_API int coord_flight_result_load(coord_flight *f)
{
    if (!f)
        return COORD_EINVAL;
    return load_ref(&f->by_ref, &f->result_fd, &f->result, f->result_len);
}

COORD_API int coord_record_result_load(coord_record *r)
{
    if (!r)
        return COORD_EINVAL;
    return load_ref(&r->by_ref, &r->result_fd, &r->result, r->result_len);
}

COORD_API void coord_record_clear(coord_record *r)
{
    if (!r)
        return;
    if (r->by_ref && r->result_fd >= 0)
        close(r->result_fd);
    free(r->result);
    free(r->error_code);
    free(r->error_message);
    free(r->client);
    free(r->instance);
    free(r->version);
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
        if (o->stale_ms)
            coord_req_uint(r, "stale_ms", o->stale_ms);
        if (o->notify)
            coord_req_bool(r, "notify", true);
        if (o->supersede)
            coord_req_bool(r, "supersede", true);
        if (o->priority)
            coord_req_uint(r, "priority", o->priority);
        if (o->version)
            coord_req_str(r, "version", o->version, strlen(o->version));
        if (o->own_version)
            coord_req_str(r, "other_version", "own", 3);
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
static int join_result(coord_t *c, coord_reply_t *reply, coord_flight *out)
{
    coord_map m = coord_reply_map(reply);
    const char *role = NULL;
    size_t rn = 0;
    memset(out, 0, sizeof *out);
    coord_map_str(m, "role", &role, &rn);
    coord_map_uint(m, "fence", &out->fence);
    if (role_is(role, rn, "owner")) {
        coord_map st;
        if (!coord_map_uint(m, "flight", &out->flight) ||
            !coord_map_uint(m, "fence", &out->fence))
            goto bad;
        coord_map_bool(m, "bypass", &out->bypass);
        coord_map_uint(m, "superseded", &out->superseded);
        const char *ver = NULL;
        size_t vn = 0;
        coord__map_bytes(m, "version", &ver, &vn);
        if (vn && !(out->version = dup_str_field(m, "version")))
            goto nomem;
        if (coord_map_map(m, "stale", &st)) {
            /* the owner of a revalidation: the stale record it replaces
             * (one kept by reference is read into memory) */
            const void *p = NULL;
            size_t n = 0;
            uint64_t size;
            if (coord_map_uint(st, "result_fd", &size)) {
                int fd = coord_reply_take_fd(reply);
                int lrc = fd < 0 || size > SIZE_MAX - 1 ? COORD_EPROTOCOL
                        : coord__read_fd(fd, (size_t)size, &out->stale_result);
                if (fd >= 0)
                    close(fd);
                if (lrc == COORD_EPROTOCOL)
                    goto bad;
                if (lrc < 0)
                    goto nomem;
                n = (size_t)size;
            } else if (!coord_map_bin(st, "result", &p, &n)) {
                goto bad;
            } else if (!(out->stale_result = coord__dup_bytes(p, n))) {
                goto nomem;
            }
            coord_map_uint(st, "age_ms", &out->stale_age_ms);
            coord_map_uint(st, "fence", &out->stale_fence);
            out->stale_result_len = n;
            out->revalidation = true;
        }
        out->role = COORD_FLIGHT_OWNER;
        return 0;
    }
    if (role_is(role, rn, "result")) {
        const void *p = NULL;
        size_t n = 0;
        const char *src = NULL;
        size_t sn = 0;
        uint64_t size;
        bool by_ref = coord_map_uint(m, "result_fd", &size);
        if (by_ref && (size > SIZE_MAX - 1 || (out->result_fd = coord_reply_take_fd(reply)) < 0))
            goto bad;
        if (!by_ref && !coord_map_bin(m, "result", &p, &n))
            goto bad;
        coord_map_uint(m, "age_ms", &out->age_ms);
        if (coord_map_str(m, "source", &src, &sn))
            out->from_record = role_is(src, sn, "record");
        coord_map_bool(m, "stale", &out->stale);
        coord_map_bool(m, "revalidating", &out->revalidating);
        out->role = COORD_FLIGHT_RESULT;
        if (by_ref) {
            out->by_ref = true;
            out->result_len = (size_t)size;
            return 0;
        }
        out->result = coord__dup_bytes(p, n);
        if (!out->result)
            goto nomem;
        out->result_len = n;
        return 0;
    }
    if (role_is(role, rn, "failed")) {
        coord_map err = { NULL };
        const char *src = NULL;
        size_t sn = 0;
        coord_map_bool(m, "retryable", &out->retryable);
        coord_map_uint(m, "retry_after_ms", &out->retry_after_ms);
        if (coord_map_str(m, "source", &src, &sn))
            out->from_backoff = role_is(src, sn, "backoff");
        /* a backoff's answer need not repeat the failure behind it */
        if (!coord_map_map(m, "error", &err) && !out->from_backoff)
            goto bad;
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
    coord__wait_timed_out(c, rc, "no result", o ? o->wait_ms : 0);
    if (rc < 0)
        return rc;
    rc = join_result(c, reply, out);
    coord_reply_free(reply);
    return rc;
}

struct join_ctx {
    coord_flight_cb cb;
    void *ud;
    uint64_t wait_ms;
};

/* Runs exactly once per request (client.c guarantees it, COORD_ECLOSED
 * included), so the context is freed here. */
static void on_join_reply(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct join_ctx ctx = *(struct join_ctx *)ud;
    free(ud);
    coord_flight f;
    memset(&f, 0, sizeof f);
    coord__wait_timed_out(c, status, "no result", ctx.wait_ms);
    if (status == 0)      /* reply is the library's, freed after us: its fd may move */
        status = join_result(c, (coord_reply_t *)reply, &f);
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
        ctx->wait_ms = o ? o->wait_ms : 0;
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

COORD_API int coord_flight_complete_fd(coord_t *c, uint64_t flight, uint64_t fence,
                                       int fd, uint64_t keep_ms, uint64_t *delivered)
{
    if (delivered)
        *delivered = 0;
    if (!c || fd < 0)
        return COORD_EINVAL;
    if (!c->broker_fds) {
        coord__set_error(c, "%s by reference: the broker (%s) takes no descriptors",
                         coord_op_name(COORD_OP_FLIGHT_COMPLETE), c->broker);
        return COORD_EUNSUPPORTED;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        coord__set_error(c, "%s by reference: fstat: %s",
                         coord_op_name(COORD_OP_FLIGHT_COMPLETE), strerror(errno));
        return COORD_ESYS;
    }
    coord_req_t *r = coord__req_new(COORD_OP_FLIGHT_COMPLETE);
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "flight", flight);
    coord_req_uint(r, "fence", fence);
    coord_req_uint(r, "result_fd", (uint64_t)st.st_size);
    if (keep_ms)
        coord_req_uint(r, "keep_ms", keep_ms);
    r->has_fd = true;
    r->fd = fd;
    return coord__call_uint(c, r, "delivered", delivered);
}

COORD_API int coord_flight_fail_with(coord_t *c, uint64_t flight, uint64_t fence,
                                     const coord_failure *f)
{
    static const coord_failure none;
    if (!c)
        return COORD_EINVAL;
    if (!f)
        f = &none;
    coord_req_t *r = coord__req_new(COORD_OP_FLIGHT_FAIL);
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "flight", flight);
    coord_req_uint(r, "fence", fence);
    coord_req_strmap2(r, "error", "code", f->code ? f->code : "FAILED",
                      "message", f->message ? f->message : "");
    coord_req_bool(r, "retryable", f->retryable);
    if (f->keep_ms)
        coord_req_uint(r, "keep_ms", f->keep_ms);
    if (f->retry_after_ms)
        coord_req_uint(r, "retry_after_ms", f->retry_after_ms);
    return coord__call_free(c, r, NULL);
}

COORD_API int coord_flight_fail(coord_t *c, uint64_t flight, uint64_t fence,
                                const char *code, const char *message,
                                bool retryable, uint64_t keep_ms)
{
    coord_failure f = { .code = code, .message = message, .retryable = retryable,
                        .keep_ms = keep_ms };
    return coord_flight_fail_with(c, flight, fence, &f);
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

COORD_API bool coord_event_flight_updated(const coord_reply_t *ev,
                                          coord_flight_updated *out)
{
    if (!coord__event_is(ev, COORD_EV_FLIGHT_UPDATED))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    const char *st;
    size_t sn;
    coord__map_bytes(m, "key", &out->key, &out->key_len);
    coord__map_bytes(m, "status", &st, &sn);
    out->failed = role_is(st, sn, "failed");
    coord_map_uint(m, "fence", &out->fence);
    return true;
}

/* ---- the kill switch ---- */

static int prefix_call(coord_t *c, enum coord_op op, const void *prefix, size_t len)
{
    if (!c || !coord__bytes_ok(prefix, len))
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(op);
    if (!r)
        return COORD_ENOMEM;
    coord_req_str(r, "prefix", prefix ? prefix : "", len);
    return coord__call_free(c, r, NULL);
}

COORD_API int coord_flight_disable(coord_t *c, const void *prefix, size_t len)
{
    return prefix_call(c, COORD_OP_FLIGHT_DISABLE, prefix, len);
}

COORD_API int coord_flight_enable(coord_t *c, const void *prefix, size_t len)
{
    return prefix_call(c, COORD_OP_FLIGHT_ENABLE, prefix, len);
}

/* The bytes of a str or bin entry; false for anything else. */
static bool entry_bytes(const msgpack_object *e, const char **b, size_t *n)
{
    if (e->type == MSGPACK_OBJECT_STR) {
        *b = e->via.str.ptr;
        *n = e->via.str.size;
        return true;
    }
    if (e->type == MSGPACK_OBJECT_BIN) {
        *b = e->via.bin.ptr;
        *n = e->via.bin.size;
        return true;
    }
    return false;
}

COORD_API int coord_flight_disabled(coord_t *c, coord_prefix **prefixes, size_t *n)
{
    if (prefixes)
        *prefixes = NULL;
    if (n)
        *n = 0;
    if (!c || !prefixes || !n)
        return COORD_EINVAL;
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, coord__req_new(COORD_OP_FLIGHT_DISABLED), &reply);
    if (rc < 0)
        return rc;
    /* the entries are strings, which coord_map has no array getter for:
     * read them through the codec */
    const msgpack_object *arr = coord_map_find(reply->msg.map, "prefixes");
    if (!arr || arr->type != MSGPACK_OBJECT_ARRAY) {
        coord_reply_free(reply);
        coord__set_error(c, "flight.disabled: reply without prefixes");
        return COORD_EPROTOCOL;
    }
    size_t count = 0, bytes = 0;
    const char *b;
    size_t bn;
    for (uint32_t i = 0; i < arr->via.array.size; i++)
        if (entry_bytes(&arr->via.array.ptr[i], &b, &bn)) {
            bytes += bn + 1;
            count++;
        }
    if (count == 0) {
        coord_reply_free(reply);
        return 0;
    }
    coord_prefix *out = malloc(count * sizeof *out + bytes);
    if (!out) {
        coord_reply_free(reply);
        coord__set_error(c, "out of memory");
        return COORD_ENOMEM;
    }
    char *p = (char *)(out + count);
    size_t j = 0;
    for (uint32_t i = 0; i < arr->via.array.size; i++) {
        if (!entry_bytes(&arr->via.array.ptr[i], &b, &bn))
            continue;
        if (bn)
            memcpy(p, b, bn);
        p[bn] = '\0';
        out[j].p = p;
        out[j].len = bn;
        p += bn + 1;
        j++;
    }
    coord_reply_free(reply);
    *prefixes = out;
    *n = count;
    return 0;
}

/* ---- coord_once ---- */

/* What a work function asked for beyond its return value
 * (coord_work_retry_after); saved and restored around each call, so that a
 * work function may itself call coord_once. */
static _Thread_local struct work_tls {
    bool in_work;
    uint64_t retry_after_ms;
} work_tls;

COORD_API void coord_work_retry_after(uint64_t retry_after_ms)
{
    if (work_tls.in_work)
        work_tls.retry_after_ms = retry_after_ms;
}

/* The work's outcome, owned here until handed to a coord_flight. */
struct work_out {
    int wrc;                    /* COORD_WORK_OK, _FAILED or _RETRYABLE */
    void *result;
    size_t len;
    char *code, *msg;           /* failures: never NULL after run_work */
    uint64_t retry_after_ms;
};

static void work_out_free(struct work_out *w)
{
    free(w->result);
    free(w->code);
    free(w->msg);
    memset(w, 0, sizeof *w);
}

/* Runs work and normalises what it returned: 0, COORD_EINVAL (a length
 * without bytes: w is then a retryable failure to report) or
 * COORD_ENOMEM. */
static int run_work(coord_work_fn work, void *ud, struct work_out *w)
{
    struct work_tls saved = work_tls;
    memset(w, 0, sizeof *w);
    work_tls.in_work = true;
    work_tls.retry_after_ms = 0;
    int wrc = work(ud, &w->result, &w->len, &w->code, &w->msg);
    uint64_t after = work_tls.retry_after_ms;
    work_tls = saved;
    int rc = 0;
    if (wrc == COORD_WORK_OK && !w->result && w->len) {
        free(w->code);
        free(w->msg);
        w->code = coord__dup_bytes("WORK_FAILED", 11);
        w->msg = coord__dup_bytes("work returned no result bytes", 29);
        w->len = 0;
        wrc = COORD_WORK_RETRYABLE;
        rc = COORD_EINVAL;
    }
    if (wrc != COORD_WORK_OK && wrc != COORD_WORK_RETRYABLE)
        wrc = COORD_WORK_FAILED;
    w->wrc = wrc;
    if (wrc == COORD_WORK_OK) {
        free(w->code);
        free(w->msg);
        w->code = w->msg = NULL;
        /* the work's buffer has no room for our NUL: make some */
        char *p = w->result ? realloc(w->result, w->len + 1) : malloc(1);
        if (!p)
            return COORD_ENOMEM;
        p[w->len] = '\0';
        w->result = p;
        return rc;
    }
    free(w->result);
    w->result = NULL;
    w->len = 0;
    w->retry_after_ms = wrc == COORD_WORK_RETRYABLE ? after : 0;
    /* the defaults, and the broker's limits on a failure */
    char *code = w->code && w->code[0] ? w->code : NULL;
    char *cc, *mc;
    const char *cs = cut_str(code ? code : "WORK_FAILED", MAX_ERR_CODE, &cc);
    const char *ms = cut_str(w->msg ? w->msg : "", MAX_ERR_MESSAGE, &mc);
    char *c2 = coord__dup_bytes(cs, strlen(cs)), *m2 = coord__dup_bytes(ms, strlen(ms));
    free(cc);
    free(mc);
    free(w->code);
    free(w->msg);
    w->code = c2;
    w->msg = m2;
    return c2 && m2 ? rc : COORD_ENOMEM;
}

/* Moves the work's outcome into *out (role RESULT or FAILED, ran). */
static void work_to_flight(struct work_out *w, coord_flight *out)
{
    out->ran = true;
    if (w->wrc == COORD_WORK_OK) {
        out->role = COORD_FLIGHT_RESULT;
        out->result = w->result;
        out->result_len = w->len;
        w->result = NULL;
    } else {
        out->role = COORD_FLIGHT_FAILED;
        out->error_code = w->code;
        out->error_message = w->msg;
        out->retryable = w->wrc == COORD_WORK_RETRYABLE;
        out->retry_after_ms = w->retry_after_ms;
        w->code = w->msg = NULL;
    }
    work_out_free(w);
}

/* The broker cannot be reached (the fallback's trigger). */
static bool unreachable(int rc)
{
    return rc == COORD_ECONNECT || rc == COORD_ECLOSED || rc == COORD_ESHUTTING_DOWN;
}

/* COORD_FALLBACK_RUN: the work runs here, uncoordinated. */
static int run_local(coord_work_fn work, void *ud, coord_flight *out,
                     coord_fallback_cause cause)
{
    struct work_out w;
    int rc = run_work(work, ud, &w);
    if (rc == COORD_ENOMEM) {
        work_out_free(&w);
        return rc;
    }
    w.retry_after_ms = 0;       /* nobody to back off */
    work_to_flight(&w, out);
    out->fallback = true;
    out->fallback_cause = cause;
    return 0;
}

/* Completes the flight we own with the work's result: inline when it fits
 * a frame, else by reference (a sealed memfd) when the broker takes
 * descriptors and the size. */
static int once_complete(coord_t *c, const coord_flight *own, const struct work_out *w,
                         uint64_t keep_ms)
{
    size_t inline_max = c->max_frame > 1024 ? c->max_frame - 1024 : 0;
    if (w->len <= inline_max || !c->broker_fds || w->len > c->max_ref_bytes)
        return coord_flight_complete(c, own->flight, own->fence, w->result, w->len,
                                     keep_ms, NULL);
    int fd = coord_memfd_sealed(w->result, w->len);
    if (fd < 0) {
        coord__set_error(c, "a memfd for the result: %s", strerror(errno));
        return fd;
    }
    int rc = coord_flight_complete_fd(c, own->flight, own->fence, fd, keep_ms, NULL);
    close(fd);
    return rc;
}

/* Completes (ok) or fails the flight we own with the work's outcome;
 * 0 or the error of the call. */
static int owner_deliver(coord_t *c, const coord_flight *own, const struct work_out *w,
                         uint64_t keep_ms)
{
    int rc;
    if (w->wrc == COORD_WORK_OK) {
        rc = once_complete(c, own, w, keep_ms);
        if (rc == COORD_ETOO_LARGE && keep_ms)
            /* the key cannot be stored as a record (or the result is too
             * big, which the next try tells): deliver it unkept */
            rc = once_complete(c, own, w, 0);
        if (rc == COORD_ETOO_LARGE) {
            /* nobody must wait for a result that can never travel */
            char text[160];
            snprintf(text, sizeof text, "the owner's result of %zu bytes does not fit "
                     "a frame", w->len);
            coord_flight_fail(c, own->flight, own->fence, "TOO_LARGE", text, false, 0);
            coord__set_error(c, "%s", text);
        }
        return rc;
    }
    bool retryable = w->wrc == COORD_WORK_RETRYABLE;
    /* a retryable failure is never served from a record: don't let it
     * replace an older good one; nor may a failed revalidation replace the
     * stale record */
    coord_failure f = {
        .code = w->code, .message = w->msg, .retryable = retryable,
        .keep_ms = retryable || own->revalidation ? 0 : keep_ms,
        .retry_after_ms = w->retry_after_ms,
    };
    rc = coord_flight_fail_with(c, own->flight, own->fence, &f);
    if (rc == COORD_ETOO_LARGE && f.keep_ms) {
        f.keep_ms = 0;
        rc = coord_flight_fail_with(c, own->flight, own->fence, &f);
    }
    return rc;
}

COORD_API int coord_once(coord_t *c, const void *key, size_t key_len,
                         const coord_flight_opts *o, uint64_t keep_ms,
                         coord_work_fn work, void *ud, coord_flight *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!work || !out || !coord__bytes_ok(key, key_len))
        return COORD_EINVAL;
    bool fall_back = o && (o->fallback == COORD_FALLBACK_RUN ||
                           o->fallback == COORD_FALLBACK_RETRY);
    if (!c)
        return fall_back ? run_local(work, ud, out, COORD_FALLBACK_CAUSE_UNREACHABLE)
                         : COORD_ECONNECT;
    coord_flight f;
    bool retried = false;
    int rc = coord_flight_join(c, key, key_len, o, &f);
    if (rc == COORD_ETIMEOUT && o && o->fallback == COORD_FALLBACK_RETRY) {
        /* retry ownership: the owner may be gone by now (a second wait
         * otherwise); a superseding join is never repeated */
        coord_flight_opts again = *o;
        again.supersede = false;
        retried = true;
        rc = coord_flight_join(c, key, key_len, &again, &f);
    }
    if (rc < 0) {
        int cause = rc == COORD_ETIMEOUT ? COORD_FALLBACK_CAUSE_TIMEOUT
                  : unreachable(rc)      ? COORD_FALLBACK_CAUSE_UNREACHABLE : 0;
        if (!fall_back || !cause)
            return rc;
        rc = run_local(work, ud, out, (coord_fallback_cause)cause);
        out->retried = retried;
        return rc;
    }
    if (f.role != COORD_FLIGHT_OWNER) {
        f.retried = retried;
        *out = f;               /* a follower's, a record's or a backoff's */
        return 0;
    }
    struct work_out w;
    int wrc = run_work(work, ud, &w);
    if (wrc == COORD_ENOMEM) {
        /* nothing to deliver: closing c (or the lease) hands the flight on */
        work_out_free(&w);
        coord_flight_clear(&f);
        coord__set_error(c, "out of memory");
        return COORD_ENOMEM;
    }
    rc = owner_deliver(c, &f, &w, keep_ms);
    if (wrc == COORD_EINVAL) {
        coord__set_error(c, "coord_once: work returned a length without a result");
        rc = COORD_EINVAL;
    } else if (rc < 0 && fall_back && unreachable(rc)) {
        rc = 0;                 /* ours, shared with nobody */
        out->fallback = true;
        out->fallback_cause = COORD_FALLBACK_CAUSE_UNREACHABLE;
    }
    if (rc < 0) {
        work_out_free(&w);
        coord_flight_clear(&f);
        return rc;
    }
    work_to_flight(&w, out);
    out->flight = out->fallback ? 0 : f.flight;
    out->fence = out->fallback ? 0 : f.fence;
    out->bypass = f.bypass;
    /* the owner of a revalidation keeps the stale copy it replaced */
    out->revalidation = f.revalidation;
    out->stale_result = f.stale_result;
    out->stale_result_len = f.stale_result_len;
    out->stale_age_ms = f.stale_age_ms;
    out->stale_fence = f.stale_fence;
    out->superseded = f.superseded;
    out->version = f.version;
    f.version = NULL;
    out->retried = retried;
    f.stale_result = NULL;
    coord_flight_clear(&f);
    return 0;
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
    coord_map_uint(m, "pid", &out->pid);
    out->client = dup_str_field(m, "client");
    out->instance = dup_str_field(m, "instance");
    out->version = dup_str_field(m, "version");
    rc = out->client && out->instance && out->version ? 0 : COORD_ENOMEM;
    if (rc < 0) {
        /* out of memory: reported below */
    } else if (role_is(st, sn, "completed")) {
        const void *p = NULL;
        size_t n = 0;
        uint64_t size;
        if (coord_map_uint(m, "result_fd", &size)) {
            out->result_fd = coord_reply_take_fd(reply);
            out->by_ref = out->result_fd >= 0;
            out->result_len = (size_t)size;
            if (!out->by_ref || size > SIZE_MAX - 1)
                rc = COORD_EPROTOCOL;
        } else if (!coord_map_bin(m, "result", &p, &n)) {
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

COORD_API int coord_record_purge_counts(coord_t *c, const void *prefix, size_t prefix_len,
                                        uint64_t *deleted, uint64_t *fenced)
{
    if (deleted)
        *deleted = 0;
    if (fenced)
        *fenced = 0;
    if (!c || !coord__bytes_ok(prefix, prefix_len))
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_RECORD_PURGE);
    if (!r)
        return COORD_ENOMEM;
    coord_req_str(r, "prefix", prefix ? prefix : "", prefix_len);
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    coord_map m = coord_reply_map(reply);
    if (deleted)
        coord_map_uint(m, "deleted", deleted);
    if (fenced)
        coord_map_uint(m, "fenced", fenced);
    coord_reply_free(reply);
    return 0;
}

COORD_API int coord_record_purge(coord_t *c, const void *prefix, size_t prefix_len,
                                 uint64_t *deleted)
{
    return coord_record_purge_counts(c, prefix, prefix_len, deleted, NULL);
}
