/* test_check.c - the test vocabulary itself (common/check.h, fields.h): a
 * field accessor on a missing or mistyped key fails exactly one check and
 * returns its harmless value instead of crashing, present fields read back
 * as they were sent, and REQUIRE returns.  Expected failures are taken off
 * the count again (EXPECT_FAILS), so only surprises fail this program. */
#include <stdlib.h>
#include "check.h"
#include "enc.h"
#include "fields.h"

/* Evaluating expr must fail exactly n checks; they are then forgiven. */
#define EXPECT_FAILS(n, expr)                                                  \
    do {                                                                       \
        int before_ = check_failures;                                          \
        (void)(expr);                                                          \
        int got_ = check_failures - before_;                                   \
        check_failures = before_;                                              \
        CHECK_MSG(got_ == (n), "%s failed %d checks, wanted %d", #expr, got_,  \
                  (n));                                                        \
    } while (0)

static int after_require;

static void require_returns(void)
{
    REQUIRE(1 == 2);
    after_require = 1;
}

static int str_null(void)
{
    CHECK_STR("a", NULL);
    return 0;
}

int main(void)
{
    fprintf(stderr, "test_check: the CHECK failures printed below are expected\n");
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_uint(&e, "n", 42);
    coord_enc_kv_bool(&e, "yes", true);
    coord_enc_kv_cstr(&e, "s", "text");
    coord_enc_kv_bin(&e, "b", "\x01\x02", 2);
    coord_enc_key(&e, "list");
    coord_enc_array_begin(&e);
    coord_enc_map_begin(&e);
    coord_enc_kv_uint(&e, "id", 7);
    coord_enc_map_end(&e);
    coord_enc_uint(&e, 5);                      /* not a map */
    coord_enc_array_end(&e);
    coord_enc_key(&e, "err");
    coord_enc_map_begin(&e);
    coord_enc_kv_cstr(&e, "code", "E");
    coord_enc_map_end(&e);
    coord_enc_kv_bool(&e, "ok", false);
    coord_enc_kv_cstr(&e, "code", "LIMIT");
    CHECK(coord_enc_end(&e) > 4);
    coord_msg m;
    coord_msg_init(&m);
    CHECK_EQ(coord_msg_parse(&m, b.data + 4, b.len - 4), COORD_FRAME_OK);

    /* present: read back, no failure */
    CHECK_EQ_U(msg_uint(&m, "n"), 42);
    CHECK(msg_bool(&m, "yes"));
    CHECK(msg_str_is(&m, "s", "text", 4));
    CHECK(!msg_str_is(&m, "s", "texts", 5));
    CHECK(msg_bin_is(&m, "b", "\x01\x02", 2));
    CHECK(msg_str_is(&m, "b", "\x01\x02", 2));   /* str_is takes bin too */
    CHECK_EQ_U(msg_bytes(&m, "s").len, 4);
    CHECK_EQ_U(msg_array(&m, "list")->size, 2);
    CHECK_EQ_U(map_uint(map_at(msg_array(&m, "list"), 0), "id"), 7);
    CHECK(map_str_is(msg_map(&m, "err"), "code", "E", 1));
    CHECK(msg_has(&m, "n") && !msg_has(&m, "missing"));
    CHECK(!msg_ok(&m) && msg_code_is(&m, "LIMIT") && !msg_code_is(&m, "LIM"));

    /* missing or mistyped: one failure each, a harmless value */
    uint64_t u = 0;
    EXPECT_FAILS(1, u = msg_uint(&m, "missing"));
    CHECK_EQ_U(u, UINT64_MAX);
    EXPECT_FAILS(1, u = msg_uint(&m, "s"));
    CHECK_EQ_U(u, UINT64_MAX);
    bool yes = true;
    EXPECT_FAILS(1, yes = msg_bool(&m, "missing"));
    CHECK(!yes);
    EXPECT_FAILS(1, yes = msg_str_is(&m, "missing", "", 0));
    CHECK(!yes);
    EXPECT_FAILS(1, yes = msg_bin_is(&m, "s", "text", 4));   /* str, not bin */
    CHECK(!yes);
    coord_bytes by = { NULL, 1 };
    EXPECT_FAILS(1, by = msg_bytes(&m, "n"));
    CHECK(by.ptr != NULL && by.len == 0);
    const msgpack_object_array *a = NULL;
    EXPECT_FAILS(1, a = msg_array(&m, "missing"));
    CHECK(a != NULL && a->size == 0);
    const msgpack_object_map *mm = NULL;
    EXPECT_FAILS(1, mm = msg_map(&m, "list"));
    CHECK(mm != NULL && mm->size == 0);
    /* past the end, or an element that is no map: an empty map, and the
     * key read from it fails too */
    EXPECT_FAILS(1, mm = map_at(msg_array(&m, "list"), 2));
    CHECK(mm != NULL && mm->size == 0);
    EXPECT_FAILS(1, map_at(msg_array(&m, "list"), 1));
    EXPECT_FAILS(3, map_uint(map_at(msg_array(&m, "missing"), 0), "id"));

    /* a REQUIRE that fails returns from its function */
    EXPECT_FAILS(1, require_returns());
    CHECK_EQ(after_require, 0);
    EXPECT_FAILS(1, str_null());

    coord_msg_destroy(&m);
    coord_buf_free(&b);
    return check_report("test_check");
}
