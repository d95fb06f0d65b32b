/* test_locks.c - lock queues through a real broker: Web Locks ordering,
 * if_available, steal, cancel, timeouts, leases, tokens, and what happens
 * when holders and waiters die. One test per behaviour. */
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

static struct rcl *client(void) { return connect_or_exit(&bp, NULL); }

/* Send an acquire and wait until the broker has processed it. */
static void queue_up(struct rcl *c, uint64_t rid, const void *name, size_t n,
                     const char *opts, uint64_t timeout_ms, uint64_t lease_ms)
{
    rcl_acquire(c, rid, name, n, opts, timeout_ms, lease_ms);
    rcl_sync(c);
}

/* Acquire and expect a grant; returns the lock id (0 on failure). */
static uint64_t must_get(struct rcl *c, uint64_t rid, const char *name, const char *opts)
{
    queue_up(c, rid, S(name), opts, 0, 0);
    if (rcl_reply(c, rid, T, &m) != 0 || !msg_bool(&m, "granted"))
        return 0;
    return msg_uint(&m, "lock");
}

static bool granted_now(struct rcl *c, uint64_t rid)
{
    return rcl_reply(c, rid, T, &m) == 0 && msg_bool(&m, "granted");
}

static int release(struct rcl *c, uint64_t rid, uint64_t lock)
{
    coord_enc *e = rcl_begin(c, "lock.release", rid);
    coord_enc_kv_uint(e, "lock", lock);
    rcl_send(c);
    if (rcl_reply(c, rid, T, &m) != 0)
        return -1;
    return msg_ok(&m) ? 0 : (msg_code_is(&m, "UNKNOWN_LOCK") ? 1 : -1);
}

/* lock.query counts for one name (NULL: all) */
struct qcount { int held, pending; };
static struct qcount query(struct rcl *c, const char *name)
{
    static uint64_t rid = 900000;
    struct qcount q = { -1, -1 };
    rcl_begin(c, "lock.query", ++rid);
    rcl_send(c);
    if (rcl_reply(c, rid, T, &m) != 0)
        return q;
    q.held = q.pending = 0;
    const char *lists[2] = { "held", "pending" };
    for (int l = 0; l < 2; l++) {
        const msgpack_object *a = coord_map_find(m.map, lists[l]);
        if (!a || a->type != MSGPACK_OBJECT_ARRAY)
            return (struct qcount){ -1, -1 };
        for (uint32_t i = 0; i < a->via.array.size; i++) {
            if (name && !map_str_is(map_at(&a->via.array, i), "name", name, strlen(name)))
                continue;
            if (l == 0) q.held++; else q.pending++;
        }
    }
    return q;
}

static void cancel(struct rcl *c, uint64_t rid, uint64_t target, bool *cancelled)
{
    coord_enc *e = rcl_begin(c, "cancel", rid);
    coord_enc_kv_uint(e, "target", target);
    rcl_send(c);
    *cancelled = rcl_reply(c, rid, T, &m) == 0 && msg_bool(&m, "cancelled");
}

/* ---- ordering ---- */

static void test_exclusive_fifo_and_independent_names(void)
{
    start();
    struct rcl *h = client(), *w[5], *other = client();
    uint64_t lock = must_get(h, 1, "q", NULL);
    REQUIRE(lock);
    for (int i = 0; i < 5; i++) {
        w[i] = client();
        queue_up(w[i], 10, S("q"), NULL, 0, 0);
        CHECK_EQ_U(query(h, "q").pending, (unsigned)i + 1);   /* in order */
    }
    /* a blocked name never delays another */
    CHECK(must_get(other, 2, "elsewhere", NULL) != 0);
    uint64_t prev_token = 0;
    for (int i = 0; i < 5; i++) {
        release(h, 100 + (uint64_t)i, lock);
        /* exactly the next in line is granted, the rest still wait */
        REQUIRE(granted_now(w[i], 10));
        CHECK(msg_uint(&m, "token") > prev_token);
        prev_token = msg_uint(&m, "token");
        lock = msg_uint(&m, "lock");
        for (int j = i + 1; j < 5; j++)
            CHECK_EQ_U(rcl_queued(w[j]), 0);
        CHECK_EQ_U(query(h, "q").pending, 4 - (unsigned)i);
        rcl_close(h);
        h = w[i];
    }
    rcl_close(h);
    rcl_close(other);
    stop();
}

