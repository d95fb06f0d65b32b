/* test_etcd.c - the etcd leader ledger through real brokers and a real
 * etcd (Debian's etcd-server, started here on loopback ports; SKIP when
 * it is not installed).  Two or three coordd with their own sockets and
 * data dirs stand for machines sharing workstreams:
 *   shared        one leader across brokers, a campaign waiting in etcd
 *                 for another broker's term, commits/claims/pending/
 *                 history/read/disable seen from the other broker,
 *                 if_available, cancel and timeout of a waiting campaign
 *   kill9         kill -9 of the leader's broker while it commits: a
 *                 leader on another broker within lease + margin, higher
 *                 generation, the old generation FENCED, every
 *                 acknowledged commit applied exactly once
 *   sigstop       a broker frozen past its lease: the other one leads, the
 *                 frozen leader's commit is FENCED and it is told
 *   etcd_down     etcd killed: commits, claims, reads UNAVAILABLE, the
 *                 leader told (ledger-unavailable), campaigns time out
 *                 UNAVAILABLE, status says unreachable; etcd restarted:
 *                 recovery, nothing applied meanwhile
 *   watch         a waiting campaign woken by its leader key's deletion
 *                 (stats etcd_watch_wakeups), the etcd lease etcd's
 *                 minimum TTL, the watch made again after etcd was
 *                 killed and restarted, and after it was frozen
 *   cluster       a 3-member etcd with its leader member killed while a
 *                 leader commits: no op applied twice, no two leaders
 *   race_lease    the loser of two brokers' race for a free key, granted
 *                 once the winner resigns, keeps its term (a new lease,
 *                 not the race's, never kept alive)
 *   bench, failover  measurements, run only when asked
 *                 (COORD_ETCD_BENCH, COORD_ETCD_FAILOVER; HACKING.md) */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "etcd-proc.h"
#include "harness.h"

#define T 5000
#define LEASE 1000              /* the terms' lease (etcd TTL 1 s) */
/* A new leader is granted within the lease plus this, after its broker
 * died: keepalive slack, the waiting campaign's poll, a loaded machine. */
#define MARGIN 2500

static coord_msg m;
static struct etcd_cluster ec;
/* brokers outlive their test function (the runner stops them after it) */
static struct broker_proc A, B, C;

static void start_broker(struct broker_proc *bp, const char *endpoints)
{
    memset(bp, 0, sizeof *bp);
    const char *args[] = { "--ledger", "etcd", "--etcd-endpoints", endpoints, NULL };
    if (broker_start(bp, args) < 0) {
        fprintf(stderr, "cannot start coordd on etcd\n");
        exit(1);
    }
}

static void start_etcd(int n)
{
    if (etcd_start(&ec, n) < 0) {
        fprintf(stderr, "cannot start etcd\n");
        etcd_stop(&ec);
        exit(1);
    }
}

