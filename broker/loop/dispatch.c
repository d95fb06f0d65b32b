/* dispatch.c - from a frame to an op handler: validation, the handshake
 * rule, rid and op, the op table, and the ops that belong to no table
 * (hello, ping, cancel). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "broker.h"
#include "ids.h"
#include "coord-version.h"
#include "errors.h"
#include "coord-limits.h"
#include "coord-ops.h"
#include "ops.h"
#include "redact.h"

static void op_hello(struct conn *c, uint64_t rid, coord_fields *f);
static void dispatch_request(struct conn *c, coord_fields *f);
static void op_ping(struct conn *c, uint64_t rid, coord_fields *f);
static void op_cancel(struct conn *c, uint64_t rid, coord_fields *f);
static void op_stats(struct conn *c, uint64_t rid, coord_fields *f);

/* The handler of every op of COORD_OPS (protocol/coord-ops.h), by its enum. */
static const op_fn handlers[COORD_OP_COUNT] = {
    [COORD_OP_HELLO] = op_hello,
    [COORD_OP_PING] = op_ping,
    [COORD_OP_CANCEL] = op_cancel,
    [COORD_OP_STATS] = op_stats,
#define OPS_ROW(op, fn) [COORD_OP_##op] = fn,
    TABLE_OPS(OPS_ROW)
#undef OPS_ROW
};

_Static_assert(COORD_OP_COUNT <= 64, "requests_by_op is too small");

/* Ops by name, open-addressed in OP_SLOTS slots (a few dozen ops: most
 * sit alone in theirs), built at the first request: an op costs one short
 * hash and one compare, not a walk over the op table. */
#define OP_SLOTS 128
static int8_t op_slots[OP_SLOTS];
static uint8_t op_len[COORD_OP_COUNT];    /* wire names' lengths */
static bool op_slots_built;

static unsigned op_slot(const char *name, size_t len)
{
    const uint8_t *p = (const uint8_t *)name;
    return len ? (unsigned)(len * 31 + p[0] * 7 + p[len / 2] * 3 + p[len - 1]) % OP_SLOTS : 0;
}

static void op_slots_build(void)
{
    _Static_assert(COORD_OP_COUNT < OP_SLOTS / 2 && COORD_OP_COUNT <= 127, "OP_SLOTS");
    memset(op_slots, -1, sizeof op_slots);
    for (int i = 0; i < COORD_OP_COUNT; i++) {
        const char *n = coord_op_name((enum coord_op)i);
        if (!handlers[i] || !n)
            continue;
        op_len[i] = (uint8_t)strlen(n);
        unsigned s = op_slot(n, op_len[i]);
        while (op_slots[s] >= 0)
            s = (s + 1) % OP_SLOTS;
        op_slots[s] = (int8_t)i;
    }
    op_slots_built = true;
}

/* Op names are 4 to 24 bytes: from 8 to 16, two overlapping loads of
 * eight bytes a side, not a call to memcmp. */
static inline bool name_eq(const char *a, const char *b, size_t n)
{
    if (n >= 8 && n <= 16) {
        uint64_t w, x, y, z;
        memcpy(&w, a, 8);
        memcpy(&x, b, 8);
        memcpy(&y, a + n - 8, 8);
        memcpy(&z, b + n - 8, 8);
        return w == x && y == z;
    }
    return memcmp(a, b, n) == 0;
}

int dispatch_op_index(const char *name, size_t len)
{
    if (!op_slots_built)
        op_slots_build();
    for (unsigned s = op_slot(name, len); op_slots[s] >= 0; s = (s + 1) % OP_SLOTS) {
        int i = op_slots[s];
        if (op_len[i] == len && name_eq(coord_op_name((enum coord_op)i), name, len))
            return i;
    }
    return -1;
}

/* rid and op, the two fields of every request, in one pass over the
 * index's keys and read in the forms clients send them in (an unsigned
 * integer, a fixstr).  false for anything else (absent, nil, another form,
 * rid 0, an index past its capacity): the general getters then read them
 * and say what is wrong.  The first of duplicated keys wins, as there. */
