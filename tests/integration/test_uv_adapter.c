/* test_uv_adapter.c - libcoord inside a libuv loop (coord-uv.h): replies to many
 * async requests, a lock grant and a lock.lost event all arrive through the
 * loop's callbacks, with nothing blocking; and coord_send never blocks,
 * even when the broker has stopped reading us until we read. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>
#include "coord.h"
#include "coord-uv.h"
#include "harness.h"

static struct broker_proc bp;

struct state {
    uv_loop_t *loop;
    int pings_ok, pings_bad;
    int granted;
    uint64_t lock;
    int lost;
    bool done;
};

static void on_ping(coord_t *c, int status, const coord_reply_t *r, void *ud)
{
    struct state *s = ud;
    (void)c; (void)r;
    if (status == 0) s->pings_ok++; else s->pings_bad++;
}

static void on_grant(coord_t *c, int status, uint64_t lock, uint64_t token, void *ud)
{
    struct state *s = ud;
    (void)c; (void)token;
    if (status == 0) {
        s->granted++;
        s->lock = lock;
    }
}

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct state *s = ud;
    coord_lock_lost lost;
    (void)c;
    if (coord_event_lock_lost(ev, &lost) && lost.lock == s->lock) {
        s->lost++;
        s->done = true;
        uv_stop(s->loop);
    }
}

static void on_deadline(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static void test_loop_dispatch(void)
{
    start_or_exit(&bp, NULL);
    coord_options o;
    coord_options_init(&o);
    o.socket_path = bp.sock;
    o.no_autostart = true;
    coord_t *c = NULL;
    REQUIRE(coord_connect(&c, &o) == 0);
    struct state s;
    memset(&s, 0, sizeof s);
    uv_loop_t loop;
    uv_loop_init(&loop);
    s.loop = &loop;
    coord_uv poll;
    REQUIRE(coord_uv_attach(c, &loop, &poll) == 0);
    coord_set_event_cb(c, on_event, &s);
    coord_req_t *ping = coord_req_new("ping");
    for (int i = 0; i < 100; i++)
        CHECK(coord_send(c, ping, on_ping, &s, NULL) == 0);
    coord_req_free(ping);
    coord_lock_opts lo = { .lease_ms = 150 };
    CHECK(coord_lock_acquire_async(c, "uv-lock", 7, &lo, on_grant, &s, NULL) == 0);
    uv_timer_t deadline;
    uv_timer_init(&loop, &deadline);
    uv_timer_start(&deadline, on_deadline, 10000, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_U(s.pings_ok, 100);
    CHECK_EQ_U(s.pings_bad, 0);
    CHECK_EQ_U(s.granted, 1);
    CHECK_EQ_U(s.lost, 1);         /* the lease ran out: event via the loop */
    CHECK(s.done);
    coord_uv_detach(&poll);
    uv_close((uv_handle_t *)&deadline, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0);
    coord_close(c);
    stop_and_clean(&bp);
}

/* The broker holds more output for c than it lets wait (it stops reading
 * c until c reads), and c then sends more requests than its socket takes,
 * all from one callback.  coord_send queues them and returns; the loop
 * sends them as the broker reads again, while it reads the messages. */
#define FLOOD_MESSAGES 64
#define FLOOD_MESSAGE_BYTES (60 * 1024)
#define FLOOD_SENDS 256
#define FLOOD_SEND_BYTES (16 * 1024)

struct flood {
    uv_loop_t *loop;
    coord_t *c, *pub;
    int sent_ok, sent_bad, replies_ok, replies_bad, messages;
    bool queued_seen;
};

static void flood_check_done(struct flood *f)
{
    if (f->replies_ok + f->replies_bad == f->sent_ok && f->messages == FLOOD_MESSAGES)
        uv_stop(f->loop);
}

static void on_flood_reply(coord_t *c, int status, const coord_reply_t *r, void *ud)
{
    struct flood *f = ud;
    (void)c; (void)r;
    if (status == 0) f->replies_ok++; else f->replies_bad++;
    flood_check_done(f);
}

static void on_flood_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct flood *f = ud;
    coord_message m;
    (void)c;
    if (coord_event_message(ev, &m) && m.data_len == FLOOD_MESSAGE_BYTES)
        f->messages++;
    flood_check_done(f);
}

static void on_flood_start(uv_timer_t *t)
{
    struct flood *f = t->data;
    static uint8_t big[FLOOD_MESSAGE_BYTES], mid[FLOOD_SEND_BYTES];
    for (int i = 0; i < FLOOD_MESSAGES; i++)
        CHECK(coord_publish(f->pub, "flood", 5, big, sizeof big, NULL) == 0);
    coord_req_t *r = coord_req_new("sub.publish");
    coord_req_str(r, "channel", "elsewhere", 9);
    coord_req_bin(r, "data", mid, sizeof mid);
    for (int i = 0; i < FLOOD_SENDS; i++) {
        if (coord_send(f->c, r, on_flood_reply, f, NULL) == 0)
            f->sent_ok++;
        else
            f->sent_bad++;
        if (coord_want_write(f->c))
            f->queued_seen = true;
    }
    coord_req_free(r);
}

static void test_send_never_blocks(void)
{
    start_or_exit(&bp, NULL);
    coord_options o;
    coord_options_init(&o);
    o.socket_path = bp.sock;
    o.no_autostart = true;
    struct flood f;
    memset(&f, 0, sizeof f);
    REQUIRE(coord_connect(&f.c, &o) == 0);
    REQUIRE(coord_connect(&f.pub, &o) == 0);
    REQUIRE(coord_subscribe(f.c, "flood", 5) == 0);
    uv_loop_t loop;
    uv_loop_init(&loop);
    f.loop = &loop;
    coord_uv h;
    REQUIRE(coord_uv_attach(f.c, &loop, &h) == 0);
    coord_set_event_cb(f.c, on_flood_event, &f);
    uv_timer_t start, deadline;
    uv_timer_init(&loop, &start);
    start.data = &f;
    uv_timer_start(&start, on_flood_start, 0, 0);
    uv_timer_init(&loop, &deadline);
    uv_timer_start(&deadline, on_deadline, 20000, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_U(f.sent_ok, FLOOD_SENDS);
    CHECK_EQ_U(f.sent_bad, 0);
    CHECK(f.queued_seen);          /* the socket did not take it all at once */
    CHECK_EQ_U(f.replies_ok, FLOOD_SENDS);
    CHECK_EQ_U(f.messages, FLOOD_MESSAGES);
    CHECK(!coord_want_write(f.c));
    coord_uv_detach(&h);
    uv_close((uv_handle_t *)&start, NULL);
    uv_close((uv_handle_t *)&deadline, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK(uv_loop_close(&loop) == 0);
    coord_close(f.c);
    coord_close(f.pub);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "loop_dispatch", test_loop_dispatch },
        { "send_never_blocks", test_send_never_blocks },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
