/* test_client_edges.c - libcoord and coordctl at the edges a broker can push
 * them to: a fake broker (a forked process on a Unix socket that answers
 * hello and then does what the case says, byte for byte) and real brokers.
 *
 *   wire order   a grant and the lock.lost (a campaign and the leader.lost)
 *                that follows it, written in ONE write: the holder learns
 *                of the loss after it has the lock's id, whether its event
 *                callback was set before the call or after it; a real
 *                broker with the holder frozen (SIGSTOP) between its grant
 *                and a steal, for libcoord and `coordctl lock`
 *   bounds       a hello announcing max_frame 2^32-1 then a 256 MiB frame; a
 *                48 MiB frame after announcing 1 MiB; an event flood while
 *                blocked in coord_lock_acquire; silence after hello: peak
 *                RSS of a client child (wait4) and the errors
 *   text         names and descriptor text go out as str when UTF-8, else
 *                bin; broker error text with control bytes is escaped in
 *                coord_error_message and coordctl's messages; coordctl
 *                --json prints UTF-8 and {"base64": ...} for other bytes
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"
#include "leader-util.h"

#define T 10000   /* ms to wait for something that must happen */

/* ---- the fake broker ---- */

struct fake {
    pid_t pid;
    struct broker_proc paths;   /* only its dir and sock are used */
};

typedef void (*fake_fn)(int fd, void *ud);

static bool write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        b += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_full(int fd, void *p, size_t n)
{
    uint8_t *b = p;
    while (n) {
        ssize_t r = recv(fd, b, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        b += r;
        n -= (size_t)r;
    }
    return true;
}

/* One request: its body (malloc'd, *len bytes) decoded into m; its rid and
 * op.  False at EOF. */
struct fb_req {
    uint8_t *body;
    uint32_t len;
    coord_msg m;
    uint64_t rid;
    char op[40];
};

static bool fb_next(int fd, struct fb_req *q)
{
    uint8_t h[4];
    free(q->body);
    q->body = NULL;
    if (!read_full(fd, h, 4))
        return false;
    q->len = coord_be32(h);
    q->body = malloc(q->len ? q->len : 1);
    if (!q->body || !read_full(fd, q->body, q->len))
        return false;
    if (coord_msg_parse(&q->m, q->body, q->len) != COORD_FRAME_OK)
        return false;
    const msgpack_object *rid = coord_map_find(q->m.map, "rid");
    const msgpack_object *op = coord_map_find(q->m.map, "op");
    q->rid = rid && rid->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? rid->via.u64 : 0;
    snprintf(q->op, sizeof q->op, "%.*s", op ? (int)op->via.str.size : 0,
             op ? op->via.str.ptr : "");
    return true;
}

/* Reads hello and answers it announcing max_frame. */
static bool fb_hello(int fd, struct fb_req *q, uint64_t max_frame)
{
    if (!fb_next(fd, q) || strcmp(q->op, "hello"))
        return false;
    coord_buf b;
    coord_enc e;
    coord_buf_init(&b);
    coord_enc_reply_begin(&e, &b, q->rid);
    coord_enc_kv_uint(&e, "proto", 1);
    coord_enc_kv_cstr(&e, "broker", "fake 1");
    coord_enc_kv_uint(&e, "conn", 1);
    coord_enc_kv_uint(&e, "epoch", 1);
    coord_enc_kv_uint(&e, "max_frame", max_frame);
    coord_enc_end(&e);
    bool ok = write_all(fd, b.data, b.len);
    coord_buf_free(&b);
    return ok;
}

/* Appends {rid, ok: true} to b. */
static void fb_ok(coord_buf *b, uint64_t rid)
{
    coord_enc e;
    coord_enc_reply_begin(&e, b, rid);
    coord_enc_end(&e);
}

static void fake_start(struct fake *f, fake_fn fn, void *ud)
{
    broker_paths(&f->paths);
    char run[320];
    snprintf(run, sizeof run, "%s/run", f->paths.dir);
    mkdir(run, 0700);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    size_t sl = strlen(f->paths.sock);
    if (sl >= sizeof a.sun_path)
        exit(2);
    memcpy(a.sun_path, f->paths.sock, sl + 1);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 8) < 0) {
        perror("fake broker");
        exit(2);
    }
    f->pid = fork();
    if (f->pid < 0)
        exit(2);
    if (f->pid == 0) {
        signal(SIGPIPE, SIG_IGN);
        /* one client after another (a connect that is refused or closed
         * early leaves the next one served) */
        for (;;) {
            int fd = accept(ls, NULL, NULL);
            if (fd < 0)
                _exit(1);
            fn(fd, ud);
            close(fd);
        }
    }
    close(ls);
}

