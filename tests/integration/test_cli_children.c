/* test_cli_children.c - what `coordctl lock`, `once` and `leader-run` do
 * with the processes CMD starts, as real processes against a real broker.
 *
 * CMD is a shell that starts `sleep 30` in the background (a grandchild
 * that keeps stdout open) and says the grandchild's pid on descriptor 5,
 * a pipe read here.  When coordctl is told to stop (SIGTERM) or loses its
 * hold (stolen lock or leadership, --ttl), it must end well within the
 * 30 s and the grandchild must be gone: CMD runs in its own process group
 * and the group is signalled.  In the foreground of a terminal (a pty
 * here) CMD stays in coordctl's group so that it can read the terminal.
 *
 * $COORD_BROKER is coordd and $COORDCTL is coordctl (set by meson).  The
 * test is the subreaper of what coordctl leaves, so "gone" is seen even
 * where init does not reap.  Exits are awaited through pidfds; only the
 * grandchild's end (it is no child of ours until orphaned) is polled, in
 * a bounded loop. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include "harness.h"

#define T 10000                 /* for what should be quick */
#define PROMPT_MS 5000          /* "promptly": well under the sleep's 30 s */

static struct broker_proc bp;

static const char *coordctl_bin(void)
{
    const char *p = getenv("COORDCTL");
    return p ? p : "coordctl";
}

/* ---- processes ---- */

static bool await_exit(pid_t pid, int timeout_ms)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return errno == ESRCH;
    struct pollfd p = { .fd = fd, .events = POLLIN };
    int n;
    while ((n = poll(&p, 1, timeout_ms)) < 0 && errno == EINTR)
        ;
    close(fd);
    return n == 1;
}

/* A coordctl process: stdout and stderr in files of bp's dir, descriptor
 * 5 the write end of a pipe whose read end is rep. */
struct run {
    pid_t pid;
    int rep;
    char out[400], err[400];
    int status;                 /* as a shell shows it; -1 hung, -2 running */
};

/* Starts `coordctl --socket bp.sock --no-autostart ARGS...` (NULL-ended)
 * in a session of its own: no controlling terminal, whatever the tests
 * run from.  tty: a pty slave to make its terminal instead (stdio too). */
