/* listener.c - the per-user socket: single-instance lock, stale socket
 * replacement, socket activation, and the accept-time checks (peer uid,
 * connection limit) made before a single byte is read. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include "broker.h"
#include "errors.h"
#include "listener.h"
#include "paths.h"

#define BACKLOG 4096

int listener_lock(struct broker *b, char *err, size_t errsize)
{
    const char *path = b->opt.socket_path;
    char dir[sizeof b->opt.socket_path];
    if (strlen(path) > COORD_SOCKET_PATH_MAX) {
        snprintf(err, errsize, "socket path is %zu bytes, the limit is %d: %s",
                 strlen(path), COORD_SOCKET_PATH_MAX, path);
        return -1;
    }
    if (coord_dirname(path, dir, sizeof dir) < 0 ||
        coord_prepare_private_dir(dir, err, errsize) < 0)
        return -1;
    char lockpath[sizeof b->opt.socket_path + 8];
    snprintf(lockpath, sizeof lockpath, "%s.lock", path);
    b->lock_fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (b->lock_fd < 0) {
        snprintf(err, errsize, "cannot open %s: %s", lockpath, strerror(errno));
        return -1;
    }
    if (flock(b->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK)
            return 1;          /* a live broker owns this socket */
        snprintf(err, errsize, "cannot lock %s: %s", lockpath, strerror(errno));
        return -1;
    }
    return 0;
}

static void free_rejected(uv_handle_t *h)
{
    free(h->data);
}

static void reject(struct conn *c)
{
    uv_close((uv_handle_t *)&c->pipe, free_rejected);
}

static void on_connection(uv_stream_t *server, int status)
{
    struct broker *b = server->data;
    if (status < 0) {
        log_event(LOG_WARN, "accept.error", "error=\"%s\"", uv_strerror(status));
        return;
    }
    struct conn *c = calloc(1, sizeof *c);
    if (!c)
        return;             /* the peer stays in the backlog; retried later */
    uv_pipe_init(b->loop, &c->pipe, 0);
    c->pipe.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->pipe) < 0) {
        reject(c);
        return;
    }
    uv_os_fd_t fd;
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (uv_fileno((uv_handle_t *)&c->pipe, &fd) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        reject(c);
        return;
    }
    if (cred.uid != getuid()) {
        b->stats.conns_rejected_peer++;
        log_event(LOG_WARN, "accept.rejected_peer", "uid=%u pid=%d",
                  (unsigned)cred.uid, (int)cred.pid);
        reject(c);
        return;
    }
    if (b->nconns >= b->opt.max_conns || b->shutting_down) {
        coord_buf out;
        coord_buf_init(&out);
        if (b->shutting_down)
            coord_enc_error(&out, 0, COORD_ESHUTTING_DOWN, "broker is shutting down");
        else
            coord_enc_error(&out, 0, COORD_ELIMIT, "too many connections");
        /* a fresh socket buffer takes one small frame without blocking */
        ssize_t w = send(fd, out.data, out.len, MSG_DONTWAIT | MSG_NOSIGNAL);
        (void)w;
        coord_buf_free(&out);
        if (!b->shutting_down) {
            b->stats.conns_rejected_limit++;
            log_event(LOG_WARN, "accept.conn_limit", "pid=%d limit=%u",
                      (int)cred.pid, b->opt.max_conns);
        }
        reject(c);
        return;
    }
    c->peer_pid = cred.pid;
    conn_accepted(b, c);
}

int listener_start(struct broker *b, char *err, size_t errsize)
{
    int rc;
    uv_pipe_init(b->loop, &b->listener, 0);
    b->listener.data = b;
    const char *lp = getenv("LISTEN_PID"), *lf = getenv("LISTEN_FDS");
    if (lp && lf && (pid_t)atol(lp) == getpid() && atoi(lf) >= 1) {
        /* systemd socket activation: the socket is fd 3 */
        rc = uv_pipe_open(&b->listener, 3);
        unsetenv("LISTEN_PID");
        unsetenv("LISTEN_FDS");
        unsetenv("LISTEN_FDNAMES");
    } else {
        unlink(b->opt.socket_path);     /* stale: we hold the lock */
        mode_t old = umask(077);
        rc = uv_pipe_bind(&b->listener, b->opt.socket_path);
        umask(old);
    }
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&b->listener, BACKLOG, on_connection);
    if (rc < 0) {
        snprintf(err, errsize, "cannot listen on %s: %s", b->opt.socket_path,
                 uv_strerror(rc));
        uv_close((uv_handle_t *)&b->listener, NULL);
        return -1;
    }
    b->listening = true;
    return 0;
}

void listener_stop(struct broker *b)
{
    if (!b->listening)
        return;
    b->listening = false;
    /* closing the pipe server unlinks the socket path; the flock makes sure
     * it is ours to unlink */
    uv_close((uv_handle_t *)&b->listener, NULL);
}
