/* test_flight_purge.c - logout during a request, through a real broker:
 * record.purge fences the flights it covers (scope, prefix) as well as
 * deleting their records.  The owner of a running flight hears
 * flight.abort (purged) and its late flight.complete with keep_ms is
 * refused FENCED (reason purged); its follower gets ABORTED (purged) at
 * once; nothing is stored, before or after a kill -9 of the broker.  A
 * flight the purge does not cover (another prefix, another scope) runs on
 * and is stored.  A completion already queued to the ledger writer when
 * the purge arrives is answered FENCED before the purge and its record is
 * gone.  Backoffs under the prefix are dropped too. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "harness.h"

#define T 5000                  /* ms to wait for what must happen */

static struct broker_proc bp;
static coord_msg m;

static void start(void) { start_or_exit(&bp, NULL); }
static void stop(void) { stop_and_clean(&bp); }
static struct rcl *client_in(const char *scope) { return connect_or_exit(&bp, scope); }

static bool role_is(const char *role) { return msg_str_is(&m, "role", role, strlen(role)); }
static bool reason_is(const char *r) { return msg_str_is(&m, "reason", r, strlen(r)); }

static void join(struct rcl *c, uint64_t rid, const char *key)
{
    coord_enc *e = rcl_begin(c, "flight.join", rid);
    coord_enc_kv_cstr(e, "key", key);
    rcl_send(c);
}

/* c owns a new flight of key: its id and fence */
static void own(struct rcl *c, uint64_t rid, const char *key, uint64_t *flight, uint64_t *fence)
{
    join(c, rid, key);
    REQUIRE(rcl_reply(c, rid, T, &m) == 0 && role_is("owner"));
    *flight = msg_uint(&m, "flight");
    *fence = msg_uint(&m, "fence");
}

static void complete_fields(coord_enc *e, uint64_t flight, uint64_t fence,
                            const char *result, uint64_t keep_ms)
{
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", result, strlen(result));
    coord_enc_kv_uint(e, "keep_ms", keep_ms);
}

static int complete(struct rcl *c, uint64_t rid, uint64_t flight, uint64_t fence,
                    const char *result, uint64_t keep_ms)
{
    complete_fields(rcl_begin(c, "flight.complete", rid), flight, fence, result, keep_ms);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

static int purge(struct rcl *c, uint64_t rid, const char *prefix)
{
    coord_enc *e = rcl_begin(c, "record.purge", rid);
    coord_enc_kv_cstr(e, "prefix", prefix);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

/* record.get of key: true when the broker has no record of it */
static bool no_record(struct rcl *c, uint64_t rid, const char *key)
{
    coord_enc *e = rcl_begin(c, "record.get", rid);
    coord_enc_kv_cstr(e, "key", key);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m) == 0 && msg_code_is(&m, "NOT_FOUND");
}

static bool record_holds(struct rcl *c, uint64_t rid, const char *key, const char *want)
{
    coord_enc *e = rcl_begin(c, "record.get", rid);
    coord_enc_kv_cstr(e, "key", key);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m) == 0 && msg_ok(&m) &&
           msg_bin_is(&m, "result", want, strlen(want));
}

/* Note 002's "logout during request": an owner running with keep_ms, a
 * follower waiting, the session's scope purged. */