static void fake_stop(struct fake *f)
{
    if (f->pid > 0) {
        kill(f->pid, SIGKILL);
        waitpid(f->pid, NULL, 0);
    }
    f->pid = -1;
    broker_cleanup(&f->paths);
}

static coord_t *fake_connect(const struct fake *f, unsigned request_timeout_ms, int *rc)
{
    coord_options o;
    coord_options_init(&o);
    o.socket_path = f->paths.sock;
    o.no_autostart = true;
    o.request_timeout_ms = request_timeout_ms;
    coord_t *c = NULL;
    *rc = coord_connect(&c, &o);
    return c;
}

/* Runs fn in a child process: its exit status, and its peak RSS in KiB. */
static int in_child(int (*fn)(void *), void *ud, long *maxrss_kb)
{
    pid_t pid = fork();
    if (pid < 0)
        exit(2);
    if (pid == 0)
        _exit(fn(ud));
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (wait4(pid, &st, 0, &ru) < 0)
        return -1;
    *maxrss_kb = ru.ru_maxrss;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- wire order: grant + lock.lost in one write ---- */

/* Answers lock.acquire with a grant of lock 7 and, in the same write, its
 * lock.lost; lock.release with UNKNOWN_LOCK; anything else ok. */
static void fake_grant_lost(int fd, void *ud)
{
    (void)ud;
    struct fb_req q = { 0 };
    coord_msg_init(&q.m);
    if (!fb_hello(fd, &q, 1 << 20))
        return;
    while (fb_next(fd, &q)) {
        coord_buf b;
        coord_buf_init(&b);
        coord_enc e;
        if (!strcmp(q.op, "lock.acquire")) {
            coord_enc_reply_begin(&e, &b, q.rid);
            coord_enc_kv_bool(&e, "granted", true);
            coord_enc_kv_uint(&e, "lock", 7);
            coord_enc_kv_uint(&e, "token", 99);
            coord_enc_end(&e);
            coord_enc_event_begin(&e, &b, "lock.lost");
            coord_enc_kv_uint(&e, "lock", 7);
            coord_enc_kv_uint(&e, "token", 99);
            coord_enc_kv_cstr(&e, "name", "x");
            coord_enc_kv_cstr(&e, "reason", "stolen");
            coord_enc_end(&e);
        } else if (!strcmp(q.op, "leader.campaign")) {
            coord_enc_reply_begin(&e, &b, q.rid);
            coord_enc_kv_bool(&e, "granted", true);
            coord_enc_kv_uint(&e, "generation", 5);
            coord_enc_kv_uint(&e, "lease_ms", 30000);
            coord_enc_kv_cstr(&e, "mode", "active");
            coord_enc_end(&e);
            coord_enc_event_begin(&e, &b, "leader.lost");
            coord_enc_kv_cstr(&e, "workstream", "ws");
            coord_enc_kv_uint(&e, "generation", 5);
            coord_enc_kv_cstr(&e, "reason", "stolen");
            coord_enc_end(&e);
        } else if (!strcmp(q.op, "lock.release")) {
            coord_enc_error(&b, q.rid, COORD_EUNKNOWN_LOCK, "lock not held");
        } else {
            fb_ok(&b, q.rid);
        }
        bool ok = write_all(fd, b.data, b.len);      /* ONE write */
        coord_buf_free(&b);
        if (!ok)
            break;
    }
    free(q.body);
    coord_msg_destroy(&q.m);
}

struct lost_seen {
    uint64_t known;       /* the lock id the caller has, 0 before it returns */
    int events;           /* lock.lost events seen */
    int unknown;          /* ... of them for a lock the caller did not have yet */
};

static void on_lost(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct lost_seen *s = ud;
    coord_lock_lost l;
    (void)c;
    if (!coord_event_lock_lost(ev, &l))
        return;
    s->events++;
    if (l.lock != s->known)
        s->unknown++;
}

/* The callback set before the blocking acquire: the lock.lost read with
 * the grant reaches it after the call returned, at the next dispatch. */
static void test_grant_lost_cb_before(void)
{
    struct fake f;
    fake_start(&f, fake_grant_lost, NULL);
    int rc;
    coord_t *c = fake_connect(&f, 0, &rc);
    CHECK_EQ(rc, 0);
    if (c) {
        struct lost_seen s = { 0 };
        coord_set_event_cb(c, on_lost, &s);
        uint64_t lock = 0, token = 0;
        CHECK_EQ(coord_lock_acquire(c, S("x"), NULL, &lock, &token), 0);
        CHECK_EQ_U(lock, 7);
        CHECK_EQ(s.events, 0);           /* not inside the call */
        s.known = lock;
        CHECK_EQ(coord_dispatch(c), 0);
        CHECK_EQ(s.events, 1);
        CHECK_EQ(s.unknown, 0);
        CHECK_EQ(coord_lock_release(c, lock), COORD_EUNKNOWN_LOCK);
        coord_close(c);
    }
    fake_stop(&f);
}

/* No callback during the acquire (coordctl lock's way), one set after it:
 * the queued lock.lost reaches it; coord_wait does not sleep on it. */
static void test_grant_lost_cb_after(void)
{
    struct fake f;
    fake_start(&f, fake_grant_lost, NULL);
    int rc;
    coord_t *c = fake_connect(&f, 0, &rc);
    CHECK_EQ(rc, 0);
    if (c) {
        struct lost_seen s = { 0 };
        uint64_t lock = 0;
        CHECK_EQ(coord_lock_acquire(c, S("x"), NULL, &lock, NULL), 0);
        s.known = lock;
        coord_set_event_cb(c, on_lost, &s);
        uint64_t t0 = now_ms();
        CHECK_EQ(coord_wait(c, 5000), 0);
        CHECK(now_ms() - t0 < 2000);
        CHECK_EQ(s.events, 1);
        CHECK_EQ(s.unknown, 0);
        coord_close(c);
    }
    fake_stop(&f);
    /* queue mode: coord_next_event hands it out after the grant */
    fake_start(&f, fake_grant_lost, NULL);
    c = fake_connect(&f, 0, &rc);
    CHECK_EQ(rc, 0);
    if (c) {
        uint64_t lock = 0;
        CHECK_EQ(coord_lock_acquire(c, S("x"), NULL, &lock, NULL), 0);
        coord_reply_t *ev = NULL;
        CHECK_EQ(coord_next_event(c, 0, &ev), 0);
        coord_lock_lost l;
        CHECK(ev && coord_event_lock_lost(ev, &l) && l.lock == lock);
        coord_reply_free(ev);
        coord_close(c);
    }
    fake_stop(&f);
}

struct term_cb {
    coord_leader_term *t;
    int applied;
};

static void on_term_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct term_cb *tc = ud;
    (void)c;
    if (coord_leader_term_event(tc->t, S("ws"), ev))
        tc->applied++;
}

