/* test_msg.c - unit tests of coord_msg_parse and the typed field accessors
 * (coord_fields): present, missing, wrong type, nil, and the error texts. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "enc.h"
#include "frame.h"
#include "msg.h"

/* A byte literal and its size.  It lives only as long as the enclosing
 * block (a CHECK's own block!): parse with it only for the status. */
#define B(...) ((const uint8_t[]){ __VA_ARGS__ }), sizeof((const uint8_t[]){ __VA_ARGS__ })

/* A message for the tests, built with raw MessagePack so every type and
 * every odd value is exactly what we say:
 *   {rid: 7, neg: -1, s: "ab\0c", b: bin "xy", t: true, f: false, nil: nil,
 *    big: uint64 max, m: {code: "FENCED", n: 3}, a: [1], fl: 1.5 (float64),
 *    str8: "" (str8 empty), i8: int8 5} */
static const uint8_t sample[] = {
    0x8d,
    0xa3, 'r', 'i', 'd', 0x07,
    0xa3, 'n', 'e', 'g', 0xff,
    0xa1, 's', 0xa4, 'a', 'b', 0x00, 'c',
    0xa1, 'b', 0xc4, 0x02, 'x', 'y',
    0xa1, 't', 0xc3,
    0xa1, 'f', 0xc2,
    0xa3, 'n', 'i', 'l', 0xc0,
    0xa3, 'b', 'i', 'g', 0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xa1, 'm', 0x82, 0xa4, 'c', 'o', 'd', 'e', 0xa6, 'F', 'E', 'N', 'C', 'E', 'D',
                     0xa1, 'n', 0x03,
    0xa1, 'a', 0x91, 0x01,
    0xa2, 'f', 'l', 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0,
    0xa4, 's', 't', 'r', '8', 0xd9, 0x00,
    0xa2, 'i', '8', 0xd0, 0x05,
};

static coord_msg msg;

static const msgpack_object_map *parse_sample(void)
{
    int st = coord_msg_parse(&msg, sample, sizeof sample);
    CHECK_EQ(st, COORD_FRAME_OK);
    return st == COORD_FRAME_OK ? msg.map : NULL;
}

static bool in_sample(const uint8_t *p, size_t n)
{
    return p >= sample && p + n <= sample + sizeof sample;
}

static void test_parse(void)
{
    const msgpack_object_map *map = parse_sample();
    CHECK(map != NULL);
    if (!map)
        return;
    CHECK_EQ(map->size, 13);
    CHECK(msg.root.type == MSGPACK_OBJECT_MAP);
    CHECK(coord_map_find(map, "rid") != NULL);
    CHECK(coord_map_find(map, "ri") == NULL);         /* no prefix match */
    CHECK(coord_map_find(map, "ridx") == NULL);
    CHECK(coord_map_find(map, "") == NULL);
    CHECK(coord_map_find(map, "RID") == NULL);        /* byte for byte */

    /* the empty key is a key like any other */
    static const uint8_t empty_key[] = { 0x82, 0xa0, 0x02, 0xa1, 'a', 0x01 };
    CHECK_EQ(coord_msg_parse(&msg, empty_key, sizeof empty_key), COORD_FRAME_OK);
    const msgpack_object *ek = coord_map_find(msg.map, "");
    CHECK(ek && ek->type == MSGPACK_OBJECT_POSITIVE_INTEGER && ek->via.u64 == 2);
    CHECK(coord_map_find(msg.map, "b") == NULL);
    map = parse_sample();
    CHECK(map && coord_map_find(map, "") == NULL);

    /* errors pass through with their status */
    CHECK_EQ(coord_msg_parse(&msg, B(0x91, 0x01)), COORD_FRAME_NOT_MAP);
    CHECK_EQ(coord_msg_parse(&msg, B(0x81, 0x01, 0x01)), COORD_FRAME_KEY_NOT_STRING);
    CHECK_EQ(coord_msg_parse(&msg, B(0x80, 0x01)), COORD_FRAME_TRAILING);
    CHECK_EQ(coord_msg_parse(&msg, B(0x81, 0xa1)), COORD_FRAME_TRUNCATED);
    CHECK_EQ(coord_msg_parse(&msg, B(0x81, 0xa1, 'a', 0xc1)), COORD_FRAME_INVALID);
    CHECK_EQ(coord_msg_parse(&msg, NULL, 0), COORD_FRAME_EMPTY);

    /* the same coord_msg serves frame after frame */
    for (int i = 0; i < 1000; i++) {
        uint8_t one[] = { 0x81, 0xa3, 'r', 'i', 'd', 0xcd, (uint8_t)(i >> 8), (uint8_t)i };
        CHECK_EQ(coord_msg_parse(&msg, one, sizeof one), COORD_FRAME_OK);
        coord_fields f;
        uint64_t rid = 0;
        coord_fields_init(&f, msg.map);
        CHECK(coord_field_uint(&f, "rid", true, &rid));
        CHECK_EQ_U(rid, (uint64_t)i);
    }
    CHECK(parse_sample() != NULL);
    CHECK_EQ(msg.map->size, 13);
}