static void ctl_start_on(struct run *r, const char *tty, const char *const *args)
{
    static int seq;
    int fds[2];
    memset(r, 0, sizeof *r);
    seq++;
    snprintf(r->out, sizeof r->out, "%s/ctl-%d.out", bp.dir, seq);
    snprintf(r->err, sizeof r->err, "%s/ctl-%d.err", bp.dir, seq);
    if (pipe2(fds, O_CLOEXEC) < 0)
        exit(2);
    fflush(stderr);
    r->pid = fork();
    if (r->pid < 0)
        exit(2);
    if (r->pid == 0) {
        setsid();
        const char *argv[64];
        int n = 0;
        argv[n++] = coordctl_bin();
        argv[n++] = "--socket";
        argv[n++] = bp.sock;
        argv[n++] = "--no-autostart";
        for (int i = 0; args[i] && n < 63; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        if (tty) {
            int t = open(tty, O_RDWR);     /* the session leader's: our terminal */
            if (t < 0 || ioctl(t, TIOCSCTTY, 0) < 0)
                _exit(120);
            dup2(t, 0);
            dup2(t, 1);
            dup2(t, 2);
        } else {
            int o = open(r->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            int e = open(r->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (o < 0 || e < 0)
                _exit(120);
            dup2(o, 1);
            dup2(e, 2);
        }
        if (fds[1] == 5)
            fcntl(5, F_SETFD, 0);
        else
            dup2(fds[1], 5);        /* clears close-on-exec */
        execv(argv[0], (char *const *)argv);
        _exit(121);
    }
    close(fds[1]);
    r->rep = fds[0];
    r->status = -2;
}

static void ctl_start(struct run *r, const char *const *args)
{
    ctl_start_on(r, NULL, args);
}

/* Reaps r within timeout_ms: its status, -1 when hung (then killed with
 * its session's group). */
static int ctl_finish(struct run *r, int timeout_ms)
{
    int st;
    if (!await_exit(r->pid, timeout_ms)) {
        fprintf(stderr, "coordctl %d did not end within %d ms: killing it\n",
                (int)r->pid, timeout_ms);
        kill(-r->pid, SIGKILL);
        waitpid(r->pid, &st, 0);
        r->status = -1;
    } else if (waitpid(r->pid, &st, 0) != r->pid) {
        r->status = -1;
    } else {
        r->status = WIFEXITED(st) ? WEXITSTATUS(st)
                  : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
    }
    return r->status;
}

static void ctl_free(struct run *r)
{
    if (r->status == -2)
        ctl_finish(r, 0);
    kill(-r->pid, SIGKILL);         /* leftovers of a failed test */
    close(r->rep);
}

/* Runs coordctl to its end: its status. */
static int ctl_run(const char *const *args)
{
    struct run r;
    ctl_start(&r, args);
    int st = ctl_finish(&r, T);
    ctl_free(&r);
    return st;
}

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* One line from the pipe on descriptor 5 (without its newline), within
 * timeout_ms; NULL on timeout or EOF. */
static const char *report_line(struct run *r, int timeout_ms)
{
    static char line[256];
    size_t n = 0;
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline)
            return NULL;
        struct pollfd p = { .fd = r->rep, .events = POLLIN };
        if (poll(&p, 1, (int)(deadline - now)) <= 0)
            continue;
        char c;
        ssize_t k = read(r->rep, &c, 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return NULL;
        if (c == '\n' || n + 1 == sizeof line) {
            line[n] = '\0';
            return line;
        }
        line[n++] = c;
    }
}

/* The grandchild's pid, as CMD reported it; 0 when it did not. */
static pid_t grandchild(struct run *r)
{
    const char *l = report_line(r, T);
    long pid = l ? strtol(l, NULL, 10) : 0;
    if (pid <= 1) {
        fprintf(stderr, "no grandchild pid reported (%s)\n", l ? l : "nothing");
        return 0;
    }
    return (pid_t)pid;
}

/* True when pid is gone within timeout_ms: no such process, or our zombie
 * (orphans come to us, the subreaper), which is reaped. */
static bool gone_within(pid_t pid, int timeout_ms)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return true;
        if (kill(pid, 0) < 0 && errno == ESRCH)
            return true;
        if (now_ms() >= deadline) {
            fprintf(stderr, "process %d still there after %d ms\n", (int)pid, timeout_ms);
            kill(pid, SIGKILL);
            return false;
        }
        poll(NULL, 0, 10);
    }
}

/* True when pid still runs (not a zombie). */
static bool alive(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    static char buf[8192];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return buf;
}

static bool file_has(const char *path, const char *needle)
{
    const char *s = slurp(path);
    if (strstr(s, needle))
        return true;
    fprintf(stderr, "%s does not contain \"%s\"; it holds:\n%s\n", path, needle, s);
    return false;
}

/* CMD: a grandchild that keeps stdout open, its pid on descriptor 5. */
static const char *const bg_wait = "sleep 30 & echo $! >&5; wait";
/* the same, with a grandchild that ignores SIGTERM (it says its pid once
 * it does) */
static const char *const bg_deaf =
    "sh -c 'trap \"\" TERM; echo $$ >&5; exec sleep 30' & wait";

/* Starts args (CMD reports its grandchild), does stop (signal coordctl,
 * or steal from it...), and checks that coordctl ends promptly with
 * status want and takes the grandchild with it.  r is left for more
 * checks (ctl_free it). */
