/* test_index.c - the broker's one-pass frame index (coord_frame_index) and
 * field reading from it: same verdicts as the validating walk, same field
 * values and errors as reading msgpack-c objects, nested maps, and maps
 * with more keys than the index holds. */
#include <stdlib.h>
#include "check.h"
#include "enc.h"
#include "frame.h"
#include "msg.h"

/* Encodes a frame with fill() and returns its body (into buf). */
static const uint8_t *body_of(coord_buf *buf, size_t *len, void (*fill)(coord_enc *e))
{
    coord_enc e;
    buf->len = 0;
    coord_enc_begin(&e, buf);
    fill(&e);
    size_t total = coord_enc_end(&e);
    *len = total - COORD_FRAME_HEADER;
    return buf->data + COORD_FRAME_HEADER;
}

static void fill_request(coord_enc *e)
{
    coord_enc_kv_cstr(e, "op", "flight.fail");
    coord_enc_kv_uint(e, "rid", 70000);
    coord_enc_kv_uint(e, "big", UINT64_MAX);
    coord_enc_key(e, "neg");
    coord_enc_int(e, -5);
    coord_enc_key(e, "neg16");
    coord_enc_int(e, -3000);
    coord_enc_kv_bool(e, "t", true);
    coord_enc_kv_bin(e, "blob", "\0\1\2", 3);
    coord_enc_key(e, "nil");
    coord_enc_nil(e);
    coord_enc_key(e, "error");
    coord_enc_map_begin(e);
    coord_enc_kv_cstr(e, "code", "E42");
    coord_enc_kv_uint(e, "n", 7);
    coord_enc_map_end(e);
    coord_enc_key(e, "list");
    coord_enc_array_begin(e);
    coord_enc_uint(e, 1);
    coord_enc_array_end(e);
    coord_enc_kv_cstr(e, "after", "tail");
}

static void test_fields(void)
{
    coord_buf buf;
    coord_buf_init(&buf);
    size_t len;
    const uint8_t *body = body_of(&buf, &len, fill_request);
    coord_index idx;
    CHECK_EQ(coord_frame_index(body, len, &idx), COORD_FRAME_OK);
    CHECK(idx.complete);
    CHECK_EQ(idx.n, 11);

    coord_fields f;
    coord_fields_init_index(&f, &idx);
    coord_bytes s;
    uint64_t u = 0;
    bool b = false;
    CHECK(coord_field_str(&f, "op", true, &s) && coord_bytes_eq(s, "flight.fail"));
    CHECK(coord_field_uint(&f, "rid", true, &u) && u == 70000);
    CHECK(coord_field_uint(&f, "big", true, &u) && u == UINT64_MAX);
    CHECK(coord_field_bool(&f, "t", true, &b) && b);
    CHECK(coord_field_bin(&f, "blob", true, &s) && s.len == 3 && s.ptr[2] == 2);
    CHECK(coord_field_str(&f, "after", true, &s) && coord_bytes_eq(s, "tail"));
    CHECK(!coord_field_uint(&f, "nil", false, &u));    /* nil is absent */
    CHECK(!f.failed);
    CHECK(!coord_field_uint(&f, "neg", true, &u));
    CHECK_STR(f.err, "neg: expected unsigned integer");

    coord_fields_init_index(&f, &idx);
    CHECK(!coord_field_uint(&f, "neg16", true, &u));
    CHECK(f.failed);
    coord_fields_init_index(&f, &idx);
    CHECK(!coord_field_uint(&f, "list", true, &u));
    CHECK_STR(f.err, "list: expected unsigned integer");
    coord_fields_init_index(&f, &idx);
    CHECK(!coord_field_str(&f, "missing", true, &s));
    CHECK_STR(f.err, "missing: missing");

    /* nested: error.code, error.n, and the error text of a missing one */
    coord_fields_init_index(&f, &idx);
    coord_index store;
    coord_fields child;
    CHECK(coord_field_nested(&f, "error", true, &store, &child));
    CHECK(coord_field_str(&child, "code", true, &s) && coord_bytes_eq(s, "E42"));
    CHECK(coord_field_uint(&child, "n", true, &u) && u == 7);
    CHECK(!coord_field_str(&child, "message", true, &s));
    CHECK_STR(child.err, "error.message: missing");
    coord_fields_init_index(&f, &idx);
    CHECK(!coord_field_nested(&f, "op", true, &store, &child));
    CHECK_STR(f.err, "op: expected map");
    coord_buf_free(&buf);
}

static void fill_many(coord_enc *e)
{
    char key[16];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        coord_enc_kv_uint(e, key, (uint64_t)i * 3);
    }
    coord_enc_key(e, "deep");
    coord_enc_map_begin(e);
    coord_enc_key(e, "inner");
    coord_enc_array_begin(e);
    coord_enc_uint(e, 1);
    coord_enc_array_end(e);
    coord_enc_map_end(e);
    coord_enc_kv_cstr(e, "last", "found");
}

/* More keys than the index holds: the rest are found by walking on. */
static void test_overflow(void)
{
    coord_buf buf;
    coord_buf_init(&buf);
    size_t len;
    const uint8_t *body = body_of(&buf, &len, fill_many);
    coord_index idx;
    CHECK_EQ(coord_frame_index(body, len, &idx), COORD_FRAME_OK);
    CHECK(!idx.complete);
    CHECK_EQ(idx.n, COORD_INDEX_MAX);
    coord_fields f;
    coord_fields_init_index(&f, &idx);
    uint64_t u = 0;
    for (int i = 0; i < 100; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        CHECK_MSG(coord_field_uint(&f, key, true, &u) && u == (uint64_t)i * 3, "%s", key);
    }
    coord_bytes s;
    CHECK(coord_field_str(&f, "last", true, &s) && coord_bytes_eq(s, "found"));
    coord_index store;
    coord_fields child;
    CHECK(coord_field_nested(&f, "deep", true, &store, &child));
    CHECK(!coord_field_str(&f, "k100", false, &s));
    CHECK(!f.failed);
    coord_buf_free(&buf);
}

/* The index gives the walk's verdict on every prefix of a frame and on
 * hand-made bad frames. */
static void test_same_verdicts(void)
{
    coord_buf buf;
    coord_buf_init(&buf);
    size_t len;
    const uint8_t *body = body_of(&buf, &len, fill_request);
    coord_index idx;
    for (size_t n = 1; n <= len; n++)
        CHECK_MSG(coord_frame_index(body, n, &idx) ==
                  coord_frame_validate(body, n, COORD_MAX_DEPTH), "prefix %zu", n);
    static const uint8_t bad[][6] = {
        { 0x93, 1, 2, 3 }, { 0x81, 0x01, 0x02 }, { 0x80, 0xc0 }, { 0x81, 0xa1, 'k', 0xc1 },
        { 0xdf, 0xff, 0xff, 0xff, 0xff }, { 0x81, 0xa1, 'a', 0x81, 0xa1, 'b' },
    };
    static const size_t bad_len[] = { 4, 3, 2, 4, 5, 6 };
    for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++)
        CHECK_MSG(coord_frame_index(bad[i], bad_len[i], &idx) ==
                  coord_frame_validate(bad[i], bad_len[i], COORD_MAX_DEPTH), "bad %zu", i);
    CHECK_EQ(coord_frame_index(bad[0], 4, &idx), COORD_FRAME_NOT_MAP);
    coord_buf_free(&buf);
}

int main(void)
{
    test_fields();
    test_overflow();
    test_same_verdicts();
    return check_report("test_index");
}