/* A campaign's grant and its leader.lost in one write: the term ends
 * RELEASED ("stolen"), not LEADER. */
static void test_campaign_lost_one_read(void)
{
    struct fake f;
    fake_start(&f, fake_grant_lost, NULL);
    int rc;
    coord_t *c = fake_connect(&f, 0, &rc);
    CHECK_EQ(rc, 0);
    if (c) {
        coord_leader_term t;
        struct term_cb tc = { .t = &t };
        coord_set_event_cb(c, on_term_event, &tc);
        CHECK_EQ(coord_leader_campaign_term(c, S("ws"), NULL, &t), 0);
        CHECK_EQ(t.state, COORD_LEADER_LEADER);
        CHECK_EQ_U(t.generation, 5);
        CHECK_EQ(coord_dispatch(c), 0);
        CHECK_EQ(tc.applied, 1);
        CHECK_EQ(t.state, COORD_LEADER_RELEASED);
        CHECK_STR(t.end_reason, "stolen");
        coord_close(c);
    }
    fake_stop(&f);
}

/* ---- wire order on a real broker: the holder frozen between its grant
 * and the steal, so that both are in its socket when it reads ---- */

static struct broker_proc bp;

static coord_t *real_lib(const char *client)
{
    return lib_connect(&bp, NULL, client);
}

