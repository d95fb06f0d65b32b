/* test_kill_batches.c - kill -9 of the broker at random points of its
 * group commits, many times, and nothing acknowledged is lost.
 *
 * Each round starts the broker on the same data dir, elects a leader,
 * and keeps WRITERS connections busy with one request each in flight:
 * leader.commit of a fresh op id and key, leader.claim of a fresh op id,
 * and flight.join + flight.complete with keep_ms (a completion record).
 * The ledger batches them (one flush per batch, each batch answered once a
 * later flush covered it: broker/store.c), and the broker is killed with
 * SIGKILL either after a random number of replies arrived (right after a
 * batch was answered, while the next is unsynced) or after a random delay
 * (anywhere in a batch).  Every reply read from the sockets afterwards,
 * even after the kill, was sent before it: all of them count as
 * acknowledged.  After the restart, every acknowledged write of the round
 * must be there: each commit's value (leader.read), each claim (claiming
 * it again under the new generation answers reconcile with the old one),
 * each record (record.get), and the new generation must be above every
 * one acknowledged before.  At the end every acknowledged commit and
 * record of all rounds is read once more.
 *
 * COORD_KILL_ROUNDS sets the number of rounds (default 100). */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

#define T 10000                 /* ms to wait for what must happen */
#define WRITERS 8
#define WS "kill-batches"
#define KEEP_MS 3600000
#define MAX_ACKS 200000

/* REQUIRE for functions that return a value: the round cannot go on */
#define MUST(x) do { if (!(x)) { CHECK(x); exit(1); } } while (0)

static struct broker_proc bp;
static coord_msg m;

enum kind { K_COMMIT, K_CLAIM, K_JOIN, K_COMPLETE };

/* what was acknowledged, to be found again */
struct ack {
    enum kind kind;             /* K_COMMIT, K_CLAIM or K_COMPLETE (a record) */
    char name[48];              /* op id / key */
    uint64_t generation;        /* claims: the generation that claimed */
    unsigned round;
};

static struct ack *acks;
static size_t nacks;

struct writer {
    struct rcl *c;
    uint64_t rid;               /* of the request in flight, 0: none */
    enum kind kind;
    char name[48];
    uint64_t flight, fence;     /* after a join as owner */
    unsigned n;
    bool dead;
};

static void name_of(char *out, size_t size, char tag, unsigned round, int w, unsigned n)
{
    snprintf(out, size, "%c-%u-%d-%u", tag, round, w, n);
}

/* Sends w's next request: the kinds take turns; a join as owner is
 * followed by its complete. */
static void send_next(struct writer *w, int wi, unsigned round, uint64_t gen)
{
    coord_enc *e;
    w->rid++;
    if (w->kind == K_JOIN && w->flight) {
        w->kind = K_COMPLETE;
        e = rcl_begin(w->c, "flight.complete", w->rid);
        coord_enc_kv_uint(e, "flight", w->flight);
        coord_enc_kv_uint(e, "fence", w->fence);
        coord_enc_kv_bin(e, "result", w->name, strlen(w->name));
        coord_enc_kv_uint(e, "keep_ms", KEEP_MS);
        w->flight = 0;
    } else {
        w->kind = (enum kind)(w->n % 3 == 0 ? K_COMMIT : w->n % 3 == 1 ? K_CLAIM : K_JOIN);
        name_of(w->name, sizeof w->name, "cqr"[w->kind == K_JOIN ? 2 : w->kind], round, wi,
                w->n++);
        if (w->kind == K_COMMIT) {
            e = rcl_begin(w->c, "leader.commit", w->rid);
            coord_enc_kv_cstr(e, "workstream", WS);
            coord_enc_kv_uint(e, "generation", gen);
            coord_enc_kv_cstr(e, "op_id", w->name);
            coord_enc_kv_cstr(e, "key", w->name);
            coord_enc_kv_bin(e, "value", w->name, strlen(w->name));
        } else if (w->kind == K_CLAIM) {
            e = rcl_begin(w->c, "leader.claim", w->rid);
            coord_enc_kv_cstr(e, "workstream", WS);
            coord_enc_kv_uint(e, "generation", gen);
            coord_enc_kv_cstr(e, "op_id", w->name);
        } else {
            e = rcl_begin(w->c, "flight.join", w->rid);
            coord_enc_kv_cstr(e, "key", w->name);
        }
    }
    if (rcl_send(w->c) != 0)
        w->dead = true;
}

