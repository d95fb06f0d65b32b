/* test_client_locks.c - libcoord and coordctl against real brokers: concurrent
 * autostart, the library's lock calls (blocking, async, cancel, lock.lost
 * events), and `coordctl lock` / `coordctl locks` as real processes.
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson). */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"
#include "leader-util.h"

#define T 10000   /* ms to wait for something that must happen */

static struct broker_proc bp;

static void start(void)
{
    memset(&bp, 0, sizeof bp);
    if (broker_start(&bp, NULL) != 0)
        exit(2);
}

static void stop(void)
{
    broker_kill(&bp, SIGTERM);
    broker_cleanup(&bp);
}

/* A libcoord connection to bp (never autostarts). */
static coord_t *lib(const char *client)
{
    return lib_connect(&bp, NULL, client);
}


/* ---- processes (proc.h) ---- */

/* Starts `coordctl --socket bp.sock --no-autostart ARGS...` (args
 * NULL-terminated) with stdout/stderr in files of bp's dir and the given
 * descriptors passed on. */
static void ctl_start(struct run *r, const struct pass_fd *pass,
                      const char *const *args)
{
    ctl_spawn(r, bp.sock, bp.dir, &(struct ctl_opts){ .pass = pass }, args);
}

/* Runs coordctl to the end: its exit status (-1: hung). */
static int ctl_run(struct run *r, const char *const *args)
{
    ctl_start(r, NULL, args);
    return child_status(r->pid, T);
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

static void xpipe(int p[2])
{
    if (pipe2(p, O_CLOEXEC) < 0) {
        perror("pipe");
        exit(2);
    }
}

/* ---- lock.query through libcoord ---- */

struct held_entry { bool found; uint64_t token, pid, lock; };

/* The held (or pending) entry for name, and how many match it. */
static int query_count(coord_t *c, const char *list, const char *name,
                       struct held_entry *first)
{
    coord_reply_t *r = NULL;
    if (coord_lock_query(c, &r) != 0)
        return -1;
    coord_map m = coord_reply_map(r);
    int count = 0;
    if (first)
        memset(first, 0, sizeof *first);
    for (size_t i = 0; i < coord_map_array_len(m, list); i++) {
        coord_map e;
        const char *s;
        size_t n;
        if (!coord_map_array_at(m, list, i, &e) || !coord_map_str(e, "name", &s, &n))
            continue;
        if (n != strlen(name) || (n && memcmp(s, name, n) != 0))
            continue;
        if (count++ == 0 && first) {
            first->found = true;
            coord_map_uint(e, "token", &first->token);
            coord_map_uint(e, "pid", &first->pid);
            coord_map_uint(e, "lock", &first->lock);
        }
    }
    coord_reply_free(r);
    return count;
}

/* ==== 50 clients autostarting at once leave exactly one broker ==== */

struct pid_list {
    pid_t *out;
    int max, n;
    const char *arg;
};

static void add_pid(struct pid_list *l, pid_t pid)
{
    if (l->n < l->max)
        l->out[l->n] = pid;
    l->n++;
}

static void with_arg(pid_t pid, void *ud)
{
    struct pid_list *l = ud;
    char buf[4096];
    ssize_t len = proc_read(pid, "cmdline", buf, sizeof buf);
    if (len <= 0)
        return;                     /* zombies and kernel threads */
    for (ssize_t i = 0; i < len; i += (ssize_t)strlen(buf + i) + 1)
        if (strcmp(buf + i, l->arg) == 0) {
            add_pid(l, pid);
            return;
        }
}

/* pids of live processes whose command line holds the argument arg */
static int procs_with_arg(const char *arg, pid_t *out, int max)
{
    struct pid_list l = { out, max, 0, arg };
    return proc_each(with_arg, &l) < 0 ? -1 : l.n;
}

static void child_of_mine(pid_t pid, void *ud)
{
    char state;
    pid_t ppid;
    if (proc_stat(pid, &state, &ppid) && ppid == getpid())
        add_pid(ud, pid);
}

/* Children of this process that are still there (zombies included). */
static int my_children(pid_t *out, int max)
{
    struct pid_list l = { out, max, 0, NULL };
    return proc_each(child_of_mine, &l) < 0 ? -1 : l.n;
}

#define NCLIENTS 50

static void test_autostart_race(void)
{
    struct broker_proc paths;
    broker_paths(&paths);                 /* a temp dir, no broker in it */
    setenv("COORD_DATA_DIR", paths.data, 1);
    /* the brokers are double-forked: as subreaper we inherit them, so the
     * losers of the race can be awaited and the winner reaped */
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    int go[2], res[2];
    xpipe(go);
    xpipe(res);
    pid_t kids[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        kids[i] = fork();
        if (kids[i] < 0) {
            perror("fork");
            exit(2);
        }
        if (kids[i] == 0) {
            close(go[1]);
            char b;
            while (read(go[0], &b, 1) < 0 && errno == EINTR)
                ;                             /* EOF: everybody goes */
            coord_options o;
            coord_options_init(&o);
            o.socket_path = paths.sock;
            o.broker_path = broker_binary();
            o.connect_timeout_ms = 20000;     /* 50 at once, maybe under ASan */
            coord_t *c = NULL;
            uint64_t pid = 0;
            int rc = coord_connect(&c, &o);
            if (rc == 0)
                rc = coord_ping(c);
            if (rc == 0) {
                coord_req_t *q = coord_req_new("stats");
                coord_reply_t *r = NULL;
                rc = coord_call(c, q, &r);
                if (rc == 0 && !coord_map_uint(coord_reply_map(r), "pid", &pid))
                    rc = -1;
                coord_reply_free(r);
                coord_req_free(q);
            }
            if (rc != 0)
                fprintf(stderr, "client %d: %s: %s\n", i, coord_strerror(rc),
                        coord_error_message(c));
            coord_close(c);
            if (write(res[1], &pid, sizeof pid) != sizeof pid)
                _exit(3);
            _exit(rc == 0 ? 0 : 1);
        }
    }
    close(go[0]);
    close(res[1]);
    close(go[1]);                             /* release them together */

    int ok = 0;
    for (int i = 0; i < NCLIENTS; i++)
        ok += child_status(kids[i], 60000) == 0;
    CHECK_EQ_U(ok, NCLIENTS);

    uint64_t pids[NCLIENTS], broker_pid = 0;
    int got = 0;
    while (got < NCLIENTS && read(res[0], &pids[got], sizeof pids[got]) ==
                                 (ssize_t)sizeof pids[got])
        got++;
    close(res[0]);
    CHECK_EQ_U(got, NCLIENTS);
    int same = 0;
    for (int i = 0; i < got; i++) {
        if (i == 0)
            broker_pid = pids[0];
        same += pids[i] == broker_pid && pids[i] != 0;
    }
    CHECK_EQ_U(same, NCLIENTS);               /* everybody met the same broker */

    /* every other broker started in the race ends by itself */
    pid_t ch[256];
    int nch = my_children(ch, 256);
    int losers = 0;
    for (int i = 0; i < nch && i < 256; i++) {
        if ((uint64_t)ch[i] == broker_pid)
            continue;
        losers++;
        CHECK(child_status(ch[i], T) >= 0);
    }
    pid_t found[16];
    int n = procs_with_arg(paths.sock, found, 16);
    CHECK_EQ_U(n, 1);
    if (n >= 1)
        CHECK_EQ_U((uint64_t)found[0], broker_pid);
    fprintf(stderr, "  %d brokers lost the race\n", losers);

    if (broker_pid) {
        kill((pid_t)broker_pid, SIGTERM);
        CHECK_EQ_U(child_status((pid_t)broker_pid, T), 0);
    }
    CHECK_EQ_U(procs_with_arg(paths.sock, found, 16), 0);
    CHECK(!exists(paths.sock));

    prctl(PR_SET_CHILD_SUBREAPER, 0);
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
    unsetenv("COORD_DATA_DIR");
    broker_cleanup(&paths);
}

/* ==== libcoord lock calls ==== */

static void test_lib_acquire(void)
{
    start();
    coord_t *a = lib("a"), *b = lib("b");
    uint64_t lock = 0, token = 0, l2 = 7, t2 = 7;
    CHECK_EQ_U(coord_lock_acquire(a, S("res"), NULL, &lock, &token), 0);
    CHECK(lock != 0 && token != 0);

    coord_lock_opts o = { .if_available = true };
    CHECK_EQ_U(coord_lock_acquire(b, S("res"), &o, &l2, &t2), COORD_LOCK_BUSY);
    CHECK(l2 == 0 && t2 == 0);

    o = (coord_lock_opts){ .timeout_ms = 50 };
    uint64_t t0 = now_ms();
    CHECK_EQ_U(coord_lock_acquire(b, S("res"), &o, &l2, NULL), COORD_ETIMEOUT);
    CHECK(now_ms() - t0 >= 45);
    /* said in the caller's terms, not the broker's field names */
    CHECK_STR(coord_error_message(b), "lock not granted: timed out after 0.05 s");

    /* refused options queue nothing */
    o = (coord_lock_opts){ .steal = true, .if_available = true };
    CHECK_EQ_U(coord_lock_acquire(b, S("res"), &o, NULL, NULL), COORD_EINVALID_OPTIONS);
    o = (coord_lock_opts){ .steal = true, .shared = true };
    CHECK_EQ_U(coord_lock_acquire(b, S("res"), &o, NULL, NULL), COORD_EINVALID_OPTIONS);
    o = (coord_lock_opts){ .if_available = true, .timeout_ms = 5 };
    CHECK_EQ_U(coord_lock_acquire(b, S("res"), &o, NULL, NULL), COORD_EINVALID_OPTIONS);
    CHECK_EQ_U(coord_lock_acquire(b, S("-mine"), NULL, NULL, NULL), COORD_ENAME_RESERVED);
    CHECK_EQ_U(coord_lock_acquire(b, NULL, 3, NULL, NULL, NULL), COORD_EINVAL);
    CHECK_EQ_U(query_count(a, "pending", "res", NULL), 0);

    /* shared locks go together; any bytes make a name */
    o = (coord_lock_opts){ .shared = true };
    uint64_t s1, s2;
    CHECK_EQ_U(coord_lock_acquire(a, "\0sh", 3, &o, &s1, NULL), 0);
    CHECK_EQ_U(coord_lock_acquire(b, "\0sh", 3, &o, &s2, NULL), 0);
    CHECK(s1 != s2);
    CHECK_EQ_U(coord_lock_acquire(b, "", 0, NULL, NULL, NULL), 0);

    struct held_entry h;
    CHECK_EQ_U(query_count(b, "held", "res", &h), 1);
    CHECK(h.found && h.token == token && h.lock == lock && h.pid == (uint64_t)getpid());

    /* renew: a lease, renewed, then dropped */
    CHECK_EQ_U(coord_lock_renew(a, lock, 60000), 0);
    CHECK_EQ_U(coord_lock_renew(a, lock, 0), 0);
    CHECK_EQ_U(coord_lock_renew(b, lock, 1000), COORD_EUNKNOWN_LOCK);

    /* release: then the name is free for the next request */
    CHECK_EQ_U(coord_lock_release(b, lock), COORD_EUNKNOWN_LOCK);   /* not b's */
    CHECK_EQ_U(coord_lock_release(a, lock), 0);
    CHECK_EQ_U(coord_lock_release(a, lock), COORD_EUNKNOWN_LOCK);   /* twice */
    o = (coord_lock_opts){ .if_available = true };
    CHECK_EQ_U(coord_lock_acquire(b, S("res"), &o, &l2, &t2), 0);
    CHECK(t2 > token);                         /* fencing tokens increase */
    coord_close(a);
    coord_close(b);
    stop();
}

struct async_result {
    int calls;
    int status;
    uint64_t lock, token;
};

static void on_lock(coord_t *c, int status, uint64_t lock, uint64_t token, void *ud)
{
    struct async_result *r = ud;
    (void)c;
    r->calls++;
    r->status = status;
    r->lock = lock;
    r->token = token;
}

/* Dispatches c until r has its answer (or T passes). */
static bool await_cb(coord_t *c, struct async_result *r)
{
    uint64_t end = now_ms() + T;
    while (r->calls == 0 && now_ms() < end)
        if (coord_wait(c, (int)(end - now_ms())) < 0)
            break;
    return r->calls == 1;
}

static void test_lib_async_and_cancel(void)
{
    start();
    coord_t *a = lib("a"), *b = lib("b");
    uint64_t lock, rid = 0;
    REQUIRE(coord_lock_acquire(a, S("q"), NULL, &lock, NULL) == 0);

    /* waiting, then cancelled */
    struct async_result r1 = { 0 };
    CHECK_EQ_U(coord_lock_acquire_async(b, S("q"), NULL, on_lock, &r1, &rid), 0);
    CHECK(rid != 0);
    CHECK_EQ_U(coord_ping(b), 0);              /* the broker has queued it */
    CHECK_EQ_U(r1.calls, 0);
    CHECK_EQ_U(query_count(a, "pending", "q", NULL), 1);
    CHECK_EQ_U(coord_cancel(b, rid), 0);
    CHECK(await_cb(b, &r1));
    CHECK_EQ_U(r1.status, COORD_EABORTED);
    CHECK(r1.lock == 0 && r1.token == 0);
    CHECK_EQ_U(query_count(a, "pending", "q", NULL), 0);

    /* if_available, async */
    struct async_result r2 = { 0 };
    coord_lock_opts o = { .if_available = true };
    CHECK_EQ_U(coord_lock_acquire_async(b, S("q"), &o, on_lock, &r2, NULL), 0);
    CHECK(await_cb(b, &r2));
    CHECK_EQ_U(r2.status, COORD_LOCK_BUSY);

    /* waiting, then granted when the holder releases */
    struct async_result r3 = { 0 };
    CHECK_EQ_U(coord_lock_acquire_async(b, S("q"), NULL, on_lock, &r3, &rid), 0);
    CHECK_EQ_U(coord_ping(b), 0);
    CHECK_EQ_U(r3.calls, 0);
    CHECK_EQ_U(coord_lock_release(a, lock), 0);
    CHECK(await_cb(b, &r3));
    CHECK_EQ_U(r3.status, 0);
    CHECK(r3.lock != 0 && r3.token != 0);
    /* cancelling after the grant changes nothing */
    CHECK_EQ_U(coord_cancel(b, rid), 0);
    CHECK_EQ_U(coord_ping(b), 0);
    struct held_entry h;
    CHECK_EQ_U(query_count(a, "held", "q", &h), 1);
    CHECK(h.lock == r3.lock && h.token == r3.token);

    /* a blocking timeout while an async request waits on the same handle */
    struct async_result r4 = { 0 };
    CHECK_EQ_U(coord_lock_acquire_async(a, S("q"), NULL, on_lock, &r4, NULL), 0);
    o = (coord_lock_opts){ .timeout_ms = 30 };
    CHECK_EQ_U(coord_lock_acquire(a, S("q"), &o, NULL, NULL), COORD_ETIMEOUT);
    CHECK_EQ_U(r4.calls, 0);
    /* closing a's handle answers its waiting request */
    coord_close(a);
    CHECK_EQ_U(r4.calls, 1);
    CHECK_EQ_U(r4.status, COORD_ECLOSED);

    /* and a timed-out async request */
    struct async_result r5 = { 0 };
    coord_t *c = lib("c");
    o = (coord_lock_opts){ .timeout_ms = 30 };
    CHECK_EQ_U(coord_lock_acquire_async(c, S("q"), &o, on_lock, &r5, NULL), 0);
    CHECK(await_cb(c, &r5));
    CHECK_EQ_U(r5.status, COORD_ETIMEOUT);
    CHECK_STR(coord_error_message(c), "lock not granted: timed out after 0.03 s");
    /* a follower's wait too */
    coord_flight f;
    CHECK_EQ_U(coord_flight_join(b, S("fk"), NULL, &f), 0);
    CHECK_EQ_U(f.role, COORD_FLIGHT_OWNER);
    coord_flight_clear(&f);
    coord_flight_opts fo = { .wait_ms = 30 };
    CHECK_EQ_U(coord_flight_join(c, S("fk"), &fo, &f), COORD_ETIMEOUT);
    CHECK_STR(coord_error_message(c), "no result: timed out after 0.03 s");
    coord_close(c);
    coord_close(b);
    stop();
}

struct lost_seen {
    int calls;
    uint64_t lock, token;
    char name[32], reason[32];
};

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct lost_seen *s = ud;
    coord_lock_lost l;
    (void)c;
    if (!coord_event_lock_lost(ev, &l))
        return;
    s->calls++;
    s->lock = l.lock;
    s->token = l.token;
    snprintf(s->name, sizeof s->name, "%.*s", (int)l.name_len, l.name);
    snprintf(s->reason, sizeof s->reason, "%.*s", (int)l.reason_len, l.reason);
}

