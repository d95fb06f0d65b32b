/* leaders.c - leadership over the fence ledger (leader.* ops).
 *
 * A campaign queues on the workstream's leader lock, a reserved lock name
 * ("-leader/<workstream>") in the ordinary lock table, so lock.query shows
 * who leads and who waits.  Once the lock is granted the leader ledger
 * (leader-ledger.h) stores the workstream's next generation; only then is
 * the campaign answered.  A generation is therefore never handed out
 * twice, not even across kill -9.
 *
 * A leader that loses its lease, disconnects, is stolen from or disabled
 * is stale at once: the in-memory live generation is cleared before any
 * later commit is looked at, and the ledger checks a commit's generation
 * again in the same step that applies it.
 *
 * Workstreams are cached in memory while used (led, campaigned for, being
 * written); the first request on one loads its stored state from the
 * ledger and waits for it, with any request that comes meanwhile. */
#include <stdlib.h>
#include <string.h>
#include "coord-ops.h"
#include "coord-limits.h"
#include "deadline.h"
#include "errors.h"
#include "events.h"
#include "hashmap.h"
#include "histo.h"
#include "leader-ledger.h"
#include "leaders.h"
#include "locks.h"
#include "ops.h"
#include "skey.h"

#define LOCK_PREFIX "-leader/"

struct campaign;

struct workstream {
    struct hentry h;               /* keyed by the scoped workstream (skey.h) */
    uint8_t *skey;
    bool loaded;
    struct ll_req load;            /* while !loaded */
    struct list waiting;           /* struct lreq, until loaded */
    uint64_t generation;           /* last one stored */
    bool disabled;
    /* the live leader, if any */
    struct campaign *term;         /* the leader's campaign, or NULL */
    uint64_t live_generation;      /* 0: nobody may commit */
    struct deadline lease;
    uint64_t lease_ms;
    uint64_t elected_ms;
    uint64_t ended_us;             /* the last term's end (latency stats) */
    unsigned refs;                 /* campaigns, requests and jobs using it */
};

enum campaign_state { CAMPAIGN_WAITING, CAMPAIGN_BUMPING, CAMPAIGN_LEADING };

/* A campaign, and then the term it won: it owns the leader lock from the
 * request until the leadership ends. */
struct campaign {
    struct lock_req lock;
    struct pending p;              /* the campaign request, until answered */
    struct ll_req bump;            /* the generation being stored */
    struct workstream *ws;
    struct conn *conn;
    uint64_t lease_ms;
    enum campaign_state state;
    bool gone;                     /* cancelled or disconnected while bumping */
    bool lock_lost;                /* stolen while bumping */
    struct list lead_link;         /* conn->leads while leading */
};

/* A leader.* request, with the fields its op needs.  On the stack while
 * its workstream is in memory; copied to the heap (with its bytes) when it
 * must wait for the workstream to load. */
struct lreq {
    struct list link;              /* ws->waiting */
    struct conn_job job;
    void (*run)(struct lreq *q, struct workstream *ws);
    uint64_t generation, lease_ms, timeout_ms;
    bool if_available, steal, have_timeout, disable;
    const uint8_t *op_id, *key, *value;
    size_t op_len, key_len, value_len;
};

static struct {
    struct broker *b;
    struct leader_ledger *ledger;
    struct hashmap streams;
    uint64_t elected, lost, commits, duplicates, fenced;
} W;

int leaders_init(struct broker *b, char *err, size_t errsize)
{
    W.b = b;
    hashmap_init(&W.streams);
    return ll_open(&W.ledger, b->opt.leader_ledger, b->ledger, b->loop, err, errsize);
}

void leaders_stop(void)
{
    ll_close(W.ledger);
    W.ledger = NULL;
}

void leaders_stats(coord_enc *e)
{
    coord_enc_kv_uint(e, "workstreams", W.streams.count);
    coord_enc_kv_uint(e, "leaders_elected", W.elected);
    coord_enc_kv_uint(e, "leaders_lost", W.lost);
    coord_enc_kv_uint(e, "commits_applied", W.commits);
    coord_enc_kv_uint(e, "commits_duplicate", W.duplicates);
    coord_enc_kv_uint(e, "commits_fenced", W.fenced);
}

