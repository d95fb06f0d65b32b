/* redis.c - the Redis peer: a redis-server of our own on a Unix socket in
 * our temp dir (never the system one; no persistence, no TCP), and the
 * lock cycle Redis users run, spoken in RESP over the same wconn buffers
 * and the same blocking/epoll client code as the broker's:
 *
 *   acquire: SET name token NX PX 30000        -> +OK (or nil: busy)
 *   release: EVALSHA <compare-and-delete> 1 name token  -> :1
 *
 * The release script is the one Redis documents for a safe unlock (delete
 * only when the value is still our token), loaded once with SCRIPT LOAD.
 *
 * A second instance is the durable peer of durable-commits and
 * durable-records: appendonly yes, appendfsync always, its dir in our temp
 * dir (the same file system as the broker's data dir), so a SET is
 * answered only after the fdatasync of the turn that wrote it. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench.h"

static const char release_lua[] =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end";

static struct {
    pid_t pid;
} inst[2];                        /* 0: in memory, 1: appendfsync always */
static char redis_sha[48];

static void stop_instance(int k)
{
    if (inst[k].pid <= 0)
        return;
    kill(inst[k].pid, SIGTERM);
    waitpid(inst[k].pid, NULL, 0);
    inst[k].pid = 0;
}

static bool on_path(const char *prog, char *out, size_t size)
{
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        snprintf(out, size, "%.*s/%s", (int)n, path, prog);
        if (access(out, X_OK) == 0)
            return true;
        path += n + (end ? 1 : 0);
    }
    return false;
}

void rs_cmd(struct wconn *w, int argc, const char *const *argv)
{
    char head[32];
    int n = snprintf(head, sizeof head, "*%d\r\n", argc);
    coord_buf_append(&w->out, head, (size_t)n);
    for (int i = 0; i < argc; i++) {
        size_t len = strlen(argv[i]);
        n = snprintf(head, sizeof head, "$%zu\r\n", len);
        coord_buf_append(&w->out, head, (size_t)n);
        coord_buf_append(&w->out, argv[i], len);
        coord_buf_append(&w->out, "\r\n", 2);
    }
}

int rs_next(struct wconn *w, struct rs_reply *r)
{
    if (!w->in)
        return 0;                    /* nothing read yet */
    const uint8_t *p = w->in + w->ioff, *end = w->in + w->ilen;
    const uint8_t *nl = NULL;
    for (const uint8_t *q = p; q + 1 < end; q++)
        if (q[0] == '\r' && q[1] == '\n') {
            nl = q;
            break;
        }
    if (!nl)
        return 0;
    r->type = (char)p[0];
    r->ptr = (const char *)p + 1;
    r->len = (size_t)(nl - p - 1);
    r->num = strtoll((const char *)p + 1, NULL, 10);
    size_t used = (size_t)(nl + 2 - p);
    if (r->type == '$' && r->num >= 0) {
        if ((size_t)(end - (nl + 2)) < (size_t)r->num + 2)
            return 0;
        r->ptr = (const char *)nl + 2;
        r->len = (size_t)r->num;
        used += (size_t)r->num + 2;
    } else if (r->type != '+' && r->type != '-' && r->type != ':' && r->type != '$') {
        return -1;                   /* arrays and the rest: not used here */
    }
    w->ioff += used;
    return 1;
}

int rs_call(struct wconn *w, struct rs_reply *r)
{
    if (wc_flush(w) < 0)
        return -1;
    for (;;) {
        int k = rs_next(w, r);
        if (k != 0)
            return k > 0 ? 0 : -1;
        if (wc_fill(w) <= 0)
            return -1;
    }
}

void rs_acquire(struct wconn *w)
{
    const char *argv[] = { "SET", w->name, w->token, "NX", "PX", "30000" };
    rs_cmd(w, 6, argv);
}

void rs_release(struct wconn *w)
{
    const char *argv[] = { "EVALSHA", redis_sha, "1", w->name, w->token };
    rs_cmd(w, 5, argv);
}

bool redis_up(const struct bench *b)
{
    return inst[0].pid > 0 && b->redis_path[0];
}

bool redis_aof_up(const struct bench *b)
{
    return inst[1].pid > 0 && b->redis_aof_path[0];
}

/* Starts instance k (0 plain, 1 appendfsync always) listening on path,
 * its dir under our temp dir; loads the release script.  0, 1 when
 * redis-server is not installed, -1 on failure. */
static int start_instance(struct bench *b, int k, char *path, size_t pathsz)
{
    char prog[512];
    if (!on_path("redis-server", prog, sizeof prog))
        return 1;
    snprintf(path, pathsz, "%s/%s.sock", b->tmpdir, k ? "redis-aof" : "redis");
    char dir[128];
    snprintf(dir, sizeof dir, "%s/%s", b->tmpdir, k ? "redis-aof" : "redis");
    mkdir(dir, 0700);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        /* the durable peer answers a write only after its fdatasync of the
         * append-only file, one per event-loop turn (group commit) */
        execl(prog, prog, "--port", "0", "--unixsocket", path, "--unixsocketperm", "700",
              "--save", "", "--appendonly", k ? "yes" : "no", "--appendfsync",
              k ? "always" : "everysec", "--dir", dir, "--daemonize", "no", (char *)NULL);
        _exit(127);
    }
    inst[k].pid = pid;
    struct wconn w;
    wc_open(&w);
    int rc = -1;
    for (int i = 0; i < 500 && rc != 0; i++) {
        if (wc_connect(&w, path) == 0) {
            rc = 0;
            break;
        }
        sleep_ms(10);
    }
    if (rc == 0) {
        const char *argv[] = { "SCRIPT", "LOAD", release_lua };
        struct rs_reply r;
        rs_cmd(&w, 3, argv);
        rc = rs_call(&w, &r) == 0 && r.type == '$' && r.len < sizeof redis_sha ? 0 : -1;
        if (rc == 0)
            snprintf(redis_sha, sizeof redis_sha, "%.*s", (int)r.len, r.ptr);
    }
    wc_close(&w);
    if (rc != 0) {
        stop_instance(k);
        path[0] = '\0';
    }
    return rc;
}

int redis_start(struct bench *b)
{
    return start_instance(b, 0, b->redis_path, sizeof b->redis_path);
}

int redis_start_aof(struct bench *b)
{
    return start_instance(b, 1, b->redis_aof_path, sizeof b->redis_aof_path);
}

void redis_stop(struct bench *b)
{
    (void)b;
    stop_instance(0);
    stop_instance(1);
}

pid_t redis_server_pid(void)
{
    return inst[0].pid;
}

pid_t redis_aof_pid(void)
{
    return inst[1].pid;
}
