/* test_datadir.c - one broker per data dir, and a start that fails says
 * why: a second broker on a served data dir (another socket) refuses with
 * one line naming the running broker's pid and socket, in the foreground
 * and as a daemon, and writes nothing into the first one's log; the broker
 * that holds the data dir publishes its own pid (after the daemon's
 * forks); a client that autostarts (libcoord, coordctl) against a served
 * data dir, an uncreatable one or a HOME that is a file gets the broker's
 * reason at once rather than a timeout; and a leaving broker of the same
 * socket still makes a harmless quiet exit. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coord.h"
#include "harness.h"

#define T 10000

static coord_msg m;

/* The reason a refused broker gives for a.data, served by pid at sock. */
static void in_use_line(char *out, size_t size, const struct broker_proc *a, pid_t pid)
{
    snprintf(out, size, "data dir %s is in use by the broker pid %d listening on %s "
             "(set COORD_SOCKET=%s to use it)", a->data, (int)pid, a->sock, a->sock);
}

/* The broker at bp answers, and it is pid. */
static void serves(const struct broker_proc *bp, pid_t pid)
{
    struct rcl *c = rcl_open(bp->sock, NULL);
    REQUIRE(c);
    rcl_request(c, "stats", 2);
    REQUIRE(rcl_reply(c, 2, 5000, &m) == 0);
    CHECK(msg_ok(&m));
    CHECK_EQ_U(msg_uint(&m, "pid"), (uint64_t)pid);
    rcl_close(c);
}

/* ==== a second broker on a served data dir refuses, naming the first ==== */

static void test_second_broker_refused(void)
{
    static struct broker_proc a, b;
    memset(&a, 0, sizeof a);
    REQUIRE(broker_start(&a, NULL) == 0);
    broker_paths(&b);                          /* its own socket and log ... */
    snprintf(b.data, sizeof b.data, "%s", a.data);   /* ... a's data dir */
    char want[1024];
    in_use_line(want, sizeof want, &a, a.pid);

    for (int fg = 1; fg >= 0; fg--) {          /* in the foreground, then as a daemon */
        unlink(b.log);
        int rfd;
        pid_t pid = broker_spawn(&b, NULL, fg, 0, &rfd);
        REQUIRE(pid > 0);
        char line[1200];
        CHECK(fd_read_line(rfd, line, sizeof line, T));
        close(rfd);
        char expect[1200];
        snprintf(expect, sizeof expect, "error %s", want);
        if (strcmp(line, expect) != 0) {
            check_failures++;
            fprintf(stderr, "ready fd said \"%s\"\n  expected \"%s\"\n", line, expect);
        }
        CHECK_EQ_U(child_status(pid, T), 1);
        /* exactly one line on stderr */
        snprintf(expect, sizeof expect, "coordd: %s\n", want);
        CHECK(file_is(b.log, expect));
        CHECK(access(b.sock, F_OK) != 0);
    }
    /* the first one still serves */
    serves(&a, a.pid);
    broker_kill(&a, SIGTERM);
    broker_cleanup(&b);
    broker_cleanup(&a);
}

/* ==== a daemon publishes its own pid; the refused one leaves its log ==== */

static void test_daemon_holder_and_log(void)
{
    static struct broker_proc a, b;
    memset(&a, 0, sizeof a);
    int rfd;
    pid_t parent = broker_spawn(&a, NULL, false, 0, &rfd);
    REQUIRE(parent > 0);
    CHECK(broker_await_ready(rfd, T));
    CHECK_EQ_U(child_status(parent, T), 0);
    /* the daemon (a grandchild) holds the data dir and says so */
    struct rcl *c = rcl_open(a.sock, NULL);
    REQUIRE(c);
    rcl_request(c, "stats", 2);
    REQUIRE(rcl_reply(c, 2, 5000, &m) == 0);
    pid_t daemon_pid = (pid_t)msg_uint(&m, "pid");
    rcl_close(c);
    REQUIRE(daemon_pid > 0 && daemon_pid != parent);
    char lockpath[400], text[512], logpath[400];
    snprintf(lockpath, sizeof lockpath, "%s/coordd.lock", a.data);
    snprintf(text, sizeof text, "pid=%d\nsocket=%s\n", (int)daemon_pid, a.sock);
    CHECK(file_is(lockpath, text));

    /* a second daemon on another socket: refused before it forks (status
     * 1 and the line reach whoever started it), nothing in a's log */
    broker_paths(&b);
    snprintf(b.data, sizeof b.data, "%s", a.data);
    pid_t pid = broker_spawn(&b, NULL, false, 0, &rfd);
    REQUIRE(pid > 0);
    char line[1200];
    CHECK(fd_read_line(rfd, line, sizeof line, T));
    close(rfd);
    CHECK(strstr(line, "error data dir ") == line);
    CHECK_EQ_U(child_status(pid, T), 1);
    char want[1024];
    in_use_line(want, sizeof want, &a, daemon_pid);
    CHECK(file_has(b.log, want));
    snprintf(logpath, sizeof logpath, "%s/coordd.log", a.data);
    size_t len = 0;
    char *log = slurp(logpath, &len);
    CHECK(len > 0 && strstr(log, a.sock));        /* a's own start is there */
    CHECK(!strstr(log, b.sock));                  /* b wrote nothing */
    free(log);

    serves(&a, daemon_pid);
    kill(daemon_pid, SIGTERM);
    CHECK(await_exit(daemon_pid, T));
    broker_cleanup(&b);
    broker_cleanup(&a);
}