static const uint8_t *ws_name(const struct workstream *ws, size_t *len)
{
    return skey_name(ws->skey, ws->h.keylen, len);
}

static void emit(const char *what, const struct workstream *ws, uint64_t gen,
                 enum reason why)
{
    events_leader(what, ws->skey, ws->h.keylen, gen, why);
}

/* A workstream nobody leads, campaigns for, waits on or writes is dropped
 * from memory: its stored state is loaded again when it is next used, so
 * looking at many workstreams (leader.info) leaves nothing behind. */
static void ws_maybe_free(struct workstream *ws)
{
    if (ws->refs || ws->term || ws->live_generation || !ws->loaded)
        return;
    hashmap_del(&W.streams, &ws->h);
    free(ws->skey);
    free(ws);
}

static void ws_unref(struct workstream *ws)
{
    ws->refs--;
    ws_maybe_free(ws);
}

/* ---- the term ---- */

static void campaign_free(struct campaign *cp)
{
    ll_req_free(&cp->bump);
    conn_unref(cp->conn);
    ws_unref(cp->ws);
    free(cp);
}

static void send_lost(struct workstream *ws, struct conn *leader, uint64_t gen,
                      enum reason why)
{
    if (!conn_alive(leader))
        return;
    size_t nlen;
    const uint8_t *name = ws_name(ws, &nlen);
    coord_enc e;
    conn_enc_begin_event(leader, &e, coord_event_name(COORD_EV_LEADER_LOST));
    coord_enc_kv_name(&e, "workstream", name, nlen);
    coord_enc_kv_uint(&e, "generation", gen);
    coord_enc_kv_cstr(&e, "reason", reason_name(why));
    conn_enc_finish(leader, &e);
}

/* The leader is no longer: fence it at once, tell it (when tell), release
 * the lock (unless the lock table took it away: lock_gone) and end the
 * term.  ws stays: the caller drops it with ws_maybe_free when done. */
static void leader_end(struct workstream *ws, enum reason why, bool tell, bool lock_gone)
{
    struct campaign *cp = ws->term;
    uint64_t gen = ws->live_generation;
    ws->live_generation = 0;
    ws->term = NULL;
    ws->ended_us = now_us();
    deadline_cancel(&ws->lease);
    if (tell)
        send_lost(ws, cp->conn, gen, why);
    list_del(&cp->lead_link);
    if (why == REASON_RESIGNED) {
        emit("resigned", ws, gen, REASON_NONE);
    } else {
        W.lost++;
        emit("lost", ws, gen, why);
    }
    ws->refs++;                        /* cp's reference goes with it */
    if (!lock_gone)
        locks_release(&cp->lock);
    campaign_free(cp);
    ws->refs--;
}

static void on_lease_expired(struct deadline *d)
{
    struct workstream *ws = list_entry(d, struct workstream, lease);
    leader_end(ws, REASON_EXPIRED, true, false);
    ws_maybe_free(ws);
}

/* ---- campaign: the lock's owner ---- */

static void bump_done(struct ll_req *req);

static void start_bump(struct campaign *cp)
{
    cp->state = CAMPAIGN_BUMPING;
    if (ll_req_init(&cp->bump, LL_BUMP, cp->ws->skey, cp->ws->h.keylen,
                    NULL, 0, NULL, 0, NULL, 0) < 0) {
        cp->bump.status = COORD_ESTORAGE;
        cp->bump.why = "out of memory";
        cp->bump.ud = cp;
        bump_done(&cp->bump);          /* answered from the lock's own work */
        return;
    }
    cp->bump.ud = cp;
    cp->bump.done = bump_done;
    ll_submit(W.ledger, &cp->bump);
}

