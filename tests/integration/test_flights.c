/* test_flights.c - single-flight and completion records through a real
 * broker: followers, cancel, promotion after SIGKILL and SIGSTOP, fencing,
 * records that outlive the flight and a kill -9 of the broker, scopes,
 * and bad input. */
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

#define T 5000                  /* ms to wait for what must happen */

static struct broker_proc bp;
static coord_msg m;

static void start(void) { start_or_exit(&bp, NULL); }

static void stop(void) { stop_and_clean(&bp); }

static struct rcl *client_in(const char *scope) { return connect_or_exit(&bp, scope); }

static struct rcl *client(void) { return client_in(NULL); }

static void join(struct rcl *c, uint64_t rid, const char *key, uint64_t ttl,
                 uint64_t wait_ms, uint64_t max_age, bool orphan_abort)
{
    coord_enc *e = rcl_begin(c, "flight.join", rid);
    coord_enc_kv_cstr(e, "key", key);
    if (ttl) coord_enc_kv_uint(e, "owner_ttl_ms", ttl);
    if (wait_ms) coord_enc_kv_uint(e, "wait_ms", wait_ms);
    if (max_age) coord_enc_kv_uint(e, "max_age_ms", max_age);
    if (orphan_abort) coord_enc_kv_bool(e, "abort_when_orphaned", true);
    rcl_send(c);
}

/* join and wait until the broker has seen it */
static void join_sync(struct rcl *c, uint64_t rid, const char *key)
{
    join(c, rid, key, 0, 0, 0, false);
    rcl_sync(c);
}

static bool role_is(const char *role) { return msg_str_is(&m, "role", role, strlen(role)); }

static int complete(struct rcl *c, uint64_t rid, uint64_t flight, uint64_t fence,
                    const void *result, size_t n, uint64_t keep_ms)
{
    coord_enc *e = rcl_begin(c, "flight.complete", rid);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", result, n);
    if (keep_ms)
        coord_enc_kv_uint(e, "keep_ms", keep_ms);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

/* The result is bin and holds want (a missing result fails the check). */
#define result_is(want) msg_bin_is(&m, "result", (want), strlen(want))

static void test_one_owner_many_followers(void)
{
    start();
    struct rcl *o = client(), *f[5];
    join(o, 1, "k", 0, 0, 0, false);
    REQUIRE(rcl_reply(o, 1, T, &m) == 0 && role_is("owner"));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    for (int i = 0; i < 5; i++) {
        f[i] = client();
        join_sync(f[i], 7, "k");
        CHECK_EQ_U(rcl_queued(f[i]), 0);       /* followers wait */
    }
    rcl_begin(o, "flight.list", 2);
    rcl_send(o);
    REQUIRE(rcl_reply(o, 2, T, &m) == 0);
    const msgpack_object_array *fl = msg_array(&m, "flights");
    REQUIRE(fl->size == 1);
    const msgpack_object_map *e = map_at(fl, 0);
    CHECK_EQ_U(map_uint(e, "followers"), 5);
    CHECK_EQ_U(map_uint(e, "flight"), flight);
    REQUIRE(complete(o, 3, flight, fence, S("the result"), 0) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "delivered"), 5);
    for (int i = 0; i < 5; i++) {
        REQUIRE(rcl_reply(f[i], 7, T, &m) == 0);
        CHECK(role_is("result"));
        CHECK(result_is("the result"));
        CHECK(msg_str_is(&m, "source", S("live")));
        CHECK_EQ_U(msg_uint(&m, "fence"), fence);
        rcl_close(f[i]);
    }
    /* the key is free again: the next join owns a new flight */
    join(o, 4, "k", 0, 0, 0, false);
    REQUIRE(rcl_reply(o, 4, T, &m) == 0 && role_is("owner"));
    CHECK(msg_uint(&m, "flight") != flight);
    rcl_close(o);
    stop();
}