static void stopped_promptly(struct run *r, const char *const *args,
                             void (*stop)(struct run *r), int want)
{
    ctl_start(r, args);
    pid_t g = grandchild(r);
    CHECK(g);
    if (!g)
        return;
    uint64_t t0 = now_ms();
    stop(r);
    int st = ctl_finish(r, T);
    uint64_t took = now_ms() - t0;
    CHECK_EQ_U(st, want);
    CHECK(took < PROMPT_MS);
    CHECK(gone_within(g, PROMPT_MS));
    if (st != want || took >= PROMPT_MS)
        fprintf(stderr, "coordctl took %llu ms, status %d; stderr:\n%s\n",
                (unsigned long long)took, st, slurp(r->err));
}

static void sigterm(struct run *r)
{
    kill(r->pid, SIGTERM);
}

/* ---- lock ---- */

static void steal_lock(struct run *r)
{
    (void)r;
    CHECK_EQ_U(ctl_run(ARGS("lock", "--steal", "L", "--", "true")), 0);
}

static void test_lock(void)
{
    start_or_exit(&bp, NULL);
    struct run r;
    /* told to stop: CMD's shell died of the SIGTERM */
    stopped_promptly(&r, ARGS("lock", "L", "--", "sh", "-c", bg_wait), sigterm, 143);
    ctl_free(&r);
    CHECK_EQ_U(ctl_run(ARGS("lock", "-n", "L", "--", "true")), 0);   /* released */

    /* stolen */
    stopped_promptly(&r, ARGS("lock", "L", "--", "sh", "-c", bg_wait), steal_lock, 143);
    CHECK(file_has(r.err, "coordctl: lock: lost L (stolen)\n"));
    ctl_free(&r);

    /* a grandchild deaf to SIGTERM gets SIGKILL after the grace */
    stopped_promptly(&r, ARGS("lock", "L", "--", "sh", "-c", bg_deaf), sigterm, 143);
    ctl_free(&r);
    CHECK_EQ_U(ctl_run(ARGS("lock", "-n", "L", "--", "true")), 0);
    stop_and_clean(&bp);
}

/* ---- leader-run ---- */

static void steal_leadership(struct run *r)
{
    (void)r;
    CHECK_EQ_U(ctl_run(ARGS("leader-run", "--steal", "W", "--", "true")), 0);
}

static void test_leader_run(void)
{
    start_or_exit(&bp, NULL);
    struct run r;
    stopped_promptly(&r, ARGS("leader-run", "W", "--", "sh", "-c", bg_wait), sigterm, 143);
    ctl_free(&r);
    CHECK_EQ_U(ctl_run(ARGS("leader-run", "-n", "W", "--", "true")), 0);   /* resigned */

    stopped_promptly(&r, ARGS("leader-run", "W", "--", "sh", "-c", bg_wait),
                     steal_leadership, 143);
    CHECK(file_has(r.err, "coordctl: leader-run: lost leadership of W (stolen)\n"));
    ctl_free(&r);
    stop_and_clean(&bp);
}

/* ---- once ---- */

static void ttl_passes(struct run *r)
{
    (void)r;                        /* --ttl 0.5 stops it by itself */
}

