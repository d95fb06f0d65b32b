/* harness.h - integration test support: real coordd processes in temp
 * dirs, one raw protocol client (rcl_*), the case runner, and the
 * assertion vocabulary shared with the unit tests (../common/check.h,
 * ../common/fields.h).  Child processes (coordctl runs, exits awaited
 * through pidfds, their output) are in proc.h. */
#ifndef COORD_TEST_HARNESS_H
#define COORD_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include "check.h"
#include "enc.h"
#include "fields.h"
#include "msg.h"
#include "proc.h"

/* Runs test functions by name; returns the exit status for main.  argv[1]
 * (optional) picks one test.  A case fails when any check failed while it
 * ran; the brokers it started are killed after it whatever happened. */
typedef void (*test_fn)(void);
struct test_case { const char *name; test_fn fn; };
int run_tests(int argc, char **argv, const struct test_case *tests);

struct broker_proc {
    pid_t pid;
    char dir[256];      /* temp dir holding both */
    char sock[300];
    char data[300];
    char log[300];
    bool names_plain;   /* started with --log-names plain: its log is not checked */
};

/* The coordd binary under test ($COORD_BROKER, set by meson).  With
 * COORD_VALGRIND set, brokers run under valgrind memcheck (logs in the
 * test's temp dir; keep it with COORD_TEST_KEEP). */
const char *broker_binary(void);
/* A fresh temp dir with socket and data paths in it. */
void broker_paths(struct broker_proc *bp);
/* Starts coordd in the foreground (bp must outlive the test function: the
 * runner kills every broker a test started once it returns) on bp's paths (fresh ones if bp->dir is
 * empty) and waits for its ready line.  extra: NULL-terminated arguments.
 * Returns 0 or -1. */
int broker_start(struct broker_proc *bp, const char *const *extra);
/* The lower half of broker_start, for tests about starting itself: forks
 * coordd on bp's paths (made if bp->dir is empty) with --ready-fd, stderr
 * appended to bp->log; --foreground unless told otherwise; nofile > 0
 * caps RLIMIT_NOFILE.  Returns the pid (not tracked: the caller reaps it)
 * and in *ready_fd the read end of the ready pipe, or -1. */
pid_t broker_spawn(struct broker_proc *bp, const char *const *extra, bool foreground,
                   long nofile, int *ready_fd);
/* True when "ready" came on ready_fd within timeout_ms; closes it. */
bool broker_await_ready(int ready_fd, int timeout_ms);
/* Every broker the harness starts logs at debug level (unless the test
 * gives --log-level), and every name a test sends through rcl_send (lock
 * names, keys, channels, workstreams, op ids, scopes, client names of 4
 * bytes or more) is remembered: when the broker is cleaned up, its log
 * must not hold any of them as a value (redacted logs). */

/* Sends sig and waits; returns the wait status. */
int broker_kill(struct broker_proc *bp, int sig);
/* Removes the temp dir. */
void broker_cleanup(struct broker_proc *bp);

/* For tests with one broker: start it (memset + broker_start) or exit the
 * test program, stop and clean it, connect a client or exit. */
void start_or_exit(struct broker_proc *bp, const char *const *args);
void stop_and_clean(struct broker_proc *bp);
struct rcl *connect_or_exit(const struct broker_proc *bp, const char *scope);

uint64_t now_ms(void);
long rss_kb(pid_t pid);

/* ---- rcl: the raw protocol client ----
 *
 * One connection: requests are encoded with coord_enc and sent whole;
 * frames received are queued in arrival order, so a test can wait for one
 * rid or one event while others arrive, or take them in order.  Reads
 * happen only inside rcl_* calls (a test that wants a client to stop
 * reading just stops calling).  A message handed out (m) points into the
 * client's storage until the next call that receives on it.  Calls that
 * wait return 0, -1 when the connection is closed (after every queued
 * frame was taken), -2 on timeout.  Owner: the caller of rcl_open or
 * rcl_connect, until rcl_close. */
