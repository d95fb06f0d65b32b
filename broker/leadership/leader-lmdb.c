/* leader-lmdb.c - the "local" leader ledger: LMDB, on the broker's ledger.
 *
 * Writes (bump, term end, commit, claim, abandon, define, disable/enable)
 * are ledger jobs: the writer thread applies them in its group-committed
 * transaction, each a pure function of the request and the database, and
 * the request is answered once the batch is synced.  Every rule that
 * fences is decided here, inside that step: a commit's, claim's or
 * abandon's generation against the stored one, the rollout mode against
 * the stored descriptor, a campaign's protocol against the stored pin.
 * Reads (load, read, pending, history) run in a short read transaction on
 * the loop thread; their answers are deferred to the loop's idle phase, so
 * no callback runs inside submit.
 *
 * Keys ("ws" is the scoped workstream, "[ws]" it with a u16 BE length first):
 *   DB_LEADERS  ws -> generation u64, disabled u8, unsettled u32, seq u64,
 *                     history count u32 (an older 9-byte value has the first two)
 *   DB_DESC     ws -> descriptor (leader-desc.h)
 *   DB_HIST     [ws] generation u64 -> term (leader-desc.h), the last LIMIT_HISTORY
 *   DB_KV       [ws] key -> generation u64, value
 *   DB_OPS      [ws] op_id -> generation u64 (applied)
 *   DB_CLAIMS   [ws] op_id -> u8 state (1 claimed, 2 abandoned), generation u64,
 *                     claimed_ms u64, seq u64, [u16 + reason (abandoned)]
 *   DB_PENDING  [ws] seq u64 -> op_id (claimed, unsettled: oldest first) */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "breaks.h"
#include "broker.h"
#include "coord-limits.h"
#include "errors.h"
#include "leader-ledger.h"
#include "reasons.h"
#include "skey.h"

struct lmdb_ll {
    struct store *store;
    uv_idle_t idle;                /* answers deferred reads */
    struct ll_req *done_head, *done_tail;
};

#define KEY_MAX STORE_KEY_MAX

/* Keys are [u16 length][scoped workstream][name]: the longest name is a
 * committed key, an op id, or a u64 (sequence, generation). */
_Static_assert(2 + SKEY_HEADER + LIMIT_WORKSTREAM + LIMIT_LEADER_KEY <= KEY_MAX,
               "a committed key's LMDB key is longer than LMDB allows");
_Static_assert(2 + SKEY_HEADER + LIMIT_WORKSTREAM + LIMIT_OP_ID <= KEY_MAX,
               "an op id's LMDB key is longer than LMDB allows");

/* [ws] then name */
static size_t compose(uint8_t *out, const uint8_t *ws, size_t ws_len,
                      const uint8_t *name, size_t nlen)
{
    out[0] = (uint8_t)(ws_len >> 8);
    out[1] = (uint8_t)ws_len;
    memcpy(out + 2, ws, ws_len);
    if (nlen)
        memcpy(out + 2 + ws_len, name, nlen);
    return 2 + ws_len + nlen;
}

static size_t compose_u64(uint8_t *out, const struct ll_req *r, uint64_t v)
{
    uint8_t b[8];
    put_be64(b, v);
    return compose(out, r->ws, r->ws_len, b, 8);
}

static bool has_prefix(const MDB_val *k, const uint8_t *prefix, size_t plen)
{
    return k->mv_size >= plen && memcmp(k->mv_data, prefix, plen) == 0;
}

/* ---- the workstream's state record ---- */

struct state {
    uint64_t generation;
    bool disabled;
    uint32_t unsettled;            /* claims not committed nor abandoned */
    uint64_t seq;                  /* the last claim's place */
    uint32_t history;              /* terms kept */
};

