/* leaders.c - leadership with a fence ledger.
 *
 * A campaign queues on the workstream's leader lock, a reserved lock name
 * ("-leader/<workstream>") in the ordinary lock table, so lock.query shows
 * who leads and who waits.  Once the lock is granted the ledger writer
 * increments the workstream's generation and syncs it; only then is the
 * campaign answered.  A generation is therefore never handed out twice,
 * not even across kill -9.
 *
 * A leader that loses its lease, disconnects, is stolen from or disabled
 * is stale at once: the in-memory live generation is cleared before any
 * later commit is looked at, and commits are checked again against the
 * stored generation inside their transaction. */
#include <stdlib.h>
#include <string.h>
#include "deadline.h"
#include "errors.h"
#include "events.h"
#include "hashmap.h"
#include "leaders.h"
#include "ledger.h"
#include "coord-limits.h"
#include "locks.h"
#include "ops.h"

#define MAX_WORKSTREAM 200
#define MAX_KEY 256
#define MAX_OP_ID 256
#define LOCK_PREFIX "-leader/"

struct campaign;

struct workstream {
    struct hentry h;
    uint8_t *skey;                 /* scoped key */
    uint32_t scope_len;
    uint64_t generation;           /* last one stored */
    bool disabled;
    /* the live leader, if any */
    uint64_t live_generation;      /* 0: nobody may commit */
    struct conn *leader;
    struct lock_req *lock;
    struct list lead_link;         /* leader->leads */
    struct deadline lease;
    uint64_t lease_ms;
    uint64_t elected_ms;
    unsigned refs;                 /* campaigns and ledger jobs using it */
};

enum campaign_state { CAMPAIGN_WAITING, CAMPAIGN_BUMPING };

struct campaign {
    struct pending p;
    struct ledger_job job;         /* the generation bump */
    struct workstream *ws;
    struct conn *conn;
    struct lock_req *lock;
    uint64_t lease_ms;
    uint64_t new_generation;
    enum campaign_state state;
    bool gone;                     /* cancelled or disconnected meanwhile */
    bool lock_lost;
};

static struct {
    struct broker *b;
    struct hashmap streams;
    uint64_t elected, lost, commits, duplicates, fenced;
} W;

void leaders_init(struct broker *b)
{
    W.b = b;
    hashmap_init(&W.streams);
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

static const uint8_t *ws_name(const struct workstream *ws, uint32_t *len)
{
    *len = (uint32_t)(ws->h.keylen - 4 - ws->scope_len);
    return ws->skey + 4 + ws->scope_len;
}

/* A workstream nobody leads, campaigns for or writes is dropped from
 * memory: its stored state is read again when it is next used, so looking
 * at many workstreams (leader.info) leaves nothing behind. */
static void ws_maybe_free(struct workstream *ws)
{
    if (ws->refs || ws->leader || ws->live_generation)
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

static void emit(const char *what, const struct workstream *ws, uint64_t gen,
                 const char *reason)
{
    events_leader(W.b, what, ws->skey, ws->h.keylen, ws->scope_len, gen, reason);
}

/* The stored state of a workstream, loaded once into memory. */
static struct workstream *ws_get(struct conn *c, uint64_t rid, coord_bytes name)
{
    if (name.len > MAX_WORKSTREAM || (size_t)c->scope_len + name.len > MAX_WORKSTREAM) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS,
                         "scope and workstream together exceed 200 bytes");
        return NULL;
    }
    uint8_t *skey;
    size_t sklen = scoped_key(&skey, c->scope, c->scope_len, name.ptr, name.len);
    if (!sklen) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return NULL;
    }
    struct hentry *h = hashmap_get(&W.streams, skey, sklen);
    if (h) {
        free(skey);
        return (struct workstream *)h;
    }
    struct workstream *ws = calloc(1, sizeof *ws);
    MDB_txn *txn;
    if (!ws || ledger_read_begin(W.b->ledger, &txn)) {
        free(ws);
        free(skey);
        conn_reply_error(c, rid, COORD_ESTORAGE, "cannot read the ledger");
        return NULL;
    }
    MDB_val k = { sklen, skey }, v;
    if (mdb_get(txn, ledger_dbi(W.b->ledger, DB_LEADERS), &k, &v) == 0 && v.mv_size == 9) {
        ws->generation = get_be64(v.mv_data);
        ws->disabled = ((uint8_t *)v.mv_data)[8] != 0;
    }
    ledger_read_end(W.b->ledger, txn);
    ws->skey = skey;
    ws->scope_len = c->scope_len;
    ws->h.key = skey;
    ws->h.keylen = sklen;
    list_init(&ws->lead_link);
    if (hashmap_put(&W.streams, &ws->h) < 0) {
        free(skey);
        free(ws);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return NULL;
    }
    return ws;
}

