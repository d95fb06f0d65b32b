/* channels.c - BroadcastChannel for processes: sub.subscribe,
 * sub.unsubscribe, sub.publish within a scope, and the broker's own
 * channels (-locks, -flights, -leaders) that carry lifecycle events.
 *
 * A message is encoded once and its bytes appended to each subscriber's
 * output; a subscriber that does not read is cut off by the output cap of
 * its connection, so a publisher never waits for anyone. */
#include <stdlib.h>
#include <string.h>
#include "budget.h"
#include "coord-ops.h"
#include "channels.h"
#include "errors.h"
#include "hashmap.h"
#include "coord-limits.h"
#include "ops.h"
#include "skey.h"


struct channel {
    struct hentry h;
    uint8_t *skey;                 /* the scoped name (skey.h), owned */
    struct list subs;
    unsigned nsubs;
    int system;                    /* index into system_names, or -1 */
};

struct sub {
    struct hentry h;               /* C.subs, by (channel, conn) */
    struct { const struct channel *ch; const struct conn *conn; } key;
    struct channel *ch;
    struct conn *conn;
    struct list ch_link;
    struct list conn_link;
};

static const char *system_names[] = { "-locks", "-flights", "-leaders" };

static struct {
    struct broker *b;
    struct hashmap channels;
    struct hashmap subs;
    coord_buf scratch;
    uint64_t published, delivered;
} C;

void channels_init(struct broker *b)
{
    C.b = b;
    hashmap_init(&C.channels);
    hashmap_init(&C.subs);
    coord_buf_init(&C.scratch);
}

void channels_stats(coord_enc *e)
{
    coord_enc_kv_uint(e, "channels", C.channels.count);
    coord_enc_kv_uint(e, "messages_published", C.published);
    coord_enc_kv_uint(e, "messages_delivered", C.delivered);
}

unsigned channels_system_subs[3];

static int system_index(const uint8_t *name, size_t len)
{
    for (int i = 0; i < 3; i++)
        if (strlen(system_names[i]) == len && memcmp(system_names[i], name, len) == 0)
            return i;
    return -1;
}

static struct channel *channel_find(const uint8_t *scope, uint32_t scope_len,
                                    const uint8_t *name, size_t len, bool create)
{
    /* looked up on the stack: a publish allocates nothing */
    uint8_t key[SKEY_HEADER + LIMIT_SCOPE + LIMIT_NAME];
    if (skey_size(scope_len, len) > sizeof key)
        return NULL;
    size_t sklen = skey_write(key, scope, scope_len, name, len);
    struct hentry *h = hashmap_get(&C.channels, key, sklen);
    if (h || !create)
        return (struct channel *)h;
    struct channel *ch = calloc(1, sizeof *ch);
    uint8_t *skey = ch ? malloc(sklen) : NULL;
    if (!skey) {
        free(ch);
        return NULL;
    }
    memcpy(skey, key, sklen);
    ch->skey = skey;
    ch->h.key = skey;
    ch->h.keylen = sklen;
    ch->system = system_index(name, len);
    list_init(&ch->subs);
    if (hashmap_put(&C.channels, &ch->h) < 0) {
        free(skey);
        free(ch);
        return NULL;
    }
    return ch;
}

static void channel_free(struct channel *ch)
{
    hashmap_del(&C.channels, &ch->h);
    free(ch->skey);
    free(ch);
}

static void sub_remove(struct sub *s)
{
    struct channel *ch = s->ch;
    list_del(&s->ch_link);
    list_del(&s->conn_link);
    hashmap_del(&C.subs, &s->h);
    s->conn->nsubs--;
    budget_give();
    ch->nsubs--;
    if (ch->system >= 0)
        channels_system_subs[ch->system]--;
    free(s);
    if (ch->nsubs == 0)
        channel_free(ch);
}

void channels_conn_closed(struct conn *c)
{
    while (!list_empty(&c->subs))
        sub_remove(list_entry(list_shift(&c->subs), struct sub, conn_link));
}

/* Appends the frame in C.scratch to every subscriber but 'except'. */
static uint64_t fan_out(struct channel *ch, const struct conn *except)
{
    uint64_t n = 0;
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &ch->subs) {
        struct sub *s = list_entry(pos, struct sub, ch_link);
        if (s->conn == except)
            continue;
        /* a subscriber past its output cap is only marked (conn_cut): its
         * subscriptions go at the loop turn's safe point, not during this
         * walk, and C.scratch stays this message */
        if (conn_send_bytes(s->conn, C.scratch.data, C.scratch.len) == 0)
            n++;
    }
    C.delivered += n;
    return n;
}

static bool read_channel(struct conn *c, uint64_t rid, coord_fields *f, coord_bytes *name)
{
    coord_field_str(f, "channel", true, name);
    if (!fields_ok(c, rid, f))
        return false;
    return name_size_ok(c, rid, "channel", name->len);
}

