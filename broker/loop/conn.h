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
#include "coord-wire-limits.h"

struct broker;
struct resref;

/* A frame in c->out that goes with a descriptor of r (opened when its
 * first byte is written): off is where it starts in c->out. */
struct outmark {
    size_t off;
    struct resref *r;            /* one reference, held */
};

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

    /* descriptors (results by reference, conn.c) */
    bool fds;                    /* hello said fds: true */
    int fdq[LIMIT_FDS_QUEUED];   /* received and not claimed, oldest first */
    unsigned nfdq;
    int frame_fd;                /* the frame being dispatched declared one: it */
    struct outmark *marks;       /* frames in out with a descriptor, in order */
    unsigned nmarks, capmarks;
    uv_pipe_t *sendh;            /* the descriptor inflight's first byte carries */
    struct list heldrefs;        /* result_ref held: struct heldref */
    unsigned nrefs;
    uint64_t last_ref;

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
/* Results by reference.  conn_enc_result writes, into the map being
 * encoded, what stands for r's bytes on c: `result_fd: size` when c takes
 * descriptors (the frame must then be ended with conn_enc_finish_ref, which
 * queues the descriptor with it), else `result_ref: {size, path, ino, ref}`
 * with a reference c holds until flight.unref or close.  false (nothing
 * written) when c holds LIMIT_CONN_REFS already. */
bool conn_enc_result(struct conn *c, coord_enc *e, struct resref *r);
/* c may be given one more result by reference (it takes descriptors, or
 * holds fewer than LIMIT_CONN_REFS result_ref). */
static inline bool conn_ref_room(const struct conn *c)
{
    return c->fds || c->nrefs < LIMIT_CONN_REFS;
}
/* conn_enc_finish; when c takes descriptors and r is not NULL, the frame
 * is written with a new read-only open file description of r's bytes
 * (one per frame: offsets are never shared).  Takes its own reference. */
void conn_enc_finish_ref(struct conn *c, coord_enc *e, struct resref *r);
/* The descriptor the frame being dispatched declared (result_fd), taken
 * from c: the caller owns it.  -1 when it declared none. */
int conn_take_frame_fd(struct conn *c);
/* The oldest descriptor c sent and no frame claimed yet, now the caller's
 * (dispatch: a frame that declares result_fd); -1 when none is queued. */
int conn_claim_fd(struct conn *c);
/* flight.unref: drops c's result_ref ref; false when c holds none such. */
bool conn_unref_result(struct conn *c, uint64_t ref);
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