static void test_uint(void)
{
    const msgpack_object_map *map = parse_sample();
    coord_fields f;
    uint64_t v = 12345;

    coord_fields_init(&f, map);
    CHECK(coord_field_uint(&f, "rid", true, &v));
    CHECK_EQ_U(v, 7);
    CHECK(coord_field_uint(&f, "big", true, &v));
    CHECK_EQ_U(v, UINT64_MAX);
    CHECK(coord_field_uint(&f, "i8", true, &v));        /* int8 holding 5 */
    CHECK_EQ_U(v, 5);
    CHECK(!f.failed);
    CHECK_STR(f.err, "");

    /* missing, optional: false, no failure, out untouched */
    v = 99;
    CHECK(!coord_field_uint(&f, "timeout_ms", false, &v));
    CHECK(!f.failed);
    CHECK_EQ_U(v, 99);

    /* missing, required */
    coord_fields_init(&f, map);
    CHECK(!coord_field_uint(&f, "lock", true, &v));
    CHECK(f.failed);
    CHECK_STR(f.err, "lock: missing");

    /* wrong types */
    static const char *wrong[] = { "s", "b", "t", "m", "a", "fl" };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        char want[64];
        coord_fields_init(&f, map);
        CHECK(!coord_field_uint(&f, wrong[i], false, &v));
        CHECK(f.failed);
        snprintf(want, sizeof want, "%s: expected unsigned integer", wrong[i]);
        CHECK_STR(f.err, want);
    }

    /* negative ints are refused, also when optional */
    coord_fields_init(&f, map);
    CHECK(!coord_field_uint(&f, "neg", false, &v));
    CHECK(f.failed);
    CHECK_STR(f.err, "neg: expected unsigned integer");
    static const uint8_t neg_rid[] = { 0x81, 0xa3, 'r', 'i', 'd', 0xd3, 0x80, 0,
                                       0, 0, 0, 0, 0, 0 };
    CHECK_EQ(coord_msg_parse(&msg, neg_rid, sizeof neg_rid), COORD_FRAME_OK);
    coord_fields_init(&f, msg.map);
    CHECK(!coord_field_uint(&f, "rid", true, &v));
    CHECK_STR(f.err, "rid: expected unsigned integer");
}

static void test_nil_is_absent(void)
{
    const msgpack_object_map *map = parse_sample();
    coord_fields f;
    uint64_t u = 1;
    bool b = true;
    coord_bytes s = { NULL, 0 };
    const msgpack_object_map *m = NULL;

    coord_fields_init(&f, map);
    CHECK(!coord_field_uint(&f, "nil", false, &u));
    CHECK(!coord_field_bool(&f, "nil", false, &b));
    CHECK(!coord_field_str(&f, "nil", false, &s));
    CHECK(!coord_field_bin(&f, "nil", false, &s));
    CHECK(!coord_field_map(&f, "nil", false, &m));
    CHECK(!f.failed);
    CHECK_EQ_U(u, 1);
    CHECK(b == true);

    coord_fields_init(&f, map);
    CHECK(!coord_field_str(&f, "nil", true, &s));
    CHECK(f.failed);
    CHECK_STR(f.err, "nil: missing");

    /* the rid: nil case of a real request */
    static const uint8_t nil_rid[] = { 0x82, 0xa2, 'o', 'p', 0xa4, 'p', 'i', 'n',
                                       'g', 0xa3, 'r', 'i', 'd', 0xc0 };
    CHECK_EQ(coord_msg_parse(&msg, nil_rid, sizeof nil_rid), COORD_FRAME_OK);
    coord_fields_init(&f, msg.map);
    CHECK(!coord_field_uint(&f, "rid", true, &u));
    CHECK_STR(f.err, "rid: missing");
}

