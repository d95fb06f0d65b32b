/* spawn.h - the one way a broker is started: by libcoord's autostart, by
 * the tools that run brokers (coord-bench, coord-fault) and by the test
 * harness.  The child gets the ready pipe's write end as fd 3 (the caller's
 * argv says --ready-fd 3), default signal dispositions and an empty signal
 * mask, and no other descriptor above 2; whatever it cannot do before its
 * exec (the exec included) it reports as "E<errno>\n" on that pipe, which
 * coord_ready_await (ready.h) reads as COORD_READY_EXEC.  Only
 * async-signal-safe calls run between fork and exec, so a library may call
 * it from a threaded program. */
#ifndef COORD_PROTO_SPAWN_H
#define COORD_PROTO_SPAWN_H

#include <stdbool.h>
#include <sys/types.h>

struct coord_spawn {
    const char *const *argv;       /* argv[0]: a path, or a name looked up in
                                      $PATH when search_path */
    bool search_path;
    /* detached (setsid, then a second fork): the broker outlives the caller
     * and is not its child; coord_spawn returns 0 for it */
    bool detach;
    bool die_with_parent;          /* PR_SET_PDEATHSIG SIGKILL */
    bool stdin_null;               /* stdin from /dev/null, else inherited */
    const char *stdout_path;       /* appended to (created 0600); NULL: inherited */
    const char *stderr_path;
    long nofile;                   /* > 0: RLIMIT_NOFILE soft and hard */
};

/* Starts s->argv.  Returns the child's pid (0 when detached) with
 * *ready_fd the read end of its ready pipe (close-on-exec), or -1 with
 * errno set and nothing left open. */
pid_t coord_spawn(const struct coord_spawn *s, int *ready_fd);

#endif
