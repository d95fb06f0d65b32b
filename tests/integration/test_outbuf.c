/* test_outbuf.c - output backpressure: a client that reads is never cut off
 * for pipelining (replies wait, its requests are read as its output
 * drains), a record as large as --max-frame allows can be read back, and
 * an output cap that could not hold one largest reply is refused at start.
 * The cut of a client that does not read is in test_connections.c
 * (slow_reader_cut_off) and test_cutoff.c. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

#define T 20000
static struct broker_proc bp;
static coord_msg m;

/* A completion record under key holding n bytes of 'r'.  0 or -1. */
static int make_record(struct rcl *c, const char *key, size_t n)
{
    coord_enc *e = rcl_begin(c, "flight.join", 900);
    coord_enc_kv_cstr(e, "key", key);
    if (rcl_send(c) || rcl_reply(c, 900, T, &m) || !msg_str_is(&m, "role", "owner", 5))
        return -1;
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    uint8_t *res = malloc(n);
    if (!res)
        return -1;
    memset(res, 'r', n);
    e = rcl_begin(c, "flight.complete", 901);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", res, n);
    coord_enc_kv_uint(e, "keep_ms", 600000);
    free(res);
    if (rcl_send(c) || rcl_reply(c, 901, T, &m))
        return -1;
    return msg_ok(&m) ? 0 : -1;
}

/* 100 record.get of a 1 MiB record in one write, read as they come: every
 * one is answered, the connection and its lock stay. */
static void test_pipelined_gets_all_answered(void)
{
    enum { N = 100 };
    const size_t size = (1u << 20) - 512;
    start_or_exit(&bp, NULL);
    struct rcl *c = connect_or_exit(&bp, NULL);
    REQUIRE(rcl_acquire(c, 2, S("held"), NULL, 0, 0) == 0);
    REQUIRE(rcl_reply(c, 2, T, &m) == 0 && msg_bool(&m, "granted"));
    REQUIRE(make_record(c, "big", size) == 0);
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    for (uint64_t i = 0; i < N; i++) {
        coord_enc_begin(&e, &b);
        coord_enc_kv_cstr(&e, "op", "record.get");
        coord_enc_kv_uint(&e, "rid", 1000 + i);
        coord_enc_kv_cstr(&e, "key", "big");
        coord_enc_end(&e);
    }
    REQUIRE(rcl_write(c, b.data, b.len) == 0);   /* 3 KiB: the kernel takes it */
    coord_buf_free(&b);
    int answered = 0;
    for (uint64_t i = 0; i < N; i++) {
        if (rcl_reply(c, 1000 + i, T, &m) != 0)
            break;
        coord_bytes r = msg_bytes(&m, "result");
        if (msg_ok(&m) && r.len == size)
            answered++;
    }
    fprintf(stderr, "pipelined record.get of %zu bytes: %d of %d answered\n", size,
            answered, N);
    CHECK_EQ_U(answered, N);
    CHECK_EQ_U(rcl_stat(c, "outbuf_disconnects"), 0);
    CHECK(rcl_stat(c, "outbuf_pauses") > 0);
    CHECK_EQ_U(rcl_stat(c, "locks_held"), 1);
    CHECK_EQ_U(rcl_stat(c, "connections"), 1);
    rcl_close(c);
    stop_and_clean(&bp);
}

/* --max-frame 64 MiB with no --max-outbuf: a 20 MiB record flight.complete
 * accepted is read back whole. */
static void test_large_record_readable(void)
{
    const size_t size = 20u << 20;
    const char *args[] = { "--max-frame", "67108864", NULL };
    start_or_exit(&bp, args);
    struct rcl *c = connect_or_exit(&bp, NULL);
    REQUIRE(make_record(c, "huge", size) == 0);
    coord_enc *e = rcl_begin(c, "record.get", 5);
    coord_enc_kv_cstr(e, "key", "huge");
    REQUIRE(rcl_send(c) == 0);
    REQUIRE(rcl_reply(c, 5, T, &m) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_bytes(&m, "result").len, size);
    struct rcl *o = connect_or_exit(&bp, NULL);
    CHECK_EQ_U(rcl_stat(o, "outbuf_disconnects"), 0);
    CHECK_EQ_U(rcl_stat(o, "connections"), 2);
    REQUIRE(rcl_request(o, "stats", 7) == 0 && rcl_reply(o, 7, T, &m) == 0);
    const msgpack_object *lim = coord_map_find(m.map, "limits");
    REQUIRE(lim && lim->type == MSGPACK_OBJECT_MAP);
    const msgpack_object *ob = coord_map_find(&lim->via.map, "max_outbuf");
    CHECK(ob && ob->type == MSGPACK_OBJECT_POSITIVE_INTEGER && ob->via.u64 == 128u << 20);
    rcl_close(o);
    rcl_close(c);
    stop_and_clean(&bp);
}

/* Starts coordd with args; its exit status within 10 s (-1: still running,
 * it is killed) and the start's log in bp.log. */
static int start_status(const char *const *args, bool *ready)
{
    memset(&bp, 0, sizeof bp);
    int fd;
    pid_t pid = broker_spawn(&bp, args, true, 0, &fd);
    if (pid < 0)
        return -1;
    *ready = broker_await_ready(fd, 10000);
    if (*ready)
        kill(pid, SIGTERM);
    int st = wait_pid_timeout(pid, 10000);
    if (st == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return st;
}

/* An output cap that cannot hold one max_frame reply is refused at start
 * with the figures; one that can is accepted. */
static void test_outbuf_below_frame_refused(void)
{
    const char *bad[] = { "--max-outbuf", "4096", "--max-frame", "1048576", NULL };
    bool ready = true;
    int st = start_status(bad, &ready);
    CHECK(!ready);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
    char *log = slurp(bp.log, NULL);
    CHECK(log && strstr(log, "--max-outbuf 4096 is below --max-frame 1048576"));
    free(log);
    broker_cleanup(&bp);
    const char *edge[] = { "--max-outbuf", "4096", "--max-frame", "3068", NULL };
    st = start_status(edge, &ready);
    CHECK(ready);
    broker_cleanup(&bp);
    const char *under[] = { "--max-outbuf", "4096", "--max-frame", "3069", NULL };
    st = start_status(under, &ready);
    CHECK(!ready);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 2);
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "pipelined_gets_all_answered", test_pipelined_gets_all_answered },
        { "large_record_readable", test_large_record_readable },
        { "outbuf_below_frame_refused", test_outbuf_below_frame_refused },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
