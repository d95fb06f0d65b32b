/* harness.c - see harness.h: the case runner, brokers, and rcl. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/ioctl.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fdpass.h"
#include "paths.h"
#include "ready.h"
#include "spawn.h"
#include "harness.h"
#include "proc.h"


uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void kill_tracked(void);
static void forget_names(void);

int run_tests(int argc, char **argv, const struct test_case *tests)
{
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    int ran = 0, failed = 0;
    for (const struct test_case *t = tests; t->name; t++) {
        if (argc > 1 && strcmp(argv[1], t->name) != 0)
            continue;
        int before = check_failures;
        uint64_t t0 = now_ms();
        t->fn();
        kill_tracked();
        forget_names();
        int bad = check_failures != before;
        fprintf(stderr, "%s %s (%llu ms)\n", bad ? "FAIL" : "ok  ", t->name,
                (unsigned long long)(now_ms() - t0));
        ran++;
        failed += bad;
    }
    fprintf(stderr, "%d tests, %d failed\n", ran, failed);
    return ran == 0 || failed ? 1 : 0;
}

const char *broker_binary(void)
{
    const char *b = getenv("COORD_BROKER");
    return b ? b : "coordd";
}

void broker_paths(struct broker_proc *bp)
{
    memset(bp, 0, sizeof *bp);
    bp->pid = -1;
    const char *tmp = getenv("TMPDIR");
    snprintf(bp->dir, sizeof bp->dir, "%s/coord-test-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(bp->dir)) {
        perror("mkdtemp");
        exit(2);
    }
    snprintf(bp->sock, sizeof bp->sock, "%s/run/broker.sock", bp->dir);
    snprintf(bp->data, sizeof bp->data, "%s/data", bp->dir);
    snprintf(bp->log, sizeof bp->log, "%s/broker.log", bp->dir);
}

/* brokers started by the current test, killed after it whatever happened */
static struct broker_proc *tracked[32];

static void track(struct broker_proc *bp)
{
    for (int i = 0; i < 32; i++)
        if (tracked[i] == bp)
            return;
    for (int i = 0; i < 32; i++)
        if (!tracked[i]) {
            tracked[i] = bp;
            return;
        }
}

static void kill_tracked(void)
{
    for (int i = 0; i < 32; i++) {
        if (tracked[i] && tracked[i]->pid > 0)
            broker_cleanup(tracked[i]);
        tracked[i] = NULL;
    }
}

pid_t broker_spawn(struct broker_proc *bp, const char *const *extra, bool foreground,
                   long nofile, int *ready_fd)
{
    if (!bp->dir[0])
        broker_paths(bp);
    const char *args[64];
    int n = 0;
    char vglog[400];
    if (foreground && getenv("COORD_VALGRIND")) {
        /* the broker under memcheck: errors make it exit 99 */
        snprintf(vglog, sizeof vglog, "--log-file=%s/valgrind.%%p.log", bp->dir);
        args[n++] = "valgrind";
        args[n++] = "--error-exitcode=99";
        args[n++] = "--leak-check=full";
        args[n++] = "--errors-for-leak-kinds=definite";
        args[n++] = vglog;
    }
    args[n++] = broker_binary();
    if (foreground)
        args[n++] = "--foreground";
    args[n++] = "--socket";
    args[n++] = bp->sock;
    args[n++] = "--data-dir";
    args[n++] = bp->data;
    args[n++] = "--ready-fd";
    args[n++] = "3";
    bool level = false;
    for (int i = 0; extra && extra[i] && n < 60; i++) {
        level = level || strcmp(extra[i], "--log-level") == 0;
        args[n++] = extra[i];
    }
    if (!level) {
        args[n++] = "--log-level";
        args[n++] = "debug";
    }
    args[n] = NULL;
    /* a test that dies or fails early must not leave brokers behind */
    struct coord_spawn s = {
        .argv = args, .search_path = true, .die_with_parent = true,
        .stderr_path = bp->log, .nofile = nofile,
    };
    pid_t pid = coord_spawn(&s, ready_fd);
    if (pid < 0)
        return -1;
    bp->names_plain = false;
    for (int i = 0; extra && extra[i] && extra[i + 1]; i++)
        if (strcmp(extra[i], "--log-names") == 0 && strcmp(extra[i + 1], "plain") == 0)
            bp->names_plain = true;
    return pid;
}

