/* test_enc.c - unit tests of the buffer and the frame encoder: every value
 * type round-trips through coord_enc_* and coord_msg_parse. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "coord-ops.h"
#include "enc.h"
#include "errors.h"
#include "frame.h"
#include "msg.h"

static coord_msg msg;

/* Checks the length prefix of the frame at buf->data + off (total bytes)
 * and parses its body into msg. */
static const msgpack_object_map *parse_frame(const coord_buf *buf, size_t off,
                                             size_t total)
{
    CHECK(total >= COORD_FRAME_HEADER + 1);
    CHECK(off + total <= buf->len);
    if (total < COORD_FRAME_HEADER + 1 || off + total > buf->len)
        return NULL;
    CHECK_EQ(coord_be32(buf->data + off), total - COORD_FRAME_HEADER);
    int st = coord_msg_parse(&msg, buf->data + off + COORD_FRAME_HEADER,
                             total - COORD_FRAME_HEADER);
    CHECK_MSG(st == COORD_FRAME_OK, "%s", coord_frame_status_text(st));
    return st == COORD_FRAME_OK ? msg.map : NULL;
}

static const msgpack_object *get(const msgpack_object_map *m, const char *k)
{
    const msgpack_object *o = m ? coord_map_find(m, k) : NULL;
    CHECK_MSG(o != NULL, "key %s", k);
    return o;
}

static bool is_uint(const msgpack_object *o, uint64_t v)
{
    return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 == v;
}

static bool is_int(const msgpack_object *o, int64_t v)
{
    if (!o)
        return false;
    if (v >= 0)
        return is_uint(o, (uint64_t)v);
    return o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 == v;
}

static bool is_str(const msgpack_object *o, const void *s, size_t n)
{
    return o && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           (n == 0 || memcmp(o->via.str.ptr, s, n) == 0);
}

static bool is_bin(const msgpack_object *o, const void *p, size_t n)
{
    return o && o->type == MSGPACK_OBJECT_BIN && o->via.bin.size == n &&
           (n == 0 || memcmp(o->via.bin.ptr, p, n) == 0);
}

static bool is_bool(const msgpack_object *o, bool v)
{
    return o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean == v;
}

static const uint64_t uints[] = {
    0, 1, 127, 128, 255, 256, 65535, 65536, UINT32_MAX,
    (uint64_t)UINT32_MAX + 1, UINT64_MAX - 1, UINT64_MAX,
};
static const int64_t ints[] = {
    -1, -31, -32, -33, -127, -128, -129, -32767, -32768, -32769,
    INT32_MIN, (int64_t)INT32_MIN - 1, INT64_MIN + 1, INT64_MIN, 0, 5, INT64_MAX,
};