static bool rid_op_fast(const coord_index *idx, uint64_t *rid, coord_bytes *op)
{
    const uint8_t *r = NULL, *o = NULL;
    if (!idx->complete)
        return false;
    for (uint32_t i = 0; i < idx->n && !(r && o); i++) {
        const uint8_t *k = idx->f[i].key;
        if (idx->f[i].klen == 3 && !r && k[0] == 'r' && k[1] == 'i' && k[2] == 'd')
            r = idx->f[i].val;
        else if (idx->f[i].klen == 2 && !o && k[0] == 'o' && k[1] == 'p')
            o = idx->f[i].val;
    }
    if (!r || !o || o[0] < 0xa0 || o[0] > 0xbf)
        return false;
    if (r[0] >= 1 && r[0] <= 0x7f)
        *rid = r[0];
    else if (r[0] >= 0xcc && r[0] <= 0xcf)
        *rid = coord_read_be(r + 1, 1u << (r[0] - 0xcc));
    else
        return false;
    op->ptr = o + 1;
    op->len = o[0] & 0x1f;
    return *rid != 0;
}

const char *dispatch_op_name(int index)
{
    return index >= 0 && index < COORD_OP_COUNT ? coord_op_name((enum coord_op)index) : NULL;
}

int dispatch_frame(struct conn *c, const uint8_t *body, size_t len)
{
    struct broker *b = c->b;
    /* one pass validates the frame and indexes its fields: nothing from
     * a client is decoded into objects on the broker's hot path */
    int st = coord_frame_index(body, len, &b->req);
    if (st != COORD_FRAME_OK) {
        b->stats.bad_frames++;
        log_event(LOG_INFO, "conn.bad_frame", "conn=%llu pid=%d why=\"%s\"",
                  (unsigned long long)c->id, (int)c->peer_pid,
                  coord_frame_status_text(st));
        conn_reply_error(c, 0, COORD_EBAD_FRAME, coord_frame_status_text(st));
        conn_cut(c, "bad frame");
        return -1;
    }

    coord_fields f;
    coord_fields_init_index(&f, &b->req);
    /* a frame that declares a descriptor takes the oldest one queued
     * (conn.c); whatever the handler does not take is closed after it */
    uint64_t fdsize;
    if (coord_field_uint(&f, "result_fd", false, &fdsize)) {
        c->frame_fd = conn_claim_fd(c);
        if (c->frame_fd < 0) {
            b->stats.bad_frames++;
            log_event(LOG_INFO, "conn.bad_frame", "conn=%llu pid=%d why=\"result_fd without a descriptor\"",
                      (unsigned long long)c->id, (int)c->peer_pid);
            conn_reply_error(c, 0, COORD_EBAD_FRAME,
                             "result_fd: no descriptor came with this frame");
            conn_cut(c, "bad frame");
            return -1;
        }
    }
    dispatch_request(c, &f);
    int fd = conn_take_frame_fd(c);
    if (fd >= 0)
        close(fd);
    return 0;
}

static void dispatch_request(struct conn *c, coord_fields *fp)
{
    struct broker *b = c->b;
    coord_fields f = *fp;
    uint64_t rid = 0;
    coord_bytes opname = { NULL, 0 };
    bool have_rid = true, have_op = true;
    if (!rid_op_fast(&b->req, &rid, &opname)) {
        have_rid = coord_field_uint(&f, "rid", true, &rid);
        if (have_rid && rid == 0)
            coord_fields_fail(&f, "rid", "must be greater than 0");
        have_op = coord_field_str(&f, "op", true, &opname);
    }

    if (!(c->flags & CONN_HELLO_DONE) &&
        !(have_op && dispatch_op_index((const char *)opname.ptr, opname.len) == COORD_OP_HELLO)) {
        conn_reply_error(c, have_rid ? rid : 0, COORD_EHELLO_REQUIRED,
                         "hello must be the first request");
        conn_cut(c, "no hello");
        return;
    }
    if (!fields_ok(c, have_rid ? rid : 0, &f)) {
        if (!(c->flags & CONN_HELLO_DONE))
            conn_cut(c, "bad hello");
        return;
    }

    int idx = dispatch_op_index((const char *)opname.ptr, opname.len);
    if (idx < 0) {
        char name[64], msg[96];
        printable_copy(name, sizeof name, opname.ptr, opname.len);
        snprintf(msg, sizeof msg, "unknown op '%s'", name);
        conn_reply_error(c, rid, COORD_EUNKNOWN_OP, msg);
        return;
    }
    /* replies are matched by rid: one still waiting may not be reused */
    if (c->npending && pending_find(c, rid)) {
        b->stats.bad_requests++;
        conn_reply_error(c, rid, COORD_EBAD_REQUEST, "rid: already used by a waiting request");
        return;
    }
    b->stats.requests++;
    b->requests_by_op[idx]++;
    if (b->shutting_down) {
        conn_reply_error(c, rid, COORD_ESHUTTING_DOWN, "broker is shutting down");
        return;
    }
    handlers[idx](c, rid, &f);
}