/* ---- names sent, and the logs that must not hold them ---- */

#define MAX_NAMES 4096
static char *names[MAX_NAMES];
static size_t nnames;

static void note_names(const uint8_t *body, size_t len)
{
    static const char *const keys[] = { "name", "key", "channel", "workstream", "op_id",
                                        "scope", "client", "prefix", NULL };
    coord_msg msg;
    if (coord_msg_init(&msg) != 0)
        return;
    if (coord_msg_parse(&msg, body, len) == COORD_FRAME_OK) {
        for (int k = 0; keys[k]; k++) {
            const msgpack_object *v = coord_map_find(msg.map, keys[k]);
            if (!v || (v->type != MSGPACK_OBJECT_STR && v->type != MSGPACK_OBJECT_BIN))
                continue;
            const char *p = v->via.str.ptr;
            size_t n = v->via.str.size;
            bool printable = n >= 4;
            for (size_t i = 0; printable && i < n; i++)
                printable = p[i] > 0x20 && p[i] < 0x7f && p[i] != '"';
            bool known = false;
            for (size_t i = 0; printable && i < nnames && !known; i++)
                known = strlen(names[i]) == n && memcmp(names[i], p, n) == 0;
            if (printable && !known && nnames < MAX_NAMES)
                names[nnames++] = strndup(p, n);
        }
    }
    coord_msg_destroy(&msg);
}

static void forget_names(void)
{
    while (nnames)
        free(names[--nnames]);
}

/* A name shows in a log line only as a value: after '=' or inside quotes,
 * up to a space, a quote or the end of the line. */
static const char *leaked(const char *log, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(log, name); p; p = strstr(p + 1, name)) {
        char before = p > log ? p[-1] : '\n', after = p[n];
        if ((before == '=' || before == '"') &&
            (after == ' ' || after == '"' || after == '\n' || after == '\0'))
            return p;
    }
    return NULL;
}

static void check_log(const struct broker_proc *bp)
{
    if (bp->names_plain || !nnames)
        return;
    size_t len = 0;
    char *log = slurp(bp->log, &len);
    for (size_t i = 0; log && i < nnames; i++) {
        if (leaked(log, names[i])) {
            check_failures++;
            fprintf(stderr, "%s: the broker log holds the name \"%s\" (logs carry names "
                    "only as keyed hashes)\n", bp->log, names[i]);
        }
    }
    free(log);
}

bool broker_await_ready(int ready_fd, int timeout_ms)
{
    char reason[COORD_READY_LINE_MAX];
    enum coord_ready r = coord_ready_await(ready_fd, timeout_ms, NULL, reason, sizeof reason);
    close(ready_fd);
    if (r == COORD_READY_ERROR)
        fprintf(stderr, "the broker did not start: %s\n", reason);
    return r == COORD_READY_OK;
}

int broker_start(struct broker_proc *bp, const char *const *extra)
{
    int ready;
    pid_t pid = broker_spawn(bp, extra, true, 0, &ready);
    if (pid < 0)
        return -1;
    bp->pid = pid;
    track(bp);
    uint64_t t0 = now_ms();
    if (!broker_await_ready(ready, 30000)) {
        /* say why: the broker's own log is the best witness */
        fprintf(stderr, "broker did not get ready after %llu ms; log %s:\n",
                (unsigned long long)(now_ms() - t0), bp->log);
        FILE *f = fopen(bp->log, "r");
        char buf[512];
        while (f && fgets(buf, sizeof buf, f))
            fprintf(stderr, "  | %s", buf);
        if (f)
            fclose(f);
        return -1;
    }
    return 0;
}

