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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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
/* Prints "coordctl: connect: CODE: message" and returns the exit status. */
int ctl_fail_connect(struct ctl *ctl, int code);
/* Prints "coordctl: <what>: CODE: message" for a failed call on ctl->c and
 * returns the exit status (3 when the connection is gone, else 1). */
int ctl_fail_call(struct ctl *ctl, const char *what, int code);
/* Prints "coordctl: <command>: <message>" and the command's usage line to
 * stderr; returns CTL_EXIT_USAGE. */
int ctl_usage(struct ctl *ctl, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Name of any coord code: "FENCED", "CONNECT"... */
const char *ctl_code_name(int code);
/* Sends op with no fields and waits: 0 and *reply, or prints the failure
 * and returns its exit status. */
int ctl_simple_call(struct ctl *ctl, const char *op, coord_reply_t **reply);
/* Prints m as one JSON line on stdout; returns an exit status. */
int ctl_print_json(coord_map m);

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

/* ---- commands (ctl-info.c) ---- */
int cmd_status(struct ctl *ctl, int argc, char **argv);
int cmd_stats(struct ctl *ctl, int argc, char **argv);
int cmd_ping(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-lock.c) ---- */
int cmd_lock(struct ctl *ctl, int argc, char **argv);
int cmd_locks(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-flight.c) ---- */
int cmd_once(struct ctl *ctl, int argc, char **argv);
int cmd_flights(struct ctl *ctl, int argc, char **argv);
int cmd_records(struct ctl *ctl, int argc, char **argv);
int cmd_purge(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-leader.c) ---- */
int cmd_leader(struct ctl *ctl, int argc, char **argv);
int cmd_leader_run(struct ctl *ctl, int argc, char **argv);
int cmd_disable(struct ctl *ctl, int argc, char **argv);
int cmd_enable(struct ctl *ctl, int argc, char **argv);

/* ---- commands (ctl-watch.c) ---- */
int cmd_watch(struct ctl *ctl, int argc, char **argv);
int cmd_publish(struct ctl *ctl, int argc, char **argv);
int cmd_subscribe(struct ctl *ctl, int argc, char **argv);

#endif
