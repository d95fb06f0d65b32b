/* test_flight_policies.c - single-flight beyond part one, on the wire:
 * stale-while-revalidate (one revalidation owner, everyone else served the
 * stale record at once, flight.updated for those who asked, a failed
 * revalidation keeps the record), backoff after a rate-limited failure,
 * and the kill switch (durable across a restart, bypassed completions
 * write no record, announced on -flights). */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "harness.h"

#define T 5000
static struct broker_proc bp;
static coord_msg m;

static int join(struct rcl *c, uint64_t rid, const char *key, uint64_t max_age,
                uint64_t stale, bool notify)
{
    coord_enc *e = rcl_begin(c, "flight.join", rid);
    coord_enc_kv_cstr(e, "key", key);
    if (max_age)
        coord_enc_kv_uint(e, "max_age_ms", max_age);
    if (stale)
        coord_enc_kv_uint(e, "stale_ms", stale);
    if (notify)
        coord_enc_kv_bool(e, "notify", true);
    return rcl_send(c);
}

static int complete(struct rcl *c, uint64_t rid, uint64_t flight, uint64_t fence,
                    const char *result, uint64_t keep)
{
    coord_enc *e = rcl_begin(c, "flight.complete", rid);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", result, strlen(result));
    if (keep)
        coord_enc_kv_uint(e, "keep_ms", keep);
    return rcl_send(c);
}

static int fail(struct rcl *c, uint64_t rid, uint64_t flight, uint64_t fence,
                uint64_t retry_after, uint64_t keep)
{
    coord_enc *e = rcl_begin(c, "flight.fail", rid);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_key(e, "error");
    coord_enc_map_begin(e);
    coord_enc_kv_cstr(e, "code", "HTTP_429");
    coord_enc_kv_cstr(e, "message", "slow down");
    coord_enc_map_end(e);
    coord_enc_kv_bool(e, "retryable", true);
    if (retry_after)
        coord_enc_kv_uint(e, "retry_after_ms", retry_after);
    if (keep)
        coord_enc_kv_uint(e, "keep_ms", keep);
    return rcl_send(c);
}

/* A record made 'age' ms old: written with keep, then waited for. */
static void make_record(struct rcl *c, const char *key, const char *result)
{
    REQUIRE(join(c, 1, key, 0, 0, false) == 0);
    REQUIRE(rcl_reply(c, 1, T, &m) == 0 && msg_str_is(&m, "role", S("owner")));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    REQUIRE(complete(c, 2, flight, fence, result, 600000) == 0);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0 && msg_ok(&m));
}

static void wait_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

/* Once the record is older than max_age: one caller owns the revalidation
 * (with the stale result), the others are answered at once from the
 * record; those that asked hear when it ends. */