/* Holds (held) or waits for (pending) name, by client, per lock.query. */
static bool query_has(coord_t *q, const char *list, const char *client)
{
    coord_reply_t *r = NULL;
    if (coord_lock_query(q, &r) < 0)
        return false;
    coord_map m = coord_reply_map(r), e;
    bool found = false;
    for (size_t i = 0; coord_map_array_at(m, list, i, &e); i++) {
        const char *s;
        size_t n;
        if (coord_map_str(e, "client", &s, &n) && n == strlen(client) &&
            !memcmp(s, client, n))
            found = true;
    }
    coord_reply_free(r);
    return found;
}

static bool await_query(coord_t *q, const char *list, const char *client)
{
    uint64_t end = now_ms() + T;
    while (now_ms() < end) {
        if (query_has(q, list, client))
            return true;
        /* the broker has nothing to announce this change with: poll */
        usleep(2000);
    }
    return false;
}

/* The holder: a blocking acquire with the callback set, then waits for the
 * loss.  Exit 0: the loss came after the call returned, for its lock. */
static int holder_child(void *ud)
{
    (void)ud;
    coord_t *c = real_lib("edges-holder");
    struct lost_seen s = { 0 };
    coord_set_event_cb(c, on_lost, &s);
    uint64_t lock = 0;
    if (coord_lock_acquire(c, S("frozen"), NULL, &lock, NULL) != 0)
        return 10;
    if (s.events)
        return 11;                       /* reached the callback too early */
    s.known = lock;
    uint64_t end = now_ms() + T;
    while (!s.events && now_ms() < end)
        if (coord_wait(c, 1000) < 0)
            return 12;
    coord_close(c);
    return s.events == 1 && s.unknown == 0 ? 0 : 13;
}

static void test_real_grant_then_steal_one_read(void)
{
    memset(&bp, 0, sizeof bp);
    if (broker_start(&bp, NULL) != 0)
        exit(2);
    coord_t *a = real_lib("edges-first");
    coord_t *q = real_lib("edges-query");
    uint64_t la = 0;
    CHECK_EQ(coord_lock_acquire(a, S("frozen"), NULL, &la, NULL), 0);
    pid_t pid = fork();
    if (pid == 0)
        _exit(holder_child(NULL));
    CHECK(await_query(q, "pending", "edges-holder"));
    kill(pid, SIGSTOP);
    CHECK(wait_pid_timeout(pid, 0) == -1);
    CHECK_EQ(coord_lock_release(a, la), 0);           /* granted to the holder */
    CHECK(await_query(q, "held", "edges-holder"));
    coord_lock_opts so = { .steal = true };
    uint64_t ls = 0;
    CHECK_EQ(coord_lock_acquire(a, S("frozen"), &so, &ls, NULL), 0);  /* its loss */
    CHECK_EQ(coord_ping(q), 0);
    kill(pid, SIGCONT);
    int st = child_status(pid, T);
    CHECK_EQ(st, 0);
    coord_close(a);
    coord_close(q);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

/* `coordctl lock` frozen the same way: CMD is stopped when the lock is
 * lost, not run to its end. */
static void test_real_ctl_lock_steal_one_read(void)
{
    memset(&bp, 0, sizeof bp);
    if (broker_start(&bp, NULL) != 0)
        exit(2);
    coord_t *a = real_lib("edges-first");
    coord_t *q = real_lib("edges-query");
    uint64_t la = 0;
    CHECK_EQ(coord_lock_acquire(a, S("frozen"), NULL, &la, NULL), 0);
    struct run r;
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = true },
              ARGS("lock", "frozen", "--", "sleep", "60"));
    CHECK(await_query(q, "pending", "coordctl"));
    kill(r.pid, SIGSTOP);
    CHECK_EQ(coord_lock_release(a, la), 0);
    CHECK(await_query(q, "held", "coordctl"));
    coord_lock_opts so = { .steal = true };
    uint64_t ls = 0;
    CHECK_EQ(coord_lock_acquire(a, S("frozen"), &so, &ls, NULL), 0);
    CHECK_EQ(coord_ping(q), 0);
    kill(r.pid, SIGCONT);
    uint64_t t0 = now_ms();
    int st = run_finish(&r, T);
    CHECK(st > 0);                       /* lost: not 0, and not hung (-1) */
    CHECK(now_ms() - t0 < 8000);
    CHECK(strstr(run_text(&r, ERR), "lost") != NULL);
    run_free(&r);
    coord_close(a);
    coord_close(q);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

/* ---- bounds ---- */

