/* listener.c - the per-user socket: single-instance lock, stale socket
 * replacement, socket activation, and the accept-time checks (peer uid,
 * connection limit, fd limit) made before a single byte is read.
 *
 * The broker accepts by itself (a uv_poll on the listening socket) rather
 * than through uv_listen: at the fd limit libuv 1.44 drains the backlog
 * into a reserved fd and closes the peers without telling anyone, so those
 * refusals could be neither counted nor logged.  Here the reserve is ours:
 * at EMFILE/ENFILE it is closed, one peer is accepted, told LIMIT, closed,
 * counted (stats.rejected_fd_limit) and logged at most once a second. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "broker.h"
#include "errors.h"
#include "listener.h"
#include "paths.h"

#define BACKLOG 4096
/* Accepts per wake-up of the loop, so a flood of connections cannot keep
 * the loop from serving the clients it has. */
#define ACCEPT_BATCH 64
/* Without a reserve fd nothing can be accepted: look again this much later
 * (the peers wait in the backlog meanwhile). */
#define ACCEPT_RETRY_MS 100
int listener_lock(const char *path, int *fd, char *err, size_t errsize)
{
    char dir[COORD_SOCKET_PATH_MAX + 1];
    if (strlen(path) > COORD_SOCKET_PATH_MAX) {
        snprintf(err, errsize, "socket path is %zu bytes, the limit is %d: %s",
                 strlen(path), COORD_SOCKET_PATH_MAX, path);
        return -1;
    }
    if (coord_dirname(path, dir, sizeof dir) < 0 ||
        coord_prepare_private_dir(dir, err, errsize) < 0)
        return -1;
    char lockpath[COORD_SOCKET_PATH_MAX + 8];
    snprintf(lockpath, sizeof lockpath, "%s.lock", path);
    int f = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f < 0) {
        snprintf(err, errsize, "cannot open %s: %s", lockpath, strerror(errno));
        return -1;
    }
    if (flock(f, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        close(f);
        if (e == EWOULDBLOCK)
            return 1;          /* a live broker owns this socket */
        snprintf(err, errsize, "cannot lock %s: %s", lockpath, strerror(e));
        return -1;
    }
    *fd = f;
    return 0;
}

/* Tells a refused peer why, then closes it.  A fresh socket buffer takes
 * one small frame without blocking. */
static void refuse(int fd, int code, const char *msg)
{
    coord_buf out;
    coord_buf_init(&out);
    coord_enc_error(&out, 0, code, msg);
    ssize_t w = send(fd, out.data, out.len, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    coord_buf_free(&out);
    close(fd);
}

static void free_conn(uv_handle_t *h)
{
    free(h->data);
}

static void accepted(struct broker *b, int fd)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        close(fd);
        return;
    }
    if (cred.uid != getuid()) {
        b->stats.conns_rejected_peer++;
        log_event(LOG_WARN, "accept.rejected_peer", "uid=%u pid=%d",
                  (unsigned)cred.uid, (int)cred.pid);
        close(fd);
        return;
    }
    if (b->shutting_down) {
        refuse(fd, COORD_ESHUTTING_DOWN, "broker is shutting down");
        return;
    }
    if (b->nconns >= b->opt.max_conns) {
        b->stats.conns_rejected_limit++;
        log_event(LOG_WARN, "accept.conn_limit", "pid=%d limit=%u",
                  (int)cred.pid, b->opt.max_conns);
        refuse(fd, COORD_ELIMIT, "too many connections");
        return;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c) {
        refuse(fd, COORD_ELIMIT, "out of memory");
        return;
    }
    /* ipc: libuv reads with recvmsg and keeps the descriptors a client
     * passes (results by reference, conn.c) */
    uv_pipe_init(b->loop, &c->pipe, 1);
    c->pipe.data = c;
    if (uv_pipe_open(&c->pipe, fd) < 0) {
        close(fd);
        uv_close((uv_handle_t *)&c->pipe, free_conn);
        return;
    }
    c->peer_pid = cred.pid;
    conn_accepted(b, c);
}

static void on_accept_retry(uv_timer_t *t);

/* accept failed with EMFILE/ENFILE: refuse one peer through the reserve
 * fd.  Returns false when accepting must pause (no reserve to spend). */