static void test_shared_groups_and_no_barging(void)
{
    start();
    struct rcl *a = client(), *b = client(), *x = client(), *s1 = client(), *s2 = client();
    /* shared holders coexist, also nested from one client */
    uint64_t a1 = must_get(a, 1, "r", "shared");
    uint64_t a2 = must_get(a, 2, "r", "shared");
    uint64_t b1 = must_get(b, 1, "r", "shared");
    CHECK(a1 && a2 && b1);
    CHECK_EQ_U(query(a, "r").held, 3);
    /* an exclusive waits for all of them */
    queue_up(x, 1, S("r"), NULL, 0, 0);
    /* shared requests behind the queued exclusive wait too (no barging) */
    queue_up(s1, 1, S("r"), "shared", 0, 0);
    queue_up(s2, 1, S("r"), "shared", 0, 0);
    CHECK_EQ_U(query(a, "r").pending, 3);
    release(a, 3, a1);
    release(a, 4, a2);
    CHECK_EQ_U(rcl_queued(x), 0);
    release(b, 2, b1);
    REQUIRE(granted_now(x, 1));
    uint64_t xl = msg_uint(&m, "lock");
    CHECK_EQ_U(query(a, "r").pending, 2);
    /* releasing the exclusive grants every shared at the head at once */
    release(x, 2, xl);
    CHECK(granted_now(s1, 1));
    CHECK(granted_now(s2, 1));
    struct qcount q = query(a, "r");
    CHECK_EQ_U(q.held, 2);
    CHECK_EQ_U(q.pending, 0);
    rcl_close(a); rcl_close(b); rcl_close(x); rcl_close(s1); rcl_close(s2);
    stop();
}

static void test_exclusive_between_shared_groups(void)
{
    start();
    struct rcl *s[4], *x = client();
    for (int i = 0; i < 4; i++)
        s[i] = client();
    uint64_t l0 = must_get(s[0], 1, "g", "shared");
    uint64_t l1 = must_get(s[1], 1, "g", "shared");
    queue_up(x, 1, S("g"), NULL, 0, 0);
    queue_up(s[2], 1, S("g"), "shared", 0, 0);
    queue_up(s[3], 1, S("g"), "shared", 0, 0);
    CHECK_EQ_U(query(x, "g").held, 2);
    CHECK_EQ_U(query(x, "g").pending, 3);
    release(s[0], 2, l0);
    release(s[1], 2, l1);
    REQUIRE(granted_now(x, 1));
    uint64_t xl = msg_uint(&m, "lock");
    /* the second shared group is still behind the exclusive */
    CHECK_EQ_U(rcl_queued(s[2]), 0);
    CHECK_EQ_U(rcl_queued(s[3]), 0);
    CHECK_EQ_U(query(x, "g").pending, 2);
    release(x, 2, xl);
    CHECK(granted_now(s[2], 1));
    CHECK(granted_now(s[3], 1));
    for (int i = 0; i < 4; i++)
        rcl_close(s[i]);
    rcl_close(x);
    stop();
}

/* ---- if_available ---- */

static void test_if_available(void)
{
    start();
    struct rcl *a = client(), *b = client(), *c = client();
    uint64_t l = must_get(a, 1, "f", "if_available");
    CHECK(l != 0);
    /* held: refused, also for the holder itself */
    queue_up(b, 1, S("f"), "if_available", 0, 0);
    REQUIRE(rcl_reply(b, 1, T, &m) == 0);
    CHECK(msg_ok(&m) && !msg_bool(&m, "granted"));
    CHECK(coord_map_find(m.map, "lock") == NULL);
    queue_up(a, 2, S("f"), "if_available", 0, 0);
    REQUIRE(rcl_reply(a, 2, T, &m) == 0);
    CHECK(msg_ok(&m) && !msg_bool(&m, "granted"));
    /* never queued */
    CHECK_EQ_U(query(a, "f").pending, 0);
    /* shared, on a name held shared but with an exclusive merely queued */
    release(a, 3, l);
    uint64_t sh = must_get(a, 4, "f", "shared");
    CHECK(sh != 0);
    queue_up(b, 2, S("f"), NULL, 0, 0); /* queued exclusive */
    CHECK_EQ_U(query(a, "f").pending, 1);
    queue_up(c, 1, S("f"), "shared,if_available", 0, 0);
    REQUIRE(rcl_reply(c, 1, T, &m) == 0);
    CHECK(msg_ok(&m) && !msg_bool(&m, "granted"));
    CHECK_EQ_U(query(a, "f").pending, 1);
    rcl_close(a); rcl_close(b); rcl_close(c);
    stop();
}