static void test_scalars(void)
{
    coord_buf buf;
    coord_enc e;
    char key[32];
    coord_buf_init(&buf);

    coord_enc_begin(&e, &buf);
    for (size_t i = 0; i < sizeof uints / sizeof uints[0]; i++) {
        snprintf(key, sizeof key, "u%zu", i);
        coord_enc_kv_uint(&e, key, uints[i]);
    }
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        snprintf(key, sizeof key, "i%zu", i);
        coord_enc_key(&e, key);
        coord_enc_int(&e, ints[i]);
    }
    coord_enc_kv_bool(&e, "t", true);
    coord_enc_kv_bool(&e, "f", false);
    coord_enc_key(&e, "nil");
    coord_enc_nil(&e);
    coord_enc_kv_cstr(&e, "hello", "world");
    coord_enc_kv_cstr(&e, "empty", "");
    coord_enc_kv_str(&e, "nul", "a\0b\0", 4);
    coord_enc_kv_str(&e, "nul1", "\0", 1);
    coord_enc_kv_bin(&e, "bin", "\x00\xff\x01", 3);
    coord_enc_kv_bin(&e, "bin0", NULL, 0);
    coord_enc_key(&e, "cstr");
    coord_enc_cstr(&e, "plain");
    coord_enc_key(&e, "strv");
    coord_enc_str(&e, "xyz", 2);
    coord_enc_key(&e, "binv");
    coord_enc_bin(&e, "pq", 2);
    coord_enc_key(&e, "");                    /* the empty key */
    coord_enc_uint(&e, 42);
    size_t total = coord_enc_end(&e);
    CHECK(total > 0);
    CHECK_EQ(total, buf.len);

    const msgpack_object_map *m = parse_frame(&buf, 0, total);
    CHECK(m != NULL);
    if (!m) {
        coord_buf_free(&buf);
        return;
    }
    CHECK_EQ(m->size, sizeof uints / sizeof uints[0] + sizeof ints / sizeof ints[0] + 13);
    for (size_t i = 0; i < sizeof uints / sizeof uints[0]; i++) {
        snprintf(key, sizeof key, "u%zu", i);
        CHECK_MSG(is_uint(get(m, key), uints[i]), "uint %zu", i);
    }
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        snprintf(key, sizeof key, "i%zu", i);
        CHECK_MSG(is_int(get(m, key), ints[i]), "int %zu", i);
    }
    CHECK(is_bool(get(m, "t"), true));
    CHECK(is_bool(get(m, "f"), false));
    const msgpack_object *nil = get(m, "nil");
    CHECK(nil && nil->type == MSGPACK_OBJECT_NIL);
    CHECK(is_str(get(m, "hello"), "world", 5));
    CHECK(is_str(get(m, "empty"), "", 0));
    CHECK(is_str(get(m, "nul"), "a\0b\0", 4));
    CHECK(is_str(get(m, "nul1"), "\0", 1));
    CHECK(is_bin(get(m, "bin"), "\x00\xff\x01", 3));
    CHECK(is_bin(get(m, "bin0"), "", 0));
    CHECK(is_str(get(m, "cstr"), "plain", 5));
    CHECK(is_str(get(m, "strv"), "xy", 2));
    CHECK(is_bin(get(m, "binv"), "pq", 2));
    CHECK(is_uint(get(m, ""), 42));

    /* the typed getters agree */
    coord_fields f;
    uint64_t u = 0;
    coord_bytes s;
    coord_fields_init(&f, m);
    CHECK(coord_field_uint(&f, "u11", true, &u));
    CHECK_EQ_U(u, UINT64_MAX);
    CHECK(coord_field_str(&f, "nul", true, &s) && s.len == 4);
    CHECK(coord_field_bin(&f, "bin", true, &s) && s.len == 3);
    CHECK(!f.failed);
    coord_buf_free(&buf);
}

static void test_big_values(void)
{
    coord_buf buf;
    coord_enc e;
    coord_buf_init(&buf);
    size_t sizes[] = { 255, 256, 65535, 65536, 70000, 300000 };
    size_t nsizes = sizeof sizes / sizeof sizes[0];
    uint8_t *big = malloc(300000);
    for (size_t i = 0; i < 300000; i++)
        big[i] = (uint8_t)(i ^ (i >> 8));

    coord_enc_begin(&e, &buf);
    for (size_t i = 0; i < nsizes; i++) {
        char key[16];
        snprintf(key, sizeof key, "b%zu", i);
        coord_enc_kv_bin(&e, key, big, sizes[i]);
        snprintf(key, sizeof key, "s%zu", i);
        coord_enc_kv_str(&e, key, big, sizes[i]);
    }
    size_t total = coord_enc_end(&e);
    CHECK(total > 2 * (255 + 256 + 65535 + 65536 + 70000 + 300000));
    const msgpack_object_map *m = parse_frame(&buf, 0, total);
    for (size_t i = 0; m && i < nsizes; i++) {
        char key[16];
        snprintf(key, sizeof key, "b%zu", i);
        CHECK_MSG(is_bin(get(m, key), big, sizes[i]), "bin of %zu", sizes[i]);
        snprintf(key, sizeof key, "s%zu", i);
        CHECK_MSG(is_str(get(m, key), big, sizes[i]), "str of %zu", sizes[i]);
    }
    free(big);

    /* a long array (array32 headers are patched on close) */
    coord_buf_free(&buf);
    coord_enc_begin(&e, &buf);
    coord_enc_key(&e, "list");
    coord_enc_array_begin(&e);
    for (uint64_t i = 0; i < 70000; i++)
        coord_enc_uint(&e, i);
    coord_enc_array_end(&e);
    total = coord_enc_end(&e);
    m = parse_frame(&buf, 0, total);
    const msgpack_object *l = m ? get(m, "list") : NULL;
    CHECK(l && l->type == MSGPACK_OBJECT_ARRAY && l->via.array.size == 70000);
    if (l && l->type == MSGPACK_OBJECT_ARRAY && l->via.array.size == 70000) {
        bool all = true;
        for (uint32_t i = 0; i < 70000; i++)
            all = all && is_uint(&l->via.array.ptr[i], i);
        CHECK(all);
    }
    coord_buf_free(&buf);
}

