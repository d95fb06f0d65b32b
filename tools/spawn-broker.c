/* spawn-broker.c - see spawn-broker.h. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "spawn-broker.h"

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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
    char buf[16];
    size_t got = 0;
    long long deadline = now_ms() + timeout_ms;
    while (got < 6) {
        long long left = deadline - now_ms();
        if (left <= 0)
            break;
        struct pollfd p = { .fd = pfd[0], .events = POLLIN };
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t k = read(pfd[0], buf + got, sizeof buf - 1 - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        got += (size_t)k;
    }
    close(pfd[0]);
    if (got < 6 || memcmp(buf, "ready\n", 6) != 0) {
        fprintf(stderr, "%s: %s did not become ready\n", who, broker);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}
