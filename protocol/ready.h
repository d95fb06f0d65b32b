/* ready.h - the ready fd a starting broker answers on (coordd
 * --ready-fd), read the same way by libcoord's autostart, the tools that
 * start brokers (coord-bench, coord-fault) and the tests.
 *
 * The broker writes one line: "ready\n" once it accepts connections, or
 * "error REASON\n" when it cannot start; a client whose exec of the broker
 * failed writes "E<errno>\n" itself (from the child, before exiting).
 * Lines are at most COORD_READY_LINE_MAX (paths.h); unknown lines are
 * skipped. */
#ifndef COORD_PROTO_READY_H
#define COORD_PROTO_READY_H

#include <stddef.h>

enum coord_ready {
    COORD_READY_OK,         /* "ready" */
    COORD_READY_EOF,        /* closed (or full) without an answer */
    COORD_READY_TIMEOUT,
    COORD_READY_EXEC,       /* "E<errno>": *exec_errno set */
    COORD_READY_ERROR,      /* "error REASON": the reason copied */
};

/* Reads fd (it is not closed) until an answer, EOF or timeout_ms (-1:
 * none).  reason (cap bytes, may be NULL) gets the broker's reason on
 * COORD_READY_ERROR, cut to fit. */
enum coord_ready coord_ready_await(int fd, int timeout_ms, int *exec_errno,
                                   char *reason, size_t cap);

#endif