static void test_lib_lock_lost(void)
{
    start();
    coord_t *a = lib("a"), *b = lib("b");
    uint64_t la, ta, lb, tb;
    REQUIRE(coord_lock_acquire(a, S("s"), NULL, &la, &ta) == 0);
    coord_lock_opts steal = { .steal = true };
    CHECK_EQ_U(coord_lock_acquire(b, S("s"), &steal, &lb, &tb), 0);
    CHECK(tb > ta);

    /* queued for coord_next_event */
    coord_reply_t *ev = NULL;
    REQUIRE(coord_next_event(a, T, &ev) == 0);
    CHECK(coord_reply_event(ev) && strcmp(coord_reply_event(ev), "lock.lost") == 0);
    coord_lock_lost l;
    CHECK(coord_event_lock_lost(ev, &l));
    CHECK_EQ_U(l.lock, la);
    CHECK_EQ_U(l.token, ta);
    CHECK(l.name_len == 1 && memcmp(l.name, "s", 1) == 0);
    CHECK(l.reason_len == 6 && memcmp(l.reason, "stolen", 6) == 0);
    coord_reply_free(ev);
    CHECK_EQ_U(coord_lock_release(a, la), COORD_EUNKNOWN_LOCK);
    CHECK_EQ_U(coord_next_event(a, 0, &ev), COORD_EAGAIN);   /* only one */
    CHECK(!coord_event_lock_lost(NULL, &l));

    /* through the event callback, while a waits in a blocking call */
    struct lost_seen seen = { 0 };
    coord_set_event_cb(b, on_event, &seen);
    CHECK_EQ_U(coord_lock_acquire(a, S("s"), &steal, &la, &ta), 0);
    CHECK_EQ_U(coord_ping(b), 0);             /* the event came before this reply */
    CHECK_EQ_U(seen.calls, 1);
    CHECK_EQ_U(seen.lock, lb);
    CHECK_EQ_U(seen.token, tb);
    CHECK(strcmp(seen.name, "s") == 0 && strcmp(seen.reason, "stolen") == 0);
    CHECK_EQ_U(coord_lock_release(b, lb), COORD_EUNKNOWN_LOCK);
    CHECK_EQ_U(coord_lock_release(a, la), 0);

    /* an expired lease */
    coord_lock_opts lease = { .lease_ms = 50 };
    REQUIRE(coord_lock_acquire(b, S("e"), &lease, &lb, &tb) == 0);
    uint64_t end = now_ms() + T;
    while (seen.calls < 2 && now_ms() < end)
        if (coord_wait(b, (int)(end - now_ms())) < 0)
            break;
    CHECK_EQ_U(seen.calls, 2);
    CHECK_EQ_U(seen.lock, lb);
    CHECK(strcmp(seen.name, "e") == 0 && strcmp(seen.reason, "expired") == 0);
    CHECK_EQ_U(coord_lock_renew(b, lb, 50), COORD_EUNKNOWN_LOCK);
    CHECK_EQ_U(coord_lock_release(b, lb), COORD_EUNKNOWN_LOCK);
    coord_close(a);
    coord_close(b);
    stop();
}

