/* test_connections.c - the broker core through its real socket: handshake,
 * single instance, peer credentials, bad frames, limits, slow readers,
 * shutdown and the epoch. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "harness.h"

static struct broker_proc bp;
static coord_msg m;

static int recv1(struct rcl *c) { return rcl_next(c, 5000, &m); }

static int start_default(void)
{
    memset(&bp, 0, sizeof bp);
    return broker_start(&bp, NULL);
}

static void test_hello_ping_stats(void)
{
    REQUIRE(start_default() == 0);
    struct rcl *fd = rcl_connect(bp.sock);
    REQUIRE(fd);
    CHECK(rcl_hello(fd, NULL) == 0);
    CHECK(rcl_request(fd, "ping", 7) == 0);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "rid"), 7);
    CHECK(rcl_request(fd, "stats", 8) == 0);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "connections"), 1);
    CHECK_EQ_U(msg_uint(&m, "pid"), (uint64_t)bp.pid);
    CHECK(msg_uint(&m, "epoch") >= 1);
    CHECK(msg_uint(&m, "requests_total") >= 3);
    /* an unknown op keeps the connection open */
    CHECK(rcl_request(fd, "no.such.op", 9) == 0);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_code_is(&m, "UNKNOWN_OP"));
    CHECK_EQ_U(msg_uint(&m, "rid"), 9);
    /* cancel of nothing: cancelled false */
    coord_buf b; coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "cancel");
    coord_enc_kv_uint(&e, "rid", 10);
    coord_enc_kv_uint(&e, "target", 12345);
    coord_enc_end(&e);
    rcl_write(fd, b.data, b.len);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_ok(&m));
    CHECK(msg_has(&m, "cancelled") && !msg_bool(&m, "cancelled"));
    /* a wrongly typed field: BAD_REQUEST naming the key, still open */
    b.len = 0;
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "cancel");
    coord_enc_kv_uint(&e, "rid", 11);
    coord_enc_kv_cstr(&e, "target", "x");
    coord_enc_end(&e);
    rcl_write(fd, b.data, b.len);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_code_is(&m, "BAD_REQUEST"));
    coord_bytes msgv = msg_bytes(&m, "message");
    CHECK(memmem(msgv.ptr, msgv.len, "target", 6));
    /* rid missing: BAD_REQUEST with rid 0, connection stays */
    b.len = 0;
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "ping");
    coord_enc_end(&e);
    rcl_write(fd, b.data, b.len);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_code_is(&m, "BAD_REQUEST"));
    CHECK_EQ_U(msg_uint(&m, "rid"), 0);
    CHECK(rcl_request(fd, "ping", 12) == 0);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_ok(&m));
    coord_buf_free(&b);
    rcl_close(fd);
    CHECK(WIFEXITED(broker_kill(&bp, SIGTERM)));
    broker_cleanup(&bp);
}

