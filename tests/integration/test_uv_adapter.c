/* test_uv_adapter.c - libcoord inside a libuv loop (coord-uv.h): replies to many
 * async requests, a lock grant and a lock.lost event all arrive through the
 * loop's callbacks, with nothing blocking. */
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
    uv_poll_t poll;
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

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "loop_dispatch", test_loop_dispatch },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