struct stream {
    uint64_t max_frame;         /* announced */
    uint32_t frame_len;         /* the frame's length prefix */
    uint64_t send;              /* body bytes actually sent, then close */
};

/* hello announcing s->max_frame, then on the first request one frame
 * header of s->frame_len and s->send bytes of it. */
static void fake_stream(int fd, void *ud)
{
    const struct stream *s = ud;
    struct fb_req q = { 0 };
    coord_msg_init(&q.m);
    if (!fb_hello(fd, &q, s->max_frame) || !fb_next(fd, &q))
        return;
    uint8_t h[4] = { (uint8_t)(s->frame_len >> 24), (uint8_t)(s->frame_len >> 16),
                     (uint8_t)(s->frame_len >> 8), (uint8_t)s->frame_len };
    static uint8_t chunk[1 << 16];
    chunk[0] = 0x80;                     /* a fixmap... whatever: never parsed */
    if (!write_all(fd, h, 4))
        return;
    for (uint64_t sent = 0; sent < s->send; sent += sizeof chunk)
        if (!write_all(fd, chunk, sizeof chunk))
            break;
}

static const struct fake *child_fake;

/* Connects and pings: 0 when connect failed with EPROTOCOL, 1 when the
 * ping failed with EPROTOCOL, 2 + anything else. */
static int stream_client(void *ud)
{
    (void)ud;
    int rc;
    coord_t *c = fake_connect(child_fake, 20000, &rc);
    if (!c)
        return rc == COORD_EPROTOCOL ? 0 : 2;
    rc = coord_ping(c);
    coord_close(c);
    return rc == COORD_EPROTOCOL ? 1 : 3;
}

static void test_huge_announced_max_frame(void)
{
    struct stream s = { .max_frame = 0xffffffffu, .frame_len = 0xc0000000u,
                        .send = 256u << 20 };
    struct fake f;
    fake_start(&f, fake_stream, &s);
    child_fake = &f;
    long rss = 0;
    int st = in_child(stream_client, NULL, &rss);
    fprintf(stderr, "  max_frame 2^32-1, a 3 GiB frame: exit %d, peak RSS %ld KiB\n",
            st, rss);
    CHECK_EQ(st, 0);                     /* refused at hello */
    CHECK(rss < 32 * 1024);
    /* the message says what was refused */
    int rc;
    coord_t *c = fake_connect(&f, 0, &rc);
    CHECK(c == NULL && rc == COORD_EPROTOCOL);
    CHECK(strstr(coord_error_message(NULL), "max_frame") != NULL);
    fake_stop(&f);
}

static void test_frame_above_announced(void)
{
    struct stream s = { .max_frame = 1u << 20, .frame_len = 48u << 20,
                        .send = 48u << 20 };
    struct fake f;
    fake_start(&f, fake_stream, &s);
    child_fake = &f;
    long rss = 0;
    int st = in_child(stream_client, NULL, &rss);
    fprintf(stderr, "  max_frame 1 MiB, a 48 MiB frame: exit %d, peak RSS %ld KiB\n",
            st, rss);
    CHECK_EQ(st, 1);                     /* the ping: a malformed frame */
    CHECK(rss < 32 * 1024);
    fake_stop(&f);
}

/* On lock.acquire: 40,000 message events of 1 KiB, then the grant. */
#define FLOOD_EVENTS 40000
static void fake_flood(int fd, void *ud)
{
    (void)ud;
    struct fb_req q = { 0 };
    coord_msg_init(&q.m);
    if (!fb_hello(fd, &q, 1 << 20))
        return;
    while (fb_next(fd, &q)) {
        coord_buf b;
        coord_buf_init(&b);
        coord_enc e;
        static uint8_t data[1024];
        if (!strcmp(q.op, "lock.acquire")) {
            for (int i = 0; i < FLOOD_EVENTS; i++) {
                b.len = 0;
                coord_enc_event_begin(&e, &b, "message");
                coord_enc_kv_cstr(&e, "channel", "flood");
                coord_enc_kv_bin(&e, "data", data, sizeof data);
                coord_enc_end(&e);
                if (!write_all(fd, b.data, b.len))
                    break;
            }
            b.len = 0;
            coord_enc_reply_begin(&e, &b, q.rid);
            coord_enc_kv_bool(&e, "granted", true);
            coord_enc_kv_uint(&e, "lock", 1);
            coord_enc_kv_uint(&e, "token", 1);
            coord_enc_end(&e);
        } else {
            fb_ok(&b, q.rid);
        }
        bool ok = write_all(fd, b.data, b.len);
        coord_buf_free(&b);
        if (!ok)
            break;
    }
    free(q.body);
    coord_msg_destroy(&q.m);
}

