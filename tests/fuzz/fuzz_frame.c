/* fuzz_frame.c - the libFuzzer target over the wire codec: frame reader,
 * validating walk, decoder, field getters and re-encoding.
 *
 * The input is a byte stream as a peer would send it.  It is fed to a
 * coord_frame_reader in pieces whose sizes come from a hash of the input;
 * every frame is validated, decoded, read with every getter for the field
 * names of protocol v1, re-encoded and decoded again.  The raw input is
 * also given to coord_frame_validate directly, as one frame body.
 *
 * Any disagreement (validator vs msgpack-c, a getter pointing outside the
 * frame, a re-encoding that does not decode to the same value) aborts, so
 * the fuzzer reports it as a crash. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "enc.h"
#include "errors.h"
#include "frame.h"
#include "msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: fuzz assertion failed: %s\n", __FILE__,    \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Every field name protocol v1 uses, in requests, replies and events. */
static const char *const field_names[] = {
    "op", "rid", "ok", "code", "message", "ev", "proto", "client", "pid",
    "instance", "scope", "broker", "conn", "epoch", "max_frame", "target",
    "cancelled", "name", "mode", "if_available", "steal", "timeout_ms",
    "lease_ms", "granted", "lock", "token", "held", "pending", "age_ms",
    "reason", "key", "owner_ttl_ms", "wait_ms", "max_age_ms",
    "abort_when_orphaned", "role", "flight", "fence", "result", "source",
    "error", "retryable", "keep_ms", "delivered", "flights", "owner_conn",
    "followers", "status", "created_ms", "expires_ms", "prefix", "limit",
    "records", "size", "deleted", "workstream", "generation", "op_id", "value",
    "applied", "duplicate", "state", "lease_left_ms", "disabled", "channel",
    "data", "",
};
#define NFIELDS (sizeof field_names / sizeof field_names[0])

struct ctx {
    coord_msg msg;
    coord_msg msg2;          /* for the re-encoded frame */
    coord_buf out;
    int frames;
};

static bool inside(const uint8_t *p, size_t n, const uint8_t *body, size_t len)
{
    return n == 0 || (p >= body && p + n <= body + len);
}

/* The getters on one map: results must be coherent with the value found
 * by coord_map_find, pointers must stay inside the frame. */
static void read_fields(const msgpack_object_map *map, const uint8_t *body,
                        size_t len, int level)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        const char *key = field_names[i];
        const msgpack_object *v = coord_map_find(map, key);
        bool present = v && v->type != MSGPACK_OBJECT_NIL;
        for (int required = 0; required < 2; required++) {
            coord_fields f;
            uint64_t u = 0;
            bool b = false;
            coord_bytes s = { NULL, 0 };
            const msgpack_object_map *m = NULL;

            coord_fields_init(&f, map);
            bool got = coord_field_uint(&f, key, required, &u);
            FUZZ_ASSERT(got == (present && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER));
            FUZZ_ASSERT(f.failed == (present ? !got : (bool)required));
            FUZZ_ASSERT(strlen(f.err) < sizeof f.err);

            coord_fields_init(&f, map);
            got = coord_field_bool(&f, key, required, &b);
            FUZZ_ASSERT(got == (present && v->type == MSGPACK_OBJECT_BOOLEAN));
            FUZZ_ASSERT(f.failed == (present ? !got : (bool)required));

            bool is_bytes = present && (v->type == MSGPACK_OBJECT_STR ||
                                        v->type == MSGPACK_OBJECT_BIN);
            coord_fields_init(&f, map);
            got = coord_field_str(&f, key, required, &s);
            FUZZ_ASSERT(got == is_bytes);
            if (got)
                FUZZ_ASSERT(inside(s.ptr, s.len, body, len));
            coord_fields_init(&f, map);
            got = coord_field_bin(&f, key, required, &s);
            FUZZ_ASSERT(got == is_bytes);
            if (got)
                FUZZ_ASSERT(inside(s.ptr, s.len, body, len));

            coord_fields_init(&f, map);
            got = coord_field_map(&f, key, required, &m);
            FUZZ_ASSERT(got == (present && v->type == MSGPACK_OBJECT_MAP));
            if (got && level == 0) {
                /* nested maps (error: {code, message}) the way the broker
                 * reads them */
                coord_fields child;
                coord_fields_nested(&child, &f, "error", m);
                if (!coord_field_str(&child, "code", true, &s))
                    FUZZ_ASSERT(child.failed &&
                                strncmp(child.err, "error.code: ", 12) == 0);
                else
                    (void)coord_code_from_name((const char *)s.ptr, s.len);
                coord_field_str(&child, "message", false, &s);
                read_fields(m, body, len, level + 1);
            }
        }
    }
    /* bytes comparisons on whatever str "op" holds */
    coord_fields f;
    coord_bytes op;
    coord_fields_init(&f, map);
    if (coord_field_str(&f, "op", false, &op)) {
        (void)coord_bytes_eq(op, "hello");
        (void)coord_bytes_eq(op, "lock.acquire");
    }
}

