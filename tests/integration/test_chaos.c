/* test_chaos.c - random clients against one broker with a small output cap.
 *
 * Chaos processes hold and steal locks (shared and exclusive, with and
 * without leases), own, follow, complete and fail flights, lead and
 * commit, subscribe and publish large messages, pipeline bursts, cancel,
 * and stop reading at random moments, so that the broker cuts them off in
 * the middle of whatever it is doing for everyone else.  Checker
 * processes, which always read, verify that they get exactly what the
 * protocol promises: one reply per request, mutual exclusion and
 * increasing tokens on their lock, consistent flight results, and only the
 * events of what they subscribed to.  The parent pings throughout; at the
 * end the broker must exit 0 on SIGTERM (a sanitizer report aborts it).
 *
 * COORD_CHAOS_SECONDS (default 60) sets the duration. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

#define NCHAOS 10
#define NCHECK 3

struct shared {
    _Atomic int violations;
    _Atomic int holders;               /* checkers holding "g" */
    _Atomic unsigned long long max_token;
    _Atomic unsigned long long grants, results, messages, cuts_seen;
    char why[256];
};
static struct shared *sh;
static struct broker_proc bp;

static void violation(const char *fmt, const char *detail, unsigned long long v)
{
    if (atomic_fetch_add(&sh->violations, 1) == 0)
        snprintf(sh->why, sizeof sh->why, fmt, detail, v);
}

/* ---- a small non-blocking client, on the harness's rcl ----
 *
 * It never waits for a reply: what arrives is handed to the handler of
 * whoever reads (chaos or checker) when it pumps, and a broker that cut
 * it off makes it dead. */

struct cl {
    struct rcl *r;
    coord_msg m;
    uint64_t rid;
    bool dead;
    /* the frame handler of whoever reads */
    void (*on_msg)(struct cl *c, coord_msg *m, void *ud);
    void *ud;
};

static int cl_open(struct cl *c)
{
    memset(c, 0, sizeof *c);
    c->r = rcl_open(bp.sock, NULL);
    if (!c->r)
        return -1;
    coord_msg_init(&c->m);
    c->rid = 10;
    return 0;
}

static void cl_close(struct cl *c)
{
    rcl_close(c->r);
    coord_msg_destroy(&c->m);
}

static coord_enc *enc;
static uint64_t cl_begin(struct cl *c, const char *op)
{
    enc = rcl_begin(c->r, op, ++c->rid);
    return c->rid;
}

/* Sends raw frames; a broker that cut us off makes us dead. */
static void cl_write(struct cl *c, const coord_buf *b)
{
    if (!c->dead && rcl_write(c->r, b->data, b->len) != 0)
        c->dead = true;
}

static uint64_t cl_send(struct cl *c)
{
    if (!c->dead && rcl_send(c->r) != 0)
        c->dead = true;
    return c->rid;
}

/* Reads what arrives within timeout_ms (0: what is there now) and hands
 * each frame to on_msg. */
static void cl_pump(struct cl *c, int timeout_ms)
{
    if (c->dead)
        return;
    bool closed = rcl_pump(c->r, timeout_ms) < 0;
    int rc;
    while ((rc = rcl_next(c->r, 0, &c->m)) == 0 || rc == -3) {
        if (rc == -3) {
            violation("%s frame from the broker%llu", "undecodable", 0);
            c->dead = true;
            return;
        }
        if (c->on_msg)
            c->on_msg(c, &c->m, c->ud);
    }
    if (closed)
        c->dead = true;
}

static bool str_is(const msgpack_object *v, const char *s)
{
    return v && (v->type == MSGPACK_OBJECT_STR || v->type == MSGPACK_OBJECT_BIN) &&
           v->via.str.size == strlen(s) && memcmp(v->via.str.ptr, s, v->via.str.size) == 0;
}

static uint64_t uint_of(coord_msg *m, const char *k)
{
    const msgpack_object *v = coord_map_find(m->map, k);
    return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? v->via.u64 : 0;
}

/* ---- chaos ---- */

struct chaos {
    uint64_t locks[16];
    int nlocks;
    uint64_t flight, fence;
    uint64_t generation;
    char ws[4];
};

