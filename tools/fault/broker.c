/* broker.c - the broker under attack: started in our temp dir with
 * --foreground --ready-fd, killed with SIGKILL and started again on the
 * same data dir, stopped with SIGTERM at the end. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fault.h"
#include "spawn-broker.h"

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
    char logpath[300];
    snprintf(logpath, sizeof logpath, "%s/coordd.log", CFG->tmpdir);
    pid_t pid = spawn_broker("coord-fault", CFG->broker, CFG->socket_path, CFG->data_dir,
                             logpath, NULL, 15000);
    if (pid < 0) {
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