/* 0: the acquire failed with EOVERFLOW, the queued events could still be
 * taken (at most the limit), then EOVERFLOW again. */
static int flood_client(void *ud)
{
    (void)ud;
    int rc;
    coord_t *c = fake_connect(child_fake, 0, &rc);
    if (!c)
        return 2;
    rc = coord_lock_acquire(c, S("x"), NULL, NULL, NULL);
    if (rc != COORD_EOVERFLOW)
        return 3;
    if (!strstr(coord_error_message(c), "queued unread"))
        return 4;
    unsigned n = 0;
    coord_reply_t *ev = NULL;
    while ((rc = coord_next_event(c, 0, &ev)) == 0) {
        coord_reply_free(ev);
        n++;
    }
    if (rc != COORD_EOVERFLOW || n == 0 || n > COORD_EVENT_QUEUE_MAX)
        return 5;
    if (coord_ping(c) != COORD_EOVERFLOW)
        return 6;
    coord_close(c);
    return 0;
}

static void test_event_flood_while_blocked(void)
{
    struct fake f;
    fake_start(&f, fake_flood, NULL);
    child_fake = &f;
    long rss = 0;
    int st = in_child(flood_client, NULL, &rss);
    fprintf(stderr, "  %d events of 1 KiB while blocked in acquire: exit %d, peak RSS "
            "%ld KiB\n", FLOOD_EVENTS, st, rss);
    CHECK_EQ(st, 0);
    CHECK(rss < 48 * 1024);
    fake_stop(&f);
}

/* hello, then never a reply, but to lock.acquire after 800 ms. */
static void fake_silent(int fd, void *ud)
{
    (void)ud;
    struct fb_req q = { 0 };
    coord_msg_init(&q.m);
    if (!fb_hello(fd, &q, 1 << 20))
        return;
    while (fb_next(fd, &q)) {
        if (strcmp(q.op, "lock.acquire"))
            continue;
        usleep(800 * 1000);              /* the behaviour under test: a slow grant */
        coord_buf b;
        coord_buf_init(&b);
        coord_enc e;
        coord_enc_reply_begin(&e, &b, q.rid);
        coord_enc_kv_bool(&e, "granted", true);
        coord_enc_kv_uint(&e, "lock", 3);
        coord_enc_kv_uint(&e, "token", 3);
        coord_enc_end(&e);
        write_all(fd, b.data, b.len);
        coord_buf_free(&b);
    }
}

static void test_silence_after_hello(void)
{
    struct fake f;
    fake_start(&f, fake_silent, NULL);
    int rc;
    coord_t *c = fake_connect(&f, 300, &rc);
    CHECK_EQ(rc, 0);
    if (c) {
        uint64_t t0 = now_ms();
        CHECK_EQ(coord_ping(c), COORD_ETIMEOUT);
        uint64_t dt = now_ms() - t0;
        CHECK(dt >= 290 && dt < 3000);
        CHECK(strstr(coord_error_message(c), "ping") != NULL);
        t0 = now_ms();
        CHECK_EQ(coord_lock_release(c, 1), COORD_ETIMEOUT);
        CHECK(now_ms() - t0 < 3000);
        coord_reply_t *r = NULL;
        coord_req_t *req = coord_req_new("stats");
        CHECK_EQ(coord_call(c, req, &r), COORD_ETIMEOUT);
        coord_req_free(req);
        /* a wait by design is not cut by the deadline */
        uint64_t lock = 0;
        CHECK_EQ(coord_lock_acquire(c, S("x"), NULL, &lock, NULL), 0);
        CHECK_EQ_U(lock, 3);
        coord_close(c);
    }
    fake_stop(&f);
}

/* ---- text ---- */

/* Writes each request body to DIR/req-N; answers ok (leader.define with a
 * descriptor), ping with an error whose message has control bytes. */