/* lock.query's reply shape: {rid, ok, held: [{name, mode, ...}], pending: []} */
static void test_nested(void)
{
    coord_buf buf;
    coord_enc e;
    coord_buf_init(&buf);
    coord_enc_reply_begin(&e, &buf, 77);
    coord_enc_key(&e, "held");
    coord_enc_array_begin(&e);
    for (int i = 0; i < 3; i++) {
        coord_enc_map_begin(&e);
        coord_enc_kv_str(&e, "name", "a\0b", 3);
        coord_enc_kv_cstr(&e, "mode", i ? "shared" : "exclusive");
        coord_enc_kv_uint(&e, "token", (uint64_t)i << 32 | 5);
        coord_enc_map_end(&e);              /* depth 3: the deepest allowed */
    }
    coord_enc_array_end(&e);
    coord_enc_key(&e, "mixed");
    coord_enc_array_begin(&e);
    coord_enc_int(&e, -7);
    coord_enc_nil(&e);
    coord_enc_bool(&e, true);
    coord_enc_array_begin(&e);
    coord_enc_cstr(&e, "in");
    coord_enc_array_end(&e);
    coord_enc_array_end(&e);
    coord_enc_key(&e, "pending");
    coord_enc_array_begin(&e);
    coord_enc_array_end(&e);
    coord_enc_key(&e, "empty_map");
    coord_enc_map_begin(&e);
    coord_enc_map_end(&e);
    coord_enc_key(&e, "error");
    coord_enc_map_begin(&e);
    coord_enc_kv_cstr(&e, "code", "TIMEOUT");
    coord_enc_kv_cstr(&e, "message", "too slow");
    coord_enc_map_end(&e);
    size_t total = coord_enc_end(&e);
    CHECK(total > 0);

    const msgpack_object_map *m = parse_frame(&buf, 0, total);
    CHECK(m && m->size == 7);
    CHECK(is_uint(get(m, "rid"), 77));
    CHECK(is_bool(get(m, "ok"), true));
    const msgpack_object *held = get(m, "held");
    CHECK(held && held->type == MSGPACK_OBJECT_ARRAY && held->via.array.size == 3);
    for (uint32_t i = 0; held && held->type == MSGPACK_OBJECT_ARRAY &&
                         i < held->via.array.size; i++) {
        const msgpack_object *h = &held->via.array.ptr[i];
        CHECK(h->type == MSGPACK_OBJECT_MAP && h->via.map.size == 3);
        if (h->type != MSGPACK_OBJECT_MAP)
            continue;
        const msgpack_object_map *hm = &h->via.map;
        CHECK(is_str(get(hm, "name"), "a\0b", 3));
        CHECK(is_str(get(hm, "mode"), i ? "shared" : "exclusive",
                     i ? 6 : 9));
        CHECK(is_uint(get(hm, "token"), (uint64_t)i << 32 | 5));
    }
    const msgpack_object *mx = get(m, "mixed");
    CHECK(mx && mx->type == MSGPACK_OBJECT_ARRAY && mx->via.array.size == 4);
    if (mx && mx->type == MSGPACK_OBJECT_ARRAY && mx->via.array.size == 4) {
        CHECK(is_int(&mx->via.array.ptr[0], -7));
        CHECK(mx->via.array.ptr[1].type == MSGPACK_OBJECT_NIL);
        CHECK(is_bool(&mx->via.array.ptr[2], true));
        const msgpack_object *in = &mx->via.array.ptr[3];
        CHECK(in->type == MSGPACK_OBJECT_ARRAY && in->via.array.size == 1 &&
              is_str(&in->via.array.ptr[0], "in", 2));
    }
    const msgpack_object *p = get(m, "pending");
    CHECK(p && p->type == MSGPACK_OBJECT_ARRAY && p->via.array.size == 0);
    const msgpack_object *em = get(m, "empty_map");
    CHECK(em && em->type == MSGPACK_OBJECT_MAP && em->via.map.size == 0);

    /* the nested error map through the field reader */
    coord_fields f, child;
    const msgpack_object_map *err = NULL;
    coord_bytes code;
    coord_fields_init(&f, m);
    CHECK(coord_field_map(&f, "error", true, &err));
    coord_fields_nested(&child, &f, "error", err);
    CHECK(coord_field_str(&child, "code", true, &code));
    CHECK(coord_bytes_eq(code, "TIMEOUT"));
    coord_buf_free(&buf);
}