static void test_handshake_rules(void)
{
    const char *args[] = { "--handshake-timeout", "300", NULL };
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, args) == 0);
    /* anything before hello: HELLO_REQUIRED and close */
    struct rcl *fd = rcl_connect(bp.sock);
    REQUIRE(fd);
    rcl_request(fd, "ping", 1);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_code_is(&m, "HELLO_REQUIRED"));
    CHECK(rcl_wait_eof(fd, 2000));
    rcl_close(fd);
    /* wrong protocol version: PROTO_VERSION and close */
    fd = rcl_connect(bp.sock);
    coord_buf b; coord_enc e;
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "hello");
    coord_enc_kv_uint(&e, "rid", 1);
    coord_enc_kv_uint(&e, "proto", 2);
    coord_enc_end(&e);
    rcl_write(fd, b.data, b.len);
    coord_buf_free(&b);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_code_is(&m, "PROTO_VERSION"));
    CHECK(rcl_wait_eof(fd, 2000));
    rcl_close(fd);
    /* silence: closed after the handshake timeout */
    fd = rcl_connect(bp.sock);
    uint64_t t0 = now_ms();
    CHECK(rcl_wait_eof(fd, 5000));
    CHECK(now_ms() - t0 >= 250);
    rcl_close(fd);
    /* a hello reply carries the contract's fields */
    fd = rcl_connect(bp.sock);
    coord_buf_init(&b);
    coord_enc_begin(&e, &b);
    coord_enc_kv_cstr(&e, "op", "hello");
    coord_enc_kv_uint(&e, "rid", 5);
    coord_enc_kv_uint(&e, "proto", 1);
    coord_enc_kv_cstr(&e, "scope", "s1");
    coord_enc_end(&e);
    rcl_write(fd, b.data, b.len);
    coord_buf_free(&b);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "rid"), 5);
    CHECK_EQ_U(msg_uint(&m, "proto"), 1);
    CHECK(msg_uint(&m, "conn") > 0);
    CHECK(msg_uint(&m, "epoch") >= 1);
    CHECK_EQ_U(msg_uint(&m, "max_frame"), 1048576);
    rcl_request(fd, "stats", 6);
    REQUIRE(recv1(fd) == 0);
    CHECK_EQ_U(msg_uint(&m, "handshake_timeouts"), 1);
    rcl_close(fd);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