static void test_once(void)
{
    start_or_exit(&bp, NULL);
    struct run r;
    /* told to stop: the grandchild held the captured stdout */
    stopped_promptly(&r, ARGS("once", "K", "--", "sh", "-c", bg_wait), sigterm, 143);
    ctl_free(&r);
    /* the owner's time is up */
    stopped_promptly(&r, ARGS("once", "--ttl", "0.5", "K", "--", "sh", "-c", bg_wait),
                     ttl_passes, 143);
    CHECK(file_has(r.err, "the owner's time (--ttl) is up"));
    ctl_free(&r);
    /* deaf to SIGTERM and holding the pipe */
    stopped_promptly(&r, ARGS("once", "K", "--", "sh", "-c", bg_deaf), sigterm, 143);
    ctl_free(&r);

    /* CMD ends by itself, a background child keeps its stdout: the result
     * is what came, and the child (not stopped for anything) runs on */
    ctl_start(&r, ARGS("once", "--keep", "60", "K2", "--", "sh", "-c",
                       "sleep 30 & echo $! >&5; echo hi"));
    pid_t g = grandchild(&r);
    uint64_t t0 = now_ms();
    CHECK_EQ_U(ctl_finish(&r, T), 0);
    CHECK(now_ms() - t0 < PROMPT_MS);
    CHECK(!strcmp(slurp(r.out), "hi\n"));
    CHECK(file_has(r.err, "coordctl: once: K2: the command ended but its stdout "
                          "stays open (a background process?): not waiting for the rest\n"));
    CHECK(g && alive(g));
    if (g) {
        kill(g, SIGKILL);
        CHECK(gone_within(g, T));
    }
    ctl_free(&r);
    /* and it was shared: the kept result */
    ctl_start(&r, ARGS("once", "--keep", "60", "K2", "--", "false"));
    CHECK_EQ_U(ctl_finish(&r, T), 0);
    CHECK(!strcmp(slurp(r.out), "hi\n"));
    ctl_free(&r);
    stop_and_clean(&bp);
}

/* ---- in the foreground of a terminal ---- */

/* Reads the pty master until text contains needle (within timeout_ms). */
static bool pty_expect(int master, const char *needle, int timeout_ms)
{
    char text[4096];
    size_t n = 0;
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        text[n] = '\0';
        if (strstr(text, needle))
            return true;
        uint64_t now = now_ms();
        struct pollfd p = { .fd = master, .events = POLLIN };
        if (now >= deadline || n + 1 >= sizeof text ||
            poll(&p, 1, (int)(deadline - now)) <= 0)
            break;
        ssize_t k = read(master, text + n, sizeof text - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    fprintf(stderr, "the terminal did not show \"%s\"; it showed:\n%s\n", needle, text);
    return false;
}

static int pty_open(char *slave, size_t size)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, slave, size) != 0) {
        perror("pty");
        exit(2);
    }
    return m;
}

static void test_terminal_foreground(void)
{
    start_or_exit(&bp, NULL);
    char slave[128];
    struct run r;

    /* CMD reads the terminal (in a group of its own: stopped by SIGTTIN) */
    int m = pty_open(slave, sizeof slave);
    ctl_start_on(&r, slave, ARGS("lock", "L", "--", "sh", "-c",
                                 "echo ready >&5; read x; echo \"got $x\""));
    const char *l = report_line(&r, T);
    CHECK(l && !strcmp(l, "ready"));
    if (!l)
        fprintf(stderr, "coordctl on %s: status %d\n", slave, ctl_finish(&r, T));
    CHECK(write(m, "hello\n", 6) == 6);
    CHECK(pty_expect(m, "got hello", PROMPT_MS));
    CHECK_EQ_U(ctl_finish(&r, T), 0);
    ctl_free(&r);
    close(m);

    /* ^C goes to the terminal's foreground group: CMD and its children */
    m = pty_open(slave, sizeof slave);
    ctl_start_on(&r, slave, ARGS("lock", "L", "--", "sh", "-c", bg_wait));
    pid_t g = grandchild(&r);
    REQUIRE(g);
    uint64_t t0 = now_ms();
    CHECK(write(m, "\003", 1) == 1);
    CHECK_EQ_U(ctl_finish(&r, T), 130);
    CHECK(now_ms() - t0 < PROMPT_MS);
    CHECK(gone_within(g, PROMPT_MS));
    ctl_free(&r);
    close(m);
    CHECK_EQ_U(ctl_run(ARGS("lock", "-n", "L", "--", "true")), 0);
    stop_and_clean(&bp);
}

int main(int argc, char **argv)
{
    /* what coordctl leaves behind comes to us, to be reaped */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    static const struct test_case tests[] = {
        { "lock", test_lock },
        { "leader_run", test_leader_run },
        { "once", test_once },
        { "terminal_foreground", test_terminal_foreground },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
