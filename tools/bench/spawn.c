/* spawn.c - the broker under test: started in our temp dir with
 * --foreground --ready-fd, stopped with SIGTERM (SIGKILL after 5 s); its
 * RSS from /proc. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench.h"

static void print_log_tail(const struct bench *b)
{
    char path[300], line[512];
    snprintf(path, sizeof path, "%s/coordd.log", b->tmpdir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    fprintf(stderr, "coord-bench: coordd's log (%s):\n", path);
    while (fgets(line, sizeof line, f))
        fprintf(stderr, "  %s", line);
    fclose(f);
}

int broker_start(struct bench *b)
{
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC) < 0) {
        perror("coord-bench: pipe");
        return -1;
    }
    snprintf(b->socket_path, sizeof b->socket_path, "%s/broker.sock", b->tmpdir);
    snprintf(b->data_dir, sizeof b->data_dir, "%s/data", b->tmpdir);
    char logpath[300], readyfd[16];
    snprintf(logpath, sizeof logpath, "%s/coordd.log", b->tmpdir);
    snprintf(readyfd, sizeof readyfd, "%d", pfd[1]);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        perror("coord-bench: fork");
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);
        fcntl(pfd[1], F_SETFD, 0);
        int log = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0600);
        int null = open("/dev/null", O_RDONLY);
        if (log >= 0) {
            dup2(log, 1);
            dup2(log, 2);
        }
        if (null >= 0)
            dup2(null, 0);
        char *argv[] = {
            (char *)b->broker_path, "--foreground",
            "--socket", b->socket_path, "--data-dir", b->data_dir,
            "--ready-fd", readyfd, "--log-level", "warn",
            "--max-conns", "100000",
            NULL,
        };
        execv(b->broker_path, argv);
        fprintf(stderr, "coord-bench: cannot run %s: %s\n", b->broker_path,
                strerror(errno));
        _exit(127);
    }
    close(pfd[1]);
    char buf[16];
    size_t got = 0;
    uint64_t deadline = now_ns() + 10000000000ull;
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
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(pfd[0]);
    if (got < 6 || memcmp(buf, "ready\n", 6) != 0) {
        fprintf(stderr, "coord-bench: %s did not become ready\n", b->broker_path);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        print_log_tail(b);
        return -1;
    }
    b->broker_pid = pid;
    b->own_broker = true;
    return 0;
}

void broker_stop(struct bench *b)
{
    if (!b->own_broker || b->broker_pid <= 0)
        return;
    kill(b->broker_pid, SIGTERM);
    int st;
    for (int i = 0; i < 500; i++) {
        pid_t r = waitpid(b->broker_pid, &st, WNOHANG);
        if (r == b->broker_pid || (r < 0 && errno == ECHILD)) {
            if (r == b->broker_pid && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
                fprintf(stderr, "coord-bench: coordd ended with %s %d\n",
                        WIFEXITED(st) ? "status" : "signal",
                        WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                print_log_tail(b);
            }
            b->broker_pid = 0;
            return;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "coord-bench: coordd ignored SIGTERM for 5 s; killing it\n");
    kill(b->broker_pid, SIGKILL);
    waitpid(b->broker_pid, NULL, 0);
    b->broker_pid = 0;
}

int broker_restart(struct bench *b)
{
    broker_stop(b);
    return broker_start(b);
}

long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            v = strtol(line + 6, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

pid_t peer_pid(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return 0;
    return cr.pid;
}

bool broker_alive(struct bench *b)
{
    if (!b->own_broker)
        return true;
    if (b->broker_pid <= 0)
        return false;
    int st;
    pid_t r = waitpid(b->broker_pid, &st, WNOHANG);
    if (r == 0)
        return true;
    if (r == b->broker_pid) {
        fprintf(stderr, "coord-bench: coordd ended with %s %d\n",
                WIFEXITED(st) ? "status" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        print_log_tail(b);
    }
    b->broker_pid = 0;
    return false;
}

uint64_t cpu_ns(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/schedstat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}