/* ---- steal ---- */

static void test_steal(void)
{
    start();
    struct rcl *h1 = client(), *h2 = client(), *w = client(), *st1 = client(), *st2 = client();
    uint64_t l1 = must_get(h1, 1, "s", "shared");
    uint64_t l2 = must_get(h2, 1, "s", "shared");
    queue_up(w, 1, S("s"), NULL, 0, 0); /* queued */
    /* steal breaks all shared holders; the stealer goes first */
    uint64_t sl1 = must_get(st1, 1, "s", "steal");
    REQUIRE(sl1 != 0);
    REQUIRE(rcl_event(h1, "lock.lost", T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "lock"), l1);
    CHECK(msg_str_is(&m, "reason", S("stolen")));
    CHECK(msg_str_is(&m, "name", S("s")));
    REQUIRE(rcl_event(h2, "lock.lost", T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "lock"), l2);
    /* their later release is UNKNOWN_LOCK */
    CHECK_EQ_U(release(h1, 2, l1), 1);
    CHECK_EQ_U(release(h2, 2, l2), 1);
    /* the queued request stays queued */
    struct qcount q = query(w, "s");
    CHECK_EQ_U(q.held, 1);
    CHECK_EQ_U(q.pending, 1);
    /* a later steal breaks the earlier stealer: the last steal wins */
    uint64_t sl2 = must_get(st2, 1, "s", "steal");
    REQUIRE(sl2 != 0);
    REQUIRE(rcl_event(st1, "lock.lost", T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "lock"), sl1);
    CHECK_EQ_U(release(st1, 2, sl1), 1);
    CHECK_EQ_U(query(w, "s").pending, 1);
    /* after the stealer releases, the deferred request is granted */
    CHECK_EQ_U(release(st2, 2, sl2), 0);
    CHECK(granted_now(w, 1));
    rcl_close(h1); rcl_close(h2); rcl_close(w); rcl_close(st1); rcl_close(st2);
    stop();
}

/* ---- cancel and timeouts ---- */

static void test_cancel_and_timeout(void)
{
    start();
    struct rcl *h = client(), *w1 = client(), *w2 = client();
    uint64_t l = must_get(h, 1, "c", NULL);
    queue_up(w1, 5, S("c"), NULL, 0, 0);
    queue_up(w2, 5, S("c"), NULL, 0, 0);
    bool cancelled;
    cancel(w1, 6, 5, &cancelled);
    CHECK(cancelled);
    REQUIRE(rcl_reply(w1, 5, T, &m) == 0);
    CHECK(msg_code_is(&m, "ABORTED"));
    CHECK_EQ_U(query(h, "c").pending, 1);
    /* only that request: the next in line gets the lock on release */
    release(h, 2, l);
    REQUIRE(granted_now(w2, 5));
    uint64_t l2 = msg_uint(&m, "lock");
    /* cancel after grant changes nothing */
    cancel(w2, 6, 5, &cancelled);
    CHECK(!cancelled);
    CHECK_EQ_U(query(h, "c").held, 1);
    CHECK_EQ_U(release(w2, 7, l2), 0);
    /* timeout_ms expiry: TIMEOUT and no trace in lock.query */
    l = must_get(h, 3, "c", NULL);
    uint64_t t0 = now_ms();
    queue_up(w1, 8, S("c"), NULL, 150, 0);
    REQUIRE(rcl_reply(w1, 8, T, &m) == 0);
    CHECK(msg_code_is(&m, "TIMEOUT"));
    CHECK(now_ms() - t0 >= 140);
    struct qcount q = query(h, "c");
    CHECK_EQ_U(q.pending, 0);
    CHECK_EQ_U(q.held, 1);
    rcl_close(h); rcl_close(w1); rcl_close(w2);
    stop();
}