/* The generation is stored: hand it out, if the campaign still wants it. */
static void bump_done(struct ll_req *req)
{
    struct campaign *cp = req->ud;
    struct workstream *ws = cp->ws;
    int status = req->status;
    if (status == 0)
        ws->generation = req->out_generation;
    if (cp->gone || cp->lock_lost || status != 0) {
        if (!cp->gone) {
            pending_finish(&cp->p);
            if (status == COORD_EDISABLED)
                ws->disabled = true;
            conn_reply_error(cp->conn, cp->p.rid, status ? status : COORD_EABORTED,
                             status == COORD_EDISABLED ? "workstream is disabled"
                             : status ? (req->why ? req->why : "cannot store the generation")
                             : "leadership was stolen before it was granted");
        }
        if (!cp->lock_lost)
            locks_release(&cp->lock);
        campaign_free(cp);
        return;
    }
    pending_finish(&cp->p);
    cp->state = CAMPAIGN_LEADING;
    ws->term = cp;
    ws->live_generation = req->out_generation;
    ws->lease_ms = cp->lease_ms;
    ws->elected_ms = broker_now_ms(W.b);
    list_append(&cp->conn->leads, &cp->lead_link);
    deadline_set(&ws->lease, ws->elected_ms + ws->lease_ms, on_lease_expired);
    W.elected++;
    if (ws->ended_us)
        latency_add(LAT_LEADER_TRANSITION, now_us() - ws->ended_us);
    emit("elected", ws, ws->live_generation, REASON_NONE);
    coord_enc e;
    conn_enc_begin_reply(cp->conn, &e, cp->p.rid);
    coord_enc_kv_bool(&e, "granted", true);
    coord_enc_kv_uint(&e, "generation", ws->live_generation);
    coord_enc_kv_uint(&e, "lease_ms", ws->lease_ms);
    conn_enc_finish(cp->conn, &e);
}

static struct campaign *campaign_of(struct lock_req *r)
{
    return (struct campaign *)((char *)r - offsetof(struct campaign, lock));
}

static void campaign_lock_granted(struct lock_req *r)
{
    start_bump(campaign_of(r));
}

/* stolen or expired: while the generation is written, or from the leader */
static void campaign_lock_lost(struct lock_req *r, enum reason why)
{
    struct campaign *cp = campaign_of(r);
    if (cp->state == CAMPAIGN_BUMPING) {
        cp->lock_lost = true;          /* bump_done answers ABORTED */
        return;
    }
    struct workstream *ws = cp->ws;
    ws->refs++;
    leader_end(ws, why, true, true);
    ws_unref(ws);
}

static void campaign_lock_failed(struct lock_req *r, int code)
{
    struct campaign *cp = campaign_of(r);
    pending_finish(&cp->p);
    conn_reply_error(cp->conn, cp->p.rid, code,
                     code == COORD_ETIMEOUT ? "not elected within timeout_ms" : NULL);
    campaign_free(cp);
}

static const struct lock_owner campaign_owner = {
    campaign_lock_granted, campaign_lock_lost, campaign_lock_failed,
};

/* cancel / shutdown (code), or the connection gone (code 0), while the
 * campaign waits or its generation is written */
static void campaign_leave(struct pending *p, int code)
{
    struct campaign *cp = list_entry(p, struct campaign, p);
    pending_finish(p);
    if (code)
        conn_reply_error(cp->conn, p->rid, code, NULL);
    if (cp->state == CAMPAIGN_BUMPING) {
        cp->gone = true;               /* bump_done cleans up */
        return;
    }
    locks_release(&cp->lock);
    campaign_free(cp);
}

static void campaign_abort(struct pending *p, int code) { campaign_leave(p, code); }
static void campaign_drop(struct pending *p) { campaign_leave(p, 0); }

void leaders_conn_closed(struct conn *c)
{
    while (!list_empty(&c->leads)) {
        struct campaign *cp = list_entry(c->leads.next, struct campaign, lead_link);
        struct workstream *ws = cp->ws;
        ws->refs++;
        leader_end(ws, REASON_DISCONNECTED, false, false);
        ws_unref(ws);
    }
}

/* ---- requests and their workstream ---- */

