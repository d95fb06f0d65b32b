/* connect.c - finding the broker's socket, connecting, starting coordd
 * when nobody answers (autostart), and the hello handshake. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "errors.h"
#include "internal.h"
#include "ready.h"
#include "spawn.h"

#define DEFAULT_IDLE_EXIT_S 60
#define DEFAULT_CONNECT_TIMEOUT_MS 2000
/* The broker closes a connection without hello after 5 s; a loaded broker
 * may take a while to answer, a frozen one never does. */
#define MIN_HELLO_TIMEOUT_MS 5000
#define MAX_BACKOFF_MS 50
/* Brokers one connect may start: one that exits at once (the lock beside
 * the socket still held by a broker that is dying) is started again. */
#define MAX_SPAWNS 8

/* ---- the last connect failure, per thread ---- */

/* Room for a broker's own reason (COORD_READY_LINE_MAX) and the socket's
 * path around it. */
#define CONNECT_ERR_MAX (COORD_READY_LINE_MAX + 256)
static __thread char connect_err[CONNECT_ERR_MAX];

const char *coord__connect_error(void)
{
    return connect_err[0] ? connect_err : "no error";
}

__attribute__((format(printf, 1, 2)))
static void cerr(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(connect_err, sizeof connect_err, fmt, ap);
    va_end(ap);
}

COORD_API void coord_options_init(coord_options *o)
{
    if (!o)
        return;
    memset(o, 0, sizeof *o);
    o->idle_exit_s = DEFAULT_IDLE_EXIT_S;
    o->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
}

/* ---- the instance id: 128 random bits, new in every process ---- */

static pthread_mutex_t instance_lock = PTHREAD_MUTEX_INITIALIZER;
static char instance_hex[33];
static pid_t instance_pid;

static void fill_random(uint8_t *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r > 0) {
            got += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        break;
    }
    if (got == n)
        return;
    /* no getrandom (old kernel, seccomp): not secret, only distinct */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^
                 ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&ts;
    for (size_t i = got; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;          /* xorshift64 */
        p[i] = (uint8_t)(x >> 24);
    }
}

static void instance_id(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    pthread_mutex_lock(&instance_lock);
    if (instance_pid != getpid()) {
        uint8_t raw[16];
        fill_random(raw, sizeof raw);
        for (size_t i = 0; i < sizeof raw; i++) {
            instance_hex[2 * i] = hex[raw[i] >> 4];
            instance_hex[2 * i + 1] = hex[raw[i] & 15];
        }
        instance_hex[32] = '\0';
        instance_pid = getpid();
    }
    memcpy(out, instance_hex, 33);
    pthread_mutex_unlock(&instance_lock);
}

/* ---- sockets ---- */

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* One connect attempt.  Returns 0 with *fd_out, or an errno value.  The
 * socket is non-blocking from the start: a blocking connect would sleep
 * inside the kernel while the broker's backlog is full (EAGAIN here). */
static int try_connect(const char *path, int *fd_out)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return errno;
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK ? EAGAIN : e;
    }
    *fd_out = fd;
    return 0;
}

/* The broker must run as our own user: anything else listening on our
 * path (a directory planted in /tmp by someone else) must not get our
 * requests. */
static int check_peer(int fd, const char *path)
{
    struct ucred cred;
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
        cerr("SO_PEERCRED on %s: %s", path, strerror(errno));
        return -1;
    }
    if (cred.uid != getuid()) {
        cerr("the broker at %s runs as uid %u, not as uid %u: refusing it",
             path, (unsigned)cred.uid, (unsigned)getuid());
        return -1;
    }
    return 0;
}

/* ---- autostart ---- */

/* Full path of the broker to run: name as is when it holds a slash, else
 * searched in $PATH (before fork, so the child only calls execv). */
static int resolve_broker(const char *name, char *out, size_t size)
{
    if (strchr(name, '/'))
        return snprintf(out, size, "%s", name) < (int)size ? 0 : -1;
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        int w = n ? snprintf(out, size, "%.*s/%s", (int)n, path, name)
                  : snprintf(out, size, "./%s", name);
        if (w > 0 && (size_t)w < size && access(out, X_OK) == 0) {
            struct stat st;
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode))
                return 0;
        }
        path += n;
        if (*path == ':')
            path++;
    }
    return -1;
}

/* Starts the broker detached (spawn.h: double fork + setsid).  Returns the
 * read end of its ready pipe, or -1 with connect_err set. */
