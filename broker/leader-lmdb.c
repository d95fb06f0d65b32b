/* leader-lmdb.c - the "local" leader ledger: LMDB, on the broker's ledger.
 *
 * Writes (bump, commit, disable/enable) are ledger jobs: the writer thread
 * applies them in its group-committed transaction, each a pure function of
 * the request and the database, and the request is answered once the batch
 * is synced.  Reads (load, read) run in a short read transaction on the
 * loop thread; their answers are deferred to the loop's idle phase, so no
 * callback runs inside ll_submit.
 *
 * Keys: DB_LEADERS  scoped workstream -> generation u64 BE, disabled u8
 *       DB_KV       u16 BE length, scoped workstream, key -> generation, value
 *       DB_OPS      u16 BE length, scoped workstream, op_id -> generation */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "broker.h"
#include "errors.h"
#include "leader-ledger.h"

struct leader_ledger {
    struct ledger *ledger;
    uv_idle_t idle;                /* answers deferred reads */
    struct ll_req *done_head, *done_tail;
};

int ll_req_init(struct ll_req *r, enum ll_op op, const uint8_t *ws, size_t ws_len,
                const uint8_t *op_id, size_t op_len, const uint8_t *key, size_t key_len,
                const uint8_t *value, size_t value_len)
{
    memset(r, 0, sizeof *r);
    r->op = op;
    uint8_t *mem = malloc(ws_len + op_len + key_len + value_len + 1);
    if (!mem)
        return -1;
    r->ws = mem;
    r->ws_len = ws_len;
    memcpy(mem, ws, ws_len);
    mem += ws_len;
    r->op_id = mem;
    r->op_len = op_len;
    if (op_len)
        memcpy(mem, op_id, op_len);
    mem += op_len;
    r->key = mem;
    r->key_len = key_len;
    if (key_len)
        memcpy(mem, key, key_len);
    mem += key_len;
    r->value = mem;
    r->value_len = value_len;
    if (value_len)
        memcpy(mem, value, value_len);
    return 0;
}

void ll_req_free(struct ll_req *r)
{
    free(r->ws);
    free(r->out_value);
    r->ws = r->out_value = NULL;
}

const char *ll_name(const struct leader_ledger *l)
{
    (void)l;
    return "local";
}

/* u16 length, scoped workstream, then name */
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

/* The stored generation and disabled flag (0, 0 when never stored). */
static int get_state(struct ledger *l, MDB_txn *txn, const struct ll_req *r,
                     uint64_t *gen, bool *disabled)
{
    MDB_val k = { r->ws_len, r->ws }, v;
    *gen = 0;
    *disabled = false;
    int rc = mdb_get(txn, ledger_dbi(l, DB_LEADERS), &k, &v);
    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (v.mv_size != 9)
        return MDB_CORRUPTED;
    *gen = get_be64(v.mv_data);
    *disabled = ((uint8_t *)v.mv_data)[8] != 0;
    return 0;
}

static int put_state(struct ledger *l, MDB_txn *txn, const struct ll_req *r,
                     uint64_t gen, bool disabled)
{
    uint8_t buf[9];
    put_be64(buf, gen);
    buf[8] = disabled;
    MDB_val k = { r->ws_len, r->ws }, v = { 9, buf };
    return mdb_put(txn, ledger_dbi(l, DB_LEADERS), &k, &v, 0);
}

/* ---- writes: the writer thread ---- */

static int apply_write(struct ledger *l, MDB_txn *txn, struct ledger_job *job)
{
    struct ll_req *r = (struct ll_req *)((char *)job - offsetof(struct ll_req, job));
    uint64_t gen;
    bool disabled;
    int rc = get_state(l, txn, r, &gen, &disabled);
    if (rc)
        return rc;
    switch (r->op) {
    case LL_BUMP:
        if (disabled)
            return COORD_EDISABLED;
        gen = gen + 1 > r->generation ? gen + 1 : r->generation;
        r->out_generation = gen;
        return put_state(l, txn, r, gen, false);
    case LL_SET_DISABLED:
        /* disabling advances the generation: whatever was live is fenced */
        if (r->disable)
            gen = gen + 1 > r->generation ? gen + 1 : r->generation;
        r->out_generation = gen;
        return put_state(l, txn, r, gen, r->disable);
    case LL_COMMIT: {
        if (gen == 0 || gen != r->generation)
            return COORD_EFENCED;
        uint8_t okey[2 + 511];
        if (2 + r->ws_len + r->op_len > sizeof okey || 2 + r->ws_len + r->key_len > sizeof okey)
            return COORD_ETOO_LARGE;
        MDB_val ok = { compose(okey, r->ws, r->ws_len, r->op_id, r->op_len), okey }, ov;
        rc = mdb_get(txn, ledger_dbi(l, DB_OPS), &ok, &ov);
        if (rc == 0) {
            r->duplicate = true;
            r->out_generation = ov.mv_size == 8 ? get_be64(ov.mv_data) : 0;
            return 0;
        }
        if (rc != MDB_NOTFOUND)
            return rc;
        uint8_t g[8];
        put_be64(g, r->generation);
        ov.mv_size = 8;
        ov.mv_data = g;
        if ((rc = mdb_put(txn, ledger_dbi(l, DB_OPS), &ok, &ov, 0)))
            return rc;
        /* the value is stored as generation + bytes, reserved then filled */
        uint8_t kkey[2 + 511];
        MDB_val kk = { compose(kkey, r->ws, r->ws_len, r->key, r->key_len), kkey };
        MDB_val kv = { 8 + r->value_len, NULL };
        if ((rc = mdb_put(txn, ledger_dbi(l, DB_KV), &kk, &kv, MDB_RESERVE)))
            return rc;
        memcpy(kv.mv_data, g, 8);
        if (r->value_len)
            memcpy((uint8_t *)kv.mv_data + 8, r->value, r->value_len);
        return 0;
    }
    default:
        return MDB_INVALID;
    }
}

