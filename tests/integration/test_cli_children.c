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

/* ---- processes (proc.h) ---- */

/* Starts `coordctl --socket bp.sock --no-autostart ARGS...` (NULL-ended)
 * in a session of its own: no controlling terminal, whatever the tests
 * run from; stdout and stderr in files of bp's dir, descriptor 5 the write
 * end of a pipe whose read end is r->rep.  tty: a pty slave to make its
 * terminal instead (stdio too). */
static void ctl_start_on(struct run *r, const char *tty, const char *const *args)
{
    ctl_spawn(r, bp.sock, bp.dir,
              &(struct ctl_opts){ .session = true, .tty = tty, .report = true }, args);
}

static void ctl_start(struct run *r, const char *const *args)
{
    ctl_start_on(r, NULL, args);
}

/* Runs coordctl to its end: its status. */
static int ctl_run(const char *const *args)
{
    struct run r;
    ctl_start(&r, args);
    int st = run_finish(&r, T);
    run_free(&r);
    return st;
}

/* One line from the pipe on descriptor 5 (without its newline), within
 * timeout_ms; NULL on timeout or EOF. */
static const char *report_line(struct run *r, int timeout_ms)
{
    static char line[256];
    return fd_read_line(r->rep, line, sizeof line, timeout_ms) ? line : NULL;
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


/* CMD: a grandchild that keeps stdout open, its pid on descriptor 5. */
static const char *const bg_wait = "sleep 30 & echo $! >&5; wait";
/* a grandchild in the foreground of CMD's shell, its pid on descriptor 5 */
static const char *const fg_wait = "sh -c 'echo $$ >&5; exec sleep 30'; echo after";
/* the same, with a grandchild that ignores SIGTERM (it says its pid once
 * it does) */
static const char *const bg_deaf =
    "sh -c 'trap \"\" TERM; echo $$ >&5; exec sleep 30' & wait";

/* Starts args (CMD reports its grandchild), does stop (signal coordctl,
 * or steal from it...), and checks that coordctl ends promptly with
 * status want and takes the grandchild with it.  r is left for more
 * checks (run_free it). */
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
    int st = run_finish(r, T);
    uint64_t took = now_ms() - t0;
    CHECK_EQ_U(st, want);
    CHECK(took < PROMPT_MS);
    CHECK(gone_within(g, PROMPT_MS));
    if (st != want || took >= PROMPT_MS) {
        char *err = slurp(r->err, NULL);
        fprintf(stderr, "coordctl took %llu ms, status %d; stderr:\n%s\n",
                (unsigned long long)took, st, err);
        free(err);
    }
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
    run_free(&r);
    CHECK_EQ_U(ctl_run(ARGS("lock", "-n", "L", "--", "true")), 0);   /* released */

    /* stolen */
    stopped_promptly(&r, ARGS("lock", "L", "--", "sh", "-c", bg_wait), steal_lock, 143);
    CHECK(file_has(r.err, "coordctl: lock: lost L (stolen)\n"));
    run_free(&r);

    /* a grandchild deaf to SIGTERM gets SIGKILL after the grace */
    stopped_promptly(&r, ARGS("lock", "L", "--", "sh", "-c", bg_deaf), sigterm, 143);
    run_free(&r);
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
    run_free(&r);
    CHECK_EQ_U(ctl_run(ARGS("leader-run", "-n", "W", "--", "true")), 0);   /* resigned */

    stopped_promptly(&r, ARGS("leader-run", "W", "--", "sh", "-c", bg_wait),
                     steal_leadership, 143);
    CHECK(file_has(r.err, "coordctl: leader-run: lost leadership of W (stolen)\n"));
    run_free(&r);
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
    run_free(&r);
    /* the owner's time is up */
    stopped_promptly(&r, ARGS("once", "--ttl", "0.5", "K", "--", "sh", "-c", bg_wait),
                     ttl_passes, 143);
    CHECK(file_has(r.err, "the owner's time (--ttl) is up"));
    run_free(&r);
    /* deaf to SIGTERM and holding the pipe */
    stopped_promptly(&r, ARGS("once", "K", "--", "sh", "-c", bg_deaf), sigterm, 143);
    run_free(&r);

    /* CMD ends by itself, a background child keeps its stdout: the result
     * is what came, and the child (not stopped for anything) runs on */
    ctl_start(&r, ARGS("once", "--keep", "60", "K2", "--", "sh", "-c",
                       "sleep 30 & echo $! >&5; echo hi"));
    pid_t g = grandchild(&r);
    uint64_t t0 = now_ms();
    CHECK_EQ_U(run_finish(&r, T), 0);
    CHECK(now_ms() - t0 < PROMPT_MS);
    CHECK(file_is(r.out, "hi\n"));
    CHECK(file_has(r.err, "coordctl: once: K2: the command ended but its stdout "
                          "stays open (a background process?): not waiting for the rest\n"));
    CHECK(g && proc_alive(g));
    if (g) {
        kill(g, SIGKILL);
        CHECK(gone_within(g, T));
    }
    run_free(&r);
    /* and it was shared: the kept result */
    ctl_start(&r, ARGS("once", "--keep", "60", "K2", "--", "false"));
    CHECK_EQ_U(run_finish(&r, T), 0);
    CHECK(file_is(r.out, "hi\n"));
    run_free(&r);
    stop_and_clean(&bp);
}

/* ---- in the foreground of a terminal ---- */

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
        fprintf(stderr, "coordctl on %s: status %d\n", slave, run_finish(&r, T));
    CHECK(write(m, "hello\n", 6) == 6);
    CHECK(pty_expect(m, "got hello", PROMPT_MS));
    CHECK_EQ_U(run_finish(&r, T), 0);
    run_free(&r);
    close(m);

    /* ^C goes to the terminal's foreground group: CMD and its children.
     * The grandchild is a foreground child of CMD's shell: a background
     * job of a non-interactive shell ignores SIGINT (POSIX), and would go
     * only when its session's end hangs it up, a race with coordctl
     * giving the terminal back */
    m = pty_open(slave, sizeof slave);
    ctl_start_on(&r, slave, ARGS("lock", "L", "--", "sh", "-c", fg_wait));
    pid_t g = grandchild(&r);
    REQUIRE(g);
    uint64_t t0 = now_ms();
    CHECK(write(m, "\003", 1) == 1);
    CHECK_EQ_U(run_finish(&r, T), 130);
    CHECK(now_ms() - t0 < PROMPT_MS);
    CHECK(gone_within(g, PROMPT_MS));
    run_free(&r);
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