int broker_kill(struct broker_proc *bp, int sig)
{
    if (bp->pid <= 0)
        return -1;
    kill(bp->pid, sig);
    int st = wait_pid_timeout(bp->pid, 10000);
    if (st == -1) {
        kill(bp->pid, SIGKILL);
        waitpid(bp->pid, &st, 0);
        st = -1;
    }
    bp->pid = -1;
    return st;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

void broker_cleanup(struct broker_proc *bp)
{
    if (bp->pid > 0)
        broker_kill(bp, SIGKILL);
    if (bp->dir[0])
        check_log(bp);
    if (bp->dir[0] && !getenv("COORD_TEST_KEEP"))
        nftw(bp->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    bp->dir[0] = '\0';
}


long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

void start_or_exit(struct broker_proc *bp, const char *const *args)
{
    memset(bp, 0, sizeof *bp);
    if (broker_start(bp, args) != 0)
        exit(2);
}

void stop_and_clean(struct broker_proc *bp)
{
    broker_kill(bp, SIGTERM);
    broker_cleanup(bp);
}

struct rcl *connect_or_exit(const struct broker_proc *bp, const char *scope)
{
    struct rcl *c = rcl_open(bp->sock, scope);
    if (!c) {
        fprintf(stderr, "cannot connect to %s\n", bp->sock);
        exit(2);
    }
    return c;
}

/* ---- rcl ---- */

/* One received frame, queued. */
struct frame_node {
    struct frame_node *next;
    int fd;                     /* the descriptor that came with it, -1: none */
    uint32_t len;
    uint8_t body[];
};

struct rcl {
    int fd;
    bool closed;                /* EOF or error seen on fd */
    coord_buf out;              /* the request being encoded */
    coord_enc enc;
    coord_buf in;               /* bytes read, not yet a whole frame */
    struct frame_node *head, *tail;
    struct frame_node *taken;   /* the frame last handed out (m points in) */
    int fdq[64];                /* descriptors received, not yet given to a frame */
    int nfdq;
};

struct rcl *rcl_connect(const char *sock)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return NULL;
    }
    struct rcl *c = calloc(1, sizeof *c);
    if (!c)
        exit(2);
    c->fd = fd;
    coord_buf_init(&c->out);
    coord_buf_init(&c->in);
    return c;
}

int rcl_hello(struct rcl *c, const char *scope)
{
    return rcl_hello_fds(c, scope, false);
}

struct rcl *rcl_open(const char *sock, const char *scope)
{
    struct rcl *c = rcl_connect(sock);
    if (c && rcl_hello(c, scope) != 0) {
        rcl_close(c);
        return NULL;
    }
    return c;
}

static void drop_queue(struct rcl *c)
{
    while (c->head) {
        struct frame_node *n = c->head->next;
        if (c->head->fd >= 0)
            close(c->head->fd);
        free(c->head);
        c->head = n;
    }
    c->tail = NULL;
}

void rcl_close(struct rcl *c)
{
    if (!c)
        return;
    close(c->fd);
    drop_queue(c);
    if (c->taken && c->taken->fd >= 0)
        close(c->taken->fd);
    free(c->taken);
    while (c->nfdq > 0)
        close(c->fdq[--c->nfdq]);
    coord_buf_free(&c->out);
    coord_buf_free(&c->in);
    free(c);
}

int rcl_fd(const struct rcl *c) { return c->fd; }

coord_enc *rcl_begin(struct rcl *c, const char *op, uint64_t rid)
{
    c->out.len = 0;
    coord_enc_begin(&c->enc, &c->out);
    coord_enc_kv_cstr(&c->enc, "op", op);
    coord_enc_kv_uint(&c->enc, "rid", rid);
    return &c->enc;
}

int rcl_send(struct rcl *c)
{
    if (coord_enc_end(&c->enc) == 0)
        return -1;
    if (c->out.len > COORD_FRAME_HEADER)
        note_names(c->out.data + COORD_FRAME_HEADER, c->out.len - COORD_FRAME_HEADER);
    return rcl_write(c, c->out.data, c->out.len);
}

int rcl_request(struct rcl *c, const char *op, uint64_t rid)
{
    rcl_begin(c, op, rid);
    return rcl_send(c);
}

int rcl_send_fd(struct rcl *c, int fd)
{
    if (coord_enc_end(&c->enc) == 0)
        return -1;
    return rcl_write_fd(c, c->out.data, c->out.len, fd);
}

int rcl_write_fd(struct rcl *c, const void *p, size_t n, int fd)
{
    if (n == 0)
        return -1;
    if (coord_send_with_fd(c->fd, p, 1, fd, 0) != 1)
        return -1;
    return rcl_write(c, (const uint8_t *)p + 1, n - 1);
}

int rcl_take_fd(struct rcl *c)
{
    if (!c->taken)
        return -1;
    int fd = c->taken->fd;
    c->taken->fd = -1;
    return fd;
}

