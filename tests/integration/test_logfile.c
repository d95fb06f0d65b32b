/* test_logfile.c - the broker's own log file (DATA-DIR/coordd.log, used
 * when it runs in the background) is only ever a regular file: a symlink
 * there is not followed (its target stays untouched), and a FIFO there
 * does not block the start. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "harness.h"

static struct broker_proc bp;

/* Starts a daemonized broker on bp's prepared data dir: true when it got
 * ready in 10 s; it is then stopped (SIGTERM to the pid stats gives). */
static bool start_background_and_stop(void)
{
    int fd;
    pid_t pid = broker_spawn(&bp, NULL, false, 0, &fd);
    if (pid < 0)
        return false;
    bool ready = broker_await_ready(fd, 10000);
    wait_pid_timeout(pid, 10000);          /* the parent exits at once */
    if (!ready)
        return false;
    struct rcl *c = rcl_open(bp.sock, NULL);
    uint64_t bpid = c ? rcl_stat(c, "pid") : 0;
    rcl_close(c);
    if (bpid && bpid != UINT64_MAX) {
        kill((pid_t)bpid, SIGTERM);
        for (int i = 0; i < 500 && kill((pid_t)bpid, 0) == 0; i++)
            usleep(10000);              /* not our child: no exit to await */
    }
    return true;
}

static void prepare(char *logpath, size_t n)
{
    memset(&bp, 0, sizeof bp);
    broker_paths(&bp);
    REQUIRE(mkdir(bp.data, 0700) == 0);
    snprintf(logpath, n, "%s/coordd.log", bp.data);
}

static void test_symlink_not_followed(void)
{
    char logpath[400], target[400];
    prepare(logpath, sizeof logpath);
    snprintf(target, sizeof target, "%s/elsewhere.txt", bp.dir);
    FILE *f = fopen(target, "w");
    REQUIRE(f);
    fclose(f);
    REQUIRE(symlink(target, logpath) == 0);
    CHECK(start_background_and_stop());
    struct stat st;
    CHECK(stat(target, &st) == 0 && st.st_size == 0);
    CHECK(lstat(logpath, &st) == 0 && S_ISLNK(st.st_mode));
    broker_cleanup(&bp);
}

static void test_fifo_does_not_block(void)
{
    char logpath[400];
    prepare(logpath, sizeof logpath);
    REQUIRE(mkfifo(logpath, 0600) == 0);
    CHECK(start_background_and_stop());
    broker_cleanup(&bp);
}

int main(int argc, char **argv)
{
    static const struct test_case tests[] = {
        { "symlink_not_followed", test_symlink_not_followed },
        { "fifo_does_not_block", test_fifo_does_not_block },
        { NULL, NULL },
    };
    return run_tests(argc, argv, tests);
}