static void chaos_msg(struct cl *c, coord_msg *m, void *ud)
{
    struct chaos *ch = ud;
    (void)c;
    if (coord_map_find(m->map, "ev"))
        return;
    if (uint_of(m, "lock") && coord_map_find(m->map, "granted") && ch->nlocks < 16)
        ch->locks[ch->nlocks++] = uint_of(m, "lock");
    const msgpack_object *role = coord_map_find(m->map, "role");
    if (str_is(role, "owner")) {
        ch->flight = uint_of(m, "flight");
        ch->fence = uint_of(m, "fence");
    }
    if (uint_of(m, "generation") && coord_map_find(m->map, "granted"))
        ch->generation = uint_of(m, "generation");
}

static const char *const names[] = { "c0", "c1", "c2", "c3", "g" };
static const char *const channels[] = { "ch0", "ch1", "-locks", "-flights", "-leaders" };

static void chaos_action(struct cl *c, struct chaos *ch, unsigned r)
{
    char data[8192];
    switch (r % 12) {
    case 0: case 1: {
        const char *name = names[rand() % 5];
        bool g = name[0] == 'g';
        cl_begin(c, "lock.acquire");
        coord_enc_kv_cstr(enc, "name", name);
        int kind = rand() % 4;
        if (kind == 0 && !g)
            coord_enc_kv_bool(enc, "steal", true);
        else if (kind == 1)
            coord_enc_kv_bool(enc, "if_available", true);
        else if (kind == 2 && !g)
            coord_enc_kv_cstr(enc, "mode", "shared");
        if (g || rand() % 2)
            coord_enc_kv_uint(enc, "lease_ms", 100 + (uint64_t)(rand() % 300));
        if (kind == 3)
            coord_enc_kv_uint(enc, "timeout_ms", 1 + (uint64_t)(rand() % 500));
        cl_send(c);
        break;
    }
    case 2:
        if (ch->nlocks) {
            cl_begin(c, "lock.release");
            coord_enc_kv_uint(enc, "lock", ch->locks[--ch->nlocks]);
            cl_send(c);
        }
        break;
    case 3: {
        cl_begin(c, "flight.join");
        coord_enc_kv_cstr(enc, "key", rand() % 2 ? "gk" : "k1");
        coord_enc_kv_uint(enc, "owner_ttl_ms", 200 + (uint64_t)(rand() % 500));
        coord_enc_kv_bool(enc, "abort_when_orphaned", rand() % 2);
        cl_send(c);
        break;
    }
    case 4:
        if (ch->flight) {
            char res[32];
            int n = snprintf(res, sizeof res, "ok:%llu", (unsigned long long)ch->fence);
            bool fail = rand() % 3 == 0;
            cl_begin(c, fail ? "flight.fail" : "flight.complete");
            coord_enc_kv_uint(enc, "flight", ch->flight);
            coord_enc_kv_uint(enc, "fence", ch->fence);
            if (fail) {
                coord_enc_key(enc, "error");
                coord_enc_map_begin(enc);
                coord_enc_kv_cstr(enc, "code", "E");
                coord_enc_map_end(enc);
            } else {
                coord_enc_kv_bin(enc, "result", res, (size_t)n);
            }
            cl_send(c);
            ch->flight = 0;
        }
        break;
    case 5:
        snprintf(ch->ws, sizeof ch->ws, "w%d", rand() % 2);
        cl_begin(c, "leader.campaign");
        coord_enc_kv_cstr(enc, "workstream", ch->ws);
        coord_enc_kv_uint(enc, "lease_ms", 200);
        if (rand() % 3 == 0)
            coord_enc_kv_bool(enc, "steal", true);
        cl_send(c);
        break;
    case 6:
        if (ch->generation) {
            char op[32];
            snprintf(op, sizeof op, "op%d", rand() % 50);
            cl_begin(c, "leader.commit");
            coord_enc_kv_cstr(enc, "workstream", ch->ws);
            coord_enc_kv_uint(enc, "generation", ch->generation);
            coord_enc_kv_cstr(enc, "op_id", op);
            coord_enc_kv_cstr(enc, "key", "k");
            coord_enc_kv_bin(enc, "value", "v", 1);
            cl_send(c);
        }
        break;
    case 7:
        cl_begin(c, "sub.subscribe");
        coord_enc_kv_cstr(enc, "channel", channels[rand() % 5]);
        cl_send(c);
        break;
    case 8: {
        bool big = rand() % 2;
        size_t n = big ? 200 + (size_t)(rand() % 3000) : 16;
        memset(data, 'p', n);
        data[0] = (char)(n >> 8);
        data[1] = (char)n;
        cl_begin(c, "sub.publish");
        coord_enc_kv_cstr(enc, "channel", big ? "ch1" : "ch0");
        coord_enc_kv_bin(enc, "data", data, n);
        cl_send(c);
        break;
    }
    case 9: {                                    /* a pipelined burst */
        bool locks = rand() % 2;
        coord_buf burst;
        coord_enc be;
        coord_buf_init(&burst);
        for (int i = 0; i < 50; i++) {
            coord_enc_begin(&be, &burst);
            if (locks) {
                char name[16];
                snprintf(name, sizeof name, "p%d", rand() % 400);
                coord_enc_kv_cstr(&be, "op", "lock.acquire");
                coord_enc_kv_cstr(&be, "name", name);
                coord_enc_kv_bool(&be, "if_available", true);
            } else {
                coord_enc_kv_cstr(&be, "op", i % 2 ? "ping" : "lock.query");
            }
            coord_enc_kv_uint(&be, "rid", ++c->rid);
            coord_enc_end(&be);
        }
        cl_write(c, &burst);
        coord_buf_free(&burst);
        break;
    }
    case 10:
        cl_begin(c, "cancel");
        coord_enc_kv_uint(enc, "target", c->rid - (uint64_t)(rand() % 4));
        cl_send(c);
        break;
    case 11:                                     /* stop reading a while */
        usleep((useconds_t)(rand() % 400000));
        break;
    }
}