bool fd_reads_as(int fd, const uint8_t *want, size_t n)
{
    uint8_t *got = malloc(n + 1);
    if (!got)
        return false;
    size_t off = 0;
    for (;;) {
        ssize_t r = read(fd, got + off, n + 1 - off);
        if (r <= 0)
            break;
        off += (size_t)r;
        if (off == n + 1)
            break;
    }
    bool ok = off == n && memcmp(got, want, n) == 0;
    free(got);
    return ok;
}

size_t rcl_fds_queued(const struct rcl *c)
{
    size_t n = (size_t)c->nfdq;
    for (const struct frame_node *f = c->head; f; f = f->next)
        n += f->fd >= 0;
    return n;
}

int rcl_hello_fds(struct rcl *c, const char *scope, bool fds)
{
    const uint64_t rid = 1;
    if (!c)
        return -1;
    coord_enc *e = rcl_begin(c, "hello", rid);
    coord_enc_kv_uint(e, "proto", 1);
    coord_enc_kv_cstr(e, "client", "harness");
    coord_enc_kv_uint(e, "pid", (uint64_t)getpid());
    if (scope)
        coord_enc_kv_cstr(e, "scope", scope);
    if (fds)
        coord_enc_kv_bool(e, "fds", true);
    if (rcl_send(c) != 0)
        return -1;
    coord_msg m;
    coord_msg_init(&m);
    int rc = rcl_reply(c, rid, 5000, &m);
    if (rc == 0 && !msg_ok(&m))
        rc = -1;
    coord_msg_destroy(&m);
    return rc;
}

int rcl_write(struct rcl *c, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(c->fd, b, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Moves the whole frames of c->in to the queue. */
static void split_frames(struct rcl *c)
{
    size_t off = 0;
    while (c->in.len - off >= 4) {
        uint32_t n = coord_be32(c->in.data + off);
        if (c->in.len - off - 4 < n)
            break;
        struct frame_node *f = malloc(sizeof *f + n);
        if (!f)
            exit(2);
        f->next = NULL;
        f->len = n;
        memcpy(f->body, c->in.data + off + 4, n);
        /* a frame that declares a descriptor (its key result_fd, a fixstr
         * of 9 bytes) takes the oldest received */
        f->fd = -1;
        if (memmem(f->body, n, "\xa9result_fd", 10) && c->nfdq > 0) {
            f->fd = c->fdq[0];
            memmove(c->fdq, c->fdq + 1, (size_t)(c->nfdq - 1) * sizeof c->fdq[0]);
            c->nfdq--;
        }
        if (c->tail)
            c->tail->next = f;
        else
            c->head = f;
        c->tail = f;
        off += 4 + (size_t)n;
    }
    coord_buf_consume(&c->in, off);
}

static int count_queued(const struct rcl *c)
{
    int n = 0;
    for (const struct frame_node *f = c->head; f; f = f->next)
        n++;
    return n;
}

int rcl_pump(struct rcl *c, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    while (!c->closed) {
        uint64_t now = now_ms();
        struct pollfd pf = { c->fd, POLLIN, 0 };
        int pr = poll(&pf, 1, now < deadline ? (int)(deadline - now) : 0);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        if (coord_buf_reserve(&c->in, 65536) != 0)
            exit(2);
        struct iovec iov = { c->in.data + c->in.len, 65536 };
        union { char buf[CMSG_SPACE(8 * sizeof(int))]; struct cmsghdr align; } cm;
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                             .msg_controllen = sizeof cm.buf };
        ssize_t r = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0)
            coord_take_fds(&mh, c->fdq, &c->nfdq, (int)(sizeof c->fdq / sizeof c->fdq[0]));
        if (r <= 0) {
            c->closed = true;
            break;
        }
        c->in.len += (size_t)r;
        split_frames(c);
        deadline = 0;          /* then only what is there already */
    }
    return c->closed ? -1 : count_queued(c);
}

typedef bool (*frame_pred)(coord_msg *m, const void *arg);

/* Hands out the first queued frame that parses and matches (any frame
 * when pred is NULL), waiting up to timeout_ms for it. */
