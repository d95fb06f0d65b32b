/* resref.h - a result by reference: one refcounted broker object around
 * an open descriptor of the result's bytes (the owner's sealed memfd, or a
 * durable record's file), tmux style: it starts with one reference, held by
 * whoever made it; each holder (a flight delivering it, a frame queued with
 * its descriptor, a connection's result_ref) takes one; the last drop closes
 * the descriptor. */
#ifndef COORD_RESREF_H
#define COORD_RESREF_H

#include <stdint.h>

struct resref {
    unsigned refs;
    int fd;                      /* owned; read-only use only */
    uint64_t size;
    uint64_t ino;
};

/* A new object owning fd (which it closes when the last reference goes),
 * with one reference for the caller; NULL (fd closed) when out of memory or
 * fstat fails. */
struct resref *resref_new(int fd, uint64_t size);
struct resref *resref_hold(struct resref *r);
void resref_drop(struct resref *r);
/* A new open file description of the same bytes, read-only, offset 0,
 * close-on-exec (reopened through /proc/self/fd): the caller owns it.  -1
 * with errno on failure. */
int resref_open(const struct resref *r);
/* Checks that fd is a memfd sealed against writing, shrinking and growing
 * whose size is size.  0, or -1 with why (a sentence for the client). */
int resref_check_memfd(int fd, uint64_t size, char *why, size_t whysize);

#endif
