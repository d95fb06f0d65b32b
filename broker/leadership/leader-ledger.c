/* leader-ledger.c - the leader ledger's generic part: requests (their
 * copies and what they own) and the choice of backend by name.
 *
 * A backend is a struct ll_backend: open, submit, close, and its name as
 * descriptors report it.  "local" is LMDB (leader-lmdb.c), "etcd" a shared
 * cluster (leader-etcd.c).  A backend
 * answers through req->done on the loop thread, never inside submit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "broker.h"
#include "leader-ledger.h"

struct leader_ledger {
    const struct ll_backend *be;
    void *state;
};

static const struct ll_backend *const backends[] = { &ll_backend_lmdb, &ll_backend_etcd };

int ll_req_init(struct ll_req *r, enum ll_op op, const uint8_t *ws, size_t ws_len,
                const uint8_t *op_id, size_t op_len, const uint8_t *key, size_t key_len,
                const uint8_t *value, size_t value_len)
{
    memset(r, 0, sizeof *r);
    r->op = op;
    uint8_t *mem = malloc(ws_len + op_len + key_len + value_len + 1);
    if (!mem)
        return -1;
    const uint8_t *src[4] = { ws, op_id, key, value };
    size_t lens[4] = { ws_len, op_len, key_len, value_len };
    uint8_t **dst[4] = { &r->ws, &r->op_id, &r->key, &r->value };
    size_t *dlen[4] = { &r->ws_len, &r->op_len, &r->key_len, &r->value_len };
    for (int i = 0; i < 4; i++) {
        *dst[i] = mem;
        *dlen[i] = lens[i];
        if (lens[i])
            memcpy(mem, src[i], lens[i]);
        mem += lens[i];
    }
    return 0;
}

void ll_req_free(struct ll_req *r)
{
    free(r->ws);
    free(r->out_value);
    free(r->pending);
    free(r->terms);
    r->ws = r->out_value = NULL;
    r->pending = NULL;
    r->terms = NULL;
}

int ll_open(struct leader_ledger **out, struct broker *b, char *err, size_t errsize)
{
    const char *name = b->opt.leader_ledger;
    const struct ll_backend *be = NULL;
    char have[128] = "";
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++) {
        if (strcmp(backends[i]->name, name) == 0)
            be = backends[i];
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", i ? ", " : "",
                 backends[i]->name);
    }
    if (!be) {
        snprintf(err, errsize, "unknown leader ledger '%s' (this broker has: %s)", name, have);
        return -1;
    }
    struct leader_ledger *l = calloc(1, sizeof *l);
    if (!l) {
        snprintf(err, errsize, "out of memory");
        return -1;
    }
    l->be = be;
    if (be->open(&l->state, b, err, errsize) < 0) {
        free(l);
        return -1;
    }
    *out = l;
    return 0;
}

void ll_submit(struct leader_ledger *l, struct ll_req *r)
{
    r->status = 0;
    r->why = NULL;
    l->be->submit(l->state, r);
}

void ll_cancel(struct leader_ledger *l, struct ll_req *r)
{
    if (l->be->cancel)
        l->be->cancel(l->state, r);
}

bool ll_reachable(const struct leader_ledger *l)
{
    return !l->be->reachable || l->be->reachable(l->state);
}

void ll_stats(const struct leader_ledger *l, struct coord_enc *e)
{
    if (l->be->stats)
        l->be->stats(l->state, e);
}

const char *ll_name(const struct leader_ledger *l)
{
    return l->be->name;
}

bool ll_term_end_first(const struct leader_ledger *l)
{
    return l->be->term_end_first;
}

void ll_close(struct leader_ledger *l)
{
    if (!l)
        return;
    l->be->close(l->state);
    free(l);
}