/* ==== coordctl lock ==== */

static void test_ctl_nonblock(void)
{
    start();
    coord_t *a = lib("holder");
    uint64_t lock;
    REQUIRE(coord_lock_acquire(a, S("nb"), NULL, &lock, NULL) == 0);
    char marker[400], script[600];
    snprintf(marker, sizeof marker, "%s/ran", bp.dir);
    snprintf(script, sizeof script, "touch '%s'", marker);
    struct run r;

    const char *busy[] = { "lock", "-n", "nb", "--", "sh", "-c", script, NULL };
    CHECK_EQ_U(ctl_run(&r, busy), 1);
    CHECK(!exists(marker));
    CHECK(file_has(r.err, "coordctl: lock: nb is busy"));

    /* -w 0 is -n */
    const char *w0[] = { "lock", "-w", "0", "nb", "--", "sh", "-c", script, NULL };
    CHECK_EQ_U(ctl_run(&r, w0), 1);
    CHECK(!exists(marker));

    /* -w: gives up after the time, with a clear message */
    const char *w[] = { "lock", "-w", "0.1", "nb", "--", "sh", "-c", script, NULL };
    uint64_t t0 = now_ms();
    CHECK_EQ_U(ctl_run(&r, w), 1);
    CHECK(now_ms() - t0 >= 100);
    CHECK(!exists(marker));
    CHECK(file_has(r.err, "timed out after 0.1 s waiting for nb"));

    /* a shared holder does not block -s -n */
    CHECK_EQ_U(coord_lock_release(a, lock), 0);
    coord_lock_opts sh = { .shared = true };
    REQUIRE(coord_lock_acquire(a, S("nb"), &sh, &lock, NULL) == 0);
    const char *shared[] = { "lock", "-s", "-n", "nb", "--", "sh", "-c", script, NULL };
    CHECK_EQ_U(ctl_run(&r, shared), 0);
    CHECK(exists(marker));
    unlink(marker);
    CHECK_EQ_U(ctl_run(&r, busy), 1);         /* exclusive still busy */
    CHECK(!exists(marker));

    /* free: runs */
    CHECK_EQ_U(coord_lock_release(a, lock), 0);
    CHECK_EQ_U(ctl_run(&r, busy), 0);
    CHECK(exists(marker));
    CHECK_EQ_U(query_count(a, "held", "nb", NULL), 0);   /* released after */

    /* usage errors: exit 2 */
    const char *u1[] = { "lock", "nb", NULL };
    CHECK_EQ_U(ctl_run(&r, u1), 2);
    const char *u2[] = { "lock", "--steal", "-s", "nb", "--", "true", NULL };
    CHECK_EQ_U(ctl_run(&r, u2), 2);
    const char *u3[] = { "lock", "-w", "soon", "nb", "--", "true", NULL };
    CHECK_EQ_U(ctl_run(&r, u3), 2);
    coord_close(a);
    stop();
}