static int autostart_broker(const char *broker, const char *sock, unsigned idle_s)
{
    char idle[16];
    snprintf(idle, sizeof idle, "%u", idle_s);
    const char *argv[] = {
        broker, "--foreground", "--socket", sock,
        "--idle-exit", idle, "--ready-fd", "3", NULL,
    };
    struct coord_spawn s = {
        .argv = argv, .detach = true, .stdin_null = true,
        .stdout_path = "/dev/null", .stderr_path = "/dev/null",
    };
    int rfd;
    if (coord_spawn(&s, &rfd) < 0) {
        cerr("cannot start the broker: %s", strerror(errno));
        return -1;
    }
    return rfd;
}

enum ready { READY_OK, READY_EOF, READY_TIMEOUT, READY_FAILED };

/* Reads the ready pipe (ready.h) until the deadline.  A broker that could
 * not be executed or cannot start: READY_FAILED with connect_err set. */
static enum ready await_ready(int rfd, int64_t deadline, const char *broker,
                              const char *path)
{
    int64_t left = deadline - coord__now_ms();
    if (left <= 0)
        return READY_TIMEOUT;
    int e = 0;
    char reason[COORD_READY_LINE_MAX];
    switch (coord_ready_await(rfd, left > INT_MAX ? INT_MAX : (int)left, &e,
                              reason, sizeof reason)) {
    case COORD_READY_OK:
        return READY_OK;
    case COORD_READY_EXEC:
        cerr("cannot start the broker %s: %s", broker, strerror(e));
        return READY_FAILED;
    case COORD_READY_ERROR:
        cerr("the broker for %s did not start: %s", path, reason);
        return READY_FAILED;
    case COORD_READY_TIMEOUT:
        return READY_TIMEOUT;
    case COORD_READY_EOF:
        break;
    }
    return READY_EOF;
}

/* Connects to path, autostarting the broker when allowed.  Returns the
 * socket or -1 (connect_err set). */
static int open_socket(const char *path, const coord_options *o)
{
    unsigned timeout = o->connect_timeout_ms ? o->connect_timeout_ms
                                             : DEFAULT_CONNECT_TIMEOUT_MS;
    int64_t deadline = coord__now_ms() + timeout;
    int backoff = 1;
    bool spawned = false;
    unsigned spawns = 0;
    int rfd = -1;
    char broker[PATH_MAX];
    int fd = -1;

    for (;;) {
        int err = try_connect(path, &fd);
        if (err == 0)
            break;
        if (err == ENOENT || err == ECONNREFUSED) {
            if (o->no_autostart) {
                cerr("no broker at %s: %s", path, strerror(err));
                goto fail;
            }
            if (!spawned && spawns < MAX_SPAWNS) {
                char dir[PATH_MAX], why[256];
                const char *name = o->broker_path;
                if (!name || !*name)
                    name = getenv("COORD_BROKER");
                if (!name || !*name)
                    name = "coordd";
                if (coord_dirname(path, dir, sizeof dir) < 0 ||
                    coord_prepare_private_dir(dir, why, sizeof why) < 0) {
                    cerr("cannot prepare the socket directory: %s", why);
                    goto fail;
                }
                if (resolve_broker(name, broker, sizeof broker) < 0) {
                    cerr("cannot start the broker: %s not found%s", name,
                         strchr(name, '/') ? "" : " in PATH");
                    goto fail;
                }
                spawned = true;
                spawns++;
                rfd = autostart_broker(broker, path, o->idle_exit_s ? o->idle_exit_s
                                                                : DEFAULT_IDLE_EXIT_S);
                if (rfd < 0)
                    goto fail;
                continue;
            }
            if (rfd >= 0) {
                enum ready r = await_ready(rfd, deadline, broker, path);
                close(rfd);
                rfd = -1;
                if (r == READY_FAILED)
                    goto fail;
                if (r == READY_OK)
                    continue;                 /* connect again at once */
                /* EOF: another broker won the race, or the lock beside the
                 * socket was still held by one that is dying: keep trying
                 * until the deadline, starting one again if nobody listens */
                if (r == READY_EOF)
                    spawned = false;
            }
        } else if (err != EAGAIN && err != EINTR) {
            cerr("cannot connect to %s: %s", path, strerror(err));
            goto fail;
        }
        int left = (int)(deadline - coord__now_ms());
        if (left <= 0) {
            char s[32];
            coord__seconds(s, sizeof s, timeout);
            if (spawned)
                cerr("the broker started for %s did not answer: timed out after %s",
                     path, s);
            else
                cerr("the broker at %s did not accept: timed out after %s (%s)", path,
                     s, strerror(err));
            goto fail;
        }
        sleep_ms(backoff < left ? backoff : left);
        backoff = backoff * 2 > MAX_BACKOFF_MS ? MAX_BACKOFF_MS : backoff * 2;
    }
    if (rfd >= 0)
        close(rfd);
    if (check_peer(fd, path) < 0) {
        close(fd);
        return -1;
    }
    /* blocking from now on: reads that must not block use MSG_DONTWAIT */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;

fail:
    if (rfd >= 0)
        close(rfd);
    return -1;
}