static void test_second_broker_exits_quietly(void)
{
    REQUIRE(start_default() == 0);
    struct rcl *fd = rcl_connect(bp.sock);
    REQUIRE(fd);
    REQUIRE(rcl_hello(fd, NULL) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        execl(broker_binary(), broker_binary(), "--foreground", "--socket", bp.sock,
              "--data-dir", bp.data, (char *)NULL);
        _exit(127);
    }
    int st = wait_pid_timeout(pid, 10000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* the first one still serves, on the old connection and on new ones */
    rcl_request(fd, "ping", 2);
    REQUIRE(recv1(fd) == 0);
    CHECK(msg_ok(&m));
    struct rcl *fd2 = rcl_connect(bp.sock);
    CHECK(fd2 && rcl_hello(fd2, NULL) == 0);
    rcl_request(fd2, "stats", 3);
    REQUIRE(recv1(fd2) == 0);
    CHECK_EQ_U(msg_uint(&m, "pid"), (uint64_t)bp.pid);
    rcl_close(fd);
    rcl_close(fd2);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

/* Fresh paths in bp, their socket directory (into dir) created 0700, and
 * a socket bound at bp.sock; -1 on failure. */
static int bound_socket_in_fresh_dir(char *dir, size_t size)
{
    broker_paths(&bp);
    snprintf(dir, size, "%s/run", bp.dir);
    mkdir(dir, 0700);
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    if (s < 0 || strlen(bp.sock) >= sizeof sa.sun_path)
        return -1;
    memcpy(sa.sun_path, bp.sock, strlen(bp.sock) + 1);
    if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(s);
        return -1;
    }
    return s;
}

static void test_stale_socket_replaced_and_bad_dir_refused(void)
{
    char dir[320];
    /* a socket file left by a dead broker */
    int s = bound_socket_in_fresh_dir(dir, sizeof dir);
    REQUIRE(s >= 0);
    close(s);
    CHECK(rcl_connect(bp.sock) == NULL);
    REQUIRE(broker_start(&bp, NULL) == 0);
    struct rcl *fd = rcl_connect(bp.sock);
    CHECK(fd && rcl_hello(fd, NULL) == 0);
    rcl_close(fd);
    broker_kill(&bp, SIGTERM);
    /* a group-writable socket directory is refused with a reason */
    chmod(dir, 0770);
    pid_t pid = fork();
    if (pid == 0) {
        int log = open(bp.log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(log, 2);
        execl(broker_binary(), broker_binary(), "--foreground", "--socket", bp.sock,
              "--data-dir", bp.data, (char *)NULL);
        _exit(127);
    }
    int st = wait_pid_timeout(pid, 10000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) != 0);
    char text[2048] = { 0 };
    int lf = open(bp.log, O_RDONLY);
    ssize_t n = read(lf, text, sizeof text - 1);
    close(lf);
    CHECK(n > 0 && strstr(text, "writable by group or others"));
    broker_cleanup(&bp);
}

static void test_other_uid_refused(void)
{
    if (getuid() != 0) {
        fprintf(stderr, "skipped: needs root to run a client as nobody\n");
        return;
    }
    struct passwd *pw = getpwnam("nobody");
    REQUIRE(pw);
    REQUIRE(start_default() == 0);
    /* open the path to others, so only SO_PEERCRED stands in the way */
    char dir[320];
    snprintf(dir, sizeof dir, "%s/run", bp.dir);
    chmod(bp.dir, 0711);
    chmod(dir, 0711);
    chmod(bp.sock, 0666);
    int pfd[2];
    REQUIRE(pipe(pfd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        if (setgroups(0, NULL) < 0 || setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0)
            _exit(10);
        struct rcl *fd = rcl_connect(bp.sock);
        if (!fd)
            _exit(11);
        rcl_hello(fd, NULL);            /* fails: closed without a byte */
        char verdict = rcl_queued(fd) == 0 && rcl_wait_eof(fd, 10000) ? 'C' : 'R';
        ssize_t w = write(pfd[1], &verdict, 1);
        (void)w;
        _exit(0);
    }
    close(pfd[1]);
    char verdict = 0;
    struct pollfd p = { pfd[0], POLLIN, 0 };
    CHECK(poll(&p, 1, 10000) == 1 && read(pfd[0], &verdict, 1) == 1);
    CHECK(verdict == 'C');
    close(pfd[0]);
    int st = wait_pid_timeout(pid, 5000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    struct rcl *fd = rcl_connect(bp.sock);
    REQUIRE(rcl_hello(fd, NULL) == 0);
    rcl_request(fd, "stats", 2);
    REQUIRE(recv1(fd) == 0);
    CHECK_EQ_U(msg_uint(&m, "rejected_peers"), 1);
    rcl_close(fd);
    broker_kill(&bp, SIGTERM);
    int lf = open(bp.log, O_RDONLY);
    char text[8192] = { 0 };
    ssize_t n = read(lf, text, sizeof text - 1);
    close(lf);
    char want[64];
    snprintf(want, sizeof want, "uid=%u", (unsigned)pw->pw_uid);
    CHECK(n > 0 && strstr(text, "rejected_peer") && strstr(text, want));
    broker_cleanup(&bp);
}

/* Each malformed frame closes its own connection after a BAD_FRAME reply;
 * a bystander keeps being answered throughout. */
static void test_bad_frames_close_only_their_connection(void)
{
    REQUIRE(start_default() == 0);
    struct rcl *good = rcl_connect(bp.sock);
    REQUIRE(rcl_hello(good, NULL) == 0);
    static const uint8_t garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    static const uint8_t oversize[] = { 0x7f, 0xff, 0xff, 0xff, 0x80 };
    static const uint8_t zero_len[] = { 0, 0, 0, 0 };
    static const uint8_t non_map[] = { 0, 0, 0, 3, 0x93, 1, 2 };
    static const uint8_t int_key[] = { 0, 0, 0, 3, 0x81, 0x01, 0x02 };
    static const uint8_t trailing[] = { 0, 0, 0, 2, 0x80, 0xc0 };
    static const uint8_t huge_count[] = { 0, 0, 0, 5, 0xdf, 0xff, 0xff, 0xff, 0xff };
    static const uint8_t invalid[] = { 0, 0, 0, 3, 0x81, 0xa1, 0xc1 };
    struct { const char *name; const uint8_t *p; size_t n; bool after_hello; } cases[] = {
        { "garbage", garbage, sizeof garbage - 1, false },
        { "oversize", oversize, sizeof oversize, false },
        { "zero length", zero_len, sizeof zero_len, true },
        { "non-map", non_map, sizeof non_map, true },
        { "int key", int_key, sizeof int_key, true },
        { "trailing", trailing, sizeof trailing, true },
        { "huge count", huge_count, sizeof huge_count, true },
        { "invalid byte", invalid, sizeof invalid, true },
    };
    uint64_t rid = 100;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct rcl *fd = rcl_connect(bp.sock);
        REQUIRE(fd);
        if (cases[i].after_hello)
            REQUIRE(rcl_hello(fd, NULL) == 0);
        REQUIRE(rcl_write(fd, cases[i].p, cases[i].n) == 0);
        int rc = recv1(fd);
        if (rc != 0 || !msg_code_is(&m, "BAD_FRAME"))
            fprintf(stderr, "case %s: no BAD_FRAME reply\n", cases[i].name);
        CHECK(rc == 0 && msg_code_is(&m, "BAD_FRAME"));
        CHECK(rcl_wait_eof(fd, 2000));
        rcl_close(fd);
        rcl_request(good, "ping", ++rid);
        REQUIRE(recv1(good) == 0);
        CHECK(msg_ok(&m) && msg_uint(&m, "rid") == rid);
    }
    /* truncated: a header promising more, then close: nothing breaks */
    struct rcl *fd = rcl_connect(bp.sock);
    REQUIRE(rcl_hello(fd, NULL) == 0);
    static const uint8_t cut[] = { 0, 0, 0, 50, 0x82, 0xa2, 'o' };
    rcl_write(fd, cut, sizeof cut);
    rcl_close(fd);
    rcl_request(good, "stats", ++rid);
    REQUIRE(recv1(good) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "bad_frames"), 8);
    rcl_close(good);
    int st = broker_kill(&bp, SIGTERM);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    broker_cleanup(&bp);
}

static void test_connection_limit(void)
{
    const char *args[] = { "--max-conns", "3", NULL };
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, args) == 0);
    struct rcl *fds[3];
    for (int i = 0; i < 3; i++) {
        fds[i] = rcl_connect(bp.sock);
        REQUIRE(fds[i] && rcl_hello(fds[i], NULL) == 0);
    }
    struct rcl *extra = rcl_connect(bp.sock);
    REQUIRE(extra);
    REQUIRE(recv1(extra) == 0);
    CHECK(msg_code_is(&m, "LIMIT"));
    CHECK(rcl_wait_eof(extra, 2000));
    rcl_close(extra);
    rcl_close(fds[2]);
    /* a freed slot is usable again: the broker noticed the close once
     * a ping on another connection has been answered after it */
    rcl_request(fds[0], "ping", 2);
    REQUIRE(recv1(fds[0]) == 0);
    struct rcl *again = NULL;
    for (int tries = 0; tries < 50; tries++) {
        again = rcl_open(bp.sock, NULL);
        if (again)
            break;
        rcl_request(fds[0], "ping", 3);
        recv1(fds[0]);
    }
    CHECK(again);
    rcl_request(fds[0], "stats", 4);
    REQUIRE(recv1(fds[0]) == 0);
    CHECK(msg_uint(&m, "rejected_conn_limit") >= 1);
    rcl_close(again);
    rcl_close(fds[0]);
    rcl_close(fds[1]);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* p99 of n ping round trips, in microseconds. */