static void send_lost(struct workstream *ws, uint64_t gen, const char *reason)
{
    if (!ws->leader || !conn_alive(ws->leader))
        return;
    uint32_t nlen;
    const uint8_t *name = ws_name(ws, &nlen);
    coord_enc e;
    conn_enc_begin_event(ws->leader, &e, "leader.lost");
    coord_enc_kv_name(&e, "workstream", name, nlen);
    coord_enc_kv_uint(&e, "generation", gen);
    coord_enc_kv_cstr(&e, "reason", reason);
    conn_enc_finish(ws->leader, &e);
}

/* The leader is no longer: fence it at once, tell it, free the lock
 * (unless the lock table is taking it away itself). */
static void leader_end(struct workstream *ws, const char *reason, bool release_lock,
                       bool tell)
{
    uint64_t gen = ws->live_generation;
    ws->live_generation = 0;
    deadline_cancel(&ws->lease);
    if (tell)
        send_lost(ws, gen, reason);
    if (list_linked(&ws->lead_link))
        list_del(&ws->lead_link);
    struct lock_req *lock = ws->lock;
    ws->lock = NULL;
    ws->leader = NULL;
    if (strcmp(reason, "resigned") == 0) {
        emit("resigned", ws, gen, NULL);
    } else {
        W.lost++;
        emit("lost", ws, gen, reason);
    }
    if (release_lock && lock)
        locks_release(lock);
}

static void on_lease_expired(struct deadline *d)
{
    struct workstream *ws = list_entry(d, struct workstream, lease);
    leader_end(ws, "expired", true, true);
    ws_maybe_free(ws);
}

/* ---- campaign: the lock's callbacks ---- */

static int apply_bump(struct ledger *l, MDB_txn *txn, struct ledger_job *job)
{
    struct campaign *cp = list_entry(job, struct campaign, job);
    MDB_val k = { cp->ws->h.keylen, cp->ws->skey }, v;
    uint64_t gen = 0;
    int rc = mdb_get(txn, ledger_dbi(l, DB_LEADERS), &k, &v);
    if (rc == 0 && v.mv_size == 9) {
        gen = get_be64(v.mv_data);
        if (((uint8_t *)v.mv_data)[8])
            return COORD_EDISABLED;
    } else if (rc != MDB_NOTFOUND) {
        return rc ? rc : MDB_CORRUPTED;
    }
    uint8_t buf[9];
    put_be64(buf, gen + 1);
    buf[8] = 0;
    v.mv_size = 9;
    v.mv_data = buf;
    if ((rc = mdb_put(txn, ledger_dbi(l, DB_LEADERS), &k, &v, 0)))
        return rc;
    cp->new_generation = gen + 1;
    return 0;
}

static void campaign_free(struct campaign *cp)
{
    conn_unref(cp->conn);
    ws_unref(cp->ws);
    free(cp);
}

static const struct lock_owner held_owner;

