/* spawn.c - see spawn.h. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "spawn.h"

static void close_from(int lowfd)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lowfd, ~0u, 0u) == 0)
        return;
#endif
    long max = sysconf(_SC_OPEN_MAX);
    if (max < 0 || max > 65536)
        max = 65536;
    for (int fd = lowfd; fd < max; fd++)
        close(fd);
}

/* "E<errno>\n" on the ready pipe, then exit: the caller hears why */
__attribute__((noreturn))
static void fail(int ready_w, int e)
{
    char msg[16];
    int i = sizeof msg;
    msg[--i] = '\n';
    do {
        msg[--i] = (char)('0' + e % 10);
        e /= 10;
    } while (e && i > 1);
    msg[--i] = 'E';
    ssize_t wr = write(ready_w, msg + i, sizeof msg - (size_t)i);
    (void)wr;
    _exit(127);
}

static int redirect(const char *path, int flags, int to)
{
    int fd = open(path, flags, 0600);
    if (fd < 0)
        return -1;
    if (fd != to) {
        if (dup2(fd, to) < 0)
            return -1;
        close(fd);
    }
    return 0;
}

/* In the child: only async-signal-safe calls from here on. */
__attribute__((noreturn))
static void exec_child(const struct coord_spawn *s, int ready_w, pid_t parent)
{
    if (s->die_with_parent) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(127);                        /* the parent is already gone */
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);        /* ignored signals survive exec */
    int w = fcntl(ready_w, F_DUPFD, 4);        /* out of the way of 0..3 */
    if (w < 0)
        _exit(127);
    const int append = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC;
    if ((s->stdin_null && redirect("/dev/null", O_RDONLY | O_CLOEXEC, 0) < 0) ||
        (s->stdout_path && redirect(s->stdout_path, append, 1) < 0) ||
        (s->stderr_path && redirect(s->stderr_path, append, 2) < 0))
        fail(w, errno);
    if (s->nofile > 0) {
        struct rlimit rl = { (rlim_t)s->nofile, (rlim_t)s->nofile };
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (dup2(w, 3) < 0)                        /* w >= 4: fd 3 without CLOEXEC */
        fail(w, errno);
    close_from(4);
    if (s->search_path)
        execvp(s->argv[0], (char *const *)s->argv);
    else
        execv(s->argv[0], (char *const *)s->argv);
    fail(3, errno);
}

pid_t coord_spawn(const struct coord_spawn *s, int *ready_fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        errno = e;
        return -1;
    }
    if (pid == 0) {
        if (s->detach) {
            setsid();
            pid_t gc = fork();
            if (gc != 0)
                _exit(gc < 0 ? 1 : 0);         /* the middle child */
        }
        exec_child(s, p[1], parent);
    }
    close(p[1]);
    if (s->detach) {
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
            ;
        pid = 0;
    }
    *ready_fd = p[0];
    return pid;
}