static int count_frame(void *ud, const uint8_t *body, size_t len)
{
    int *n = ud;
    (*n)++;
    CHECK(coord_frame_validate(body, len, COORD_MAX_DEPTH) == COORD_FRAME_OK);
    return 0;
}

static void test_helpers(void)
{
    coord_buf buf;
    coord_enc e;
    coord_buf_init(&buf);

    /* error reply with a message */
    size_t n1 = coord_enc_error(&buf, 9, COORD_EFENCED, "stale generation");
    CHECK(n1 > 0 && n1 == buf.len);
    const msgpack_object_map *m = parse_frame(&buf, 0, n1);
    CHECK(m && m->size == 4);
    CHECK(is_uint(get(m, "rid"), 9));
    CHECK(is_bool(get(m, "ok"), false));
    CHECK(is_str(get(m, "code"), "FENCED", 6));
    CHECK(is_str(get(m, "message"), "stale generation", 16));

    /* NULL message: the code's own text; appended after the first frame */
    size_t n2 = coord_enc_error(&buf, 0, COORD_EBAD_FRAME, NULL);
    CHECK(n2 > 0 && n1 + n2 == buf.len);
    m = parse_frame(&buf, n1, n2);
    const char *text = coord_code_text(COORD_EBAD_FRAME);
    CHECK(is_uint(get(m, "rid"), 0));
    CHECK(is_str(get(m, "code"), "BAD_FRAME", 9));
    CHECK(is_str(get(m, "message"), text, strlen(text)));

    /* a code with no wire name still yields a code the wire knows */
    size_t n3 = coord_enc_error(&buf, 3, COORD_ENOMEM, "x");
    CHECK(n3 > 0);
    m = parse_frame(&buf, n1 + n2, n3);
    const msgpack_object *c = m ? get(m, "code") : NULL;
    CHECK(c && c->type == MSGPACK_OBJECT_STR &&
          coord_code_from_name(c->via.str.ptr, c->via.str.size) != COORD_EUNKNOWN);

    /* reply */
    size_t off = buf.len;
    coord_enc_reply_begin(&e, &buf, UINT64_MAX);
    coord_enc_kv_bool(&e, "granted", true);
    coord_enc_kv_uint(&e, "lock", 12);
    size_t n4 = coord_enc_end(&e);
    CHECK(n4 > 0 && off + n4 == buf.len);
    m = parse_frame(&buf, off, n4);
    CHECK(m && m->size == 4);
    CHECK(is_uint(get(m, "rid"), UINT64_MAX));
    CHECK(is_bool(get(m, "ok"), true));
    CHECK(is_bool(get(m, "granted"), true));
    CHECK(is_uint(get(m, "lock"), 12));

    /* event */
    off = buf.len;
    coord_enc_event_begin(&e, &buf, "lock.lost");
    coord_enc_kv_uint(&e, "lock", 12);
    coord_enc_kv_cstr(&e, "reason", "stolen");
    size_t n5 = coord_enc_end(&e);
    m = parse_frame(&buf, off, n5);
    CHECK(m && m->size == 3);
    CHECK(is_str(get(m, "ev"), "lock.lost", 9));
    CHECK(m && coord_map_find(m, "rid") == NULL);
    CHECK(is_str(get(m, "reason"), "stolen", 6));

    /* an empty reply {rid, ok} */
    off = buf.len;
    coord_enc_reply_begin(&e, &buf, 1);
    size_t n6 = coord_enc_end(&e);
    m = parse_frame(&buf, off, n6);
    CHECK(m && m->size == 2);

    /* all these frames, fed as one stream, come out one by one */
    CHECK_EQ(n1 + n2 + n3 + n4 + n5 + n6, buf.len);
    coord_frame_reader r;
    int frames = 0;
    coord_frame_reader_init(&r, 0);
    CHECK_EQ(coord_frame_feed(&r, buf.data, buf.len, count_frame, &frames),
             COORD_FRAME_OK);
    CHECK_EQ(frames, 6);
    coord_frame_reader_free(&r);
    coord_buf_free(&buf);
}