/* ---- bad options, names ---- */

static void test_invalid_options_and_names(void)
{
    start();
    struct rcl *c = client();
    uint64_t held = must_get(c, 1, "busy", NULL);
    CHECK(held != 0);
    struct { const char *opts; uint64_t timeout; const char *mode; const char *code; } bad[] = {
        { "steal,if_available", 0, NULL, "INVALID_OPTIONS" },
        { "steal,shared", 0, NULL, "INVALID_OPTIONS" },
        { "steal", 100, NULL, "INVALID_OPTIONS" },
        { "if_available", 100, NULL, "INVALID_OPTIONS" },
        { "", 0, "sideways", "INVALID_OPTIONS" },
    };
    uint64_t rid = 10;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        coord_enc *e = rcl_begin(c, "lock.acquire", ++rid);
        coord_enc_kv_cstr(e, "name", "busy");
        if (strstr(bad[i].opts, "shared")) coord_enc_kv_cstr(e, "mode", "shared");
        if (bad[i].mode) coord_enc_kv_cstr(e, "mode", bad[i].mode);
        if (strstr(bad[i].opts, "steal")) coord_enc_kv_bool(e, "steal", true);
        if (strstr(bad[i].opts, "if_available")) coord_enc_kv_bool(e, "if_available", true);
        if (bad[i].timeout) coord_enc_kv_uint(e, "timeout_ms", bad[i].timeout);
        rcl_send(c);
        REQUIRE(rcl_reply(c, rid, T, &m) == 0);
        CHECK(msg_code_is(&m, bad[i].code));
    }
    /* reserved and oversized names */
    queue_up(c, ++rid, S("-leader/x"), NULL, 0, 0);
    REQUIRE(rcl_reply(c, rid, T, &m) == 0);
    CHECK(msg_code_is(&m, "NAME_RESERVED"));
    char big[1025];
    memset(big, 'n', sizeof big);
    queue_up(c, ++rid, big, sizeof big, NULL, 0, 0);
    REQUIRE(rcl_reply(c, rid, T, &m) == 0);
    CHECK(msg_code_is(&m, "INVALID_OPTIONS"));
    /* wrong types: BAD_REQUEST */
    coord_enc *e = rcl_begin(c, "lock.acquire", ++rid);
    coord_enc_kv_uint(e, "name", 5);
    rcl_send(c);
    REQUIRE(rcl_reply(c, rid, T, &m) == 0);
    CHECK(msg_code_is(&m, "BAD_REQUEST"));
    /* nothing was queued or held by any refusal */
    struct qcount q = query(c, NULL);
    CHECK_EQ_U(q.held, 1);
    CHECK_EQ_U(q.pending, 0);
    /* NUL bytes, the empty name, a long UTF-8 name (1024 bytes exactly) */
    static const char nul_name[] = { 'a', 0, 'b' };
    char utf8[1024];
    for (int i = 0; i < 1024; i += 2) { utf8[i] = (char)0xc3; utf8[i + 1] = (char)0xa9; }
    CHECK(must_get(c, ++rid, "", NULL) != 0);
    queue_up(c, ++rid, nul_name, sizeof nul_name, NULL, 0, 0);
    CHECK(granted_now(c, rid));
    queue_up(c, ++rid, utf8, sizeof utf8, NULL, 0, 0);
    CHECK(granted_now(c, rid));
    rcl_begin(c, "lock.query", ++rid);
    rcl_send(c);
    REQUIRE(rcl_reply(c, rid, T, &m) == 0);
    const msgpack_object_array *held_list = msg_array(&m, "held");
    REQUIRE(held_list->size == 4);
    CHECK(map_str_is(map_at(held_list, 1), "name", "", 0));
    CHECK(map_str_is(map_at(held_list, 2), "name", nul_name, 3));
    CHECK(map_str_is(map_at(held_list, 3), "name", utf8, 1024));
    rcl_close(c);
    stop();
}

/* ---- lock.query ---- */

