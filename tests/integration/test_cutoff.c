/* test_cutoff.c - clients cut off at the output cap in the middle of the
 * broker's own work: a grant while a queue is processed, a delivery to the
 * followers of a flight, a steal, pipelined grants, a fan-out, a shutdown.
 * Each scenario once crashed the broker (or looped forever); now the
 * victim is cut off, and everyone else gets exactly what the protocol
 * promises.
 *
 * The victim's queued output is brought to just under the cap: it stops
 * reading, a feeder publishes small messages to a channel it subscribed
 * to, and FIONREAD on the victim's socket tells how much the kernel holds,
 * so the bytes still queued in the broker are known exactly.  The next
 * frame the scenario makes the broker send it then crosses the cap. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

#define T 5000
#define CAP 4096
static const char *const cap_args[] = { "--max-outbuf", "4096", "--max-frame", "2048", NULL };
static struct broker_proc bp;
static coord_msg m;

static int subscribe(struct rcl *c, uint64_t rid, const char *ch)
{
    coord_enc *e = rcl_begin(c, "sub.subscribe", rid);
    coord_enc_kv_cstr(e, "channel", ch);
    if (rcl_send(c) || rcl_reply(c, rid, T, &m))
        return -1;
    return msg_ok(&m) ? 0 : -1;
}

static int publish(struct rcl *c, uint64_t rid, const char *ch, size_t n)
{
    uint8_t *data = malloc(n ? n : 1);
    memset(data, 'd', n);
    coord_enc *e = rcl_begin(c, "sub.publish", rid);
    coord_enc_kv_cstr(e, "channel", ch);
    coord_enc_kv_bin(e, "data", data, n);
    free(data);
    return rcl_send(c);
}

/* Brings the output queued for victim (subscribed to "fill", reading no
 * more) to within one small event of the cap.  Returns the bytes of room
 * left, or SIZE_MAX on failure. */
static size_t fill_near_cap(struct rcl *feeder, struct rcl *victim)
{
    uint64_t rid = 1000;
    size_t base = rcl_unread(victim);
    if (publish(feeder, ++rid, "fill", 1) || rcl_reply(feeder, rid, T, &m) ||
        rcl_sync(feeder))
        return SIZE_MAX;
    size_t ev = rcl_unread(victim) - base;       /* one event's bytes */
    size_t generated = base + ev;
    /* batches while the kernel still takes everything, then one by one */
    for (int guard = 0; guard < 100000; guard++) {
        size_t queued = generated - rcl_unread(victim);
        if (queued + ev > CAP)
            return CAP - queued;
        int batch = queued == 0 ? 40 : 1;
        for (int i = 0; i < batch; i++)
            if (publish(feeder, ++rid, "fill", 1))
                return SIZE_MAX;
        for (int i = 0; i < batch; i++)
            if (rcl_reply(feeder, rid - (uint64_t)batch + 1 + (uint64_t)i, T, &m))
                return SIZE_MAX;
        if (rcl_sync(feeder))
            return SIZE_MAX;
        generated += (size_t)batch * ev;
    }
    return SIZE_MAX;
}

static struct rcl *victim_open(void)
{
    struct rcl *v = connect_or_exit(&bp, NULL);
    if (subscribe(v, 1, "fill") < 0) {
        rcl_close(v);
        return NULL;
    }
    return v;
}

/* A waiter whose grant crosses the cap while its queue is processed: the
 * release that grants it must find the queue intact afterwards (the cut
 * waiter was its last user). */
