/* ctl-lock.c - coordctl's lock commands:
 *   lock   run a command while holding a lock, like flock(1)
 *   locks  what is held and what waits, like navigator.locks.query()
 *
 * `lock` waits for two things at once with poll(): the broker connection
 * (a lock.lost event, the connection dying, lease renewals) and a
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

/* ---- coordctl lock ---- */

struct lock_run {
    struct ctl *ctl;
    const char *name;           /* from argv: NUL-terminated */
    char *shown;                /* escaped for messages */
    uint64_t lock, token;
    uint64_t lease_ms;          /* 0: no lease to renew */
    bool renew_in_flight;
    bool lost;                  /* the lock is gone (event, renew, connection) */
    bool announced;             /* "lost" message printed */
    char reason[96];
};

/* Records the first reason the lock went away (p[0..n), escaped). */
static void mark_lost(struct lock_run *lr, const char *p, size_t n)
{
    if (lr->lost)
        return;
    lr->lost = true;
    char *e = ctl_escape(p, n);
    snprintf(lr->reason, sizeof lr->reason, "%s", e ? e : "?");
    free(e);
}

static void mark_lost_c(struct lock_run *lr, const char *why)
{
    mark_lost(lr, why, strlen(why));
}

static void announce_lost(struct lock_run *lr)
{
    if (lr->announced)
        return;
    lr->announced = true;
    fprintf(stderr, "coordctl: lock: lost %s (%s)\n", lr->shown, lr->reason);
}

static void on_event(coord_t *c, const coord_reply_t *ev, void *ud)
{
    struct lock_run *lr = ud;
    coord_lock_lost l;
    (void)c;
    if (!coord_event_lock_lost(ev, &l) || l.lock != lr->lock)
        return;
    if (l.reason_len)
        mark_lost(lr, l.reason, l.reason_len);
    else
        mark_lost_c(lr, "no reason given");
}

static void on_renewed(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct lock_run *lr = ud;
    (void)c;
    (void)reply;
    lr->renew_in_flight = false;
    /* a lost lease normally comes as lock.lost first; this covers the rest
     * (connection errors are noticed by the dispatch that ran us) */
    if (status == COORD_EUNKNOWN_LOCK)
        mark_lost_c(lr, "the lease could not be renewed");
}

static int send_renew(struct lock_run *lr)
{
    coord_req_t *r = coord_req_new("lock.renew");
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "lock", lr->lock);
    coord_req_uint(r, "lease_ms", lr->lease_ms);
    int rc = coord_send(lr->ctl->c, r, on_renewed, lr, NULL);
    coord_req_free(r);
    if (rc == 0)
        lr->renew_in_flight = true;
    return rc;
}