static void test_stale_while_revalidate(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *w = connect_or_exit(&bp, NULL);
    make_record(w, "tok", "old");
    wait_ms(60);                          /* age past max_age_ms 20: the record's age is the point */
    enum { N = 8 };
    struct rcl *cs[N];
    uint64_t owner_flight = 0, owner_fence = 0;
    int owners = 0, stale = 0;
    for (int i = 0; i < N; i++) {
        cs[i] = connect_or_exit(&bp, NULL);
        REQUIRE(join(cs[i], 1, "tok", 20, 600000, true) == 0);
        REQUIRE(rcl_reply(cs[i], 1, T, &m) == 0);
        if (msg_str_is(&m, "role", S("owner"))) {
            owners++;
            owner_flight = msg_uint(&m, "flight");
            owner_fence = msg_uint(&m, "fence");
            const msgpack_object_map *st = msg_map(&m, "stale");
            CHECK(st && map_bin_is(st, "result", S("old")));
            CHECK(!msg_has(&m, "bypass"));
        } else {
            stale++;
            CHECK(msg_str_is(&m, "role", S("result")));
            CHECK(msg_str_is(&m, "source", S("record")));
            CHECK(msg_bool(&m, "stale") && msg_bool(&m, "revalidating"));
            CHECK(msg_bin_is(&m, "result", S("old")));
            CHECK(msg_uint(&m, "age_ms") >= 20);
        }
    }
    CHECK_EQ_U(owners, 1);
    CHECK_EQ_U(stale, N - 1);
    /* the owner is cs[0]: the first to join; its fresh result goes in */
    REQUIRE(complete(cs[0], 2, owner_flight, owner_fence, "new", 600000) == 0);
    REQUIRE(rcl_reply(cs[0], 2, T, &m) == 0 && msg_ok(&m));
    for (int i = 1; i < N; i++) {
        REQUIRE(rcl_event(cs[i], "flight.updated", T, &m) == 0);
        CHECK(msg_str_is(&m, "key", S("tok")));
        CHECK(msg_str_is(&m, "status", S("completed")));
        CHECK_EQ_U(msg_uint(&m, "fence"), owner_fence);
    }
    REQUIRE(rcl_sync(cs[0]) == 0);
    CHECK_EQ_U(rcl_queued(cs[0]), 0);    /* the owner gets no flight.updated */
    coord_enc *e = rcl_begin(w, "record.get", 3);
    coord_enc_kv_cstr(e, "key", "tok");
    REQUIRE(rcl_send(w) == 0);
    REQUIRE(rcl_reply(w, 3, T, &m) == 0);
    CHECK(msg_bin_is(&m, "result", S("new")));

    /* a revalidation that fails leaves the stale record */
    wait_ms(60);
    REQUIRE(join(cs[1], 4, "tok", 20, 600000, false) == 0);
    REQUIRE(rcl_reply(cs[1], 4, T, &m) == 0 && msg_str_is(&m, "role", S("owner")));
    uint64_t f2 = msg_uint(&m, "flight"), fe2 = msg_uint(&m, "fence");
    REQUIRE(join(cs[2], 5, "tok", 20, 600000, true) == 0);
    REQUIRE(rcl_reply(cs[2], 5, T, &m) == 0 && msg_bool(&m, "revalidating"));
    REQUIRE(fail(cs[1], 6, f2, fe2, 0, 600000) == 0);
    REQUIRE(rcl_reply(cs[1], 6, T, &m) == 0 && msg_ok(&m));
    REQUIRE(rcl_event(cs[2], "flight.updated", T, &m) == 0);
    CHECK(msg_str_is(&m, "status", S("failed")));
    e = rcl_begin(w, "record.get", 7);
    coord_enc_kv_cstr(e, "key", "tok");
    REQUIRE(rcl_send(w) == 0);
    REQUIRE(rcl_reply(w, 7, T, &m) == 0);
    CHECK(msg_str_is(&m, "status", S("completed")));
    CHECK(msg_bin_is(&m, "result", S("new")));
    /* the latency histograms moved with all of it */
    rcl_request(w, "stats", 8);
    REQUIRE(rcl_reply(w, 8, T, &m) == 0);
    const msgpack_object_map *lat = msg_map(&m, "latency");
    const msgpack_object_map *fw = lat ? map_map(lat, "follower_wait") : NULL;
    const msgpack_object_map *fr = lat ? map_map(lat, "flight_run") : NULL;
    CHECK(fw && map_uint(fw, "count") >= N);
    CHECK(fr && map_uint(fr, "count") >= 3);
    for (int i = 0; i < N; i++)
        rcl_close(cs[i]);
    rcl_close(w);
    stop_and_clean(&bp);
}

/* retry_after_ms: inside the window every join is answered with the
 * failure and what is left of it; the first join after it owns. */
static void test_backoff(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *o = connect_or_exit(&bp, NULL), *f1 = connect_or_exit(&bp, NULL);
    REQUIRE(join(o, 1, "api", 0, 0, false) == 0);
    REQUIRE(rcl_reply(o, 1, T, &m) == 0 && msg_str_is(&m, "role", S("owner")));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    REQUIRE(join(f1, 1, "api", 0, 0, false) == 0);
    REQUIRE(rcl_sync(f1) == 0);
    uint64_t t0 = now_ms();
    REQUIRE(fail(o, 2, flight, fence, 500, 0) == 0);
    REQUIRE(rcl_reply(o, 2, T, &m) == 0 && msg_uint(&m, "delivered") == 1);
    REQUIRE(rcl_reply(f1, 1, T, &m) == 0);
    CHECK(msg_str_is(&m, "role", S("failed")) && msg_bool(&m, "retryable"));
    CHECK_EQ_U(msg_uint(&m, "retry_after_ms"), 500);
    int backoffs = 0, owners = 0;
    uint64_t last_left = 501;
    for (uint64_t i = 0; i < 50; i++) {
        REQUIRE(join(f1, 10 + i, "api", 0, 0, false) == 0);
        REQUIRE(rcl_reply(f1, 10 + i, T, &m) == 0);
        if (now_ms() - t0 >= 500)
            break;                         /* the window is over: not counted */
        if (msg_str_is(&m, "role", S("owner")))
            owners++;
        if (msg_str_is(&m, "source", S("backoff"))) {
            backoffs++;
            uint64_t left = msg_uint(&m, "retry_after_ms");
            CHECK(left <= last_left && left <= 500);
            last_left = left;
            const msgpack_object_map *err = msg_map(&m, "error");
            CHECK(err && map_str_is(err, "code", S("HTTP_429")));
        }
    }
    CHECK_EQ_U(owners, 0);
    CHECK(backoffs >= 1);
    /* past the window (its end is an event of the broker's clock: wait for
     * the time it said is left) */
    wait_ms((unsigned)last_left + 20);
    REQUIRE(join(f1, 100, "api", 0, 0, false) == 0);
    REQUIRE(rcl_reply(f1, 100, T, &m) == 0);
    CHECK(msg_str_is(&m, "role", S("owner")));
    fprintf(stderr, "backoff: %d joins answered from the backoff, %d owners inside it\n",
            backoffs, owners);
    rcl_close(o);
    rcl_close(f1);
    stop_and_clean(&bp);
}