static void test_depth_refused(void)
{
    coord_buf buf;
    coord_enc e;
    coord_buf_init(&buf);
    CHECK(coord_buf_append(&buf, "xyz", 3) == 0);

    /* top map (1) -> map (2) -> array (3) -> map (4): refused */
    coord_enc_begin(&e, &buf);
    coord_enc_kv_uint(&e, "rid", 1);
    coord_enc_key(&e, "a");
    coord_enc_map_begin(&e);
    coord_enc_key(&e, "b");
    coord_enc_array_begin(&e);
    coord_enc_map_begin(&e);
    coord_enc_kv_uint(&e, "c", 1);
    coord_enc_map_end(&e);
    coord_enc_array_end(&e);
    coord_enc_map_end(&e);
    CHECK_EQ(coord_enc_end(&e), 0);
    CHECK_EQ(buf.len, 3);
    CHECK_MEM(buf.data, "xyz", 3);

    /* arrays all the way down, never closed */
    coord_enc_begin(&e, &buf);
    coord_enc_key(&e, "a");
    for (int i = 0; i < 10; i++)
        coord_enc_array_begin(&e);
    CHECK_EQ(coord_enc_end(&e), 0);
    CHECK_EQ(buf.len, 3);

    /* unbalanced: a container left open, or one closed too many */
    coord_enc_begin(&e, &buf);
    coord_enc_key(&e, "a");
    coord_enc_map_begin(&e);
    CHECK_EQ(coord_enc_end(&e), 0);
    CHECK_EQ(buf.len, 3);
    coord_enc_begin(&e, &buf);
    coord_enc_map_end(&e);
    CHECK_EQ(coord_enc_end(&e), 0);
    CHECK_EQ(buf.len, 3);

    /* abort drops the frame under construction */
    coord_enc_begin(&e, &buf);
    coord_enc_kv_cstr(&e, "op", "ping");
    CHECK(buf.len > 3);
    coord_enc_abort(&e);
    CHECK_EQ(buf.len, 3);
    CHECK_MEM(buf.data, "xyz", 3);

    /* the buffer still works afterwards: depth 3 exactly is fine */
    coord_enc_begin(&e, &buf);
    coord_enc_key(&e, "a");
    coord_enc_array_begin(&e);
    coord_enc_map_begin(&e);
    coord_enc_kv_uint(&e, "c", 1);
    coord_enc_map_end(&e);
    coord_enc_array_end(&e);
    size_t total = coord_enc_end(&e);
    CHECK(total > 0 && buf.len == 3 + total);
    CHECK(parse_frame(&buf, 3, total) != NULL);
    coord_buf_free(&buf);
}

/* A map16 holds at most 65535 keys: more fails cleanly. */
static void test_map_too_big(void)
{
    coord_buf buf;
    coord_enc e;
    coord_buf_init(&buf);
    coord_enc_begin(&e, &buf);
    coord_enc_key(&e, "m");
    coord_enc_map_begin(&e);
    for (int i = 0; i < 65536; i++)
        coord_enc_kv_uint(&e, "k", 1);
    coord_enc_map_end(&e);
    CHECK_EQ(coord_enc_end(&e), 0);
    CHECK_EQ(buf.len, 0);

    coord_enc_begin(&e, &buf);
    for (int i = 0; i < 65535; i++)
        coord_enc_kv_uint(&e, "k", 1);
    size_t total = coord_enc_end(&e);
    CHECK(total > 0);
    const msgpack_object_map *m = parse_frame(&buf, 0, total);
    CHECK(m && m->size == 65535);
    coord_buf_free(&buf);
}

