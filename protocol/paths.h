/* paths.h - where the broker's socket and data live, and the ownership and
 * mode checks made before trusting a directory (as tmux does). */
#ifndef COORD_PROTO_PATHS_H
#define COORD_PROTO_PATHS_H

#include <stddef.h>
#include <sys/types.h>

/* sun_path holds 108 bytes including the NUL; libuv truncates silently. */
#define COORD_SOCKET_PATH_MAX 107

/* The longest line a starting broker writes to its --ready-fd: "ready\n",
 * or "error REASON\n" when it cannot start.  A reason names a data dir
 * and a socket or two; one longer than this is cut, and readers stop at
 * this many bytes. */
#define COORD_READY_LINE_MAX 1024

/* $COORD_SOCKET, else $XDG_RUNTIME_DIR/coord/broker.sock, else
 * /tmp/coord-$UID/broker.sock.  Returns 0, or -1 when it does not fit. */
int coord_default_socket_path(char *out, size_t size);
/* $COORD_DATA_DIR, else $XDG_STATE_HOME/coord, else ~/.local/state/coord. */
int coord_default_data_dir(char *out, size_t size);
/* $COORD_CONFIG_DIR, else $XDG_CONFIG_HOME/coord, else ~/.config/coord:
 * the broker's configuration (workstreams/WORKSTREAM.v1 descriptors). */
int coord_default_config_dir(char *out, size_t size);

/* Create dir (and missing parents, mode 0700) if absent, then check that it
 * is a directory owned by the current uid and not group/world writable.
 * Returns 0, or -1 with a reason in err. */
int coord_prepare_private_dir(const char *dir, char *err, size_t errsize);

/* The lock a broker holds on its data dir for its whole life (one broker
 * per data dir), in the data dir; the broker writes "pid=N\nsocket=PATH\n"
 * into it once it runs. */
#define COORD_DATA_LOCK_FILE "coordd.lock"

/* Who holds a data dir: pid 0 and socket "" when it did not say yet. */
struct coord_lock_holder {
    pid_t pid;
    char socket[128];
};
/* Parses the lock file's "pid=N\nsocket=PATH\n" into *h: 0 when both
 * lines are whole (a pid > 0, a path that fits), else -1 (*h then
 * undefined). */
int coord_parse_lock_holder(const char *text, struct coord_lock_holder *h);

/* Copy the directory part of path into out ("." when there is none). */
int coord_dirname(const char *path, char *out, size_t size);

#endif