/* The kill switch: disabled prefixes survive a restart; a join under one
 * owns without deduplication and its completion writes no record. */
static void test_kill_switch(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *c = connect_or_exit(&bp, NULL), *w = connect_or_exit(&bp, NULL);
    coord_enc *e = rcl_begin(w, "sub.subscribe", 1);
    coord_enc_kv_cstr(e, "channel", "-flights");
    REQUIRE(rcl_send(w) == 0);
    REQUIRE(rcl_reply(w, 1, T, &m) == 0);
    e = rcl_begin(c, "flight.disable", 1);
    coord_enc_kv_cstr(e, "prefix", "user/");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 1, T, &m) == 0 && msg_ok(&m));
    REQUIRE(rcl_event(w, "lifecycle", T, &m) == 0);
    CHECK(msg_str_is(&m, "what", S("disabled")) && msg_str_is(&m, "prefix", S("user/")));
    rcl_close(c);
    rcl_close(w);
    CHECK(broker_kill(&bp, SIGKILL) != -1);
    REQUIRE(broker_start(&bp, NULL) == 0);
    c = connect_or_exit(&bp, NULL);
    struct rcl *d = connect_or_exit(&bp, NULL), *other = connect_or_exit(&bp, "another");
    rcl_request(c, "flight.disabled", 2);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0);
    const msgpack_object_array *pl = msg_array(&m, "prefixes");
    CHECK(pl && pl->size == 1);
    /* two joins of one key: two owners, both bypass */
    REQUIRE(join(c, 3, "user/42", 0, 0, false) == 0);
    REQUIRE(rcl_reply(c, 3, T, &m) == 0);
    CHECK(msg_str_is(&m, "role", S("owner")) && msg_bool(&m, "bypass"));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    REQUIRE(join(d, 3, "user/42", 0, 0, false) == 0);
    REQUIRE(rcl_reply(d, 3, T, &m) == 0);
    CHECK(msg_str_is(&m, "role", S("owner")) && msg_bool(&m, "bypass"));
    REQUIRE(complete(c, 4, flight, fence, "r", 600000) == 0);
    REQUIRE(rcl_reply(c, 4, T, &m) == 0 && msg_ok(&m));
    e = rcl_begin(c, "record.get", 5);
    coord_enc_kv_cstr(e, "key", "user/42");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 5, T, &m) == 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    /* other keys and other scopes are not affected */
    REQUIRE(join(c, 6, "team/1", 0, 0, false) == 0);
    REQUIRE(rcl_reply(c, 6, T, &m) == 0);
    CHECK(msg_str_is(&m, "role", S("owner")) && !msg_has(&m, "bypass"));
    REQUIRE(join(other, 1, "user/42", 0, 0, false) == 0);
    REQUIRE(rcl_reply(other, 1, T, &m) == 0);
    CHECK(!msg_has(&m, "bypass"));
    e = rcl_begin(c, "flight.enable", 7);
    coord_enc_kv_cstr(e, "prefix", "user/");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 7, T, &m) == 0 && msg_ok(&m));
    REQUIRE(join(d, 8, "user/43", 0, 0, false) == 0);
    REQUIRE(rcl_reply(d, 8, T, &m) == 0);
    CHECK(!msg_has(&m, "bypass"));
    rcl_close(c);
    rcl_close(d);
    rcl_close(other);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "stale_while_revalidate", test_stale_while_revalidate },
        { "backoff", test_backoff },
        { "kill_switch", test_kill_switch },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
