/* harness.c - see harness.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

int harness_failures;

uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void kill_tracked(void);

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
        int before = harness_failures;
        uint64_t t0 = now_ms();
        t->fn();
        kill_tracked();
        int bad = harness_failures != before;
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

int broker_start(struct broker_proc *bp, const char *const *extra)
{
    if (!bp->dir[0])
        broker_paths(bp);
    int pfd[2];
    if (pipe(pfd) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        const char *args[64];
        int n = 0;
        char vglog[400];
        if (getenv("COORD_VALGRIND")) {
            /* the broker under memcheck: errors make it exit 99 */
            snprintf(vglog, sizeof vglog, "--log-file=%s/valgrind.%%p.log", bp->dir);
            args[n++] = "valgrind";
            args[n++] = "--error-exitcode=99";
            args[n++] = "--leak-check=full";
            args[n++] = "--errors-for-leak-kinds=definite";
            args[n++] = vglog;
        }
        args[n++] = broker_binary();
        args[n++] = "--foreground";
        args[n++] = "--socket";
        args[n++] = bp->sock;
        args[n++] = "--data-dir";
        args[n++] = bp->data;
        args[n++] = "--ready-fd";
        args[n++] = "3";
        for (int i = 0; extra && extra[i] && n < 62; i++)
            args[n++] = extra[i];
        args[n] = NULL;
        close(pfd[0]);
        /* a test that dies or fails early must not leave brokers behind */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (pfd[1] != 3) {
            dup2(pfd[1], 3);
            close(pfd[1]);
        }
        int log = open(bp->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (log >= 0) {
            dup2(log, 2);
            close(log);
        }
        execvp(args[0], (char *const *)args);
        perror("exec coordd");
        _exit(127);
    }
    close(pfd[1]);
    bp->pid = pid;
    track(bp);
    char line[16] = { 0 };
    struct pollfd p = { pfd[0], POLLIN, 0 };
    uint64_t t0 = now_ms();
    int pr = poll(&p, 1, 30000);
    ssize_t n = pr == 1 ? read(pfd[0], line, sizeof line - 1) : -1;
    int ok = n > 0 && strncmp(line, "ready", 5) == 0;
    close(pfd[0]);
    if (!ok) {
        /* say why: the broker's own log is the best witness */
        fprintf(stderr, "broker did not get ready after %llu ms (poll %d, read %zd); log %s:\n",
                (unsigned long long)(now_ms() - t0), pr, n, bp->log);
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

int wait_pid_timeout(pid_t pid, int timeout_ms)
{
    uint64_t end = now_ms() + (uint64_t)timeout_ms;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        if (r < 0 || now_ms() > end)
            return -1;
        /* a child's exit has no fd to poll; a short nap is the event */
        struct timespec ts = { 0, 2 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
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
    if (bp->dir[0] && !getenv("COORD_TEST_KEEP"))
        nftw(bp->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    bp->dir[0] = '\0';
}

int raw_connect(const char *sock)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int raw_send(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
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

int raw_request(int fd, const char *op, uint64_t rid)
{
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", op);
    coord_enc_kv_uint(&e, "rid", rid);
    coord_enc_end(&e);
    int rc = raw_send(fd, b.data, b.len);
    coord_buf_free(&b);
    return rc;
}

int raw_hello(int fd, const char *scope)
{
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "hello");
    coord_enc_kv_uint(&e, "rid", 1);
    coord_enc_kv_uint(&e, "proto", 1);
    coord_enc_kv_cstr(&e, "client", "harness");
    coord_enc_kv_uint(&e, "pid", (uint64_t)getpid());
    if (scope)
        coord_enc_kv_cstr(&e, "scope", scope);
    coord_enc_end(&e);
    int rc = raw_send(fd, b.data, b.len);
    coord_buf_free(&b);
    if (rc < 0)
        return -1;
    coord_msg m;
    uint8_t *store = NULL;
    coord_msg_init(&m);
    rc = raw_recv(fd, 5000, &m, &store);
    if (rc == 0 && !msg_ok(&m))
        rc = -1;
    coord_msg_destroy(&m);
    free(store);
    return rc;
}

static int read_full(int fd, uint8_t *p, size_t n, uint64_t deadline)
{
    while (n > 0) {
        int left = (int)(deadline > now_ms() ? deadline - now_ms() : 0);
        struct pollfd pf = { fd, POLLIN, 0 };
        int pr = poll(&pf, 1, left);
        if (pr == 0)
            return -2;
        if (pr < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        ssize_t r = read(fd, p, n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int raw_recv(int fd, int timeout_ms, coord_msg *m, uint8_t **store)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    uint8_t hdr[4];
    int rc = read_full(fd, hdr, 4, deadline);
    if (rc)
        return rc;
    uint32_t n = coord_be32(hdr);
    free(*store);
    *store = malloc(n ? n : 1);
    rc = read_full(fd, *store, n, deadline);
    if (rc)
        return rc;
    return coord_msg_parse(m, *store, n) == COORD_FRAME_OK ? 0 : -1;
}

bool raw_wait_eof(int fd, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    uint8_t buf[4096];
    for (;;) {
        int left = (int)(deadline > now_ms() ? deadline - now_ms() : 0);
        struct pollfd pf = { fd, POLLIN, 0 };
        if (poll(&pf, 1, left) <= 0)
            return false;
        ssize_t r = read(fd, buf, sizeof buf);
        if (r == 0 || (r < 0 && errno == ECONNRESET))
            return true;
        if (r < 0 && errno != EINTR)
            return false;
    }
}

bool msg_ok(coord_msg *m)
{
    const msgpack_object *v = coord_map_find(m->map, "ok");
    return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

bool msg_code_is(coord_msg *m, const char *code)
{
    const msgpack_object *v = coord_map_find(m->map, "code");
    return v && v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(code) &&
           memcmp(v->via.str.ptr, code, v->via.str.size) == 0;
}

uint64_t msg_uint(coord_msg *m, const char *key)
{
    const msgpack_object *v = coord_map_find(m->map, key);
    return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? v->via.u64 : UINT64_MAX;
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

/* ---- rcl ---- */

struct frame_node {
    struct frame_node *next;
    uint32_t len;
    uint8_t body[];
};

struct rcl {
    int fd;
    coord_buf out;
    coord_enc enc;
    struct frame_node *head, *tail;
    uint8_t *taken;          /* body of the frame last handed out */
};

struct rcl *rcl_open(const char *sock, const char *scope)
{
    int fd = raw_connect(sock);
    if (fd < 0)
        return NULL;
    if (raw_hello(fd, scope) != 0) {
        close(fd);
        return NULL;
    }
    struct rcl *c = calloc(1, sizeof *c);
    c->fd = fd;
    coord_buf_init(&c->out);
    return c;
}

void rcl_close(struct rcl *c)
{
    if (!c)
        return;
    close(c->fd);
    while (c->head) {
        struct frame_node *n = c->head->next;
        free(c->head);
        c->head = n;
    }
    free(c->taken);
    coord_buf_free(&c->out);
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
    return raw_send(c->fd, c->out.data, c->out.len);
}

/* Reads one frame into the queue; 0, -1 closed, -2 timeout. */
static int read_one(struct rcl *c, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    uint8_t hdr[4];
    int rc = read_full(c->fd, hdr, 4, deadline);
    if (rc)
        return rc;
    uint32_t n = coord_be32(hdr);
    struct frame_node *f = malloc(sizeof *f + n);
    f->next = NULL;
    f->len = n;
    rc = read_full(c->fd, f->body, n, deadline + 5000);
    if (rc) {
        free(f);
        return -1;
    }
    if (c->tail)
        c->tail->next = f;
    else
        c->head = f;
    c->tail = f;
    return 0;
}

typedef bool (*frame_pred)(coord_msg *m, const void *arg);

static int take_matching(struct rcl *c, frame_pred pred, const void *arg,
                         int timeout_ms, coord_msg *m)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    struct frame_node **pp = &c->head, *prev = NULL;
    for (;;) {
        while (*pp) {
            struct frame_node *f = *pp;
            if (coord_msg_parse(m, f->body, f->len) == COORD_FRAME_OK && pred(m, arg)) {
                *pp = f->next;
                if (c->tail == f)
                    c->tail = prev;
                free(c->taken);
                /* keep the body alive for m: move it into 'taken' */
                c->taken = malloc(f->len ? f->len : 1);
                memcpy(c->taken, f->body, f->len);
                coord_msg_parse(m, c->taken, f->len);
                free(f);
                return 0;
            }
            prev = f;
            pp = &f->next;
        }
        int left = (int)(deadline > now_ms() ? deadline - now_ms() : 0);
        int rc = read_one(c, left);
        if (rc)
            return rc;
    }
}

static bool is_rid(coord_msg *m, const void *arg)
{
    return coord_map_find(m->map, "ev") == NULL &&
           msg_uint(m, "rid") == *(const uint64_t *)arg;
}

static bool is_event(coord_msg *m, const void *arg)
{
    const msgpack_object *v = coord_map_find(m->map, "ev");
    const char *name = arg;
    return v && v->type == MSGPACK_OBJECT_STR && v->via.str.size == strlen(name) &&
           memcmp(v->via.str.ptr, name, v->via.str.size) == 0;
}

int rcl_reply(struct rcl *c, uint64_t rid, int timeout_ms, coord_msg *m)
{
    return take_matching(c, is_rid, &rid, timeout_ms, m);
}

int rcl_event(struct rcl *c, const char *ev, int timeout_ms, coord_msg *m)
{
    return take_matching(c, is_event, ev, timeout_ms, m);
}

size_t rcl_queued(struct rcl *c)
{
    while (read_one(c, 0) == 0)
        ;
    size_t n = 0;
    for (struct frame_node *f = c->head; f; f = f->next)
        n++;
    return n;
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

bool msg_bool(coord_msg *m, const char *key)
{
    const msgpack_object *v = coord_map_find(m->map, key);
    return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

bool msg_str_is(coord_msg *m, const char *key, const void *s, size_t n)
{
    const msgpack_object *v = coord_map_find(m->map, key);
    return v && (v->type == MSGPACK_OBJECT_STR || v->type == MSGPACK_OBJECT_BIN) &&
           v->via.str.size == n && (n == 0 || memcmp(v->via.str.ptr, s, n) == 0);
}

int rcl_sync(struct rcl *c)
{
    static uint64_t rid = 1ull << 40;
    coord_msg m;
    coord_msg_init(&m);
    rcl_begin(c, "ping", ++rid);
    int rc = rcl_send(c);
    if (rc == 0)
        rc = rcl_reply(c, rid, 10000, &m);
    coord_msg_destroy(&m);
    return rc;
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
