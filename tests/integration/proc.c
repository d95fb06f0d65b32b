/* proc.c - see proc.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "proc.h"

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- exits ---- */

bool await_exit(pid_t pid, int timeout_ms)
{
    /* a pidfd becomes readable when the process exits */
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return errno == ESRCH;
    struct pollfd p = { .fd = fd, .events = POLLIN };
    uint64_t deadline = mono_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    int n;
    for (;;) {
        uint64_t now = mono_ms();
        n = poll(&p, 1, now < deadline ? (int)(deadline - now) : 0);
        if (n >= 0 || errno != EINTR)
            break;
    }
    close(fd);
    return n == 1;
}

int wait_pid_timeout(pid_t pid, int timeout_ms)
{
    int st;
    if (!await_exit(pid, timeout_ms))
        return -1;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return st;
}

int child_status(pid_t pid, int timeout_ms)
{
    int st = wait_pid_timeout(pid, timeout_ms);
    if (st == -1) {
        fprintf(stderr, "process %d did not end within %d ms: killing it\n",
                (int)pid, timeout_ms);
        kill(-pid, SIGKILL);    /* a coordctl's group: its command too */
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
        return -1;
    }
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

/* ---- /proc ---- */

ssize_t proc_read(pid_t pid, const char *name, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return n;
}

bool proc_stat(pid_t pid, char *state, pid_t *ppid)
{
    char buf[512];
    if (proc_read(pid, "stat", buf, sizeof buf) <= 0)
        return false;
    const char *p = strrchr(buf, ')');     /* comm may hold anything */
    int pp;
    if (!p || sscanf(p + 1, " %c %d", state, &pp) != 2)
        return false;
    *ppid = (pid_t)pp;
    return true;
}

bool proc_alive(pid_t pid)
{
    char state;
    pid_t ppid;
    return proc_stat(pid, &state, &ppid) && state != 'Z' && state != 'X';
}

int proc_each(void (*fn)(pid_t pid, void *ud), void *ud)
{
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (!*end && pid > 0)
            fn((pid_t)pid, ud);
    }
    closedir(d);
    return 0;
}

/* ---- text ---- */