static unsigned cur_round;

static void record_ack(enum kind kind, const char *name, uint64_t gen)
{
    acks[nacks].round = cur_round;
    MUST(nacks < MAX_ACKS);
    acks[nacks].kind = kind;
    snprintf(acks[nacks].name, sizeof acks[nacks].name, "%s", name);
    acks[nacks].generation = gen;
    nacks++;
}

/* The reply in m to w's request: true when it acknowledged a write. */
static bool take_reply(struct writer *w, uint64_t gen)
{
    if (!msg_ok(&m)) {
        CHECK(!"a write was refused");
        fprintf(stderr, "refused: %s %.*s\n", w->name, (int)msg_bytes(&m, "code").len,
                (const char *)msg_bytes(&m, "code").ptr);
        return false;
    }
    switch (w->kind) {
    case K_COMMIT:
        CHECK(msg_bool(&m, "applied"));
        record_ack(K_COMMIT, w->name, gen);
        return true;
    case K_CLAIM:
        CHECK(msg_bool(&m, "claimed"));
        record_ack(K_CLAIM, w->name, gen);
        return true;
    case K_JOIN:
        if (msg_str_is(&m, "role", S("owner"))) {
            w->flight = msg_uint(&m, "flight");
            w->fence = msg_uint(&m, "fence");
        }
        return false;
    case K_COMPLETE:
        record_ack(K_COMPLETE, w->name, gen);
        return true;
    }
    return false;
}

static bool check_one(struct rcl *c, uint64_t *rid, const struct ack *a, uint64_t gen)
{
    coord_enc *e;
    ++*rid;
    if (a->kind == K_COMMIT) {
        e = rcl_begin(c, "leader.read", *rid);
        coord_enc_kv_cstr(e, "workstream", WS);
        coord_enc_kv_cstr(e, "key", a->name);
    } else if (a->kind == K_CLAIM) {
        e = rcl_begin(c, "leader.claim", *rid);
        coord_enc_kv_cstr(e, "workstream", WS);
        coord_enc_kv_uint(e, "generation", gen);
        coord_enc_kv_cstr(e, "op_id", a->name);
    } else {
        e = rcl_begin(c, "record.get", *rid);
        coord_enc_kv_cstr(e, "key", a->name);
    }
    MUST(rcl_send(c) == 0);
    MUST(rcl_reply(c, *rid, T, &m) == 0);
    bool ok = msg_ok(&m);
    if (ok && a->kind == K_COMMIT)
        ok = msg_str_is(&m, "value", a->name, strlen(a->name));
    else if (ok && a->kind == K_CLAIM)
        ok = msg_has(&m, "reconcile") && msg_bool(&m, "reconcile") &&
             msg_uint(&m, "previous_generation") == a->generation;
    else if (ok)
        ok = msg_str_is(&m, "result", a->name, strlen(a->name));
    if (!ok)
        fprintf(stderr, "lost: %c %s (generation %llu)\n", "cq?r"[a->kind], a->name,
                (unsigned long long)a->generation);
    return ok;
}

static uint64_t elect(struct rcl *c, uint64_t rid)
{
    coord_enc *e = rcl_begin(c, "leader.campaign", rid);
    coord_enc_kv_cstr(e, "workstream", WS);
    coord_enc_kv_uint(e, "lease_ms", 600000);
    coord_enc_kv_bool(e, "steal", true);
    MUST(rcl_send(c) == 0);
    MUST(rcl_reply(c, rid, T, &m) == 0);
    MUST(msg_ok(&m) && msg_bool(&m, "granted"));
    return msg_uint(&m, "generation");
}

static uint64_t rand_below(uint64_t n)
{
    return n ? (uint64_t)random() % n : 0;
}

