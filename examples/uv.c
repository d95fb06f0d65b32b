/* uv.c - libcoord inside a libuv event loop (coord-uv.h).
 *
 * The loop never blocks on the broker: a lock request waits while a timer
 * keeps ticking; when another connection releases the lock (a timer does
 * it, 100 ms in), the grant arrives as a callback; the callback joins a
 * flight, whose owner "works" on a timer and completes it with a request
 * sent by coord_send.  Events (here, the lock's lifecycle on "-locks")
 * reach the event callback on the same loop.
 *
 *     cc uv.c $(pkg-config --cflags --libs coord libuv) -o uv && ./uv */
#include <stdio.h>
#include <string.h>
#include <uv.h>
#include "coord.h"
#include "coord-uv.h"

static uv_loop_t *loop;
static coord_uv poll_h;
static uv_timer_t tick_t, release_t, work_t;
static coord_t *c, *holder;
static uint64_t holder_lock, ticks;
static coord_flight owned;        /* the flight we own, while the work runs */
static int status = 1;

static void on_tick(uv_timer_t *t) { (void)t; ticks++; }

/* the other process lets go of the lock */
static void on_release(uv_timer_t *t)
{
    (void)t;
    coord_lock_release(holder, holder_lock);
}

static void on_event(coord_t *cc, const coord_reply_t *ev, void *ud)
{
    coord_lifecycle l;
    (void)cc; (void)ud;
    if (coord_event_lifecycle(ev, &l))
        printf("event %.*s %.*s\n", (int)l.channel_len, l.channel, (int)l.what_len, l.what);
}

static void on_complete(coord_t *cc, int st, const coord_reply_t *reply, void *ud)
{
    uint64_t delivered = 0;
    (void)cc; (void)ud;
    if (st == 0)
        coord_map_uint(coord_reply_map(reply), "delivered", &delivered);
    printf("flight completed: %s, delivered to %llu follower(s)\n",
           st == 0 ? "ok" : coord_strerror(st), (unsigned long long)delivered);
    status = st == 0 ? 0 : 1;
    coord_flight_clear(&owned);
    uv_timer_stop(&tick_t);
    coord_uv_detach(&poll_h);      /* the loop ends when nothing is left */
    uv_close((uv_handle_t *)&tick_t, NULL);
    uv_close((uv_handle_t *)&release_t, NULL);
    uv_close((uv_handle_t *)&work_t, NULL);
}

/* the owner's work is done: flight.complete, without blocking */
static void on_work_done(uv_timer_t *t)
{
    (void)t;
    coord_req_t *r = coord_req_new("flight.complete");
    coord_req_uint(r, "flight", owned.flight);
    coord_req_uint(r, "fence", owned.fence);
    coord_req_bin(r, "result", "report ready", 12);
    coord_req_uint(r, "keep_ms", 0);
    if (coord_send(c, r, on_complete, NULL, NULL) < 0)
        uv_stop(loop);
    coord_req_free(r);
}

static void on_flight(coord_t *cc, int st, coord_flight *f, void *ud)
{
    (void)cc; (void)ud;
    if (st < 0 || f->role != COORD_FLIGHT_OWNER) {
        printf("join: %s\n", coord_strerror(st));
        uv_stop(loop);
        return;
    }
    printf("owner of the flight \"report\": working\n");
    owned = *f;                    /* keep the outcome: move it out ... */
    memset(f, 0, sizeof *f);       /* ... and leave nothing to clear */
    uv_timer_start(&work_t, on_work_done, 20, 0);
}

static void on_lock(coord_t *cc, int st, uint64_t lock, uint64_t token, void *ud)
{
    (void)lock; (void)ud;
    if (st != 0) {
        printf("lock: %s\n", coord_strerror(st));
        uv_stop(loop);
        return;
    }
    printf("granted job (token %llu) while the loop ticked %s\n", (unsigned long long)token,
           ticks > 3 ? "on" : "too little");
    coord_flight_opts o = { .owner_ttl_ms = 5000 };
    if (coord_flight_join_async(cc, "report", 6, &o, on_flight, NULL, NULL) < 0)
        uv_stop(loop);
}

int main(void)
{
    loop = uv_default_loop();
    if (coord_connect(&c, NULL) < 0 || coord_connect(&holder, NULL) < 0) {
        fprintf(stderr, "connect: %s\n", coord_error_message(NULL));
        return 1;
    }
    coord_lock_acquire(holder, "job", 3, NULL, &holder_lock, NULL);
    coord_set_event_cb(c, on_event, NULL);
    coord_subscribe(c, "-locks", 6);
    if (coord_uv_attach(c, loop, &poll_h) < 0)
        return 1;
    uv_timer_init(loop, &tick_t);
    uv_timer_init(loop, &release_t);
    uv_timer_init(loop, &work_t);
    uv_timer_start(&tick_t, on_tick, 10, 10);
    uv_timer_start(&release_t, on_release, 100, 0);
    coord_lock_acquire_async(c, "job", 3, NULL, on_lock, NULL, NULL);
    printf("waiting for job without blocking the loop\n");
    uv_run(loop, UV_RUN_DEFAULT);
    coord_close(holder);
    coord_close(c);
    uv_loop_close(loop);
    return status;
}
