/* test_validate.c - unit tests of the validating walk (coord_frame_validate):
 * every rejection with its own status, and every valid value type accepted. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "frame.h"
#include "msg.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#define B(...) ((const uint8_t[]){ __VA_ARGS__ }), sizeof((const uint8_t[]){ __VA_ARGS__ })

static int validate(const uint8_t *p, size_t n)
{
    return coord_frame_validate(p, n, COORD_MAX_DEPTH);
}

/* Validates a copy on the heap, so ASan sees any read past the end. */
static int validate_heap(const uint8_t *p, size_t n, int max_depth)
{
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    int st = coord_frame_validate(copy, n, max_depth);
    free(copy);
    return st;
}

/* One valid value, put in the map {"k": value}. */
struct value_case {
    const char *what;
    const uint8_t *bytes;
    size_t len;
    msgpack_object_type type;     /* what msgpack-c decodes it to */
};

#define V(what, type, ...) { what, B(__VA_ARGS__), type }

static const struct value_case values[] = {
    V("nil", MSGPACK_OBJECT_NIL, 0xc0),
    V("false", MSGPACK_OBJECT_BOOLEAN, 0xc2),
    V("true", MSGPACK_OBJECT_BOOLEAN, 0xc3),
    V("posfixint 0", MSGPACK_OBJECT_POSITIVE_INTEGER, 0x00),
    V("posfixint 127", MSGPACK_OBJECT_POSITIVE_INTEGER, 0x7f),
    V("negfixint -32", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xe0),
    V("negfixint -1", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xff),
    V("uint8", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xcc, 0xff),
    V("uint16", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xcd, 0xff, 0xfe),
    V("uint32", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xce, 0xff, 0xfe, 0xfd, 0xfc),
    V("uint64", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xcf, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff),
    V("int8", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd0, 0x80),
    V("int16", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd1, 0x80, 0x00),
    V("int32", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd2, 0x80, 0x00, 0x00, 0x00),
    V("int64", MSGPACK_OBJECT_NEGATIVE_INTEGER, 0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0),
    V("int8 positive", MSGPACK_OBJECT_POSITIVE_INTEGER, 0xd0, 0x05),
    V("float32", MSGPACK_OBJECT_FLOAT32, 0xca, 0x3f, 0x80, 0x00, 0x00),
    V("float64", MSGPACK_OBJECT_FLOAT64, 0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0),
    V("fixstr", MSGPACK_OBJECT_STR, 0xa3, 'a', 'b', 'c'),
    V("fixstr empty", MSGPACK_OBJECT_STR, 0xa0),
    V("str8", MSGPACK_OBJECT_STR, 0xd9, 0x03, 'a', 0, 'c'),
    V("str16", MSGPACK_OBJECT_STR, 0xda, 0x00, 0x03, 'a', 'b', 'c'),
    V("str32", MSGPACK_OBJECT_STR, 0xdb, 0x00, 0x00, 0x00, 0x03, 'a', 'b', 'c'),
    V("bin8", MSGPACK_OBJECT_BIN, 0xc4, 0x03, 1, 2, 3),
    V("bin8 empty", MSGPACK_OBJECT_BIN, 0xc4, 0x00),
    V("bin16", MSGPACK_OBJECT_BIN, 0xc5, 0x00, 0x03, 1, 2, 3),
    V("bin32", MSGPACK_OBJECT_BIN, 0xc6, 0x00, 0x00, 0x00, 0x03, 1, 2, 3),
    V("fixext1", MSGPACK_OBJECT_EXT, 0xd4, 0x01, 0xaa),
    V("fixext2", MSGPACK_OBJECT_EXT, 0xd5, 0x01, 0xaa, 0xbb),
    V("fixext4", MSGPACK_OBJECT_EXT, 0xd6, 0x01, 1, 2, 3, 4),
    V("fixext8", MSGPACK_OBJECT_EXT, 0xd7, 0x01, 1, 2, 3, 4, 5, 6, 7, 8),
    V("fixext16", MSGPACK_OBJECT_EXT, 0xd8, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 9,
      10, 11, 12, 13, 14, 15, 16),
    V("ext8", MSGPACK_OBJECT_EXT, 0xc7, 0x03, 0x05, 1, 2, 3),
    V("ext8 empty", MSGPACK_OBJECT_EXT, 0xc7, 0x00, 0x05),
    V("ext16", MSGPACK_OBJECT_EXT, 0xc8, 0x00, 0x03, 0x05, 1, 2, 3),
    V("ext32", MSGPACK_OBJECT_EXT, 0xc9, 0x00, 0x00, 0x00, 0x03, 0x05, 1, 2, 3),
    V("fixarray", MSGPACK_OBJECT_ARRAY, 0x93, 0x01, 0xa1, 'x', 0xc0),
    V("fixarray empty", MSGPACK_OBJECT_ARRAY, 0x90),
    V("array16", MSGPACK_OBJECT_ARRAY, 0xdc, 0x00, 0x02, 0x01, 0x02),
    V("array16 empty", MSGPACK_OBJECT_ARRAY, 0xdc, 0x00, 0x00),
    V("array32", MSGPACK_OBJECT_ARRAY, 0xdd, 0x00, 0x00, 0x00, 0x02, 0x01, 0x02),
    V("fixmap", MSGPACK_OBJECT_MAP, 0x81, 0xa1, 'a', 0x01),
    V("fixmap empty", MSGPACK_OBJECT_MAP, 0x80),
    V("map16", MSGPACK_OBJECT_MAP, 0xde, 0x00, 0x01, 0xa1, 'a', 0x01),
    V("map32", MSGPACK_OBJECT_MAP, 0xdf, 0x00, 0x00, 0x00, 0x01, 0xa1, 'a', 0x01),
    V("array of maps", MSGPACK_OBJECT_ARRAY, 0x92, 0x81, 0xa1, 'a', 0x01, 0x80),
};

