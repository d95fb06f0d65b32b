/* leader-outbox.c - what a leader writes: commits, outbox claims and
 * abandons, and what anyone reads back (leader.read, leader.pending).
 *
 * Every write is checked twice: here against the live term in memory (a
 * stale generation is FENCED at once, a draining leader's new claim is
 * DRAINING), then by the ledger in the step that applies it (the stored
 * generation, the stored rollout mode).  The ledger's word is the one that
 * counts; the first check only spares it work and keeps the refusals'
 * order (FENCED, READ_ONLY, DRAINING, LIMIT) the same whatever the ledger.
 *
 * Claims give every unreconciled operation an owner: a claim is synced
 * before its reply, a new leader takes over an earlier generation's
 * unsettled claim (reconcile: true) instead of redoing it under another
 * key, and leader.pending lists what is still unsettled, oldest first. */
#include <stdlib.h>
#include <string.h>
#include "breaks.h"
#include "coord-limits.h"
#include "errors.h"
#include "leaders-int.h"
#include "ops.h"
#include "records.h"
#include "skey.h"

static const char *refusal(int status, const struct ll_req *req)
{
    switch (status) {
    case COORD_EFENCED: return "generation is stale";
    case COORD_EREAD_ONLY: return "the workstream's rollout mode allows no writes";
    case COORD_ELIMIT: return "too many unsettled claims on this workstream";
    default: return req->why;
    }
}

/* the in-memory checks before a write goes to the ledger */
static bool write_ok(struct lreq *q, struct workstream *ws, bool claim)
{
    struct conn *c = q->job.conn;
    if (!(claim && BROKEN(STALE_WRITE)) && !leaders_live(c, q->job.rid, ws, q->generation))
        return false;
    if (ws->desc.mode != WS_MODE_ACTIVE && !BROKEN(MODE_IGNORED)) {
        char msg[96];
        snprintf(msg, sizeof msg, "the workstream is in %s mode", ws_mode_name(ws->desc.mode));
        conn_reply_error(c, q->job.rid, COORD_EREAD_ONLY, msg);
        return false;
    }
    if (claim && ws->draining) {
        conn_reply_error(c, q->job.rid, COORD_EDRAINING, "the leader is draining: no new claims");
        return false;
    }
    return true;
}

static struct conn *answer_to(struct ll_call *call, int status)
{
    if (status == COORD_EFENCED && conn_job_conn(&call->job))
        leader_counts.fenced++;
    return ll_call_answer(call, refusal(status, &call->req));
}

static bool op_id_ok(struct conn *c, uint64_t rid, coord_bytes op_id)
{
    return leaders_text_ok(c, rid, "op_id", op_id, LIMIT_OP_ID, true);
}

/* ---- commit ---- */

static void commit_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    int status = req->status;
    if (status == 0 && !req->duplicate && !req->out_abandoned)
        leader_counts.commits++;
    if (req->duplicate)
        leader_counts.duplicates++;
    struct conn *c = answer_to(call, status);
    if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        coord_enc_kv_bool(&e, "applied", !req->duplicate && !req->out_abandoned);
        if (req->duplicate) {
            coord_enc_kv_bool(&e, "duplicate", true);
            coord_enc_kv_uint(&e, "generation", req->out_generation);
        } else if (req->out_abandoned) {
            coord_enc_kv_bool(&e, "abandoned", true);
        }
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

/* A commit, claim or abandon to the ledger, once the checks in memory
 * passed; done answers it. */
static void submit_write(struct lreq *q, struct workstream *ws, enum ll_op op,
                         void (*done)(struct ll_req *))
{
    if (!write_ok(q, ws, op == LL_CLAIM))
        return;
    struct ll_call *call = ll_call_new(q->job.conn, q->job.rid, NULL, op, ws->skey,
                                       ws->h.keylen, q, done);
    if (!call)
        return;
    call->req.generation = q->generation;
    call->req.has_key = q->has_key;
    call->req.now_ms = wall_ms();
    leaders_submit(&call->req);
}

static void run_commit(struct lreq *q, struct workstream *ws)
{
    submit_write(q, ws, LL_COMMIT, commit_done);
}

void op_leader_commit(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 }, op_id = name, key = name, value = name;
    struct lreq q = { .run = run_commit };
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "generation", true, &q.generation);
    coord_field_str(f, "op_id", true, &op_id);
    q.has_key = coord_field_str(f, "key", false, &key);
    bool has_value = coord_field_bin(f, "value", false, &value);
    if (!fields_ok(c, rid, f) || !op_id_ok(c, rid, op_id))
        return;
    if (has_value && !q.has_key) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, "value needs a key");
        return;
    }
    if (key.len > LIMIT_LEADER_KEY) {
        char msg[64];
        snprintf(msg, sizeof msg, "key at most %u bytes", LIMIT_LEADER_KEY);
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, msg);
        return;
    }
    if (value.len > payload_limit(c)) {
        conn_reply_error(c, rid, COORD_ETOO_LARGE, "value does not fit a reply frame");
        return;
    }
    q.op_id = op_id.ptr;
    q.op_len = op_id.len;
    q.key = key.ptr;
    q.key_len = key.len;
    q.value = value.ptr;
    q.value_len = value.len;
    leaders_with_workstream(c, rid, name, &q);
}

/* ---- claim ---- */