/* ---- hello ---- */

static int hello(coord_t *c, const coord_options *o, unsigned timeout_ms)
{
    char inst[33];
    instance_id(inst);
    const char *name = o->client_name;
    if (!name || !*name)
        name = program_invocation_short_name;
    coord_req_t *r = coord__req_new(COORD_OP_HELLO);
    if (!r) {
        cerr("out of memory");
        return COORD_ENOMEM;
    }
    coord_req_uint(r, "proto", COORD_PROTO_VERSION);
    coord_req_cstr(r, "client", name ? name : "");
    coord_req_uint(r, "pid", (uint64_t)getpid());
    coord_req_cstr(r, "instance", inst);
    coord_req_cstr(r, "scope", o->scope ? o->scope : "");
    coord_req_bool(r, "fds", true);            /* we take descriptors */

    coord_reply_t *rep = NULL;
    int rc = coord__call_timeout(c, r, &rep, (int)timeout_ms);
    coord_req_free(r);
    if (rc == COORD_ETIMEOUT) {
        char s[32];
        coord__seconds(s, sizeof s, timeout_ms);
        cerr("the broker did not answer hello: timed out after %s", s);
        return COORD_ECONNECT;
    }
    if (rc == COORD_ECLOSED || rc == COORD_EPROTOCOL) {
        cerr("%s: %s", coord_op_name(COORD_OP_HELLO), coord_error_message(c));
        return c->bye_code ? c->bye_code : COORD_ECONNECT;
    }
    if (rc < 0) {
        const char *wire = coord_code_name(rc);
        cerr("%s refused: %s: %s", coord_op_name(COORD_OP_HELLO),
             wire ? wire : "UNKNOWN", coord_error_message(c));
        return rc;
    }
    coord_map m = coord_reply_map(rep);
    uint64_t v;
    const char *s;
    size_t n;
    if (coord_map_uint(m, "conn", &v))
        c->conn_id = v;
    if (coord_map_uint(m, "epoch", &v))
        c->epoch = v;
    bool fds = false;
    c->broker_fds = coord_map_bool(m, "fds", &fds) && fds;
    if (coord_map_uint(m, "max_ref_bytes", &v))
        c->max_ref_bytes = v;
    if (coord_map_uint(m, "max_frame", &v) && coord__set_max_frame(c, v) < 0) {
        cerr("%s: %s", coord_op_name(COORD_OP_HELLO), coord_error_message(c));
        coord_reply_free(rep);
        return COORD_EPROTOCOL;
    }
    if (coord_map_str(m, "broker", &s, &n)) {
        if (n >= sizeof c->broker)
            n = sizeof c->broker - 1;
        memcpy(c->broker, s, n);
        c->broker[n] = '\0';
    }
    coord_reply_free(rep);
    return 0;
}

COORD_API int coord_connect(coord_t **out, const coord_options *opts)
{
    coord_options o;
    char path[COORD_SOCKET_PATH_MAX + 1];

    connect_err[0] = '\0';
    if (!out)
        return COORD_EINVAL;
    *out = NULL;
    if (opts)
        o = *opts;
    else
        coord_options_init(&o);

    if (o.socket_path) {
        size_t n = strlen(o.socket_path);
        if (n == 0 || n > COORD_SOCKET_PATH_MAX) {
            cerr("socket path must be 1..%d bytes, not %zu",
                 COORD_SOCKET_PATH_MAX, n);
            return COORD_EINVAL;
        }
        memcpy(path, o.socket_path, n + 1);
    } else if (coord_default_socket_path(path, sizeof path) < 0) {
        cerr("the default socket path is longer than %d bytes",
             COORD_SOCKET_PATH_MAX);
        return COORD_EINVAL;
    }

    int fd = open_socket(path, &o);
    if (fd < 0)
        return COORD_ECONNECT;
    coord_t *c = coord__alloc(fd);
    if (!c) {
        close(fd);
        cerr("out of memory");
        return COORD_ENOMEM;
    }
    coord__apply_options(c, &o);
    unsigned hello_ms = o.connect_timeout_ms ? o.connect_timeout_ms
                                             : DEFAULT_CONNECT_TIMEOUT_MS;
    if (hello_ms < MIN_HELLO_TIMEOUT_MS)
        hello_ms = MIN_HELLO_TIMEOUT_MS;
    int rc = hello(c, &o, hello_ms);
    if (rc < 0) {
        coord_close(c);
        return rc;
    }
    *out = c;
    return 0;
}
