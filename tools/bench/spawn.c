/* spawn.c - the broker under test: started in our temp dir with
 * --foreground --ready-fd, stopped with SIGTERM (SIGKILL after 5 s); its
 * RSS from /proc. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench.h"
#include "spawn-broker.h"

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
    snprintf(b->socket_path, sizeof b->socket_path, "%s/broker.sock", b->tmpdir);
    snprintf(b->data_dir, sizeof b->data_dir, "%s/data", b->tmpdir);
    char logpath[300];
    snprintf(logpath, sizeof logpath, "%s/coordd.log", b->tmpdir);
    static const char *const extra[] = { "--max-conns", "100000", NULL };
    pid_t pid = spawn_broker("coord-bench", b->broker_path, b->socket_path, b->data_dir,
                             logpath, extra, 10000);
    if (pid < 0) {
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

static long status_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    size_t flen = strlen(field);
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, field, flen) == 0) {
            v = strtol(line + flen, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

long rss_kib(pid_t pid)
{
    return status_kib(pid, "VmRSS:");
}

long hwm_kib(pid_t pid)
{
    return status_kib(pid, "VmHWM:");
}

pid_t peer_pid(int fd)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return 0;
    return cr.pid;
}

double thread_syscw(pid_t pid, const char *comm)
{
    char path[96], line[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    double v = -1;
    struct dirent *de;
    while (v < 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/comm", (int)pid, de->d_name);
        FILE *f = fopen(path, "r");
        bool match = f && fgets(line, sizeof line, f) &&
                     strncmp(line, comm, strlen(comm)) == 0 && line[strlen(comm)] == '\n';
        if (f)
            fclose(f);
        if (!match)
            continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.16s/io", (int)pid, de->d_name);
        if (!(f = fopen(path, "r")))
            break;
        unsigned long long n;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "syscw: %llu", &n) == 1)
                v = (double)n;
        fclose(f);
        break;
    }
    closedir(d);
    return v;
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
