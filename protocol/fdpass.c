/* fdpass.c - see fdpass.h. */
#include "fdpass.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

ssize_t coord_send_with_fd(int sock, const void *p, size_t n, int fd, int flags)
{
    union { char b[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } cm;
    memset(&cm, 0, sizeof cm);
    struct iovec iov = { (void *)p, n };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                         .msg_controllen = sizeof cm.b };
    struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(h), &fd, sizeof fd);
    ssize_t w;
    do
        w = sendmsg(sock, &mh, flags | MSG_NOSIGNAL);
    while (w < 0 && errno == EINTR);
    return w;
}

bool coord_take_fds(const struct msghdr *mh, int *q, int *nq, int max)
{
    bool ok = !(mh->msg_flags & MSG_CTRUNC);
    for (struct cmsghdr *h = CMSG_FIRSTHDR(mh); h; h = CMSG_NXTHDR((struct msghdr *)mh, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        size_t k = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + i * sizeof fd, sizeof fd);
            if (*nq < max) {
                q[(*nq)++] = fd;
            } else {
                close(fd);
                ok = false;
            }
        }
    }
    return ok;
}
