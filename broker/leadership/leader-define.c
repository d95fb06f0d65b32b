/* leader-define.c - a workstream's published descriptor (leader.define,
 * leader.describe) and its durable history of terms (leader.history).
 *
 * A define is a patch: the fields it carries replace the stored ones, a
 * field sent as nil goes back to its default, the others stay.  The ledger
 * applies the patch to the stored descriptor in one step (leader-desc.c's
 * ws_desc_define: the pin's ratchet is checked there, not here), and only
 * then does the live term see the change (a mode event, a max hold). */
#include <stdlib.h>
#include <string.h>
#include "coord-limits.h"
#include "desc-file.h"
#include "errors.h"
#include "events.h"
#include "leaders-int.h"
#include "ops.h"
#include "records.h"
#include "skey.h"

static void put_protocol(coord_enc *e, const char *key, const struct ws_protocol *p,
                         uint32_t version)
{
    if (!p->name_len) {
        coord_enc_key(e, key);
        coord_enc_nil(e);
        return;
    }
    char text[WS_PROTOCOL_TEXT];
    size_t n = ws_protocol_format(p, version, text, sizeof text);
    coord_enc_kv_str(e, key, text, n);
}

static void put_descriptor(coord_enc *e, const struct workstream *ws, const struct ws_desc *d)
{
    size_t nlen;
    const uint8_t *name = leaders_ws_name(ws, &nlen);
    coord_enc_key(e, "descriptor");
    coord_enc_map_begin(e);
    coord_enc_kv_name(e, "workstream", name, nlen);
    put_protocol(e, "protocol", &d->protocol, d->protocol.version);
    put_protocol(e, "pinned_protocol", &d->protocol, ws_desc_pin(d));
    coord_enc_kv_uint(e, "max_hold_ms", d->max_hold_ms);
    coord_enc_kv_cstr(e, "steal", ws_steal_name(d->steal));
    coord_enc_kv_cstr(e, "mode", ws_mode_name(d->mode));
    coord_enc_key(e, "fallback");
    if (d->fallback_len && coord_utf8_valid((const uint8_t *)d->fallback, d->fallback_len))
        coord_enc_str(e, d->fallback, d->fallback_len);
    else if (d->fallback_len)          /* client bytes that are not text */
        coord_enc_bin(e, d->fallback, d->fallback_len);
    else
        coord_enc_nil(e);
    coord_enc_kv_cstr(e, "canonical_fence", leaders_ledger_name());
    /* the leadership lock's name in force: the defined one or the default */
    uint8_t lname[sizeof "-leader/" - 1 + LIMIT_WORKSTREAM];
    size_t ln = leaders_lock_name(ws, d, lname);
    coord_enc_kv_name(e, "lock_name", lname, ln);
    coord_enc_key(e, "capabilities");
    if (d->caps_len)
        coord_enc_str(e, d->caps, d->caps_len);
    else
        coord_enc_nil(e);
    coord_enc_kv_cstr(e, "if_available", ws_ifav_name(d->if_available));
    coord_enc_kv_uint(e, "defined_ms", d->defined_ms);
    coord_enc_map_end(e);
}

/* ---- define ---- */

static void define_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct workstream *ws = call->ws;
    if (req->status == 0) {
        struct ws_desc old = ws->desc;
        ws->desc = req->desc;
        events_leader_ex("defined", ws->skey, ws->h.keylen, ws->generation, REASON_NONE,
                         NULL, 0, ws->desc.mode);
        leaders_defined(ws, &old);
    }
    char msg[160];
    const char *why = req->why;
    if (req->status == COORD_EPROTOCOL_PINNED) {
        char pin[WS_PROTOCOL_TEXT];
        ws_protocol_format(&ws->desc.protocol, ws_desc_pin(&ws->desc), pin, sizeof pin);
        snprintf(msg, sizeof msg, "the pin in force is %s: lowering, renaming or "
                 "removing it takes force", pin);
        why = msg;
    }
    struct conn *c = ll_call_answer(call, why);
    if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        put_descriptor(&e, ws, &req->desc);
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

static void run_define(struct lreq *q, struct workstream *ws)
{
    struct ll_call *call = ll_call_new(q->job.conn, q->job.rid, ws, LL_DEFINE, ws->skey,
                                       ws->h.keylen, NULL, define_done);
    if (!call)
        return;
    call->req.patch = q->patch;
    call->req.now_ms = wall_ms();
    leaders_submit(&call->req);
}