static void test_follower_cancel_keeps_owner(void)
{
    start();
    struct rcl *o = client(), *a = client(), *b = client();
    join(o, 1, "c", 0, 0, 0, true);
    REQUIRE(rcl_reply(o, 1, T, &m) == 0 && role_is("owner"));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    join_sync(a, 1, "c");
    join_sync(b, 1, "c");
    coord_enc *e = rcl_begin(a, "cancel", 2);
    coord_enc_kv_uint(e, "target", 1);
    rcl_send(a);
    REQUIRE(rcl_reply(a, 1, T, &m) == 0);
    CHECK(msg_code_is(&m, "ABORTED"));
    REQUIRE(rcl_reply(a, 2, T, &m) == 0);
    CHECK(msg_bool(&m, "cancelled"));
    /* the owner was not aborted: b still follows */
    rcl_sync(o);
    CHECK_EQ_U(rcl_queued(o), 0);
    REQUIRE(complete(o, 2, flight, fence, S("r"), 0) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), 1);
    REQUIRE(rcl_reply(b, 1, T, &m) == 0);
    CHECK(role_is("result") && result_is("r"));
    /* abort_when_orphaned: the owner hears when the last follower leaves */
    join(o, 3, "c2", 0, 0, 0, true);
    REQUIRE(rcl_reply(o, 3, T, &m) == 0 && role_is("owner"));
    flight = msg_uint(&m, "flight");
    join_sync(a, 5, "c2");
    join_sync(b, 5, "c2");
    rcl_close(a);                              /* disconnect: one left */
    rcl_sync(b);
    CHECK_EQ_U(rcl_queued(o), 0);
    e = rcl_begin(b, "cancel", 6);
    coord_enc_kv_uint(e, "target", 5);
    rcl_send(b);
    REQUIRE(rcl_event(o, "flight.abort", T, &m) == 0);
    CHECK(msg_str_is(&m, "reason", S("orphaned")));
    CHECK_EQ_U(msg_uint(&m, "flight"), flight);
    rcl_close(o);
    rcl_close(b);
    stop();
}

/* A child process that owns a flight: it joins, reports "O" plus its flight
 * and fence, then on "C" completes with "old" and reports the outcome code
 * ('K' ok, 'F' FENCED) and whether a flight.abort event came ('A'). */
struct owner_child { pid_t pid; int to, from; uint64_t flight, fence; };

static int owner_child_start(struct owner_child *oc, const char *key, uint64_t ttl)
{
    int down[2], up[2];
    if (pipe(down) < 0 || pipe(up) < 0)
        return -1;
    oc->pid = fork();
    if (oc->pid == 0) {
        close(down[1]);
        close(up[0]);
        struct rcl *c = rcl_open(bp.sock, NULL);
        join(c, 1, key, ttl, 0, 0, false);
        if (!c || rcl_reply(c, 1, 10000, &m) != 0 || !role_is("owner"))
            _exit(1);
        uint64_t ids[2] = { msg_uint(&m, "flight"), msg_uint(&m, "fence") };
        if (write(up[1], "O", 1) != 1 || write(up[1], ids, sizeof ids) != sizeof ids)
            _exit(2);
        char cmd;
        if (read(down[0], &cmd, 1) != 1)
            _exit(3);
        char out[2] = { '?', '-' };
        if (complete(c, 2, ids[0], ids[1], S("old"), 0) == 0)
            out[0] = msg_ok(&m) ? 'K' : msg_code_is(&m, "FENCED") ? 'F' : 'E';
        if (rcl_event(c, "flight.abort", 0, &m) == 0 &&
            msg_str_is(&m, "reason", S("deadline")))
            out[1] = 'A';
        if (write(up[1], out, 2) != 2)
            _exit(4);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    oc->to = down[1];
    oc->from = up[0];
    char o;
    uint64_t ids[2];
    struct pollfd pf = { oc->from, POLLIN, 0 };
    if (poll(&pf, 1, 10000) != 1 || read(oc->from, &o, 1) != 1 ||
        read(oc->from, ids, sizeof ids) != sizeof ids)
        return -1;
    oc->flight = ids[0];
    oc->fence = ids[1];
    return 0;
}

static void test_owner_killed_follower_promoted(void)
{
    start();
    struct owner_child oc;
    REQUIRE(owner_child_start(&oc, "kill", 0) == 0);
    struct rcl *a = client(), *b = client();
    join_sync(a, 1, "kill");
    join_sync(b, 1, "kill");
    kill(oc.pid, SIGKILL);
    waitpid(oc.pid, NULL, 0);
    /* the longest-waiting follower becomes the owner, with a new fence */
    REQUIRE(rcl_reply(a, 1, T, &m) == 0);
    CHECK(role_is("owner"));
    CHECK_EQ_U(msg_uint(&m, "flight"), oc.flight);
    uint64_t fence = msg_uint(&m, "fence");
    CHECK(fence > oc.fence);
    CHECK_EQ_U(rcl_queued(b), 0);
    REQUIRE(complete(a, 2, oc.flight, fence, S("from a"), 0) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), 1);
    REQUIRE(rcl_reply(b, 1, T, &m) == 0);
    CHECK(role_is("result") && result_is("from a"));
    close(oc.to);
    close(oc.from);
    rcl_close(a);
    rcl_close(b);
    stop();
}