static void fake_record(int fd, void *ud)
{
    const char *dir = ud;
    struct fb_req q = { 0 };
    coord_msg_init(&q.m);
    if (!fb_hello(fd, &q, 1 << 20))
        return;
    for (int n = 0; fb_next(fd, &q); n++) {
        char path[400];
        snprintf(path, sizeof path, "%s/req-%d", dir, n);
        FILE *fp = fopen(path, "w");
        if (fp) {
            fwrite(q.body, 1, q.len, fp);
            fclose(fp);
        }
        coord_buf b;
        coord_buf_init(&b);
        coord_enc e;
        if (!strcmp(q.op, "ping")) {
            coord_enc_error(&b, q.rid, COORD_ELIMIT, "bad\x1b[31mred\nline\x7f\xff");
        } else if (!strcmp(q.op, "lock.acquire")) {
            coord_enc_reply_begin(&e, &b, q.rid);
            coord_enc_kv_bool(&e, "granted", true);
            coord_enc_kv_uint(&e, "lock", (uint64_t)n);
            coord_enc_kv_uint(&e, "token", 1);
            coord_enc_end(&e);
        } else if (!strcmp(q.op, "leader.define")) {
            coord_enc_reply_begin(&e, &b, q.rid);
            coord_enc_key(&e, "descriptor");
            coord_enc_map_begin(&e);
            coord_enc_kv_cstr(&e, "steal", "allowed");
            coord_enc_kv_cstr(&e, "mode", "active");
            coord_enc_map_end(&e);
            coord_enc_end(&e);
        } else {
            fb_ok(&b, q.rid);
        }
        bool ok = write_all(fd, b.data, b.len);
        coord_buf_free(&b);
        if (!ok)
            break;
    }
}

/* The MessagePack type of field key of the request recorded as req-n
 * (nested: "error.message"); -1 when absent. */
static int recorded_type(const char *dir, int n, const char *key)
{
    char path[400];
    snprintf(path, sizeof path, "%s/req-%d", dir, n);
    size_t len = 0;
    char *body = slurp(path, &len);
    coord_msg m;
    coord_msg_init(&m);
    int type = -1;
    if (coord_msg_parse(&m, (const uint8_t *)body, len) == COORD_FRAME_OK) {
        const msgpack_object_map *map = m.map;
        const char *dot = strchr(key, '.');
        char first[64];
        snprintf(first, sizeof first, "%.*s", dot ? (int)(dot - key) : (int)strlen(key), key);
        const msgpack_object *v = coord_map_find(map, first);
        if (v && dot && v->type == MSGPACK_OBJECT_MAP)
            v = coord_map_find(&v->via.map, dot + 1);
        else if (dot)
            v = NULL;
        if (v)
            type = v->type;
    }
    coord_msg_destroy(&m);
    free(body);
    return type;
}

static void test_text_str_or_bin(void)
{
    struct fake f;
    struct broker_proc dirs;
    broker_paths(&dirs);
    fake_start(&f, fake_record, dirs.dir);
    int rc;
    coord_t *c = fake_connect(&f, 0, &rc);
    CHECK_EQ(rc, 0);
    if (c) {
        CHECK_EQ(coord_lock_acquire(c, S("\xc3\xa9"), NULL, NULL, NULL), 0);   /* req-0 */
        CHECK_EQ(coord_lock_acquire(c, S("a\xff"), NULL, NULL, NULL), 0);      /* req-1 */
        coord_leader_define_opts o = { .set = COORD_DESC_FALLBACK,
                                       .fallback = "ok\xff\xfe" };
        CHECK_EQ(coord_leader_define(c, S("w\xc3\xa9"), &o, NULL), 0);        /* req-2 */
        coord_req_t *r = coord_req_new("flight.fail");                         /* req-3 */
        coord_req_strmap2(r, "error", "code", "E\xff", "message", "caf\xc3\xa9");
        CHECK_EQ(coord_call(c, r, NULL), 0);
        coord_req_free(r);
        coord_close(c);
    }
    CHECK_EQ(recorded_type(dirs.dir, 0, "name"), MSGPACK_OBJECT_STR);
    CHECK_EQ(recorded_type(dirs.dir, 1, "name"), MSGPACK_OBJECT_BIN);
    CHECK_EQ(recorded_type(dirs.dir, 2, "workstream"), MSGPACK_OBJECT_STR);
    CHECK_EQ(recorded_type(dirs.dir, 2, "fallback"), MSGPACK_OBJECT_BIN);
    CHECK_EQ(recorded_type(dirs.dir, 3, "error.code"), MSGPACK_OBJECT_BIN);
    CHECK_EQ(recorded_type(dirs.dir, 3, "error.message"), MSGPACK_OBJECT_STR);
    fake_stop(&f);
    broker_cleanup(&dirs);
}