static struct sub *find_sub(struct conn *c, const struct channel *ch)
{
    struct { const struct channel *ch; const struct conn *conn; } k;
    memset(&k, 0, sizeof k);
    k.ch = ch;
    k.conn = c;
    struct hentry *h = hashmap_get(&C.subs, &k, sizeof k);
    return h ? (struct sub *)h : NULL;
}

void op_sub_subscribe(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name;
    if (!read_channel(c, rid, f, &name))
        return;
    if (name.len && name.ptr[0] == '-' && system_index(name.ptr, name.len) < 0) {
        conn_reply_error(c, rid, COORD_ENAME_RESERVED,
                         "the broker's channels are -locks, -flights and -leaders");
        return;
    }
    struct channel *ch = channel_find(c->scope, c->scope_len, name.ptr, name.len, true);
    if (!ch) {
        conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
        return;
    }
    if (!find_sub(c, ch)) {
        bool full = budget_full();
        struct sub *s = c->nsubs < LIMIT_CONN_SUBS && !full ? calloc(1, sizeof *s) : NULL;
        if (s) {
            s->key.ch = ch;
            s->key.conn = c;
            s->h.key = (const uint8_t *)&s->key;
            s->h.keylen = sizeof s->key;
        }
        if (!s || hashmap_put(&C.subs, &s->h) < 0) {
            bool limit = c->nsubs >= LIMIT_CONN_SUBS;
            free(s);
            if (ch->nsubs == 0)
                channel_free(ch);
            if (limit)
                reply_conn_limit(c, rid, "subscriptions", LIMIT_CONN_SUBS);
            else if (full)
                budget_refuse(c, rid);
            else
                conn_reply_error(c, rid, COORD_ELIMIT, "out of memory");
            return;
        }
        s->ch = ch;
        s->conn = c;
        c->nsubs++;
        budget_take();
        list_append(&ch->subs, &s->ch_link);
        list_append(&c->subs, &s->conn_link);
        ch->nsubs++;
        if (ch->system >= 0)
            channels_system_subs[ch->system]++;
    }
    conn_reply_ok(c, rid);
}

void op_sub_unsubscribe(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name;
    if (!read_channel(c, rid, f, &name))
        return;
    struct channel *ch = channel_find(c->scope, c->scope_len, name.ptr, name.len, false);
    struct sub *s = ch ? find_sub(c, ch) : NULL;
    if (s)
        sub_remove(s);
    conn_reply_ok(c, rid);
}

void op_sub_publish(struct conn *c, uint64_t rid, coord_fields *f)
{
    coord_bytes name, data = { NULL, 0 };
    coord_field_bin(f, "data", true, &data);
    if (!read_channel(c, rid, f, &name))
        return;
    if (name.len && name.ptr[0] == '-') {
        conn_reply_error(c, rid, COORD_ENAME_RESERVED,
                         "channels starting with '-' are the broker's");
        return;
    }
    if (data.len > LIMIT_MESSAGE) {
        conn_reply_error(c, rid, COORD_ETOO_LARGE, "data larger than 64 KiB");
        return;
    }
    C.published++;
    struct channel *ch = channel_find(c->scope, c->scope_len, name.ptr, name.len, false);
    uint64_t n = 0;
    if (ch) {
        coord_enc e;
        C.scratch.len = 0;
        coord_enc_event_begin(&e, &C.scratch, coord_event_name(COORD_EV_MESSAGE));
        coord_enc_kv_name(&e, "channel", name.ptr, name.len);
        coord_enc_kv_bin(&e, "data", data.ptr, data.len);
        coord_enc_kv_uint(&e, "conn", c->id);
        size_t size = coord_enc_end(&e);
        if (size && size - COORD_FRAME_HEADER > c->b->opt.max_frame) {
            conn_reply_error(c, rid, COORD_ETOO_LARGE, "message does not fit max_frame");
            return;
        }
        if (size)
            n = fan_out(ch, c);
    }
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    coord_enc_kv_uint(&e, "delivered", n);
    conn_enc_finish(c, &e);
}

coord_enc *channels_event_begin(enum system_channel which, coord_enc *e, const char *what)
{
    C.scratch.len = 0;
    coord_enc_event_begin(e, &C.scratch, coord_event_name(COORD_EV_LIFECYCLE));
    coord_enc_kv_cstr(e, "channel", system_names[which]);
    coord_enc_kv_cstr(e, "what", what);
    return e;
}

void channels_event_end(enum system_channel which, coord_enc *e,
                        const uint8_t *scope, uint32_t scope_len)
{
    size_t size = coord_enc_end(e);
    if (!size)
        return;
    if (size - COORD_FRAME_HEADER > C.b->opt.max_frame) {
        C.b->stats.oversized_frames++;
        return;
    }
    const char *name = system_names[which];
    struct channel *ch = channel_find(scope, scope_len, (const uint8_t *)name,
                                      strlen(name), false);
    if (ch)
        fan_out(ch, NULL);
}