void text_add(struct text *t, const char *s, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 1024;
        while (cap < t->n + n + 1)
            cap *= 2;
        t->p = realloc(t->p, cap);
        if (!t->p)
            exit(2);
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

char *slurp(const char *path, size_t *len)
{
    struct text t = { 0 };
    text_add(&t, "", 0);
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t got;
    while (f && (got = fread(buf, 1, sizeof buf, f)) > 0)
        text_add(&t, buf, got);
    if (f)
        fclose(f);
    if (len)
        *len = t.n;
    return t.p;
}

bool file_has(const char *path, const char *needle)
{
    char *b = slurp(path, NULL);
    bool yes = strstr(b, needle) != NULL;
    if (!yes)
        fprintf(stderr, "%s does not contain \"%s\"; it holds:\n%s\n", path,
                needle, b);
    free(b);
    return yes;
}

bool file_is(const char *path, const char *text)
{
    char *b = slurp(path, NULL);
    bool yes = strcmp(b, text) == 0;
    if (!yes)
        fprintf(stderr, "%s is not \"%s\"; it holds:\n%s\n", path, text, b);
    free(b);
    return yes;
}

bool fd_read_line(int fd, char *buf, size_t size, int timeout_ms)
{
    size_t n = 0;
    uint64_t end = mono_ms() + (uint64_t)timeout_ms;
    while (n + 1 < size) {
        uint64_t now = mono_ms();
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (now >= end)
            break;
        int pr = poll(&p, 1, (int)(end - now));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr != 1)
            break;
        ssize_t r = read(fd, buf + n, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        if (buf[n] == '\n') {
            buf[n] = '\0';
            return true;
        }
        n++;
    }
    buf[n] = '\0';
    return false;
}

/* ---- coordctl runs ---- */

const char *coordctl_bin(void)
{
    const char *p = getenv("COORDCTL");
    return p ? p : "coordctl";
}

/* In the child: stdio, descriptors, gate, then exec; never returns. */
static void child(struct run *r, const char *sock, const struct ctl_opts *o,
                  const char *const *args, const int *opipe, const int *epipe,
                  int rep_w)
{
    if (o->session || o->tty)
        setsid();
    else
        setpgid(0, 0);          /* a hung run is killed with its command */
    const char *argv[64];
    int n = 0;
    argv[n++] = coordctl_bin();
    argv[n++] = "--socket";
    argv[n++] = sock;
    argv[n++] = "--no-autostart";
    if (o->scope) {
        argv[n++] = "--scope";
        argv[n++] = o->scope;
    }
    for (int i = 0; args[i] && n < 63; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    if (o->tty) {
        int t = open(o->tty, O_RDWR);     /* the session leader's: our terminal */
        if (t < 0 || ioctl(t, TIOCSCTTY, 0) < 0)
            _exit(120);
        dup2(t, 0);
        dup2(t, 1);
        dup2(t, 2);
        if (t > 2)
            close(t);
    } else if (o->pipes) {
        dup2(opipe[1], 1);
        dup2(epipe[1], 2);
    } else {
        int of = open(r->out, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int ef = open(r->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (of < 0 || ef < 0)
            _exit(120);
        dup2(of, 1);
        dup2(ef, 2);
        close(of);
        close(ef);
    }
    /* out of the way first, so that no target number clobbers a source */
    struct pass_fd all[10];
    int np = 0;
    for (int i = 0; o->pass && o->pass[i].as >= 0 && np < 9; i++)
        all[np++] = o->pass[i];
    if (rep_w >= 0)
        all[np++] = (struct pass_fd){ rep_w, 5 };
    int high[10];
    for (int i = 0; i < np; i++)
        high[i] = fcntl(all[i].fd, F_DUPFD_CLOEXEC, 100);
    for (int i = 0; i < np; i++)
        dup2(high[i], all[i].as);             /* clears close-on-exec */
    if (o->gate) {
        char b;
        close(o->gate[1]);
        while (read(o->gate[0], &b, 1) > 0 || errno == EINTR)
            ;
        close(o->gate[0]);
    }
    execv(argv[0], (char *const *)argv);
    perror("exec coordctl");
    _exit(127);
}

void ctl_spawn(struct run *r, const char *sock, const char *dir,
               const struct ctl_opts *o, const char *const *args)
{
    static const struct ctl_opts none;
    static int seq;
    int op[2] = { -1, -1 }, ep[2] = { -1, -1 }, rp[2] = { -1, -1 };
    if (!o)
        o = &none;
    memset(r, 0, sizeof *r);
    r->fd[OUT] = r->fd[ERR] = r->rep = -1;
    seq++;
    snprintf(r->out, sizeof r->out, "%s/ctl-%d.out", dir, seq);
    snprintf(r->err, sizeof r->err, "%s/ctl-%d.err", dir, seq);
    if ((o->pipes && (pipe2(op, O_CLOEXEC) < 0 || pipe2(ep, O_CLOEXEC) < 0)) ||
        (o->report && pipe2(rp, O_CLOEXEC) < 0)) {
        perror("pipe");
        exit(2);
    }
    fflush(stderr);
    r->pid = fork();
    if (r->pid < 0) {
        perror("fork");
        exit(2);
    }
    if (r->pid == 0)
        child(r, sock, o, args, op, ep, rp[1]);
    r->status = -2;
    if (o->pipes) {
        close(op[1]);
        close(ep[1]);
        r->fd[OUT] = op[0];
        r->fd[ERR] = ep[0];
        fcntl(op[0], F_SETFL, O_NONBLOCK);
        fcntl(ep[0], F_SETFL, O_NONBLOCK);
    }
    if (o->report) {
        close(rp[1]);
        r->rep = rp[0];
    }
}

bool run_drain(struct run *r, int which)
{
    char buf[4096];
    for (;;) {
        if (r->fd[which] < 0)
            return false;
        ssize_t n = read(r->fd[which], buf, sizeof buf);
        if (n > 0) {
            text_add(&r->text[which], buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return true;
        close(r->fd[which]);
        r->fd[which] = -1;
        return false;
    }
}

int run_finish(struct run *r, int timeout_ms)
{
    r->status = child_status(r->pid, timeout_ms);
    run_drain(r, OUT);
    run_drain(r, ERR);
    return r->status;
}

void run_free(struct run *r)
{
    if (r->pid > 0) {
        kill(-r->pid, SIGKILL);         /* leftovers of the command's group */
        if (r->status == -2) {
            kill(r->pid, SIGKILL);
            waitpid(r->pid, NULL, 0);
        }
    }
    for (int i = 0; i < 2; i++) {
        if (r->fd[i] >= 0)
            close(r->fd[i]);
        free(r->text[i].p);
    }
    if (r->rep >= 0)
        close(r->rep);
    memset(r, 0, sizeof *r);
    r->fd[OUT] = r->fd[ERR] = r->rep = -1;
}

const char *run_line(struct run *r, int which, int timeout_ms)
{
    static char line[8192];
    uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
    for (;;) {
        struct text *t = &r->text[which];
        const char *s = t->p ? t->p + r->pos[which] : NULL;
        const char *nl = s ? memchr(s, '\n', t->n - r->pos[which]) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - s);
            snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), s);
            r->pos[which] += n + 1;
            return line;
        }
        if (r->fd[which] < 0)
            return NULL;
        uint64_t now = mono_ms();
        if (now >= deadline)
            return NULL;
        struct pollfd p = { .fd = r->fd[which], .events = POLLIN };
        poll(&p, 1, (int)(deadline - now));
        run_drain(r, which);
    }
}

const char *run_text(const struct run *r, int which)
{
    return r->text[which].p ? r->text[which].p : "";
}

/* ---- terminals ---- */

int pty_open(char *slave, size_t size)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, slave, size) != 0) {
        perror("pty");
        exit(2);
    }
    return m;
}

bool pty_expect(int master, const char *needle, int timeout_ms)
{
    char text[4096];
    size_t n = 0;
    uint64_t deadline = mono_ms() + (uint64_t)timeout_ms;
    for (;;) {
        text[n] = '\0';
        if (strstr(text, needle))
            return true;
        uint64_t now = mono_ms();
        struct pollfd p = { .fd = master, .events = POLLIN };
        if (now >= deadline || n + 1 >= sizeof text ||
            poll(&p, 1, (int)(deadline - now)) <= 0)
            break;
        ssize_t k = read(master, text + n, sizeof text - 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        n += (size_t)k;
    }
    fprintf(stderr, "the terminal did not show \"%s\"; it showed:\n%s\n", needle, text);
    return false;
}