static void test_query_order_and_deadlock(void)
{
    start();
    struct rcl *a = client(), *b = client(), *c = client();
    /* held in grant order, steals included; pending in request order */
    must_get(a, 1, "n2", NULL);
    must_get(b, 1, "n1", NULL);
    must_get(c, 1, "n3", "shared");
    must_get(a, 2, "n3", "shared");
    /* a deadlock: a waits for n1 (b's), b waits for n2 (a's) */
    queue_up(a, 3, S("n1"), NULL, 0, 0);
    queue_up(b, 2, S("n2"), NULL, 0, 0);
    queue_up(c, 2, S("n1"), "shared", 0, 0);
    must_get(c, 3, "n4", "steal");
    rcl_begin(c, "lock.query", 4);
    rcl_send(c);
    REQUIRE(rcl_reply(c, 4, T, &m) == 0);
    const msgpack_object_array *held = msg_array(&m, "held");
    const msgpack_object_array *pend = msg_array(&m, "pending");
    REQUIRE(held->size == 5);
    REQUIRE(pend->size == 3);
    const char *held_names[] = { "n2", "n1", "n3", "n3", "n4" };
    for (int i = 0; i < 5; i++) {
        const msgpack_object_map *e = map_at(held, (size_t)i);
        CHECK(map_str_is(e, "name", held_names[i], 2));
        CHECK(coord_map_find(e, "token") != NULL);
        CHECK(coord_map_find(e, "conn") != NULL && coord_map_find(e, "pid") != NULL);
        CHECK(coord_map_find(e, "client") != NULL && coord_map_find(e, "age_ms") != NULL);
    }
    const char *pend_names[] = { "n1", "n2", "n1" };
    uint64_t pend_conns[3];
    for (int i = 0; i < 3; i++) {
        const msgpack_object_map *e = map_at(pend, (size_t)i);
        CHECK(map_str_is(e, "name", pend_names[i], 2));
        CHECK(coord_map_find(e, "token") == NULL);
        pend_conns[i] = map_uint(e, "conn");
    }
    /* the cycle is visible: a holds n2 and waits n1; b holds n1, waits n2 */
    CHECK_EQ_U(map_uint(map_at(held, 0), "conn"), pend_conns[0]);
    CHECK_EQ_U(map_uint(map_at(held, 1), "conn"), pend_conns[1]);
    CHECK(map_str_is(map_at(pend, 2), "mode", "shared", 6));
    /* another scope sees none of it */
    struct rcl *other = rcl_open(bp.sock, "elsewhere");
    struct qcount q = query(other, NULL);
    CHECK_EQ_U(q.held, 0);
    CHECK_EQ_U(q.pending, 0);
    CHECK(must_get(other, 1, "n1", "if_available") != 0);
    rcl_close(other);
    rcl_close(a); rcl_close(b); rcl_close(c);
    stop();
}

/* ---- processes that die, freeze, and a broker that restarts ---- */

/* A child process that acquires name (with lease_ms, renewing every
 * renew_ms when renew_ms > 0), reports "G" on the pipe, then waits. */
static pid_t holder_process(const char *name, uint64_t lease_ms, int renew_ms, int *rfd)
{
    int p[2];
    if (pipe(p) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        struct rcl *c = rcl_open(bp.sock, NULL);
        if (!c)
            _exit(1);
        queue_up(c, 1, name, strlen(name), NULL, 0, lease_ms);
        if (rcl_reply(c, 1, 10000, &m) != 0 || !msg_bool(&m, "granted"))
            _exit(2);
        uint64_t lock = msg_uint(&m, "lock");
        if (write(p[1], "G", 1) != 1)
            _exit(3);
        for (uint64_t rid = 2;; rid++) {
            if (renew_ms <= 0) {
                pause();
                continue;
            }
            poll(NULL, 0, renew_ms);
            coord_enc *e = rcl_begin(c, "lock.renew", rid);
            coord_enc_kv_uint(e, "lock", lock);
            coord_enc_kv_uint(e, "lease_ms", lease_ms);
            rcl_send(c);
            if (rcl_reply(c, rid, 10000, &m) != 0 || !msg_ok(&m))
                _exit(4);
        }
    }
    close(p[1]);
    *rfd = p[0];
    return pid;
}

