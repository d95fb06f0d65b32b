/* workstreams.c - the workstreams in memory and the requests that run on
 * them: the cache (a workstream is kept while it is used: led, campaigned
 * for, waited on or written), its loading from the leader ledger, the
 * ledger calls that answer a client (ll_call), and the one way a request
 * reaches the ledger (leaders_submit).
 *
 * The first request on a workstream loads its stored state (generation,
 * disabled flag, descriptor) from the ledger and waits for it, with any
 * request that comes meanwhile; then they run in order.  Terms and
 * campaigns (leaders.c) and the outbox and descriptor ops (leader-*.c) are
 * requests of this kind. */
#include <stdlib.h>
#include <string.h>
#include "coord-limits.h"
#include "errors.h"
#include "leaders-int.h"
#include "skey.h"

static struct {
    struct leader_ledger *ledger;
    struct hashmap streams;
    bool stopping;
    /* what is submitted once the ledger is closed: refused from the loop,
     * never inside leaders_submit (leader-ledger.h's rule) */
    uv_idle_t idle;
    bool idle_open, answering;
    struct ll_req *refused_head, *refused_tail;
} W;

static void answer_refused(void)
{
    W.answering = true;
    while (W.refused_head) {
        struct ll_req *r = W.refused_head;
        W.refused_head = r->next_done;
        if (!W.refused_head)
            W.refused_tail = NULL;
        r->done(r);                    /* may submit again: answered in turn */
    }
    W.answering = false;
}

static void on_idle(uv_idle_t *h)
{
    uv_idle_stop(h);
    answer_refused();
}

/* the loop's last turn: what is left is answered now */
static void on_idle_closed(uv_handle_t *h)
{
    (void)h;
    W.idle_open = false;
    answer_refused();
}

int workstreams_init(struct broker *b, char *err, size_t errsize)
{
    hashmap_init(&W.streams);
    uv_idle_init(b->loop, &W.idle);
    W.idle_open = true;
    return ll_open(&W.ledger, b, err, errsize);
}

void workstreams_stop(void)
{
    W.stopping = true;
    ll_close(W.ledger);
    W.ledger = NULL;
    if (W.idle_open)
        uv_close((uv_handle_t *)&W.idle, on_idle_closed);
}

bool workstreams_stopping(void) { return W.stopping; }

struct leader_ledger *workstreams_ledger(void) { return W.ledger; }

size_t workstreams_count(void) { return W.streams.count; }

struct workstream *workstreams_find(const uint8_t *key, size_t len)
{
    struct hentry *h = hashmap_get(&W.streams, key, len);
    return h ? (struct workstream *)h : NULL;
}

const char *leaders_ledger_name(void) { return ll_name(W.ledger); }

void leaders_submit(struct ll_req *r)
{
    if (W.ledger) {
        ll_submit(W.ledger, r);
        return;
    }
    r->status = COORD_ESHUTTING_DOWN;
    r->next_done = NULL;
    if (W.refused_tail)
        W.refused_tail->next_done = r;
    else
        W.refused_head = r;
    W.refused_tail = r;
    if (W.answering)
        return;                        /* the drain under way answers it */
    if (!W.idle_open)
        answer_refused();              /* past the loop's last turn */
    else if (!uv_is_closing((uv_handle_t *)&W.idle))
        uv_idle_start(&W.idle, on_idle);
    /* else the close callback answers it */
}

const uint8_t *leaders_ws_name(const struct workstream *ws, size_t *len)
{
    return skey_name(ws->skey, ws->h.keylen, len);
}

/* A workstream nobody leads, campaigns for, waits on or writes is dropped
 * from memory: its stored state is loaded again when it is next used, so
 * looking at many workstreams (leader.info) leaves nothing behind. */
void workstreams_maybe_free(struct workstream *ws)
{
    if (ws->refs || ws->term || ws->live_generation || !ws->loaded)
        return;
    deadline_cancel(&ws->hold);
    hashmap_del(&W.streams, &ws->h);
    free(ws->skey);
    free(ws);
}


void leaders_ws_unref(struct workstream *ws)
{
    ws->refs--;
    workstreams_maybe_free(ws);
}

/* The stored state is in: run what waited for it.  A load that failed
 * answers them and forgets the workstream (the next request tries again). */
