/* ctl-leader.c - coordctl's leadership commands:
 *   leader      the state of a workstream (generation, leader, lease)
 *   leader-run  campaign, run a command as leader, renew, resign
 *   disable     the incident kill switch (fences the leader)
 *   enable      lifts it
 *
 * leader-run waits for two things at once with poll(): the broker
 * connection (leader.lost, renew replies, the connection dying) and a
 * signalfd carrying SIGCHLD and the signals to forward to the command. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include "coordctl.h"

#define DEFAULT_LEASE_MS 30000

/* The single WORKSTREAM argument of leader, disable and enable. */
static int one_workstream(struct ctl *ctl, int argc, char **argv, const char **ws)
{
    int i = 1;
    if (i < argc && !strcmp(argv[i], "--json")) {
        ctl->json = true;
        i++;
    }
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    if (i >= argc)
        return ctl_usage(ctl, "missing WORKSTREAM");
    if (i + 1 < argc)
        return ctl_usage(ctl, "unexpected argument %s", argv[i + 1]);
    *ws = argv[i];
    return 0;
}

/* ---- coordctl leader ---- */

int cmd_leader(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = one_workstream(ctl, argc, argv, &ws);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_leader_info(ctl->c, ws, strlen(ws), &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "leader", rc);
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        rc = ctl_print_json(m);
        coord_reply_free(reply);
        return rc;
    }

    struct ctl_table t = { 0 };
    char *shown = ctl_escape(ws, strlen(ws));
    ctl_table_add(&t, "workstream", shown ? shown : "?");
    free(shown);
    uint64_t gen = 0, live = 0, v;
    coord_map_uint(m, "generation", &gen);
    ctl_table_addf(&t, "generation", "%llu", (unsigned long long)gen);
    const char *s;
    size_t n;
    if (coord_map_str(m, "state", &s, &n))
        ctl_table_addf(&t, "state", "%.*s", (int)n, s);
    if (coord_map_uint(m, "live_generation", &live)) {
        if (live != gen)
            ctl_table_addf(&t, "live generation", "%llu", (unsigned long long)live);
        char who[400];
        int len = 0;
        if (coord_map_uint(m, "conn", &v))
            len += snprintf(who + len, sizeof who - (size_t)len, "conn %llu",
                            (unsigned long long)v);
        if (coord_map_uint(m, "pid", &v) && len < (int)sizeof who)
            len += snprintf(who + len, sizeof who - (size_t)len, "%spid %llu",
                            len ? ", " : "", (unsigned long long)v);
        if (coord_map_str(m, "client", &s, &n) && n && len < (int)sizeof who) {
            char *e = ctl_escape(s, n > 200 ? 200 : n);
            len += snprintf(who + len, sizeof who - (size_t)len, "%sclient %s",
                            len ? ", " : "", e ? e : "?");
            free(e);
        }
        ctl_table_add(&t, "leader", len ? who : "?");
        char d[64];
        if (coord_map_uint(m, "lease_left_ms", &v)) {
            ctl_format_duration(d, sizeof d, v);
            ctl_table_add(&t, "lease left", d);
        }
        if (coord_map_uint(m, "leading_ms", &v)) {
            ctl_format_duration(d, sizeof d, v);
            ctl_table_add(&t, "leading for", d);
        }
    } else {
        ctl_table_add(&t, "leader", "none");
    }
    bool disabled = false;
    coord_map_bool(m, "disabled", &disabled);
    ctl_table_add(&t, "disabled", disabled ? "yes" : "no");
    rc = ctl_table_print(&t);
    coord_reply_free(reply);
    return rc;
}

/* ---- coordctl disable / enable ---- */

int cmd_disable(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = one_workstream(ctl, argc, argv, &ws);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    uint64_t gen = 0;
    rc = coord_leader_disable(ctl->c, ws, strlen(ws), &gen);
    if (rc < 0)
        return ctl_fail_call(ctl, "disable", rc);
    if (ctl->json)
        printf("{\"generation\":%llu}\n", (unsigned long long)gen);
    else
        printf("%llu\n", (unsigned long long)gen);
    return CTL_EXIT_OK;
}

int cmd_enable(struct ctl *ctl, int argc, char **argv)
{
    const char *ws;
    int rc = one_workstream(ctl, argc, argv, &ws);
    if (rc || (rc = ctl_connect(ctl)))
        return rc;
    rc = coord_leader_enable(ctl->c, ws, strlen(ws));
    if (rc < 0)
        return ctl_fail_call(ctl, "enable", rc);
    if (ctl->json)
        printf("{}\n");
    return CTL_EXIT_OK;
}

/* ---- coordctl leader-run ---- */

struct leader_run {
    struct ctl *ctl;
    const char *ws;             /* from argv: NUL-terminated */
    char *shown;                /* escaped for messages */
    uint64_t generation;
    uint64_t lease_ms;
    bool renew_in_flight;
    bool lost;                  /* leadership is gone (event, renew, connection) */
    bool announced;             /* "lost" message printed */
    char reason[96];
};

