/* test_log_redaction.c - the broker's log holds no name, key, channel,
 * workstream, scope, op id or client text, even at debug level: only
 * keyed hashes, stable across restarts (the key is in the data dir).
 * --log-names plain shows them. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include "harness.h"
#include "proc.h"

#define T 5000
static struct broker_proc bp;
static coord_msg m;

/* Every kind of name a client can give, each holding "SECRET". */
static void exercise(void)
{
    struct rcl *c = rcl_connect(bp.sock);
    REQUIRE(c);
    coord_enc *e = rcl_begin(c, "hello", 1);
    coord_enc_kv_uint(e, "proto", 1);
    coord_enc_kv_cstr(e, "client", "client-SECRET");
    coord_enc_kv_cstr(e, "scope", "scope-SECRET");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 1, T, &m) == 0 && msg_ok(&m));
    REQUIRE(rcl_acquire(c, 2, S("lock-SECRET"), NULL, 0, 0) == 0);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0);
    e = rcl_begin(c, "sub.subscribe", 3);
    coord_enc_kv_cstr(e, "channel", "chan-SECRET");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 3, T, &m) == 0);
    e = rcl_begin(c, "flight.join", 4);
    coord_enc_kv_cstr(e, "key", "key-SECRET");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 4, T, &m) == 0);
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    e = rcl_begin(c, "flight.fail", 5);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_key(e, "error");
    coord_enc_map_begin(e);
    coord_enc_kv_cstr(e, "code", "code-SECRET");
    coord_enc_kv_cstr(e, "message", "message-SECRET");
    coord_enc_map_end(e);
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 5, T, &m) == 0);
    e = rcl_begin(c, "leader.campaign", 6);
    coord_enc_kv_cstr(e, "workstream", "ws-SECRET");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 6, T, &m) == 0 && msg_bool(&m, "granted"));
    uint64_t gen = msg_uint(&m, "generation");
    e = rcl_begin(c, "leader.commit", 7);
    coord_enc_kv_cstr(e, "workstream", "ws-SECRET");
    coord_enc_kv_uint(e, "generation", gen);
    coord_enc_kv_cstr(e, "op_id", "op-SECRET");
    coord_enc_kv_cstr(e, "key", "kv-SECRET");
    coord_enc_kv_bin(e, "value", "value-SECRET", 12);
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 7, T, &m) == 0);
    rcl_close(c);
}

static void test_hashes_only(void)
{
    const char *args[] = { "--log-level", "debug", NULL };
    start_or_exit(&bp, args);
    exercise();
    CHECK(broker_kill(&bp, SIGTERM) != -1);
    char *log = slurp(bp.log, NULL);
    REQUIRE(log);
    CHECK(strstr(log, "flight.transition") != NULL);    /* debug lines were written */
    CHECK(strstr(log, "conn.hello") != NULL);
    CHECK(strstr(log, "SECRET") == NULL);
    if (strstr(log, "SECRET"))
        fprintf(stderr, "log:\n%s\n", log);
    free(log);
    broker_cleanup(&bp);
}

static void test_plain_for_debugging(void)
{
    const char *args[] = { "--log-level", "debug", "--log-names", "plain", NULL };
    start_or_exit(&bp, args);
    exercise();
    CHECK(broker_kill(&bp, SIGTERM) != -1);
    char *log = slurp(bp.log, NULL);
    REQUIRE(log);
    CHECK(strstr(log, "key-SECRET") != NULL);
    CHECK(strstr(log, "client-SECRET") != NULL);
    free(log);
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "hashes_only", test_hashes_only },
        { "plain_for_debugging", test_plain_for_debugging },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