static void test_ctl_exit_status(void)
{
    start();
    struct run r;
    const char *seven[] = { "lock", "x", "--", "sh", "-c", "exit 7", NULL };
    CHECK_EQ_U(ctl_run(&r, seven), 7);
    const char *ok[] = { "lock", "x", "true", NULL };          /* no "--" */
    CHECK_EQ_U(ctl_run(&r, ok), 0);
    const char *killed[] = { "lock", "x", "--", "sh", "-c", "kill -9 $$", NULL };
    CHECK_EQ_U(ctl_run(&r, killed), 128 + 9);
    const char *missing[] = { "lock", "x", "--", "/nonexistent/cmd", NULL };
    CHECK_EQ_U(ctl_run(&r, missing), 127);
    CHECK(file_has(r.err, "/nonexistent/cmd"));
    /* nothing left held */
    coord_t *a = lib("a");
    CHECK_EQ_U(query_count(a, "held", "x", NULL), 0);
    coord_close(a);
    /* no broker: 3 */
    stop();
    const char *nob[] = { "lock", "x", "--", "true", NULL };
    memset(&bp, 0, sizeof bp);
    broker_paths(&bp);
    CHECK_EQ_U(ctl_run(&r, nob), 3);
    broker_cleanup(&bp);
}

/* coordctl runs CMD, which reports on fd 5 and waits for a line on fd 6. */
struct held_run {
    struct run r;
    int report_r, go_w;
};