const char *leaders_fence_check(const char *field, const uint8_t *s, size_t len, char *msg,
                                size_t size)
{
    const char *ledger = leaders_ledger_name();
    bool remote = strcmp(ledger, "local") != 0;
#define IS(lit) (len == sizeof lit - 1 && memcmp(s, lit, len) == 0)
    if (IS("local") && !remote)
        return NULL;
    if ((IS("server-lease-ledger") || (len == strlen(ledger) && !memcmp(s, ledger, len))) &&
        remote)
        return NULL;
    if (IS("server-lease-ledger"))
        snprintf(msg, size, "%s server-lease-ledger needs the remote ledger: this broker "
                 "runs the local one (start coordd with --ledger etcd)", field);
    else if (IS("local") || IS("etcd"))
        snprintf(msg, size, "%s %s is not the ledger this broker runs (%s)", field,
                 IS("local") ? "local" : "etcd",
                 remote ? "--ledger etcd: the remote one, server-lease-ledger"
                        : "the local one; etcd needs coordd --ledger etcd");
    else
        snprintf(msg, size, "%s must be local or server-lease-ledger (the remote ledger, "
                 "coordd --ledger etcd)", field);
#undef IS
    return msg;
}

/* An enum field: set, reset (nil) or absent. */
static bool enum_field(coord_fields *f, const char *key, unsigned flag, struct ws_patch *p,
                       int (*parse)(const uint8_t *, size_t), uint8_t *out)
{
    coord_bytes b;
    if (coord_field_nil(f, key)) {
        p->reset |= flag;
        return true;
    }
    if (!coord_field_str(f, key, false, &b))
        return true;
    int v = parse(b.ptr, b.len);
    if (v < 0)
        return false;
    *out = (uint8_t)v;
    p->set |= flag;
    return true;
}

void op_leader_define(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 }, protocol = name, fallback = name, fence = name;
    coord_bytes lock_name = name, caps = name;
    struct lreq q = { .run = run_define };
    struct ws_patch *p = &q.patch;
    ws_desc_default(&p->v);
    coord_field_str(f, "workstream", true, &name);
    bool has_protocol = coord_field_str(f, "protocol", false, &protocol);
    bool has_hold = coord_field_uint(f, "max_hold_ms", false, &p->v.max_hold_ms);
    bool has_fallback = coord_field_str(f, "fallback", false, &fallback);
    bool has_fence = coord_field_str(f, "canonical_fence", false, &fence);
    bool has_lock = coord_field_str(f, "lock_name", false, &lock_name);
    bool has_caps = coord_field_str(f, "capabilities", false, &caps);
    coord_field_bool(f, "force", false, &p->force);
    const char *bad = NULL;
    if (!enum_field(f, "steal", WS_F_STEAL, p, ws_steal_parse, &p->v.steal))
        bad = "steal must be never, incident-only or allowed";
    else if (!enum_field(f, "mode", WS_F_MODE, p, ws_mode_parse, &p->v.mode))
        bad = "mode must be shadow, read-only or active";
    else if (!enum_field(f, "if_available", WS_F_IF_AVAILABLE, p, ws_ifav_parse,
                         &p->v.if_available))
        bad = "if_available must be allowed or never";
    if (!fields_ok(c, rid, f) ||
        (has_hold && !duration_ok(c, rid, "max_hold_ms", p->v.max_hold_ms, LIMIT_WAIT_MS)))
        return;
    if (has_protocol && ws_protocol_parse(protocol.ptr, protocol.len, &p->v.protocol) < 0)
        bad = "protocol must be name@N (name: 1..64 of A-Z a-z 0-9 . _ -, N: 1..4294967295)";
    else if (has_fallback && (fallback.len == 0 || fallback.len > LIMIT_FALLBACK))
        bad = "fallback must be 1..64 bytes";
    else if (has_lock && (lock_name.len == 0 || lock_name.len > LIMIT_LOCK_NAME ||
                          lock_name.ptr[0] == '-'))
        bad = "lock_name must be 1..200 bytes, not starting with '-' (the broker's names)";
    char msg[200], ctext[LIMIT_CAPS_TEXT + 1], cnorm[LIMIT_CAPS_TEXT + 1];
    if (!bad && has_fence)
        bad = leaders_fence_check("canonical_fence", fence.ptr, fence.len, msg, sizeof msg);
    if (!bad && has_caps) {
        if (caps.len > LIMIT_CAPS_TEXT || (caps.len && memchr(caps.ptr, 0, caps.len))) {
            bad = "capabilities must be at most 255 bytes";
        } else {
            if (caps.len)
                memcpy(ctext, caps.ptr, caps.len);
            ctext[caps.len] = 0;
            const char *why = coord_desc_caps_normalize(ctext, cnorm, sizeof cnorm);
            if (why) {
                snprintf(msg, sizeof msg, "capabilities: %s", why);
                bad = msg;
            }
        }
    }
    if (bad) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, bad);
        return;
    }
    if (has_protocol)
        p->set |= WS_F_PROTOCOL;
    else if (coord_field_nil(f, "protocol"))
        p->reset |= WS_F_PROTOCOL;
    if (has_hold)
        p->set |= WS_F_MAX_HOLD;
    else if (coord_field_nil(f, "max_hold_ms"))
        p->reset |= WS_F_MAX_HOLD;
    if (has_fallback) {
        p->set |= WS_F_FALLBACK;
        p->v.fallback_len = (uint8_t)fallback.len;
        memcpy(p->v.fallback, fallback.ptr, fallback.len);
    } else if (coord_field_nil(f, "fallback")) {
        p->reset |= WS_F_FALLBACK;
    }
    if (has_lock) {
        p->set |= WS_F_LOCK_NAME;
        p->v.lock_name_len = (uint8_t)lock_name.len;
        memcpy(p->v.lock_name, lock_name.ptr, lock_name.len);
    } else if (coord_field_nil(f, "lock_name")) {
        p->reset |= WS_F_LOCK_NAME;
    }
    if (has_caps) {
        p->set |= WS_F_CAPS;
        p->v.caps_len = (uint8_t)strlen(cnorm);
        memcpy(p->v.caps, cnorm, p->v.caps_len);
    } else if (coord_field_nil(f, "capabilities")) {
        p->reset |= WS_F_CAPS;
    }
    leaders_with_workstream(c, rid, name, &q);
}