static void test_frozen_owner_fenced(void)
{
    start();
    struct owner_child oc;
    REQUIRE(owner_child_start(&oc, "frozen", 300) == 0);
    kill(oc.pid, SIGSTOP);
    struct rcl *a = client(), *b = client(), *late = client();
    join_sync(a, 1, "frozen");
    join_sync(b, 1, "frozen");
    /* past the owner's 300 ms deadline, a is promoted */
    REQUIRE(rcl_reply(a, 1, T, &m) == 0);
    CHECK(role_is("owner"));
    uint64_t fence = msg_uint(&m, "fence");
    CHECK(fence > oc.fence);
    REQUIRE(complete(a, 2, oc.flight, fence, S("new"), 60000) == 0);
    CHECK(msg_ok(&m));
    REQUIRE(rcl_reply(b, 1, T, &m) == 0);
    CHECK(result_is("new"));
    /* the old owner wakes up: FENCED, and it heard flight.abort deadline */
    kill(oc.pid, SIGCONT);
    REQUIRE(write(oc.to, "C", 1) == 1);
    char out[2] = { 0, 0 };
    struct pollfd pf = { oc.from, POLLIN, 0 };
    CHECK(poll(&pf, 1, 10000) == 1 && read(oc.from, out, 2) == 2);
    CHECK(out[0] == 'F');
    CHECK(out[1] == 'A');
    waitpid(oc.pid, NULL, 0);
    /* and it changed nothing: the record holds the new owner's result */
    coord_enc *e = rcl_begin(late, "record.get", 1);
    coord_enc_kv_cstr(e, "key", "frozen");
    rcl_send(late);
    REQUIRE(rcl_reply(late, 1, T, &m) == 0);
    CHECK(msg_ok(&m) && result_is("new"));
    CHECK_EQ_U(msg_uint(&m, "fence"), fence);
    rcl_begin(late, "stats", 2);
    rcl_send(late);
    REQUIRE(rcl_reply(late, 2, T, &m) == 0);
    CHECK(msg_uint(&m, "fenced") >= 1);
    CHECK_EQ_U(msg_uint(&m, "owners_promoted"), 1);
    close(oc.to);
    close(oc.from);
    rcl_close(a); rcl_close(b); rcl_close(late);
    stop();
}

static void read_record(struct rcl *c, uint64_t rid, const char *key)
{
    coord_enc *e = rcl_begin(c, "record.get", rid);
    coord_enc_kv_cstr(e, "key", key);
    rcl_send(c);
}

static void test_records_survive_kill9(void)
{
    start();
    struct rcl *o = client();
    join(o, 1, "token", 0, 0, 0, false);
    REQUIRE(rcl_reply(o, 1, T, &m) == 0 && role_is("owner"));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    REQUIRE(complete(o, 2, flight, fence, S("secret-v1"), 3600 * 1000) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "delivered"), 0);
    rcl_close(o);
    for (int life = 0; life < 2; life++) {
        /* someone who was not there reads it, twice over */
        struct rcl *late = client();
        read_record(late, 1, "token");
        REQUIRE(rcl_reply(late, 1, T, &m) == 0);
        CHECK(msg_ok(&m));
        CHECK(msg_str_is(&m, "status", S("completed")));
        CHECK(result_is("secret-v1"));
        CHECK_EQ_U(msg_uint(&m, "fence"), fence);
        CHECK(msg_uint(&m, "expires_ms") > msg_uint(&m, "created_ms"));
        join(late, 2, "token", 0, 0, 3600 * 1000, false);
        REQUIRE(rcl_reply(late, 2, T, &m) == 0);
        CHECK(role_is("result"));
        CHECK(msg_str_is(&m, "source", S("record")));
        CHECK(result_is("secret-v1"));
        /* a max_age the record is too old for: a new owner */
        join(late, 3, "token", 0, 0, 0, false);
        REQUIRE(rcl_reply(late, 3, T, &m) == 0);
        CHECK(role_is("owner"));
        rcl_close(late);
        if (life == 0) {
            CHECK(WIFSIGNALED(broker_kill(&bp, SIGKILL)));
            REQUIRE(broker_start(&bp, NULL) == 0);
        }
    }
    struct rcl *c = client();
    read_record(c, 1, "never-written");
    REQUIRE(rcl_reply(c, 1, T, &m) == 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    rcl_close(c);
    stop();
}

