/* bench.h - coord-bench: the product brief's figures, each measured as a
 * ratio to a raw baseline taken in the same run: a minimal single-threaded
 * epoll echo server inside this process, driven by the same client code
 * with the same message size and the same client count.
 *
 * Parts: wire.c (the small raw client both sides share), echo.c (the
 * baseline server), spawn.c (starting and stopping coordd, RSS), report.c
 * (figures, aligned text, JSON), util.c (clocks, percentiles), and one file
 * per group of scenarios (sc-*.c). */
#ifndef COORD_BENCH_H
#define COORD_BENCH_H

#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "coord-codes.h"
#include "enc.h"
#include "msg.h"

/* ---- run-wide settings ---- */

struct bench {
    /* the broker */
    char socket_path[128];
    pid_t broker_pid;            /* for /proc/PID/status; 0: unknown */
    bool own_broker;             /* started (and stopped) by us */
    const char *broker_path;
    char data_dir[128];          /* the broker's data dir, "" when unknown */
    char tmpdir[64];             /* ours: sockets, data dir, fsync file */
    char echo_path[108];         /* the baseline echo server's socket */
    char redis_path[108];        /* our redis-server's socket, "" when none */
    char redis_aof_path[108];    /* the appendfsync-always one's, "" when none */

    /* options */
    bool quick;
    bool json;
    bool verbose;
    bool echo_thread;            /* baseline server in a thread, not a child */
    int threads;                 /* client threads for many-clients */
    double scale;                /* multiplies durations and iterations */

    size_t frame_size;           /* bytes of a typical lock.acquire frame */
    struct echo_server *echo;
    unsigned seq;                /* makes names unique across scenarios */
};

/* ---- util.c ---- */

