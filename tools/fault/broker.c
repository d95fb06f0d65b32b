/* broker.c - the brokers under attack: started in our temp dir with
 * --foreground --ready-fd, killed with SIGKILL and started again on the
 * same data dir, stopped with SIGTERM at the end.
 *
 * Normally one broker.  With --etcd N, N brokers stand for N machines:
 * each has its own socket and data dir, and all share the leader ledger
 * of one etcd started here (Debian's etcd-server, on free loopback ports);
 * a client talks to the broker of its machine (its slot modulo N). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "etcd-proc.h"
#include "fault.h"
#include "spawn-broker.h"

static struct {
    pid_t pid;
    char sock[320], data[320], log[320];
} B[MAX_BROKERS];
static struct etcd_cluster etcd;
static bool etcd_up;

static void paths(unsigned i)
{
    if (B[i].sock[0])
        return;
    if (i == 0) {
        snprintf(B[i].sock, sizeof B[i].sock, "%s", CFG->socket_path);
        snprintf(B[i].data, sizeof B[i].data, "%s", CFG->data_dir);
        snprintf(B[i].log, sizeof B[i].log, "%s/coordd.log", CFG->tmpdir);
    } else {
        snprintf(B[i].sock, sizeof B[i].sock, "%s/broker%u.sock", CFG->tmpdir, i);
        snprintf(B[i].data, sizeof B[i].data, "%s/data%u", CFG->tmpdir, i);
        snprintf(B[i].log, sizeof B[i].log, "%s/coordd%u.log", CFG->tmpdir, i);
    }
}

const char *broker_socket(unsigned i)
{
    paths(i % CFG->nbrokers);
    return B[i % CFG->nbrokers].sock;
}

const char *broker_data_dir(unsigned i)
{
    paths(i);
    return B[i].data;
}

int etcd_begin(void)
{
    if (!CFG->etcd)
        return 0;
    if (!etcd_binary()) {
        fprintf(stderr, "coord-fault: SKIP: --etcd needs etcd (apt-get install etcd-server)\n");
        exit(77);                       /* meson's SKIP */
    }
    if (etcd_start(&etcd, 1) < 0)
        return -1;
    etcd_up = true;
    return 0;
}

static bool etcd_killed, etcd_stopped;

static bool proc_stopped(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'T' || p[2] == 't');
}

/* The outage counts (S->etcd_outage odd) only once etcd can answer
 * nothing: stopped for sure (/proc says so), or dead and reaped. */
void etcd_outage_begin(bool kill_it)
{
    if (!etcd_up || etcd_killed || etcd_stopped)
        return;
    if (kill_it) {
        etcd_signal(&etcd, 0, SIGKILL);
        etcd_killed = true;
        CNT(etcd_kills);
    } else {
        pid_t pid = etcd.m[0].pid;
        etcd_signal(&etcd, 0, SIGSTOP);
        for (int k = 0; k < 1000 && !proc_stopped(pid); k++)
            sleep_ms(1);
        etcd_stopped = true;
        CNT(etcd_stops);
    }
    atomic_fetch_add(&S->etcd_outage, 1);
    /* the transitions under way wait for etcd now: not timed */
    for (unsigned w = 0; w < MAX_WS; w++)
        if (atomic_exchange(&S->ws[w].kill_ns, 0))
            CNT(transitions_dropped);
}

int etcd_outage_end(void)
{
    if (!etcd_killed && !etcd_stopped)
        return 0;
    atomic_fetch_add(&S->etcd_outage, 1);
    if (etcd_stopped) {
        etcd_stopped = false;
        etcd_signal(&etcd, 0, SIGCONT);
        return 0;
    }
    etcd_killed = false;
    if (etcd_restart(&etcd, 0) < 0) {
        fprintf(stderr, "coord-fault: etcd would not restart\n");
        return -1;
    }
    return 0;
}

bool etcd_outage_on(void)
{
    return etcd_killed || etcd_stopped;
}

void etcd_end(void)
{
    etcd_outage_end();
    if (etcd_up)
        etcd_stop(&etcd);
    etcd_up = false;
}

pid_t broker_pid(unsigned i)
{
    return B[i].pid;
}

int broker_of_pid(pid_t pid)
{
    for (unsigned i = 0; i < CFG->nbrokers; i++)
        if (B[i].pid > 0 && B[i].pid == pid)
            return (int)i;
    return -1;
}

void broker_reaped(unsigned i)
{
    B[i].pid = 0;
}

void broker_log_tail(unsigned i)
{
    paths(i);
    char line[512];
    FILE *f = fopen(B[i].log, "r");
    if (!f)
        return;
    /* the last 40 lines */
    char ring[40][512];
    unsigned n = 0;
    while (fgets(line, sizeof line, f))
        snprintf(ring[n++ % 40], sizeof ring[0], "%s", line);
    fclose(f);
    fprintf(stderr, "coord-fault: coordd's log (%s), last lines:\n", B[i].log);
    for (unsigned k = n > 40 ? n - 40 : 0; k < n; k++)
        fprintf(stderr, "  %s", ring[k % 40]);
}

int broker_start(unsigned i)
{
    paths(i);
    /* every broker reads the outbox descriptors from the driver's files
     * (outbox.c), at each start */
    const char *extra[] = { "--config-dir", CFG->config_dir, "--ledger", "etcd",
                            "--etcd-endpoints", etcd.endpoints, "--etcd-prefix", "/coord-fault/",
                            NULL };
    if (!CFG->etcd)
        extra[2] = NULL;
    pid_t pid = spawn_broker("coord-fault", CFG->broker, B[i].sock, B[i].data, B[i].log,
                             extra, 15000);
    if (pid < 0) {
        broker_log_tail(i);
        return -1;
    }
    B[i].pid = pid;
    return 0;
}

void broker_kill(unsigned i)
{
    if (B[i].pid <= 0)
        return;
    kill(B[i].pid, SIGKILL);
    while (waitpid(B[i].pid, NULL, 0) < 0 && errno == EINTR)
        ;
    B[i].pid = 0;
}

int broker_stop(unsigned i)
{
    if (B[i].pid <= 0)
        return -1;
    kill(B[i].pid, SIGTERM);
    int st = 0;
    for (int k = 0; k < 1000; k++) {
        pid_t r = waitpid(B[i].pid, &st, WNOHANG);
        if (r == B[i].pid) {
            B[i].pid = 0;
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                return 0;
            fprintf(stderr, "coord-fault: coordd %u ended with %s %d on SIGTERM\n", i,
                    WIFEXITED(st) ? "status" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            return -1;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "coord-fault: coordd %u ignored SIGTERM for 10 s; killing it\n", i);
    broker_kill(i);
    return -1;
}
