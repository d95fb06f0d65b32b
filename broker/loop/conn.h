/* conn.h - one client connection: its socket, buffers and what it holds
 * in the tables (intrusive lists), requests that wait for a reply
 * (pending), and work that answers it later (conn_job).  The conn API
 * (conn.c, pending.c) is how tables answer and cut connections. */
#ifndef COORD_BROKER_CONN_H
#define COORD_BROKER_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "deadline.h"
#include "enc.h"
#include "frame.h"
#include "hashmap.h"
#include "list.h"

struct broker;

enum conn_flags {
    CONN_HELLO_DONE = 1 << 0,
    CONN_CLOSING = 1 << 1,       /* released from every table; handle closing */
    CONN_WRITING = 1 << 2,       /* a uv_write owns 'inflight' */
    CONN_HANDLE_CLOSED_REQUESTED = 1 << 3, /* uv_close called */
    CONN_HANDLE_CLOSED = 1 << 4, /* its close callback ran */
    CONN_CUT = 1 << 5,           /* doomed: nothing more is queued or read;
                                    closed at the loop turn's safe point */
    CONN_THROTTLED = 1 << 6,     /* to read (and dispatch 'held') again next turn */
    CONN_PAUSED = 1 << 7,        /* output above the pause mark: not read */
};

struct conn {
    uv_pipe_t pipe;              /* first: the handle's data is the conn */
    struct broker *b;
    uint64_t id;
    unsigned flags;
    pid_t peer_pid;
    uint64_t accepted_ms;

    coord_frame_reader reader;
    coord_buf out;               /* replies and events not yet written */
    coord_buf inflight;          /* bytes a uv_write is writing */
    uv_write_t wreq;

    struct list link;            /* broker.conns */
    struct deadline hello_deadline;  /* until hello */
    struct list dirty_link;      /* broker.dirty, while out has bytes */
    struct list cut_link;        /* broker.cut, once CONN_CUT */
    const char *cut_why;         /* static text, for the log */
    struct list throttle_link;   /* broker.throttled, once CONN_THROTTLED */
    coord_buf held;              /* bytes read but not dispatched (paused) */
    struct deadline out_stall;   /* while CONN_PAUSED: LIMIT_OUTBUF_STALL_MS */
    uint64_t out_progress_ms;    /* last time the kernel took output */
    size_t partial_counted;      /* reader bytes counted in broker.partial_bytes */
    struct list pending;         /* struct pending, oldest first */
    unsigned npending;
    unsigned refs;               /* 1 for the handle, +1 per conn_job */
    struct list locks;           /* struct lock_req held by this client */
    struct list flights;         /* flights this client owns */
    struct list watches;         /* stale results it waits to hear about */
    struct list leads;           /* workstreams this client leads */
    struct list subs;            /* channel subscriptions */
    unsigned nlocks_held;        /* every lock held, leaderships included */
    unsigned nflights_owned;
    unsigned nwatches;
    unsigned nsubs;

    /* from hello */
    char *client;                /* NUL-terminated, printable */
    uint64_t pid;
    char *instance;
    uint8_t *scope;              /* any bytes */
    uint32_t scope_len;
};

/* A request whose reply comes later (a queued lock, a follower, ...).  The
 * table that owns it embeds this and answers it through pending_finish. */
struct pending {
    uint64_t rid;
    struct conn *conn;
    struct list link;            /* conn.pending */
    struct hentry by_rid;        /* the broker's (conn, rid) index */
    struct pending_key { const struct conn *conn; uint64_t rid; } hkey;
    int op;                      /* enum coord_op, for logs */
    /* Remove from the owning table and reply with code (ABORTED on cancel,
     * SHUTTING_DOWN at exit).  Must call pending_finish. */
    void (*abort)(struct pending *p, int code);
    /* Drop silently: the connection is gone.  Must call pending_finish. */
    void (*drop)(struct pending *p);
};

