/* ctl-run.c - how coordctl runs CMD (lock, once, leader-run): the child
 * process with its signals on a signalfd, and the loop of lock and
 * leader-run that keeps a broker hold (lease renewals, loss) while it runs.
 *
 * SIGCHLD and the signals forwarded to CMD (SIGINT, SIGTERM, SIGHUP) are
 * blocked and read from a signalfd, so one poll() waits for them together
 * with the broker connection.
 *
 * A hold may drain (leader-run): then the first SIGINT or SIGTERM sent to
 * coordctl is not forwarded but asks the hold to drain (ops->drain); when
 * the broker has answered (or CTL_DRAIN_REPLY_MS passed), or the broker
 * itself asked for a drain, CMD's group gets SIGTERM, and the hold is
 * released once CMD has ended.  Later signals are forwarded as usual.
 *
 * Process groups, like timeout(1): CMD leads a process group of its own
 * (setpgid in the child and in the parent, so no signal can come before
 * it exists), and every signal we send or forward goes to the whole group,
 * so `sh -c 'sleep 30 & wait'` stops with its children.  We wait for CMD
 * itself (its status is what we report), not for the rest of the group,
 * except after we signalled it: then what is left of the group gets
 * CTL_GRACE_MS to end and SIGKILL after, so nothing of CMD outlives the
 * hold it was stopped for.  We are the subreaper of CMD's orphans while
 * it runs, to reap them: a zombie still counts as a member of its group,
 * and init need not reap (in a container).
 *
 * The exception is a coordctl in the foreground of its controlling
 * terminal (an interactive shell, or a script run from one): a CMD in
 * another group could not read the terminal (SIGTTIN) nor set it up
 * (SIGTTOU), so CMD stays in our group, as with `timeout --foreground`.
 * The terminal's own signals (^C, ^\, hangup) reach the whole group there
 * anyway, so only what was sent to coordctl alone is forwarded, to CMD
 * alone (the group is the shell's job, a pipeline's other commands too):
 * CMD's children are not stopped for it, nor on a loss. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include "coordctl.h"

/* ---- operands ---- */

int ctl_name_and_cmd(struct ctl *ctl, int argc, char **argv, int i,
                     const char *what, const char **name, char ***cmd)
{
    if (i >= argc)
        return ctl_usage(ctl, "missing %s", what);
    *name = argv[i++];
    /* --json between NAME and CMD is ours: no command is named --json */
    while (i < argc && !strcmp(argv[i], "--json")) {
        ctl->json = true;
        i++;
    }
    if (i < argc && !strcmp(argv[i], "--"))
        i++;
    if (i >= argc)
        return ctl_usage(ctl, "missing the command to run");
    *cmd = argv + i;
    return 0;
}

int ctl_wait_settle(struct ctl *ctl, const struct ctl_wait *w, bool *if_available,
                    uint64_t *timeout_ms)
{
    if (w->have_wait && w->nonblock)
        return ctl_usage(ctl, "-n and -w cannot be combined");
    if (w->steal && (w->shared || w->nonblock || w->have_wait))
        return ctl_usage(ctl, "--steal cannot be combined with %s",
                         w->has_shared ? "-s, -n or -w" : "-n or -w");
    *if_available = w->nonblock || (w->have_wait && w->wait_ms == 0);
    if (w->have_wait && w->wait_ms)
        *timeout_ms = w->wait_ms;
    return 0;
}

/* ---- the child ---- */

bool ctl_child_env(const char *what, const char *const *vars)
{
    for (; vars[0]; vars += 2)
        if (setenv(vars[0], vars[1], 1) < 0) {
            fprintf(stderr, "coordctl: %s: setenv: %s\n", what, strerror(errno));
            return false;
        }
    return true;
}

/* True when we are in the foreground process group of our controlling
 * terminal (none: false). */