static int take(struct rcl *c, frame_pred pred, const void *arg, int timeout_ms,
                coord_msg *m)
{
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    bool last_look = false;
    for (;;) {
        struct frame_node **pp = &c->head, *prev = NULL;
        while (*pp) {
            struct frame_node *f = *pp;
            bool parsed = coord_msg_parse(m, f->body, f->len) == COORD_FRAME_OK;
            if (!pred || (parsed && pred(m, arg))) {
                *pp = f->next;
                if (c->tail == f)
                    c->tail = prev;
                if (c->taken && c->taken->fd >= 0)
                    close(c->taken->fd);
                if (c->taken && c->taken->fd >= 0)
                    close(c->taken->fd);   /* not taken by the test: closed */
                free(c->taken);
                c->taken = f;           /* m points into f->body */
                return parsed ? 0 : -3;
            }
            prev = f;
            pp = &f->next;
        }
        if (c->closed)
            return -1;
        uint64_t now = now_ms();
        if (now >= deadline) {
            if (last_look)
                return -2;
            last_look = true;       /* what arrived by the deadline counts */
            rcl_pump(c, 0);
            continue;
        }
        rcl_pump(c, (int)(deadline - now));
    }
}

static bool is_rid(coord_msg *m, const void *arg)
{
    const msgpack_object *v = coord_map_find(m->map, "rid");
    return coord_map_find(m->map, "ev") == NULL && v &&
           v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 == *(const uint64_t *)arg;
}

static bool is_event(coord_msg *m, const void *arg)
{
    const msgpack_object *v = coord_map_find(m->map, "ev");
    const char *name = arg;
    return v && v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(name) &&
           memcmp(v->via.str.ptr, name, v->via.str.size) == 0;
}

int rcl_next(struct rcl *c, int timeout_ms, coord_msg *m)
{
    return take(c, NULL, NULL, timeout_ms, m);
}

int rcl_reply(struct rcl *c, uint64_t rid, int timeout_ms, coord_msg *m)
{
    return take(c, is_rid, &rid, timeout_ms, m);
}

int rcl_event(struct rcl *c, const char *ev, int timeout_ms, coord_msg *m)
{
    return take(c, is_event, ev, timeout_ms, m);
}

size_t rcl_last_len(const struct rcl *c)
{
    return c->taken ? c->taken->len : 0;
}

size_t rcl_queued(struct rcl *c)
{
    rcl_pump(c, 0);
    return (size_t)count_queued(c);
}

size_t rcl_unread(const struct rcl *c)
{
    int n = 0;
    if (ioctl(c->fd, FIONREAD, &n) < 0)
        return 0;
    return (size_t)n;
}

bool rcl_wait_eof(struct rcl *c, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
        drop_queue(c);
        if (c->closed)
            return true;
        uint64_t now = now_ms();
        if (now >= deadline)
            return false;
        rcl_pump(c, (int)(deadline - now));
    }
}

int rcl_acquire(struct rcl *c, uint64_t rid, const void *name, size_t nlen,
                const char *opts, uint64_t timeout_ms, uint64_t lease_ms)
{
    coord_enc *e = rcl_begin(c, "lock.acquire", rid);
    coord_enc_kv_str(e, "name", name, nlen);
    if (opts && strstr(opts, "shared"))
        coord_enc_kv_cstr(e, "mode", "shared");
    if (opts && strstr(opts, "if_available"))
        coord_enc_kv_bool(e, "if_available", true);
    if (opts && strstr(opts, "steal"))
        coord_enc_kv_bool(e, "steal", true);
    if (timeout_ms)
        coord_enc_kv_uint(e, "timeout_ms", timeout_ms);
    if (lease_ms)
        coord_enc_kv_uint(e, "lease_ms", lease_ms);
    return rcl_send(c);
}

int rcl_sync(struct rcl *c)
{
    static uint64_t rid = 1ull << 40;
    coord_msg m;
    coord_msg_init(&m);
    int rc = rcl_request(c, "ping", ++rid);
    if (rc == 0)
        rc = rcl_reply(c, rid, 10000, &m);
    coord_msg_destroy(&m);
    return rc;
}

uint64_t rcl_stat_at(const char *file, int line, struct rcl *c, const char *key)
{
    static uint64_t rid = 1ull << 30;
    coord_msg m;
    coord_msg_init(&m);
    uint64_t v = UINT64_MAX;
    if (rcl_request(c, "stats", ++rid) == 0 && rcl_reply(c, rid, 10000, &m) == 0)
        v = field_uint(file, line, m.map, key);
    coord_msg_destroy(&m);
    return v;
}