static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || (unsigned char)*s == 0x7f)
            return true;
    return false;
}

static void test_error_text_escaped(void)
{
    struct fake f;
    struct broker_proc dirs;
    broker_paths(&dirs);
    fake_start(&f, fake_record, dirs.dir);
    int rc;
    coord_t *c = fake_connect(&f, 0, &rc);
    CHECK_EQ(rc, 0);
    if (c) {
        CHECK_EQ(coord_ping(c), COORD_ELIMIT);
        const char *m = coord_error_message(c);
        CHECK(!has_control(m));
        CHECK_MSG(strstr(m, "bad\\x1b[31mred\\x0aline\\x7f\\xff") != NULL, "%s", m);
        coord_close(c);
    }
    struct run r;
    ctl_spawn(&r, f.paths.sock, dirs.dir, &(struct ctl_opts){ .pipes = true },
              ARGS("ping", "-c", "1"));
    CHECK(run_finish(&r, T) > 0);
    const char *err = run_text(&r, ERR);
    CHECK_MSG(strstr(err, "bad\\x1b[31mred") != NULL, "%s", err);
    CHECK(!strchr(err, '\x1b'));
    run_free(&r);
    fake_stop(&f);
    broker_cleanup(&dirs);
}

/* coordctl --json: "é" as UTF-8, a name that is not UTF-8 as base64. */
static void test_ctl_json_text(void)
{
    memset(&bp, 0, sizeof bp);
    if (broker_start(&bp, NULL) != 0)
        exit(2);
    struct run r;
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = true },
              ARGS("--json", "leader", "define", "\xc3\xa9", "--fallback", "caf\xc3\xa9"));
    CHECK_EQ(run_finish(&r, T), 0);
    const char *out = run_text(&r, OUT);
    CHECK_MSG(strstr(out, "\"workstream\":\"\xc3\xa9\"") != NULL, "%s", out);
    CHECK_MSG(strstr(out, "\"fallback\":\"caf\xc3\xa9\"") != NULL, "%s", out);
    run_free(&r);
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = true },
              ARGS("--json", "leader", "define", "a\xff", "--fallback", "ok\xff\xfe"));
    CHECK_EQ(run_finish(&r, T), 0);
    out = run_text(&r, OUT);
    CHECK_MSG(strstr(out, "\"workstream\":{\"base64\":\"Yf8=\"}") != NULL, "%s", out);
    CHECK_MSG(strstr(out, "\"fallback\":{\"base64\":\"b2v//g==\"}") != NULL, "%s", out);
    run_free(&r);

    coord_t *a = real_lib("edges-json");
    CHECK_EQ(coord_lock_acquire(a, S("a\xff"), NULL, NULL, NULL), 0);
    CHECK_EQ(coord_lock_acquire(a, S("\xc3\xa9t\xc3\xa9"), NULL, NULL, NULL), 0);
    ctl_spawn(&r, bp.sock, bp.dir, &(struct ctl_opts){ .pipes = true },
              ARGS("--json", "locks"));
    CHECK_EQ(run_finish(&r, T), 0);
    out = run_text(&r, OUT);
    CHECK_MSG(strstr(out, "\"name\":{\"base64\":\"Yf8=\"}") != NULL, "%s", out);
    CHECK_MSG(strstr(out, "\"name\":\"\xc3\xa9t\xc3\xa9\"") != NULL, "%s", out);
    run_free(&r);
    coord_close(a);
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "grant_lost_cb_before", test_grant_lost_cb_before },
        { "grant_lost_cb_after", test_grant_lost_cb_after },
        { "campaign_lost_one_read", test_campaign_lost_one_read },
        { "real_grant_then_steal_one_read", test_real_grant_then_steal_one_read },
        { "real_ctl_lock_steal_one_read", test_real_ctl_lock_steal_one_read },
        { "huge_announced_max_frame", test_huge_announced_max_frame },
        { "frame_above_announced", test_frame_above_announced },
        { "event_flood_while_blocked", test_event_flood_while_blocked },
        { "silence_after_hello", test_silence_after_hello },
        { "text_str_or_bin", test_text_str_or_bin },
        { "error_text_escaped", test_error_text_escaped },
        { "ctl_json_text", test_ctl_json_text },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