static bool wait_byte(int fd)
{
    char ch;
    struct pollfd pf = { fd, POLLIN, 0 };
    return poll(&pf, 1, 10000) == 1 && read(fd, &ch, 1) == 1;
}

static void test_killed_holder_and_waiter(void)
{
    start();
    int rfd;
    pid_t holder = holder_process("k", 0, 0, &rfd);
    REQUIRE(wait_byte(rfd));
    close(rfd);
    struct rcl *w = client(), *w2 = client();
    queue_up(w, 1, S("k"), NULL, 0, 0);
    CHECK_EQ_U(query(w, "k").pending, 1);
    uint64_t t0 = now_ms();
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK(granted_now(w, 1));
    fprintf(stderr, "SIGKILLed holder -> next grant in %llu ms\n",
            (unsigned long long)(now_ms() - t0));
    /* a SIGKILLed waiter vanishes from the queue */
    pid_t waiter = fork();
    if (waiter == 0) {
        struct rcl *c = rcl_open(bp.sock, NULL);
        queue_up(c, 1, "k", 1, NULL, 0, 0);
        pause();
        _exit(0);
    }
    queue_up(w2, 1, S("k"), NULL, 0, 0);
    /* wait until both are queued (the child's order is not ours to pick) */
    for (int i = 0; i < 500 && query(w, "k").pending < 2; i++)
        poll(NULL, 0, 2);
    CHECK_EQ_U(query(w, "k").pending, 2);
    kill(waiter, SIGKILL);
    waitpid(waiter, NULL, 0);
    for (int i = 0; i < 500 && query(w, "k").pending != 1; i++)
        poll(NULL, 0, 2);
    CHECK_EQ_U(query(w, "k").pending, 1);
    rcl_close(w);                     /* w2 is next: the dead one is gone */
    CHECK(granted_now(w2, 1));
    rcl_close(w2);
    stop();
}

static void test_lease_frozen_holder_and_renewals(void)
{
    start();
    /* renewals keep it: lease 300 ms, renewed every 100 ms */
    int rfd;
    pid_t renewer = holder_process("L", 300, 100, &rfd);
    REQUIRE(wait_byte(rfd));
    close(rfd);
    struct rcl *w = client();
    queue_up(w, 1, S("L"), NULL, 1200, 0);
    REQUIRE(rcl_reply(w, 1, T, &m) == 0);
    CHECK(msg_code_is(&m, "TIMEOUT"));     /* 4 lease periods, still held */
    CHECK_EQ_U(query(w, "L").held, 1);
    /* frozen: SIGSTOP, the lease runs out, the next waiter gets it */
    kill(renewer, SIGSTOP);
    uint64_t t0 = now_ms();
    queue_up(w, 2, S("L"), NULL, 0, 0);
    CHECK(granted_now(w, 2));
    uint64_t waited = now_ms() - t0;
    fprintf(stderr, "frozen holder (lease 300 ms) replaced after %llu ms\n",
            (unsigned long long)waited);
    CHECK(waited <= 1000);
    kill(renewer, SIGCONT);
    /* resumed, its renewal fails (UNKNOWN_LOCK): the child exits 4 */
    int st = wait_pid_timeout(renewer, 10000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 4);
    rcl_close(w);
    stop();
}

static void test_lease_expiry_event(void)
{
    start();
    struct rcl *h = client(), *w = client();
    queue_up(h, 1, S("e"), NULL, 0, 100);
    REQUIRE(granted_now(h, 1));
    uint64_t lock = msg_uint(&m, "lock");
    queue_up(w, 1, S("e"), NULL, 0, 0);
    REQUIRE(rcl_event(h, "lock.lost", T, &m) == 0);
    CHECK(msg_str_is(&m, "reason", S("expired")));
    CHECK_EQ_U(msg_uint(&m, "lock"), lock);
    CHECK(granted_now(w, 1));
    CHECK_EQ_U(release(h, 2, lock), 1);
    /* renewing a lost lock is UNKNOWN_LOCK */
    coord_enc *e = rcl_begin(h, "lock.renew", 3);
    coord_enc_kv_uint(e, "lock", lock);
    coord_enc_kv_uint(e, "lease_ms", 100);
    rcl_send(h);
    REQUIRE(rcl_reply(h, 3, T, &m) == 0);
    CHECK(msg_code_is(&m, "UNKNOWN_LOCK"));
    rcl_close(h); rcl_close(w);
    stop();
}