static uint32_t get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int get_state(struct store *l, MDB_txn *txn, const struct ll_req *r, struct state *st)
{
    MDB_val k = { r->ws_len, r->ws }, v;
    memset(st, 0, sizeof *st);
    int rc = mdb_get(txn, store_dbi(l, DB_LEADERS), &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    const uint8_t *p = v.mv_data;
    if (v.mv_size != 9 && v.mv_size != 25)
        return MDB_CORRUPTED;
    st->generation = get_be64(p);
    st->disabled = p[8] != 0;
    if (v.mv_size == 25) {
        st->unsettled = get_be32(p + 9);
        st->seq = get_be64(p + 13);
        st->history = get_be32(p + 21);
    }
    return 0;
}

static int put_state(struct store *l, MDB_txn *txn, const struct ll_req *r,
                     const struct state *st)
{
    uint8_t buf[25];
    put_be64(buf, st->generation);
    buf[8] = st->disabled;
    put_be32(buf + 9, st->unsettled);
    put_be64(buf + 13, st->seq);
    put_be32(buf + 21, st->history);
    MDB_val k = { r->ws_len, r->ws }, v = { sizeof buf, buf };
    return mdb_put(txn, store_dbi(l, DB_LEADERS), &k, &v, 0);
}

static int get_desc(struct store *l, MDB_txn *txn, const struct ll_req *r, struct ws_desc *d)
{
    MDB_val k = { r->ws_len, r->ws }, v;
    int rc = mdb_get(txn, store_dbi(l, DB_DESC), &k, &v);
    if (rc == MDB_NOTFOUND) {
        ws_desc_default(d);
        return 0;
    }
    if (rc)
        return rc;
    return ws_desc_decode(d, v.mv_data, v.mv_size) == 0 ? 0 : MDB_CORRUPTED;
}

static int put_desc(struct store *l, MDB_txn *txn, const struct ll_req *r,
                    const struct ws_desc *d)
{
    uint8_t buf[WS_DESC_MAX];
    MDB_val k = { r->ws_len, r->ws }, v = { ws_desc_encode(d, buf), buf };
    return mdb_put(txn, store_dbi(l, DB_DESC), &k, &v, 0);
}

/* ---- claims ---- */

enum { CLAIM_CLAIMED = 1, CLAIM_ABANDONED = 2 };

struct claim {
    uint8_t state;                 /* 0: none */
    uint64_t generation, claimed_ms, seq;
};

static int get_claim(struct store *l, MDB_txn *txn, const struct ll_req *r, MDB_val *key,
                     struct claim *c)
{
    MDB_val v;
    memset(c, 0, sizeof *c);
    int rc = mdb_get(txn, store_dbi(l, DB_CLAIMS), key, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    const uint8_t *p = v.mv_data;
    if (v.mv_size < 25 || (p[0] != CLAIM_CLAIMED && p[0] != CLAIM_ABANDONED))
        return MDB_CORRUPTED;
    (void)r;
    c->state = p[0];
    c->generation = get_be64(p + 1);
    c->claimed_ms = get_be64(p + 9);
    c->seq = get_be64(p + 17);
    return 0;
}

static int put_claim(struct store *l, MDB_txn *txn, MDB_val *key, const struct claim *c,
                     const uint8_t *reason, size_t rlen)
{
    uint8_t buf[27 + LIMIT_INCIDENT];
    buf[0] = c->state;
    put_be64(buf + 1, c->generation);
    put_be64(buf + 9, c->claimed_ms);
    put_be64(buf + 17, c->seq);
    size_t n = 25;
    if (c->state == CLAIM_ABANDONED) {
        if (rlen > LIMIT_INCIDENT)
            rlen = LIMIT_INCIDENT;
        buf[25] = (uint8_t)(rlen >> 8);
        buf[26] = (uint8_t)rlen;
        if (rlen)
            memcpy(buf + 27, reason, rlen);
        n = 27 + rlen;
    }
    MDB_val v = { n, buf };
    return mdb_put(txn, store_dbi(l, DB_CLAIMS), key, &v, 0);
}

/* The claim leaves the pending list (settled). */
static int unpend(struct store *l, MDB_txn *txn, const struct ll_req *r, struct state *st,
                  const struct claim *c)
{
    uint8_t pk[KEY_MAX];
    MDB_val k = { compose_u64(pk, r, c->seq), pk };
    int rc = mdb_del(txn, store_dbi(l, DB_PENDING), &k, NULL);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (st->unsettled)
        st->unsettled--;
    return 0;
}

/* ---- history ---- */

static int put_term(struct store *l, MDB_txn *txn, const struct ll_req *r,
                    const struct ws_term *t)
{
    uint8_t hk[KEY_MAX], buf[WS_TERM_MAX];
    MDB_val k = { compose_u64(hk, r, t->generation), hk }, v = { ws_term_encode(t, buf), buf };
    return mdb_put(txn, store_dbi(l, DB_HIST), &k, &v, 0);
}

/* A cursor on DB_HIST at r's newest term (or at the entry before them:
 * the caller checks the prefix).  0, MDB_NOTFOUND (the cursor is open all
 * the same: close it), or an error with no cursor. */
static int newest_term(struct store *l, MDB_txn *txn, const struct ll_req *r, MDB_cursor **cur,
                       uint8_t *hk, MDB_val *k, MDB_val *v)
{
    int rc = mdb_cursor_open(txn, store_dbi(l, DB_HIST), cur);
    if (rc)
        return rc;
    k->mv_size = compose_u64(hk, r, UINT64_MAX);
    k->mv_data = hk;
    rc = mdb_cursor_get(*cur, k, v, MDB_SET_RANGE);
    rc = rc == 0 ? mdb_cursor_get(*cur, k, v, MDB_PREV)
       : rc == MDB_NOTFOUND ? mdb_cursor_get(*cur, k, v, MDB_LAST) : rc;
    if (rc && rc != MDB_NOTFOUND) {
        mdb_cursor_close(*cur);
        *cur = NULL;
    }
    return rc;
}

/* A new term: the one before it, if its end was never written (its broker
 * stopped), is marked restart; the oldest beyond LIMIT_HISTORY go. */
static int history_add(struct store *l, MDB_txn *txn, const struct ll_req *r,
                       struct state *st, const struct ws_term *t)
{
    uint8_t prefix[KEY_MAX];
    size_t plen = compose(prefix, r->ws, r->ws_len, NULL, 0);
    MDB_cursor *cur;
    uint8_t hk[KEY_MAX];
    MDB_val k, v;
    int rc = newest_term(l, txn, r, &cur, hk, &k, &v);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    if (rc == 0 && has_prefix(&k, prefix, plen) && k.mv_size == plen + 8) {
        struct ws_term last;
        if (ws_term_decode(&last, v.mv_data, v.mv_size) == 0 && last.reason == REASON_NONE) {
            last.reason = REASON_RESTART;
            rc = put_term(l, txn, r, &last);
            if (rc) {
                mdb_cursor_close(cur);
                return rc;
            }
        }
    }
    st->history++;
    while (st->history > LIMIT_HISTORY) {
        k.mv_size = plen;
        k.mv_data = prefix;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        if (rc == MDB_NOTFOUND || (rc == 0 && !has_prefix(&k, prefix, plen)))
            break;
        if (rc || (rc = mdb_cursor_del(cur, 0)))
            break;
        st->history--;
    }
    mdb_cursor_close(cur);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    return put_term(l, txn, r, t);
}

/* ---- writes: the writer thread ---- */

static struct ll_req *req_of(struct store_job *job)
{
    return (struct ll_req *)((char *)job - offsetof(struct ll_req, job));
}

/* commit, claim, abandon: the stored generation, then the mode */
static int writer_ok(struct store *l, MDB_txn *txn, struct ll_req *r, const struct state *st)
{
    if ((st->generation == 0 || st->generation != r->generation) &&
        !(r->op == LL_CLAIM && BROKEN(STALE_WRITE)))
        return COORD_EFENCED;
    struct ws_desc d;
    int rc = get_desc(l, txn, r, &d);
    if (rc)
        return rc;
    return d.mode == WS_MODE_ACTIVE || BROKEN(MODE_IGNORED) ? 0 : COORD_EREAD_ONLY;
}

static int apply_bump(struct store *l, MDB_txn *txn, struct ll_req *r, struct state *st)
{
    if (st->disabled && !r->incident)
        return COORD_EDISABLED;
    int rc = get_desc(l, txn, r, &r->desc);
    if (rc)
        return rc;
    if ((rc = ws_desc_admit(&r->desc, &r->term.protocol)))
        return rc;
    if (!BROKEN(NO_RATCHET) && ws_desc_grant(&r->desc, &r->term.protocol) &&
        (rc = put_desc(l, txn, r, &r->desc)))
        return rc;
    st->generation = st->generation + 1 > r->generation ? st->generation + 1 : r->generation;
    r->out_generation = st->generation;
    r->term.generation = st->generation;
    r->term.mode = r->desc.mode;
    r->term.reason = REASON_NONE;
    r->term.ended_ms = 0;
    if ((rc = history_add(l, txn, r, st, &r->term)))
        return rc;
    return put_state(l, txn, r, st);
}

static int apply_term_end(struct store *l, MDB_txn *txn, struct ll_req *r)
{
    uint8_t hk[KEY_MAX];
    MDB_val k = { compose_u64(hk, r, r->generation), hk }, v;
    int rc = mdb_get(txn, store_dbi(l, DB_HIST), &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;                  /* trimmed away */
    if (rc)
        return rc;
    struct ws_term t;
    if (ws_term_decode(&t, v.mv_data, v.mv_size) < 0)
        return MDB_CORRUPTED;
    t.ended_ms = r->term.ended_ms;
    t.reason = r->term.reason;
    return put_term(l, txn, r, &t);
}

/* What the ledger knows of r's op, once the writer's checks passed: applied
 * (by applied_gen), else its claim (claim.state 0: none).  key is the op's
 * key in DB_OPS and DB_CLAIMS. */
struct op_state {
    uint8_t buf[KEY_MAX];
    MDB_val key;
    bool applied;
    uint64_t applied_gen;
    struct claim claim;
};

static int op_state(struct store *l, MDB_txn *txn, struct ll_req *r, const struct state *st,
                    struct op_state *os)
{
    int rc = writer_ok(l, txn, r, st);
    if (rc)
        return rc;
    if (2 + r->ws_len + r->op_len > KEY_MAX || 2 + r->ws_len + r->key_len > KEY_MAX)
        return COORD_ETOO_LARGE;
    os->key.mv_size = compose(os->buf, r->ws, r->ws_len, r->op_id, r->op_len);
    os->key.mv_data = os->buf;
    MDB_val ov;
    rc = r->op == LL_CLAIM && BROKEN(CLAIM_APPLIED) ? MDB_NOTFOUND
         : mdb_get(txn, store_dbi(l, DB_OPS), &os->key, &ov);
    os->applied = rc == 0;
    os->applied_gen = rc == 0 && ov.mv_size == 8 ? get_be64(ov.mv_data) : 0;
    memset(&os->claim, 0, sizeof os->claim);
    if (rc == 0)
        return 0;
    if (rc != MDB_NOTFOUND)
        return rc;
    return get_claim(l, txn, r, &os->key, &os->claim);
}

static int apply_commit(struct store *l, MDB_txn *txn, struct ll_req *r, struct state *st)
{
    struct op_state os;
    int rc = op_state(l, txn, r, st, &os);
    if (rc)
        return rc;
    if (os.applied) {
        r->duplicate = true;
        r->out_generation = os.applied_gen;
        return 0;
    }
    struct claim *c = &os.claim;
    if (c->state == CLAIM_ABANDONED) {
        r->out_abandoned = true;
        return 0;
    }
    uint8_t g[8];
    put_be64(g, r->generation);
    MDB_val ov = { 8, g };
    if ((rc = mdb_put(txn, store_dbi(l, DB_OPS), &os.key, &ov, 0)))
        return rc;
    if (c->state == CLAIM_CLAIMED) {
        if ((rc = unpend(l, txn, r, st, c)) ||
            (rc = mdb_del(txn, store_dbi(l, DB_CLAIMS), &os.key, NULL)) ||
            (rc = put_state(l, txn, r, st)))
            return rc;
    }
    if (!r->has_key)
        return 0;
    /* the value is stored as generation + bytes, reserved then filled */
    uint8_t kkey[KEY_MAX];
    MDB_val kk = { compose(kkey, r->ws, r->ws_len, r->key, r->key_len), kkey };
    MDB_val kv = { 8 + r->value_len, NULL };
    if ((rc = mdb_put(txn, store_dbi(l, DB_KV), &kk, &kv, MDB_RESERVE)))
        return rc;
    memcpy(kv.mv_data, g, 8);
    if (r->value_len)
        memcpy((uint8_t *)kv.mv_data + 8, r->value, r->value_len);
    return 0;
}

static int apply_claim(struct store *l, MDB_txn *txn, struct ll_req *r, struct state *st)
{
    struct op_state os;
    int rc = op_state(l, txn, r, st, &os);
    if (rc)
        return rc;
    struct ll_claim *out = &r->claim;
    struct claim *c = &os.claim;
    if (os.applied) {
        out->applied = true;
        out->generation = os.applied_gen;
        return 0;
    }
    if (c->state == CLAIM_ABANDONED) {
        out->abandoned = true;
        return 0;
    }
    out->claimed = true;
    if (c->state == CLAIM_CLAIMED && c->generation == r->generation)
        return 0;
    if (c->state == CLAIM_CLAIMED) {
        /* an earlier generation claimed it and never settled: ours now,
         * in its place in the pending list */
        out->reconcile = true;
        out->previous_generation = c->generation;
        out->claimed_ms = c->claimed_ms;
        c->generation = r->generation;
        c->claimed_ms = r->now_ms;
        return put_claim(l, txn, &os.key, c, NULL, 0);
    }
    if (st->unsettled >= LIMIT_CLAIMS)
        return COORD_ELIMIT;
    c->state = CLAIM_CLAIMED;
    c->generation = r->generation;
    c->claimed_ms = r->now_ms;
    c->seq = ++st->seq;
    st->unsettled++;
    uint8_t pk[KEY_MAX];
    MDB_val pkv = { compose_u64(pk, r, c->seq), pk }, pv = { r->op_len, r->op_id };
    if ((rc = put_claim(l, txn, &os.key, c, NULL, 0)) ||
        (rc = mdb_put(txn, store_dbi(l, DB_PENDING), &pkv, &pv, 0)))
        return rc;
    return put_state(l, txn, r, st);
}

static int apply_abandon(struct store *l, MDB_txn *txn, struct ll_req *r, struct state *st)
{
    struct op_state os;
    int rc = op_state(l, txn, r, st, &os);
    if (rc)
        return rc;
    struct claim *c = &os.claim;
    if (os.applied) {
        r->duplicate = true;
        r->out_generation = os.applied_gen;
        return 0;
    }
    if (c->state == CLAIM_ABANDONED)
        return 0;
    if (c->state == CLAIM_CLAIMED &&
        ((rc = unpend(l, txn, r, st, c)) || (rc = put_state(l, txn, r, st))))
        return rc;
    c->state = CLAIM_ABANDONED;
    c->generation = r->generation;
    c->claimed_ms = r->now_ms;
    return put_claim(l, txn, &os.key, c, r->value, r->value_len);
}

static int apply_write(struct store *l, MDB_txn *txn, struct store_job *job)
{
    struct ll_req *r = req_of(job);
    struct state st;
    int rc = get_state(l, txn, r, &st);
    if (rc)
        return rc;
    switch (r->op) {
    case LL_BUMP:
        return apply_bump(l, txn, r, &st);
    case LL_TERM_END:
        return apply_term_end(l, txn, r);
    case LL_SET_DISABLED:
        /* disabling advances the generation: whatever was live is fenced */
        if (r->disable)
            st.generation = st.generation + 1 > r->generation ? st.generation + 1 : r->generation;
        st.disabled = r->disable;
        r->out_generation = st.generation;
        return put_state(l, txn, r, &st);
    case LL_DEFINE:
        if ((rc = get_desc(l, txn, r, &r->desc)))
            return rc;
        if ((rc = ws_desc_define(&r->desc, &r->patch, r->now_ms)))
            return rc;
        return put_desc(l, txn, r, &r->desc);
    case LL_COMMIT:
        return apply_commit(l, txn, r, &st);
    case LL_CLAIM:
        return apply_claim(l, txn, r, &st);
    case LL_ABANDON:
        return apply_abandon(l, txn, r, &st);
    default:
        return MDB_INVALID;
    }
}

static void write_done(struct store_job *job, int status)
{
    struct ll_req *r = req_of(job);
    r->status = status;
    r->why = job->why;
    r->done(r);
}

/* ---- reads: the loop thread, answered from the idle phase ---- */

static int read_kv(struct store *l, MDB_txn *txn, struct ll_req *r)
{
    uint8_t kbuf[KEY_MAX];
    MDB_val v, k = { 0, kbuf };
    if (2 + r->ws_len + r->key_len > sizeof kbuf)
        return MDB_NOTFOUND;
    k.mv_size = compose(kbuf, r->ws, r->ws_len, r->key, r->key_len);
    int rc = mdb_get(txn, store_dbi(l, DB_KV), &k, &v);
    if (rc)
        return rc;
    if (v.mv_size < 8)
        return MDB_CORRUPTED;
    r->out_generation = get_be64(v.mv_data);
    r->out_value_len = v.mv_size - 8;
    r->out_value = malloc(r->out_value_len ? r->out_value_len : 1);
    if (!r->out_value)
        return ENOMEM;
    memcpy(r->out_value, (uint8_t *)v.mv_data + 8, r->out_value_len);
    return 0;
}

/* Walks r's pending list, oldest first, calling each on at most limit
 * entries (true when more remain: truncated).  0 or an MDB error. */
static int walk_pending(struct store *l, MDB_txn *txn, const struct ll_req *r, size_t limit,
                        bool *more, int (*each)(void *ud, const MDB_val *op_id), void *ud)
{
    uint8_t prefix[KEY_MAX];
    size_t plen = compose(prefix, r->ws, r->ws_len, NULL, 0);
    MDB_cursor *cur;
    int rc = mdb_cursor_open(txn, store_dbi(l, DB_PENDING), &cur);
    if (rc)
        return rc;
    MDB_val k = { plen, prefix }, v;
    size_t n = 0;
    *more = false;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (!has_prefix(&k, prefix, plen))
            break;
        if (n++ == limit) {
            *more = true;
            break;
        }
        if ((rc = each(ud, &v)))
            break;
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

struct pending_fill {
    struct store *l;
    MDB_txn *txn;
    const struct ll_req *r;
    size_t n, bytes;
    struct ll_pending *out;        /* second pass: the entries ... */
    uint8_t *ids;                  /* ... and their op ids after them */
};

static int count_pending(void *ud, const MDB_val *op_id)
{
    struct pending_fill *f = ud;
    f->n++;
    f->bytes += op_id->mv_size;
    return 0;
}

static int fill_pending(void *ud, const MDB_val *op_id)
{
    struct pending_fill *f = ud;
    const struct ll_req *r = f->r;
    uint8_t ck[KEY_MAX];
    if (2 + r->ws_len + op_id->mv_size > KEY_MAX)
        return MDB_CORRUPTED;
    MDB_val ckv = { compose(ck, r->ws, r->ws_len, op_id->mv_data, op_id->mv_size), ck };
    struct claim c;
    int rc = get_claim(f->l, f->txn, r, &ckv, &c);
    if (rc)
        return rc;
    struct ll_pending *e = &f->out[f->n++];
    e->op_id = f->ids;
    e->op_len = op_id->mv_size;
    e->generation = c.generation;
    e->claimed_ms = c.claimed_ms;
    memcpy(f->ids, op_id->mv_data, op_id->mv_size);
    f->ids += op_id->mv_size;
    return 0;
}

/* Unsettled claims, oldest first: counted, then the entries and their op
 * ids copied into one allocation. */
static int read_pending(struct store *l, MDB_txn *txn, struct ll_req *r)
{
    size_t limit = BROKEN(PENDING_DROP) ? 0 : r->limit;
    struct pending_fill f = { .l = l, .txn = txn, .r = r };
    int rc = walk_pending(l, txn, r, limit, &r->truncated, count_pending, &f);
    if (rc)
        return rc;
    f.out = malloc(f.n * sizeof *f.out + f.bytes + 1);
    if (!f.out)
        return ENOMEM;
    f.ids = (uint8_t *)(f.out + f.n);
    r->pending = f.out;                /* owned by r from here (ll_req_free) */
    f.n = 0;
    bool more;
    rc = walk_pending(l, txn, r, limit, &more, fill_pending, &f);
    r->n_out = f.n;
    return rc;
}

/* Terms newest first. */
static int read_history(struct store *l, MDB_txn *txn, struct ll_req *r)
{
    uint8_t prefix[KEY_MAX];
    size_t plen = compose(prefix, r->ws, r->ws_len, NULL, 0);
    size_t limit = r->limit > LIMIT_HISTORY ? LIMIT_HISTORY : r->limit;
    r->terms = malloc((limit ? limit : 1) * sizeof *r->terms);
    if (!r->terms)
        return ENOMEM;
    MDB_cursor *cur;
    uint8_t hk[KEY_MAX];
    MDB_val k, v;
    int rc = newest_term(l, txn, r, &cur, hk, &k, &v);
    if (rc && rc != MDB_NOTFOUND)
        return rc;
    size_t n = 0;
    for (; rc == 0 && n < limit; rc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
        if (!has_prefix(&k, prefix, plen))
            break;
        if (ws_term_decode(&r->terms[n], v.mv_data, v.mv_size) < 0) {
            rc = MDB_CORRUPTED;
            break;
        }
        n++;
    }
    mdb_cursor_close(cur);
    r->n_out = n;
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static void read_now(struct lmdb_ll *ll, struct ll_req *r)
{
    MDB_txn *txn;
    int rc = store_read_begin(ll->store, &txn);
    if (rc) {
        r->status = COORD_ESTORAGE;
        return;
    }
    struct state st;
    switch (r->op) {
    case LL_LOAD:
        rc = get_state(ll->store, txn, r, &st);
        r->out_generation = st.generation;
        r->out_disabled = st.disabled;
        if (rc == 0)
            rc = get_desc(ll->store, txn, r, &r->desc);
        break;
    case LL_READ:
        rc = read_kv(ll->store, txn, r);
        break;
    case LL_PENDING:
        rc = read_pending(ll->store, txn, r);
        break;
    case LL_HISTORY:
        rc = read_history(ll->store, txn, r);
        break;
    default:
        rc = MDB_INVALID;
    }
    store_read_end(ll->store, txn);
    r->status = rc == 0 ? 0 : rc == MDB_NOTFOUND ? COORD_ENOT_FOUND : COORD_ESTORAGE;
}

static void on_idle(uv_idle_t *h)
{
    struct lmdb_ll *ll = h->data;
    struct ll_req *r = ll->done_head;
    ll->done_head = ll->done_tail = NULL;
    uv_idle_stop(&ll->idle);
    while (r) {
        struct ll_req *next = r->next_done;
        r->done(r);
        r = next;
    }
}

static void lmdb_submit(void *state, struct ll_req *r)
{
    struct lmdb_ll *ll = state;
    if (r->op == LL_LOAD || r->op == LL_READ || r->op == LL_PENDING || r->op == LL_HISTORY) {
        read_now(ll, r);
        r->next_done = NULL;
        if (ll->done_tail)
            ll->done_tail->next_done = r;
        else
            ll->done_head = r;
        ll->done_tail = r;
        uv_idle_start(&ll->idle, on_idle);
        return;
    }
    r->job.apply = apply_write;
    r->job.done = write_done;
    store_submit(ll->store, &r->job);
}

static int lmdb_open(void **state, struct broker *b, char *err, size_t errsize)
{
    struct lmdb_ll *ll = calloc(1, sizeof *ll);
    if (!ll) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    ll->store = b->store;
    uv_idle_init(b->loop, &ll->idle);
    ll->idle.data = ll;
    *state = ll;
    return 0;
}

static void free_ll(uv_handle_t *h)
{
    free(h->data);
}

static void lmdb_close(void *state)
{
    struct lmdb_ll *ll = state;
    /* what still waits for its answer is refused: the broker is stopping */
    for (struct ll_req *r = ll->done_head; r; r = r->next_done)
        r->status = COORD_ESHUTTING_DOWN;
    on_idle(&ll->idle);
    uv_close((uv_handle_t *)&ll->idle, free_ll);
}

const struct ll_backend ll_backend_lmdb = {
    .name = "local", .open = lmdb_open, .submit = lmdb_submit, .close = lmdb_close,
};
