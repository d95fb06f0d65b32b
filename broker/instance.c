/* instance.c - one broker per data dir.
 *
 * The socket's lock (listener.c) keeps two brokers off one socket, but the
 * data dir comes from another setting: two shells with different
 * XDG_RUNTIME_DIR or COORD_SOCKET would start two brokers on one LMDB
 * ledger, two leaders for every workstream.  So the broker also holds an
 * exclusive flock on DATA_DIR/coordd.lock for its whole life, taken before
 * it opens LMDB or writes to the data dir's log, and writes its pid and
 * socket there so that a broker refused later can name it.
 *
 * The flock belongs to the open file, not to a process: it survives
 * daemonize()'s forks (the grandchild keeps it once the parents exit) and
 * ends when the last process holding the file closes it or dies, however
 * it dies.  The file is emptied as soon as it is locked and written only
 * once the broker's final pid is known (after the forks), so a reader may
 * find it empty or half-written for a moment: it looks again, for at most
 * HOLDER_WAIT_MS, until both lines are there. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>
#include "instance.h"

/* How long a refused broker waits for the holder's two lines: the holder
 * writes them right after taking the lock (a fork or two later), so this
 * is only ever spent when the holder is stopped or dies in between. */
#define HOLDER_WAIT_MS 200
#define HOLDER_POLL_MS 5

static void read_holder(int fd, struct instance_holder *h)
{
    memset(h, 0, sizeof *h);
    for (int waited = 0; waited <= HOLDER_WAIT_MS; waited += HOLDER_POLL_MS) {
        char text[256];
        ssize_t n = pread(fd, text, sizeof text - 1, 0);
        if (n > 0) {
            text[n] = '\0';
            if (instance_parse_holder(text, h) == 0)
                return;
        }
        struct timespec ts = { 0, HOLDER_POLL_MS * 1000000L };
        nanosleep(&ts, NULL);
    }
    memset(h, 0, sizeof *h);
}

int instance_lock(const char *data_dir, int *fd, struct instance_holder *holder,
                  char *err, size_t errsize)
{
    char path[4200];
    if (snprintf(path, sizeof path, "%s/%s", data_dir, INSTANCE_LOCK_FILE) >=
        (int)sizeof path) {
        snprintf(err, errsize, "data dir path too long: %s", data_dir);
        return -1;
    }
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (f < 0) {
        snprintf(err, errsize, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    if (flock(f, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        if (e == EWOULDBLOCK) {
            read_holder(f, holder);
            close(f);
            return 1;
        }
        snprintf(err, errsize, "cannot lock %s: %s", path, strerror(e));
        close(f);
        return -1;
    }
    if (ftruncate(f, 0) < 0) {
        snprintf(err, errsize, "cannot write %s: %s", path, strerror(errno));
        close(f);
        return -1;
    }
    *fd = f;
    return 0;
}

int instance_publish(int fd, const char *socket_path, char *err, size_t errsize)
{
    char text[256];
    int n = snprintf(text, sizeof text, "pid=%d\nsocket=%s\n", (int)getpid(), socket_path);
    if (n < 0 || n >= (int)sizeof text) {
        snprintf(err, errsize, "socket path too long: %s", socket_path);
        return -1;
    }
    if (ftruncate(fd, 0) < 0 || pwrite(fd, text, (size_t)n, 0) != n) {
        snprintf(err, errsize, "cannot write %s: %s", INSTANCE_LOCK_FILE, strerror(errno));
        return -1;
    }
    return 0;
}