/* The stored state is in: run what waited for it.  A load that failed
 * answers them and forgets the workstream (the next request tries again). */
static void load_done(struct ll_req *req)
{
    struct workstream *ws = req->ud;
    int status = req->status;
    ws->loaded = true;
    ws->generation = req->out_generation;
    ws->disabled = req->out_disabled;
    ll_req_free(&ws->load);
    ws->refs++;
    while (!list_empty(&ws->waiting)) {
        struct lreq *q = list_entry(ws->waiting.next, struct lreq, link);
        list_del(&q->link);
        struct conn *c = conn_job_conn(&q->job);
        if (c && status)
            conn_reply_error(c, q->job.rid, status, status == COORD_ESTORAGE
                             ? "cannot read the ledger" : NULL);
        else if (c)
            q->run(q, ws);
        conn_job_end(&q->job);
        free(q);
    }
    ws->refs--;
    if (status && !ws->refs && !ws->term) {
        hashmap_del(&W.streams, &ws->h);
        free(ws->skey);
        free(ws);
        return;
    }
    ws_maybe_free(ws);
}

/* Runs q on its workstream, now or once it is loaded.  name is checked
 * here (the reply refuses it). */
/* The scoped key of the workstream name in key (SKEY_HEADER +
 * LIMIT_WORKSTREAM bytes); its length, or 0 after replying that it is too
 * long. */
static size_t ws_key(struct conn *c, uint64_t rid, coord_bytes name, uint8_t *key)
{
    if (name.len > LIMIT_WORKSTREAM || (size_t)c->scope_len + name.len > LIMIT_WORKSTREAM) {
        char msg[96];
        snprintf(msg, sizeof msg, "scope and workstream together exceed %u bytes",
                 LIMIT_WORKSTREAM);
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, msg);
        return 0;
    }
    return skey_write(key, c->scope, c->scope_len, name.ptr, name.len);
}

static void with_workstream(struct conn *c, uint64_t rid, coord_bytes name, struct lreq *q)
{
    uint8_t key[SKEY_HEADER + LIMIT_WORKSTREAM];
    size_t klen = ws_key(c, rid, name, key);
    if (!klen)
        return;
    struct hentry *h = hashmap_get(&W.streams, key, klen);
    struct workstream *ws = h ? (struct workstream *)h : NULL;
    if (ws && ws->loaded) {
        q->job.conn = c;
        q->job.rid = rid;
        q->run(q, ws);
        ws_maybe_free(ws);
        return;
    }
    /* it waits: its own copy, with its bytes */
    struct lreq *w = malloc(sizeof *w + q->op_len + q->key_len + q->value_len);
    if (!ws && w) {
        ws = calloc(1, sizeof *ws);
        uint8_t *sk = ws ? malloc(klen) : NULL;
        if (!sk) {
            free(ws);
            ws = NULL;
        } else {
            memcpy(sk, key, klen);
            ws->skey = sk;
            ws->h.key = sk;
            ws->h.keylen = klen;
            list_init(&ws->waiting);
            if (hashmap_put(&W.streams, &ws->h) < 0 ||
                ll_req_init(&ws->load, LL_LOAD, sk, klen, NULL, 0, NULL, 0, NULL, 0) < 0) {
                hashmap_del(&W.streams, &ws->h);
                free(sk);
                free(ws);
                ws = NULL;
            } else {
                ws->load.ud = ws;
                ws->load.done = load_done;
                ll_submit(W.ledger, &ws->load);
            }
        }
    }
    if (!ws || !w) {
        free(w);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    *w = *q;
    uint8_t *bytes = (uint8_t *)(w + 1);
    const uint8_t *src[3] = { q->op_id, q->key, q->value };
    size_t lens[3] = { q->op_len, q->key_len, q->value_len };
    const uint8_t **dst[3] = { &w->op_id, &w->key, &w->value };
    for (int i = 0; i < 3; i++) {
        if (lens[i])
            memcpy(bytes, src[i], lens[i]);
        *dst[i] = bytes;
        bytes += lens[i];
    }
    conn_job_start(&w->job, c, rid);
    list_append(&ws->waiting, &w->link);
}

/* ---- ops ---- */

static void run_campaign(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    uint64_t rid = q->job.rid;
    if (ws->disabled) {
        conn_reply_error(c, rid, COORD_EDISABLED, "workstream is disabled");
        return;
    }
    if (ws->term && ws->term->conn == c) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS,
                         "this connection already leads the workstream");
        return;
    }
    if (pending_check(c, rid) < 0)
        return;
    size_t nlen;
    const uint8_t *wname = ws_name(ws, &nlen);
    uint8_t lname[sizeof LOCK_PREFIX - 1 + LIMIT_WORKSTREAM];
    struct campaign *cp = calloc(1, sizeof *cp);
    if (!cp) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    memcpy(lname, LOCK_PREFIX, sizeof LOCK_PREFIX - 1);
    memcpy(lname + sizeof LOCK_PREFIX - 1, wname, nlen);
    cp->ws = ws;
    ws->refs++;
    cp->conn = c;
    c->refs++;
    cp->lease_ms = q->lease_ms;
    list_init(&cp->lead_link);
    list_init(&cp->p.link);
    cp->p.abort = campaign_abort;
    cp->p.drop = campaign_drop;
    if (pending_start(c, &cp->p, rid, COORD_OP_LEADER_CAMPAIGN) < 0) {   /* memory: replied */
        campaign_free(cp);
        return;
    }
    struct lock_request_args a = {
        .name = lname, .name_len = (uint32_t)(sizeof LOCK_PREFIX - 1 + nlen),
        .mode = LOCK_EXCLUSIVE, .if_available = q->if_available, .steal = q->steal,
        .timeout_ms = q->timeout_ms,
    };
    enum lock_outcome o = locks_request(&cp->lock, c, &a, &campaign_owner);
    if (o == LOCK_GRANTED) {
        start_bump(cp);
    } else if (o != LOCK_QUEUED) {
        pending_finish(&cp->p);
        locks_reply_refused(c, rid, o);
        campaign_free(cp);
    }
}