/* ==== a leaving broker of the same socket: a quiet exit, as before ==== */

static void test_leaving_broker_same_socket(void)
{
    static struct broker_proc a;
    broker_paths(&a);
    REQUIRE(mkdir(a.data, 0700) == 0);
    /* what a broker on a.sock that is shutting down looks like: its socket's
     * lock is gone already, the data dir's not yet */
    char lockpath[400], text[512];
    snprintf(lockpath, sizeof lockpath, "%s/coordd.lock", a.data);
    int f = open(lockpath, O_RDWR | O_CREAT, 0600);
    REQUIRE(f >= 0 && flock(f, LOCK_EX) == 0);
    int n = snprintf(text, sizeof text, "pid=%d\nsocket=%s\n", (int)getpid(), a.sock);
    REQUIRE(write(f, text, (size_t)n) == n);

    int rfd;
    pid_t pid = broker_spawn(&a, NULL, true, 0, &rfd);
    REQUIRE(pid > 0);
    char line[1200];
    CHECK(!fd_read_line(rfd, line, sizeof line, T));  /* EOF, no line */
    close(rfd);
    CHECK_EQ_U(child_status(pid, T), 0);
    CHECK(!file_has(a.log, "in use"));
    /* once it is gone, a broker starts there */
    close(f);
    REQUIRE(broker_start(&a, NULL) == 0);
    serves(&a, a.pid);
    snprintf(text, sizeof text, "pid=%d\nsocket=%s\n", (int)a.pid, a.sock);
    CHECK(file_is(lockpath, text));
    broker_kill(&a, SIGTERM);
    broker_cleanup(&a);
}

/* ==== autostart says why ==== */

/* coord_connect autostarting coordd on sock with the environment as it
 * is: its status, its message in msg, its duration in *ms. */
static int lib_autostart(const char *sock, char *msg, size_t size, uint64_t *ms)
{
    coord_options o;
    coord_options_init(&o);
    o.socket_path = sock;
    o.broker_path = broker_binary();
    o.connect_timeout_ms = 20000;   /* a wait for the timeout would show */
    coord_t *c = NULL;
    uint64_t t0 = now_ms();
    int rc = coord_connect(&c, &o);
    *ms = now_ms() - t0;
    snprintf(msg, size, "%s", coord_error_message(c));
    coord_close(c);
    return rc;
}

/* `coordctl --socket sock --connect-timeout 20000 ping`, autostarting,
 * with the environment as it is: its status, stderr in dir/ctl.err. */
static int ctl_autostart(const char *sock, const char *dir, char *err, size_t size,
                         uint64_t *ms)
{
    char errpath[400];
    snprintf(errpath, sizeof errpath, "%s/ctl.err", dir);
    uint64_t t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        int e = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(e, 2);
        setenv("COORD_BROKER", broker_binary(), 1);
        execl(coordctl_bin(), coordctl_bin(), "--socket", sock, "ping", (char *)NULL);
        _exit(127);
    }
    int st = child_status(pid, 30000);
    *ms = now_ms() - t0;
    char *text = slurp(errpath, NULL);
    snprintf(err, size, "%s", text);
    free(text);
    return st;
}