static void test_bool(void)
{
    const msgpack_object_map *map = parse_sample();
    coord_fields f;
    bool v = false;

    coord_fields_init(&f, map);
    CHECK(coord_field_bool(&f, "t", true, &v));
    CHECK(v == true);
    CHECK(coord_field_bool(&f, "f", true, &v));
    CHECK(v == false);
    CHECK(!f.failed);

    v = true;
    CHECK(!coord_field_bool(&f, "if_available", false, &v));
    CHECK(!f.failed);
    CHECK(v == true);
    CHECK(!coord_field_bool(&f, "steal", true, &v));
    CHECK_STR(f.err, "steal: missing");

    /* 1 is not a boolean */
    coord_fields_init(&f, map);
    CHECK(!coord_field_bool(&f, "rid", false, &v));
    CHECK_STR(f.err, "rid: expected boolean");
    coord_fields_init(&f, map);
    CHECK(!coord_field_bool(&f, "s", true, &v));
    CHECK_STR(f.err, "s: expected boolean");
}

static void test_str_bin(void)
{
    const msgpack_object_map *map = parse_sample();
    coord_fields f;
    coord_bytes v;

    coord_fields_init(&f, map);
    /* str with a NUL inside: the length carries it */
    CHECK(coord_field_str(&f, "s", true, &v));
    CHECK_EQ(v.len, 4);
    CHECK_MEM(v.ptr, "ab\0c", 4);
    CHECK(in_sample(v.ptr, v.len));          /* points into the frame */
    /* a bin is accepted as a str (names may be any bytes) */
    CHECK(coord_field_str(&f, "b", true, &v));
    CHECK_EQ(v.len, 2);
    CHECK_MEM(v.ptr, "xy", 2);
    CHECK(in_sample(v.ptr, v.len));
    /* and a str as a bin */
    CHECK(coord_field_bin(&f, "s", true, &v));
    CHECK_EQ(v.len, 4);
    CHECK(coord_field_bin(&f, "b", true, &v));
    CHECK_MEM(v.ptr, "xy", 2);
    /* empty str8: length 0 and a usable pointer (msgpack-c has NULL there,
     * and memcpy/memcmp with NULL is undefined even for 0 bytes) */
    CHECK(coord_field_str(&f, "str8", true, &v));
    CHECK_EQ(v.len, 0);
    CHECK(v.ptr != NULL);
    CHECK(coord_field_bin(&f, "str8", true, &v));
    CHECK(v.ptr != NULL && v.len == 0);
    /* {"": ""}: msgpack-c gives both strs a NULL ptr (a later empty fixstr
     * gets a stale pointer into the frame instead) */
    static const uint8_t empty_fixstr[] = { 0x81, 0xa0, 0xa0 };
    CHECK_EQ(coord_msg_parse(&msg, empty_fixstr, sizeof empty_fixstr), COORD_FRAME_OK);
    coord_fields_init(&f, msg.map);
    CHECK(coord_field_str(&f, "", true, &v));
    CHECK(v.ptr != NULL && v.len == 0);
    CHECK(coord_field_bin(&f, "", true, &v));
    CHECK(v.ptr != NULL && v.len == 0);
    CHECK(!f.failed);
    map = parse_sample();
    CHECK(!f.failed);

    /* missing */
    CHECK(!coord_field_str(&f, "scope", false, &v));
    CHECK(!f.failed);
    CHECK(!coord_field_str(&f, "name", true, &v));
    CHECK_STR(f.err, "name: missing");
    coord_fields_init(&f, map);
    CHECK(!coord_field_bin(&f, "result", true, &v));
    CHECK_STR(f.err, "result: missing");

    /* wrong types: each getter names its own expectation */
    coord_fields_init(&f, map);
    CHECK(!coord_field_str(&f, "rid", true, &v));
    CHECK_STR(f.err, "rid: expected string");
    coord_fields_init(&f, map);
    CHECK(!coord_field_str(&f, "m", false, &v));
    CHECK_STR(f.err, "m: expected string");
    coord_fields_init(&f, map);
    CHECK(!coord_field_bin(&f, "t", true, &v));
    CHECK_STR(f.err, "t: expected binary");
    coord_fields_init(&f, map);
    CHECK(!coord_field_bin(&f, "a", false, &v));
    CHECK_STR(f.err, "a: expected binary");

    /* the protocol's example: mode sent as an integer */
    static const uint8_t int_mode[] = { 0x81, 0xa4, 'm', 'o', 'd', 'e', 0x01 };
    CHECK_EQ(coord_msg_parse(&msg, int_mode, sizeof int_mode), COORD_FRAME_OK);
    coord_fields_init(&f, msg.map);
    CHECK(!coord_field_str(&f, "mode", false, &v));
    CHECK_STR(f.err, "mode: expected string");
}

