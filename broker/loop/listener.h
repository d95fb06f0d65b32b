/* listener.h - the broker's socket. */
#ifndef COORD_LISTENER_H
#define COORD_LISTENER_H

#include <stddef.h>

struct broker;

/* Checks the socket directory and takes the single-instance lock on
 * PATH.lock.  Returns 0 with *fd (the caller owns it: the lock lasts as
 * long as that open file, across fork), 1 when another broker holds it
 * (exit quietly), -1 with err. */
int listener_lock(const char *path, int *fd, char *err, size_t errsize);
/* Binds (or adopts a socket-activated fd) and listens. 0 or -1 with err. */
int listener_start(struct broker *b, char *err, size_t errsize);
void listener_stop(struct broker *b);

#endif