/* The generation is on disk: hand it out, if the campaign still wants it. */
static void bump_done(struct ledger_job *job, int status)
{
    struct campaign *cp = list_entry(job, struct campaign, job);
    struct workstream *ws = cp->ws;
    if (status == 0)
        ws->generation = cp->new_generation;
    if (cp->gone || cp->lock_lost || status != 0) {
        if (!cp->gone) {
            pending_finish(&cp->p);
            if (status == COORD_EDISABLED)
                ws->disabled = true;
            conn_reply_error(cp->conn, cp->p.rid, status ? status : COORD_EABORTED,
                             status == COORD_EDISABLED ? "workstream is disabled"
                             : status ? ledger_job_message(job, "cannot store the generation")
                             : "leadership was stolen before it was granted");
        }
        if (cp->lock)
            locks_release(cp->lock);
        campaign_free(cp);
        return;
    }
    pending_finish(&cp->p);
    ws->live_generation = cp->new_generation;
    ws->leader = cp->conn;
    ws->lock = cp->lock;
    ws->lock->owner = &held_owner;
    ws->lock->owner_data = ws;
    ws->lease_ms = cp->lease_ms;
    ws->elected_ms = broker_now_ms(W.b);
    list_append(&cp->conn->leads, &ws->lead_link);
    deadline_set(&ws->lease, ws->elected_ms + ws->lease_ms, on_lease_expired);
    W.elected++;
    emit("elected", ws, ws->live_generation, NULL);
    coord_enc e;
    conn_enc_begin_reply(cp->conn, &e, cp->p.rid);
    coord_enc_kv_bool(&e, "granted", true);
    coord_enc_kv_uint(&e, "generation", ws->live_generation);
    coord_enc_kv_uint(&e, "lease_ms", ws->lease_ms);
    conn_enc_finish(cp->conn, &e);
    campaign_free(cp);
}

/* While campaigning, the leader lock's owner_data is the campaign; once
 * elected it is the workstream (and the owner callbacks switch with it). */
static void held_lock_lost(struct lock_req *r, const char *reason)
{
    struct workstream *ws = r->owner_data;
    ws->lock = NULL;                   /* the lock table frees it */
    leader_end(ws, reason, false, true);
    ws_maybe_free(ws);
}

static void held_lock_unexpected(struct lock_req *r)
{
    (void)r;                           /* a held lock is granted only once */
}

static void held_lock_failed(struct lock_req *r, int code)
{
    (void)r;
    (void)code;
}

static const struct lock_owner held_owner = {
    held_lock_unexpected, held_lock_lost, held_lock_failed,
};

static void campaign_lock_granted(struct lock_req *r)
{
    struct campaign *cp = r->owner_data;
    cp->state = CAMPAIGN_BUMPING;
    cp->job.apply = apply_bump;
    cp->job.done = bump_done;
    ledger_submit(W.b->ledger, &cp->job);
}

/* stolen while the generation was being written */
static void campaign_lock_lost(struct lock_req *r, const char *reason)
{
    struct campaign *cp = r->owner_data;
    (void)reason;
    cp->lock = NULL;
    cp->lock_lost = true;
}

static void campaign_lock_failed(struct lock_req *r, int code)
{
    struct campaign *cp = r->owner_data;
    cp->lock = NULL;
    pending_finish(&cp->p);
    conn_reply_error(cp->conn, cp->p.rid, code,
                     code == COORD_ETIMEOUT ? "not elected within timeout_ms" : NULL);
    campaign_free(cp);
}

static const struct lock_owner campaign_owner = {
    campaign_lock_granted, campaign_lock_lost, campaign_lock_failed,
};

/* cancel / shutdown of a waiting campaign */
static void campaign_abort(struct pending *p, int code)
{
    struct campaign *cp = list_entry(p, struct campaign, p);
    pending_finish(p);
    conn_reply_error(cp->conn, p->rid, code, NULL);
    if (cp->state == CAMPAIGN_BUMPING) {
        cp->gone = true;               /* bump_done cleans up */
        return;
    }
    locks_release(cp->lock);
    campaign_free(cp);
}

static void campaign_drop(struct pending *p)
{
    struct campaign *cp = list_entry(p, struct campaign, p);
    pending_finish(p);
    if (cp->state == CAMPAIGN_BUMPING) {
        cp->gone = true;
        return;
    }
    locks_release(cp->lock);
    campaign_free(cp);
}

void leaders_conn_closed(struct conn *c)
{
    while (!list_empty(&c->leads)) {
        struct workstream *ws = list_entry(c->leads.next, struct workstream, lead_link);
        leader_end(ws, "disconnected", true, false);
        ws_maybe_free(ws);
    }
}

/* ---- ops ---- */