/* Re-encodes a decoded value with coord_enc_*.  Floats have no encoder
 * call and are written as nil, ext values as bin; keys holding a NUL byte
 * cannot go through coord_enc_key and are cut there (*exact = false). */
static void reencode(coord_enc *e, const msgpack_object *o, bool *exact)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        coord_enc_nil(e);
        break;
    case MSGPACK_OBJECT_BOOLEAN:
        coord_enc_bool(e, o->via.boolean);
        break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        coord_enc_uint(e, o->via.u64);
        break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        coord_enc_int(e, o->via.i64);
        break;
    case MSGPACK_OBJECT_STR:
        coord_enc_str(e, o->via.str.ptr, o->via.str.size);
        break;
    case MSGPACK_OBJECT_BIN:
        coord_enc_bin(e, o->via.bin.ptr, o->via.bin.size);
        break;
    case MSGPACK_OBJECT_EXT:
        coord_enc_bin(e, o->via.ext.ptr, o->via.ext.size);
        break;
    case MSGPACK_OBJECT_ARRAY:
        coord_enc_array_begin(e);
        for (uint32_t i = 0; i < o->via.array.size; i++)
            reencode(e, &o->via.array.ptr[i], exact);
        coord_enc_array_end(e);
        break;
    case MSGPACK_OBJECT_MAP:
        coord_enc_map_begin(e);
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            char key[64];
            FUZZ_ASSERT(k->type == MSGPACK_OBJECT_STR);
            size_t n = k->via.str.size < sizeof key - 1 ? k->via.str.size
                                                         : sizeof key - 1;
            if (n)                 /* ptr may be NULL when empty */
                memcpy(key, k->via.str.ptr, n);
            key[n] = '\0';
            if (n != k->via.str.size || strlen(key) != n)
                *exact = false;
            coord_enc_key(e, key);
            reencode(e, &o->via.map.ptr[i].val, exact);
        }
        coord_enc_map_end(e);
        break;
    default:
        FUZZ_ASSERT(!"unexpected msgpack object type");
    }
}

/* a (original) and b (re-encoded and decoded again) are the same value,
 * modulo the substitutions of reencode. */
