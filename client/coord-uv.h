/* coord-uv.h - run a libcoord connection inside a libuv loop (header only;
 * include it after coord.h, link with libuv yourself).
 *
 *     uv_poll_t poll;
 *     coord_uv_attach(c, loop, &poll);   // replies and events now arrive
 *     ...                                // through the loop's callbacks
 *     coord_uv_detach(&poll);            // before coord_close(c)
 *
 * The poll handle's data field is used to find c: don't change it.  When
 * the connection fails, dispatching stops by itself (the poll is stopped,
 * and every pending callback has been called with COORD_ECLOSED); detach
 * and close the handle as usual.  coord_uv_detach closes the handle: its
 * memory must stay valid until the loop has run once more. */
#ifndef COORD_UV_H
#define COORD_UV_H

#include <uv.h>
#include "coord.h"

static inline void coord_uv__on_poll(uv_poll_t *poll, int status, int events)
{
    coord_t *c = (coord_t *)poll->data;
    (void)events;
    if (status < 0 || coord_dispatch(c) < 0)
        uv_poll_stop(poll);
}

/* Starts watching coord_fd(c) for input on loop.  Returns 0 or a libuv
 * error (negative errno). */
static inline int coord_uv_attach(coord_t *c, uv_loop_t *loop, uv_poll_t *poll)
{
    int rc = uv_poll_init(loop, poll, coord_fd(c));
    if (rc < 0)
        return rc;
    poll->data = c;
    rc = uv_poll_start(poll, UV_READABLE, coord_uv__on_poll);
    if (rc < 0)
        uv_close((uv_handle_t *)poll, NULL);
    return rc;
}

/* Stops watching and closes the handle (no close callback). */
static inline void coord_uv_detach(uv_poll_t *poll)
{
    if (uv_is_closing((uv_handle_t *)poll))
        return;
    uv_poll_stop(poll);
    uv_close((uv_handle_t *)poll, NULL);
}

#endif