static void campaign(struct rcl *c, uint64_t rid, const char *ws, uint64_t lease,
                     uint64_t timeout, bool if_available)
{
    coord_enc *e = rcl_begin(c, "leader.campaign", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    coord_enc_kv_uint(e, "lease_ms", lease);
    if (timeout)
        coord_enc_kv_uint(e, "timeout_ms", timeout);
    if (if_available)
        coord_enc_kv_bool(e, "if_available", true);
    rcl_send(c);
}

static uint64_t granted(struct rcl *c, uint64_t rid, int wait_ms)
{
    if (rcl_reply(c, rid, wait_ms, &m) != 0 || !msg_ok(&m) || !msg_bool(&m, "granted"))
        return 0;
    return msg_uint(&m, "generation");
}

static void send_commit(struct rcl *c, uint64_t rid, const char *ws, uint64_t gen,
                        const char *op_id, const char *key, const char *value)
{
    coord_enc *e = rcl_begin(c, "leader.commit", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    coord_enc_kv_uint(e, "generation", gen);
    coord_enc_kv_cstr(e, "op_id", op_id);
    if (key) {
        coord_enc_kv_cstr(e, "key", key);
        coord_enc_kv_bin(e, "value", value, strlen(value));
    }
    rcl_send(c);
}

static int commit(struct rcl *c, uint64_t rid, const char *ws, uint64_t gen, const char *op_id,
                  const char *key, const char *value)
{
    send_commit(c, rid, ws, gen, op_id, key, value);
    return rcl_reply(c, rid, T, &m);
}

static int ws_op(struct rcl *c, uint64_t rid, const char *op, const char *ws, uint64_t gen,
                 const char *op_id)
{
    coord_enc *e = rcl_begin(c, op, rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    if (gen)
        coord_enc_kv_uint(e, "generation", gen);
    if (op_id)
        coord_enc_kv_cstr(e, "op_id", op_id);
    if (strcmp(op, "leader.abandon") == 0)
        coord_enc_kv_cstr(e, "reason", "not needed");
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

static int read_key(struct rcl *c, uint64_t rid, const char *ws, const char *key)
{
    coord_enc *e = rcl_begin(c, "leader.read", rid);
    coord_enc_kv_cstr(e, "workstream", ws);
    coord_enc_kv_cstr(e, "key", key);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

static bool stat_str_is(struct rcl *c, const char *key, const char *want)
{
    if (rcl_request(c, "stats", 999) < 0 || rcl_reply(c, 999, T, &m) != 0)
        return false;
    return msg_str_is(&m, key, S(want));
}

static bool reachable(struct rcl *c)
{
    if (rcl_request(c, "stats", 998) < 0 || rcl_reply(c, 998, T, &m) != 0)
        return false;
    return msg_bool(&m, "ledger_reachable");
}

/* ---- shared ---- */

static void test_shared(void)
{
    start_etcd(1);
    start_broker(&A, ec.endpoints);
    start_broker(&B, ec.endpoints);
    struct rcl *a = rcl_open(A.sock, NULL), *b = rcl_open(B.sock, NULL);
    struct rcl *a2 = rcl_open(A.sock, NULL), *b2 = rcl_open(B.sock, NULL);
    REQUIRE(a && b && a2 && b2);
    CHECK(stat_str_is(a, "ledger", "etcd"));
    CHECK(reachable(a));

    /* a descriptor defined on A is B's, and names the ledger */
    coord_enc *d = rcl_begin(a, "leader.define", 1);
    coord_enc_kv_cstr(d, "workstream", "orders");
    coord_enc_kv_cstr(d, "canonical_fence", "etcd");
    coord_enc_kv_cstr(d, "fallback", "queue-locally");
    rcl_send(a);
    CHECK_EQ(rcl_reply(a, 1, T, &m), 0);
    CHECK(msg_ok(&m));
    CHECK_EQ(ws_op(b2, 1, "leader.describe", "orders", 0, NULL), 0);
    CHECK(msg_ok(&m) && map_str_is(msg_map(&m, "descriptor"), "canonical_fence", S("etcd")) &&
          map_str_is(msg_map(&m, "descriptor"), "fallback", S("queue-locally")));

    uint64_t g1 = 0;
    campaign(a, 2, "orders", 30000, 0, false);
    CHECK((g1 = granted(a, 2, T)) > 0);
    /* B's campaign waits in etcd while A's broker leads */
    campaign(b, 3, "orders", LEASE, 0, false);
    CHECK_EQ(rcl_reply(b, 3, 400, &m), -2);
    /* if_available on B: not granted, nothing waits */
    campaign(b2, 4, "orders", LEASE, 0, true);
    CHECK_EQ(rcl_reply(b2, 4, T, &m), 0);
    CHECK(msg_ok(&m) && !msg_bool(&m, "granted"));
    /* a timeout covers the wait in etcd */
    uint64_t t0 = now_ms();
    campaign(b2, 5, "orders", LEASE, 300, false);
    CHECK_EQ(rcl_reply(b2, 5, T, &m), 0);
    CHECK(msg_code_is(&m, "TIMEOUT"));
    CHECK(now_ms() - t0 >= 290);

    /* commits, claims, abandons on A are what B reads */
    CHECK_EQ(commit(a, 10, "orders", g1, "op-1", "total", "42"), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "applied"));
    CHECK_EQ(commit(a, 11, "orders", g1, "op-1", "total", "43"), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "duplicate") && msg_uint(&m, "generation") == g1);
    CHECK_EQ(read_key(b2, 12, "orders", "total"), 0);
    CHECK(msg_ok(&m) && msg_bin_is(&m, "value", S("42")) && msg_uint(&m, "generation") == g1);
    CHECK_EQ(ws_op(a, 13, "leader.claim", "orders", g1, "mail-1"), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "claimed"));
    CHECK_EQ(ws_op(a, 14, "leader.claim", "orders", g1, "mail-2"), 0);
    CHECK_EQ(ws_op(a, 15, "leader.abandon", "orders", g1, "mail-2"), 0);
    CHECK(msg_ok(&m));
    CHECK_EQ(ws_op(b2, 16, "leader.pending", "orders", 0, NULL), 0);
    CHECK(msg_ok(&m) && msg_array(&m, "ops")->size == 1);
    CHECK(map_str_is(map_at(msg_array(&m, "ops"), 0), "op_id", S("mail-1")));
    /* a commit from B's side with A's generation, by a non-leader: FENCED
     * locally (B has no live term); the ledger agrees for a wrong one */
    CHECK_EQ(commit(b2, 17, "orders", g1 + 1000, "op-x", NULL, NULL), 0);
    CHECK(msg_code_is(&m, "FENCED"));

    /* A resigns: B's waiting campaign is granted, higher generation */
    CHECK_EQ(ws_op(a, 20, "leader.resign", "orders", g1, NULL), 0);
    uint64_t g2 = granted(b, 3, T);
    CHECK(g2 > g1);
    /* A's late commit with its old generation: FENCED by etcd */
    CHECK_EQ(commit(a2, 21, "orders", g1, "op-late", NULL, NULL), 0);
    CHECK(msg_code_is(&m, "FENCED"));
    /* B reconciles A's claim */
    CHECK_EQ(ws_op(b, 22, "leader.claim", "orders", g2, "mail-1"), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "claimed") && msg_bool(&m, "reconcile") &&
          msg_uint(&m, "previous_generation") == g1);
    CHECK_EQ(ws_op(b, 23, "leader.claim", "orders", g2, "mail-2"), 0);
    CHECK(msg_ok(&m) && !msg_bool(&m, "claimed") && msg_bool(&m, "abandoned"));
    CHECK_EQ(commit(b, 24, "orders", g2, "mail-1", NULL, NULL), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "applied"));
    CHECK_EQ(ws_op(a2, 25, "leader.pending", "orders", 0, NULL), 0);
    CHECK(msg_ok(&m) && msg_array(&m, "ops")->size == 0);
    /* history from A: B's term live, A's resigned */
    CHECK_EQ(ws_op(a2, 26, "leader.history", "orders", 0, NULL), 0);
    const msgpack_object_array *terms = msg_array(&m, "terms");
    CHECK(terms->size >= 2);
    if (terms->size >= 2) {
        CHECK_EQ_U(map_uint(map_at(terms, 0), "generation"), g2);
        CHECK_EQ_U(map_uint(map_at(terms, 1), "generation"), g1);
        CHECK(map_str_is(map_at(terms, 1), "reason", S("resigned")));
    }

    /* disable from A fences B's leader, which is told */
    CHECK_EQ(ws_op(a2, 30, "leader.disable", "orders", 0, NULL), 0);
    CHECK(msg_ok(&m));
    CHECK_EQ(rcl_event(b, "leader.lost", T, &m), 0);
    CHECK(msg_uint(&m, "generation") == g2 && msg_str_is(&m, "reason", S("disabled")));
    CHECK_EQ(commit(b, 31, "orders", g2, "op-after", NULL, NULL), 0);
    CHECK(msg_code_is(&m, "FENCED"));
    campaign(b2, 32, "orders", LEASE, 0, false);
    CHECK_EQ(rcl_reply(b2, 32, T, &m), 0);
    CHECK(msg_code_is(&m, "DISABLED"));
    CHECK_EQ(ws_op(a2, 33, "leader.enable", "orders", 0, NULL), 0);

    /* a campaign cancelled while it waits in etcd */
    campaign(a, 40, "orders", LEASE, 0, false);
    uint64_t g3 = granted(a, 40, T);
    CHECK(g3 > g2);
    campaign(b2, 41, "orders", LEASE, 0, false);
    CHECK_EQ(rcl_reply(b2, 41, 300, &m), -2);
    coord_enc *e = rcl_begin(b2, "cancel", 42);
    coord_enc_kv_uint(e, "target", 41);
    rcl_send(b2);
    CHECK_EQ(rcl_reply(b2, 41, T, &m), 0);
    CHECK(msg_code_is(&m, "ABORTED"));
    /* and one whose connection goes: nothing is left leading on B */
    struct rcl *b3 = rcl_open(B.sock, NULL);
    campaign(b3, 43, "orders", LEASE, 0, false);
    CHECK_EQ(rcl_reply(b3, 43, 200, &m), -2);
    rcl_close(b3);
    CHECK_EQ(ws_op(a, 44, "leader.resign", "orders", g3, NULL), 0);
    campaign(a, 45, "orders", LEASE, 0, false);
    CHECK(granted(a, 45, T) > g3);

    rcl_close(a);
    rcl_close(b);
    rcl_close(a2);
    rcl_close(b2);
    etcd_stop(&ec);
}