/* ---- describe ---- */

static void run_describe(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!ws->desc.defined) {
        conn_reply_error(c, q->job.rid, COORD_ENOT_FOUND, "the workstream was never defined");
        return;
    }
    coord_enc e;
    conn_enc_begin_reply(c, &e, q->job.rid);
    put_descriptor(&e, ws, &ws->desc);
    conn_enc_finish(c, &e);
}

void op_leader_describe(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 };
    struct lreq q = { .run = run_describe };
    coord_field_str(f, "workstream", true, &name);
    if (!fields_ok(c, rid, f))
        return;
    leaders_with_workstream(c, rid, name, &q);
}

/* ---- history ---- */

static void history_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct conn *c = ll_call_answer(call, req->why);
    if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        coord_enc_key(&e, "terms");
        coord_enc_array_begin(&e);
        bool cut = false;
        for (size_t i = 0; i < req->n_out; i++) {
            const struct ws_term *t = &req->terms[i];
            coord_enc_mark m = coord_enc_mark_here(&e);
            coord_enc_map_begin(&e);
            coord_enc_kv_uint(&e, "generation", t->generation);
            coord_enc_kv_str(&e, "client", t->client, t->client_len);
            coord_enc_kv_uint(&e, "pid", t->pid);
            coord_enc_kv_str(&e, "instance", t->instance, t->instance_len);
            if (t->protocol.name_len)
                put_protocol(&e, "protocol", &t->protocol, t->protocol.version);
            coord_enc_kv_cstr(&e, "mode", ws_mode_name(t->mode));
            coord_enc_kv_uint(&e, "elected_ms", t->elected_ms);
            coord_enc_kv_uint(&e, "ended_ms", t->ended_ms);
            if (t->reason)
                coord_enc_kv_cstr(&e, "reason", reason_name(t->reason));
            if (t->incident_len)
                coord_enc_kv_name(&e, "incident", t->incident, t->incident_len);
            coord_enc_map_end(&e);
            if (list_entry_overflows(c, &e, &m)) {
                cut = true;
                break;
            }
        }
        coord_enc_array_end(&e);
        if (cut)
            coord_enc_kv_bool(&e, "truncated", true);
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

void op_leader_history(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 };
    uint64_t limit = 20;
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "limit", false, &limit);
    if (!fields_ok(c, rid, f))
        return;
    if (limit == 0)
        limit = 20;
    if (limit > LIMIT_HISTORY)
        limit = LIMIT_HISTORY;
    uint8_t skey[SKEY_HEADER + LIMIT_WORKSTREAM];
    size_t sklen = leaders_ws_key(c, rid, name, skey);
    if (!sklen)
        return;
    struct ll_call *call = ll_call_new(c, rid, NULL, LL_HISTORY, skey, sklen, NULL,
                                       history_done);
    if (!call)
        return;
    call->req.limit = (uint32_t)limit;
    leaders_submit(&call->req);
}
