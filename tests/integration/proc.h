/* proc.h - child processes of the integration tests: coordctl runs (the
 * real binary, with its output in files or on pipes, descriptors handed
 * on, a gate, a terminal), exits awaited through pidfds rather than by
 * polling, and the files and pipes they leave.
 *
 * A run is started in a process group (or session) of its own, so that a
 * run that hangs is killed together with the command it started; its
 * status is the one a shell shows (128+N for signal N), -1 when it did
 * not end in time, -2 while it runs. */
#ifndef COORD_TEST_PROC_H
#define COORD_TEST_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* ---- exits ---- */

/* True when pid (any process) ends within timeout_ms; no polling. */
bool await_exit(pid_t pid, int timeout_ms);
/* Reaps child pid within timeout_ms: its raw wait status, or -1 (it is
 * then left running: the caller decides). */
int wait_pid_timeout(pid_t pid, int timeout_ms);
/* Reaps child pid: its status as a shell shows it, or -1 when it did not
 * end within timeout_ms (it is then killed with its process group). */
int child_status(pid_t pid, int timeout_ms);

/* ---- /proc ---- */

/* /proc/PID/NAME into buf (NUL-terminated): its length, -1 when the
 * process or the file is gone. */
ssize_t proc_read(pid_t pid, const char *name, char *buf, size_t size);
/* State letter and parent from /proc/PID/stat; false when pid is gone. */
bool proc_stat(pid_t pid, char *state, pid_t *ppid);
/* True when pid runs (exists and is no zombie). */
bool proc_alive(pid_t pid);
/* Calls fn(pid, ud) for every process in /proc; -1 when /proc is not
 * readable, else 0. */
int proc_each(void (*fn)(pid_t pid, void *ud), void *ud);

/* ---- text ---- */

/* A growing NUL-terminated buffer; owner frees p. */
struct text {
    char *p;
    size_t n, cap;
};
void text_add(struct text *t, const char *s, size_t n);

/* A whole file as a string (the caller frees it); "" when missing.  *len
 * (unless NULL) gets its length. */
char *slurp(const char *path, size_t *len);
/* The file holds needle / is exactly text; otherwise false, after printing
 * what it holds. */
bool file_has(const char *path, const char *needle);
bool file_is(const char *path, const char *text);
/* One line from fd (a pipe) within timeout_ms, without its newline; false
 * on EOF, timeout, or a line longer than size - 1 (buf holds its start). */
bool fd_read_line(int fd, char *buf, size_t size, int timeout_ms);

/* ---- coordctl runs ---- */

/* A descriptor handed to the command as number `as`; lists end at as < 0. */
struct pass_fd { int fd, as; };

struct ctl_opts {
    const char *scope;          /* --scope SCOPE, unless NULL */
    bool pipes;                 /* stdout/stderr on pipes (run_line, run_text)
                                   instead of files in dir */
    bool report;                /* a pipe on descriptor 5, read end r->rep */
    bool session;               /* setsid: no controlling terminal */
    const char *tty;            /* a pty slave: made the controlling
                                   terminal (implies session) and stdio */
    const int *gate;            /* a pipe: the child reads gate[0] to EOF
                                   before exec, so that the parent releases
                                   many at once by closing gate[1] */
    const struct pass_fd *pass; /* more descriptors handed on */
};

enum { OUT = 0, ERR = 1 };

struct run {
    pid_t pid;
    int status;                 /* see above */
    char out[400], err[400];    /* the files of stdout and stderr */
    int fd[2];                  /* with pipes: read ends (-1: closed) */
    struct text text[2];        /* with pipes: everything read so far */
    size_t pos[2];              /* bytes of text taken by run_line */
    int rep;                    /* with report: the read end, else -1 */
};

/* The coordctl binary under test ($COORDCTL, set by meson). */
const char *coordctl_bin(void);
/* Starts `coordctl --socket SOCK --no-autostart [--scope S] ARGS...`
 * (args NULL-terminated); files go to dir.  Exits the test program when
 * it cannot fork.  Release r with run_free once done with it. */
void ctl_spawn(struct run *r, const char *sock, const char *dir,
               const struct ctl_opts *o, const char *const *args);
/* Reaps r within timeout_ms (see child_status) and, with pipes, reads what
 * they hold without waiting for EOF (the command's own children may hold
 * them): r->status. */
int run_finish(struct run *r, int timeout_ms);
/* Kills what is left of r (its group), closes and frees; r is zeroed. */
void run_free(struct run *r);
/* With pipes: the next whole line of OUT or ERR within timeout_ms (valid
 * until the next call, without its newline), NULL on timeout or EOF. */
const char *run_line(struct run *r, int which, int timeout_ms);
/* With pipes: everything read so far from OUT or ERR ("" if nothing). */
const char *run_text(const struct run *r, int which);
/* With pipes: reads what the pipe holds now; false at EOF. */
bool run_drain(struct run *r, int which);

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* ---- terminals ---- */

/* A new pty: the master's descriptor (close-on-exec), the slave's path in
 * slave.  Exits the test program on failure. */
int pty_open(char *slave, size_t size);
/* Reads the master until what it showed contains needle, within
 * timeout_ms; false (after printing what it showed) otherwise. */
bool pty_expect(int master, const char *needle, int timeout_ms);

#endif