static void load_done(struct ll_req *req)
{
    struct workstream *ws = req->ud;
    int status = req->status;
    const char *why = req->why;        /* static text, outlives req */
    ws->loaded = true;
    ws->generation = req->out_generation;
    ws->disabled = req->out_disabled;
    ws->desc = req->desc;
    ll_req_free(&ws->load);
    ws->refs++;
    while (!list_empty(&ws->waiting)) {
        struct lreq *q = list_entry(list_shift(&ws->waiting), struct lreq, link);
        struct conn *c = conn_job_conn(&q->job);
        if (c && status)
            conn_reply_error(c, q->job.rid, status, why ? why
                             : status == COORD_ESTORAGE ? "cannot read the ledger" : NULL);
        else if (q->internal && status)
            cfg_part_done(q->cfg, CFG_LOAD, status, why ? why : "cannot read the ledger");
        else if (c || q->internal)
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
    workstreams_maybe_free(ws);
}

size_t leaders_ws_key(struct conn *c, uint64_t rid, coord_bytes name, uint8_t *key)
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

void leaders_with_workstream(struct conn *c, uint64_t rid, coord_bytes name, struct lreq *q)
{
    uint8_t key[SKEY_HEADER + LIMIT_WORKSTREAM];
    size_t klen = leaders_ws_key(c, rid, name, key);
    if (!klen)
        return;
    leaders_with_key(c, rid, key, klen, q);
}

/* c NULL: the broker's own request (q->internal). */
void leaders_with_key(struct conn *c, uint64_t rid, const uint8_t *key, size_t klen,
                     struct lreq *q)
{
    struct hentry *h = hashmap_get(&W.streams, key, klen);
    struct workstream *ws = h ? (struct workstream *)h : NULL;
    if (ws && ws->loaded) {
        q->job.conn = c;
        q->job.rid = rid;
        ws->refs++;
        q->run(q, ws);
        leaders_ws_unref(ws);
        return;
    }
    /* it waits: its own copy, with its bytes */
    struct lreq *w = malloc(sizeof *w + q->op_len + q->key_len + q->value_len + q->text_len +
                            q->caps_len);
    bool load = false;
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
            ws_desc_default(&ws->desc);
            if (hashmap_put(&W.streams, &ws->h) < 0 ||
                ll_req_init(&ws->load, LL_LOAD, sk, klen, NULL, 0, NULL, 0, NULL, 0) < 0) {
                hashmap_del(&W.streams, &ws->h);
                free(sk);
                free(ws);
                ws = NULL;
            } else {
                ws->load.ud = ws;
                ws->load.done = load_done;
                load = true;
            }
        }
    }
    if (!ws || !w) {
        free(w);
        if (c)
            conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        else
            cfg_part_done(q->cfg, CFG_LOAD, COORD_ELIMIT, "out of memory");
        return;
    }
    *w = *q;
    uint8_t *bytes = (uint8_t *)(w + 1);
    const uint8_t *src[5] = { q->op_id, q->key, q->value, q->text, q->caps };
    size_t lens[5] = { q->op_len, q->key_len, q->value_len, q->text_len, q->caps_len };
    const uint8_t **dst[5] = { &w->op_id, &w->key, &w->value, &w->text, &w->caps };
    for (int i = 0; i < 5; i++) {
        if (lens[i])
            memcpy(bytes, src[i], lens[i]);
        *dst[i] = src[i] ? bytes : NULL;
        bytes += lens[i];
    }
    conn_job_start(&w->job, c, rid);
    list_append(&ws->waiting, &w->link);
    /* the load goes once its first waiter is queued */
    if (load)
        leaders_submit(&ws->load);
}


struct ll_call *ll_call_new(struct conn *c, uint64_t rid, struct workstream *ws,
                            enum ll_op op, const uint8_t *skey, size_t sklen,
                            const struct lreq *q, void (*done)(struct ll_req *))
{
    struct ll_call *call = calloc(1, sizeof *call);
    if (!call || ll_req_init(&call->req, op, skey, sklen, q ? q->op_id : NULL,
                             q ? q->op_len : 0, q ? q->key : NULL, q ? q->key_len : 0,
                             q ? q->value : NULL, q ? q->value_len : 0) < 0) {
        free(call);
        if (c)
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

struct conn *ll_call_answer(struct ll_call *call, const char *why)
{
    struct conn *c = conn_job_conn(&call->job);
    if (c && call->req.status) {
        conn_reply_error(c, call->job.rid, call->req.status, why);
        return NULL;
    }
    return c;
}

void ll_call_end(struct ll_call *call)
{
    conn_job_end(&call->job);
    if (call->ws)
        leaders_ws_unref(call->ws);
    ll_req_free(&call->req);
    free(call);
}