static bool refuse_at_fd_limit(struct broker *b, int err)
{
    bool ok = false;
    if (b->reserve_fd >= 0) {
        close(b->reserve_fd);
        b->reserve_fd = -1;
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            b->stats.conns_rejected_fd++;
            refuse(fd, COORD_ELIMIT, "broker is out of file descriptors");
        }
        b->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ok = fd >= 0 && b->reserve_fd >= 0;
        if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            ok = b->reserve_fd >= 0;      /* the peer went away: fine */
    }
    uint64_t suppressed;
    if (log_rate_pass(&b->fd_limit_log, 1, &suppressed))
        log_event(LOG_WARN, "accept.fd_limit",
                  "error=\"%s\" refused=%llu suppressed=%llu connections=%u",
                  strerror(err), (unsigned long long)b->stats.conns_rejected_fd,
                  (unsigned long long)suppressed, b->nconns);
    if (!ok) {
        uv_poll_stop(&b->listen_poll);
        uv_timer_start(&b->accept_retry, on_accept_retry, ACCEPT_RETRY_MS, 0);
    }
    return ok;
}

static void on_listen_readable(uv_poll_t *h, int status, int events)
{
    struct broker *b = h->data;
    (void)events;
    if (status < 0) {
        log_event(LOG_WARN, "accept.error", "error=\"%s\"", uv_strerror(status));
        return;
    }
    for (int i = 0; i < ACCEPT_BATCH && b->listening; i++) {
        int fd = accept4(b->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            accepted(b, fd);
            continue;
        }
        int err = errno;
        if (err == EINTR || err == ECONNABORTED)
            continue;
        if (err == EMFILE || err == ENFILE) {
            if (refuse_at_fd_limit(b, err))
                continue;
            return;
        }
        if (err != EAGAIN && err != EWOULDBLOCK)
            log_event(LOG_WARN, "accept.error", "error=\"%s\"", strerror(err));
        return;
    }
}

static void on_accept_retry(uv_timer_t *t)
{
    struct broker *b = t->data;
    if (!b->listening)
        return;
    if (b->reserve_fd < 0)
        b->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    uv_poll_start(&b->listen_poll, UV_READABLE, on_listen_readable);
}

/* A bound, listening socket at path (inside a 0700 dir, under umask 077).
 * The fd, or -1 with err. */
static int bind_socket(const char *path, char *err, size_t errsize)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path) {
        snprintf(err, errsize, "socket path too long: %s", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errsize, "cannot create a socket: %s", strerror(errno));
        return -1;
    }
    unlink(path);                   /* stale: we hold the lock */
    mode_t old = umask(077);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof sa);
    umask(old);
    if (rc < 0 || listen(fd, BACKLOG) < 0) {
        snprintf(err, errsize, "cannot listen on %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int listener_start(struct broker *b, char *err, size_t errsize)
{
    const char *lp = getenv("LISTEN_PID"), *lf = getenv("LISTEN_FDS");
    b->bound_socket = false;
    if (lp && lf && (pid_t)atol(lp) == getpid() && atoi(lf) >= 1) {
        /* systemd socket activation: the socket is fd 3 */
        b->listen_fd = 3;
        fcntl(3, F_SETFD, FD_CLOEXEC);
        fcntl(3, F_SETFL, fcntl(3, F_GETFL) | O_NONBLOCK);
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
    } else {
        b->listen_fd = bind_socket(b->opt.socket_path, err, errsize);
        if (b->listen_fd < 0)
            return -1;
        b->bound_socket = true;
    }
    b->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int rc = uv_poll_init(b->loop, &b->listen_poll, b->listen_fd);
    if (rc == 0)
        rc = uv_poll_start(&b->listen_poll, UV_READABLE, on_listen_readable);
    if (rc < 0) {
        snprintf(err, errsize, "cannot listen on %s: %s", b->opt.socket_path,
                 uv_strerror(rc));
        close(b->listen_fd);
        return -1;
    }
    b->listen_poll.data = b;
    uv_timer_init(b->loop, &b->accept_retry);
    b->accept_retry.data = b;
    b->listening = true;
    return 0;
}

static void on_listen_closed(uv_handle_t *h)
{
    struct broker *b = h->data;
    close(b->listen_fd);
    b->listen_fd = -1;
}

void listener_stop(struct broker *b)
{
    if (!b->listening)
        return;
    b->listening = false;
    /* the flock makes sure the path is ours to unlink */
    if (b->bound_socket)
        unlink(b->opt.socket_path);
    uv_timer_stop(&b->accept_retry);
    uv_close((uv_handle_t *)&b->accept_retry, NULL);
    uv_close((uv_handle_t *)&b->listen_poll, on_listen_closed);
    if (b->reserve_fd >= 0)
        close(b->reserve_fd);
    b->reserve_fd = -1;
}