static bool held_start(struct held_run *h, const char *const *lock_args,
                       const char *body)
{
    int rep[2], go[2];
    xpipe(rep);
    xpipe(go);
    char script[512];
    snprintf(script, sizeof script, "%s; read x <&6", body);
    const char *args[32];
    int n = 0;
    for (int i = 0; lock_args[i]; i++)
        args[n++] = lock_args[i];
    args[n++] = "--";
    args[n++] = "sh";
    args[n++] = "-c";
    args[n++] = script;
    args[n] = NULL;
    struct pass_fd pass[] = { { rep[1], 5 }, { go[0], 6 }, { -1, -1 } };
    ctl_start(&h->r, pass, args);
    close(rep[1]);
    close(go[0]);
    h->report_r = rep[0];
    h->go_w = go[1];
    return true;
}

/* Lets CMD finish; returns coordctl's exit status. */
static int held_finish(struct held_run *h)
{
    /* EPIPE is fine: coordctl and CMD may be gone already */
    ssize_t w = write(h->go_w, "\n", 1);
    (void)w;
    close(h->go_w);
    close(h->report_r);
    return child_status(h->r.pid, T);
}

static void test_ctl_token_env(void)
{
    start();
    coord_t *a = lib("observer");
    struct held_run h;
    const char *args[] = { "lock", "tok", NULL };
    held_start(&h, args, "echo \"$COORD_LOCK_TOKEN $COORD_LOCK_NAME\" >&5");
    char line[128];
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    unsigned long long tok = 0;
    char name[32] = "";
    CHECK(sscanf(line, "%llu %31s", &tok, name) == 2);
    CHECK(strcmp(name, "tok") == 0);
    struct held_entry e;
    CHECK_EQ_U(query_count(a, "held", "tok", &e), 1);
    CHECK(tok != 0 && e.token == tok);
    CHECK_EQ_U(e.pid, (uint64_t)h.r.pid);     /* held by coordctl itself */
    CHECK_EQ_U(held_finish(&h), 0);
    CHECK_EQ_U(query_count(a, "held", "tok", NULL), 0);

    /* the next holder's token is larger */
    held_start(&h, args, "echo \"$COORD_LOCK_TOKEN\" >&5");
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    CHECK(strtoull(line, NULL, 10) > tok);
    CHECK_EQ_U(held_finish(&h), 0);
    coord_close(a);
    stop();
}