/* One etcd member, brokers A, B and C on it, a connection to each. */
static bool three_brokers(struct rcl **a, struct rcl **b, struct rcl **c)
{
    start_etcd(1);
    start_broker(&A, ec.endpoints);
    start_broker(&B, ec.endpoints);
    start_broker(&C, ec.endpoints);
    *a = rcl_open(A.sock, NULL);
    *b = rcl_open(B.sock, NULL);
    *c = rcl_open(C.sock, NULL);
    return *a && *b && *c;
}

/* ---- kill -9 ---- */

static void test_kill9(void)
{
    struct rcl *a, *b, *c;
    REQUIRE(three_brokers(&a, &b, &c));
    campaign(a, 1, "jobs", LEASE, 0, false);
    uint64_t g1 = granted(a, 1, T);
    REQUIRE(g1 > 0);
    campaign(b, 2, "jobs", LEASE, 0, false);
    campaign(c, 2, "jobs", LEASE, 0, false);
    /* A's leader commits, renewing; then its broker dies mid-stream */
    int acked = 0;
    char op[32];
    for (int i = 0; i < 40; i++) {
        snprintf(op, sizeof op, "job-%d", i);
        send_commit(a, 100 + (uint64_t)i, "jobs", g1, op, "last", op);
    }
    for (int i = 0; i < 20; i++)
        if (rcl_reply(a, 100 + (uint64_t)i, T, &m) == 0 && msg_ok(&m) && msg_bool(&m, "applied"))
            acked++;
    CHECK_EQ(acked, 20);
    uint64_t killed = now_ms();
    broker_kill(&A, SIGKILL);
    /* exactly one of B and C leads, within the lease plus margin */
    struct rcl *winner = NULL, *loser = NULL;
    uint64_t g2 = 0;
    while (!winner && now_ms() - killed < LEASE + MARGIN) {
        if (rcl_reply(b, 2, 20, &m) == 0) {
            winner = b;
            loser = c;
        } else if (rcl_reply(c, 2, 20, &m) == 0) {
            winner = c;
            loser = b;
        }
    }
    REQUIRE(winner);
    CHECK(msg_ok(&m) && msg_bool(&m, "granted"));
    g2 = msg_uint(&m, "generation");
    uint64_t took = now_ms() - killed;
    fprintf(stderr, "  transition after kill -9: %llu ms (lease %d)\n",
            (unsigned long long)took, LEASE);
    CHECK(g2 > g1);
    CHECK_EQ(rcl_reply(loser, 2, 300, &m), -2);       /* still waiting */
    /* the old generation is fenced wherever it comes from */
    CHECK_EQ(commit(loser, 200, "jobs", g1, "job-late", NULL, NULL), 0);
    CHECK(msg_code_is(&m, "FENCED"));
    /* every acknowledged commit was applied once, by g1; the others at
     * most once (the new leader applies what g1 did not) */
    int dup = 0, fresh = 0;
    for (int i = 0; i < 40; i++) {
        snprintf(op, sizeof op, "job-%d", i);
        CHECK_EQ(commit(winner, 300 + (uint64_t)i, "jobs", g2, op, NULL, NULL), 0);
        if (msg_bool(&m, "duplicate")) {
            dup++;
            CHECK_EQ_U(msg_uint(&m, "generation"), g1);
        } else {
            CHECK(msg_bool(&m, "applied"));
            fresh++;
            CHECK(i >= 20);
        }
    }
    CHECK(dup >= 20 && dup + fresh == 40);
    rcl_close(a);
    rcl_close(b);
    rcl_close(c);
    etcd_stop(&ec);
}