void op_leader_campaign(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 };
    uint64_t lease_ms = 30000, timeout_ms = 0;
    bool if_available = false, steal = false;
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "lease_ms", false, &lease_ms);
    coord_field_bool(f, "if_available", false, &if_available);
    coord_field_bool(f, "steal", false, &steal);
    bool have_timeout = coord_field_uint(f, "timeout_ms", false, &timeout_ms);
    if (!fields_ok(c, rid, f) ||
        !duration_ok(c, rid, "lease_ms", lease_ms, LIMIT_WAIT_MS) ||
        !duration_ok(c, rid, "timeout_ms", timeout_ms, LIMIT_WAIT_MS))
        return;
    if (lease_ms == 0)
        lease_ms = 30000;
    const char *bad = NULL;
    if (steal && if_available)
        bad = "steal and if_available cannot be combined";
    else if (have_timeout && (steal || if_available))
        bad = "timeout_ms cannot be combined with steal or if_available";
    if (bad) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, bad);
        return;
    }
    struct workstream *ws = ws_get(c, rid, name);
    if (!ws)
        return;
    if (ws->disabled) {
        conn_reply_error(c, rid, COORD_EDISABLED, "workstream is disabled");
        ws_maybe_free(ws);
        return;
    }
    if (ws->leader == c) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS,
                         "this connection already leads the workstream");
        return;
    }
    if (pending_check(c, rid) < 0) {
        ws_maybe_free(ws);
        return;
    }
    struct campaign *cp = calloc(1, sizeof *cp);
    uint32_t nlen;
    const uint8_t *wname = ws_name(ws, &nlen);
    uint8_t *lname = malloc(sizeof LOCK_PREFIX - 1 + nlen);
    if (!cp || !lname) {
        free(cp);
        free(lname);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        ws_maybe_free(ws);
        return;
    }
    ws->refs++;
    memcpy(lname, LOCK_PREFIX, sizeof LOCK_PREFIX - 1);
    memcpy(lname + sizeof LOCK_PREFIX - 1, wname, nlen);
    cp->ws = ws;
    cp->conn = c;
    cp->lease_ms = lease_ms;
    cp->p.rid = rid;
    list_init(&cp->p.link);
    c->refs++;
    /* registered first: a grant at once starts the bump, which needs it */
    cp->p.abort = campaign_abort;
    cp->p.drop = campaign_drop;
    if (pending_start(c, &cp->p, rid, "leader.campaign") < 0) {   /* memory: replied */
        free(lname);
        campaign_free(cp);
        return;
    }
    struct lock_request_args a = {
        .name = lname, .name_len = (uint32_t)(sizeof LOCK_PREFIX - 1 + nlen),
        .mode = LOCK_EXCLUSIVE, .if_available = if_available, .steal = steal,
        .timeout_ms = timeout_ms,
    };
    int refused;
    struct lock_req *r = locks_request(c, rid, &a, &campaign_owner, cp, &refused);
    free(lname);
    if (!r) {
        pending_finish(&cp->p);
        locks_reply_refused(c, rid, refused);
        campaign_free(cp);
        return;
    }
    cp->lock = r;
}

/* The live leadership for (workstream, generation), or NULL after replying
 * FENCED. */
static struct workstream *live(struct conn *c, uint64_t rid, coord_bytes name, uint64_t gen)
{
    struct workstream *ws = ws_get(c, rid, name);
    if (!ws)
        return NULL;
    /* a lease past its end is over even if its timer has not run yet
     * (the loop may be busy): do now what the timer would do */
    if (ws->live_generation && deadline_active(&ws->lease) &&
        ws->lease.at <= broker_now_ms(W.b))
        leader_end(ws, "expired", true, true);
    if (gen == 0 || ws->live_generation != gen) {
        W.fenced++;
        char msg[128];
        snprintf(msg, sizeof msg, "generation %llu is not the live one",
                 (unsigned long long)gen);
        conn_reply_error(c, rid, COORD_EFENCED, msg);
        ws_maybe_free(ws);
        return NULL;
    }
    return ws;
}

/* {workstream, generation} of renew and resign: the live leadership, or
 * NULL after replying. */
static struct workstream *live_from_fields(struct conn *c, uint64_t rid, coord_fields *f,
                                           uint64_t *gen)
{
    coord_bytes name = { NULL, 0 };
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "generation", true, gen);
    if (!fields_ok(c, rid, f))
        return NULL;
    return live(c, rid, name, *gen);
}

