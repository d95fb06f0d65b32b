/* coordctl.h - what the command files of coordctl share: the context built
 * from the global flags, the command table entry, and output helpers.
 *
 * Adding a command: write `int cmd_NAME(struct ctl *ctl, int argc, char
 * **argv)` (argv[0] is the command's name; parse its own flags with
 * getopt_long and a "+" optstring), declare it below, and add one row to
 * the table in coordctl.c.  Return an exit status (CTL_EXIT_*).  Connect
 * with ctl_connect, report failures with ctl_fail_call / ctl_usage. */
#ifndef COORDCTL_H
#define COORDCTL_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "coord.h"

enum {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAIL = 1,        /* the broker refused, or "not running" */
    CTL_EXIT_USAGE = 2,
    CTL_EXIT_UNREACHABLE = 3, /* the broker cannot be reached */
};

struct ctl {
    coord_options opts;       /* from the global flags */
    bool json;                /* --json */
    char socket[256];         /* the socket path, for messages */
    coord_t *c;               /* once connected; closed by main */
    const struct ctl_command *cmd;
};

struct ctl_command {
    const char *name;
    const char *args;         /* synopsis of the arguments */
    const char *summary;      /* one line for the help text */
    int (*fn)(struct ctl *ctl, int argc, char **argv);
};

/* Connects (autostart as the flags say, never when no_autostart is true).
 * Returns 0, or the coord code of the failure without printing anything;
 * ctl_fail_connect prints it. */
int ctl_try_connect(struct ctl *ctl, bool no_autostart);
/* Connects or prints the error; returns 0 or an exit status. */
int ctl_connect(struct ctl *ctl);
/* For lock, once and leader-run: *shown = name escaped for messages, then
 * ctl_connect.  0, or an exit status (*shown NULL; out of memory printed
 * as "coordctl: COMMAND: out of memory"). */
int ctl_connect_shown(struct ctl *ctl, const char *name, char **shown);
/* Prints "coordctl: connect: CODE: message" and returns the exit status. */
int ctl_fail_connect(struct ctl *ctl, int code);
/* Prints "coordctl: <what>: CODE: message" for a failed call on ctl->c and
 * returns the exit status (3 when the connection is gone, else 1).  Under
 * --json every error (these, usage errors, ctl_error) is one line on stderr
 * instead: {"error":{"command":C,"op":WHAT,"code":CODE,"message":M}}. */
int ctl_fail_call(struct ctl *ctl, const char *what, int code);
/* Prints "coordctl: <command>: <message>" and the command's usage line to
 * stderr; returns CTL_EXIT_USAGE.  A macro, so that the value is seen where
 * it is returned: clang's analyzer reads one file at a time, and the
 * argument parsers' callers (`if (rc) return rc;`, then the operands the
 * parser set) are followed only knowing that a usage error is not 0. */