static void mark_lost(struct leader_run *lr, const char *p, size_t n)
{
    if (lr->lost)
        return;
    lr->lost = true;
    char *e = ctl_escape(p, n);
    snprintf(lr->reason, sizeof lr->reason, "%s", e ? e : "?");
    free(e);
}

static void mark_lost_c(struct leader_run *lr, const char *why)
{
    mark_lost(lr, why, strlen(why));
}

static void announce_lost(struct leader_run *lr)
{
    if (lr->announced)
        return;
    lr->announced = true;
    fprintf(stderr, "coordctl: leader-run: lost leadership of %s (%s)\n", lr->shown,
            lr->reason);
}

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct leader_run *lr = ud;
    coord_leader_lost l;
    (void)c;
    if (!coord_event_leader_lost(ev, &l) || !lr->generation ||
        l.generation != lr->generation || l.workstream_len != strlen(lr->ws) ||
        memcmp(l.workstream, lr->ws, l.workstream_len) != 0)
        return;
    if (l.reason_len)
        mark_lost(lr, l.reason, l.reason_len);
    else
        mark_lost_c(lr, "no reason given");
}

static void on_renewed(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct leader_run *lr = ud;
    (void)c;
    (void)reply;
    lr->renew_in_flight = false;
    /* a lost lease normally comes as leader.lost first; this covers the
     * rest (connection errors are noticed by the dispatch that ran us) */
    if (status == COORD_EFENCED)
        mark_lost_c(lr, "renew fenced");
}

static int send_renew(struct leader_run *lr)
{
    coord_req_t *r = coord_req_new("leader.renew");
    if (!r)
        return COORD_ENOMEM;
    coord_req_str(r, "workstream", lr->ws, strlen(lr->ws));
    coord_req_uint(r, "generation", lr->generation);
    int rc = coord_send(lr->ctl->c, r, on_renewed, lr, NULL);
    coord_req_free(r);
    if (rc == 0)
        lr->renew_in_flight = true;
    return rc;
}

/* The command's wait status as a shell reports it. */
static int exit_code(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return CTL_EXIT_FAIL;
}

/* Runs cmd as the leader; returns coordctl's exit status. */
static int run_leading(struct leader_run *lr, char **cmd)
{
    coord_t *c = lr->ctl->c;
    char gen[32];
    snprintf(gen, sizeof gen, "%llu", (unsigned long long)lr->generation);
    if (setenv("COORD_GENERATION", gen, 1) < 0 ||
        setenv("COORD_WORKSTREAM", lr->ws, 1) < 0) {
        fprintf(stderr, "coordctl: leader-run: setenv: %s\n", strerror(errno));
        return CTL_EXIT_FAIL;
    }

    /* SIGCHLD and the signals we forward arrive on a signalfd.  SIGCHLD
     * must not be SIG_IGN (children would be reaped behind our back). */
    signal(SIGCHLD, SIG_DFL);
    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &old);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) {
        fprintf(stderr, "coordctl: leader-run: signalfd: %s\n", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        return CTL_EXIT_FAIL;
    }

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "coordctl: leader-run: fork: %s\n", strerror(errno));
        close(sfd);
        sigprocmask(SIG_SETMASK, &old, NULL);
        return CTL_EXIT_FAIL;
    }
    if (pid == 0) {
        /* the broker socket and the signalfd are close-on-exec */
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(cmd[0], cmd);
        int e = errno;
        fprintf(stderr, "coordctl: leader-run: %s: %s\n", cmd[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }

    bool conn_ok = true, term_sent = false, exited = false;
    int wstatus = 0;
    int64_t period = (int64_t)(lr->lease_ms / 3);
    if (period == 0)
        period = 1;
    int64_t next_renew = ctl_mono_ms() + period;

    /* frames that came with the campaign's reply are already read */
    if (coord_dispatch(c) < 0) {
        conn_ok = false;
        mark_lost_c(lr, "broker connection closed");
    }
    while (!exited) {
        if (lr->lost && !term_sent) {
            announce_lost(lr);
            kill(pid, SIGTERM);
            term_sent = true;
        }
        struct pollfd p[2] = {
            { .fd = sfd, .events = POLLIN },
            { .fd = conn_ok ? coord_fd(c) : -1, .events = POLLIN },
        };
        int timeout = -1;
        bool renewing = conn_ok && !lr->lost;
        if (renewing) {
            int64_t left = next_renew - ctl_mono_ms();
            timeout = left < 0 ? 0 : left > 1000000000 ? 1000000000 : (int)left;
        }
        int n = poll(p, 2, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "coordctl: leader-run: poll: %s\n", strerror(errno));
            kill(pid, SIGTERM);
            while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
                ;
            exited = true;
            break;
        }
        if (p[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo == SIGCHLD)
                    continue;
                /* a signal from the terminal (SI_KERNEL) went to the whole
                 * foreground process group, the command included; forward
                 * only what was sent to us alone */
                if (si.ssi_code != SI_KERNEL)
                    kill(pid, (int)si.ssi_signo);
            }
            pid_t r;
            while ((r = waitpid(pid, &wstatus, WNOHANG)) < 0 && errno == EINTR)
                ;
            if (r == pid)
                exited = true;
        }
        if (conn_ok && p[1].revents && coord_dispatch(c) < 0) {
            conn_ok = false;
            mark_lost_c(lr, "broker connection closed");
        }
        if (renewing && !lr->lost && ctl_mono_ms() >= next_renew) {
            if (!lr->renew_in_flight && send_renew(lr) < 0) {
                conn_ok = false;
                mark_lost_c(lr, "broker connection closed");
            }
            next_renew = ctl_mono_ms() + period;
        }
    }

    /* a loss that raced with the command's end still counts */
    if (conn_ok && !lr->lost && coord_dispatch(c) < 0) {
        conn_ok = false;
        mark_lost_c(lr, "broker connection closed");
    }
    if (conn_ok && !lr->lost) {
        int rc = coord_leader_resign(c, lr->ws, strlen(lr->ws), lr->generation);
        if (rc == COORD_EFENCED)
            mark_lost_c(lr, "fenced at resign");   /* unless an event said why */
        else if (rc < 0)
            mark_lost_c(lr, "broker connection closed");
    }
    coord_set_event_cb(c, NULL, NULL);
    if (lr->lost)
        announce_lost(lr);

    /* drop signals that came after the command ended, then unblock */
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
        ;
    close(sfd);
    sigprocmask(SIG_SETMASK, &old, NULL);

    int code = exit_code(wstatus);
    if (lr->lost && code == 0)
        code = CTL_EXIT_FAIL;
    return code;
}