static void test_nested_map(void)
{
    const msgpack_object_map *map = parse_sample();
    coord_fields f, child;
    const msgpack_object_map *m = NULL;
    coord_bytes code;
    uint64_t n = 0;

    coord_fields_init(&f, map);
    CHECK(coord_field_map(&f, "m", true, &m));
    CHECK(m != NULL && m->size == 2);
    coord_fields_nested(&child, &f, "error", m);
    CHECK(coord_field_str(&child, "code", true, &code));
    CHECK(coord_bytes_eq(code, "FENCED"));
    CHECK(coord_field_uint(&child, "n", true, &n));
    CHECK_EQ_U(n, 3);
    CHECK(!child.failed);

    /* errors inside name the path */
    CHECK(!coord_field_str(&child, "message", true, &code));
    CHECK(child.failed);
    CHECK_STR(child.err, "error.message: missing");
    coord_fields_nested(&child, &f, "error", m);
    CHECK(!coord_field_str(&child, "n", true, &code));
    CHECK_STR(child.err, "error.n: expected string");
    CHECK(!f.failed);                       /* the parent is not touched */

    /* wrong type and missing for the map itself */
    coord_fields_init(&f, map);
    CHECK(!coord_field_map(&f, "a", true, &m));
    CHECK_STR(f.err, "a: expected map");
    coord_fields_init(&f, map);
    CHECK(!coord_field_map(&f, "error", true, &m));
    CHECK_STR(f.err, "error: missing");
    coord_fields_init(&f, map);
    CHECK(!coord_field_map(&f, "error", false, &m));
    CHECK(!f.failed);

    /* flight.fail as a client would send it, without error.code */
    static const uint8_t no_code[] = { 0x81, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x81,
                                       0xa7, 'm', 'e', 's', 's', 'a', 'g', 'e',
                                       0xa2, 'h', 'i' };
    CHECK_EQ(coord_msg_parse(&msg, no_code, sizeof no_code), COORD_FRAME_OK);
    coord_fields_init(&f, msg.map);
    CHECK(coord_field_map(&f, "error", true, &m));
    coord_fields_nested(&child, &f, "error", m);
    CHECK(!coord_field_str(&child, "code", true, &code));
    CHECK_STR(child.err, "error.code: missing");
}

static void test_first_error_kept(void)
{
    const msgpack_object_map *map = parse_sample();
    coord_fields f;
    uint64_t u;
    bool b;
    coord_bytes s;

    coord_fields_init(&f, map);
    CHECK(coord_field_uint(&f, "rid", true, &u));
    CHECK(!coord_field_bool(&f, "s", true, &b));        /* first problem */
    CHECK(!coord_field_str(&f, "missing", true, &s));   /* second */
    CHECK(coord_field_uint(&f, "rid", true, &u));       /* still reads */
    CHECK(f.failed);
    CHECK_STR(f.err, "s: expected boolean");

    /* coord_fields_fail for reasons other than type */
    coord_fields_init(&f, map);
    coord_fields_fail(&f, "name", "longer than 1024 bytes");
    CHECK(f.failed);
    CHECK_STR(f.err, "name: longer than 1024 bytes");
    coord_fields_fail(&f, "mode", "other");
    CHECK_STR(f.err, "name: longer than 1024 bytes");

    /* a very long key does not overflow the error text */
    char key[400];
    memset(key, 'k', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    coord_fields_init(&f, map);
    CHECK(!coord_field_uint(&f, key, true, &u));
    CHECK(f.failed);
    CHECK(strlen(f.err) < sizeof f.err);

    /* no map at all: every required field is missing */
    coord_fields_init(&f, NULL);
    CHECK(!coord_field_uint(&f, "rid", false, &u));
    CHECK(!f.failed);
    CHECK(!coord_field_uint(&f, "rid", true, &u));
    CHECK_STR(f.err, "rid: missing");
}

static void test_bytes_eq(void)
{
    coord_bytes b = { (const uint8_t *)"ping", 4 };
    CHECK(coord_bytes_eq(b, "ping"));
    CHECK(!coord_bytes_eq(b, "pin"));
    CHECK(!coord_bytes_eq(b, "pings"));
    CHECK(!coord_bytes_eq(b, "PING"));
    coord_bytes e = { NULL, 0 };
    CHECK(coord_bytes_eq(e, ""));
    CHECK(!coord_bytes_eq(e, "x"));
    coord_bytes nul = { (const uint8_t *)"a\0b", 3 };
    CHECK(!coord_bytes_eq(nul, "a"));
}

int main(void)
{
    if (coord_msg_init(&msg) != 0) {
        fprintf(stderr, "coord_msg_init failed\n");
        return 1;
    }
    test_parse();
    test_uint();
    test_nil_is_absent();
    test_bool();
    test_str_bin();
    test_nested_map();
    test_first_error_kept();
    test_bytes_eq();
    coord_msg_destroy(&msg);
    return check_report("test_msg");
}