void op_leader_renew(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t gen = 0;
    struct workstream *ws = live_from_fields(c, rid, f, &gen);
    if (!ws)
        return;
    deadline_set(&ws->lease, broker_now_ms(W.b) + ws->lease_ms, on_lease_expired);
    emit("renewed", ws, gen, NULL);
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_uint(&e, "lease_ms", ws->lease_ms);
    conn_enc_finish(c, &e);
}

void op_leader_resign(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t gen = 0;
    struct workstream *ws = live_from_fields(c, rid, f, &gen);
    if (!ws)
        return;
    leader_end(ws, "resigned", true, false);
    ws_maybe_free(ws);
    conn_reply_ok(c, rid);
}

struct commit_job {
    struct ledger_job job;
    struct conn *conn;
    uint64_t rid;
    uint8_t *kvkey, *opkey, *value;    /* one allocation, kvkey first */
    size_t kvlen, oplen, vlen;
    uint8_t *skey;
    size_t sklen;
    uint64_t generation;
    uint64_t dup_generation;
    bool duplicate;
};

/* u16 length, scoped workstream, then name */
static size_t compose(uint8_t *out, const uint8_t *skey, size_t sklen,
                      const uint8_t *name, size_t nlen)
{
    out[0] = (uint8_t)(sklen >> 8);
    out[1] = (uint8_t)sklen;
    memcpy(out + 2, skey, sklen);
    if (nlen)
        memcpy(out + 2 + sklen, name, nlen);
    return 2 + sklen + nlen;
}

static int apply_commit(struct ledger *l, MDB_txn *txn, struct ledger_job *job)
{
    struct commit_job *cj = (struct commit_job *)job;
    MDB_val k = { cj->sklen, cj->skey }, v;
    int rc = mdb_get(txn, ledger_dbi(l, DB_LEADERS), &k, &v);
    if (rc == MDB_NOTFOUND || (rc == 0 && (v.mv_size != 9 || get_be64(v.mv_data) != cj->generation)))
        return COORD_EFENCED;
    if (rc)
        return rc;
    MDB_val ok = { cj->oplen, cj->opkey }, ov;
    rc = mdb_get(txn, ledger_dbi(l, DB_OPS), &ok, &ov);
    if (rc == 0) {
        cj->duplicate = true;
        cj->dup_generation = ov.mv_size == 8 ? get_be64(ov.mv_data) : 0;
        return 0;
    }
    if (rc != MDB_NOTFOUND)
        return rc;
    uint8_t gen[8];
    put_be64(gen, cj->generation);
    ov.mv_size = 8;
    ov.mv_data = gen;
    if ((rc = mdb_put(txn, ledger_dbi(l, DB_OPS), &ok, &ov, 0)))
        return rc;
    /* the value is stored as generation + bytes, reserved then filled */
    MDB_val kk = { cj->kvlen, cj->kvkey }, kv = { 8 + cj->vlen, NULL };
    if ((rc = mdb_put(txn, ledger_dbi(l, DB_KV), &kk, &kv, MDB_RESERVE)))
        return rc;
    memcpy(kv.mv_data, gen, 8);
    if (cj->vlen)
        memcpy((uint8_t *)kv.mv_data + 8, cj->value, cj->vlen);
    return 0;
}

static void commit_done(struct ledger_job *job, int status)
{
    struct commit_job *cj = (struct commit_job *)job;
    if (status == 0 && !cj->duplicate) W.commits++;
    if (cj->duplicate) W.duplicates++;
    if (status == COORD_EFENCED) W.fenced++;
    if (conn_alive(cj->conn)) {
        if (status) {
            conn_reply_error(cj->conn, cj->rid, status,
                             status == COORD_EFENCED ? "generation is stale" : job->why);
        } else {
            coord_enc e;
            conn_enc_begin_reply(cj->conn, &e, cj->rid);
            coord_enc_kv_bool(&e, "applied", !cj->duplicate);
            if (cj->duplicate) {
                coord_enc_kv_bool(&e, "duplicate", true);
                coord_enc_kv_uint(&e, "generation", cj->dup_generation);
            }
            conn_enc_finish(cj->conn, &e);
        }
    }
    conn_unref(cj->conn);
    free(cj->kvkey);
    free(cj);
}

