/* broker.c - the broker under attack: started in our temp dir with
 * --foreground --ready-fd, killed with SIGKILL and started again on the
 * same data dir, stopped with SIGTERM at the end. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fault.h"

static pid_t bpid;

pid_t broker_pid(void)
{
    return bpid;
}

void broker_reaped(void)
{
    bpid = 0;
}

void broker_log_tail(void)
{
    char path[300], line[512];
    snprintf(path, sizeof path, "%s/coordd.log", CFG->tmpdir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    /* the last 40 lines */
    char ring[40][512];
    unsigned n = 0;
    while (fgets(line, sizeof line, f))
        snprintf(ring[n++ % 40], sizeof ring[0], "%s", line);
    fclose(f);
    fprintf(stderr, "coord-fault: coordd's log (%s), last lines:\n", path);
    for (unsigned i = n > 40 ? n - 40 : 0; i < n; i++)
        fprintf(stderr, "  %s", ring[i % 40]);
}

int broker_start(void)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        perror("coord-fault: pipe");
        return -1;
    }
    char logpath[300], readyfd[16];
    snprintf(logpath, sizeof logpath, "%s/coordd.log", CFG->tmpdir);
    snprintf(readyfd, sizeof readyfd, "%d", pfd[1]);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        perror("coord-fault: fork");
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
        int log = open(logpath, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (log >= 0) {
            dup2(log, 1);
            dup2(log, 2);
        }
        if (null >= 0)
            dup2(null, 0);
        char *argv[] = {
            (char *)CFG->broker, "--foreground",
            "--socket", (char *)CFG->socket_path, "--data-dir", (char *)CFG->data_dir,
            "--ready-fd", readyfd, "--log-level", "warn",
            NULL,
        };
        execv(CFG->broker, argv);
        fprintf(stderr, "coord-fault: cannot run %s: %s\n", CFG->broker, strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    char buf[16];
    size_t got = 0;
    uint64_t deadline = now_ns() + 15000000000ull;
    while (got < 6) {
        uint64_t now = now_ns();
        if (now >= deadline)
            break;
        struct pollfd p = { .fd = pfd[0], .events = POLLIN };
        int r = poll(&p, 1, (int)((deadline - now) / 1000000) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t n = read(pfd[0], buf + got, sizeof buf - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(pfd[0]);
    if (got < 6 || memcmp(buf, "ready\n", 6) != 0) {
        fprintf(stderr, "coord-fault: %s did not become ready\n", CFG->broker);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        broker_log_tail();
        return -1;
    }
    bpid = pid;
    return 0;
}

void broker_kill(void)
{
    if (bpid <= 0)
        return;
    kill(bpid, SIGKILL);
    while (waitpid(bpid, NULL, 0) < 0 && errno == EINTR)
        ;
    bpid = 0;
}

int broker_stop(void)
{
    if (bpid <= 0)
        return -1;
    kill(bpid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 1000; i++) {
        pid_t r = waitpid(bpid, &st, WNOHANG);
        if (r == bpid) {
            bpid = 0;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
            fprintf(stderr, "coord-fault: coordd ended with %s %d on SIGTERM\n",
                    WIFEXITED(st) ? "status" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            return -1;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "coord-fault: coordd ignored SIGTERM for 10 s; killing it\n");
    broker_kill();
    return -1;
}
