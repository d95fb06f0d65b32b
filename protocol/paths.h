/* paths.h - where the broker's socket and data live, and the ownership and
 * mode checks made before trusting a directory (as tmux does). */
#ifndef COORD_PROTO_PATHS_H
#define COORD_PROTO_PATHS_H

#include <stddef.h>

/* sun_path holds 108 bytes including the NUL; libuv truncates silently. */
#define COORD_SOCKET_PATH_MAX 107

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

/* Copy the directory part of path into out ("." when there is none). */
int coord_dirname(const char *path, char *out, size_t size);

#endif