static uint64_t ping_p99_us(struct rcl *fd, int n, uint64_t *rid)
{
    uint64_t *lat = calloc((size_t)n, sizeof *lat);
    for (int i = 0; i < n; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        rcl_request(fd, "ping", ++*rid);
        if (recv1(fd) != 0 || !msg_ok(&m)) {
            free(lat);
            return UINT64_MAX;
        }
        clock_gettime(CLOCK_MONOTONIC, &b);
        lat[i] = (uint64_t)(((int64_t)b.tv_sec - a.tv_sec) * 1000000 +
                            ((int64_t)b.tv_nsec - a.tv_nsec) / 1000);
    }
    qsort(lat, (size_t)n, sizeof *lat, cmp_u64);
    uint64_t p99 = lat[n * 99 / 100];
    free(lat);
    return p99;
}

/* A client that writes requests and never reads is paused at the output
 * mark and cut off once its output has made no progress for
 * LIMIT_OUTBUF_STALL_MS (10 s); another client's pings go on as before. */
static void test_slow_reader_cut_off(void)
{
    const char *args[] = { "--max-outbuf", "262144", "--max-frame", "65536", NULL };
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, args) == 0);
    struct rcl *good = rcl_connect(bp.sock);
    REQUIRE(rcl_hello(good, NULL) == 0);
    uint64_t rid = 1;
    uint64_t before = ping_p99_us(good, 500, &rid);
    REQUIRE(before != UINT64_MAX);

    struct rcl *slow = rcl_connect(bp.sock);
    REQUIRE(rcl_hello(slow, NULL) == 0);
    int rcvbuf = 4096;
    setsockopt(rcl_fd(slow), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    pid_t writer = fork();
    if (writer == 0) {
        /* stats replies are ~600 bytes: 20000 of them pass any cap */
        coord_buf b; coord_enc e;
        coord_buf_init(&b);
        for (uint64_t i = 0; i < 20000; i++) {
            coord_enc_begin(&e, &b);
            coord_enc_kv_cstr(&e, "op", "stats");
            coord_enc_kv_uint(&e, "rid", i + 1);
            coord_enc_end(&e);
        }
        int rc = rcl_write(slow, b.data, b.len);
        _exit(rc == 0 ? 0 : 1);
    }
    uint64_t during = ping_p99_us(good, 500, &rid);
    /* the slow one is gone: its writer fails or finishes, its socket ends */
    int st = wait_pid_timeout(writer, 30000);
    CHECK(st != -1);
    bool cut = false;
    for (uint64_t t0 = now_ms(); !cut && now_ms() - t0 < 30000;) {
        rcl_request(good, "stats", ++rid);
        REQUIRE(recv1(good) == 0);
        cut = msg_uint(&m, "outbuf_disconnects") == 1;
        if (!cut)
            usleep(20000);          /* polling a counter: no event to await */
    }
    CHECK(cut);
    CHECK_EQ_U(msg_uint(&m, "outbuf_stalls"), 1);
    CHECK_EQ_U(msg_uint(&m, "connections"), 1);
    uint64_t after = ping_p99_us(good, 500, &rid);
    fprintf(stderr, "ping p99: before %llu us, during %llu us, after %llu us\n",
            (unsigned long long)before, (unsigned long long)during,
            (unsigned long long)after);
    CHECK(during != UINT64_MAX && after != UINT64_MAX);
    /* generous: a shared machine is noisy, a blocked loop is not subtle */
    CHECK(during < before * 20 + 20000);
    rcl_close(slow);
    rcl_close(good);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

static uint64_t epoch_of(const char *sock)
{
    struct rcl *fd = rcl_open(sock, NULL);
    if (!fd)
        return 0;
    rcl_request(fd, "stats", 2);
    uint64_t e = recv1(fd) == 0 ? msg_uint(&m, "epoch") : 0;
    rcl_close(fd);
    return e;
}

static void test_sigterm_and_epoch(void)
{
    REQUIRE(start_default() == 0);
    uint64_t e1 = epoch_of(bp.sock);
    CHECK(e1 >= 1);
    int st = broker_kill(&bp, SIGTERM);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(access(bp.sock, F_OK) != 0);      /* socket removed on exit */
    REQUIRE(broker_start(&bp, NULL) == 0);
    uint64_t e2 = epoch_of(bp.sock);
    CHECK(e2 > e1);
    st = broker_kill(&bp, SIGKILL);
    CHECK(st != -1 && WIFSIGNALED(st));
    REQUIRE(broker_start(&bp, NULL) == 0);
    uint64_t e3 = epoch_of(bp.sock);
    CHECK(e3 > e2);
    /* SIGINT is an orderly exit too */
    st = broker_kill(&bp, SIGINT);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    broker_cleanup(&bp);
}

static void test_idle_exit(void)
{
    const char *args[] = { "--idle-exit", "1", NULL };
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, args) == 0);
    struct rcl *fd = rcl_connect(bp.sock);
    REQUIRE(rcl_hello(fd, NULL) == 0);
    /* connected: it stays (well past the idle time) */
    CHECK(wait_pid_timeout(bp.pid, 1500) == -1);
    rcl_request(fd, "ping", 2);
    REQUIRE(recv1(fd) == 0);
    rcl_close(fd);
    int st = wait_pid_timeout(bp.pid, 10000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (st != -1)
        bp.pid = -1;
    broker_cleanup(&bp);
}

