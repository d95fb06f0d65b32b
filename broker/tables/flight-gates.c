/* flight-gates.c - the single-flight kill switch and backoffs (see
 * flight-gates.h), and their ops: flight.disable, flight.enable,
 * flight.disabled.
 *
 * Disabled prefixes are few (an operator's switch): they live in a list,
 * stored in the ledger's DB_FLIGHT_OFF, loaded at start; a join looks at
 * them only when there are any.  Backoffs are keyed by the flight's scoped
 * key and end on the broker's deadline heap; both are bounded (a full
 * table refuses more, and a backoff is then simply not kept). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "channels.h"
#include "coord-limits.h"
#include "deadline.h"
#include "errors.h"
#include "flight-gates.h"
#include "hashmap.h"
#include "store.h"
#include "ops.h"
#include "records.h"
#include "skey.h"

struct off {
    struct list link;
    uint8_t *skey;                 /* scope + prefix */
    size_t len;
};

struct backoff {
    struct hentry h;               /* keyed by the flight's scoped key */
    struct deadline end;
    uint8_t *code, *message;       /* one allocation after the key */
    size_t code_len, message_len;
    uint8_t mem[];
};

static struct {
    struct broker *b;
    struct list offs;
    unsigned noffs;
    struct hashmap backoffs;
    uint64_t backoffs_started, backoff_answers, bypassed;
} G;

int gates_init(struct broker *b, char *err, size_t errsize)
{
    G.b = b;
    list_init(&G.offs);
    hashmap_init(&G.backoffs);
    MDB_txn *txn;
    MDB_cursor *cur;
    if (store_read_begin(b->store, &txn) ||
        mdb_cursor_open(txn, store_dbi(b->store, DB_FLIGHT_OFF), &cur)) {
        snprintf(err, errsize, "cannot read the single-flight switches");
        return -1;
    }
    MDB_val k, v;
    int rc;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        struct off *o = calloc(1, sizeof *o);
        if (!o || !(o->skey = malloc(k.mv_size ? k.mv_size : 1))) {
            free(o);
            break;
        }
        memcpy(o->skey, k.mv_data, k.mv_size);
        o->len = k.mv_size;
        list_append(&G.offs, &o->link);
        G.noffs++;
    }
    mdb_cursor_close(cur);
    store_read_end(b->store, txn);
    return 0;
}

void gates_stats(coord_enc *e)
{
    coord_enc_kv_uint(e, "flights_disabled_prefixes", G.noffs);
    coord_enc_kv_uint(e, "flights_bypassed", G.bypassed);
    coord_enc_kv_uint(e, "backoffs", G.backoffs.count);
    coord_enc_kv_uint(e, "backoffs_started", G.backoffs_started);
    coord_enc_kv_uint(e, "backoff_answers", G.backoff_answers);
}

bool gates_bypass(const uint8_t *skey, size_t sklen)
{
    if (!G.noffs)
        return false;
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &G.offs) {
        struct off *o = list_entry(pos, struct off, link);
        /* same scope, and the prefix's name part prefixes the key's */
        if (o->len <= sklen && memcmp(o->skey, skey, o->len) == 0 &&
            skey_scope_len(o->skey) == skey_scope_len(skey)) {
            G.bypassed++;
            return true;
        }
    }
    return false;
}

/* ---- backoffs ---- */

static void backoff_free(struct backoff *bo)
{
    deadline_cancel(&bo->end);
    hashmap_del(&G.backoffs, &bo->h);
    free(bo);
}

static void on_backoff_end(struct deadline *d)
{
    backoff_free(list_entry(d, struct backoff, end));
}

bool gates_backoff(const uint8_t *skey, size_t sklen, struct backoff_view *out)
{
    if (!G.backoffs.count)
        return false;
    struct hentry *h = hashmap_get(&G.backoffs, skey, sklen);
    if (!h)
        return false;
    struct backoff *bo = (struct backoff *)h;
    uint64_t now = broker_now_ms(G.b);
    if (bo->end.at <= now) {               /* its timer has not run yet */
        backoff_free(bo);
        return false;
    }
    out->left_ms = bo->end.at - now;
    out->code = bo->code;
    out->code_len = bo->code_len;
    out->message = bo->message;
    out->message_len = bo->message_len;
    G.backoff_answers++;
    return true;
}

void gates_backoff_start(const uint8_t *skey, size_t sklen, uint64_t ms,
                         const uint8_t *code, size_t code_len,
                         const uint8_t *message, size_t message_len)
{
    struct hentry *h = hashmap_get(&G.backoffs, skey, sklen);
    if (h)
        backoff_free((struct backoff *)h);
    if (G.backoffs.count >= LIMIT_BACKOFFS)
        return;
    struct backoff *bo = calloc(1, sizeof *bo + sklen + code_len + message_len);
    if (!bo)
        return;
    memcpy(bo->mem, skey, sklen);
    bo->code = bo->mem + sklen;
    memcpy(bo->code, code, code_len);
    bo->code_len = code_len;
    bo->message = bo->code + code_len;
    memcpy(bo->message, message, message_len);
    bo->message_len = message_len;
    bo->h.key = bo->mem;
    bo->h.keylen = sklen;
    if (hashmap_put(&G.backoffs, &bo->h) < 0) {
        free(bo);
        return;
    }
    G.backoffs_started++;
    deadline_set(&bo->end, broker_now_ms(G.b) + ms, on_backoff_end);
}

