/* instance.h - one broker per data dir: the lock that makes the data dir
 * the broker's identity, and the line that names its holder. */
#ifndef COORD_INSTANCE_H
#define COORD_INSTANCE_H

#include <stddef.h>
#include <sys/types.h>

/* The lock file (COORD_DATA_LOCK_FILE) and the lines naming its holder
 * are in protocol/paths.h: coordctl doctor reads them too. */
#include "paths.h"
#define INSTANCE_LOCK_FILE COORD_DATA_LOCK_FILE
#define instance_holder coord_lock_holder

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
#define instance_parse_holder coord_parse_lock_holder

#endif
