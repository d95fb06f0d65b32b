/* instance.h - one broker per data dir: the lock that makes the data dir
 * the broker's identity, and the line that names its holder. */
#ifndef COORD_INSTANCE_H
#define COORD_INSTANCE_H

#include <stddef.h>
#include <sys/types.h>

/* The lock file in the data dir (it also names the broker holding it). */
#define INSTANCE_LOCK_FILE "coordd.lock"

/* Who holds a data dir: pid 0 and socket "" when it did not say yet. */
struct instance_holder {
    pid_t pid;
    char socket[128];
};

/* Takes the exclusive lock on DATA_DIR/coordd.lock (the dir must exist)
 * and empties the file, to be filled by instance_publish.  Returns 0 with
 * *fd (the caller owns it: the lock lives as long as that open file, across
 * fork), 1 when another broker holds it (*holder says who, as far as it
 * wrote it), -1 with err. */
int instance_lock(const char *data_dir, int *fd, struct instance_holder *holder,
                  char *err, size_t errsize);
/* Writes "pid=PID\nsocket=PATH\n" (this process's pid: call it after any
 * fork) into the locked file.  0 or -1 with err. */
int instance_publish(int fd, const char *socket_path, char *err, size_t errsize);

/* Parses the file's "pid=N\nsocket=PATH\n" into *h: 0 when both lines
 * are whole (a pid > 0, a path that fits), else -1 (*h then undefined). */
int instance_parse_holder(const char *text, struct instance_holder *h);

#endif