void op_leader_commit(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 }, op_id = name, key = name, value = name;
    uint64_t gen = 0;
    coord_field_str(f, "workstream", true, &name);
    coord_field_uint(f, "generation", true, &gen);
    coord_field_str(f, "op_id", true, &op_id);
    coord_field_str(f, "key", true, &key);
    coord_field_bin(f, "value", true, &value);
    if (!fields_ok(c, rid, f))
        return;
    if (op_id.len == 0 || op_id.len > MAX_OP_ID || key.len > MAX_KEY) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS,
                         "op_id must be 1..256 bytes, key at most 256 bytes");
        return;
    }
    if (value.len > payload_limit(c)) {
        conn_reply_error(c, rid, COORD_ETOO_LARGE, "value does not fit a reply frame");
        return;
    }
    struct workstream *ws = live(c, rid, name, gen);
    if (!ws)
        return;
    struct commit_job *cj = calloc(1, sizeof *cj);
    size_t kvlen = 2 + ws->h.keylen + key.len, oplen = 2 + ws->h.keylen + op_id.len;
    uint8_t *mem = malloc(kvlen + oplen + value.len + ws->h.keylen + 1);
    if (!cj || !mem) {
        free(cj);
        free(mem);
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    cj->kvkey = mem;
    cj->kvlen = compose(mem, ws->skey, ws->h.keylen, key.ptr, key.len);
    cj->opkey = mem + kvlen;
    cj->oplen = compose(cj->opkey, ws->skey, ws->h.keylen, op_id.ptr, op_id.len);
    cj->value = cj->opkey + oplen;
    cj->vlen = value.len;
    if (value.len)
        memcpy(cj->value, value.ptr, value.len);
    cj->skey = cj->value + value.len;
    cj->sklen = ws->h.keylen;
    memcpy(cj->skey, ws->skey, ws->h.keylen);
    cj->generation = gen;
    cj->conn = c;
    cj->rid = rid;
    c->refs++;
    cj->job.apply = apply_commit;
    cj->job.done = commit_done;
    ledger_submit(c->b->ledger, &cj->job);
}

void op_leader_read(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 }, key = name;
    coord_field_str(f, "workstream", true, &name);
    coord_field_str(f, "key", true, &key);
    if (!fields_ok(c, rid, f))
        return;
    if (key.len > MAX_KEY) {
        conn_reply_error(c, rid, COORD_EINVALID_OPTIONS, "key at most 256 bytes");
        return;
    }
    struct workstream *ws = ws_get(c, rid, name);
    if (!ws)
        return;
    uint8_t kbuf[2 + 4 + MAX_WORKSTREAM + MAX_KEY + 8];
    MDB_val k = { compose(kbuf, ws->skey, ws->h.keylen, key.ptr, key.len), kbuf }, v;
    MDB_txn *txn;
    if (ledger_read_begin(c->b->ledger, &txn)) {
        conn_reply_error(c, rid, COORD_ESTORAGE, "cannot read the ledger");
        ws_maybe_free(ws);
        return;
    }
    int rc = mdb_get(txn, ledger_dbi(c->b->ledger, DB_KV), &k, &v);
    if (rc || v.mv_size < 8) {
        ledger_read_end(c->b->ledger, txn);
        ws_maybe_free(ws);
        conn_reply_error(c, rid, rc == MDB_NOTFOUND ? COORD_ENOT_FOUND : COORD_ESTORAGE,
                         rc == MDB_NOTFOUND ? "no value for this key" : NULL);
        return;
    }
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_bin(&e, "value", (uint8_t *)v.mv_data + 8, v.mv_size - 8);
    coord_enc_kv_uint(&e, "generation", get_be64(v.mv_data));
    conn_enc_finish(c, &e);
    ledger_read_end(c->b->ledger, txn);
    ws_maybe_free(ws);
}