/* The file must read start/end/start/end... pairs times. */
static void check_alternation(const char *path, int pairs)
{
    char *b = slurp(path, NULL);
    int lines = 0;
    bool ok = true;
    for (char *p = b, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl)
            break;
        *nl = '\0';
        const char *want = lines % 2 == 0 ? "start" : "end";
        if (strcmp(p, want) != 0) {
            if (ok)
                fprintf(stderr, "line %d of %s is \"%s\", not \"%s\"\n",
                        lines + 1, path, p, want);
            ok = false;
        }
        lines++;
    }
    CHECK(ok);
    CHECK_EQ_U(lines, 2 * pairs);
    free(b);
}

static void run_concurrent(int count, const char *file)
{
    char script[600];
    snprintf(script, sizeof script,
             "echo start >> '%s'; sleep 0.02; echo end >> '%s'", file, file);
    const char *args[] = { "lock", "together", "--", "sh", "-c", script, NULL };
    struct run r[16];
    for (int i = 0; i < count; i++)
        ctl_start(&r[i], NULL, args);
    int ok = 0;
    for (int i = 0; i < count; i++)
        ok += child_status(r[i].pid, 30000) == 0;
    CHECK_EQ_U(ok, count);
    check_alternation(file, count);
}

static void test_ctl_no_overlap(void)
{
    start();
    char f[400];
    snprintf(f, sizeof f, "%s/two", bp.dir);
    run_concurrent(2, f);
    snprintf(f, sizeof f, "%s/ten", bp.dir);
    run_concurrent(10, f);
    stop();
}