/* ---- SIGSTOP ---- */

static void test_sigstop(void)
{
    start_etcd(1);
    start_broker(&A, ec.endpoints);
    start_broker(&B, ec.endpoints);
    struct rcl *a = rcl_open(A.sock, NULL), *b = rcl_open(B.sock, NULL);
    REQUIRE(a && b);
    campaign(a, 1, "frozen", LEASE, 0, false);
    uint64_t g1 = granted(a, 1, T);
    REQUIRE(g1 > 0);
    campaign(b, 2, "frozen", LEASE, 0, false);
    CHECK_EQ(rcl_reply(b, 2, 300, &m), -2);
    kill(A.pid, SIGSTOP);
    uint64_t g2 = granted(b, 2, LEASE + MARGIN);
    CHECK(g2 > g1);
    /* the frozen leader commits; its broker wakes after its etcd lease */
    send_commit(a, 3, "frozen", g1, "late-op", "k", "stale");
    kill(A.pid, SIGCONT);
    CHECK_EQ(rcl_reply(a, 3, T, &m), 0);
    CHECK(msg_code_is(&m, "FENCED"));
    CHECK_EQ(rcl_event(a, "leader.lost", T, &m), 0);
    CHECK_EQ_U(msg_uint(&m, "generation"), g1);
    /* whichever timer runs first on waking: the local lease's or etcd's */
    CHECK(map_str_is(m.map, "reason", S("ledger-unavailable")) ||
          map_str_is(m.map, "reason", S("expired")));
    CHECK_EQ(read_key(b, 4, "frozen", "k"), 0);
    CHECK(msg_code_is(&m, "NOT_FOUND"));
    CHECK_EQ(commit(b, 5, "frozen", g2, "late-op", NULL, NULL), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "applied"));
    rcl_close(a);
    rcl_close(b);
    etcd_stop(&ec);
}

/* ---- etcd down ---- */

static void test_etcd_down(void)
{
    start_etcd(1);
    start_broker(&A, ec.endpoints);
    start_broker(&B, ec.endpoints);
    struct rcl *a = rcl_open(A.sock, NULL), *b = rcl_open(B.sock, NULL);
    REQUIRE(a && b);
    campaign(a, 1, "down", LEASE, 0, false);
    uint64_t g1 = granted(a, 1, T);
    REQUIRE(g1 > 0);
    CHECK_EQ(commit(a, 2, "down", g1, "before", "k", "v1"), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "applied"));
    CHECK_EQ(ws_op(a, 3, "leader.claim", "down", g1, "c-1"), 0);

    /* B's campaign waits in etcd for A's term: it keeps waiting through
     * the outage (no timeout) */
    struct rcl *b2 = rcl_open(B.sock, NULL);
    REQUIRE(b2);
    campaign(b2, 20, "down", LEASE, 0, false);
    CHECK_EQ(rcl_reply(b2, 20, 300, &m), -2);

    etcd_signal(&ec, 0, SIGKILL);
    /* fail closed: the leader's writes and everyone's reads */
    CHECK_EQ(commit(a, 10, "down", g1, "during", "k", "v2"), 0);
    CHECK(msg_code_is(&m, "UNAVAILABLE"));
    CHECK_EQ(ws_op(a, 11, "leader.claim", "down", g1, "c-2"), 0);
    CHECK(msg_code_is(&m, "UNAVAILABLE"));
    CHECK_EQ(read_key(b, 12, "down", "k"), 0);
    CHECK(msg_code_is(&m, "UNAVAILABLE"));
    /* the leader is told once its etcd lease could have expired */
    CHECK_EQ(rcl_event(a, "leader.lost", LEASE + MARGIN, &m), 0);
    CHECK(msg_str_is(&m, "reason", S("ledger-unavailable")));
    /* campaigns do not grant: on B one queues behind b2's and times out;
     * on A one is UNAVAILABLE (at once when the workstream must be read
     * first, else when its timeout ends) */
    uint64_t t0 = now_ms();
    campaign(b, 13, "down", LEASE, 800, false);
    CHECK_EQ(rcl_reply(b, 13, T, &m), 0);
    CHECK(msg_code_is(&m, "TIMEOUT"));
    CHECK(now_ms() - t0 >= 700);
    struct rcl *a2 = rcl_open(A.sock, NULL);
    REQUIRE(a2);
    campaign(a2, 14, "down", LEASE, 800, false);
    CHECK_EQ(rcl_reply(a2, 14, T, &m), 0);
    CHECK(msg_code_is(&m, "UNAVAILABLE"));
    rcl_close(a2);
    CHECK(!reachable(b));
    CHECK_EQ(rcl_reply(b2, 20, 10, &m), -2);

    REQUIRE(etcd_restart(&ec, 0) == 0);
    uint64_t g2 = granted(b2, 20, 3 * T);
    CHECK(g2 > g1);
    CHECK(reachable(b));
    /* nothing was applied while etcd was away */
    CHECK_EQ(read_key(b, 21, "down", "k"), 0);
    CHECK(msg_ok(&m) && msg_bin_is(&m, "value", S("v1")));
    CHECK_EQ(commit(b2, 22, "down", g2, "during", "k", "v3"), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "applied"));
    CHECK_EQ(ws_op(b2, 23, "leader.claim", "down", g2, "c-1"), 0);
    CHECK(msg_ok(&m) && msg_bool(&m, "reconcile"));
    rcl_close(a);
    rcl_close(b);
    rcl_close(b2);
    etcd_stop(&ec);
}