#define ctl_usage(...) (ctl_say_usage(__VA_ARGS__), CTL_EXIT_USAGE)
void ctl_say_usage(struct ctl *ctl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* For commands whose only flag is --json (also accepted after the command
 * name): skips it (setting ctl->json) and then an optional "--"; returns
 * the index of the first operand in argv. */
int ctl_first_operand(struct ctl *ctl, int argc, char **argv);
/* Name of any coord code: "FENCED", "CONNECT"... */
const char *ctl_code_name(int code);
/* Sends op with no fields and waits: 0 and *reply, or prints the failure
 * and returns its exit status. */
int ctl_simple_call(struct ctl *ctl, const char *op, coord_reply_t **reply);
/* Prints m as one JSON line on stdout without the wire's own fields (the
 * reply's "rid" and "ok"); returns an exit status. */
int ctl_print_json(coord_map m);
/* The same object without the newline, inside an object being printed. */
void ctl_print_json_inline(coord_map m);
/* The members of m but "rid" and "ok" as `"key":value` pairs, each after a
 * comma unless *first (which it clears): for objects built piecewise. */
void ctl_json_members(coord_map m, bool *first);
/* `"key":value` of the entry key of m (nothing when absent). */
void ctl_json_member(coord_map m, const char *key, bool *first);
/* p[0..n) as a JSON value (coord_json_text) on stdout ("null": no memory). */
void ctl_json_text(const char *p, size_t n);
/* An error with a code of ours: "coordctl: COMMAND: MESSAGE" on stderr, or
 * under --json the error object (see ctl_fail_call).  code: "BUSY",
 * "TIMEOUT", "NOT_RUNNING"... */
void ctl_error(struct ctl *ctl, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Aligned "name  value" lines. */
struct ctl_table {
    struct { char *name, *value; } *rows;
    size_t n, cap;
    bool failed;
};
void ctl_table_add(struct ctl_table *t, const char *name, const char *value);
void ctl_table_addf(struct ctl_table *t, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Adds every entry of m (nested maps flattened as parent.child), in the
 * order received, skipping the keys "rid" and "ok" at the top level. */
void ctl_table_add_map(struct ctl_table *t, coord_map m, const char *prefix);
/* Prints and frees the rows; returns an exit status. */
int ctl_table_print(struct ctl_table *t);

/* Column tables: a line of titles, then the rows, every column but the
 * last padded to its widest cell. */
struct ctl_rows {
    int ncols;                  /* 1..16 */
    const char *const *titles;
    char **cell;                /* n * ncols malloc'd strings */
    size_t n;
    bool failed;                /* out of memory: nothing is printed */
};
/* A new row of ncols NULL cells to fill; NULL once out of memory. */
char **ctl_rows_add(struct ctl_rows *t);
/* After filling a row: a NULL cell (out of memory) fails the table. */
void ctl_rows_check(struct ctl_rows *t, char **row);
/* Prints (unless failed) and frees; returns an exit status (failed:
 * "coordctl: WHAT: out of memory"). */
int ctl_rows_print(struct ctl_rows *t, const char *what);
/* A malloc'd printf of at most 255 bytes; NULL when out of memory. */
char *ctl_strdupf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A uint field of m as a cell: its digits, or "-" when absent. */
char *ctl_uint_cell(coord_map m, const char *key);

/* Durations for people: "812 ms", "4.2 s", "5m 12s", "3h 05m", "2d 4h". */
void ctl_format_duration(char *out, size_t size, uint64_t ms);

/* p[0..n) for a terminal: printable ASCII as is, a backslash doubled,
 * every other byte as \xNN.  The caller frees it; NULL when out of memory. */
char *ctl_escape(const char *p, size_t n);
/* A string field of m, escaped ("" when absent); NULL when out of memory. */
char *ctl_escaped_field(coord_map m, const char *key);
/* "2", "0.5", "1.25": seconds to milliseconds (a non-zero value rounds up
 * to at least 1 ms).  False when s is not such a number. */
bool ctl_parse_seconds(const char *s, uint64_t *ms);
/* Milliseconds of CLOCK_MONOTONIC and of the wall clock. */
int64_t ctl_mono_ms(void);
uint64_t ctl_wall_ms(void);

/* ---- running CMD (ctl-run.c) ---- */

/* After we signalled CMD's process group and CMD ended, what is left of
 * the group gets this long to end before SIGKILL; `once` also reads CMD's
 * stdout at most this long after CMD ended (a background child may keep
 * it open).  Long enough for a TERM trap to clean up, short enough that
 * coordctl returns promptly. */
#define CTL_GRACE_MS 2000
/* How often, in that grace, we look whether the group is empty (its
 * members need not be our children, so no event says so). */
#define CTL_SETTLE_POLL_MS 50

/* CMD run by a command (what: "lock", "once"... in messages).  While it
 * runs, SIGCHLD, SIGINT, SIGTERM and SIGHUP are blocked and come on sfd.
 * CMD leads a process group of its own (group) unless we are in the
 * foreground of our controlling terminal; see ctl-run.c. */
struct ctl_child {
    const char *what;
    pid_t pid;
    int sfd;                    /* the signalfd, for poll() */
    bool exited;                /* reaped: wstatus holds how it ended */
    int wstatus;
    bool interrupted;           /* SIGINT, SIGTERM or SIGHUP came */
    bool group;                 /* CMD's pid is its process group's id */
    bool subreaper;             /* we inherit the group's orphans */
    bool signalled;             /* we signalled the group */
    int64_t settle_until;       /* once exited: the end of the grace */
    bool settled;               /* the group is empty, or was killed */
    sigset_t old;               /* the mask to restore */
    bool ignore_sigpipe;
    void (*old_pipe)(int);      /* SIGPIPE's disposition, when ignored */
    bool intercept;             /* the first SIGINT or SIGTERM is not
                                   forwarded but kept in intercepted (the
                                   caller decides: leader-run drains) */
    int intercepted;            /* that signal, 0: none came */
};
/* The operands of lock, once and leader-run from argv[i] on: NAME (what
 * says which: "missing KEY"), an optional "--", then CMD.  0, or the exit
 * status of a usage error. */
int ctl_name_and_cmd(struct ctl *ctl, int argc, char **argv, int i,
                     const char *what, const char **name, char ***cmd);
/* How lock and leader-run wait: -n, -w SECONDS, --steal (and lock's -s,
 * which --steal excludes too). */
struct ctl_wait {
    bool nonblock;              /* -n */
    bool have_wait;             /* -w given */
    uint64_t wait_ms;
    bool steal;
    bool shared;                /* lock -s */
    bool has_shared;            /* the command has -s (for the message) */
};
/* The combinations of w checked, then -w settled into the request: 0 s is
 * -n (waiting 0 s is not waiting), else *timeout_ms.  0, or the exit
 * status of a usage error. */
int ctl_wait_settle(struct ctl *ctl, const struct ctl_wait *w, bool *if_available,
                    uint64_t *timeout_ms);
/* setenv of the name/value pairs of vars (NULL-ended); false after
 * printing "coordctl: WHAT: setenv: ...". */
bool ctl_child_env(const char *what, const char *const *vars);
/* Starts cmd (execvp): its stdout is stdout_fd unless that is -1; with
 * ignore_sigpipe we ignore SIGPIPE until ctl_child_end (CMD does not).
 * 0, or -1 after printing why.  Descriptors not meant for CMD must be
 * close-on-exec. */
int ctl_child_start(struct ctl_child *ch, const char *what, char **cmd,
                    int stdout_fd, bool ignore_sigpipe);
/* When sfd is readable: forwards SIGINT/SIGTERM/SIGHUP (in our own
 * group: only those sent to us alone, not the terminal's, which CMD got
 * too) and reaps. */
void ctl_child_signals(struct ctl_child *ch);
/* Sends sig to CMD's group (sharing ours: to CMD alone, while it runs). */
void ctl_child_kill(struct ctl_child *ch, int sig);
/* The condition of the wait loops: true while CMD runs and, after we
 * signalled its group, until the rest of the group is gone (SIGKILL at the
 * end of CTL_GRACE_MS).  Call it after each wake-up. */
bool ctl_child_running(struct ctl_child *ch);
/* The poll() timeout that ctl_child_running needs: -1 (none) or ms. */
int ctl_child_poll_ms(const struct ctl_child *ch);
/* Sends sig, waits for CMD to end, then SIGKILLs the rest of its group. */
void ctl_child_stop(struct ctl_child *ch, int sig);
/* After CMD ended: drops pending signals, restores the mask (and SIGPIPE),
 * stops being a subreaper. */
void ctl_child_end(struct ctl_child *ch);
/* A wait status as a shell reports it: the exit status, or 128+N when
 * killed by signal N. */
int ctl_exit_code(int wstatus);
/* Runs cmd with the variables env (as ctl_child_env), nothing held at
 * the broker (a fallback without coordination): its stdout is ours, the
 * signals sent to us are forwarded.  Returns coordctl's exit status: CMD's
 * (ctl_exit_code), or 1 when it could not start. */
int ctl_child_run(const char *what, const char *const *env, char **cmd);

/* Something held at the broker while CMD runs (a lock, a leadership).  The
 * command embeds struct ctl_hold as the first member of its own state;
 * the callbacks get a pointer to it. */
struct ctl_hold;
struct ctl_hold_ops {
    const char *what;           /* "lock": the command, in messages */
    const char *lost;           /* "lost": "coordctl: lock: lost NAME (why)" */
    coord_event_cb on_event;    /* ud: the ctl_hold; calls ctl_hold_lost */
    bool dispatch_first;        /* dispatch before the first poll (frames
                                   that came with the grant are read) */
    /* the renewal request, sent every third of lease_ms; a reply of
     * renew_refused means the hold is gone */
    coord_req_t *(*renew_req)(struct ctl_hold *h);
    int renew_refused;
    const char *renew_refused_why;
    /* gives the hold back when CMD has ended; release_refused: it was gone */
    int (*release)(struct ctl_hold *h);
    int release_refused;
    const char *release_refused_why;
    /* NULL, or: SIGINT/SIGTERM to coordctl is a drain request.  drain
     * sends it to the broker without waiting (0, or a negative code) and
     * its reply calls ctl_hold_drain; CMD's group gets SIGTERM then (or
     * CTL_DRAIN_REPLY_MS later at the latest) */
    int (*drain)(struct ctl_hold *h);
};
/* How long a drain request waits for the broker's answer before CMD is
 * told anyway: the answer makes CMD's new claims refused (DRAINING) before
 * CMD hears of the drain; a broker that does not answer must not keep CMD
 * running. */
#define CTL_DRAIN_REPLY_MS 1000
struct ctl_hold {
    const struct ctl_hold_ops *ops;
    struct ctl *ctl;            /* connected */
    char *shown;                /* the name, escaped, for messages */
    uint64_t lease_ms;          /* 0: nothing to renew */
    bool renew_in_flight;
    bool lost;                  /* the hold is gone (event, renew, connection) */
    bool announced;             /* "lost" message printed */
    char reason[96];
    bool drain_asked;           /* a drain request was sent (signal) */
    int64_t drain_deadline;     /* ... CMD is told at the latest then */
    bool drain;                 /* draining: CMD gets SIGTERM, then release */
};
/* The hold is draining (a broker event, or the answer to ops->drain): CMD's
 * group gets SIGTERM, and the hold is released once CMD ended.  With
 * announce, says "coordctl: WHAT: draining NAME (why)" (p[0..n)
 * escaped). */
void ctl_hold_drain(struct ctl_hold *h, const char *p, size_t n, bool announce);
/* Records the first reason the hold went away (p[0..n) escaped; n == 0:
 * "no reason given"). */
void ctl_hold_lost(struct ctl_hold *h, const char *p, size_t n);
/* Runs cmd with the variables env (as ctl_child_env) while keeping the
 * hold: renews it, sends CMD's group SIGTERM when it is lost (and says so),
 * releases it when CMD ends (and, after a stop, the rest of its group).
 * Returns coordctl's exit status: CMD's, 1
 * instead of 0 when the hold was lost (a drained hold is not lost: CMD's).  Callbacks may still point at h:
 * close the connection before h goes away. */
int ctl_hold_run(struct ctl_hold *h, const char *const *env, char **cmd);

/* ---- commands (ctl-info.c) ---- */
int cmd_status(struct ctl *ctl, int argc, char **argv);
int cmd_stats(struct ctl *ctl, int argc, char **argv);
int cmd_top(struct ctl *ctl, int argc, char **argv);
int cmd_doctor(struct ctl *ctl, int argc, char **argv);
/* stats' latency map as a table: one row per kind, {count, p50_ms, p99_ms,
 * max_ms}, in the order the broker sent them (stats and top).  Returns an
 * exit status. */
int ctl_latency_table(coord_map lat);
/* ctl-metrics.c: stats --openmetrics [--listen HOST:PORT] */
int ctl_stats_openmetrics(struct ctl *ctl, int argc, char **argv);
int cmd_reload(struct ctl *ctl, int argc, char **argv);
int cmd_ping(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-lock.c) ---- */
int cmd_lock(struct ctl *ctl, int argc, char **argv);
int cmd_locks(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-flight.c) ---- */
int cmd_once(struct ctl *ctl, int argc, char **argv);
int cmd_flights(struct ctl *ctl, int argc, char **argv);
int cmd_records(struct ctl *ctl, int argc, char **argv);
int cmd_record(struct ctl *ctl, int argc, char **argv);
int cmd_purge(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-leader.c) ---- */
/* leader [info] WORKSTREAM, and its subcommands (below, and history and
 * drain) */
int cmd_leader(struct ctl *ctl, int argc, char **argv);
/* A generation as an operand: a positive decimal number. */
bool ctl_parse_generation(const char *s, uint64_t *gen);
/* The single WORKSTREAM operand (after ctl_first_operand's --json and
 * "--") into *ws: 0, or a usage status. */
int ctl_one_workstream(struct ctl *ctl, int argc, char **argv, const char **ws);

/* ---- leader subcommands (argv[0] is the subcommand's name) ---- */
/* ctl-descriptor.c: define (flags, or -f FILE), describe */
int ctl_leader_define(struct ctl *ctl, int argc, char **argv);
int ctl_leader_describe(struct ctl *ctl, int argc, char **argv);
/* "30s", "500ms", "2m", "1h", "1.5s"; a bare number is seconds.  False
 * when s is not such a duration (or above 2^40 ms). */
bool ctl_parse_duration(const char *s, uint64_t *ms);
/* ctl-outbox.c: claim, commit, abandon (generation from --generation or
 * $COORD_GENERATION), pending, check */
int ctl_leader_claim(struct ctl *ctl, int argc, char **argv);
int ctl_leader_commit(struct ctl *ctl, int argc, char **argv);
int ctl_leader_abandon(struct ctl *ctl, int argc, char **argv);
int ctl_leader_pending(struct ctl *ctl, int argc, char **argv);
int ctl_leader_check(struct ctl *ctl, int argc, char **argv);
/* Their arguments (and history's): [--generation N] [--limit N] [--json]
 * then min..max operands into ops[] (*nops of them).  gen NULL: no
 * --generation (else from it or $COORD_GENERATION, required); limit NULL:
 * no --limit (else 0 when absent).  0, or a usage status. */
int ctl_leader_args(struct ctl *ctl, int argc, char **argv, int min, int max,
                    char **ops, int *nops, uint64_t *gen, unsigned *limit);
int cmd_leader_run(struct ctl *ctl, int argc, char **argv);
int cmd_disable(struct ctl *ctl, int argc, char **argv);
int cmd_enable(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-watch.c) ---- */
int cmd_watch(struct ctl *ctl, int argc, char **argv);
int cmd_publish(struct ctl *ctl, int argc, char **argv);
int cmd_subscribe(struct ctl *ctl, int argc, char **argv);

#endif