#define NVALUES (sizeof values / sizeof values[0])

/* {"k": value} with a fixmap, a map16 or a map32 on top. */
static size_t wrap(uint8_t *out, int top, const struct value_case *v)
{
    size_t n = 0;
    if (top == 0) {
        out[n++] = 0x81;
    } else if (top == 1) {
        out[n++] = 0xde; out[n++] = 0; out[n++] = 1;
    } else {
        out[n++] = 0xdf; out[n++] = 0; out[n++] = 0; out[n++] = 0; out[n++] = 1;
    }
    out[n++] = 0xa1;
    out[n++] = 'k';
    memcpy(out + n, v->bytes, v->len);
    return n + v->len;
}

static void test_accepts_every_type(void)
{
    coord_msg m;
    CHECK(coord_msg_init(&m) == 0);
    for (size_t i = 0; i < NVALUES; i++) {
        for (int top = 0; top < 3; top++) {
            uint8_t buf[64];
            size_t n = wrap(buf, top, &values[i]);
            int st = validate_heap(buf, n, COORD_MAX_DEPTH);
            CHECK_MSG(st == COORD_FRAME_OK, "%s (top %d): %s", values[i].what,
                      top, coord_frame_status_text(st));
            /* and msgpack-c agrees, with the expected type */
            st = coord_msg_parse(&m, buf, n);
            CHECK_MSG(st == COORD_FRAME_OK, "parse %s: %s", values[i].what,
                      coord_frame_status_text(st));
            if (st == COORD_FRAME_OK) {
                const msgpack_object *o = coord_map_find(m.map, "k");
                CHECK_MSG(o && o->type == values[i].type, "type of %s",
                          values[i].what);
            }
        }
    }
    /* empty top-level maps of each width */
    CHECK_EQ(validate(B(0x80)), COORD_FRAME_OK);
    CHECK_EQ(validate(B(0xde, 0, 0)), COORD_FRAME_OK);
    CHECK_EQ(validate(B(0xdf, 0, 0, 0, 0)), COORD_FRAME_OK);
    /* several keys, in a map16 */
    CHECK_EQ(validate(B(0xde, 0, 2, 0xa1, 'a', 0x01, 0xa1, 'b', 0xc3)), COORD_FRAME_OK);
    coord_msg_destroy(&m);
}

/* Every strict prefix of a valid message is TRUNCATED (the empty one is
 * EMPTY). */