static void test_grant_while_processing_queue(void)
{
    start_or_exit(&bp, cap_args);
    struct rcl *h = connect_or_exit(&bp, NULL), *other = connect_or_exit(&bp, NULL);
    struct rcl *v = victim_open();
    REQUIRE(v);
    REQUIRE(rcl_acquire(h, 1, "L", 1, NULL, 0, 0) == 0);
    REQUIRE(rcl_reply(h, 1, T, &m) == 0 && msg_bool(&m, "granted"));
    uint64_t hlock = msg_uint(&m, "lock");
    REQUIRE(rcl_acquire(v, 2, "L", 1, NULL, 0, 0) == 0);
    REQUIRE(rcl_sync(h) == 0);
    REQUIRE(fill_near_cap(other, v) != SIZE_MAX);
    coord_enc *e = rcl_begin(h, "lock.release", 2);
    coord_enc_kv_uint(e, "lock", hlock);
    REQUIRE(rcl_send(h) == 0);
    REQUIRE(rcl_reply(h, 2, T, &m) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(rcl_stat(h, "outbuf_disconnects"), 1);
    CHECK_EQ_U(rcl_stat(h, "locks_held"), 0);
    CHECK_EQ_U(rcl_stat(h, "lock_names"), 0);
    /* the name is free again for everyone */
    REQUIRE(rcl_acquire(other, 3, "L", 1, "if_available", 0, 0) == 0);
    REQUIRE(rcl_reply(other, 3, T, &m) == 0);
    CHECK(msg_bool(&m, "granted"));
    rcl_close(v);
    rcl_close(h);
    rcl_close(other);
    stop_and_clean(&bp);
}

/* An owner that also follows its own flight, cut while its followers are
 * answered. */
static void test_owner_following_itself(void)
{
    start_or_exit(&bp, cap_args);
    struct rcl *feeder = connect_or_exit(&bp, NULL), *f2 = connect_or_exit(&bp, NULL);
    struct rcl *o = victim_open();
    REQUIRE(o);
    coord_enc *e = rcl_begin(o, "flight.join", 2);
    coord_enc_kv_cstr(e, "key", "K");
    REQUIRE(rcl_send(o) == 0);
    REQUIRE(rcl_reply(o, 2, T, &m) == 0);
    CHECK(msg_str_is(&m, "role", "owner", 5));
    uint64_t flight = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    e = rcl_begin(o, "flight.join", 3);                /* itself, as follower */
    coord_enc_kv_cstr(e, "key", "K");
    REQUIRE(rcl_send(o) == 0);
    e = rcl_begin(f2, "flight.join", 2);
    coord_enc_kv_cstr(e, "key", "K");
    REQUIRE(rcl_send(f2) == 0);
    REQUIRE(rcl_sync(f2) == 0);
    REQUIRE(fill_near_cap(feeder, o) != SIZE_MAX);
    e = rcl_begin(o, "flight.complete", 4);
    coord_enc_kv_uint(e, "flight", flight);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", "the result", 10);
    REQUIRE(rcl_send(o) == 0);
    /* f2 gets the result (it is not promoted to owner) */
    REQUIRE(rcl_reply(f2, 2, T, &m) == 0);
    CHECK(msg_str_is(&m, "role", "result", 6));
    CHECK(msg_str_is(&m, "result", "the result", 10));
    CHECK_EQ_U(msg_uint(&m, "fence"), fence);
    CHECK_EQ_U(rcl_stat(f2, "outbuf_disconnects"), 1);
    CHECK_EQ_U(rcl_stat(f2, "flights"), 0);
    rcl_close(o);
    rcl_close(f2);
    rcl_close(feeder);
    stop_and_clean(&bp);
}

/* A steal from a holder of two shared locks, cut by the first lock.lost. */
static void test_steal_from_double_holder(void)
{
    start_or_exit(&bp, cap_args);
    struct rcl *feeder = connect_or_exit(&bp, NULL), *x = connect_or_exit(&bp, NULL);
    struct rcl *w = connect_or_exit(&bp, NULL);
    struct rcl *s = victim_open();
    REQUIRE(s);
    REQUIRE(subscribe(w, 1, "-locks") == 0);
    for (uint64_t rid = 2; rid <= 3; rid++) {
        REQUIRE(rcl_acquire(s, rid, "N", 1, "shared", 0, 0) == 0);
        REQUIRE(rcl_reply(s, rid, T, &m) == 0 && msg_bool(&m, "granted"));
    }
    REQUIRE(fill_near_cap(feeder, s) != SIZE_MAX);
    REQUIRE(rcl_acquire(x, 1, "N", 1, "steal", 0, 0) == 0);
    REQUIRE(rcl_reply(x, 1, T, &m) == 0);
    CHECK(msg_bool(&m, "granted"));
    uint64_t xlock = msg_uint(&m, "lock");
    /* the watcher sees both shared locks lost, then x granted, each once */
    int lost = 0, granted_x = 0, released = 0;
    for (int i = 0; i < 10 && !(lost == 2 && granted_x == 1); i++) {
        if (rcl_event(w, "lifecycle", T, &m))
            break;
        if (msg_str_is(&m, "what", "lost", 4)) lost++;
        if (msg_str_is(&m, "what", "granted", 7) && msg_uint(&m, "lock") == xlock) granted_x++;
        if (msg_str_is(&m, "what", "released", 8)) released++;
    }
    CHECK_EQ_U(lost, 2);
    CHECK_EQ_U(granted_x, 1);
    CHECK_EQ_U(released, 0);
    CHECK_EQ_U(rcl_stat(x, "outbuf_disconnects"), 1);
    CHECK_EQ_U(rcl_stat(x, "locks_held"), 1);
    rcl_close(s);
    rcl_close(x);
    rcl_close(w);
    rcl_close(feeder);
    stop_and_clean(&bp);
}

/* Pipelined acquires of distinct names, granted at once, never read: the
 * broker stops reading them at the pause mark, and cuts the client once its
 * output has made no progress for LIMIT_OUTBUF_STALL_MS (10 s). */
static void test_pipelined_grants(void)
{
    start_or_exit(&bp, cap_args);
    struct rcl *good = connect_or_exit(&bp, NULL);
    struct rcl *p = rcl_connect(bp.sock);
    REQUIRE(p && rcl_hello(p, NULL) == 0);
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    for (uint64_t i = 1; i <= 20000; i++) {
        char name[32];
        int n = snprintf(name, sizeof name, "p%llu", (unsigned long long)i);
        coord_enc_begin(&e, &b);
        coord_enc_kv_cstr(&e, "op", "lock.acquire");
        coord_enc_kv_uint(&e, "rid", i);
        coord_enc_kv_str(&e, "name", name, (size_t)n);
        coord_enc_end(&e);
    }
    pid_t writer = fork();
    if (writer == 0)
        _exit(rcl_write(p, b.data, b.len) == 0 ? 0 : 1);
    coord_buf_free(&b);
    /* the broker cuts p off; everything p held is released */
    bool done = false;
    for (uint64_t t0 = now_ms(); !done && now_ms() - t0 < 30000;) {
        done = rcl_stat(good, "outbuf_disconnects") == 1 && rcl_stat(good, "locks_held") == 0;
        if (!done)
            usleep(20000);          /* polling a counter: no event to await */
    }
    CHECK(done);
    CHECK_EQ_U(rcl_stat(good, "outbuf_stalls"), 1);
    CHECK(wait_pid_timeout(writer, 10000) != -1);
    REQUIRE(rcl_acquire(good, 1, "p1", 2, NULL, 0, 0) == 0);
    REQUIRE(rcl_reply(good, 1, T, &m) == 0);
    CHECK(msg_bool(&m, "granted"));
    rcl_close(p);
    rcl_close(good);
    stop_and_clean(&bp);
}

/* A subscriber holding a lock is cut during a fan-out: the others still
 * get the message, and nothing they did not subscribe to. */
static void test_fan_out_cut(void)
{
    start_or_exit(&bp, cap_args);
    struct rcl *feeder = connect_or_exit(&bp, NULL), *pub = connect_or_exit(&bp, NULL);
    struct rcl *watch = connect_or_exit(&bp, NULL);
    struct rcl *s1 = victim_open();
    REQUIRE(s1);
    REQUIRE(rcl_acquire(s1, 2, "L", 1, NULL, 0, 0) == 0);
    REQUIRE(rcl_reply(s1, 2, T, &m) == 0 && msg_bool(&m, "granted"));
    REQUIRE(subscribe(s1, 3, "X") == 0);
    struct rcl *s2 = connect_or_exit(&bp, NULL), *s3 = connect_or_exit(&bp, NULL);
    REQUIRE(subscribe(s2, 1, "X") == 0);
    REQUIRE(subscribe(s3, 1, "X") == 0);
    REQUIRE(subscribe(watch, 1, "-locks") == 0);
    REQUIRE(fill_near_cap(feeder, s1) != SIZE_MAX);
    REQUIRE(publish(pub, 1, "X", 300) == 0);
    REQUIRE(rcl_reply(pub, 1, T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), 2);
    struct rcl *subs[2] = { s2, s3 };
    for (int i = 0; i < 2; i++) {
        REQUIRE(rcl_event(subs[i], "message", T, &m) == 0);
        CHECK(msg_str_is(&m, "channel", "X", 1));
        const msgpack_object *d = coord_map_find(m.map, "data");
        CHECK(d && d->type == MSGPACK_OBJECT_BIN && d->via.bin.size == 300);
        REQUIRE(rcl_sync(subs[i]) == 0);
        CHECK_EQ_U(rcl_queued(subs[i]), 0);            /* no stray lifecycle event */
    }
    /* the cut holder's lock is released, once */
    REQUIRE(rcl_event(watch, "lifecycle", T, &m) == 0);
    CHECK(msg_str_is(&m, "what", "released", 8));
    CHECK(msg_str_is(&m, "name", "L", 1));
    REQUIRE(rcl_sync(watch) == 0);
    CHECK_EQ_U(rcl_queued(watch), 0);
    rcl_close(s1);
    rcl_close(s2);
    rcl_close(s3);
    rcl_close(pub);
    rcl_close(watch);
    rcl_close(feeder);
    stop_and_clean(&bp);
}

/* SIGTERM while a waiter is granted by shutdown's aborts and cut by it:
 * the broker still exits, 0, at once. */
static void test_shutdown_grants_cut_waiter(void)
{
    start_or_exit(&bp, cap_args);
    struct rcl *h = connect_or_exit(&bp, NULL), *a = connect_or_exit(&bp, NULL);
    struct rcl *v = victim_open();
    REQUIRE(v);
    REQUIRE(rcl_acquire(h, 1, "L", 1, "shared", 0, 0) == 0);
    REQUIRE(rcl_reply(h, 1, T, &m) == 0 && msg_bool(&m, "granted"));
    REQUIRE(rcl_acquire(a, 1, "L", 1, NULL, 0, 0) == 0);       /* exclusive, waits */
    REQUIRE(rcl_acquire(v, 2, "L", 1, "shared", 0, 0) == 0);   /* behind a */
    REQUIRE(rcl_sync(a) == 0);
    REQUIRE(fill_near_cap(h, v) != SIZE_MAX);
    kill(bp.pid, SIGTERM);
    int st = wait_pid_timeout(bp.pid, 10000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (st != -1)
        bp.pid = -1;
    REQUIRE(rcl_reply(a, 1, T, &m) == 0);
    CHECK(msg_code_is(&m, "SHUTTING_DOWN"));
    rcl_close(v);
    rcl_close(a);
    rcl_close(h);
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "grant_while_processing_queue", test_grant_while_processing_queue },
        { "owner_following_itself", test_owner_following_itself },
        { "steal_from_double_holder", test_steal_from_double_holder },
        { "pipelined_grants", test_pipelined_grants },
        { "fan_out_cut", test_fan_out_cut },
        { "shutdown_grants_cut_waiter", test_shutdown_grants_cut_waiter },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