int cmd_leader_run(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "lease", required_argument, NULL, 'L' },
        { "nonblock", no_argument, NULL, 'n' },
        { "wait", required_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 'w' },
        { "steal", no_argument, NULL, 'S' },
        { NULL, 0, NULL, 0 },
    };
    coord_leader_opts o;
    memset(&o, 0, sizeof o);
    bool have_wait = false;
    uint64_t wait_ms = 0;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+nw:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'L':
            if (!ctl_parse_seconds(optarg, &o.lease_ms) || o.lease_ms == 0)
                return ctl_usage(ctl, "--lease needs a positive number of seconds, not %s",
                                 optarg);
            break;
        case 'n':
            o.if_available = true;
            break;
        case 'S':
            o.steal = true;
            break;
        case 'w':
            if (!ctl_parse_seconds(optarg, &wait_ms))
                return ctl_usage(ctl, "-w needs a number of seconds, not %s", optarg);
            have_wait = true;
            break;
        case ':':
            return ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
        default:
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return ctl_usage(ctl, "missing WORKSTREAM");
    const char *ws = argv[optind++];
    if (optind < argc && !strcmp(argv[optind], "--"))
        optind++;
    if (optind >= argc)
        return ctl_usage(ctl, "missing the command to run");
    char **cmd = argv + optind;

    if (have_wait && o.if_available)
        return ctl_usage(ctl, "-n and -w cannot be combined");
    if (o.steal && (o.if_available || have_wait))
        return ctl_usage(ctl, "--steal cannot be combined with -n or -w");
    if (have_wait) {
        if (wait_ms == 0)
            o.if_available = true;    /* waiting 0 s is not waiting */
        else
            o.timeout_ms = wait_ms;
    }

    struct leader_run lr;
    memset(&lr, 0, sizeof lr);
    lr.ctl = ctl;
    lr.ws = ws;
    lr.lease_ms = o.lease_ms ? o.lease_ms : DEFAULT_LEASE_MS;
    lr.shown = ctl_escape(ws, strlen(ws));
    if (!lr.shown) {
        fprintf(stderr, "coordctl: leader-run: out of memory\n");
        return CTL_EXIT_FAIL;
    }

    int rc = ctl_connect(ctl);
    if (rc) {
        free(lr.shown);
        return rc;
    }
    /* set before the campaign: a leader.lost right behind the grant then
     * reaches us too (the callback ignores anything until we lead) */
    coord_set_event_cb(ctl->c, on_event, &lr);
    bool granted = false;
    rc = coord_leader_campaign(ctl->c, ws, strlen(ws), &o, &lr.generation, &granted);
    if (rc < 0) {
        coord_set_event_cb(ctl->c, NULL, NULL);
        free(lr.shown);
        return ctl_fail_call(ctl, "leader-run", rc);
    }
    if (!granted) {
        coord_set_event_cb(ctl->c, NULL, NULL);
        fprintf(stderr, "coordctl: leader-run: %s has a leader\n", lr.shown);
        free(lr.shown);
        return CTL_EXIT_FAIL;
    }
    rc = run_leading(&lr, cmd);
    free(lr.shown);
    return rc;
}