void op_leader_info(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name = { NULL, 0 };
    coord_field_str(f, "workstream", true, &name);
    if (!fields_ok(c, rid, f))
        return;
    struct workstream *ws = ws_get(c, rid, name);
    if (!ws)
        return;
    uint64_t now = broker_now_ms(c->b);
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_uint(&e, "generation", ws->generation);
    coord_enc_kv_cstr(&e, "state", ws->disabled ? "disabled"
                                   : ws->live_generation ? "leading" : "idle");
    if (ws->live_generation) {
        coord_enc_kv_uint(&e, "live_generation", ws->live_generation);
        coord_enc_kv_uint(&e, "conn", ws->leader->id);
        coord_enc_kv_cstr(&e, "client", ws->leader->client ? ws->leader->client : "");
        coord_enc_kv_uint(&e, "pid", ws->leader->pid);
        coord_enc_kv_uint(&e, "lease_left_ms", ws->lease.at > now ? ws->lease.at - now : 0);
        coord_enc_kv_uint(&e, "leading_ms", now - ws->elected_ms);
    }
    coord_enc_kv_bool(&e, "disabled", ws->disabled);
    conn_enc_finish(c, &e);
    ws_maybe_free(ws);
}

struct switch_job {
    struct ledger_job job;
    struct conn *conn;
    uint64_t rid;
    struct workstream *ws;
    bool disable;
    uint64_t generation;
};

static int apply_switch(struct ledger *l, MDB_txn *txn, struct ledger_job *job)
{
    struct switch_job *sj = (struct switch_job *)job;
    MDB_val k = { sj->ws->h.keylen, sj->ws->skey }, v;
    uint64_t gen = 0;
    int rc = mdb_get(txn, ledger_dbi(l, DB_LEADERS), &k, &v);
    if (rc == 0 && v.mv_size == 9)
        gen = get_be64(v.mv_data);
    else if (rc != MDB_NOTFOUND)
        return rc ? rc : MDB_CORRUPTED;
    /* disabling advances the generation: whatever was live is fenced */
    if (sj->disable)
        gen++;
    uint8_t buf[9];
    put_be64(buf, gen);
    buf[8] = sj->disable;
    v.mv_size = 9;
    v.mv_data = buf;
    sj->generation = gen;
    return mdb_put(txn, ledger_dbi(l, DB_LEADERS), &k, &v, 0);
}

static void switch_done(struct ledger_job *job, int status)
{
    struct switch_job *sj = (struct switch_job *)job;
    if (status == 0) {
        sj->ws->generation = sj->generation;
        /* announced once stored, with the generation it stored */
        emit(sj->disable ? "disabled" : "enabled", sj->ws, sj->generation, NULL);
    }
    if (conn_alive(sj->conn)) {
        if (status) {
            conn_reply_error(sj->conn, sj->rid, status, job->why);
        } else {
            coord_enc e;
            conn_enc_begin_reply(sj->conn, &e, sj->rid);
            if (sj->disable)
                coord_enc_kv_uint(&e, "generation", sj->generation);
            conn_enc_finish(sj->conn, &e);
        }
    }
    conn_unref(sj->conn);
    ws_unref(sj->ws);
    free(sj);
}

static void leader_switch(struct conn *c, uint64_t rid, coord_fields *f, bool disable)
{
    coord_bytes name = { NULL, 0 };
    coord_field_str(f, "workstream", true, &name);
    if (!fields_ok(c, rid, f))
        return;
    struct workstream *ws = ws_get(c, rid, name);
    if (!ws)
        return;
    struct switch_job *sj = calloc(1, sizeof *sj);
    if (!sj) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        ws_maybe_free(ws);
        return;
    }
    ws->refs++;
    /* in memory at once: no campaign passes, no commit of the old leader */
    ws->disabled = disable;
    if (disable && ws->live_generation)
        leader_end(ws, "disabled", true, true);
    sj->conn = c;
    sj->rid = rid;
    sj->ws = ws;
    sj->disable = disable;
    c->refs++;
    sj->job.apply = apply_switch;
    sj->job.done = switch_done;
    ledger_submit(c->b->ledger, &sj->job);
}

void op_leader_disable(struct conn *c, uint64_t rid, coord_fields *f)
{
    leader_switch(c, rid, f, true);
}

void op_leader_enable(struct conn *c, uint64_t rid, coord_fields *f)
{
    leader_switch(c, rid, f, false);
}