static void test_truncated_everywhere(void)
{
    for (size_t i = 0; i < NVALUES; i++) {
        for (int top = 0; top < 3; top++) {
            uint8_t buf[64];
            size_t n = wrap(buf, top, &values[i]);
            CHECK_EQ(validate_heap(buf, 0, COORD_MAX_DEPTH), COORD_FRAME_EMPTY);
            for (size_t cut = 1; cut < n; cut++) {
                int st = validate_heap(buf, cut, COORD_MAX_DEPTH);
                CHECK_MSG(st == COORD_FRAME_TRUNCATED,
                          "%s (top %d) cut at %zu/%zu: %s", values[i].what, top,
                          cut, n, coord_frame_status_text(st));
            }
        }
    }
    /* a realistic request with a map16 on top, as the encoder writes it */
    static const uint8_t req[] = {
        0xde, 0x00, 0x03,
        0xa2, 'o', 'p', 0xac, 'l', 'o', 'c', 'k', '.', 'a', 'c', 'q', 'u', 'i', 'r', 'e',
        0xa3, 'r', 'i', 'd', 0xcd, 0x01, 0x00,
        0xa4, 'n', 'a', 'm', 'e', 0xc4, 0x02, 'x', 0x00,
    };
    CHECK_EQ(validate(req, sizeof req), COORD_FRAME_OK);
    for (size_t cut = 1; cut < sizeof req; cut++) {
        int st = validate_heap(req, cut, COORD_MAX_DEPTH);
        CHECK_MSG(st == COORD_FRAME_TRUNCATED, "request cut at %zu: %s", cut,
                  coord_frame_status_text(st));
    }
}

static void test_not_map(void)
{
    CHECK_EQ(validate(B(0x91, 0x01)), COORD_FRAME_NOT_MAP);          /* array */
    CHECK_EQ(validate(B(0xdc, 0x00, 0x00)), COORD_FRAME_NOT_MAP);    /* array16 */
    CHECK_EQ(validate(B(0xa1, 'a')), COORD_FRAME_NOT_MAP);           /* str */
    CHECK_EQ(validate(B(0x01)), COORD_FRAME_NOT_MAP);                /* int */
    CHECK_EQ(validate(B(0xc0)), COORD_FRAME_NOT_MAP);                /* nil */
    CHECK_EQ(validate(B(0xc3)), COORD_FRAME_NOT_MAP);                /* true */
    CHECK_EQ(validate(B(0xcb, 0, 0, 0, 0, 0, 0, 0, 0)), COORD_FRAME_NOT_MAP);
    CHECK_EQ(validate(B(0xc4, 0x00)), COORD_FRAME_NOT_MAP);          /* bin */
    CHECK_EQ(validate(B(0xd4, 0x01, 0x00)), COORD_FRAME_NOT_MAP);    /* fixext */
    CHECK_EQ(validate(B(0xd9)), COORD_FRAME_NOT_MAP);                /* cut str8 */
}

static void test_key_not_string(void)
{
    /* top level: int, nil, bin, array, map as key */
    CHECK_EQ(validate(B(0x81, 0x01, 0x01)), COORD_FRAME_KEY_NOT_STRING);
    CHECK_EQ(validate(B(0x81, 0xc0, 0x01)), COORD_FRAME_KEY_NOT_STRING);
    CHECK_EQ(validate(B(0x81, 0xc4, 0x01, 'a', 0x01)), COORD_FRAME_KEY_NOT_STRING);
    CHECK_EQ(validate(B(0x81, 0x90, 0x01)), COORD_FRAME_KEY_NOT_STRING);
    CHECK_EQ(validate(B(0x81, 0x80, 0x01)), COORD_FRAME_KEY_NOT_STRING);
    /* second key of the top map */
    CHECK_EQ(validate(B(0x82, 0xa1, 'a', 0x01, 0x02, 0x03)), COORD_FRAME_KEY_NOT_STRING);
    /* nested map value */
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x81, 0x01, 0x01)), COORD_FRAME_KEY_NOT_STRING);
    /* map inside an array */
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x91, 0x81, 0xc2, 0x01)),
             COORD_FRAME_KEY_NOT_STRING);
    /* str8/16/32 keys are strings */
    CHECK_EQ(validate(B(0x81, 0xd9, 0x01, 'a', 0x01)), COORD_FRAME_OK);
    CHECK_EQ(validate(B(0x81, 0xda, 0x00, 0x01, 'a', 0x01)), COORD_FRAME_OK);
    CHECK_EQ(validate(B(0x81, 0xdb, 0, 0, 0, 0x01, 'a', 0x01)), COORD_FRAME_OK);
    /* a string VALUE after a non-string... value is fine: only keys matter */
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x92, 0x01, 0x02)), COORD_FRAME_OK);
}