static void test_ctl_lost(void)
{
    start();
    coord_t *a = lib("thief");
    char line[64];

    /* stolen: CMD gets SIGTERM (sleep dies of it), coordctl says so */
    struct held_run h;
    const char *args[] = { "lock", "st", NULL };
    held_start(&h, args, "echo ready >&5; exec sleep 60");
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    coord_lock_opts steal = { .steal = true };
    uint64_t lock;
    CHECK_EQ_U(coord_lock_acquire(a, S("st"), &steal, &lock, NULL), 0);
    CHECK_EQ_U(held_finish(&h), 128 + SIGTERM);
    CHECK(file_has(h.r.err, "coordctl: lock: lost st (stolen)"));
    CHECK_EQ_U(coord_lock_release(a, lock), 0);

    /* a CMD that ignores SIGTERM and exits 0 still makes coordctl fail */
    held_start(&h, args, "trap 'kill $p; echo term >&5; exit 0' TERM; "
                         "sleep 60 & p=$!; echo ready >&5; wait $p");
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    CHECK_EQ_U(coord_lock_acquire(a, S("st"), &steal, &lock, NULL), 0);
    CHECK(fd_read_line(h.report_r, line, sizeof line, T) && strcmp(line, "term") == 0);
    CHECK_EQ_U(held_finish(&h), 1);
    CHECK(file_has(h.r.err, "lost st (stolen)"));
    CHECK_EQ_U(coord_lock_release(a, lock), 0);

    /* the broker dies */
    held_start(&h, args, "echo ready >&5; exec sleep 60");
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    coord_close(a);
    broker_kill(&bp, SIGKILL);
    int st = held_finish(&h);
    CHECK(st != 0 && st != -1);
    CHECK(file_has(h.r.err, "coordctl: lock: lost st (broker connection closed)"));
    stop();
}

static void test_ctl_signals_and_lease(void)
{
    start();
    coord_t *a = lib("a");
    char line[64];
    struct held_run h;
    const char *args[] = { "lock", "sig", NULL };

    /* SIGTERM to coordctl reaches CMD; the lock is released after */
    held_start(&h, args, "echo ready >&5; exec sleep 60");
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    kill(h.r.pid, SIGTERM);
    CHECK_EQ_U(held_finish(&h), 128 + SIGTERM);
    CHECK_EQ_U(query_count(a, "held", "sig", NULL), 0);

    /* SIGINT too, and a CMD that handles it decides the status */
    held_start(&h, args, "trap 'kill $p; exit 42' INT; "
                         "sleep 60 & p=$!; echo ready >&5; wait $p");
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    kill(h.r.pid, SIGINT);
    CHECK_EQ_U(held_finish(&h), 42);
    CHECK_EQ_U(query_count(a, "held", "sig", NULL), 0);

    /* --lease: renewed while CMD runs past several lease periods */
    const char *lease[] = { "lock", "--lease", "0.15", "sig", "--", "sh", "-c",
                            "sleep 0.6", NULL };
    struct run r;
    CHECK_EQ_U(ctl_run(&r, lease), 0);
    char *err = slurp(r.err, NULL);
    CHECK(strstr(err, "lost") == NULL);
    free(err);

    /* without renewals the lease expires: --lease shorter than a frozen
     * coordctl (SIGSTOP) lets the broker take the lock */
    const char *lease2[] = { "lock", "--lease", "0.1", "sig", NULL };
    held_start(&h, lease2, "echo ready >&5; exec sleep 60");
    REQUIRE(fd_read_line(h.report_r, line, sizeof line, T));
    kill(h.r.pid, SIGSTOP);
    uint64_t lock;
    CHECK_EQ_U(coord_lock_acquire(a, S("sig"), NULL, &lock, NULL), 0);  /* waits for expiry */
    kill(h.r.pid, SIGCONT);
    CHECK_EQ_U(held_finish(&h), 128 + SIGTERM);
    CHECK(file_has(h.r.err, "lost sig (expired)"));
    coord_close(a);
    stop();
}