void op_leader_campaign(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 };
    struct lreq q = { .run = run_campaign, .lease_ms = 30000 };
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "lease_ms", false, &q.lease_ms);
    coord_field_bool(f, "if_available", false, &q.if_available);
    coord_field_bool(f, "steal", false, &q.steal);
    q.have_timeout = coord_field_uint(f, "timeout_ms", false, &q.timeout_ms);
    if (!fields_ok(c, rid, f) ||
        !duration_ok(c, rid, "lease_ms", q.lease_ms, LIMIT_WAIT_MS) ||
        !duration_ok(c, rid, "timeout_ms", q.timeout_ms, LIMIT_WAIT_MS))
        return;
    if (q.lease_ms == 0)
        q.lease_ms = 30000;
    const char *bad = NULL;
    if (q.steal && q.if_available)
        bad = "steal and if_available cannot be combined";
    else if (q.have_timeout && (q.steal || q.if_available))
        bad = "timeout_ms cannot be combined with steal or if_available";
    if (bad) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, bad);
        return;
    }
    with_workstream(c, rid, name, &q);
}

/* True when the leadership of ws with generation gen is live, else replies
 * FENCED. */
static bool live(struct conn *c, uint64_t rid, struct workstream *ws, uint64_t gen)
{
    /* a lease past its end is over even if its timer has not run yet
     * (the loop may be busy): do now what the timer would do */
    if (ws->live_generation && deadline_active(&ws->lease) &&
        ws->lease.at <= broker_now_ms(W.b))
        leader_end(ws, REASON_EXPIRED, true, false);
    if (gen != 0 && ws->live_generation == gen)
        return true;
    W.fenced++;
    char msg[128];
    snprintf(msg, sizeof msg, "generation %llu is not the live one", (unsigned long long)gen);
    conn_reply_error(c, rid, COORD_EFENCED, msg);
    return false;
}