uint64_t gates_backoff_purge(const uint8_t *sprefix, size_t plen)
{
    uint64_t n = 0;
    for (size_t i = 0; G.backoffs.count && i < G.backoffs.nbuckets; i++) {
        struct hentry *e = G.backoffs.buckets[i];
        while (e) {
            struct hentry *next = e->next;   /* the delete unlinks e only */
            if (e->keylen >= plen && memcmp(e->key, sprefix, plen) == 0) {
                backoff_free((struct backoff *)e);
                n++;
            }
            e = next;
        }
    }
    return n;
}

/* ---- the kill switch ---- */

struct switch_job {
    struct store_job job;
    struct conn_job client;
    bool disable;
    size_t len;
    uint8_t skey[];
};

static int apply_switch(struct store *l, MDB_txn *txn, struct store_job *job)
{
    struct switch_job *sj = (struct switch_job *)job;
    MDB_val k = { sj->len, sj->skey }, v = { 0, "" };
    if (sj->disable)
        return mdb_put(txn, store_dbi(l, DB_FLIGHT_OFF), &k, &v, 0);
    int rc = mdb_del(txn, store_dbi(l, DB_FLIGHT_OFF), &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

static struct off *off_find(const uint8_t *skey, size_t len)
{
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &G.offs) {
        struct off *o = list_entry(pos, struct off, link);
        if (skey_equal(o->skey, o->len, skey, len))
            return o;
    }
    return NULL;
}

static void announce(const uint8_t *skey, size_t len, bool disable)
{
    if (!channels_watched(CH_FLIGHTS))
        return;
    size_t plen;
    const uint8_t *prefix = skey_name(skey, len, &plen);
    coord_enc e;
    channels_event_begin(CH_FLIGHTS, &e, disable ? "disabled" : "enabled");
    coord_enc_kv_name(&e, "prefix", prefix, plen);
    coord_enc_kv_uint(&e, "at_ms", wall_ms());
    channels_event_end(CH_FLIGHTS, &e, skey_scope(skey), skey_scope_len(skey));
}

static void switch_done(struct store_job *job, int status)
{
    struct switch_job *sj = (struct switch_job *)job;
    struct conn *c = conn_job_conn(&sj->client);
    if (status == 0) {
        /* in memory once stored: a restart sees what the join saw */
        struct off *o = off_find(sj->skey, sj->len);
        if (sj->disable && !o && (o = calloc(1, sizeof *o)) &&
            (o->skey = malloc(sj->len))) {
            memcpy(o->skey, sj->skey, sj->len);
            o->len = sj->len;
            list_append(&G.offs, &o->link);
            G.noffs++;
        } else if (sj->disable && o && !o->skey) {
            free(o);
        } else if (!sj->disable && o) {
            list_del(&o->link);
            G.noffs--;
            free(o->skey);
            free(o);
        }
        announce(sj->skey, sj->len, sj->disable);
    }
    if (c && status)
        conn_reply_error(c, sj->client.rid, status, store_job_message(job, NULL));
    else if (c)
        conn_reply_ok(c, sj->client.rid);
    conn_job_end(&sj->client);
    free(sj);
}

static void flight_switch(struct conn *c, uint64_t rid, coord_fields *f, bool disable)
{
    coord_bytes prefix = { NULL, 0 };
    coord_field_str(f, "prefix", true, &prefix);
    if (!fields_ok(c, rid, f) || !name_size_ok(c, rid, "prefix", prefix.len))
        return;
    if (disable && G.noffs >= LIMIT_DISABLED_PREFIXES) {
        char msg[96];
        snprintf(msg, sizeof msg, "at most %u disabled prefixes", LIMIT_DISABLED_PREFIXES);
        conn_reply_error(c, rid, COORD_ELIMIT, msg);
        return;
    }
    size_t len = skey_size(c->scope_len, prefix.len);
    struct switch_job *sj = calloc(1, sizeof *sj + len);
    if (!sj) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    sj->len = skey_write(sj->skey, c->scope, c->scope_len, prefix.ptr, prefix.len);
    sj->disable = disable;
    conn_job_start(&sj->client, c, rid);
    sj->job.apply = apply_switch;
    sj->job.done = switch_done;
    store_submit(c->b->store, &sj->job);
}

void op_flight_disable(struct conn *c, uint64_t rid, coord_fields *f)
{
    flight_switch(c, rid, f, true);
}

void op_flight_enable(struct conn *c, uint64_t rid, coord_fields *f)
{
    flight_switch(c, rid, f, false);
}

void op_flight_disabled(struct conn *c, uint64_t rid, coord_fields *f)
{
    (void)f;
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_key(&e, "prefixes");
    coord_enc_array_begin(&e);
    bool cut = false;
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &G.offs) {
        struct off *o = list_entry(pos, struct off, link);
        if (!skey_in_scope(o->skey, c->scope, c->scope_len))
            continue;
        size_t plen;
        const uint8_t *p = skey_name(o->skey, o->len, &plen);
        coord_enc_mark m = coord_enc_mark_here(&e);
        coord_enc_name(&e, p, plen);
        if ((cut = list_entry_overflows(c, &e, &m)))
            break;
    }
    coord_enc_array_end(&e);
    if (cut)
        coord_enc_kv_bool(&e, "truncated", true);
    conn_enc_finish(c, &e);
}
