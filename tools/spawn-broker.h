/* spawn-broker.h - start a coordd for a tool (coord-bench, coord-fault):
 * --foreground on a given socket and data dir, stdout/stderr appended to a
 * log (protocol/spawn.h starts it), and wait for its --ready-fd line. */
#ifndef COORD_SPAWN_BROKER_H
#define COORD_SPAWN_BROKER_H

#include <sys/types.h>

/* Starts broker and waits up to timeout_ms for "ready".  extra: more
 * arguments (NULL-terminated, may be NULL).  The child dies with us
 * (PR_SET_PDEATHSIG).  Returns its pid, or -1 after printing why (as
 * "who: ..."), the child killed and reaped. */
pid_t spawn_broker(const char *who, const char *broker, const char *socket_path,
                   const char *data_dir, const char *log_path,
                   const char *const *extra, int timeout_ms);

#endif