static bool same(const msgpack_object *a, const msgpack_object *b)
{
    switch (a->type) {
    case MSGPACK_OBJECT_NIL:
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return b->type == MSGPACK_OBJECT_NIL;
    case MSGPACK_OBJECT_BOOLEAN:
        return b->type == a->type && b->via.boolean == a->via.boolean;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return b->type == a->type && b->via.u64 == a->via.u64;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return b->type == a->type && b->via.i64 == a->via.i64;
    case MSGPACK_OBJECT_STR:
        return b->type == a->type && b->via.str.size == a->via.str.size &&
               (a->via.str.size == 0 ||
                memcmp(a->via.str.ptr, b->via.str.ptr, a->via.str.size) == 0);
    case MSGPACK_OBJECT_BIN:
        return b->type == a->type && b->via.bin.size == a->via.bin.size &&
               (a->via.bin.size == 0 ||
                memcmp(a->via.bin.ptr, b->via.bin.ptr, a->via.bin.size) == 0);
    case MSGPACK_OBJECT_EXT:
        return b->type == MSGPACK_OBJECT_BIN && b->via.bin.size == a->via.ext.size &&
               (a->via.ext.size == 0 ||
                memcmp(a->via.ext.ptr, b->via.bin.ptr, a->via.ext.size) == 0);
    case MSGPACK_OBJECT_ARRAY:
        if (b->type != a->type || b->via.array.size != a->via.array.size)
            return false;
        for (uint32_t i = 0; i < a->via.array.size; i++)
            if (!same(&a->via.array.ptr[i], &b->via.array.ptr[i]))
                return false;
        return true;
    case MSGPACK_OBJECT_MAP:
        if (b->type != a->type || b->via.map.size != a->via.map.size)
            return false;
        for (uint32_t i = 0; i < a->via.map.size; i++)
            if (!same(&a->via.map.ptr[i].key, &b->via.map.ptr[i].key) ||
                !same(&a->via.map.ptr[i].val, &b->via.map.ptr[i].val))
                return false;
        return true;
    default:
        return false;
    }
}

static void check_reencode(struct ctx *c)
{
    coord_enc e;
    bool exact = true;
    const msgpack_object_map *map = c->msg.map;
    size_t before = c->out.len;

    coord_enc_begin(&e, &c->out);
    for (uint32_t i = 0; i < map->size; i++) {
        /* the top map's entries go straight into the frame's own map */
        msgpack_object_kv *kv = &map->ptr[i];
        char key[64];
        size_t n = kv->key.via.str.size < sizeof key - 1 ? kv->key.via.str.size
                                                         : sizeof key - 1;
        if (n)                 /* ptr may be NULL when empty */
            memcpy(key, kv->key.via.str.ptr, n);
        key[n] = '\0';
        if (n != kv->key.via.str.size || strlen(key) != n)
            exact = false;
        coord_enc_key(&e, key);
        reencode(&e, &kv->val, &exact);
    }
    size_t total = coord_enc_end(&e);
    if (total == 0) {
        /* refused (a map over 65535 keys): nothing left behind */
        FUZZ_ASSERT(c->out.len == before);
        return;
    }
    FUZZ_ASSERT(c->out.len == before + total);
    const uint8_t *frame = c->out.data + before;
    FUZZ_ASSERT(coord_be32(frame) == total - COORD_FRAME_HEADER);
    int st = coord_msg_parse(&c->msg2, frame + COORD_FRAME_HEADER,
                             total - COORD_FRAME_HEADER);
    FUZZ_ASSERT(st == COORD_FRAME_OK);
    if (exact)
        FUZZ_ASSERT(same(&c->msg.root, &c->msg2.root));
    else
        FUZZ_ASSERT(c->msg2.map->size == map->size);
    coord_buf_consume(&c->out, c->out.len);
}

/* The broker reads fields from the raw index (coord_frame_index), the
 * client from msgpack-c objects: both must read every field the same. */
static void compare_backends(coord_fields *a, coord_fields *b, const uint8_t *body,
                             size_t len, int level)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        const char *key = field_names[i];
        bool required = (i & 1) != 0;
        uint64_t ua = 0, ub = 0;
        bool ba = false, bb = false;
        coord_bytes sa = { NULL, 0 }, sb = { NULL, 0 };
        FUZZ_ASSERT(coord_field_uint(a, key, required, &ua) ==
                    coord_field_uint(b, key, required, &ub));
        FUZZ_ASSERT(ua == ub);
        FUZZ_ASSERT(coord_field_bool(a, key, required, &ba) ==
                    coord_field_bool(b, key, required, &bb));
        FUZZ_ASSERT(ba == bb);
        bool ga = coord_field_str(a, key, required, &sa);
        FUZZ_ASSERT(ga == coord_field_str(b, key, required, &sb));
        if (ga) {
            FUZZ_ASSERT(sa.len == sb.len && inside(sa.ptr, sa.len, body, len));
            FUZZ_ASSERT(sa.len == 0 || memcmp(sa.ptr, sb.ptr, sa.len) == 0);
        }
        if (level == 0) {
            coord_index store;
            coord_fields ca, cb;
            bool na = coord_field_nested(a, key, required, &store, &ca);
            FUZZ_ASSERT(na == coord_field_nested(b, key, required, NULL, &cb));
            if (na)
                compare_backends(&ca, &cb, body, len, 1);
        }
        FUZZ_ASSERT(a->failed == b->failed);
        FUZZ_ASSERT(strcmp(a->err, b->err) == 0);
    }
}

