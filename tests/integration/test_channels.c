/* test_channels.c - channels and lifecycle events through a real broker:
 * ordered exactly-once fan-out to 20 subscribers, a stalled subscriber cut
 * off without slowing the rest, reserved channels, scopes, and the event
 * sequences of a lock handoff, a flight and a leader transition. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

#define T 5000                  /* ms to wait for what must happen */

static struct broker_proc bp;
static coord_msg m;

static void start_with(const char *const *args) { start_or_exit(&bp, args); }

static void stop(void) { stop_and_clean(&bp); }

static struct rcl *client_in(const char *scope) { return connect_or_exit(&bp, scope); }

static int subscribe(struct rcl *c, uint64_t rid, const char *ch)
{
    coord_enc *e = rcl_begin(c, "sub.subscribe", rid);
    coord_enc_kv_cstr(e, "channel", ch);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

static int publish(struct rcl *c, uint64_t rid, const char *ch, const void *p, size_t n)
{
    coord_enc *e = rcl_begin(c, "sub.publish", rid);
    coord_enc_kv_cstr(e, "channel", ch);
    coord_enc_kv_bin(e, "data", p, n);
    rcl_send(c);
    return rcl_reply(c, rid, T, &m);
}

static void test_fan_out_ordered_exactly_once(void)
{
    enum { SUBS = 20, MSGS = 2000 };
    start_with(NULL);
    struct rcl *subs[SUBS], *pub = client_in(NULL);
    for (int i = 0; i < SUBS; i++) {
        subs[i] = client_in(NULL);
        REQUIRE(subscribe(subs[i], 1, "news") == 0 && msg_ok(&m));
    }
    REQUIRE(subscribe(pub, 1, "news") == 0);      /* the publisher too */
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (uint32_t i = 0; i < MSGS; i++) {
        REQUIRE(publish(pub, 10 + i, "news", &i, sizeof i) == 0);
        if (msg_uint(&m, "delivered") != SUBS) {
            CHECK_EQ_U(msg_uint(&m, "delivered"), SUBS);
            break;
        }
    }
    int exact = 0;
    for (int s = 0; s < SUBS; s++) {
        uint32_t want = 0;
        bool in_order = true;
        for (; want < MSGS; want++) {
            if (rcl_event(subs[s], "message", T, &m) != 0)
                break;
            const msgpack_object *d = coord_map_find(m.map, "data");
            uint32_t got;
            if (!d || d->via.bin.size != sizeof got) {
                in_order = false;
                break;
            }
            memcpy(&got, d->via.bin.ptr, sizeof got);
            if (got != want) {
                in_order = false;
                break;
            }
        }
        /* exactly once: nothing more is waiting after the last one */
        exact += in_order && want == MSGS && rcl_sync(subs[s]) == 0 && rcl_queued(subs[s]) == 0;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    fprintf(stderr, "fan-out: %d messages x %d subscribers in %.3f s = %.0f deliveries/s "
            "(publisher waits for each reply)\n", MSGS, SUBS, secs, MSGS * SUBS / secs);
    CHECK_EQ_U(exact, SUBS);
    /* the publisher never hears itself */
    rcl_sync(pub);
    CHECK(rcl_event(pub, "message", 0, &m) != 0);
    for (int i = 0; i < SUBS; i++)
        rcl_close(subs[i]);
    rcl_close(pub);
    stop();
}

static void test_stalled_subscriber_cut_off(void)
{
    enum { SUBS = 20, MSGS = 200 };
    const char *args[] = { "--max-outbuf", "262144", "--max-frame", "65536", NULL };
    start_with(args);
    struct rcl *subs[SUBS], *pub = client_in(NULL);
    for (int i = 0; i < SUBS; i++) {
        subs[i] = client_in(NULL);
        REQUIRE(subscribe(subs[i], 1, "firehose") == 0);
    }
    int small = 4096;
    setsockopt(rcl_fd(subs[0]), SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    static char payload[16384];
    /* subscribers 1..19 read as we go; subscriber 0 never reads */
    int got[SUBS] = { 0 };
    for (int i = 0; i < MSGS; i++) {
        memset(payload, 'a' + i % 26, sizeof payload);
        REQUIRE(publish(pub, 10 + (uint64_t)i, "firehose", payload, sizeof payload) == 0);
        for (int s = 1; s < SUBS; s++)
            if (rcl_event(subs[s], "message", T, &m) == 0) {
                coord_bytes d = msg_bytes(&m, "data");
                got[s] += d.len > 0 && d.ptr[0] == 'a' + i % 26;
            }
    }
    for (int s = 1; s < SUBS; s++)
        CHECK_EQ_U(got[s], MSGS);
    rcl_begin(pub, "stats", 9);
    rcl_send(pub);
    REQUIRE(rcl_reply(pub, 9, T, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "outbuf_disconnects"), 1);
    CHECK_EQ_U(msg_uint(&m, "connections"), SUBS);   /* 19 + publisher */
    /* the last publish reached only the 19 who kept up */
    REQUIRE(publish(pub, 999, "firehose", "x", 1) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), SUBS - 1);
    for (int i = 0; i < SUBS; i++)
        rcl_close(subs[i]);
    rcl_close(pub);
    stop();
}

static void test_reserved_large_and_scopes(void)
{
    start_with(NULL);
    struct rcl *a = client_in("one"), *b = client_in("one"), *other = client_in("two");
    REQUIRE(publish(a, 1, "-locks", "x", 1) == 0);
    CHECK(msg_code_is(&m, "NAME_RESERVED"));
    REQUIRE(publish(a, 2, "-anything", "x", 1) == 0);
    CHECK(msg_code_is(&m, "NAME_RESERVED"));
    REQUIRE(subscribe(a, 3, "-nope") == 0);
    CHECK(msg_code_is(&m, "NAME_RESERVED"));
    REQUIRE(subscribe(a, 4, "-locks") == 0);
    CHECK(msg_ok(&m));
    char *big = calloc(1, 65537);
    REQUIRE(publish(a, 5, "c", big, 65537) == 0);
    CHECK(msg_code_is(&m, "TOO_LARGE"));
    REQUIRE(publish(a, 6, "c", big, 65536) == 0);
    CHECK(msg_ok(&m));
    free(big);
    /* scopes: same channel name, separate worlds */
    REQUIRE(subscribe(b, 1, "c") == 0);
    REQUIRE(subscribe(other, 1, "c") == 0);
    REQUIRE(publish(a, 7, "c", "hi", 2) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), 1);
    CHECK(rcl_event(b, "message", T, &m) == 0 && msg_str_is(&m, "data", "hi", 2));
    rcl_sync(other);
    CHECK_EQ_U(rcl_queued(other), 0);
    /* unsubscribe stops delivery */
    coord_enc *e = rcl_begin(b, "sub.unsubscribe", 2);
    coord_enc_kv_cstr(e, "channel", "c");
    rcl_send(b);
    REQUIRE(rcl_reply(b, 2, T, &m) == 0 && msg_ok(&m));
    REQUIRE(publish(a, 8, "c", "hi", 2) == 0);
    CHECK_EQ_U(msg_uint(&m, "delivered"), 0);
    rcl_close(a); rcl_close(b); rcl_close(other);
    stop();
}

/* Collects the 'what' of the next n lifecycle events into out. */
static void whats(struct rcl *c, int n, char out[][16])
{
    for (int i = 0; i < n; i++) {
        out[i][0] = '\0';
        if (rcl_event(c, "lifecycle", T, &m) != 0)
            return;
        coord_bytes w = msg_bytes(&m, "what");
        size_t len = w.len < 15 ? w.len : 15;
        memcpy(out[i], w.ptr, len);
        out[i][len] = '\0';
        CHECK(coord_map_find(m.map, "result") == NULL);
        CHECK(coord_map_find(m.map, "data") == NULL);
    }
}

static void test_lifecycle_sequences(void)
{
    start_with(NULL);
    struct rcl *w = client_in(NULL), *a = client_in(NULL), *b = client_in(NULL);
    REQUIRE(subscribe(w, 1, "-locks") == 0);
    REQUIRE(subscribe(w, 2, "-flights") == 0);
    REQUIRE(subscribe(w, 3, "-leaders") == 0);
    /* lock handoff: a holds, b waits, a releases, b holds, b releases */
    rcl_acquire(a, 1, S("door"), NULL, 0, 0);
    REQUIRE(rcl_reply(a, 1, T, &m) == 0);
    uint64_t la = msg_uint(&m, "lock");
    rcl_acquire(b, 1, S("door"), NULL, 0, 0);
    rcl_sync(b);
    coord_enc *e = rcl_begin(a, "lock.release", 2);
    coord_enc_kv_uint(e, "lock", la);
    rcl_send(a);
    REQUIRE(rcl_reply(a, 2, T, &m) == 0);
    REQUIRE(rcl_reply(b, 1, T, &m) == 0);
    e = rcl_begin(b, "lock.release", 2);
    coord_enc_kv_uint(e, "lock", msg_uint(&m, "lock"));
    rcl_send(b);
    REQUIRE(rcl_reply(b, 2, T, &m) == 0);
    char seq[8][16];
    whats(w, 4, seq);
    CHECK(strcmp(seq[0], "granted") == 0 && strcmp(seq[1], "released") == 0 &&
          strcmp(seq[2], "granted") == 0 && strcmp(seq[3], "released") == 0);
    /* a flight with one follower; the result must not travel here */
    e = rcl_begin(a, "flight.join", 3);
    coord_enc_kv_cstr(e, "key", "cfg");
    rcl_send(a);
    REQUIRE(rcl_reply(a, 3, T, &m) == 0);
    uint64_t fl = msg_uint(&m, "flight"), fence = msg_uint(&m, "fence");
    e = rcl_begin(b, "flight.join", 3);
    coord_enc_kv_cstr(e, "key", "cfg");
    rcl_send(b);
    rcl_sync(b);
    e = rcl_begin(a, "flight.complete", 4);
    coord_enc_kv_uint(e, "flight", fl);
    coord_enc_kv_uint(e, "fence", fence);
    coord_enc_kv_bin(e, "result", "TOP-SECRET-RESULT", 17);
    rcl_send(a);
    REQUIRE(rcl_reply(a, 4, T, &m) == 0);
    whats(w, 3, seq);
    CHECK(strcmp(seq[0], "started") == 0 && strcmp(seq[1], "joined") == 0 &&
          strcmp(seq[2], "completed") == 0);
    /* a leader transition: elected, lost (disconnect), elected */
    e = rcl_begin(a, "leader.campaign", 5);
    coord_enc_kv_cstr(e, "workstream", "ws");
    rcl_send(a);
    REQUIRE(rcl_reply(a, 5, T, &m) == 0 && msg_bool(&m, "granted"));
    e = rcl_begin(b, "leader.campaign", 5);
    coord_enc_kv_cstr(e, "workstream", "ws");
    rcl_send(b);
    rcl_sync(b);
    rcl_close(a);
    REQUIRE(rcl_reply(b, 5, T, &m) == 0 && msg_bool(&m, "granted"));
    /* interleaved on -locks and -leaders: pick the -leaders ones */
    int found = 0;
    const char *want[] = { "elected", "lost", "elected" };
    for (int i = 0; i < 12 && found < 3; i++) {
        if (rcl_event(w, "lifecycle", T, &m) != 0)
            break;
        if (!msg_str_is(&m, "channel", S("-leaders")))
            continue;
        CHECK(msg_str_is(&m, "what", want[found], strlen(want[found])));
        if (found == 1)
            CHECK(msg_str_is(&m, "reason", S("disconnected")));
        found++;
    }
    CHECK_EQ_U(found, 3);
    /* the kill switch is announced with the generation it stored */
    e = rcl_begin(b, "leader.disable", 6);
    coord_enc_kv_cstr(e, "workstream", "ws");
    rcl_send(b);
    REQUIRE(rcl_reply(b, 6, T, &m) == 0 && msg_ok(&m));
    uint64_t stored = msg_uint(&m, "generation");
    bool seen = false;
    for (int i = 0; i < 12 && !seen; i++) {
        if (rcl_event(w, "lifecycle", T, &m) != 0)
            break;
        if (msg_str_is(&m, "what", S("disabled"))) {
            seen = true;
            CHECK_EQ_U(msg_uint(&m, "generation"), stored);
        }
    }
    CHECK(seen);
    rcl_close(w); rcl_close(b);
    stop();
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "fan_out_ordered_exactly_once", test_fan_out_ordered_exactly_once },
        { "stalled_subscriber_cut_off", test_stalled_subscriber_cut_off },
        { "reserved_large_and_scopes", test_reserved_large_and_scopes },
        { "lifecycle_sequences", test_lifecycle_sequences },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
