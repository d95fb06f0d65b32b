/* provider.c - the simulated external provider of the outbox leaders: what
 * a payment API or a mail server is to a real leader.
 *
 * One process (forked by the driver before the clients) serving a
 * SOCK_SEQPACKET Unix socket in the run's temp dir, one fixed-size message
 * each way.  It is not idempotent by itself: APPLY performs the effect
 * every time it is asked, and counts it in the shared table (LOPS[op].
 * effects); a second real effect of one op is the violation effect_twice,
 * decided here, from the provider's own log and not the broker's word.
 * What keeps effects single is the leaders' protocol (claim, reconcile by
 * the same op id, commit) and one fence of the receiver's own, as the
 * protocol document recommends: an APPLY or STATUS carrying a generation
 * older than the newest this provider saw for the workstream is refused
 * (P_STALE), so a leader frozen between its claim and its effect cannot
 * perform it after a newer leader reconciled the op. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fault.h"

#define MAX_PEERS 128

struct preq {
    uint32_t type, ws;
    uint64_t op, gen;
};

struct prep {
    int32_t answer;
};

static pid_t prov_pid;
static char prov_path[320];

pid_t provider_pid(void) { return prov_pid; }

static int answer(const struct preq *q)
{
    if (q->ws >= NOB || !q->op || q->op >= LOPS_CAP)
        return -1;
    struct obinfo *w = &S->ob[q->ws];
    uint64_t max = atomic_load(&w->provider_max_gen);
    if (q->gen < max)
        return P_STALE;
    atomic_store(&w->provider_max_gen, q->gen);     /* this process only writes it */
    struct lop *l = &LOPS[q->op];
    if (q->type == P_STATUS)
        return atomic_load(&l->effects) ? P_DONE : P_NOT_DONE;
    uint32_t before = atomic_fetch_add(&l->effects, 1);
    CNT(ob_effects);
    if (before == 0)
        atomic_store(&l->effect_gen, q->gen);
    else
        VIOL(effect_twice, "provider: op L%" PRIu64 " of %s performed again by generation %"
             PRIu64 " (first by %" PRIu64 ")", q->op, ob_name(q->ws), q->gen,
             atomic_load(&l->effect_gen));
    return P_DONE;
}

static void serve(int lfd) __attribute__((noreturn));
static void serve(int lfd)
{
    struct pollfd pf[MAX_PEERS + 1];
    int n = 1;
    pf[0].fd = lfd;
    pf[0].events = POLLIN;
    for (;;) {
        if (poll(pf, (nfds_t)n, 1000) < 0 && errno != EINTR)
            _exit(3);
        if (atomic_load(&S->end) > 1)
            _exit(0);
        if (pf[0].revents & POLLIN) {
            int c = accept(lfd, NULL, NULL);
            if (c >= 0 && n <= MAX_PEERS) {
                pf[n].fd = c;
                pf[n].events = POLLIN;
                pf[n].revents = 0;
                n++;
            } else if (c >= 0) {
                close(c);
            }
        }
        for (int i = 1; i < n; i++) {
            if (!pf[i].revents)
                continue;
            struct preq q;
            ssize_t r = recv(pf[i].fd, &q, sizeof q, 0);
            bool drop = r != (ssize_t)sizeof q;
            if (!drop) {
                struct prep p = { answer(&q) };
                drop = p.answer < 0 || send(pf[i].fd, &p, sizeof p, MSG_NOSIGNAL) != sizeof p;
            }
            if (drop || (pf[i].revents & (POLLHUP | POLLERR))) {
                close(pf[i].fd);
                pf[i] = pf[--n];
                i--;
            }
        }
    }
}

int provider_start(void)
{
    snprintf(prov_path, sizeof prov_path, "%s/provider.sock", CFG->tmpdir);
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strlen(prov_path) >= sizeof a.sun_path) {
        fprintf(stderr, "coord-fault: %s: path too long for a socket\n", prov_path);
        return -1;
    }
    memcpy(a.sun_path, prov_path, strlen(prov_path) + 1);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) < 0 || listen(lfd, 64) < 0) {
        perror("coord-fault: provider socket");
        return -1;
    }
    fflush(NULL);
    prov_pid = fork();
    if (prov_pid < 0) {
        perror("coord-fault: fork provider");
        return -1;
    }
    if (prov_pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        serve(lfd);
    }
    close(lfd);
    return 0;
}

void provider_stop(void)
{
    if (prov_pid > 0) {
        kill(prov_pid, SIGKILL);
        waitpid(prov_pid, NULL, 0);
        prov_pid = 0;
    }
}

int provider_call(int *fd, int type, unsigned ws, uint64_t op, uint64_t gen, int *ans)
{
    if (*fd < 0) {
        int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        if (strlen(prov_path) >= sizeof a.sun_path)
            return -1;
        memcpy(a.sun_path, prov_path, strlen(prov_path) + 1);
        if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
            if (s >= 0)
                close(s);
            return -1;
        }
        *fd = s;
    }
    struct preq q = { (uint32_t)type, ws, op, gen };
    struct prep p;
    if (send(*fd, &q, sizeof q, MSG_NOSIGNAL) != sizeof q ||
        recv(*fd, &p, sizeof p, 0) != sizeof p) {
        close(*fd);
        *fd = -1;
        return -1;
    }
    *ans = p.answer;
    return 0;
}