static void conn_lost(struct lock_run *lr)
{
    mark_lost_c(lr, "broker connection closed");
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

/* Runs cmd holding the lock; returns coordctl's exit status. */
static int run_locked(struct lock_run *lr, char **cmd)
{
    coord_t *c = lr->ctl->c;
    char tok[32];
    snprintf(tok, sizeof tok, "%llu", (unsigned long long)lr->token);
    if (setenv("COORD_LOCK_TOKEN", tok, 1) < 0 ||
        setenv("COORD_LOCK_NAME", lr->name, 1) < 0) {
        fprintf(stderr, "coordctl: lock: setenv: %s\n", strerror(errno));
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
        fprintf(stderr, "coordctl: lock: signalfd: %s\n", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
        return CTL_EXIT_FAIL;
    }

    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "coordctl: lock: fork: %s\n", strerror(errno));
        close(sfd);
        sigprocmask(SIG_SETMASK, &old, NULL);
        return CTL_EXIT_FAIL;
    }
    if (pid == 0) {
        /* the broker socket and the signalfd are close-on-exec */
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(cmd[0], cmd);
        int e = errno;
        fprintf(stderr, "coordctl: lock: %s: %s\n", cmd[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }

    coord_set_event_cb(c, on_event, lr);
    bool conn_ok = true, term_sent = false, exited = false;
    int wstatus = 0;
    int64_t period = (int64_t)(lr->lease_ms / 3);
    if (lr->lease_ms && period == 0)
        period = 1;
    int64_t next_renew = lr->lease_ms ? ctl_mono_ms() + period : -1;

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
        bool renewing = next_renew >= 0 && conn_ok && !lr->lost;
        if (renewing) {
            int64_t left = next_renew - ctl_mono_ms();
            timeout = left < 0 ? 0 : left > 1000000000 ? 1000000000 : (int)left;
        }
        int n = poll(p, 2, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "coordctl: lock: poll: %s\n", strerror(errno));
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
        if (conn_ok && p[1].revents) {
            if (coord_dispatch(c) < 0) {
                conn_ok = false;
                conn_lost(lr);
            }
        }
        if (renewing && !lr->lost && ctl_mono_ms() >= next_renew) {
            if (!lr->renew_in_flight && send_renew(lr) < 0) {
                conn_ok = false;
                conn_lost(lr);
            }
            next_renew = ctl_mono_ms() + period;
        }
    }

    /* a loss that raced with the command's end still counts */
    if (conn_ok && !lr->lost && coord_dispatch(c) < 0) {
        conn_ok = false;
        conn_lost(lr);
    }
    if (conn_ok && !lr->lost) {
        int rc = coord_lock_release(c, lr->lock);
        if (rc == COORD_EUNKNOWN_LOCK) {
            mark_lost_c(lr, "no longer held at release");
        } else if (rc < 0) {
            conn_lost(lr);
        }
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

int cmd_lock(struct ctl *ctl, int argc, char **argv)
{
    static const struct option longopts[] = {
        { "shared", no_argument, NULL, 's' },
        { "nonblock", no_argument, NULL, 'n' },
        { "wait", required_argument, NULL, 'w' },
        { "timeout", required_argument, NULL, 'w' },
        { "steal", no_argument, NULL, 'S' },
        { "lease", required_argument, NULL, 'L' },
        { NULL, 0, NULL, 0 },
    };
    coord_lock_opts o;
    memset(&o, 0, sizeof o);
    bool have_wait = false;
    uint64_t wait_ms = 0;
    const char *wait_arg = NULL;
    int opt;
    optind = 1;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+snw:", longopts, NULL)) != -1) {
        switch (opt) {
        case 's':
            o.shared = true;
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
            wait_arg = optarg;
            break;
        case 'L':
            if (!ctl_parse_seconds(optarg, &o.lease_ms) || o.lease_ms == 0)
                return ctl_usage(ctl, "--lease needs a positive number of seconds, not %s",
                                 optarg);
            break;
        case ':':
            return ctl_usage(ctl, "%s needs a value", argv[optind - 1]);
        default:
            return ctl_usage(ctl, "unknown flag %s", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return ctl_usage(ctl, "missing NAME");
    const char *name = argv[optind++];
    if (optind < argc && !strcmp(argv[optind], "--"))
        optind++;
    if (optind >= argc)
        return ctl_usage(ctl, "missing the command to run");
    char **cmd = argv + optind;

    if (have_wait && o.if_available)
        return ctl_usage(ctl, "-n and -w cannot be combined");
    if (o.steal && (o.shared || o.if_available || have_wait))
        return ctl_usage(ctl, "--steal cannot be combined with -s, -n or -w");
    if (have_wait) {
        if (wait_ms == 0)
            o.if_available = true;    /* waiting 0 s is not waiting */
        else
            o.timeout_ms = wait_ms;
    }

    struct lock_run lr;
    memset(&lr, 0, sizeof lr);
    lr.ctl = ctl;
    lr.name = name;
    lr.lease_ms = o.lease_ms;
    lr.shown = ctl_escape(name, strlen(name));
    if (!lr.shown) {
        fprintf(stderr, "coordctl: lock: out of memory\n");
        return CTL_EXIT_FAIL;
    }

    int rc = ctl_connect(ctl);
    if (rc) {
        free(lr.shown);
        return rc;
    }
    rc = coord_lock_acquire(ctl->c, name, strlen(name), &o, &lr.lock, &lr.token);
    if (rc == COORD_LOCK_BUSY) {
        fprintf(stderr, "coordctl: lock: %s is busy\n", lr.shown);
        rc = CTL_EXIT_FAIL;
    } else if (rc == COORD_ETIMEOUT) {
        fprintf(stderr, "coordctl: lock: timed out after %s s waiting for %s\n",
                wait_arg ? wait_arg : "?", lr.shown);
        rc = CTL_EXIT_FAIL;
    } else if (rc < 0) {
        rc = ctl_fail_call(ctl, "lock", rc);
    } else {
        rc = run_locked(&lr, cmd);
    }
    /* close here: pending callbacks point at lr, which lives on this stack */
    coord_close(ctl->c);
    ctl->c = NULL;
    free(lr.shown);
    return rc;
}

/* ---- coordctl locks ---- */

enum { COL_STATE, COL_NAME, COL_MODE, COL_TOKEN, COL_CONN, COL_PID, COL_CLIENT,
       COL_AGE, NCOLS };
static const char *const col_titles[NCOLS] = {
    "STATE", "NAME", "MODE", "TOKEN", "CONN", "PID", "CLIENT", "AGE",
};

static void add_rows(struct ctl_rows *t, coord_map m, const char *list, bool held)
{
    size_t count = coord_map_array_len(m, list);
    for (size_t i = 0; i < count; i++) {
        coord_map e;
        char **row = ctl_rows_add(t);
        if (!row)
            return;
        if (!coord_map_array_at(m, list, i, &e)) {
            for (int k = 0; k < NCOLS; k++)
                row[k] = strdup("?");
        } else {
            uint64_t age = 0;
            char d[64];
            coord_map_uint(e, "age_ms", &age);
            ctl_format_duration(d, sizeof d, age);
            row[COL_STATE] = strdup(held ? "held" : "pending");
            row[COL_NAME] = ctl_escaped_field(e, "name");
            row[COL_MODE] = ctl_escaped_field(e, "mode");
            row[COL_TOKEN] = held ? ctl_uint_cell(e, "token") : strdup("-");
            row[COL_CONN] = ctl_uint_cell(e, "conn");
            row[COL_PID] = ctl_uint_cell(e, "pid");
            row[COL_CLIENT] = ctl_escaped_field(e, "client");
            row[COL_AGE] = strdup(d);
        }
        ctl_rows_check(t, row);
    }
}

int cmd_locks(struct ctl *ctl, int argc, char **argv)
{
    if (argc > 1)
        return ctl_usage(ctl, "unexpected argument %s", argv[1]);
    int rc = ctl_connect(ctl);
    if (rc)
        return rc;
    coord_reply_t *reply = NULL;
    rc = coord_lock_query(ctl->c, &reply);
    if (rc < 0)
        return ctl_fail_call(ctl, "lock.query", rc);
    coord_map m = coord_reply_map(reply);
    if (ctl->json) {
        rc = ctl_print_json(m);
        coord_reply_free(reply);
        return rc;
    }
    struct ctl_rows t = { .ncols = NCOLS, .titles = col_titles };
    add_rows(&t, m, "held", true);
    add_rows(&t, m, "pending", false);
    bool truncated = false;
    coord_map_bool(m, "truncated", &truncated);
    if (t.n == 0 && !t.failed) {
        printf("no locks held or pending\n");
        free(t.cell);
        rc = CTL_EXIT_OK;
    } else {
        rc = ctl_rows_print(&t, "locks");
    }
    if (truncated)
        fprintf(stderr, "coordctl: locks: the list was cut at the broker's "
                        "frame limit\n");
    coord_reply_free(reply);
    return rc;
}