/* ---- the watch ---- */

static uint64_t stat_uint(struct rcl *c, const char *key)
{
    if (rcl_request(c, "stats", 997) < 0 || rcl_reply(c, 997, T, &m) != 0 || !msg_has(&m, key))
        return 0;
    return msg_uint(&m, key);
}

/* waits (polling stats) until c's stats field key is at least min */
static bool await_stat(struct rcl *c, const char *key, uint64_t min, int wait_ms)
{
    uint64_t t0 = now_ms();
    do {
        if (stat_uint(c, key) >= min)
            return true;
        usleep(20000);
    } while (now_ms() - t0 < (uint64_t)wait_ms);
    return false;
}

/* The base64 name of the one leader key in etcd (malloc'd), or NULL. */
static char *leader_key_b64(void)
{
    /* every key ("\0" as range_end: from key "\0" on) */
    char *ans = etcd_http_post(ec.m[0].url, "/v3/kv/range",
                               "{\"key\":\"AA==\",\"range_end\":\"AA==\",\"keys_only\":true}", T);
    char *found = NULL;
    for (char *p = ans; p && !found && (p = strstr(p, "\"key\":\"")); ) {
        p += 7;
        char *q = strchr(p, '"');
        if (!q)
            break;
        *q = 0;
        char dec[512];
        size_t dn = 0;
        unsigned acc = 0, bits = 0;
        for (char *c = p; *c && *c != '=' && dn < sizeof dec - 1; c++) {
            const char *tb = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
            const char *at = strchr(tb, *c);
            if (!at)
                break;
            acc = acc << 6 | (unsigned)(at - tb);
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                dec[dn++] = (char)(acc >> bits & 0xff);
            }
        }
        dec[dn] = 0;
        if (dn >= 7 && strcmp(dec + dn - 7, "/leader") == 0)
            found = strdup(p);
        p = q + 1;
    }
    free(ans);
    return found;
}

/* A waiting campaign is woken by its leader key's deletion event (the
 * etcd_watch_wakeups counter), the etcd lease is etcd's minimum TTL
 * whatever the term's lease, and the watch comes back after etcd was
 * killed and restarted, and after it was frozen (SIGSTOP); with COORD_TEST_BREAK=etcd-poll (no watch, the
 * lease from lease_ms) each check fails. */
static void test_watch(void)
{
    start_etcd(1);
    start_broker(&A, ec.endpoints);
    start_broker(&B, ec.endpoints);
    struct rcl *a = rcl_open(A.sock, NULL), *b = rcl_open(B.sock, NULL);
    struct rcl *as = rcl_open(A.sock, NULL), *bs = rcl_open(B.sock, NULL);
    REQUIRE(a && b && as && bs);
    /* a 20 s term lease: the etcd lease is still etcd's minimum (1 s on the
     * test etcd: election timeout 500 ms) */
    campaign(b, 1, "watched", 20000, 0, false);
    uint64_t g1 = granted(b, 1, T);
    REQUIRE(g1 > 0);
    CHECK_EQ_U(stat_uint(bs, "etcd_lease_ttl_ms"), 1000);
    char *lk = leader_key_b64();
    REQUIRE(lk);

    /* A waits for B's term; its watch goes live, then B resigns */
    campaign(a, 2, "watched", LEASE, 0, false);
    CHECK(await_stat(as, "etcd_watch_connects", 1, T));
    CHECK_EQ(rcl_reply(a, 2, 300, &m), -2);
    CHECK_EQ_U(stat_uint(as, "etcd_watch_wakeups"), 0);
    CHECK_EQ(ws_op(b, 3, "leader.resign", "watched", g1, NULL), 0);
    CHECK(msg_ok(&m));
    uint64_t g2 = granted(a, 2, T);
    CHECK(g2 > g1);
    CHECK(stat_uint(as, "etcd_watch_wakeups") >= 1);
    CHECK_EQ(ws_op(a, 4, "leader.resign", "watched", g2, NULL), 0);

    /* a leader key held by no lease (written here): B waits through an
     * etcd kill and restart; its watch comes back, and the key's deletion
     * wakes it */
    char body[1024];
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"aGVsZA==\"}", lk);
    char *ans = etcd_http_post(ec.m[0].url, "/v3/kv/put", body, T);
    CHECK(ans != NULL);
    free(ans);
    campaign(b, 5, "watched", LEASE, 0, false);
    uint64_t c0 = 0;
    CHECK(await_stat(bs, "etcd_watch_connects", 1, T));
    c0 = stat_uint(bs, "etcd_watch_connects");
    CHECK_EQ(rcl_reply(b, 5, 300, &m), -2);
    etcd_signal(&ec, 0, SIGKILL);
    REQUIRE(etcd_restart(&ec, 0) == 0);
    CHECK(await_stat(bs, "etcd_watch_connects", c0 + 1, 3 * T));
    CHECK_EQ(rcl_reply(b, 5, 300, &m), -2);
    /* etcd frozen: the stream stays open and silent, the calls time out;
     * once they reach etcd again the watch is made anew */
    uint64_t c1 = stat_uint(bs, "etcd_watch_connects");
    etcd_signal(&ec, 0, SIGSTOP);
    uint64_t t0 = now_ms();
    while (reachable(bs) && now_ms() - t0 < (uint64_t)3 * T)
        usleep(50000);
    CHECK(!reachable(bs));
    kill(ec.m[0].pid, SIGCONT);
    CHECK(await_stat(bs, "etcd_watch_connects", c1 + 1, 3 * T));
    CHECK_EQ(rcl_reply(b, 5, 300, &m), -2);
    uint64_t w0 = stat_uint(bs, "etcd_watch_wakeups");
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", lk);
    ans = etcd_http_post(ec.m[0].url, "/v3/kv/deleterange", body, T);
    CHECK(ans != NULL);
    free(ans);
    uint64_t g3 = granted(b, 5, T);
    CHECK(g3 > g2);
    CHECK(stat_uint(bs, "etcd_watch_wakeups") > w0);
    free(lk);
    rcl_close(a);
    rcl_close(b);
    rcl_close(as);
    rcl_close(bs);
    etcd_stop(&ec);
}

