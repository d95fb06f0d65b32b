/* coord-uv.h - run a libcoord connection inside a libuv loop (header only;
 * include it after coord.h, link with libuv yourself).
 *
 *     coord_uv h;
 *     coord_uv_attach(c, loop, &h);      // replies and events now arrive
 *     ...                                // through the loop's callbacks
 *     coord_uv_detach(&h);               // before coord_close(c)
 *
 * A uv_poll_t watches coord_fd(c): for input always, for room to write
 * while coord_want_write(c) says requests wait in c (coord_send never
 * blocks: it queues what the socket does not take).  A uv_prepare_t checks
 * that before every wait of the loop, since coord_send may be called from
 * any callback.  When the connection fails, dispatching stops by itself
 * (the poll is stopped, and every pending callback has been called with
 * COORD_ECLOSED); detach as usual.  coord_uv_detach closes both handles:
 * h must stay valid until the loop has run once more.  The handles' data
 * fields point to h: don't change them. */
#ifndef COORD_UV_H
#define COORD_UV_H

#include <uv.h>
#include "coord.h"

typedef struct coord_uv {
    uv_poll_t poll;
    uv_prepare_t prepare;
    coord_t *c;
    int events;                 /* what poll watches now; 0: stopped */
} coord_uv;

static inline void coord_uv__on_poll(uv_poll_t *poll, int status, int events);

/* Watches for what c needs now: input, and room while output waits. */
static inline void coord_uv__watch(coord_uv *h)
{
    if (!h->events)
        return;                 /* stopped: the connection failed */
    int want = UV_READABLE | (coord_want_write(h->c) ? UV_WRITABLE : 0);
    if (want != h->events && uv_poll_start(&h->poll, want, coord_uv__on_poll) == 0)
        h->events = want;
}

static inline void coord_uv__on_poll(uv_poll_t *poll, int status, int events)
{
    coord_uv *h = (coord_uv *)poll->data;
    (void)events;
    if (status < 0 || coord_dispatch(h->c) < 0) {
        uv_poll_stop(poll);
        h->events = 0;
        return;
    }
    coord_uv__watch(h);
}

static inline void coord_uv__on_prepare(uv_prepare_t *prepare)
{
    coord_uv__watch((coord_uv *)prepare->data);
}

/* Starts watching coord_fd(c) on loop.  Returns 0 or a libuv error
 * (negative errno); on error nothing is left to close. */
static inline int coord_uv_attach(coord_t *c, uv_loop_t *loop, coord_uv *h)
{
    h->c = c;
    h->events = 0;
    int rc = uv_poll_init(loop, &h->poll, coord_fd(c));
    if (rc < 0)
        return rc;
    h->poll.data = h;
    uv_prepare_init(loop, &h->prepare);
    h->prepare.data = h;
    h->events = UV_READABLE | (coord_want_write(c) ? UV_WRITABLE : 0);
    rc = uv_poll_start(&h->poll, h->events, coord_uv__on_poll);
    if (rc == 0)
        rc = uv_prepare_start(&h->prepare, coord_uv__on_prepare);
    if (rc < 0) {
        uv_close((uv_handle_t *)&h->poll, NULL);
        uv_close((uv_handle_t *)&h->prepare, NULL);
        h->events = 0;
    }
    return rc;
}

/* Stops watching and closes both handles (no close callbacks). */
static inline void coord_uv_detach(coord_uv *h)
{
    h->events = 0;
    if (!uv_is_closing((uv_handle_t *)&h->poll)) {
        uv_poll_stop(&h->poll);
        uv_close((uv_handle_t *)&h->poll, NULL);
    }
    if (!uv_is_closing((uv_handle_t *)&h->prepare)) {
        uv_prepare_stop(&h->prepare);
        uv_close((uv_handle_t *)&h->prepare, NULL);
    }
}

#endif