uint64_t now_ns(void);
double ns_to_us(double ns);
void sleep_ms(unsigned ms);
/* Sorts v in place; p in [0,100].  NAN when n == 0. */
double percentile(double *v, size_t n, double p);
double median3(double *v, size_t n);   /* median, sorting v */
/* Progress text: to stderr, only with --verbose. */
void vlog(const struct bench *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Raise RLIMIT_NOFILE's soft limit to the hard one; returns the new soft. */
long raise_nofile(void);
/* Scaled count/duration: max(min, v * b->scale). */
unsigned scaled(const struct bench *b, unsigned v, unsigned min);
/* The CPU pid's main thread last ran on, or -1. */
int last_cpu(pid_t pid);
/* Pins pid's main thread (0: the calling thread) to one CPU; *old (may be
 * NULL) receives its mask first.  0 or -1. */
int pin(pid_t pid, int cpu, cpu_set_t *old);

/* ---- wire.c: a minimal blocking client of the wire protocol ---- */

struct wconn {
    int fd;
    uint64_t rid;                /* last rid used */
    uint8_t *in;                 /* received bytes [ioff, ilen) unread */
    size_t ilen, ioff, icap;
    coord_buf out;               /* encoded, not yet written */
    coord_msg msg;               /* the last frame parsed */
    bool has_msg;
    /* per-scenario state */
    uint64_t lock;
    bool holding;
    uint64_t expect;             /* rid awaited */
    uint64_t t_sent;
    int idx;
    char name[32];               /* the lock name this connection uses */
    char token[24];              /* Redis: the value its lock holds */
};

int wc_open(struct wconn *w);                      /* fd = -1, buffers */
int wc_connect(struct wconn *w, const char *path); /* 0 or -errno */
void wc_close(struct wconn *w);
/* Encodes hello into out (does not send). */
void wc_enc_hello(struct wconn *w);
/* connect + hello + its reply: 0, COORD_ECONNECT (errno says why), or the
 * negative code hello was refused with. */
int wc_dial(struct wconn *w, const char *path);
/* Writes out fully and empties it: 0 or -errno. */
int wc_flush(struct wconn *w);
/* One read(): >0 bytes, 0 EOF, -errno. */
ssize_t wc_fill(struct wconn *w);
/* The same with recvmsg: descriptors that came with the bytes are added to
 * fdq[*nfdq..max) (past max they are closed). */
ssize_t wc_fill_fds(struct wconn *w, int *fdq, int *nfdq, int max);
/* Takes the next complete frame from the input and parses it into msg:
 * 1 a frame, 0 none complete yet, -1 malformed. */
int wc_next(struct wconn *w);
/* Blocks until a frame is parsed into msg: 0, or -1 (EOF/error). */
int wc_read(struct wconn *w);
/* Sends out and reads until the reply with rid w->rid: 0 ok:true, a
 * negative wire code for ok:false, COORD_ECLOSED/COORD_EPROTOCOL.  Events
 * met on the way are dropped. */
int wc_call(struct wconn *w);
/* The same client path against the echo server: sends out, reads until
 * the frame with rid w->rid came back: 0 or COORD_ECLOSED. */
int wc_call_echo(struct wconn *w);

/* The parsed message (after wc_next/wc_read). */
bool wm_uint(const struct wconn *w, const char *key, uint64_t *v);
bool wm_bool(const struct wconn *w, const char *key, bool *v);
bool wm_str(const struct wconn *w, const char *key, const uint8_t **p, size_t *n);
bool wm_is(const struct wconn *w, const char *key, const char *s);
/* 0 ok:true, negative wire code for ok:false (COORD_EUNKNOWN when the code
 * is not one we know). */
int wm_status(const struct wconn *w);
bool wm_is_event(const struct wconn *w);
int code_from_wire(const uint8_t *p, size_t n);
const char *code_name(int code);

/* Fixed-width lock names ("bench/lc-000001"), so every acquire frame has
 * the size of the baseline's frames. */
void lock_name(char *out, size_t size, const char *tag, unsigned n);

/* Request encoders: each begins a frame in w->out with a fresh rid, adds
 * the fields, and returns the rid.  Call coord_enc_end (via wq_end). */
uint64_t wq_begin(struct wconn *w, coord_enc *e, const char *op);
void wq_end(coord_enc *e);
uint64_t wq_acquire(struct wconn *w, const char *name, bool if_available);
uint64_t wq_release(struct wconn *w, uint64_t lock);
uint64_t wq_ping(struct wconn *w);

/* ---- echo.c: the raw baseline ---- */

struct echo_server;
/* Starts the server listening on path, in a forked child (process) or a
 * thread of ours: 0 or -errno. */
int echo_start(const char *path, bool process, struct echo_server **out);
void echo_stop(struct echo_server *s);
/* The child's pid in process mode, else 0. */
pid_t echo_pid(const struct echo_server *s);

/* ---- redis.c: the Redis peer ---- */

struct rs_reply {
    char type;                   /* '+', '-', ':', '$' */
    const char *ptr;             /* text / bulk bytes (into the wconn) */
    size_t len;
    long long num;               /* ':' value, '$' length (-1: nil) */
};
/* Starts redis-server on a socket in our temp dir and loads the release
 * script: 0, 1 when redis-server is not installed, -1 on failure. */
int redis_start(struct bench *b);
/* The same for the durable peer: appendonly yes, appendfsync always. */
int redis_start_aof(struct bench *b);
void redis_stop(struct bench *b);          /* both */
bool redis_up(const struct bench *b);
bool redis_aof_up(const struct bench *b);
pid_t redis_server_pid(void);
pid_t redis_aof_pid(void);
/* RESP: encode a command into w->out; take one reply from w's input (1, 0
 * not complete yet, -1 a type not used here); send out and wait for one. */
void rs_cmd(struct wconn *w, int argc, const char *const *argv);
int rs_next(struct wconn *w, struct rs_reply *r);
int rs_call(struct wconn *w, struct rs_reply *r);
/* SET w->name w->token NX PX 30000 / EVALSHA compare-and-delete. */
void rs_acquire(struct wconn *w);
void rs_release(struct wconn *w);

/* ---- spawn.c ---- */

int broker_start(struct bench *b);        /* 0 or -1 (message printed) */
void broker_stop(struct bench *b);
int broker_restart(struct bench *b);
bool broker_alive(struct bench *b);        /* reaps it when it ended */
/* VmRSS of pid in KiB, or -1. */
long rss_kib(pid_t pid);
/* VmHWM (the peak of VmRSS) of pid in KiB, or -1. */
long hwm_kib(pid_t pid);
/* CPU time pid's main thread has run, in ns (/proc/PID/schedstat), or 0. */
uint64_t cpu_ns(pid_t pid);
/* The pid of the peer of a connected Unix socket, or 0. */
pid_t peer_pid(int fd);
/* Write system calls (write, pwrite, writev...) made so far by the thread of
 * pid named comm (/proc/PID/task/TID/{comm,io}: syscw), or -1. */
double thread_syscw(pid_t pid, const char *comm);

/* ---- report.c ---- */

enum verdict { V_NONE = -1, V_MISS = 0, V_PASS = 1 };
enum cmp { CMP_NONE = 0, CMP_LE, CMP_GE, CMP_EQ };

struct figure {
    char key[48];               /* JSON name: "p50", "clients_16" */
    char what[96];              /* what the broker number is */
    double broker;              /* NAN when none */
    double base;                /* NAN when none */
    char bwhat[64];             /* what the baseline number is */
    char unit[16];              /* of broker/base */
    double value;               /* compared with target: ratio, or absolute */
    char vunit[8];              /* "x", "MiB", "" */
    enum cmp cmp;
    double target;
    enum verdict verdict;
};

struct info {
    char key[48];
    double v;
    char unit[16];
};

#define MAX_FIGS 12
#define MAX_INFO 24

enum sc_status { SC_RAN, SC_SKIPPED, SC_ERROR };

struct result {
    const char *name;
    enum sc_status status;
    char title[256];
    char note[256];
    struct figure fig[MAX_FIGS];
    int nfig;
    struct info info[MAX_INFO];
    int ninfo;
    double seconds;
};

void res_title(struct result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void res_note(struct result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A ratio figure: value = broker / base (or base / broker when inverse). */
struct figure *res_ratio(struct result *r, const char *key, const char *what,
                         double broker, const char *bwhat, double base,
                         const char *unit, bool inverse, enum cmp cmp,
                         double target);
/* An absolute figure compared with a target. */
struct figure *res_abs(struct result *r, const char *key, const char *what,
                       double value, const char *unit, enum cmp cmp,
                       double target);
void res_info(struct result *r, const char *key, double v, const char *unit);
void res_skip(struct result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void res_error(struct result *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void report_scenario(const struct bench *b, const struct result *r);
/* Summary (text) or the whole document (--json).  Returns the number of
 * MISS verdicts. */
int report_final(const struct bench *b, const struct result *rs, int n,
                 double seconds);

/* ---- scenarios ---- */

typedef void (*scenario_fn)(struct bench *b, struct result *r);

void sc_lock_cycle(struct bench *b, struct result *r);
void sc_many_clients(struct bench *b, struct result *r);
void sc_handoff(struct bench *b, struct result *r);
void sc_memory(struct bench *b, struct result *r);
void sc_flight_storm(struct bench *b, struct result *r);
void sc_durable_commits(struct bench *b, struct result *r);
void sc_durable_records(struct bench *b, struct result *r);
void sc_fanout(struct bench *b, struct result *r);
void sc_result_by_ref(struct bench *b, struct result *r);

void sc_redis(struct bench *b, struct result *r);
void sc_clients(struct bench *b, struct result *r);   /* spawns node and python */

/* sc-lock.c: n acquire+release cycles on w (its name); total/acq/rel[i]
 * in ns (may be NULL); 0, or -1 with *err. */
int lock_cycles(struct wconn *w, double *total, double *acq, double *rel, size_t n,
                int *err);
/* sc-many.c: requests (or Redis commands) per second on n connections,
 * one in flight each, driven by b->threads epoll threads. */
enum mc_mode { MC_RAW, MC_LOCK, MC_PING, MC_REDIS };
double mc_run(struct bench *b, struct wconn *conns, int n, enum mc_mode mode,
              unsigned warm_ms, unsigned dur_ms, pid_t server, double *cpu, int *err);

/* sc-lock.c: the raw round trip used by several scenarios.  Fills out[n]
 * with round-trip times in ns on conn w (connected to the echo server). */
int raw_round_trips(struct bench *b, struct wconn *w, double *out, size_t n);
/* Does the broker know op?  1 yes, 0 UNKNOWN_OP, -1 cannot tell. */
int broker_has_op(struct bench *b, const char *op);
/* The first of ops the broker answers UNKNOWN_OP to; NULL: it has them. */
const char *missing_op(struct bench *b, const char *const *ops, int n);

#endif