static int on_frame(void *ud, const uint8_t *body, size_t len)
{
    struct ctx *c = ud;
    c->frames++;
    FUZZ_ASSERT(len > 0);
    int walk = coord_frame_validate(body, len, COORD_MAX_DEPTH);
    static coord_index pre;
    FUZZ_ASSERT(coord_frame_index(body, len, &pre) == walk);
    int st = coord_msg_parse(&c->msg, body, len);
    /* the walk and msgpack-c never disagree */
    FUZZ_ASSERT(st == walk || (walk == COORD_FRAME_OK && st == COORD_FRAME_NOMEM));
    FUZZ_ASSERT(coord_frame_status_text(st) != NULL);
    if (st != COORD_FRAME_OK)
        return 0;
    FUZZ_ASSERT(c->msg.root.type == MSGPACK_OBJECT_MAP);
    static coord_index idx;
    FUZZ_ASSERT(coord_frame_index(body, len, &idx) == COORD_FRAME_OK);
    coord_fields fa, fb;
    coord_fields_init_index(&fa, &idx);
    coord_fields_init(&fb, c->msg.map);
    compare_backends(&fa, &fb, body, len, 0);
    read_fields(c->msg.map, body, len, 0);
    check_reencode(c);
    /* a broker's answer to the frame */
    coord_fields f;
    uint64_t rid = 0;
    coord_fields_init(&f, c->msg.map);
    coord_field_uint(&f, "rid", true, &rid);
    if (f.failed) {
        size_t n = coord_enc_error(&c->out, rid, COORD_EBAD_REQUEST, f.err);
        FUZZ_ASSERT(n > 0 && n == c->out.len);
        coord_buf_consume(&c->out, n);
    }
    return 0;
}

/* (a2)'s callback: counts and hashes the frames, and stops at random ones
 * (a broker pausing a connection). */
struct tally {
    uint64_t frames, hash, *rng;
    bool stops;
};

static uint64_t next_rand(uint64_t *s);

static int tally_frame(void *ud, const uint8_t *body, size_t len)
{
    struct tally *t = ud;
    t->frames++;
    t->hash = (t->hash ^ len) * 1099511628211ULL;
    for (size_t i = 0; i < len; i++)
        t->hash = (t->hash ^ body[i]) * 1099511628211ULL;
    return t->stops && (next_rand(t->rng) & 3) == 0;
}