static void test_logout_during_request(void)
{
    start();
    struct rcl *owner = client_in("alice"), *follower = client_in("alice"),
               *other = client_in("alice"), *bob = client_in("bob"),
               *logout = client_in("alice");
    uint64_t fl, fe, fl2, fe2, flb, feb;
    own(owner, 1, "api/me", &fl, &fe);
    join(follower, 1, "api/me");
    REQUIRE(rcl_sync(follower) == 0);
    CHECK_EQ_U(rcl_queued(follower), 0);              /* it waits */
    own(other, 1, "cfg/theme", &fl2, &fe2);           /* not under "api/" */
    own(bob, 1, "api/me", &flb, &feb);                /* another scope */

    /* logout of alice's api/ */
    REQUIRE(purge(logout, 2, "api/") == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "deleted"), 0);
    CHECK_EQ_U(msg_uint(&m, "fenced"), 1);
    /* the follower failed, at once, without a result */
    REQUIRE(rcl_reply(follower, 1, T, &m) == 0);
    CHECK(msg_code_is(&m, "ABORTED") && reason_is("purged"));
    CHECK(!map_has(m.map, "result"));
    /* the owner was told to stop ... */
    REQUIRE(rcl_event(owner, "flight.abort", T, &m) == 0);
    CHECK(reason_is("purged"));
    CHECK_EQ_U(msg_uint(&m, "flight"), fl);
    /* ... and its late result is refused, and not kept */
    REQUIRE(complete(owner, 3, fl, fe, "alice's private profile", 3600 * 1000) == 0);
    CHECK(msg_code_is(&m, "FENCED") && reason_is("purged"));
    CHECK(no_record(logout, 4, "api/me"));
    /* once heard, the refusal is the ordinary one for an ended flight */
    REQUIRE(complete(owner, 5, fl, fe, "again", 3600 * 1000) == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    /* the next join of the key is a new flight (a new session's request) */
    uint64_t fl3, fe3;
    own(follower, 6, "api/me", &fl3, &fe3);
    CHECK(fl3 != fl);
    join(follower, 7, "api/me");                     /* ... that is deduplicated */
    REQUIRE(rcl_sync(follower) == 0);
    CHECK_EQ_U(rcl_queued(follower), 0);
    REQUIRE(complete(follower, 8, fl3, fe3, "new session", 0) == 0);
    CHECK(msg_ok(&m) && msg_uint(&m, "delivered") == 1);
    REQUIRE(rcl_reply(follower, 7, T, &m) == 0 && role_is("result"));

    /* what the purge did not cover ran on and is stored */
    REQUIRE(complete(other, 2, fl2, fe2, "dark", 3600 * 1000) == 0);
    CHECK(msg_ok(&m));
    REQUIRE(complete(bob, 2, flb, feb, "bob's profile", 3600 * 1000) == 0);
    CHECK(msg_ok(&m));
    CHECK(record_holds(other, 3, "cfg/theme", "dark"));
    CHECK(record_holds(bob, 3, "api/me", "bob's profile"));
    CHECK_EQ_U(rcl_stat(logout, "flights_purged"), 1);
    CHECK_EQ_U(rcl_stat(logout, "flights"), 0);

    /* and after a kill -9 of the broker */
    rcl_close(owner);
    rcl_close(follower);
    rcl_close(other);
    rcl_close(bob);
    rcl_close(logout);
    CHECK(WIFSIGNALED(broker_kill(&bp, SIGKILL)));
    REQUIRE(broker_start(&bp, NULL) == 0);
    struct rcl *a = client_in("alice"), *b = client_in("bob");
    CHECK(no_record(a, 1, "api/me"));
    CHECK(record_holds(a, 2, "cfg/theme", "dark"));
    CHECK(record_holds(b, 3, "api/me", "bob's profile"));
    rcl_close(a);
    rcl_close(b);
    stop();
}

/* The owner's connection goes, or its deadline passes, after the purge:
 * the tombstone goes with it (no promotion, nothing left running). */
static void test_purged_owner_leaves(void)
{
    start();
    struct rcl *o = client_in("s"), *p = client_in("s");
    uint64_t fl, fe;
    own(o, 1, "k", &fl, &fe);
    REQUIRE(purge(p, 1, "") == 0);
    CHECK_EQ_U(msg_uint(&m, "fenced"), 1);
    REQUIRE(rcl_event(o, "flight.abort", T, &m) == 0 && reason_is("purged"));
    rcl_close(o);
    REQUIRE(rcl_sync(p) == 0);
    CHECK_EQ_U(rcl_stat(p, "flights"), 0);
    /* the whole scope purged again: nothing left to fence */
    REQUIRE(purge(p, 2, "") == 0);
    CHECK_EQ_U(msg_uint(&m, "fenced"), 0);
    /* a short owner_ttl: its deadline ends the tombstone, without a
     * second abort */
    struct rcl *o2 = client_in("s");
    coord_enc *e = rcl_begin(o2, "flight.join", 3);
    coord_enc_kv_cstr(e, "key", "k2");
    coord_enc_kv_uint(e, "owner_ttl_ms", 200);
    rcl_send(o2);
    REQUIRE(rcl_reply(o2, 3, T, &m) == 0 && role_is("owner"));
    uint64_t fl2 = msg_uint(&m, "flight"), fe2 = msg_uint(&m, "fence");
    REQUIRE(purge(p, 4, "k") == 0);
    CHECK_EQ_U(msg_uint(&m, "fenced"), 1);
    REQUIRE(rcl_event(o2, "flight.abort", T, &m) == 0 && reason_is("purged"));
    CHECK(rcl_event(o2, "flight.abort", 600, &m) != 0);
    REQUIRE(complete(o2, 5, fl2, fe2, "late", 60000) == 0);
    CHECK(msg_code_is(&m, "FENCED"));
    CHECK(no_record(p, 6, "k2"));
    rcl_close(o2);
    rcl_close(p);
    stop();
}