static void run_renew(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!live(c, q->job.rid, ws, q->generation))
        return;
    deadline_set(&ws->lease, broker_now_ms(W.b) + ws->lease_ms, on_lease_expired);
    emit("renewed", ws, q->generation, REASON_NONE);
    coord_enc e;
    conn_enc_begin_reply(c, &e, q->job.rid);
    coord_enc_kv_uint(&e, "lease_ms", ws->lease_ms);
    conn_enc_finish(c, &e);
}

static void run_resign(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!live(c, q->job.rid, ws, q->generation))
        return;
    leader_end(ws, REASON_RESIGNED, false, false);
    conn_reply_ok(c, q->job.rid);
}

/* The ops whose fields are {workstream} or {workstream, generation}: read
 * them (in that order, so the first bad one is named) and run q. */
static void workstream_op(struct conn *c, uint64_t rid, coord_fields *f, struct lreq *q,
                          bool generation)
{
    coord_bytes name = { NULL, 0 };
    coord_field_str(f, "workstream", true, &name);
    if (generation)
        coord_field_uint(f, "generation", true, &q->generation);
    if (!fields_ok(c, rid, f))
        return;
    with_workstream(c, rid, name, q);
}

/* {workstream, generation} of renew and resign */
static void live_op(struct conn *c, uint64_t rid, coord_fields *f,
                    void (*run)(struct lreq *, struct workstream *))
{
    struct lreq q = { .run = run };
    workstream_op(c, rid, f, &q, true);
}

void op_leader_renew(struct conn *c, uint64_t rid, coord_fields *f)
{
    live_op(c, rid, f, run_renew);
}

void op_leader_resign(struct conn *c, uint64_t rid, coord_fields *f)
{
    live_op(c, rid, f, run_resign);
}

/* A ledger request answering a client: commit, read, disable/enable. */
struct ll_call {
    struct ll_req req;
    struct conn_job job;
    struct workstream *ws;         /* referenced, or NULL */
};

static struct ll_call *ll_call_new(struct conn *c, uint64_t rid, struct workstream *ws,
                                   enum ll_op op, const uint8_t *skey, size_t sklen,
                                   const struct lreq *q, void (*done)(struct ll_req *))
{
    struct ll_call *call = calloc(1, sizeof *call);
    if (!call || ll_req_init(&call->req, op, skey, sklen, q ? q->op_id : NULL,
                             q ? q->op_len : 0, q ? q->key : NULL, q ? q->key_len : 0,
                             q ? q->value : NULL, q ? q->value_len : 0) < 0) {
        free(call);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return NULL;
    }
    call->req.ud = call;
    call->req.done = done;
    call->ws = ws;
    if (ws)
        ws->refs++;
    conn_job_start(&call->job, c, rid);
    return call;
}

static void ll_call_end(struct ll_call *call)
{
    conn_job_end(&call->job);
    if (call->ws)
        ws_unref(call->ws);
    ll_req_free(&call->req);
    free(call);
}

static void commit_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    int status = req->status;
    if (status == 0 && !req->duplicate) W.commits++;
    if (req->duplicate) W.duplicates++;
    if (status == COORD_EFENCED) W.fenced++;
    struct conn *c = conn_job_conn(&call->job);
    if (c && status) {
        conn_reply_error(c, call->job.rid, status,
                         status == COORD_EFENCED ? "generation is stale" : req->why);
    } else if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        coord_enc_kv_bool(&e, "applied", !req->duplicate);
        if (req->duplicate) {
            coord_enc_kv_bool(&e, "duplicate", true);
            coord_enc_kv_uint(&e, "generation", req->out_generation);
        }
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

static void run_commit(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    if (!live(c, q->job.rid, ws, q->generation))
        return;
    struct ll_call *call = ll_call_new(c, q->job.rid, NULL, LL_COMMIT, ws->skey,
                                       ws->h.keylen, q, commit_done);
    if (!call)
        return;
    call->req.generation = q->generation;
    ll_submit(W.ledger, &call->req);
}