static void test_trailing(void)
{
    CHECK_EQ(validate(B(0x80, 0x00)), COORD_FRAME_TRAILING);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x01, 0xc0)), COORD_FRAME_TRAILING);
    CHECK_EQ(validate(B(0x80, 0x80)), COORD_FRAME_TRAILING);         /* two maps */
    CHECK_EQ(validate(B(0x80, 0xc1)), COORD_FRAME_TRAILING);
}

static void test_truncated_counts(void)
{
    /* announced counts larger than the bytes that follow */
    CHECK_EQ(validate(B(0x81)), COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0x82, 0xa1, 'a', 0x01)), COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x92, 0x01)), COORD_FRAME_TRUNCATED);
    /* 5-byte inputs announcing billions of elements */
    CHECK_EQ(validate(B(0xdf, 0xff, 0xff, 0xff, 0xff)), COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0xdf, 0x7f, 0xff, 0xff, 0xff)), COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0xde, 0xff, 0xff)), COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff)),
             COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0xdf, 0xff, 0xff, 0xff, 0xff)),
             COORD_FRAME_TRUNCATED);
    /* lengths of strings, bins and exts beyond the end */
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0xdb, 0xff, 0xff, 0xff, 0xff)),
             COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0xc6, 0xff, 0xff, 0xff, 0xff)),
             COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01)),
             COORD_FRAME_TRUNCATED);
    CHECK_EQ(validate(B(0x81, 0xa5, 'a')), COORD_FRAME_TRUNCATED);   /* key */
}

/* The 5-byte bombs through coord_msg_parse: refused before msgpack-c could
 * reserve memory for them.  Outside ASan, a child with a 256 MiB address
 * space limit proves no big allocation is even tried. */
static void test_no_big_allocation(void)
{
    static const uint8_t bombs[][8] = {
        { 0xdf, 0xff, 0xff, 0xff, 0xff },
        { 0xdd, 0xff, 0xff, 0xff, 0xff },
        { 0x81, 0xa1, 'a', 0xdd, 0xff, 0xff, 0xff, 0xff },
        { 0x81, 0xa1, 'a', 0xdf, 0x0f, 0xff, 0xff, 0xff },
    };
    static const size_t lens[] = { 5, 5, 8, 8 };
    static const int want[] = { COORD_FRAME_TRUNCATED, COORD_FRAME_NOT_MAP,
                                COORD_FRAME_TRUNCATED, COORD_FRAME_TRUNCATED };
    coord_msg m;
    CHECK(coord_msg_init(&m) == 0);
    for (size_t i = 0; i < 4; i++)
        CHECK_MSG(coord_msg_parse(&m, bombs[i], lens[i]) == want[i], "bomb %zu", i);
    coord_msg_destroy(&m);

#ifndef UNDER_ASAN
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = { 256u << 20, 256u << 20 };
        coord_msg cm;
        if (setrlimit(RLIMIT_AS, &rl) < 0 || coord_msg_init(&cm) < 0)
            _exit(3);
        for (size_t i = 0; i < 4; i++)
            if (coord_msg_parse(&cm, bombs[i], lens[i]) != want[i])
                _exit(1);
        coord_msg_destroy(&cm);
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d",
              status);
#endif
}