/* A completion already queued to the ledger writer when the purge comes:
 * both frames in one write, so the broker reads them in one turn.  The
 * completion is answered first (FENCED purged: nothing delivered), the
 * follower fails, and the record the writer may have stored is deleted by
 * the purge that was queued after it. */
static void test_purge_while_completing(void)
{
    start();
    struct rcl *o = client_in("s"), *f = client_in("s");
    uint64_t fl, fe;
    own(o, 1, "token", &fl, &fe);
    join(f, 1, "token");
    REQUIRE(rcl_sync(f) == 0);
    coord_buf both;
    coord_buf_init(&both);
    coord_enc e;
    coord_enc_begin(&e, &both);
    coord_enc_kv_cstr(&e, "op", "flight.complete");
    coord_enc_kv_uint(&e, "rid", 2);
    complete_fields(&e, fl, fe, "secret", 3600 * 1000);
    REQUIRE(coord_enc_end(&e) > 0);
    coord_enc_begin(&e, &both);
    coord_enc_kv_cstr(&e, "op", "record.purge");
    coord_enc_kv_uint(&e, "rid", 3);
    coord_enc_kv_cstr(&e, "prefix", "");
    REQUIRE(coord_enc_end(&e) > 0);
    REQUIRE(rcl_write(o, both.data, both.len) == 0);
    coord_buf_free(&both);
    /* replies in order: the completion, then the purge */
    REQUIRE(rcl_next(o, T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "rid"), 2);
    CHECK(msg_code_is(&m, "FENCED") && reason_is("purged"));
    REQUIRE(rcl_next(o, T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "rid"), 3);
    CHECK(msg_ok(&m) && msg_uint(&m, "fenced") == 1);
    REQUIRE(rcl_reply(f, 1, T, &m) == 0);
    CHECK(msg_code_is(&m, "ABORTED") && reason_is("purged"));
    CHECK(no_record(o, 4, "token"));
    rcl_close(o);
    rcl_close(f);
    CHECK(WIFSIGNALED(broker_kill(&bp, SIGKILL)));
    REQUIRE(broker_start(&bp, NULL) == 0);
    struct rcl *c = client_in("s");
    CHECK(no_record(c, 1, "token"));
    rcl_close(c);
    stop();
}

/* A backoff holds the owner's failure: a purge drops it with the flights. */
static void test_purge_drops_backoff(void)
{
    start();
    struct rcl *o = client_in("s"), *p = client_in("s"), *other = client_in("t");
    uint64_t fl, fe;
    for (int i = 0; i < 2; i++) {
        struct rcl *c = i ? other : o;
        own(c, 10, "rl", &fl, &fe);
        coord_enc *e = rcl_begin(c, "flight.fail", 11);
        coord_enc_kv_uint(e, "flight", fl);
        coord_enc_kv_uint(e, "fence", fe);
        coord_enc_key(e, "error");
        coord_enc_map_begin(e);
        coord_enc_kv_cstr(e, "code", "429");
        coord_enc_kv_cstr(e, "message", "slow down, alice");
        coord_enc_map_end(e);
        coord_enc_kv_bool(e, "retryable", true);
        coord_enc_kv_uint(e, "retry_after_ms", 600000);
        rcl_send(c);
        REQUIRE(rcl_reply(c, 11, T, &m) == 0 && msg_ok(&m));
    }
    join(p, 1, "rl");
    REQUIRE(rcl_reply(p, 1, T, &m) == 0);
    CHECK(role_is("failed") && msg_str_is(&m, "source", S("backoff")));
    REQUIRE(purge(p, 2, "") == 0);
    join(p, 3, "rl");
    REQUIRE(rcl_reply(p, 3, T, &m) == 0);
    CHECK(role_is("owner"));
    /* the other scope keeps its own */
    join(other, 4, "rl");
    REQUIRE(rcl_reply(other, 4, T, &m) == 0);
    CHECK(role_is("failed") && msg_str_is(&m, "source", S("backoff")));
    rcl_close(o);
    rcl_close(p);
    rcl_close(other);
    stop();
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "logout_during_request", test_logout_during_request },
        { "purged_owner_leaves", test_purged_owner_leaves },
        { "purge_while_completing", test_purge_while_completing },
        { "purge_drops_backoff", test_purge_drops_backoff },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