/* ---- a 3-member cluster losing its leader ---- */

static void test_cluster(void)
{
    start_etcd(3);
    start_broker(&A, ec.endpoints);
    start_broker(&B, ec.endpoints);
    struct rcl *a = rcl_open(A.sock, NULL), *b = rcl_open(B.sock, NULL);
    REQUIRE(a && b);
    /* the lease outlasts a call that waits out an election (ETCD_CALL_MS) */
    campaign(a, 1, "ha", 4 * LEASE, 0, false);
    uint64_t g = granted(a, 1, T);
    REQUIRE(g > 0);
    campaign(b, 2, "ha", 4 * LEASE, 0, false);
    /* commit op ids one after the other; each is retried with the same id
     * until settled (UNAVAILABLE: outcome unknown) */
    int n = 60, unavailable = 0;
    uint64_t renewed = now_ms();
    uint64_t rid = 100;
    int leader = etcd_leader(&ec);
    REQUIRE(leader >= 0);
    char op[32];
    bool lost = false;
    for (int i = 0; i < n && !lost; i++) {
        if (i == 20)
            etcd_signal(&ec, leader, SIGKILL);
        snprintf(op, sizeof op, "ha-%d", i);
        for (int tries = 0; tries < 50; tries++) {
            if (now_ms() - renewed > LEASE) {
                ws_op(a, rid++, "leader.renew", "ha", g, NULL);
                renewed = now_ms();
            }
            CHECK_EQ(commit(a, rid++, "ha", g, op, "n", op), 0);
            if (msg_ok(&m))
                break;
            if (msg_code_is(&m, "FENCED")) {
                fprintf(stderr, "  op %d FENCED (broker log %s)\n", i, A.log);
                lost = true;           /* the term went (slow election): allowed */
                break;
            }
            CHECK(msg_code_is(&m, "UNAVAILABLE"));
            unavailable++;
        }
    }
    fprintf(stderr, "  %d UNAVAILABLE answers while the etcd leader changed%s\n",
            unavailable, lost ? " (term lost)" : "");
    /* no two leaders: B's campaign is still waiting unless A's term went */
    if (!lost)
        CHECK_EQ(rcl_reply(b, 2, 10, &m), -2);
    ws_op(a, rid++, "leader.resign", "ha", g, NULL);
    uint64_t g2 = granted(b, 2, 3 * T);
    CHECK(g2 > g);
    /* every op applied exactly once, by g */
    for (int i = 0; i < n; i++) {
        snprintf(op, sizeof op, "ha-%d", i);
        CHECK_EQ(commit(b, rid++, "ha", g2, op, NULL, NULL), 0);
        if (!lost)
            CHECK(msg_bool(&m, "duplicate") && msg_uint(&m, "generation") == g);
        else
            CHECK(msg_ok(&m));
    }
    rcl_close(a);
    rcl_close(b);
    etcd_stop(&ec);
}

/* ---- a campaign that lost the race for the key ---- */

/* B and C wait for A's term; A resigns and both race for the key: each
 * reads it free and takes a lease, one creates the key, the other's Txn
 * fails and it waits again.  The winner resigns 650 ms into its term (2/3
 * of the 1 s TTL); the other is granted, and keeps its term: its lease is
 * its own from the grant, not the one it took for the race it lost (that
 * one, never kept alive, had its deadline 800 ms after the race and the
 * term was lost as ledger-unavailable ~150 ms after its grant).  Rounds:
 * a round where the reads did not race shows nothing. */
static void test_race_lease(void)
{
    struct rcl *a, *b, *c;
    REQUIRE(three_brokers(&a, &b, &c));
    uint64_t rid = 10;
    int lost = 0;
    for (int round = 0; round < 4; round++) {
        char ws[32];
        snprintf(ws, sizeof ws, "race-%d", round);
        campaign(a, rid, ws, 60000, 0, false);
        uint64_t g0 = granted(a, rid++, T);
        REQUIRE(g0 > 0);
        uint64_t rb = rid++, rc = rid++;
        campaign(b, rb, ws, 60000, 0, false);
        campaign(c, rc, ws, 60000, 0, false);
        CHECK_EQ(rcl_reply(b, rb, 300, &m), -2);
        CHECK_EQ(rcl_reply(c, rc, 10, &m), -2);
        CHECK_EQ(ws_op(a, rid++, "leader.resign", ws, g0, NULL), 0);
        struct rcl *w = NULL, *l = NULL;
        uint64_t rw = 0, rl = 0;
        uint64_t t0 = now_ms();
        while (!w && now_ms() - t0 < T) {
            if (rcl_reply(b, rb, 10, &m) == 0) {
                w = b; l = c; rw = rb; rl = rc;
            } else if (rcl_reply(c, rc, 10, &m) == 0) {
                w = c; l = b; rw = rc; rl = rb;
            }
        }
        REQUIRE(w && msg_ok(&m) && msg_bool(&m, "granted"));
        uint64_t g1 = msg_uint(&m, "generation");
        (void)rw;
        usleep(650000);                /* the winner's term: 2/3 of the etcd TTL */
        CHECK_EQ(ws_op(w, rid++, "leader.resign", ws, g1, NULL), 0);
        uint64_t g2 = granted(l, rl, T);
        CHECK(g2 > g1);
        /* kept alive: no leader.lost within 1.5 TTL */
        if (rcl_event(l, "leader.lost", 1500, &m) == 0) {
            lost++;
            fprintf(stderr, "  round %d: the race's loser, granted %llu, lost it (%.*s)\n",
                    round, (unsigned long long)g2, (int)msg_bytes(&m, "reason").len,
                    (const char *)msg_bytes(&m, "reason").ptr);
        } else {
            CHECK_EQ(ws_op(l, rid++, "leader.resign", ws, g2, NULL), 0);
            CHECK(msg_ok(&m));
        }
    }
    CHECK_EQ(lost, 0);
    rcl_close(a);
    rcl_close(b);
    rcl_close(c);
    etcd_stop(&ec);
}

