/* spawn-broker.c - see spawn-broker.h. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "paths.h"
#include "ready.h"
#include "spawn.h"
#include "spawn-broker.h"

pid_t spawn_broker(const char *who, const char *broker, const char *socket_path,
                   const char *data_dir, const char *log_path,
                   const char *const *extra, int timeout_ms)
{
    const char *argv[32] = {
        broker, "--foreground", "--socket", socket_path, "--data-dir", data_dir,
        "--ready-fd", "3", "--log-level", "warn",
    };
    int n = 10;
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    struct coord_spawn s = {
        .argv = argv, .die_with_parent = true, .stdin_null = true,
        .stdout_path = log_path, .stderr_path = log_path,
    };
    fflush(NULL);
    int rfd;
    pid_t pid = coord_spawn(&s, &rfd);
    if (pid < 0) {
        fprintf(stderr, "%s: cannot start %s: %s\n", who, broker, strerror(errno));
        return -1;
    }
    int e = 0;
    char reason[COORD_READY_LINE_MAX];
    enum coord_ready r = coord_ready_await(rfd, timeout_ms, &e, reason, sizeof reason);
    close(rfd);
    if (r != COORD_READY_OK) {
        if (r == COORD_READY_EXEC)
            fprintf(stderr, "%s: cannot run %s: %s\n", who, broker, strerror(e));
        else if (r == COORD_READY_ERROR)
            fprintf(stderr, "%s: %s did not start: %s\n", who, broker, reason);
        else if (r == COORD_READY_TIMEOUT)
            fprintf(stderr, "%s: %s did not become ready: timed out after %g s (its log: %s)\n",
                    who, broker, timeout_ms / 1000.0, log_path);
        else
            fprintf(stderr, "%s: %s exited before it was ready (its log: %s)\n",
                    who, broker, log_path);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}