/* Memory of idle connections, read from /proc, reported and bounded. */
static void test_idle_connections_memory(void)
{
    enum { N = 1000 };
    REQUIRE(start_default() == 0);
    long before = rss_kb(bp.pid);
    static struct rcl *fds[N];
    int opened = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = rcl_open(bp.sock, NULL);
        if (!fds[i])
            break;
        opened++;
    }
    CHECK_EQ_U(opened, N);
    long after = rss_kb(bp.pid);
    fprintf(stderr, "%d idle connections: broker RSS %ld kB -> %ld kB (+%ld kB, %ld B each)\n",
            opened, before, after, after - before,
            opened ? (after - before) * 1024 / opened : 0);
    /* the brief's bar: 10,000 connections within 64 MiB, so 6.5 kB each */
    CHECK(after - before < 6554 * (long)N / 1024);
    rcl_request(fds[0], "stats", 2);
    REQUIRE(recv1(fds[0]) == 0);
    CHECK_EQ_U(msg_uint(&m, "connections"), (uint64_t)opened);
    for (int i = 0; i < opened; i++)
        rcl_close(fds[i]);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

/* --max-pending: a request that would wait past the limit gets LIMIT at
 * once and nothing is queued; one that is granted at once still passes. */
static void test_pending_limit(void)
{
    const char *args[] = { "--max-pending", "2", NULL };
    memset(&bp, 0, sizeof bp);
    REQUIRE(broker_start(&bp, args) == 0);
    struct rcl *holder = connect_or_exit(&bp, NULL), *w = connect_or_exit(&bp, NULL);
    rcl_acquire(holder, 1, "busy", 4, NULL, 0, 0);
    REQUIRE(rcl_reply(holder, 1, 5000, &m) == 0 && msg_bool(&m, "granted"));
    rcl_acquire(w, 1, "busy", 4, NULL, 0, 0);
    rcl_acquire(w, 2, "busy", 4, NULL, 0, 0);
    rcl_acquire(w, 3, "busy", 4, NULL, 0, 0);
    REQUIRE(rcl_reply(w, 3, 5000, &m) == 0);
    CHECK(msg_code_is(&m, "LIMIT"));
    /* a rid still waiting cannot be reused */
    rcl_begin(w, "lock.query", 2);
    rcl_send(w);
    REQUIRE(rcl_reply(w, 2, 5000, &m) == 0);
    CHECK(msg_code_is(&m, "BAD_REQUEST"));
    rcl_begin(w, "lock.query", 4);
    rcl_send(w);
    REQUIRE(rcl_reply(w, 4, 5000, &m) == 0);
    CHECK_EQ_U(msg_array(&m, "pending")->size, 2);
    rcl_begin(w, "stats", 5);
    rcl_send(w);
    REQUIRE(rcl_reply(w, 5, 5000, &m) == 0);
    CHECK_EQ_U(msg_uint(&m, "pending_limit_hits"), 1);
    rcl_close(holder);
    rcl_close(w);
    stop_and_clean(&bp);
}