static void test_buf(void)
{
    coord_buf b;
    coord_buf_init(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
    CHECK(coord_buf_append(&b, "hello ", 6) == 0);
    CHECK(coord_buf_append(&b, "world", 5) == 0);
    CHECK(coord_buf_append(&b, NULL, 0) == 0);
    CHECK_EQ(b.len, 11);
    CHECK_MEM(b.data, "hello world", 11);
    CHECK(coord_buf_reserve(&b, 10000) == 0);
    CHECK(b.cap - b.len >= 10000);
    CHECK_EQ(b.len, 11);
    coord_buf_consume(&b, 6);
    CHECK_EQ(b.len, 5);
    CHECK_MEM(b.data, "world", 5);
    coord_buf_consume(&b, 100);
    CHECK_EQ(b.len, 0);
    bool ok = true;
    for (int i = 0; i < 100000 && ok; i++)
        ok = coord_buf_append(&b, "ab", 2) == 0;
    CHECK(ok);
    CHECK_EQ(b.len, 200000);
    CHECK(b.data[199998] == 'a' && b.data[199999] == 'b');
    coord_buf_free(&b);
    CHECK(b.data == NULL && b.len == 0 && b.cap == 0);
    coord_buf_free(&b);
}

/* Strict UTF-8: what a client's str decoder accepts, and nothing else. */
static void test_utf8(void)
{
    static const struct { const char *s; size_t n; bool ok; } v[] = {
        { "", 0, true }, { "abc", 3, true }, { "caf\xc3\xa9", 5, true },
        { "\xe2\x82\xac", 3, true }, { "\xf0\x9f\x98\x80", 4, true },
        { "\xf4\x8f\xbf\xbf", 4, true },            /* U+10FFFF */
        { "a\0b", 3, true },                          /* NUL is a code point */
        { "\xff\xfe", 2, false }, { "\x80", 1, false }, { "\xc3", 1, false },
        { "\xc0\xaf", 2, false }, { "\xc1\xbf", 2, false },  /* overlong */
        { "\xe0\x80\xaf", 3, false }, { "\xf0\x80\x80\xaf", 4, false },
        { "\xed\xa0\x80", 3, false },                /* surrogate U+D800 */
        { "\xed\xbf\xbf", 3, false },                /* surrogate U+DFFF */
        { "\xf4\x90\x80\x80", 4, false },            /* above U+10FFFF */
        { "\xe2\x82", 2, false }, { "\xe2\x28\xa1", 3, false },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        CHECK_MSG(coord_utf8_valid((const uint8_t *)v[i].s, v[i].n) == v[i].ok, "vector %zu", i);
    /* names: str when valid, bin otherwise */
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_name(&e, "a", "ok", 2);
    coord_enc_kv_name(&e, "b", "\xff\xfe", 2);
    CHECK(coord_enc_end(&e) > 0);
    CHECK_EQ(coord_msg_parse(&msg, b.data + 4, b.len - 4), COORD_FRAME_OK);
    CHECK(coord_map_find(msg.map, "a")->type == MSGPACK_OBJECT_STR);
    CHECK(coord_map_find(msg.map, "b")->type == MSGPACK_OBJECT_BIN);
    coord_buf_free(&b);
}

/* A mark and a rollback remove a list entry as if it was never written. */
static void test_rollback(void)
{
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_key(&e, "list");
    coord_enc_array_begin(&e);
    coord_enc_uint(&e, 1);
    coord_enc_mark m = coord_enc_mark_here(&e);
    size_t before = coord_enc_size(&e);
    coord_enc_map_begin(&e);
    coord_enc_kv_cstr(&e, "name", "dropped");
    coord_enc_map_end(&e);
    CHECK(coord_enc_size(&e) > before);
    coord_enc_rollback(&e, &m);
    CHECK_EQ(coord_enc_size(&e), before);
    coord_enc_uint(&e, 2);
    coord_enc_array_end(&e);
    CHECK(coord_enc_end(&e) > 0);
    CHECK_EQ(coord_msg_parse(&msg, b.data + 4, b.len - 4), COORD_FRAME_OK);
    const msgpack_object *l = coord_map_find(msg.map, "list");
    CHECK(l && l->type == MSGPACK_OBJECT_ARRAY && l->via.array.size == 2);
    CHECK(l && l->via.array.ptr[1].via.u64 == 2);
    coord_buf_free(&b);
}

/* coord_enc_request: a request built without its rid becomes the frame a
 * direct encoding with the rid first would give, byte for byte, for every
 * size of rid; the fields stay usable; bad input writes nothing.  The op
 * names come from coord-ops.h, whose look-ups must round-trip. */
static void test_request(void)
{
    for (int i = 0; i < COORD_OP_COUNT; i++) {
        const char *n = coord_op_name((enum coord_op)i);
        CHECK_MSG(n && coord_op_from_name(n, strlen(n)) == i, "op %d", i);
    }
    for (int i = 0; i < COORD_EV_COUNT; i++) {
        const char *n = coord_event_name((enum coord_event)i);
        CHECK_MSG(n && coord_event_from_name(n, strlen(n)) == i, "event %d", i);
    }
    CHECK(coord_op_name(COORD_OP_COUNT) == NULL);
    CHECK(coord_op_from_name("lock.acquir", 11) == -1);
    CHECK(coord_op_from_name("lock.acquire\0", 13) == -1);
    CHECK(coord_event_from_name("", 0) == -1);

    const char *op = coord_op_name(COORD_OP_LOCK_ACQUIRE);
    coord_buf fb, out, want;
    coord_enc f, w;
    coord_buf_init(&fb);
    coord_buf_init(&out);
    coord_buf_init(&want);
    coord_enc_begin(&f, &fb);
    coord_enc_kv_cstr(&f, "op", op);
    coord_enc_kv_name(&f, "name", "a\0b", 3);
    coord_enc_key(&f, "list");
    coord_enc_array_begin(&f);
    coord_enc_uint(&f, 7);
    coord_enc_array_end(&f);
    for (size_t k = 0; k < sizeof uints / sizeof uints[0]; k++) {
        coord_buf_append(&out, "xy", 2);           /* appended after these */
        size_t total = coord_enc_request(&out, &f, uints[k]);
        want.len = 0;
        coord_enc_begin(&w, &want);
        coord_enc_kv_uint(&w, "rid", uints[k]);
        coord_enc_kv_cstr(&w, "op", op);
        coord_enc_kv_name(&w, "name", "a\0b", 3);
        coord_enc_key(&w, "list");
        coord_enc_array_begin(&w);
        coord_enc_uint(&w, 7);
        coord_enc_array_end(&w);
        size_t wtotal = coord_enc_end(&w);
        CHECK_MSG(total == wtotal && total > 0, "rid %" PRIu64, uints[k]);
        CHECK_MSG(out.len == 2 + total && memcmp(out.data, "xy", 2) == 0 &&
                  memcmp(out.data + 2, want.data, wtotal) == 0,
                  "rid %" PRIu64, uints[k]);
        const msgpack_object_map *m = parse_frame(&out, 2, total);
        CHECK(m && m->size == 4);
        CHECK(is_uint(get(m, "rid"), uints[k]));
        CHECK(is_str(get(m, "op"), op, strlen(op)));
        out.len = 0;
    }
    /* fields added afterwards travel in the next frame */
    coord_enc_kv_bool(&f, "steal", true);
    size_t total = coord_enc_request(&out, &f, 9);
    const msgpack_object_map *m = parse_frame(&out, 0, total);
    CHECK(m && m->size == 5);
    CHECK(is_bool(get(m, "steal"), true));
    CHECK(is_uint(get(m, "rid"), 9));

    /* refused: fields not at the top map, failed, or out's own buffer */
    out.len = 0;
    coord_enc_key(&f, "inner");
    coord_enc_map_begin(&f);
    CHECK_EQ(coord_enc_request(&out, &f, 1), 0);
    CHECK_EQ(out.len, 0);
    coord_enc_map_end(&f);
    CHECK_EQ(coord_enc_request(&fb, &f, 1), 0);
    f.failed = true;
    CHECK_EQ(coord_enc_request(&out, &f, 1), 0);
    CHECK_EQ(out.len, 0);

    /* a map of 65535 keys has no room for the rid */
    coord_enc big;
    coord_buf_free(&fb);
    coord_enc_begin(&big, &fb);
    for (unsigned k = 0; k < 0xffff; k++)
        coord_enc_kv_uint(&big, "k", k);
    CHECK(!big.failed);
    CHECK_EQ(coord_enc_request(&out, &big, 1), 0);
    CHECK_EQ(out.len, 0);

    coord_buf_free(&fb);
    coord_buf_free(&out);
    coord_buf_free(&want);
}

/* The one-go replies and caller-written pairs make the very bytes of the
 * general path (the broker's hot path uses them: no client may see a
 * difference), for every size of rid and value. */
static void test_reply_fast_paths(void)
{
    for (size_t i = 0; i < sizeof uints / sizeof uints[0]; i++) {
        uint64_t rid = uints[i] ? uints[i] : 1, v = uints[sizeof uints / sizeof uints[0] - 1 - i];
        coord_buf a, b;
        coord_buf_init(&a);
        coord_buf_init(&b);
        coord_enc e;
        coord_enc_reply_begin(&e, &a, rid);
        size_t na = coord_enc_end(&e);
        size_t nb = coord_enc_reply_ok(&b, rid);
        CHECK(na > 0 && na == nb && a.len == b.len && memcmp(a.data, b.data, a.len) == 0);

        /* {rid, ok, granted, lock, token} three ways */
        a.len = b.len = 0;
        coord_enc_reply_begin(&e, &a, rid);
        coord_enc_kv_bool(&e, "granted", true);
        coord_enc_kv_uint(&e, "lock", v);
        coord_enc_kv_uint(&e, "token", rid);
        na = coord_enc_end(&e);
        uint8_t pairs[64], *p = pairs;
        memcpy(p, "\xa7" "granted" "\xc3" "\xa4" "lock", 14);
        p = coord_put_uint(p + 14, v);
        memcpy(p, "\xa5" "token", 6);
        p = coord_put_uint(p + 6, rid);
        nb = coord_enc_reply_with(&b, rid, pairs, (size_t)(p - pairs), 3);
        CHECK(na > 0 && na == nb && a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        b.len = 0;
        coord_enc_reply_begin(&e, &b, rid);
        uint8_t *q = coord_enc_pairs_begin(&e, sizeof pairs);
        CHECK(q != NULL);
        if (q) {
            memcpy(q, pairs, (size_t)(p - pairs));
            coord_enc_pairs_end(&e, q + (p - pairs), 3);
        }
        nb = coord_enc_end(&e);
        CHECK(na == nb && a.len == b.len && memcmp(a.data, b.data, a.len) == 0);
        const msgpack_object_map *m = parse_frame(&b, 0, nb);
        CHECK(is_uint(get(m, "rid"), rid) && is_bool(get(m, "ok"), true) &&
              is_bool(get(m, "granted"), true) && is_uint(get(m, "lock"), v) &&
              is_uint(get(m, "token"), rid));
        coord_buf_free(&a);
        coord_buf_free(&b);
    }
    /* pairs outside a map: refused, the caller takes the kv shorthands */
    coord_buf a;
    coord_buf_init(&a);
    coord_enc e;
    coord_enc_begin(&e, &a);
    coord_enc_key(&e, "list");
    coord_enc_array_begin(&e);
    CHECK(coord_enc_pairs_begin(&e, 16) == NULL);
    coord_enc_array_end(&e);
    CHECK(coord_enc_end(&e) > 0);
    coord_buf_free(&a);
}

int main(void)
{
    if (coord_msg_init(&msg) != 0)
        return 1;
    test_scalars();
    test_big_values();
    test_nested();
    test_helpers();
    test_depth_refused();
    test_map_too_big();
    test_buf();
    test_utf8();
    test_rollback();
    test_request();
    test_reply_fast_paths();
    coord_msg_destroy(&msg);
    return check_report("test_enc");
}