void op_leader_commit(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 }, op_id = name, key = name, value = name;
    struct lreq q = { .run = run_commit };
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "generation", true, &q.generation);
    coord_field_str(f, "op_id", true, &op_id);
    coord_field_str(f, "key", true, &key);
    coord_field_bin(f, "value", true, &value);
    if (!fields_ok(c, rid, f))
        return;
    if (op_id.len == 0 || op_id.len > LIMIT_OP_ID || key.len > LIMIT_LEADER_KEY) {
        char msg[96];
        snprintf(msg, sizeof msg, "op_id must be 1..%u bytes, key at most %u bytes",
                 LIMIT_OP_ID, LIMIT_LEADER_KEY);
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
    with_workstream(c, rid, name, &q);
}

static void read_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct conn *c = conn_job_conn(&call->job);
    if (c && req->status) {
        conn_reply_error(c, call->job.rid, req->status,
                         req->status == COORD_ENOT_FOUND ? "no value for this key" : NULL);
    } else if (c) {
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
    size_t sklen = ws_key(c, rid, name, skey);
    if (!sklen)
        return;
    struct lreq q = { .key = key.ptr, .key_len = key.len };
    struct ll_call *call = ll_call_new(c, rid, NULL, LL_READ, skey, sklen, &q, read_done);
    if (call)
        ll_submit(W.ledger, &call->req);
}

static void run_info(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    uint64_t now = broker_now_ms(c->b);
    coord_enc e;
    conn_enc_begin_reply(c, &e, q->job.rid);
    coord_enc_kv_uint(&e, "generation", ws->generation);
    coord_enc_kv_cstr(&e, "state", ws->disabled ? "disabled"
                                   : ws->live_generation ? "leading" : "idle");
    if (ws->live_generation) {
        struct conn *leader = ws->term->conn;
        coord_enc_kv_uint(&e, "live_generation", ws->live_generation);
        coord_enc_kv_uint(&e, "conn", leader->id);
        coord_enc_kv_cstr(&e, "client", leader->client ? leader->client : "");
        coord_enc_kv_uint(&e, "pid", leader->pid);
        coord_enc_kv_uint(&e, "lease_left_ms", ws->lease.at > now ? ws->lease.at - now : 0);
        coord_enc_kv_uint(&e, "leading_ms", now - ws->elected_ms);
    }
    coord_enc_kv_bool(&e, "disabled", ws->disabled);
    conn_enc_finish(c, &e);
}

void op_leader_info(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_info };
    workstream_op(c, rid, f, &q, false);
}

static void switch_done(struct ll_req *req)
{
    struct ll_call *call = req->ud;
    struct workstream *ws = call->ws;
    if (req->status == 0) {
        ws->generation = req->out_generation;
        /* announced once stored, with the generation it stored */
        emit(req->disable ? "disabled" : "enabled", ws, req->out_generation, REASON_NONE);
    }
    struct conn *c = conn_job_conn(&call->job);
    if (c && req->status) {
        conn_reply_error(c, call->job.rid, req->status, req->why);
    } else if (c) {
        coord_enc e;
        conn_enc_begin_reply(c, &e, call->job.rid);
        if (req->disable)
            coord_enc_kv_uint(&e, "generation", req->out_generation);
        conn_enc_finish(c, &e);
    }
    ll_call_end(call);
}

static void run_switch(struct lreq *q, struct workstream *ws)
{
    struct conn *c = q->job.conn;
    bool disable = q->disable;
    struct ll_call *call = ll_call_new(c, q->job.rid, ws, LL_SET_DISABLED, ws->skey,
                                       ws->h.keylen, NULL, switch_done);
    if (!call)
        return;
    /* in memory at once: no campaign passes, no commit of the old leader */
    ws->disabled = disable;
    if (disable && ws->live_generation)
        leader_end(ws, REASON_DISABLED, true, false);
    call->req.disable = disable;
    ll_submit(W.ledger, &call->req);
}

void op_leader_disable(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_switch, .disable = true };
    workstream_op(c, rid, f, &q, false);
}

void op_leader_enable(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct lreq q = { .run = run_switch, .disable = false };
    workstream_op(c, rid, f, &q, false);
}