static void claim_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    const struct ll_claim *cl = &req->claim;
    if (req->status == 0 && cl->claimed) {
        leader_counts.claims++;
        if (cl->reconcile)
            leader_counts.claims_reconciled++;
    }
    struct conn *c = answer_to(call, req->status);
    if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        coord_enc_kv_bool(&e, "claimed", cl->claimed);
        if (cl->reconcile) {
            coord_enc_kv_bool(&e, "reconcile", true);
            coord_enc_kv_uint(&e, "previous_generation", cl->previous_generation);
            coord_enc_kv_uint(&e, "claimed_ms", cl->claimed_ms);
        }
        if (cl->applied) {
            coord_enc_kv_bool(&e, "applied", true);
            coord_enc_kv_uint(&e, "generation", cl->generation);
        }
        if (cl->abandoned)
            coord_enc_kv_bool(&e, "abandoned", true);
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

static void run_claim(struct lreq *q, struct workstream *ws)
{
    submit_write(q, ws, LL_CLAIM, claim_done);
}

/* {workstream, generation, op_id} and, for abandon, reason */
static void outbox_op(struct conn *c, uint64_t rid, coord_fields *f, struct lreq *q,
                      bool reason)
{
    coord_bytes name = { NULL, 0 }, op_id = name, why = name;
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "generation", true, &q->generation);
    coord_field_str(f, "op_id", true, &op_id);
    if (reason)
        coord_field_str(f, "reason", true, &why);
    if (!fields_ok(c, rid, f) || !op_id_ok(c, rid, op_id) ||
        (reason && !leaders_text_ok(c, rid, "reason", why, LIMIT_INCIDENT, true)))
        return;
    q->op_id = op_id.ptr;
    q->op_len = op_id.len;
    /* the reason travels as the request's value */
    q->value = why.ptr;
    q->value_len = why.len;
    leaders_with_workstream(c, rid, name, q);
}

void op_leader_claim(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_claim };
    outbox_op(c, rid, f, &q, false);
}

/* ---- abandon ---- */

static void abandon_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    if (req->status == 0 && !req->duplicate)
        leader_counts.abandons++;
    struct conn *c = answer_to(call, req->status);
    if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        if (req->duplicate) {
            coord_enc_kv_bool(&e, "applied", true);
            coord_enc_kv_uint(&e, "generation", req->out_generation);
        }
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

static void run_abandon(struct lreq *q, struct workstream *ws)
{
    submit_write(q, ws, LL_ABANDON, abandon_done);
}

void op_leader_abandon(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_abandon };
    outbox_op(c, rid, f, &q, true);
}

/* ---- pending ---- */

static void pending_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct conn *c = answer_to(call, req->status);
    if (c) {
        uint64_t live = call->ws ? call->ws->live_generation : 0;
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        coord_enc_key(&e, "ops");
        coord_enc_array_begin(&e);
        size_t i = 0;
        bool cut = false;
        for (; i < req->n_out; i++) {
            const struct ll_pending *p = &req->pending[i];
            coord_enc_mark m = coord_enc_mark_here(&e);
            coord_enc_map_begin(&e);
            coord_enc_kv_name(&e, "op_id", p->op_id, p->op_len);
            coord_enc_kv_uint(&e, "generation", p->generation);
            coord_enc_kv_uint(&e, "claimed_ms", p->claimed_ms);
            coord_enc_kv_bool(&e, "live", live && p->generation == live);
            coord_enc_map_end(&e);
            if (list_entry_overflows(c, &e, &m)) {
                cut = true;
                break;
            }
        }
        coord_enc_array_end(&e);
        if (cut || req->truncated)
            coord_enc_kv_bool(&e, "truncated", true);
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

static void run_pending(struct lreq *q, struct workstream *ws)
{
    struct ll_call *call = ll_call_new(q->job.conn, q->job.rid, ws, LL_PENDING, ws->skey,
                                       ws->h.keylen, NULL, pending_done);
    if (!call)
        return;
    call->req.limit = (uint32_t)q->limit;
    leaders_submit(&call->req);
}

void op_leader_pending(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 };
    struct lreq q = { .run = run_pending, .limit = 100 };
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "limit", false, &q.limit);
    if (!fields_ok(c, rid, f))
        return;
    if (q.limit == 0)
        q.limit = 100;
    if (q.limit > LIMIT_PENDING_LIST)
        q.limit = LIMIT_PENDING_LIST;
    leaders_with_workstream(c, rid, name, &q);
}

/* ---- read ---- */

static void read_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct conn *c = ll_call_answer(call, req->status == COORD_ENOT_FOUND
                                          ? "no value for this key" : req->why);
    if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        coord_enc_kv_bin(&e, "value", req->out_value, req->out_value_len);
        coord_enc_kv_uint(&e, "generation", req->out_generation);
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

void op_leader_read(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 }, key = name;
    coord_field_str(f, "workstream", true, &name);
    coord_field_str(f, "key", true, &key);
    if (!fields_ok(c, rid, f))
        return;
    if (key.len > LIMIT_LEADER_KEY) {
        char msg[64];
        snprintf(msg, sizeof msg, "key at most %u bytes", LIMIT_LEADER_KEY);
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, msg);
        return;
    }
    uint8_t skey[SKEY_HEADER + LIMIT_WORKSTREAM];
    size_t sklen = leaders_ws_key(c, rid, name, skey);
    if (!sklen)
        return;
    struct lreq q = { .key = key.ptr, .key_len = key.len };
    struct ll_call *call = ll_call_new(c, rid, NULL, LL_READ, skey, sklen, &q, read_done);
    if (call)
        leaders_submit(&call->req);
}