static void chaos_main(int seed, uint64_t until)
{
    srand((unsigned)seed);
    while (now_ms() < until) {
        struct cl c;
        struct chaos ch;
        if (cl_open(&c) < 0)
            continue;
        memset(&ch, 0, sizeof ch);
        c.on_msg = chaos_msg;
        c.ud = &ch;
        bool reads = rand() % 3 != 0;           /* some never read at all */
        int actions = 10 + rand() % 300;
        for (int i = 0; i < actions && !c.dead && now_ms() < until; i++) {
            chaos_action(&c, &ch, (unsigned)rand());
            if (reads)
                cl_pump(&c, 0);
        }
        if (c.dead)
            atomic_fetch_add(&sh->cuts_seen, 1);
        cl_close(&c);
    }
    _exit(0);
}

/* ---- checkers ---- */

enum pending_kind { P_NONE, P_ACQUIRE, P_RELEASE, P_JOIN, P_COMPLETE, P_OTHER };

struct checker {
    enum pending_kind kind[65536];
    uint64_t sent_ms[65536];
    uint64_t lock;                  /* held "g" */
    uint64_t flight, fence;         /* owned "gk" */
    bool waiting;                   /* a request outstanding */
};

static void checker_msg(struct cl *c, coord_msg *m, void *ud)
{
    struct checker *k = ud;
    const msgpack_object *ev = coord_map_find(m->map, "ev");
    if (ev) {
        const msgpack_object *chan = coord_map_find(m->map, "channel");
        if (str_is(ev, "message")) {
            const msgpack_object *d = coord_map_find(m->map, "data");
            size_t want = d && d->type == MSGPACK_OBJECT_BIN && d->via.bin.size >= 2
                          ? ((size_t)(uint8_t)d->via.bin.ptr[0] << 8) | (uint8_t)d->via.bin.ptr[1]
                          : 0;
            if (!str_is(chan, "ch0"))
                violation("message on a channel not subscribed%s%llu", "", 0);
            else if (!want || d->via.bin.size != want)
                violation("message with wrong data%s%llu", "", 0);
            atomic_fetch_add(&sh->messages, 1);
        } else if (str_is(ev, "lifecycle")) {
            if (!str_is(chan, "-flights"))
                violation("lifecycle event of a channel not subscribed%s%llu", "", 0);
        } else if (!str_is(ev, "flight.abort")) {   /* an owner past its TTL: allowed */
            violation("unexpected event%s%llu", "", 0);
        }
        return;
    }
    uint64_t rid = uint_of(m, "rid");
    if (rid >= 65536 || k->kind[rid] == P_NONE) {
        violation("reply to a request not outstanding%s (rid %llu)", "", (unsigned long long)rid);
        return;
    }
    enum pending_kind kind = k->kind[rid];
    k->kind[rid] = P_NONE;
    k->waiting = false;
    const msgpack_object *ok = coord_map_find(m->map, "ok");
    bool okv = ok && ok->type == MSGPACK_OBJECT_BOOLEAN && ok->via.boolean;
    if (kind == P_ACQUIRE) {
        if (!okv)
            return;                              /* TIMEOUT: fine */
        k->lock = uint_of(m, "lock");
        uint64_t token = uint_of(m, "token");
        if (atomic_fetch_add(&sh->holders, 1) != 0)
            violation("two checkers hold \"g\"%s%llu", "", 0);
        unsigned long long prev = atomic_load(&sh->max_token);
        while (token > prev && !atomic_compare_exchange_weak(&sh->max_token, &prev, token))
            ;
        if (token <= prev)
            violation("token not increasing%s: %llu", "", token);
        atomic_fetch_add(&sh->grants, 1);
    } else if (kind == P_RELEASE) {
        if (!okv)
            violation("release of a held lock refused%s%llu", "", 0);
    } else if (kind == P_JOIN) {
        const msgpack_object *role = coord_map_find(m->map, "role");
        if (str_is(role, "owner")) {
            k->flight = uint_of(m, "flight");
            k->fence = uint_of(m, "fence");
        } else if (str_is(role, "result")) {
            const msgpack_object *r = coord_map_find(m->map, "result");
            char want[32];
            int n = snprintf(want, sizeof want, "ok:%llu", (unsigned long long)uint_of(m, "fence"));
            if (!r || r->via.bin.size != (uint32_t)n || memcmp(r->via.bin.ptr, want, (size_t)n))
                violation("flight result does not match its fence%s%llu", "", 0);
            atomic_fetch_add(&sh->results, 1);
        } else if (!str_is(role, "failed") && okv) {
            violation("join answered with no role%s%llu", "", 0);
        }
    }
    (void)c;
}