static void write_done(struct ledger_job *job, int status)
{
    struct ll_req *r = (struct ll_req *)((char *)job - offsetof(struct ll_req, job));
    r->status = status;
    r->why = job->why;
    r->done(r);
}

/* ---- reads: the loop thread, answered from the idle phase ---- */

static void read_now(struct leader_ledger *ll, struct ll_req *r)
{
    MDB_txn *txn;
    int rc = ledger_read_begin(ll->ledger, &txn);
    if (rc) {
        r->status = COORD_ESTORAGE;
        return;
    }
    if (r->op == LL_LOAD) {
        rc = get_state(ll->ledger, txn, r, &r->out_generation, &r->out_disabled);
    } else {
        uint8_t kbuf[2 + 511];
        MDB_val v, k = { 0, kbuf };
        if (2 + r->ws_len + r->key_len > sizeof kbuf) {
            rc = MDB_NOTFOUND;
        } else {
            k.mv_size = compose(kbuf, r->ws, r->ws_len, r->key, r->key_len);
            rc = mdb_get(txn, ledger_dbi(ll->ledger, DB_KV), &k, &v);
        }
        if (rc == 0 && v.mv_size >= 8) {
            r->out_generation = get_be64(v.mv_data);
            r->out_value_len = v.mv_size - 8;
            r->out_value = malloc(r->out_value_len ? r->out_value_len : 1);
            if (r->out_value)
                memcpy(r->out_value, (uint8_t *)v.mv_data + 8, r->out_value_len);
            else
                rc = ENOMEM;
        } else if (rc == 0) {
            rc = MDB_CORRUPTED;
        }
    }
    ledger_read_end(ll->ledger, txn);
    r->status = rc == 0 ? 0 : rc == MDB_NOTFOUND ? COORD_ENOT_FOUND : COORD_ESTORAGE;
}

static void on_idle(uv_idle_t *h)
{
    struct leader_ledger *ll = h->data;
    struct ll_req *r = ll->done_head;
    ll->done_head = ll->done_tail = NULL;
    uv_idle_stop(&ll->idle);
    while (r) {
        struct ll_req *next = r->next_done;
        r->done(r);
        r = next;
    }
}

void ll_submit(struct leader_ledger *ll, struct ll_req *r)
{
    r->status = 0;
    r->why = NULL;
    if (r->op == LL_LOAD || r->op == LL_READ) {
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
    ledger_submit(ll->ledger, &r->job);
}

int ll_open(struct leader_ledger **out, const char *name, struct ledger *ledger,
            uv_loop_t *loop, char *err, size_t errsize)
{
    if (strcmp(name, "local") != 0) {
        snprintf(err, errsize, "unknown leader ledger \"%s\" (this broker has: local)", name);
        return -1;
    }
    struct leader_ledger *ll = calloc(1, sizeof *ll);
    if (!ll) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    ll->ledger = ledger;
    uv_idle_init(loop, &ll->idle);
    ll->idle.data = ll;
    *out = ll;
    return 0;
}

static void free_ll(uv_handle_t *h)
{
    free(h->data);
}

void ll_close(struct leader_ledger *ll)
{
    if (!ll)
        return;
    /* what still waits for its answer is refused: the broker is stopping */
    for (struct ll_req *r = ll->done_head; r; r = r->next_done)
        r->status = COORD_ESHUTTING_DOWN;
    on_idle(&ll->idle);
    uv_close((uv_handle_t *)&ll->idle, free_ll);
}