static bool in_terminal_foreground(void)
{
    int fd = open("/dev/tty", O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    pid_t fg = tcgetpgrp(fd);
    close(fd);
    return fg >= 0 && fg == getpgrp();
}

int ctl_child_start(struct ctl_child *ch, const char *what, char **cmd,
                    int stdout_fd, bool ignore_sigpipe)
{
    memset(ch, 0, sizeof *ch);
    ch->what = what;
    ch->ignore_sigpipe = ignore_sigpipe;
    ch->group = !in_terminal_foreground();
    /* SIGCHLD must not be SIG_IGN (children would be reaped behind our
     * back) */
    signal(SIGCHLD, SIG_DFL);
    if (ignore_sigpipe)
        ch->old_pipe = signal(SIGPIPE, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, &ch->old);
    ch->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (ch->sfd < 0) {
        fprintf(stderr, "coordctl: %s: signalfd: %s\n", what, strerror(errno));
        sigprocmask(SIG_SETMASK, &ch->old, NULL);
        if (ignore_sigpipe)
            signal(SIGPIPE, ch->old_pipe);
        return -1;
    }

    /* failing, the group's orphans go to init, which reaps them (or not:
     * then the grace after a stop runs out) */
    ch->subreaper = ch->group && prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
    fflush(stdout);
    fflush(stderr);
    ch->pid = fork();
    if (ch->pid < 0) {
        fprintf(stderr, "coordctl: %s: fork: %s\n", what, strerror(errno));
        if (ch->subreaper)
            prctl(PR_SET_CHILD_SUBREAPER, 0);
        close(ch->sfd);
        sigprocmask(SIG_SETMASK, &ch->old, NULL);
        if (ignore_sigpipe)
            signal(SIGPIPE, ch->old_pipe);
        return -1;
    }
    if (ch->pid == 0) {
        /* the broker socket and the signalfd are close-on-exec (and so
         * must be the caller's other descriptors) */
        if (ch->group)
            setpgid(0, 0);
        sigprocmask(SIG_SETMASK, &ch->old, NULL);
        if (ignore_sigpipe)
            signal(SIGPIPE, ch->old_pipe);
        if (stdout_fd >= 0 && dup2(stdout_fd, STDOUT_FILENO) < 0)
            _exit(126);
        execvp(cmd[0], cmd);
        int e = errno;
        fprintf(stderr, "coordctl: %s: %s: %s\n", what, cmd[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    /* the child does it too: whichever runs first, the group exists before
     * we signal it (EACCES: the child has already run exec) */
    if (ch->group && setpgid(ch->pid, ch->pid) < 0 && errno != EACCES) {
        fprintf(stderr, "coordctl: %s: setpgid: %s\n", what, strerror(errno));
        ch->group = false;
    }
    return 0;
}

void ctl_child_kill(struct ctl_child *ch, int sig)
{
    if (ch->group) {
        /* after CMD's exit its pid stays the group's id while members
         * are left (it is not reused meanwhile) */
        ch->signalled = true;
        kill(-ch->pid, sig);
        /* a CMD that moved to a group or session of its own */
        if (!ch->exited && getpgid(ch->pid) != ch->pid)
            kill(ch->pid, sig);
    } else if (!ch->exited) {
        kill(ch->pid, sig);
    }
}

/* Reaps CMD (waiting for it unless flags is WNOHANG) and, without
 * waiting, any other child: as their subreaper we inherit the orphans of
 * CMD's group, and their zombies would still count as the group's. */
static void reap(struct ctl_child *ch, int flags)
{
    pid_t r;
    while (!ch->exited && (r = waitpid(ch->pid, &ch->wstatus, flags)) != 0) {
        if (r == ch->pid) {
            ch->exited = true;
            ch->settle_until = ctl_mono_ms() + CTL_GRACE_MS;
        } else if (errno != EINTR) {
            break;
        }
    }
    if (!ch->subreaper)
        return;
    int st;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0 || (r < 0 && errno == EINTR))
        if (r == ch->pid && !ch->exited) {
            ch->wstatus = st;
            ch->exited = true;
            ch->settle_until = ctl_mono_ms() + CTL_GRACE_MS;
        }
}

void ctl_child_signals(struct ctl_child *ch)
{
    struct signalfd_siginfo si;
    while (read(ch->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD)
            continue;
        ch->interrupted = true;
        if (ch->intercept && !ch->intercepted &&
            (si.ssi_signo == SIGINT || si.ssi_signo == SIGTERM)) {
            ch->intercepted = (int)si.ssi_signo;
            continue;
        }
        /* in our group, the terminal's signals reached CMD already */
        if (ch->group || si.ssi_code != SI_KERNEL)
            ctl_child_kill(ch, (int)si.ssi_signo);
    }
    reap(ch, WNOHANG);
}

bool ctl_child_running(struct ctl_child *ch)
{
    if (!ch->exited)
        return true;
    if (!ch->group || !ch->signalled || ch->settled)
        return false;
    reap(ch, WNOHANG);
    /* ESRCH: the group is empty; EPERM: nothing left we may signal */
    if (kill(-ch->pid, 0) < 0) {
        ch->settled = true;
        return false;
    }
    if (ctl_mono_ms() >= ch->settle_until) {
        kill(-ch->pid, SIGKILL);
        ch->settled = true;
        return false;
    }
    return true;
}

int ctl_child_poll_ms(const struct ctl_child *ch)
{
    if (!ch->exited || !ch->group || !ch->signalled || ch->settled)
        return -1;
    int64_t left = ch->settle_until - ctl_mono_ms();
    if (left < 0)
        return 0;
    return left < CTL_SETTLE_POLL_MS ? (int)left : CTL_SETTLE_POLL_MS;
}

void ctl_child_stop(struct ctl_child *ch, int sig)
{
    ctl_child_kill(ch, sig);
    reap(ch, 0);
    ch->exited = true;
    if (ch->group)
        kill(-ch->pid, SIGKILL);    /* no loop left to give them a grace */
    ch->settled = true;
}

void ctl_child_end(struct ctl_child *ch)
{
    /* drop signals that came after the command ended, then unblock */
    struct signalfd_siginfo si;
    while (read(ch->sfd, &si, sizeof si) == (ssize_t)sizeof si)
        ;
    close(ch->sfd);
    sigprocmask(SIG_SETMASK, &ch->old, NULL);
    if (ch->ignore_sigpipe)
        signal(SIGPIPE, ch->old_pipe);
    if (ch->subreaper)
        prctl(PR_SET_CHILD_SUBREAPER, 0);
}

int ctl_exit_code(int wstatus)
{
    if (WIFEXITED(wstatus))
        return WEXITSTATUS(wstatus);
    if (WIFSIGNALED(wstatus))
        return 128 + WTERMSIG(wstatus);
    return CTL_EXIT_FAIL;
}

/* ---- running CMD while holding something ---- */

void ctl_hold_lost(struct ctl_hold *h, const char *p, size_t n)
{
    if (h->lost)
        return;
    h->lost = true;
    if (!n) {
        p = "no reason given";
        n = strlen(p);
    }
    char *e = ctl_escape(p, n);
    snprintf(h->reason, sizeof h->reason, "%s", e ? e : "?");
    free(e);
}

void ctl_hold_drain(struct ctl_hold *h, const char *p, size_t n, bool announce)
{
    if (h->drain)
        return;
    h->drain = true;
    if (!announce)
        return;
    if (!n) {
        p = "no reason given";
        n = strlen(p);
    }
    char *e = ctl_escape(p, n);
    fprintf(stderr, "coordctl: %s: draining %s (%s)\n", h->ops->what, h->shown,
            e ? e : "?");
    free(e);
}

static void lost_c(struct ctl_hold *h, const char *why)
{
    ctl_hold_lost(h, why, strlen(why));
}

static void conn_lost(struct ctl_hold *h)
{
    lost_c(h, "broker connection closed");
}

static void announce_lost(struct ctl_hold *h)
{
    if (h->announced)
        return;
    h->announced = true;
    fprintf(stderr, "coordctl: %s: %s %s (%s)\n", h->ops->what, h->ops->lost,
            h->shown, h->reason);
}

static void on_renewed(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct ctl_hold *h = ud;
    (void)c;
    (void)reply;
    h->renew_in_flight = false;
    /* a lost lease normally comes as an event first; this covers the rest
     * (connection errors are noticed by the dispatch that ran us) */
    if (status == h->ops->renew_refused)
        lost_c(h, h->ops->renew_refused_why);
}

static int send_renew(struct ctl_hold *h)
{
    coord_req_t *r = h->ops->renew_req(h);
    if (!r)
        return COORD_ENOMEM;
    int rc = coord_send(h->ctl->c, r, on_renewed, h, NULL);
    coord_req_free(r);
    if (rc == 0)
        h->renew_in_flight = true;
    return rc;
}

int ctl_child_run(const char *what, const char *const *env, char **cmd)
{
    if (!ctl_child_env(what, env))
        return CTL_EXIT_FAIL;
    fflush(stdout);
    struct ctl_child ch;
    if (ctl_child_start(&ch, what, cmd, -1, false) < 0)
        return CTL_EXIT_FAIL;
    while (ctl_child_running(&ch)) {
        struct pollfd p = { .fd = ch.sfd, .events = POLLIN };
        int n = poll(&p, 1, ctl_child_poll_ms(&ch));
        if (n < 0 && errno != EINTR) {
            fprintf(stderr, "coordctl: %s: poll: %s\n", what, strerror(errno));
            ctl_child_stop(&ch, SIGKILL);
            break;
        }
        if (n > 0)
            ctl_child_signals(&ch);
    }
    ctl_child_end(&ch);
    return ctl_exit_code(ch.wstatus);
}

int ctl_hold_run(struct ctl_hold *h, const char *const *env, char **cmd)
{
    coord_t *c = h->ctl->c;
    struct ctl_child ch;
    if (!ctl_child_env(h->ops->what, env) ||
        ctl_child_start(&ch, h->ops->what, cmd, -1, false) < 0)
        return CTL_EXIT_FAIL;
    ch.intercept = h->ops->drain != NULL;

    coord_set_event_cb(c, h->ops->on_event, h);
    bool conn_ok = true, term_sent = false;
    int64_t period = (int64_t)(h->lease_ms / 3);
    if (h->lease_ms && period == 0)
        period = 1;
    int64_t next_renew = h->lease_ms ? ctl_mono_ms() + period : -1;

    if (h->ops->dispatch_first && coord_dispatch(c) < 0) {
        conn_ok = false;
        conn_lost(h);
    }
    while (ctl_child_running(&ch)) {
        if (ch.intercepted && !h->drain_asked) {
            /* a drain request: the broker first, then CMD */
            h->drain_asked = true;
            h->drain_deadline = ctl_mono_ms() + CTL_DRAIN_REPLY_MS;
            if (!conn_ok || h->lost || h->ops->drain(h) < 0)
                ctl_hold_drain(h, NULL, 0, false);
        }
        if (h->drain_asked && !h->drain && ctl_mono_ms() >= h->drain_deadline)
            ctl_hold_drain(h, NULL, 0, false);
        if (h->lost && !term_sent && !ch.exited) {
            announce_lost(h);
            ctl_child_kill(&ch, SIGTERM);
            term_sent = true;
        }
        if (h->drain && !term_sent && !ch.exited) {
            ctl_child_kill(&ch, SIGTERM);
            term_sent = true;
        }
        struct pollfd p[2] = {
            { .fd = ch.sfd, .events = POLLIN },
            { .fd = conn_ok ? coord_fd(c) : -1, .events = POLLIN },
        };
        int timeout = ctl_child_poll_ms(&ch);
        if (h->drain_asked && !h->drain) {
            int64_t left = h->drain_deadline - ctl_mono_ms();
            int t = left < 0 ? 0 : (int)left;
            if (timeout < 0 || t < timeout)
                timeout = t;
        }
        bool renewing = next_renew >= 0 && conn_ok && !h->lost;
        if (renewing) {
            int64_t left = next_renew - ctl_mono_ms();
            int t = left < 0 ? 0 : left > 1000000000 ? 1000000000 : (int)left;
            if (timeout < 0 || t < timeout)
                timeout = t;
        }
        int n = poll(p, 2, timeout);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fprintf(stderr, "coordctl: %s: poll: %s\n", h->ops->what, strerror(errno));
            ctl_child_stop(&ch, SIGTERM);
            break;
        }
        if (p[0].revents)
            ctl_child_signals(&ch);
        if (conn_ok && p[1].revents && coord_dispatch(c) < 0) {
            conn_ok = false;
            conn_lost(h);
        }
        if (renewing && !h->lost && ctl_mono_ms() >= next_renew) {
            if (!h->renew_in_flight && send_renew(h) < 0) {
                conn_ok = false;
                conn_lost(h);
            }
            next_renew = ctl_mono_ms() + period;
        }
    }

    /* a loss that raced with the command's end still counts */
    if (conn_ok && !h->lost && coord_dispatch(c) < 0) {
        conn_ok = false;
        conn_lost(h);
    }
    if (conn_ok && !h->lost) {
        int rc = h->ops->release(h);
        if (rc == h->ops->release_refused)
            lost_c(h, h->ops->release_refused_why);
        else if (rc < 0)
            conn_lost(h);
    }
    coord_set_event_cb(c, NULL, NULL);
    if (h->lost)
        announce_lost(h);
    ctl_child_end(&ch);

    int code = ctl_exit_code(ch.wstatus);
    if (h->lost && code == 0)
        code = CTL_EXIT_FAIL;
    return code;
}