struct rcl;
/* Connects without a hello: NULL when nothing accepts on sock. */
struct rcl *rcl_connect(const char *sock);
/* hello (proto 1, scope unless NULL) and its reply: 0 when it is ok. */
int rcl_hello(struct rcl *c, const char *scope);
/* rcl_connect + rcl_hello; NULL when either fails. */
struct rcl *rcl_open(const char *sock, const char *scope);
void rcl_close(struct rcl *c);
int rcl_fd(const struct rcl *c);
/* Start a request; add fields with coord_enc_kv_* on the returned encoder,
 * then rcl_send. */
coord_enc *rcl_begin(struct rcl *c, const char *op, uint64_t rid);
int rcl_send(struct rcl *c);
/* {op, rid} and nothing else, sent. */
int rcl_request(struct rcl *c, const char *op, uint64_t rid);
/* Raw bytes, as they are: frames prepared in a buffer (pipelining),
 * partial or malformed ones.  0, or -1 when the peer is gone. */
int rcl_write(struct rcl *c, const void *p, size_t n);
/* The oldest frame received, whatever it is; -3 when it does not decode
 * (it is consumed all the same). */
int rcl_next(struct rcl *c, int timeout_ms, coord_msg *m);
/* Wait for the reply to rid (or the event named ev), leaving other frames
 * queued. */
int rcl_reply(struct rcl *c, uint64_t rid, int timeout_ms, coord_msg *m);
int rcl_event(struct rcl *c, const char *ev, int timeout_ms, coord_msg *m);
/* Body length of the frame last handed out (its 4-byte header excluded). */
size_t rcl_last_len(const struct rcl *c);
/* Reads what arrives within timeout_ms (0: what the socket holds now) and
 * queues the whole frames: how many are queued, or -1 once closed. */
int rcl_pump(struct rcl *c, int timeout_ms);
/* Number of frames queued and not yet taken, after reading what the
 * socket holds right now. */
size_t rcl_queued(struct rcl *c);
/* Bytes the kernel holds for c, not read yet (FIONREAD). */
size_t rcl_unread(const struct rcl *c);
/* True when the peer closed (EOF or reset) within timeout_ms; frames
 * arriving meanwhile are dropped. */
bool rcl_wait_eof(struct rcl *c, int timeout_ms);
/* lock.acquire shorthand: opts like "shared", "if_available", "steal"
 * separated by commas; timeout/lease 0 = absent. */
int rcl_acquire(struct rcl *c, uint64_t rid, const void *name, size_t nlen,
                const char *opts, uint64_t timeout_ms, uint64_t lease_ms);
/* Round trip a ping: everything sent before on c has been processed. */
int rcl_sync(struct rcl *c);
/* One counter of a stats reply (a missing one fails the check);
 * UINT64_MAX when the request fails. */
#define rcl_stat(c, key) rcl_stat_at(__FILE__, __LINE__, (c), (key))
uint64_t rcl_stat_at(const char *file, int line, struct rcl *c, const char *key);

/* Descriptors (results by reference).  rcl_hello_fds: hello saying fds
 * (or not).  rcl_send_fd: rcl_send with fd passed (SCM_RIGHTS) with the
 * frame's first byte; rcl_write_fd the same for raw bytes.  A received
 * frame that declares result_fd gets the oldest descriptor received;
 * rcl_take_fd gives the caller (who closes it) the descriptor of the frame
 * last handed out, -1 when none (an untaken one is closed with the next
 * frame handed out).  rcl_fds_queued: descriptors received and not taken. */
int rcl_hello_fds(struct rcl *c, const char *scope, bool fds);
int rcl_send_fd(struct rcl *c, int fd);
int rcl_write_fd(struct rcl *c, const void *p, size_t n, int fd);
int rcl_take_fd(struct rcl *c);
size_t rcl_fds_queued(const struct rcl *c);
/* Everything fd holds from its offset on equals want[0..n) (read to its
 * end: one byte more is a difference). */
bool fd_reads_as(int fd, const uint8_t *want, size_t n);

/* A C string as pointer and length, for the (ptr, len) arguments. */
#define S(s) s, strlen(s)

#endif
