/* echo.c - the raw baseline: a minimal single-threaded epoll echo server on
 * a Unix socket, in its own thread.  Whatever a client writes comes back
 * as is: one read, one write per readiness, no framing, no parsing.  What
 * a write cannot take at once waits in a per-connection buffer (rare with
 * one small frame in flight per connection).
 *
 * By default it runs in a forked child, so that the baseline pays the same
 * cost of switching between processes as a client of the broker does (on
 * a VM that is most of a small round trip); --echo-thread puts it in a
 * thread of this process instead. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench.h"

struct echo_conn {
    struct echo_conn *prev, *next;   /* echo_server.conns */
    int fd;
    uint8_t *pend;               /* bytes a write could not take */
    size_t plen, pcap;
};

struct echo_server {
    int lfd, ep, stopfd;
    pthread_t th;
    pid_t child;                 /* process mode */
    struct echo_conn *conns;     /* the server thread's open connections */
    char path[256];
    uint8_t buf[65536];
};

static void echo_drop(struct echo_server *s, struct echo_conn *c)
{
    epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    free(c->pend);
    free(c);
}

static int keep(struct echo_conn *c, const uint8_t *p, size_t n)
{
    if (c->plen + n > c->pcap) {
        size_t cap = c->pcap ? c->pcap : 4096;
        while (cap < c->plen + n)
            cap *= 2;
        uint8_t *q = realloc(c->pend, cap);
        if (!q)
            return -1;
        c->pend = q;
        c->pcap = cap;
    }
    memcpy(c->pend + c->plen, p, n);
    c->plen += n;
    return 0;
}

static void want_out(struct echo_server *s, struct echo_conn *c, bool on)
{
    struct epoll_event ev = { .events = EPOLLIN | (on ? EPOLLOUT : 0), .data.ptr = c };
    epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
}

static void on_readable(struct echo_server *s, struct echo_conn *c)
{
    ssize_t n = read(c->fd, s->buf, sizeof s->buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        echo_drop(s, c);
        return;
    }
    if (c->plen > 0) {              /* keep the order behind what waits */
        if (keep(c, s->buf, (size_t)n) < 0)
            echo_drop(s, c);
        return;
    }
    ssize_t w = write(c->fd, s->buf, (size_t)n);
    if (w < 0) {
        if (errno != EAGAIN) {
            echo_drop(s, c);
            return;
        }
        w = 0;
    }
    if (w < n) {
        if (keep(c, s->buf + w, (size_t)(n - w)) < 0) {
            echo_drop(s, c);
            return;
        }
        want_out(s, c, true);
    }
}

static void on_writable(struct echo_server *s, struct echo_conn *c)
{
    ssize_t w = write(c->fd, c->pend, c->plen);
    if (w < 0) {
        if (errno != EAGAIN)
            echo_drop(s, c);
        return;
    }
    memmove(c->pend, c->pend + w, c->plen - (size_t)w);
    c->plen -= (size_t)w;
    if (c->plen == 0)
        want_out(s, c, false);
}

static void on_accept(struct echo_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct echo_conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        struct epoll_event ev = { .events = EPOLLIN, .data.ptr = c };
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = s->conns;
        if (s->conns)
            s->conns->prev = c;
        s->conns = c;
    }
}

static void *echo_main(void *arg)
{
    struct echo_server *s = arg;
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(s->ep, evs, 256, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->lfd) {
                on_accept(s);
            } else if (p == &s->stopfd) {
                return NULL;
            } else {
                struct echo_conn *c = p;
                if (evs[i].events & EPOLLOUT) {
                    on_writable(s, c);
                    continue;       /* c may be gone; EPOLLIN comes again */
                }
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                    on_readable(s, c);
            }
        }
    }
    return NULL;
}

int echo_start(const char *path, bool process, struct echo_server **out)
{
    struct echo_server *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->lfd = s->ep = s->stopfd = -1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path || strlen(path) >= sizeof s->path) {
        free(s);
        return -ENAMETOOLONG;
    }
    strcpy(sa.sun_path, path);
    strcpy(s->path, path);
    unlink(path);
    int e = 0;
    s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (s->lfd < 0 || bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) < 0 ||
        listen(s->lfd, 4096) < 0)
        goto fail;
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    s->stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->ep < 0 || s->stopfd < 0)
        goto fail;
    struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &s->lfd };
    if (epoll_ctl(s->ep, EPOLL_CTL_ADD, s->lfd, &ev) < 0)
        goto fail;
    ev.data.ptr = &s->stopfd;
    if (epoll_ctl(s->ep, EPOLL_CTL_ADD, s->stopfd, &ev) < 0)
        goto fail;
    if (process) {
        pid_t parent = getpid();
        s->child = fork();
        if (s->child < 0)
            goto fail;
        if (s->child == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(0);
            echo_main(s);
            _exit(0);
        }
        close(s->lfd);
        close(s->ep);
        s->lfd = s->ep = -1;
    } else if ((e = pthread_create(&s->th, NULL, echo_main, s)) != 0) {
        errno = e;
        goto fail;
    }
    *out = s;
    return 0;
fail:
    e = errno;
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->ep >= 0)
        close(s->ep);
    if (s->stopfd >= 0)
        close(s->stopfd);
    free(s);
    return -e;
}

void echo_stop(struct echo_server *s)
{
    if (!s)
        return;
    uint64_t one = 1;
    if (write(s->stopfd, &one, sizeof one) < 0)
        return;
    if (s->child > 0) {
        waitpid(s->child, NULL, 0);
    } else {
        pthread_join(s->th, NULL);
        for (struct echo_conn *c = s->conns, *next; c; c = next) {
            next = c->next;
            close(c->fd);
            free(c->pend);
            free(c);
        }
        close(s->lfd);
        close(s->ep);
    }
    close(s->stopfd);
    unlink(s->path);
    free(s);
}

pid_t echo_pid(const struct echo_server *s)
{
    return s && s->child > 0 ? s->child : 0;
}
