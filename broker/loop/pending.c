/* pending.c - requests of a connection that wait for their reply, and the
 * generic cancel that every waiting op plugs into.  Waiting requests are
 * indexed by (connection, rid): finding one (cancel, a reused rid) costs
 * the same with one request waiting or max_pending. */
#include <string.h>
#include "broker.h"
#include "budget.h"
#include "errors.h"

/* The index key of (c, rid), padding zeroed: the table hashes its bytes. */
static void pending_key_set(struct pending_key *k, const struct conn *c, uint64_t rid)
{
    memset(k, 0, sizeof *k);
    k->conn = c;
    k->rid = rid;
}

int pending_check(struct conn *c, uint64_t rid)
{
    if (budget_full()) {
        budget_refuse(c, rid);
        return -1;
    }
    if (c->npending >= c->b->opt.max_pending) {
        c->b->stats.pending_limit_hits++;
        conn_reply_error(c, rid, COORD_ELIMIT,
                         "too many requests waiting on this connection");
        return -1;
    }
    if (pending_find(c, rid)) {
        c->b->stats.bad_requests++;
        conn_reply_error(c, rid, COORD_EBAD_REQUEST,
                         "rid: already used by a waiting request");
        return -1;
    }
    return 0;
}

int pending_start(struct conn *c, struct pending *p, uint64_t rid, int op)
{
    if (pending_check(c, rid) < 0)
        return -1;
    p->rid = rid;
    p->conn = c;
    p->op = op;
    pending_key_set(&p->hkey, c, rid);
    p->by_rid.key = (const uint8_t *)&p->hkey;
    p->by_rid.keylen = sizeof p->hkey;
    if (hashmap_put(&c->b->pending, &p->by_rid) < 0) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return -1;
    }
    list_append(&c->pending, &p->link);
    c->npending++;
    budget_take();
    return 0;
}

void pending_finish(struct pending *p)
{
    if (!list_linked(&p->link))
        return;
    list_del(&p->link);
    hashmap_del(&p->conn->b->pending, &p->by_rid);
    p->conn->npending--;
    budget_give();
}

struct pending *pending_find(struct conn *c, uint64_t rid)
{
    if (c->npending == 0)
        return NULL;
    struct pending_key k;
    pending_key_set(&k, c, rid);
    struct hentry *e = hashmap_get(&c->b->pending, &k, sizeof k);
    return e ? list_entry(e, struct pending, by_rid) : NULL;
}

void pending_abort_all(struct conn *c, int code)
{
    while (!list_empty(&c->pending)) {
        struct pending *p = list_entry(c->pending.next, struct pending, link);
        if (code)
            p->abort(p, code);
        else
            p->drop(p);
        /* a table that forgot pending_finish must not loop us forever
         * (p itself may be freed by now: compare, don't dereference) */
        if (c->pending.next == &p->link) {
            list_del(&p->link);
            c->npending--;
            budget_give();
        }
    }
}
