/* fdpass.h - descriptors over the Unix socket (SCM_RIGHTS), in one place:
 * a write that carries one descriptor, and the descriptors a read brought.
 * Results by reference (PROTOCOL.md) attach a sealed memfd to the first
 * byte of a frame; libcoord, the test harness and coord-bench all send and
 * receive them through these two calls.  The broker's side is libuv's
 * (broker/loop/conn.c). */
#ifndef COORD_PROTO_FDPASS_H
#define COORD_PROTO_FDPASS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

/* One sendmsg of p[0..n) with fd attached; flags as sendmsg's
 * (MSG_NOSIGNAL is added).  Retries EINTR; otherwise sendmsg's result and
 * errno.  fd stays the caller's. */
ssize_t coord_send_with_fd(int sock, const void *p, size_t n, int fd, int flags);

/* The descriptors in the control data of a recvmsg (mh), appended to
 * q[*nq..max); those past max are closed.  False when one was closed or
 * the kernel cut the control data (MSG_CTRUNC): descriptors were lost. */
bool coord_take_fds(const struct msghdr *mh, int *q, int *nq, int max);

#endif