static void test_autostart_into_served_data_dir(void)
{
    static struct broker_proc a, b;
    memset(&a, 0, sizeof a);
    REQUIRE(broker_start(&a, NULL) == 0);
    broker_paths(&b);
    setenv("COORD_DATA_DIR", a.data, 1);
    char want[1024], msg[1400];
    in_use_line(want, sizeof want, &a, a.pid);
    uint64_t ms;

    CHECK_EQ_U(lib_autostart(b.sock, msg, sizeof msg, &ms), COORD_ECONNECT);
    fprintf(stderr, "  libcoord: %llu ms: %s\n", (unsigned long long)ms, msg);
    CHECK(strstr(msg, want) != NULL);
    CHECK(ms < 5000);

    CHECK_EQ_U(ctl_autostart(b.sock, b.dir, msg, sizeof msg, &ms), 3);
    fprintf(stderr, "  coordctl: %llu ms: %s", (unsigned long long)ms, msg);
    CHECK(strstr(msg, want) != NULL);
    CHECK(ms < 5000);

    unsetenv("COORD_DATA_DIR");
    CHECK(access(b.sock, F_OK) != 0);
    serves(&a, a.pid);
    broker_kill(&a, SIGTERM);
    broker_cleanup(&b);
    broker_cleanup(&a);
}

static void test_autostart_reports_start_error(void)
{
    static struct broker_proc b;
    broker_paths(&b);
    char file[400], data[500], msg[1400], want[700];
    snprintf(file, sizeof file, "%s/a-file", b.dir);
    int f = open(file, O_WRONLY | O_CREAT, 0600);
    REQUIRE(f >= 0);
    close(f);
    uint64_t ms;

    /* a data dir under a regular file */
    snprintf(data, sizeof data, "%s/data", file);
    setenv("COORD_DATA_DIR", data, 1);
    snprintf(want, sizeof want, "did not start: cannot create %s: %s", data,
             strerror(ENOTDIR));
    CHECK_EQ_U(lib_autostart(b.sock, msg, sizeof msg, &ms), COORD_ECONNECT);
    fprintf(stderr, "  libcoord: %llu ms: %s\n", (unsigned long long)ms, msg);
    CHECK(strstr(msg, want) != NULL);
    CHECK(ms < 5000);
    CHECK_EQ_U(ctl_autostart(b.sock, b.dir, msg, sizeof msg, &ms), 3);
    fprintf(stderr, "  coordctl: %llu ms: %s", (unsigned long long)ms, msg);
    CHECK(strstr(msg, want) != NULL);
    CHECK(ms < 5000);
    unsetenv("COORD_DATA_DIR");

    /* a HOME that is no directory (the data dir defaults below it) */
    char *home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    char *state = getenv("XDG_STATE_HOME") ? strdup(getenv("XDG_STATE_HOME")) : NULL;
    setenv("HOME", file, 1);
    unsetenv("XDG_STATE_HOME");
    snprintf(want, sizeof want, "did not start: cannot create %s/.local/state/coord: %s",
             file, strerror(ENOTDIR));
    CHECK_EQ_U(lib_autostart(b.sock, msg, sizeof msg, &ms), COORD_ECONNECT);
    fprintf(stderr, "  libcoord: %llu ms: %s\n", (unsigned long long)ms, msg);
    CHECK(strstr(msg, want) != NULL);
    CHECK_EQ_U(ctl_autostart(b.sock, b.dir, msg, sizeof msg, &ms), 3);
    CHECK(strstr(msg, want) != NULL);
    if (home)
        setenv("HOME", home, 1);
    else
        unsetenv("HOME");
    if (state)
        setenv("XDG_STATE_HOME", state, 1);
    free(home);
    free(state);
    broker_cleanup(&b);
}

int main(int argc, char **argv)
{
    coord_msg_init(&m);
    /* what the environment says must not pick the test's data dirs */
    unsetenv("COORD_DATA_DIR");
    unsetenv("COORD_SOCKET");
    static const struct test_case tests[] = {
        { "second_broker_refused", test_second_broker_refused },
        { "daemon_holder_and_log", test_daemon_holder_and_log },
        { "leaving_broker_same_socket", test_leaving_broker_same_socket },
        { "autostart_into_served_data_dir", test_autostart_into_served_data_dir },
        { "autostart_reports_start_error", test_autostart_reports_start_error },
        { NULL, NULL },
    };
    int rc = run_tests(argc, argv, tests);
    coord_msg_destroy(&m);
    return rc;
}