/* Every timeout shares one timer, armed for the earliest deadline only
 * when that comes before the time it is armed for: a lease shorter than one
 * already pending expires on time, and so does one that follows a shorter
 * lease released before its end (the timer then fires once for nothing). */
static void test_lease_deadlines_in_any_order(void)
{
    start();
    struct rcl *h = client();
    queue_up(h, 1, S("long"), NULL, 0, 60000);
    REQUIRE(granted_now(h, 1));
    uint64_t lg = msg_uint(&m, "lock"), t0 = now_ms();
    queue_up(h, 2, S("short"), NULL, 0, 150);
    REQUIRE(granted_now(h, 2));
    uint64_t sh = msg_uint(&m, "lock");
    REQUIRE(rcl_event(h, "lock.lost", T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "lock"), sh);
    uint64_t took = now_ms() - t0;
    CHECK(took >= 140 && took < 2000);
    fprintf(stderr, "150 ms lease under a 60 s one expired after %llu ms\n",
            (unsigned long long)took);

    queue_up(h, 3, S("brief"), NULL, 0, 100);
    REQUIRE(granted_now(h, 3));
    CHECK_EQ_U(release(h, 4, msg_uint(&m, "lock")), 0);
    t0 = now_ms();
    queue_up(h, 5, S("later"), NULL, 0, 300);
    REQUIRE(granted_now(h, 5));
    uint64_t lt = msg_uint(&m, "lock");
    REQUIRE(rcl_event(h, "lock.lost", T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "lock"), lt);
    took = now_ms() - t0;
    CHECK(took >= 290 && took < 2000);
    fprintf(stderr, "300 ms lease after a released 100 ms one expired after %llu ms\n",
            (unsigned long long)took);
    CHECK_EQ_U(release(h, 6, lg), 0);      /* the long one is still held */
    rcl_close(h);
    stop();
}

static void test_tokens_increase_across_restarts(void)
{
    start();
    uint64_t last = 0;
    for (int round = 0; round < 3; round++) {
        struct rcl *c = client();
        for (int i = 0; i < 3; i++) {
            queue_up(c, (uint64_t)i + 1, S("tok"), NULL, 0, 0);
            REQUIRE(granted_now(c, (uint64_t)i + 1));
            uint64_t token = msg_uint(&m, "token");
            CHECK(token > last);
            last = token;
            release(c, 100 + (uint64_t)i, msg_uint(&m, "lock"));
        }
        rcl_close(c);
        broker_kill(&bp, SIGKILL);
        REQUIRE(broker_start(&bp, NULL) == 0);
    }
    stop();
}

static void test_release_of_unknown_lock(void)
{
    start();
    struct rcl *a = client(), *b = client();
    uint64_t l = must_get(a, 1, "u", NULL);
    CHECK_EQ_U(release(b, 1, l), 1);        /* not b's */
    CHECK_EQ_U(release(a, 2, l + 1000), 1); /* no such lock */
    CHECK_EQ_U(release(a, 3, l), 0);
    CHECK_EQ_U(release(a, 4, l), 1);        /* twice */
    rcl_close(a); rcl_close(b);
    stop();
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "exclusive_fifo", test_exclusive_fifo_and_independent_names },
        { "lease_deadlines_in_any_order", test_lease_deadlines_in_any_order },
        { "shared_groups", test_shared_groups_and_no_barging },
        { "exclusive_between_shared", test_exclusive_between_shared_groups },
        { "if_available", test_if_available },
        { "steal", test_steal },
        { "cancel_and_timeout", test_cancel_and_timeout },
        { "invalid_options_and_names", test_invalid_options_and_names },
        { "query_order_and_deadlock", test_query_order_and_deadlock },
        { "killed_holder_and_waiter", test_killed_holder_and_waiter },
        { "lease_frozen_holder", test_lease_frozen_holder_and_renewals },
        { "lease_expiry_event", test_lease_expiry_event },
        { "tokens_across_restarts", test_tokens_increase_across_restarts },
        { "release_unknown", test_release_of_unknown_lock },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