static void test_record_expiry_and_list(void)
{
    start();
    struct rcl *o = client();
    const char *keys[] = { "user/1", "user/2", "other/1" };
    for (int i = 0; i < 3; i++) {
        join(o, 10 + (uint64_t)i, keys[i], 0, 0, 0, false);
        REQUIRE(rcl_reply(o, 10 + (uint64_t)i, T, &m) == 0 && role_is("owner"));
        REQUIRE(complete(o, 20 + (uint64_t)i, msg_uint(&m, "flight"), msg_uint(&m, "fence"),
                         S("v"), i == 1 ? 150 : 600000) == 0);
    }
    coord_enc *e = rcl_begin(o, "record.list", 30);
    coord_enc_kv_cstr(e, "prefix", "user/");
    rcl_send(o);
    REQUIRE(rcl_reply(o, 30, T, &m) == 0);
    const msgpack_object_array *recs = msg_array(&m, "records");
    REQUIRE(recs->size == 2);
    CHECK(map_str_is(map_at(recs, 0), "key", "user/1", 6));
    CHECK_EQ_U(map_uint(map_at(recs, 0), "size"), 1);
    /* expired records are never returned */
    poll(NULL, 0, 200);
    read_record(o, 31, "user/2");
    REQUIRE(rcl_reply(o, 31, T, &m) == 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    e = rcl_begin(o, "record.list", 32);
    coord_enc_kv_cstr(e, "prefix", "user/");
    rcl_send(o);
    REQUIRE(rcl_reply(o, 32, T, &m) == 0);
    recs = msg_array(&m, "records");
    CHECK(recs->size == 1);
    /* and the sweep removes it from the ledger within a few sweeps */
    bool swept = false;
    for (int i = 0; i < 100 && !swept; i++) {
        rcl_begin(o, "stats", 40 + (uint64_t)i);
        rcl_send(o);
        REQUIRE(rcl_reply(o, 40 + (uint64_t)i, T, &m) == 0);
        swept = msg_uint(&m, "records") == 2;
        if (!swept)
            poll(NULL, 0, 50);
    }
    CHECK(swept);
    rcl_close(o);
    stop();
}

static void test_scopes_and_purge(void)
{
    start();
    struct rcl *a = client_in("alice"), *b = client_in("bob");
    /* same key, two scopes: two owners */
    join(a, 1, "shared-key", 0, 0, 0, false);
    join(b, 1, "shared-key", 0, 0, 0, false);
    REQUIRE(rcl_reply(a, 1, T, &m) == 0);
    CHECK(role_is("owner"));
    uint64_t fa = msg_uint(&m, "flight"), fea = msg_uint(&m, "fence");
    REQUIRE(rcl_reply(b, 1, T, &m) == 0);
    CHECK(role_is("owner"));
    uint64_t fb = msg_uint(&m, "flight"), feb = msg_uint(&m, "fence");
    CHECK(fa != fb);
    /* one scope cannot complete the other's flight */
    REQUIRE(complete(b, 2, fa, fea, S("x"), 0) == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    REQUIRE(complete(a, 2, fa, fea, S("alice's"), 600000) == 0);
    REQUIRE(complete(b, 3, fb, feb, S("bob's"), 600000) == 0);
    read_record(a, 3, "shared-key");
    REQUIRE(rcl_reply(a, 3, T, &m) == 0);
    CHECK(result_is("alice's"));
    /* purge removes only the caller's scope */
    coord_enc *e = rcl_begin(a, "record.purge", 4);
    coord_enc_kv_cstr(e, "prefix", "");
    rcl_send(a);
    REQUIRE(rcl_reply(a, 4, T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "deleted"), 1);
    read_record(a, 5, "shared-key");
    REQUIRE(rcl_reply(a, 5, T, &m) == 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    read_record(b, 4, "shared-key");
    REQUIRE(rcl_reply(b, 4, T, &m) == 0);
    CHECK(result_is("bob's"));
    rcl_close(a);
    rcl_close(b);
    stop();
}

static void test_fail_wait_and_bad_input(void)
{
    start();
    struct rcl *o = client(), *f1 = client();
    join(o, 1, "f", 0, 0, 0, false);
    REQUIRE(rcl_reply(o, 1, T, &m) == 0 && role_is("owner"));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    /* a follower with a short wait times out; the flight goes on */
    join(f1, 1, "f", 0, 100, 0, false);
    REQUIRE(rcl_reply(f1, 1, T, &m) == 0);
    CHECK(msg_code_is(&m, "TIMEOUT"));
    join_sync(f1, 2, "f");
    /* bad input: each refused clearly, nothing changes */
    REQUIRE(complete(o, 2, flight + 1000, fence, S("x"), 0) == 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    REQUIRE(complete(o, 3, flight, fence + 1, S("x"), 0) == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    REQUIRE(complete(o, 4, flight, fence, S("x"), UINT64_MAX / 2) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    size_t big = 1048576 - 200;   /* over max_frame - 256 */
    char *blob = calloc(1, big);
    REQUIRE(complete(o, 5, flight, fence, blob, big, 0) == 0);
    CHECK(msg_code_is(&m, "TOO_LARGE"));
    free(blob);
    coord_enc *e = rcl_begin(o, "flight.join", 6);
    coord_enc_kv_cstr(e, "key", "z");
    coord_enc_kv_uint(e, "owner_ttl_ms", 0);
    rcl_send(o);
    REQUIRE(rcl_reply(o, 6, T, &m) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    e = rcl_begin(o, "flight.fail", 7);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_cstr(e, "error", "not a map");
    rcl_send(o);
    REQUIRE(rcl_reply(o, 7, T, &m) == 0);
    CHECK(msg_code_is(&m, "BAD_REQUEST"));
    CHECK_EQ_U(rcl_queued(f1), 0);
    /* a real failure reaches the follower with its retryable flag */
    e = rcl_begin(o, "flight.fail", 8);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_key(e, "error");
    coord_enc_map_begin(e);
    coord_enc_kv_cstr(e, "code", "UPSTREAM_503");
    coord_enc_kv_cstr(e, "message", "token endpoint down");
    coord_enc_map_end(e);
    coord_enc_kv_bool(e, "retryable", true);
    rcl_send(o);
    REQUIRE(rcl_reply(o, 8, T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), 1);
    REQUIRE(rcl_reply(f1, 2, T, &m) == 0);
    CHECK(role_is("failed"));
    CHECK(msg_bool(&m, "retryable"));
    const msgpack_object *err = coord_map_find(m.map, "error");
    REQUIRE(err && err->type == MSGPACK_OBJECT_MAP);
    CHECK(map_str_is(&err->via.map, "code", "UPSTREAM_503", 12));
    /* the broker is unaffected */
    CHECK(rcl_sync(o) == 0 && rcl_sync(f1) == 0);
    rcl_close(o);
    rcl_close(f1);
    stop();
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "one_owner_many_followers", test_one_owner_many_followers },
        { "follower_cancel_keeps_owner", test_follower_cancel_keeps_owner },
        { "owner_killed_follower_promoted", test_owner_killed_follower_promoted },
        { "frozen_owner_fenced", test_frozen_owner_fenced },
        { "records_survive_kill9", test_records_survive_kill9 },
        { "record_expiry_and_list", test_record_expiry_and_list },
        { "scopes_and_purge", test_scopes_and_purge },
        { "fail_wait_and_bad_input", test_fail_wait_and_bad_input },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
