/* harness.h - integration test support: real coordd processes in temp
 * dirs, raw protocol connections, and assertion macros. */
#ifndef COORD_TEST_HARNESS_H
#define COORD_TEST_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include "enc.h"
#include "msg.h"

extern int harness_failures;

#define CHECK(cond) do { if (!(cond)) { harness_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define REQUIRE(cond) do { if (!(cond)) { harness_failures++; \
    fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond); \
    return; } } while (0)
#define CHECK_EQ_U(a, b) do { unsigned long long a_ = (a), b_ = (b); if (a_ != b_) { \
    harness_failures++; fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%llu != %llu)\n", \
    __FILE__, __LINE__, #a, #b, a_, b_); } } while (0)

/* Runs test functions by name; returns the exit status for main.  argv[1]
 * (optional) picks one test. */
typedef void (*test_fn)(void);
struct test_case { const char *name; test_fn fn; };
int run_tests(int argc, char **argv, const struct test_case *tests);

struct broker_proc {
    pid_t pid;
    char dir[256];      /* temp dir holding both */
    char sock[300];
    char data[300];
    char log[300];
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
/* Sends sig and waits; returns the wait status. */
int broker_kill(struct broker_proc *bp, int sig);
/* Removes the temp dir. */
void broker_cleanup(struct broker_proc *bp);
/* Waits for a child without blocking forever: returns its status or -1. */
int wait_pid_timeout(pid_t pid, int timeout_ms);

/* Raw protocol access. */
int raw_connect(const char *sock);
int raw_send(int fd, const void *p, size_t n);
/* Sends {op, rid} plus what fill adds. */
int raw_request(int fd, const char *op, uint64_t rid);
int raw_hello(int fd, const char *scope);
/* Reads one frame into m (body copied into *store, free it).  Returns 0,
 * -1 on EOF/error, -2 on timeout. */
int raw_recv(int fd, int timeout_ms, coord_msg *m, uint8_t **store);
/* True when the peer closed (EOF) within timeout_ms, skipping frames. */
bool raw_wait_eof(int fd, int timeout_ms);
/* Fields of the last received message. */
bool msg_ok(coord_msg *m);
bool msg_code_is(coord_msg *m, const char *code);
uint64_t msg_uint(coord_msg *m, const char *key);

uint64_t now_ms(void);
long rss_kb(pid_t pid);

#endif

/* A raw protocol client that keeps frames it was not asked for yet, so a
 * test can wait for one rid or one event while others arrive. */
struct rcl;
struct rcl *rcl_open(const char *sock, const char *scope);
void rcl_close(struct rcl *c);
int rcl_fd(const struct rcl *c);
/* Start a request; add fields with coord_enc_kv_* on the returned encoder,
 * then rcl_send. */
coord_enc *rcl_begin(struct rcl *c, const char *op, uint64_t rid);
int rcl_send(struct rcl *c);
/* Wait for the reply to rid (or the event named ev); m points into the
 * client's storage until the next call.  0, -1 closed, -2 timeout. */
int rcl_reply(struct rcl *c, uint64_t rid, int timeout_ms, coord_msg *m);
int rcl_event(struct rcl *c, const char *ev, int timeout_ms, coord_msg *m);
/* Number of frames already received and not yet taken, after reading what
 * the socket holds right now. */
size_t rcl_queued(struct rcl *c);
/* lock.acquire shorthand: opts like "shared", "if_available", "steal"
 * separated by commas; timeout/lease 0 = absent. */
int rcl_acquire(struct rcl *c, uint64_t rid, const void *name, size_t nlen,
                const char *opts, uint64_t timeout_ms, uint64_t lease_ms);
/* Helpers on a message. */
bool msg_bool(coord_msg *m, const char *key);
bool msg_str_is(coord_msg *m, const char *key, const void *s, size_t n);
/* Round trip a ping: everything sent before on c has been processed. */
int rcl_sync(struct rcl *c);

/* For tests with one broker: start it (memset + broker_start) or exit the
 * test program, stop and clean it, connect a client or exit. */
void start_or_exit(struct broker_proc *bp, const char *const *args);
void stop_and_clean(struct broker_proc *bp);
struct rcl *connect_or_exit(const struct broker_proc *bp, const char *scope);
