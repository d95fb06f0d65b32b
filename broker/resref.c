/* resref.c - results by reference (resref.h).
 *
 * The bytes are never read by the broker: a receiver gets its own open
 * file description (resref_open reopens /proc/self/fd/N, so every
 * receiver has its own offset, never a shared one) and reads the pages of
 * the memfd or file itself.  The owner's memfd must carry the seals that
 * make its bytes immutable (F_SEAL_WRITE: no write and no writable mapping
 * anywhere; F_SEAL_SHRINK and F_SEAL_GROW: its size is fixed), so what a
 * follower reads is what the owner completed with, whoever still holds a
 * descriptor of it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include "resref.h"

#ifndef F_SEAL_WRITE
#define F_ADD_SEALS 1033
#define F_GET_SEALS 1034
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif

struct resref *resref_new(int fd, uint64_t size)
{
    struct stat st;
    struct resref *r = malloc(sizeof *r);
    if (!r || fstat(fd, &st) < 0) {
        free(r);
        close(fd);
        return NULL;
    }
    r->refs = 1;
    r->fd = fd;
    r->size = size;
    r->ino = (uint64_t)st.st_ino;
    return r;
}

struct resref *resref_hold(struct resref *r)
{
    r->refs++;
    return r;
}

void resref_drop(struct resref *r)
{
    if (!r || --r->refs > 0)
        return;
    close(r->fd);
    free(r);
}

int resref_open(const struct resref *r)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", r->fd);
    return open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
}

int resref_check_memfd(int fd, uint64_t size, char *why, size_t whysize)
{
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0) {
        snprintf(why, whysize, "not a sealed memfd: %s",
                 errno == EINVAL ? "the descriptor is not a memfd" : "F_GET_SEALS failed");
        return -1;
    }
    static const struct { int bit; const char *name; } need[] = {
        { F_SEAL_WRITE, "F_SEAL_WRITE" }, { F_SEAL_SHRINK, "F_SEAL_SHRINK" },
        { F_SEAL_GROW, "F_SEAL_GROW" },
    };
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!(seals & need[i].bit)) {
            snprintf(why, whysize, "not a sealed memfd: %s missing", need[i].name);
            return -1;
        }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        snprintf(why, whysize, "not a sealed memfd: fstat failed");
        return -1;
    }
    if ((uint64_t)st.st_size != size) {
        snprintf(why, whysize, "size is %llu, result_fd says %llu",
                 (unsigned long long)st.st_size, (unsigned long long)size);
        return -1;
    }
    return 0;
}