/* ---- bench (only when asked: `test_etcd bench` with COORD_ETCD_BENCH=N) ----
 *
 * Commits/s through coord on etcd beside etcd's own txn/s in the same run:
 * N commits one at a time (each waits for its reply), then N pipelined
 * (a window of 64), and N Txns of the commit's shape (four compares, two
 * puts and a delete) posted straight to etcd's gateway one at a time. */
static void test_bench(void)
{
    const char *env = getenv("COORD_ETCD_BENCH");
    if (!env)
        return;
    int n = atoi(env) > 0 ? atoi(env) : 2000;
    start_etcd(1);
    start_broker(&A, ec.endpoints);
    struct rcl *a = rcl_open(A.sock, NULL);
    REQUIRE(a);
    campaign(a, 1, "bench", 600000, 0, false);
    uint64_t g = granted(a, 1, T);
    REQUIRE(g > 0);
    char op[32], val[32];
    uint64_t t0 = now_ms();
    for (int i = 0; i < n; i++) {
        snprintf(op, sizeof op, "s-%d", i);
        CHECK(commit(a, 10 + (uint64_t)i, "bench", g, op, "k", op) == 0 && msg_ok(&m));
    }
    double seq = n * 1000.0 / (double)(now_ms() - t0 + 1);
    t0 = now_ms();
    int window = 64, sent = 0, got = 0;
    uint64_t base = 1000000;
    while (got < n) {
        while (sent < n && sent - got < window) {
            snprintf(op, sizeof op, "p-%d", sent);
            send_commit(a, base + (uint64_t)sent, "bench", g, op, "k", op);
            sent++;
        }
        CHECK(rcl_reply(a, base + (uint64_t)got, T, &m) == 0 && msg_ok(&m));
        got++;
    }
    double pipe = n * 1000.0 / (double)(now_ms() - t0 + 1);
    /* etcd alone: the same Txn shape, sequential */
    t0 = now_ms();
    for (int i = 0; i < n; i++) {
        char body[1024];
        snprintf(val, sizeof val, "b-%08d", i);
        /* keys and values in base64: "x/op/<i>" style, fixed width */
        char k1[64], b1[64];
        snprintf(k1, sizeof k1, "bench/op/%08d", i);
        static const char tb[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t kl = strlen(k1), o = 0;
        for (size_t j = 0; j < kl; j += 3) {
            unsigned v = (unsigned)k1[j] << 16 | (j + 1 < kl ? (unsigned)k1[j + 1] << 8 : 0) |
                         (j + 2 < kl ? (unsigned)k1[j + 2] : 0);
            b1[o++] = tb[v >> 18 & 63];
            b1[o++] = tb[v >> 12 & 63];
            b1[o++] = j + 1 < kl ? tb[v >> 6 & 63] : '=';
            b1[o++] = j + 2 < kl ? tb[v & 63] : '=';
        }
        b1[o] = 0;
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"create_revision\":\"0\"},"
                 "{\"key\":\"YmVuY2gvbA==\",\"target\":\"CREATE\",\"create_revision\":\"0\"},"
                 "{\"key\":\"YmVuY2gvcg==\",\"target\":\"CREATE\",\"create_revision\":\"0\"},"
                 "{\"key\":\"YmVuY2gvYQ==\",\"target\":\"CREATE\",\"create_revision\":\"0\"}],"
                 "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"AAAAAAAAAAE=\"}},"
                 "{\"request_delete_range\":{\"key\":\"YmVuY2gvcA==\"}},"
                 "{\"request_put\":{\"key\":\"YmVuY2gva3Y=\",\"value\":\"AAAAAAAAAAE=\"}}],"
                 "\"failure\":[]}", b1, b1);
        char *ans = etcd_http_post(ec.m[0].url, "/v3/kv/txn", body, 2000);
        CHECK(ans && strstr(ans, "\"succeeded\":true"));
        free(ans);
    }
    double raw = n * 1000.0 / (double)(now_ms() - t0 + 1);
    fprintf(stderr, "  bench n=%d: coord sequential %.0f commits/s, pipelined(64) %.0f commits/s; "
            "etcd txn sequential %.0f txn/s; ratio sequential %.2f\n",
            n, seq, pipe, raw, seq / raw);
    rcl_close(a);
    etcd_stop(&ec);
}