/* SIGTERM: waiting requests are answered SHUTTING_DOWN, then exit 0. */
static void test_shutdown_answers_waiters(void)
{
    start_or_exit(&bp, NULL);
    struct rcl *holder = connect_or_exit(&bp, NULL), *w = connect_or_exit(&bp, NULL);
    rcl_acquire(holder, 1, "x", 1, NULL, 0, 0);
    REQUIRE(rcl_reply(holder, 1, 5000, &m) == 0 && msg_bool(&m, "granted"));
    rcl_acquire(w, 7, "x", 1, NULL, 0, 0);
    coord_enc *e = rcl_begin(w, "flight.join", 8);
    coord_enc_kv_cstr(e, "key", "k");
    rcl_send(w);
    REQUIRE(rcl_reply(w, 8, 5000, &m) == 0);          /* owner */
    e = rcl_begin(holder, "flight.join", 2);
    coord_enc_kv_cstr(e, "key", "k");
    rcl_send(holder);                                 /* follower, waiting */
    rcl_sync(holder);
    rcl_sync(w);
    kill(bp.pid, SIGTERM);
    REQUIRE(rcl_reply(w, 7, 5000, &m) == 0);
    CHECK(msg_code_is(&m, "SHUTTING_DOWN"));
    REQUIRE(rcl_reply(holder, 2, 5000, &m) == 0);
    CHECK(msg_code_is(&m, "SHUTTING_DOWN"));
    CHECK(rcl_wait_eof(w, 5000));
    int st = wait_pid_timeout(bp.pid, 10000);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (st != -1)
        bp.pid = -1;
    rcl_close(holder);
    rcl_close(w);
    broker_cleanup(&bp);
}

