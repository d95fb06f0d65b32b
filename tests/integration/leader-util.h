/* leader-util.h - what the leadership integration tests share: raw-client
 * leadership requests (test_leaders.c, test_leader_policies.c), coordctl runs
 * against one broker with a report pipe on descriptor 5 and checks on
 * their output (test_cli_leader.c, test_cli_leader_policies.c), and a libcoord
 * client of a test broker (those two and test_leader_policies_client.c).
 *
 * Linked by the harness library; lib_connect, the only part that needs
 * libcoord, is in leader-util-lib.c so that the raw-client tests link
 * without it. */
#ifndef COORD_TEST_LEADER_UTIL_H
#define COORD_TEST_LEADER_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include "harness.h"

/* ---- raw-client leadership requests ---- */

/* leader.campaign on ws, sent (the reply is not awaited).  opts: words
 * separated by spaces, "lease=MS", "protocol=P", "incident=I" and bare
 * flags sent as true ("steal", "if_available"); NULL for none. */
void rcl_campaign(struct rcl *c, uint64_t rid, const char *ws, const char *opts);
/* rcl_campaign and its reply in *m: the generation granted, 0 when the
 * reply is an error or not granted. */
uint64_t rcl_elect(struct rcl *c, uint64_t rid, const char *ws, const char *opts,
                   coord_msg *m);
/* op {workstream, generation (unless 0)} and its reply in *m within
 * timeout_ms: rcl_reply's status. */
int rcl_ws_gen(struct rcl *c, uint64_t rid, const char *op, const char *ws, uint64_t gen,
               int timeout_ms, coord_msg *m);

/* ---- coordctl runs ---- */

/* Starts `coordctl --socket bp.sock --no-autostart ARGS...` (NULL-ended)
 * with stdout and stderr on pipes; fd5 >= 0 is handed to the command as
 * descriptor 5.  Release r with run_free. */
void leader_ctl_start(struct run *r, const struct broker_proc *bp, int fd5,
                      const char *const *args);
/* leader_ctl_start without descriptor 5, run to its end within
 * timeout_ms: its exit status.  Release r with run_free. */
int leader_ctl_run(struct run *r, const struct broker_proc *bp, const char *const *args,
                   int timeout_ms);
/* r's stdout (OUT) or stderr (ERR) contains needle; otherwise false after
 * printing what it holds. */
bool run_has(const struct run *r, int which, const char *needle);
/* r's stdout has a line "NAME   VALUE" of an aligned table; otherwise
 * false after printing it. */
bool run_has_row(const struct run *r, const char *name, const char *value);

/* A pipe whose write end (wr) goes to a command as descriptor 5; its lines
 * are read from the read end.  Owner: the caller, until report_close. */
struct report {
    int wr;
    struct run reader;          /* only its stdout machinery is used */
};
/* Exits the test program when no pipe can be made. */
void report_open(struct report *p);
/* The next line within timeout_ms (valid until the next call), NULL on
 * timeout or EOF. */
const char *report_line(struct report *p, int timeout_ms);
/* Closes both ends and frees; p is zeroed. */
void report_close(struct report *p);

/* A shell command for leader-run that says "started G" on descriptor 5
 * (G: $COORD_GENERATION), and "term" there when it gets SIGTERM (then
 * exits 0). */
extern const char *const reporting_cmd;

/* ---- libcoord (leader-util-lib.c; the test links libcoord) ---- */

/* A libcoord client (a coord_t) of bp's broker, never autostarting, in
 * scope (NULL: none) under client_name; exits the test program when it
 * cannot connect.  The caller closes it with coord_close. */
struct coord;
struct coord *lib_connect(const struct broker_proc *bp, const char *scope,
                          const char *client_name);

#endif