/* xorshift64*, seeded by FNV-1a over the input. */
static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ctx c;
    static bool ready;
    if (!ready) {
        if (coord_msg_init(&c.msg) < 0 || coord_msg_init(&c.msg2) < 0)
            abort();
        coord_buf_init(&c.out);
        ready = true;
    }

    uint64_t seed = 1469598103934665603ULL;
    for (size_t i = 0; i < size; i++)
        seed = (seed ^ data[i]) * 1099511628211ULL;
    if (seed == 0)
        seed = 1;

    /* (a) the stream through the reader, in pieces */
    coord_frame_reader r;
    uint32_t max_frame = (seed >> 60) == 0 ? 64 : COORD_MAX_FRAME_DEFAULT;
    coord_frame_reader_init(&r, max_frame);
    unsigned mode = (unsigned)(seed & 3);
    uint64_t rng = seed;
    size_t pos = 0;
    c.frames = 0;
    while (pos < size) {
        size_t piece;
        switch (mode) {
        case 0:  piece = size - pos; break;                          /* all */
        case 1:  piece = 1; break;                                   /* bytes */
        case 2:  piece = 1 + (size_t)(next_rand(&rng) % 16); break;  /* small */
        default: piece = 1 + (size_t)(next_rand(&rng) % 4096); break;
        }
        if (piece > size - pos)
            piece = size - pos;
        /* a heap copy per piece, so reads past a piece's end are caught */
        uint8_t *copy = malloc(piece);
        if (!copy)
            abort();
        memcpy(copy, data + pos, piece);
        int st = coord_frame_feed(&r, copy, piece, on_frame, &c);
        free(copy);
        pos += piece;
        if (st != COORD_FRAME_OK) {
            /* the broker closes the connection here */
            FUZZ_ASSERT(st == COORD_FRAME_EMPTY || st == COORD_FRAME_TOO_LONG ||
                        st == COORD_FRAME_NOMEM);
            break;
        }
        FUZZ_ASSERT(coord_frame_reader_pending(&r) <=
                    (size_t)max_frame + COORD_FRAME_HEADER + 4096);
    }
    coord_frame_reader_free(&r);

    /* (a2) the same stream fed whole, then in pieces with the callback
     * stopping at random frames: what a stopped feed did not take
     * (coord_frame_reader_used) is fed again, as the broker keeps it, and
     * the frames are the same, in the same order */
    {
        struct tally whole = { 0, 1469598103934665603ULL, &rng, false };
        coord_frame_reader_init(&r, max_frame);
        int st_whole = coord_frame_feed(&r, data, size, tally_frame, &whole);
        coord_frame_reader_free(&r);
        struct tally cut = { 0, 1469598103934665603ULL, &rng, true };
        coord_frame_reader_init(&r, max_frame);
        uint8_t *rest = NULL;           /* what a stopped feed left, then the next piece */
        size_t nrest = 0;
        int st_cut = COORD_FRAME_OK;
        pos = 0;
        while (st_cut <= 0 && (pos < size || nrest > 0)) {
            size_t piece = 1 + (size_t)(next_rand(&rng) % 64);
            if (piece > size - pos)
                piece = size - pos;
            uint8_t *buf = malloc(nrest + piece + 1);
            if (!buf)
                abort();
            if (nrest)
                memcpy(buf, rest, nrest);
            memcpy(buf + nrest, data + pos, piece);
            pos += piece;
            size_t n = nrest + piece;
            free(rest);
            rest = NULL;
            nrest = 0;
            st_cut = coord_frame_feed(&r, buf, n, tally_frame, &cut);
            if (st_cut < 0) {
                size_t used = coord_frame_reader_used(&r);
                FUZZ_ASSERT(used <= n);
                FUZZ_ASSERT(r.have == 0);
                nrest = n - used;
                rest = malloc(nrest + 1);
                if (!rest)
                    abort();
                memcpy(rest, buf + used, nrest);
            }
            free(buf);
        }
        free(rest);
        coord_frame_reader_free(&r);
        FUZZ_ASSERT(cut.frames == whole.frames && cut.hash == whole.hash);
        FUZZ_ASSERT((st_cut > 0) == (st_whole > 0));
    }

    /* the UTF-8 check behind names on the wire: never reads past the end,
     * and a valid string stays valid cut at a code point boundary */
    bool utf8 = coord_utf8_valid(data, size);
    if (utf8 && size > 0) {
        size_t cut = size - 1;
        while (cut > 0 && (data[cut] & 0xc0) == 0x80)
            cut--;
        FUZZ_ASSERT(coord_utf8_valid(data, cut));
    }

    /* (b) the raw input as one frame body */
    int walk = coord_frame_validate(data, size, COORD_MAX_DEPTH);
    int st = coord_msg_parse(&c.msg, data, size);
    FUZZ_ASSERT(st == walk || (walk == COORD_FRAME_OK && st == COORD_FRAME_NOMEM));
    if (st == COORD_FRAME_OK) {
        read_fields(c.msg.map, data, size, 0);
        check_reencode(&c);
    }
    /* a smaller depth bound refuses a superset */
    for (int d = 1; d < COORD_MAX_DEPTH; d++) {
        int sd = coord_frame_validate(data, size, d);
        if (sd == COORD_FRAME_OK)
            FUZZ_ASSERT(walk == COORD_FRAME_OK);
    }
    return 0;
}