/* systemd socket activation: the listening socket arrives as fd 3 with
 * LISTEN_PID/LISTEN_FDS, and the broker serves it without binding. */
static void test_socket_activation(void)
{
    char dir[320];
    int s = bound_socket_in_fresh_dir(dir, sizeof dir);
    REQUIRE(s >= 0 && listen(s, 16) == 0);
    int pfd[2];
    REQUIRE(pipe(pfd) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        char ready[16], pidbuf[32];
        dup2(s, 3);
        dup2(pfd[1], 4);
        snprintf(ready, sizeof ready, "%d", 4);
        snprintf(pidbuf, sizeof pidbuf, "%d", (int)getpid());
        setenv("LISTEN_PID", pidbuf, 1);
        setenv("LISTEN_FDS", "1", 1);
        int log = open(bp.log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        dup2(log, 2);
        execl(broker_binary(), broker_binary(), "--foreground", "--socket", bp.sock,
              "--data-dir", bp.data, "--ready-fd", ready, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    close(s);
    bp.pid = pid;
    char line[8] = { 0 };
    struct pollfd p = { pfd[0], POLLIN, 0 };
    CHECK(poll(&p, 1, 10000) == 1 && read(pfd[0], line, sizeof line - 1) > 0);
    close(pfd[0]);
    CHECK(strncmp(line, "ready", 5) == 0);
    struct rcl *fd = rcl_connect(bp.sock);
    CHECK(fd && rcl_hello(fd, NULL) == 0);
    rcl_request(fd, "stats", 2);
    REQUIRE(recv1(fd) == 0);
    CHECK_EQ_U(msg_uint(&m, "pid"), (uint64_t)pid);
    rcl_close(fd);
    int st = broker_kill(&bp, SIGTERM);
    CHECK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    static const struct test_case tests[] = {
        { "hello_ping_stats", test_hello_ping_stats },
        { "handshake_rules", test_handshake_rules },
        { "second_broker_exits_quietly", test_second_broker_exits_quietly },
        { "stale_socket_and_bad_dir", test_stale_socket_replaced_and_bad_dir_refused },
        { "other_uid_refused", test_other_uid_refused },
        { "bad_frames", test_bad_frames_close_only_their_connection },
        { "connection_limit", test_connection_limit },
        { "slow_reader_cut_off", test_slow_reader_cut_off },
        { "sigterm_and_epoch", test_sigterm_and_epoch },
        { "idle_exit", test_idle_exit },
        { "idle_connections_memory", test_idle_connections_memory },
        { "socket_activation", test_socket_activation },
        { "pending_limit", test_pending_limit },
        { "shutdown_answers_waiters", test_shutdown_answers_waiters },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