/* ==== coordctl locks ==== */

static void test_ctl_locks_table(void)
{
    start();
    coord_t *a = lib("holder"), *b = lib("waiter");
    uint64_t lock, token, l2;
    REQUIRE(coord_lock_acquire(a, S("busy-one"), NULL, &lock, &token) == 0);
    REQUIRE(coord_lock_acquire(a, "we\x01rd\\", 6, NULL, &l2, NULL) == 0);
    struct async_result r1 = { 0 };
    CHECK_EQ_U(coord_lock_acquire_async(b, S("busy-one"), NULL, on_lock, &r1, NULL), 0);
    CHECK_EQ_U(coord_ping(b), 0);

    struct run r;
    const char *table[] = { "locks", NULL };
    CHECK_EQ_U(ctl_run(&r, table), 0);
    char *out = slurp(r.out, NULL);
    CHECK(strncmp(out, "STATE", 5) == 0);
    const char *cols[] = { "NAME", "MODE", "TOKEN", "CONN", "PID", "CLIENT", "AGE" };
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++)
        CHECK(strstr(out, cols[i]) != NULL);
    char tok[32];
    snprintf(tok, sizeof tok, "%llu", (unsigned long long)token);
    char *held = strstr(out, "\nheld ");
    char *pending = strstr(out, "\npending ");
    CHECK(held && pending && held < pending);
    if (held) {
        char *eol = strchr(held + 1, '\n');
        CHECK(strstr(held, "busy-one") && strstr(held, "busy-one") < eol);
        CHECK(strstr(held, tok) && strstr(held, tok) < eol);
        CHECK(strstr(held, "holder") && strstr(held, "holder") < eol);
    }
    if (pending) {
        CHECK(strstr(pending, "busy-one") != NULL);
        CHECK(strstr(pending, "waiter") != NULL);
    }
    CHECK(strstr(out, "we\\x01rd\\\\") != NULL);          /* escaped */
    CHECK(strchr(out, '\x01') == NULL);
    free(out);

    const char *json[] = { "--json", "locks", NULL };   /* a global flag */
    CHECK_EQ_U(ctl_run(&r, json), 0);
    out = slurp(r.out, NULL);
    CHECK(out[0] == '{' && strchr(out, '\n') == out + strlen(out) - 1);
    char *jh = strstr(out, "\"held\":[");
    char *jp = strstr(out, "\"pending\":[");
    CHECK(jh && jp);
    if (jh && jp) {
        CHECK(strstr(jh, "\"name\":\"busy-one\"") != NULL);
        CHECK(strstr(jp, "\"name\":\"busy-one\"") != NULL);
        CHECK(strstr(jp, "\"client\":\"waiter\"") != NULL);
        CHECK(strstr(out, tok) != NULL);
    }
    free(out);

    /* nothing: a plain line */
    coord_close(b);
    coord_close(a);
    CHECK_EQ_U(r1.status, COORD_ECLOSED);
    CHECK_EQ_U(ctl_run(&r, table), 0);
    CHECK(file_has(r.out, "no locks"));
    const char *extra[] = { "locks", "x", NULL };
    CHECK_EQ_U(ctl_run(&r, extra), 2);
    stop();
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "autostart_race", test_autostart_race },
        { "lib_acquire", test_lib_acquire },
        { "lib_async_cancel", test_lib_async_and_cancel },
        { "lib_lock_lost", test_lib_lock_lost },
        { "ctl_nonblock", test_ctl_nonblock },
        { "ctl_exit_status", test_ctl_exit_status },
        { "ctl_token_env", test_ctl_token_env },
        { "ctl_no_overlap", test_ctl_no_overlap },
        { "ctl_lost", test_ctl_lost },
        { "ctl_signals_and_lease", test_ctl_signals_and_lease },
        { "ctl_locks_table", test_ctl_locks_table },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