static void test_kill_at_random_points(void)
{
    const char *env = getenv("COORD_KILL_ROUNDS");
    unsigned rounds = env ? (unsigned)atoi(env) : 100;
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    fprintf(stderr, "seed %u, %u rounds\n", seed, rounds);
    srandom(seed);
    acks = calloc(MAX_ACKS, sizeof *acks);
    REQUIRE(acks != NULL);
    memset(&bp, 0, sizeof bp);
    const char *args[] = { "--log-level", "warn", NULL };
    uint64_t last_gen = 0;
    size_t lost = 0, checked = 0;
    for (unsigned round = 0; round < rounds && !lost; round++) {
        cur_round = round;
        REQUIRE(broker_start(&bp, args) == 0);
        struct rcl *lead = rcl_open(bp.sock, NULL);
        REQUIRE(lead != NULL);
        uint64_t lrid = 0, gen = elect(lead, ++lrid);
        if (gen <= last_gen) {
            fprintf(stderr, "round %u: generation %llu after %llu\n", round,
                    (unsigned long long)gen, (unsigned long long)last_gen);
            CHECK(gen > last_gen);
            lost++;
        }
        last_gen = gen;
        /* what the last round acknowledged is all here */
        size_t first = nacks;
        while (first > 0 && acks[first - 1].round + 1 == round)
            first--;
        for (size_t i = first; i < nacks; i++, checked++)
            if (!check_one(lead, &lrid, &acks[i], gen))
                lost++;
        CHECK_EQ_U(lost, 0);

        struct writer w[WRITERS];
        memset(w, 0, sizeof w);
        for (int i = 0; i < WRITERS; i++) {
            w[i].c = rcl_open(bp.sock, NULL);
            REQUIRE(w[i].c != NULL);
            send_next(&w[i], i, round, gen);
        }
        /* kill after a number of acknowledgements (the next batch is
         * then unsynced) or after a delay (anywhere in a batch) */
        bool by_count = random() % 2;
        uint64_t kill_after = by_count ? 1 + rand_below(40) : rand_below(6000);
        uint64_t acked = 0;
        struct timespec ts0;
        clock_gettime(CLOCK_MONOTONIC, &ts0);
        bool killed = false;
        int open = WRITERS;
        while (open > 0) {
            int progressed = 0;
            for (int i = 0; i < WRITERS; i++) {
                if (w[i].dead)
                    continue;
                int r = rcl_next(w[i].c, killed ? T : 0, &m);
                if (r == -2)
                    continue;
                if (r != 0) {
                    w[i].dead = true;
                    open--;
                    continue;
                }
                progressed++;
                if (msg_has(&m, "ev"))
                    continue;
                if (take_reply(&w[i], gen))
                    acked++;
                if (!killed)
                    send_next(&w[i], i, round, gen);
                else
                    w[i].rid = 0;
            }
            if (!killed) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                uint64_t us = (uint64_t)(ts.tv_sec - ts0.tv_sec) * 1000000 +
                              (uint64_t)(ts.tv_nsec - ts0.tv_nsec) / 1000;
                if ((by_count && acked >= kill_after) || (!by_count && us >= kill_after) ||
                    us > 2000000) {
                    kill(bp.pid, SIGKILL);
                    killed = true;
                }
            }
            if (!progressed && !killed) {
                struct pollfd pf[WRITERS];
                int np = 0;
                for (int i = 0; i < WRITERS; i++)
                    if (!w[i].dead)
                        pf[np++] = (struct pollfd){ .fd = rcl_fd(w[i].c), .events = POLLIN };
                poll(pf, (nfds_t)np, 1);
            }
        }
        CHECK(WIFSIGNALED(broker_kill(&bp, SIGKILL)));
        for (int i = 0; i < WRITERS; i++)
            rcl_close(w[i].c);
        rcl_close(lead);
    }
    /* every round's acknowledgements, once more, on a clean restart */
    if (!lost) {
        REQUIRE(broker_start(&bp, args) == 0);
        struct rcl *c = rcl_open(bp.sock, NULL);
        REQUIRE(c != NULL);
        uint64_t rid = 0, gen = elect(c, ++rid);
        CHECK(gen > last_gen);
        for (size_t i = 0; i < nacks; i++)
            if (acks[i].kind != K_CLAIM && !check_one(c, &rid, &acks[i], gen))
                lost++;
        rcl_close(c);
        CHECK(broker_kill(&bp, SIGTERM) == 0);
    }
    CHECK_EQ_U(lost, 0);
    fprintf(stderr, "%u kills, %zu writes acknowledged, %zu checked after their kill, "
            "%zu lost\n", rounds, nacks, checked, lost);
    broker_cleanup(&bp);
    free(acks);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "kill_at_random_points", test_kill_at_random_points },
        { NULL, NULL },
    };
    if (coord_msg_init(&m) < 0)
        return 1;
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
