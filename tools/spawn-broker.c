/* spawn-broker.c - see spawn-broker.h. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "paths.h"
#include "ready.h"
#include "spawn-broker.h"

pid_t spawn_broker(const char *who, const char *broker, const char *socket_path,
                   const char *data_dir, const char *log_path,
                   const char *const *extra, int timeout_ms)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        fprintf(stderr, "%s: pipe: %s\n", who, strerror(errno));
        return -1;
    }
    char readyfd[16];
    snprintf(readyfd, sizeof readyfd, "%d", pfd[1]);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        signal(SIGPIPE, SIG_DFL);
        fcntl(pfd[1], F_SETFD, 0);
        int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
        int null = open("/dev/null", O_RDONLY);
        if (log >= 0) {
            dup2(log, 1);
            dup2(log, 2);
        }
        if (null >= 0)
            dup2(null, 0);
        const char *argv[32] = {
            broker, "--foreground", "--socket", socket_path, "--data-dir", data_dir,
            "--ready-fd", readyfd, "--log-level", "warn",
        };
        int n = 10;
        for (int i = 0; extra && extra[i] && n < 31; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        execv(broker, (char *const *)argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", who, broker, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    int e = 0;
    char reason[COORD_READY_LINE_MAX];
    enum coord_ready r = coord_ready_await(pfd[0], timeout_ms, &e, reason, sizeof reason);
    close(pfd[0]);
    if (r != COORD_READY_OK) {
        if (r == COORD_READY_ERROR)
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