static void test_invalid_byte(void)
{
    CHECK_EQ(validate(B(0xc1)), COORD_FRAME_INVALID);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0xc1)), COORD_FRAME_INVALID);
    CHECK_EQ(validate(B(0x81, 0xc1, 0x01)), COORD_FRAME_INVALID);     /* as key */
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x91, 0xc1)), COORD_FRAME_INVALID);
    coord_msg m;
    CHECK(coord_msg_init(&m) == 0);
    CHECK_EQ(coord_msg_parse(&m, B(0x81, 0xa1, 'a', 0xc1)), COORD_FRAME_INVALID);
    coord_msg_destroy(&m);
}

static void test_depth(void)
{
    /* exactly COORD_MAX_DEPTH (3): map -> array -> map */
    CHECK_EQ(COORD_MAX_DEPTH, 3);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x91, 0x81, 0xa1, 'b', 0x01)), COORD_FRAME_OK);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x81, 0xa1, 'b', 0x81, 0xa1, 'c', 0x01)),
             COORD_FRAME_OK);
    /* one deeper */
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x91, 0x81, 0xa1, 'b', 0x91, 0x01)),
             COORD_FRAME_TOO_DEEP);
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x91, 0x91, 0x90)), COORD_FRAME_TOO_DEEP);
    /* empty containers count too */
    CHECK_EQ(validate(B(0x81, 0xa1, 'a', 0x91, 0x91, 0x80)), COORD_FRAME_TOO_DEEP);
    /* very deep */
    uint8_t deep[1000];
    deep[0] = 0x81; deep[1] = 0xa1; deep[2] = 'a';
    for (size_t i = 3; i < sizeof deep; i++)
        deep[i] = 0x91;
    deep[sizeof deep - 1] = 0x90;
    CHECK_EQ(validate(deep, sizeof deep), COORD_FRAME_TOO_DEEP);
    /* a smaller max_depth; out-of-range values mean COORD_MAX_DEPTH */
    CHECK_EQ(coord_frame_validate(B(0x81, 0xa1, 'a', 0x01), 1), COORD_FRAME_OK);
    CHECK_EQ(coord_frame_validate(B(0x81, 0xa1, 'a', 0x90), 1), COORD_FRAME_TOO_DEEP);
    CHECK_EQ(coord_frame_validate(B(0x81, 0xa1, 'a', 0x90), 2), COORD_FRAME_OK);
    CHECK_EQ(coord_frame_validate(B(0x81, 0xa1, 'a', 0x91, 0x90), 2),
             COORD_FRAME_TOO_DEEP);
    CHECK_EQ(coord_frame_validate(B(0x81, 0xa1, 'a', 0x91, 0x90), 0), COORD_FRAME_OK);
    CHECK_EQ(coord_frame_validate(B(0x81, 0xa1, 'a', 0x91, 0x91, 0x90), 99),
             COORD_FRAME_TOO_DEEP);
}

static void test_status_texts(void)
{
    static const int all[] = {
        COORD_FRAME_OK, COORD_FRAME_EMPTY, COORD_FRAME_TOO_LONG,
        COORD_FRAME_NOT_MAP, COORD_FRAME_KEY_NOT_STRING, COORD_FRAME_TRAILING,
        COORD_FRAME_TRUNCATED, COORD_FRAME_INVALID, COORD_FRAME_TOO_DEEP,
        COORD_FRAME_NOMEM,
    };
    size_t n = sizeof all / sizeof all[0];
    const char *unknown = coord_frame_status_text(9999);
    CHECK(unknown != NULL);
    for (size_t i = 0; i < n; i++) {
        const char *t = coord_frame_status_text(all[i]);
        CHECK_MSG(t && t[0] && strcmp(t, unknown) != 0, "status %d", all[i]);
        for (size_t j = 0; j < i; j++) {
            CHECK_MSG(all[i] != all[j], "statuses %zu and %zu equal", i, j);
            CHECK_MSG(strcmp(t, coord_frame_status_text(all[j])) != 0,
                      "texts of %d and %d equal", all[i], all[j]);
        }
    }
    CHECK_EQ(validate(NULL, 0), COORD_FRAME_EMPTY);
}

int main(void)
{
    test_accepts_every_type();
    test_truncated_everywhere();
    test_not_map();
    test_key_not_string();
    test_trailing();
    test_truncated_counts();
    test_no_big_allocation();
    test_invalid_byte();
    test_depth();
    test_status_texts();
    return check_report("test_validate");
}