static uint64_t check_send(struct cl *c, struct checker *k, enum pending_kind kind)
{
    uint64_t rid = c->rid;
    if (rid >= 65536) {
        c->dead = true;
        return 0;
    }
    k->kind[rid] = kind;
    k->sent_ms[rid] = now_ms();
    k->waiting = true;
    cl_send(c);
    return rid;
}

/* Waits for the outstanding reply (10 s at most: more is a violation). */
static void check_wait(struct cl *c, struct checker *k)
{
    uint64_t t0 = now_ms();
    while (k->waiting && !c->dead && now_ms() - t0 < 10000)
        cl_pump(c, 100);
    if (k->waiting && !c->dead)
        violation("no reply within 10 s%s%llu", "", 0);
    if (c->dead)
        violation("a checker lost its connection%s%llu", "", 0);
}

static void checker_main(int seed, uint64_t until)
{
    srand((unsigned)seed);
    static struct checker k;
    struct cl c;
    if (cl_open(&c) < 0) {
        violation("checker cannot connect%s%llu", "", 0);
        _exit(1);
    }
    c.on_msg = checker_msg;
    c.ud = &k;
    /* not -locks: a lock event reaching a checker is one it never asked for
     * (a fan-out whose buffer was reused by a cut subscriber's release) */
    const char *subs[] = { "ch0", "-flights" };
    for (int i = 0; i < 2; i++) {
        cl_begin(&c, "sub.subscribe");
        coord_enc_kv_cstr(enc, "channel", subs[i]);
        check_send(&c, &k, P_OTHER);
        check_wait(&c, &k);
    }
    while (now_ms() < until && !c.dead && c.rid < 65000) {
        cl_begin(&c, "lock.acquire");
        coord_enc_kv_cstr(enc, "name", "g");
        coord_enc_kv_uint(enc, "timeout_ms", 3000);
        check_send(&c, &k, P_ACQUIRE);
        check_wait(&c, &k);
        if (k.lock) {
            cl_pump(&c, rand() % 3);
            atomic_fetch_sub(&sh->holders, 1);
            cl_begin(&c, "lock.release");
            coord_enc_kv_uint(enc, "lock", k.lock);
            k.lock = 0;
            check_send(&c, &k, P_RELEASE);
            check_wait(&c, &k);
        }
        cl_begin(&c, "flight.join");
        coord_enc_kv_cstr(enc, "key", "gk");
        coord_enc_kv_uint(enc, "owner_ttl_ms", 2000);
        coord_enc_kv_uint(enc, "wait_ms", 9000);
        check_send(&c, &k, P_JOIN);
        check_wait(&c, &k);
        if (k.flight) {
            char res[32];
            int n = snprintf(res, sizeof res, "ok:%llu", (unsigned long long)k.fence);
            cl_begin(&c, "flight.complete");
            coord_enc_kv_uint(enc, "flight", k.flight);
            coord_enc_kv_uint(enc, "fence", k.fence);
            coord_enc_kv_bin(enc, "result", res, (size_t)n);
            k.flight = 0;
            check_send(&c, &k, P_COMPLETE);     /* FENCED is fine: it overran */
            check_wait(&c, &k);
        }
    }
    cl_close(&c);
    _exit(0);
}