/* ---- failover (a measurement, run only when asked) ----
 * COORD_ETCD_FAILOVER=N: three brokers on one etcd, one leader and a
 * campaign waiting on each other broker; the leader's broker is killed
 * (kill -9) at a random point of its term, and the time from the kill to
 * the grant on another broker is one sample.  The killed broker starts
 * again and its client campaigns (waits) for the next round.  N rounds of
 * coordd, then, when coordd-broken is built beside it, N rounds of
 * COORD_TEST_BREAK=etcd-poll (the behaviour before the watch: waiting
 * campaigns re-read every 100 ms, the etcd lease's TTL the term's lease
 * rounded up), the same run, the same etcd; p50 / p99 / max of each. */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(const uint64_t *v, int n, int p)
{
    int i = (n * p + 99) / 100 - 1;
    return v[i < 0 ? 0 : i >= n ? n - 1 : i];
}

/* one series; 0, or -1 when a round did not end in a grant */
static int failover_series(const char *label, int n, uint64_t lease, uint64_t *took,
                           uint64_t *ttl_ms)
{
    struct broker_proc *bp[3] = { &A, &B, &C };
    struct rcl *cl[3];
    uint64_t rid[3] = { 1, 1, 1 };
    for (int i = 0; i < 3; i++) {
        start_broker(bp[i], ec.endpoints);
        if (!(cl[i] = rcl_open(bp[i]->sock, NULL)))
            return -1;
    }
    char ws[32];
    snprintf(ws, sizeof ws, "failover-%s", label);
    campaign(cl[0], rid[0], ws, lease, 0, false);
    if (!granted(cl[0], rid[0], T))
        return -1;
    int leader = 0;
    for (int i = 1; i < 3; i++)
        campaign(cl[i], rid[i], ws, lease, 0, false);
    int rc = 0;
    for (int r = 0; r < n; r++) {
        /* a random point of the term: keepalives go every TTL/3 */
        usleep((useconds_t)(random() % 700) * 1000);
        uint64_t killed = now_ms();
        broker_kill(bp[leader], SIGKILL);
        rcl_close(cl[leader]);
        int next = -1;
        while (next < 0 && now_ms() - killed < 20000)
            for (int i = 0; i < 3 && next < 0; i++)
                if (i != leader && rcl_reply(cl[i], rid[i], 5, &m) == 0)
                    next = i;
        if (next < 0 || !msg_ok(&m) || !msg_bool(&m, "granted")) {
            fprintf(stderr, "  %s round %d: no grant after the kill\n", label, r);
            rc = -1;
            break;
        }
        took[r] = now_ms() - killed;
        if (broker_start(bp[leader], (const char *[]){ "--ledger", "etcd", "--etcd-endpoints",
                                                        ec.endpoints, NULL }) < 0 ||
            !(cl[leader] = rcl_open(bp[leader]->sock, NULL))) {
            rc = -1;
            break;
        }
        rid[leader]++;
        campaign(cl[leader], rid[leader], ws, lease, 0, false);
        leader = next;
    }
    *ttl_ms = rc == 0 ? stat_uint(cl[leader], "etcd_lease_ttl_ms") : 0;
    for (int i = 0; i < 3; i++) {
        if (bp[i]->pid > 0)
            rcl_close(cl[i]);
        broker_cleanup(bp[i]);
    }
    return rc;
}

static void failover_report(const char *label, uint64_t *v, int n, uint64_t ttl_ms)
{
    qsort(v, (size_t)n, sizeof *v, cmp_u64);
    fprintf(stderr, "  failover %-26s n=%d etcd TTL %llu ms: p50 %4llu ms  p99 %4llu ms  "
            "max %4llu ms\n", label, n, (unsigned long long)ttl_ms,
            (unsigned long long)pct(v, n, 50), (unsigned long long)pct(v, n, 99),
            (unsigned long long)v[n - 1]);
}

static void test_failover(void)
{
    const char *env = getenv("COORD_ETCD_FAILOVER");
    if (!env)
        return;
    int n = atoi(env) > 0 ? atoi(env) : 30;
    uint64_t *now = calloc((size_t)n, sizeof *now), *before = calloc((size_t)n, sizeof *before);
    REQUIRE(now && before);
    srandom((unsigned)now_ms());
    start_etcd(1);
    /* the default lease (1.5 s), as most clients campaign */
    const uint64_t lease = 1500;
    char broken[600];
    snprintf(broken, sizeof broken, "%s-broken", broker_binary());
    char *plain = strdup(broker_binary());
    REQUIRE(plain);
    uint64_t ttl_now = 0, ttl_before = 0;
    CHECK_EQ(failover_series("watch", n, lease, now, &ttl_now), 0);
    failover_report("coordd (after)", now, n, ttl_now);
    bool have_before = access(broken, X_OK) == 0;
    if (have_before) {
        setenv("COORD_BROKER", broken, 1);
        setenv("COORD_TEST_BREAK", "etcd-poll", 1);
        CHECK_EQ(failover_series("poll", n, lease, before, &ttl_before), 0);
        unsetenv("COORD_TEST_BREAK");
        setenv("COORD_BROKER", plain, 1);
    }
    if (have_before)
        failover_report("etcd-poll break (before)", before, n, ttl_before);
    free(plain);
    free(now);
    free(before);
    etcd_stop(&ec);
}

int main(int argc, char **argv)
{
    etcd_required();
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "shared", test_shared },
        { "kill9", test_kill9 },
        { "sigstop", test_sigstop },
        { "etcd_down", test_etcd_down },
        { "watch", test_watch },
        { "cluster", test_cluster },
        { "race_lease", test_race_lease },
        { "bench", test_bench },
        { "failover", test_failover },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