/* conn.c */
void conn_accepted(struct broker *b, struct conn *c);
/* Dooms c: it reads nothing more and nothing more is queued to it (what is
 * queued still gets one write attempt).  Its close, which releases what it
 * holds in every table, runs at the next safe point (conn_reap), never
 * inside the table walk that produced the output: safe to call anywhere. */
void conn_cut(struct conn *c, const char *why);
/* Closes every cut connection (the loop turn's safe point: prepare and
 * check handles, after a read callback). */
void conn_reap(struct broker *b);
/* Release everything c holds in every table and close its handle now.
 * Only at a safe point: from the loop's own callbacks, never from code a
 * table runs.  Queued output gets one non-blocking write attempt; what
 * does not fit is dropped. */
void conn_close(struct conn *c, const char *why);
/* Reads again the connections whose read budget ran out last turn. */
void conn_resume_throttled(struct broker *b);
/* Append a frame built with coord_enc on c->out (see conn_reply_begin). */
void conn_enc_begin_reply(struct conn *c, coord_enc *e, uint64_t rid);
void conn_enc_begin_event(struct conn *c, coord_enc *e, const char *ev);
void conn_enc_finish(struct conn *c, coord_enc *e);
/* Queue a ready frame (a fan-out copy).  0, or -1 when c is closing or was
 * just cut off at its output cap. */
int conn_send_bytes(struct conn *c, const void *p, size_t n);
void conn_reply_ok(struct conn *c, uint64_t rid);
/* {rid, ok:true} and npairs more pairs: len bytes of MessagePack the
 * caller wrote (a hot path's few fixed keys), at most LIMIT_REPLY_OVERHEAD,
 * so always within max_frame. */
void conn_reply_with(struct conn *c, uint64_t rid, const uint8_t *pairs, size_t len,
                     unsigned npairs);
void conn_reply_error(struct conn *c, uint64_t rid, int code, const char *msg);
/* The same error with a `reason` field (a reasons.h name), for a refusal
 * whose cause the client tells apart (FENCED with reason "purged"). */
void conn_reply_error_reason(struct conn *c, uint64_t rid, int code, const char *msg,
                             const char *reason);
void conn_flush_all(struct broker *b);
void conn_unref(struct conn *c);
void conn_hello_done(struct conn *c);
/* Not yet released from the tables (a cut connection still is, until the
 * safe point; it just hears nothing more). */
static inline bool conn_alive(const struct conn *c)
{
    return !(c->flags & CONN_CLOSING);
}
/* Output to c would be dropped. */
static inline bool conn_muted(const struct conn *c)
{
    return (c->flags & (CONN_CLOSING | CONN_CUT)) != 0;
}

/* Work that answers its connection later (a ledger job, a load): it holds
 * a reference, so the conn outlives a close, and answers only a
 * connection still alive. */
struct conn_job {
    struct conn *conn;
    uint64_t rid;
};
static inline void conn_job_start(struct conn_job *j, struct conn *c, uint64_t rid)
{
    j->conn = c;
    j->rid = rid;
    if (c)                        /* NULL: the broker's own (config) */
        c->refs++;
}
/* The connection to answer, or NULL when it went meanwhile. */
static inline struct conn *conn_job_conn(const struct conn_job *j)
{
    return j->conn && conn_alive(j->conn) ? j->conn : NULL;
}
static inline void conn_job_end(struct conn_job *j)
{
    if (j->conn)
        conn_unref(j->conn);
}

/* pending.c */
/* Registers p on c.  Returns 0, or -1 after replying LIMIT (too many
 * waiting) or BAD_REQUEST (rid already waiting). */
int pending_start(struct conn *c, struct pending *p, uint64_t rid, int op);
/* Unlinks p from its connection (the reply is the caller's). */
void pending_finish(struct pending *p);
/* The checks of pending_start alone (replies on refusal): for ops that
 * must know before acting that they may wait. */
int pending_check(struct conn *c, uint64_t rid);
struct pending *pending_find(struct conn *c, uint64_t rid);
/* Every waiting request of c: abort with code, or drop when code is 0. */
void pending_abort_all(struct conn *c, int code);

#endif