static void test_chaos(void)
{
    const char *secs_env = getenv("COORD_CHAOS_SECONDS");
    int secs = secs_env ? atoi(secs_env) : 60;
    const char *args[] = { "--max-outbuf", "8192", "--max-frame", "4096", "--max-pending", "64",
                           NULL };
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(sh != MAP_FAILED);
    memset(sh, 0, sizeof *sh);
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, args) == 0);
    uint64_t until = now_ms() + (uint64_t)secs * 1000;
    pid_t kids[NCHAOS + NCHECK];
    for (int i = 0; i < NCHAOS + NCHECK; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            if (i < NCHAOS)
                chaos_main(1000 + i, until);
            else
                checker_main(2000 + i, until);
        }
    }
    /* the parent pings throughout: the broker never stalls */
    struct rcl *mon = connect_or_exit(&bp, NULL);
    uint64_t worst = 0, pings = 0;
    coord_msg m;
    coord_msg_init(&m);
    while (now_ms() < until) {
        uint64_t t0 = now_ms();
        if (rcl_sync(mon) != 0) {
            violation("the monitor's ping failed%s%llu", "", 0);
            break;
        }
        uint64_t d = now_ms() - t0;
        worst = d > worst ? d : worst;
        pings++;
        struct pollfd p = { -1, 0, 0 };
        poll(&p, 0, 100);
    }
    for (int i = 0; i < NCHAOS + NCHECK; i++) {
        int st = wait_pid_timeout(kids[i], 30000);
        if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            kill(kids[i], SIGKILL);
            violation("a client process did not finish cleanly%s%llu", "", 0);
        }
    }
    rcl_begin(mon, "stats", 99);
    REQUIRE(rcl_send(mon) == 0);
    REQUIRE(rcl_reply(mon, 99, 10000, &m) == 0);
    uint64_t cut = msg_uint(&m, "outbuf_disconnects");
    fprintf(stderr, "chaos %d s: %llu cut off at the output cap, %llu connections seen dead "
            "by chaos clients, %llu checker grants, %llu flight results, %llu messages; "
            "monitor: %llu pings, worst %llu ms; violations %d%s%s\n", secs,
            (unsigned long long)cut, atomic_load(&sh->cuts_seen), atomic_load(&sh->grants),
            atomic_load(&sh->results), atomic_load(&sh->messages),
            (unsigned long long)pings, (unsigned long long)worst,
            atomic_load(&sh->violations), sh->violations ? ": " : "", sh->why);
    CHECK_EQ_U(atomic_load(&sh->violations), 0);
    CHECK(cut > 0);                              /* the cut-off path really ran */
    CHECK(atomic_load(&sh->grants) > 0 && atomic_load(&sh->results) > 0);
    CHECK(worst < 5000);
    coord_msg_destroy(&m);
    rcl_close(mon);
    int st = broker_kill(&bp, SIGTERM);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "chaos", test_chaos },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