/* Copies a string field into a fresh NUL-terminated, printable string. */
static char *dup_printable(coord_bytes s)
{
    char *p = malloc((size_t)s.len + 1);
    if (p)
        printable_copy(p, (size_t)s.len + 1, s.ptr, s.len);
    return p;
}


static void op_hello(struct conn *c, uint64_t rid, coord_fields *f)
{
    struct broker *b = c->b;
    if (c->flags & CONN_HELLO_DONE) {
        conn_reply_error(c, rid, COORD_EBAD_REQUEST, "hello: already done");
        return;
    }
    uint64_t proto = 0, pid = 0;
    coord_bytes client = { (const uint8_t *)"", 0 }, instance = client, scope = client;
    coord_field_uint(f, "proto", true, &proto);
    coord_field_str(f, "client", false, &client);
    coord_field_uint(f, "pid", false, &pid);
    coord_field_str(f, "instance", false, &instance);
    coord_field_str(f, "scope", false, &scope);
    bool fds = false;
    coord_field_bool(f, "fds", false, &fds);
    if (!fields_ok(c, rid, f)) {
        conn_cut(c, "bad hello");
        return;
    }
    if (proto != COORD_PROTO_VERSION) {
        char msg[80];
        snprintf(msg, sizeof msg, "proto %llu not supported; this broker speaks 1",
                 (unsigned long long)proto);
        conn_reply_error(c, rid, COORD_EPROTO_VERSION, msg);
        conn_cut(c, "protocol version");
        return;
    }
    if (client.len > LIMIT_CLIENT_NAME || instance.len > LIMIT_INSTANCE ||
        scope.len > LIMIT_SCOPE) {
        char msg[96];
        snprintf(msg, sizeof msg, "client (%u), instance (%u) or scope (%u bytes) too long",
                 LIMIT_CLIENT_NAME, LIMIT_INSTANCE, LIMIT_SCOPE);
        conn_reply_error(c, rid, COORD_ETOO_LARGE, msg);
        conn_cut(c, "bad hello");
        return;
    }
    c->client = dup_printable(client);
    c->instance = dup_printable(instance);
    c->scope = malloc(scope.len ? scope.len : 1);
    if (!c->client || !c->instance || !c->scope) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        conn_cut(c, "out of memory");
        return;
    }
    memcpy(c->scope, scope.ptr, scope.len);
    c->scope_len = scope.len;
    c->pid = pid;
    c->fds = fds;
    conn_hello_done(c);

    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_uint(&e, "proto", COORD_PROTO_VERSION);
    coord_enc_kv_cstr(&e, "broker", "coord " COORD_VERSION);
    coord_enc_kv_uint(&e, "conn", c->id);
    coord_enc_kv_uint(&e, "epoch", ids_epoch());
    coord_enc_kv_uint(&e, "max_frame", b->opt.max_frame);
    coord_enc_kv_uint(&e, "max_ref_bytes", b->opt.max_ref_bytes);
    coord_enc_kv_bool(&e, "fds", true);
    conn_enc_finish(c, &e);
    if (log_min_level <= LOG_DEBUG) {
        char cl[REDACT_BUF], sc[REDACT_BUF];
        log_event(LOG_DEBUG, "conn.hello", "conn=%llu client=%s scope=%s pid=%llu",
                  (unsigned long long)c->id, redact(client.ptr, client.len, cl),
                  redact(c->scope, c->scope_len, sc), (unsigned long long)pid);
    }
}

static void op_ping(struct conn *c, uint64_t rid, coord_fields *f)
{
    (void)f;
    conn_reply_ok(c, rid);
}

static void op_stats(struct conn *c, uint64_t rid, coord_fields *f)
{
    (void)f;
    stats_reply(c, rid);
}

static void op_cancel(struct conn *c, uint64_t rid, coord_fields *f)
{
    uint64_t target = 0;
    coord_field_uint(f, "target", true, &target);
    if (!fields_ok(c, rid, f))
        return;
    struct pending *p = pending_find(c, target);
    if (p) {
        c->b->stats.cancels++;
        p->abort(p, COORD_EABORTED);
    }
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_bool(&e, "cancelled", p != NULL);
    conn_enc_finish(c, &e);
}
