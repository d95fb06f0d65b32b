/* internal.h - the inside of libcoord, shared by its source files.  Nothing
 * here is exported (the library is built with hidden visibility; only
 * COORD_API functions of coord.h leave it). */
#ifndef COORD_CLIENT_INTERNAL_H
#define COORD_CLIENT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "coord.h"
#include "coord-ops.h"
#include "enc.h"
#include "frame.h"
#include "msg.h"
#include "paths.h"

/* Frames the library accepts from the broker before hello's reply: the
 * protocol's cap.  After hello, the max_frame the broker announced (which
 * is refused above the cap): no frame the broker sends is larger. */
#define COORD_CLIENT_MAX_INBOUND COORD_MAX_FRAME_CAP

/* The msgpack-c zone of one decoded reply starts this small (it grows by
 * itself for bigger frames): a queued event then costs its frame plus
 * about a kilobyte, not the 4 KiB chunk of the broker's reused zone. */
#define COORD_CLIENT_ZONE_CHUNK 512

#define COORD_ERRMSG_MAX 256

/* A request being built: its fields (op first) are encoded as the body of an
 * open top-level map; coord_send writes them as a frame with the rid in
 * front (coord_enc_request). */
struct coord_req {
    coord_buf buf;
    coord_enc enc;     /* open map at depth 1; enc.count[0] = keys so far */
    int err;           /* first error while building (NOMEM, INVAL) */
    char op[40];       /* the op's name (cut), for error messages */
    bool waits;        /* an op that waits by design (lock.acquire,
                          flight.join, leader.campaign): no default
                          deadline */
    bool has_fd;       /* fd is passed with the frame (SCM_RIGHTS) */
    int fd;            /* the caller's: never closed here */
};

/* A decoded reply or event.  Owns a copy of the frame bytes (msgpack-c's
 * strings point into them) and the zone of the decoded objects. */
struct coord_reply {
    struct coord_reply *next;   /* inbound queue / event queue link */
    coord_msg msg;
    uint64_t rid;               /* 0 for events */
    bool is_event;
    int status;                 /* 0, or the broker's negative code */
    char *ev;                   /* event name, NUL-ended (malloc'd), or NULL */
    int fd;                     /* the descriptor that came with it (result_fd,
                                   owned; closed by coord_reply_free), -1 */
    size_t len;
    uint8_t bytes[];            /* the frame body */
};

struct coord_sync;                /* a blocking call waiting for its reply */

struct coord_pending {
    uint64_t rid;                 /* 0: empty slot */
    coord_reply_cb cb;            /* NULL: reply ignored (cancel) */
    void *ud;
    struct coord_sync *sync;      /* non-NULL for coord_call */
};

struct coord_sync {
    bool done;
    int status;
    struct coord_reply *reply;    /* owned once done (ok or broker error) */
};

/* rid -> pending request: open addressing, linear probing, backward-shift
 * deletion.  Power-of-two capacity, load kept under 1/2. */
struct coord_ptable {
    struct coord_pending *slots;
    size_t cap;
    size_t count;
};

struct coord_rqueue {
    struct coord_reply *head, *tail;
    size_t count;
    size_t bytes;                 /* frame bytes of the queued replies */
};

struct coord {
    int fd;
    bool dead;                    /* nothing more can be sent: calls fail
                                     with dead_code */
    bool rx_done;                 /* nothing more will be read (EOF, error,
                                     malformed frame) */
    bool got_bye;                 /* the broker sent a rid-0 error frame */
    int bye_code;                 /* and its code (LIMIT, SHUTTING_DOWN...) */
    int dead_code;                /* COORD_ECLOSED or COORD_EPROTOCOL */
    bool closing;                 /* coord_close called inside a callback */
    int depth;                    /* nesting of calls that run callbacks */

    uint64_t next_rid;
    struct coord_ptable pending;

    coord_frame_reader reader;
    int frame_error;              /* set by the frame callback */
    struct coord_rqueue inbound;  /* decoded, not dispatched yet */
    struct coord_rqueue events;   /* for coord_next_event */
    coord_event_cb event_cb;
    void *event_ud;

    coord_buf wbuf;               /* scratch: the frame being encoded */
    coord_buf out;                /* bytes the socket did not take yet, in
                                     order; sent from out_off on */
    size_t out_off;

    unsigned request_timeout_ms;  /* default deadline of coord_call (never 0) */

    uint64_t conn_id, epoch;
    uint32_t max_frame;
    char broker[64];
    char errmsg[COORD_ERRMSG_MAX];
    char errreason[32];             /* the last error reply's reason, or "" */
    /* descriptors (results by reference) */
    bool broker_fds;                /* hello's reply said fds: true */
    uint64_t max_ref_bytes;         /* and its max_ref_bytes */
    int fdq[8];                     /* received, not yet given to a frame */
    int nfdq;
    bool errbroker;                 /* errmsg is an error reply's message */
};

/* Arguments of the request calls: bytes p[0..n) may be NULL only when
 * empty. */
static inline bool coord__bytes_ok(const void *p, size_t n)
{
    return p || n == 0;
}

/* Reads len bytes of fd from offset 0 into a new buffer with a NUL after
 * them (*out): 0, COORD_ENOMEM or COORD_ESYS (errno; a short file). */
int coord__read_fd(int fd, size_t len, void **out);
/* True when the frame m declares a descriptor (result_fd at its top level
 * or in its stale map). */
bool coord__declares_fd(coord_map m);

/* ---- client.c ---- */
coord_t *coord__alloc(int fd);
/* The options of o that the handle keeps (request_timeout_ms). */
void coord__apply_options(coord_t *c, const coord_options *o);
/* Takes hello's max_frame v: 0, or COORD_EPROTOCOL (message set) when it is
 * 0 or above COORD_MAX_FRAME_CAP.  The reader then allows frames up to it. */
int coord__set_max_frame(coord_t *c, uint64_t v);
void coord__free(coord_t *c);
void coord__set_error(coord_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* After a request that waits by design (lock, campaign, join) for up to
 * wait_ms: when the broker answered rc == COORD_ETIMEOUT, the message in
 * the caller's terms, "WHAT: timed out after 0.5 s", instead of the
 * broker's (which names its request fields). */
void coord__wait_timed_out(coord_t *c, int rc, const char *what, uint64_t wait_ms);
/* "0.5 s", "30 s": ms as seconds, for messages. */
void coord__seconds(char *out, size_t size, uint64_t ms);
/* Blocking call with a deadline (-1: none); COORD_ETIMEOUT when it passes
 * (the request stays pending and its late reply is dropped). */
int coord__call_timeout(coord_t *c, const coord_req_t *req,
                        coord_reply_t **reply, int timeout_ms);
int64_t coord__now_ms(void);
/* coord_req_new of op's wire name; NULL when out of memory.  The caller
 * owns the request (coord_req_free). */
coord_req_t *coord__req_new(enum coord_op op);
/* coord_call of r, which is freed here (NULL: COORD_ENOMEM, nothing sent);
 * reply may be NULL. */
int coord__call_free(coord_t *c, coord_req_t *r, coord_reply_t **reply);
/* coord__call_free, then the uint field key of the reply into *out (0 when
 * absent; out may be NULL); 0 or the call's error. */
int coord__call_uint(coord_t *c, coord_req_t *r, const char *key, uint64_t *out);
/* coord_send of r (freed here) with cb and ctx, a malloc'd context that cb
 * frees: when r or ctx is NULL (out of memory) or nothing is sent, ctx is
 * freed here and the error returned. */
int coord__send_ctx(coord_t *c, coord_req_t *r, coord_reply_cb cb, void *ctx,
                    uint64_t *rid_out);

/* ---- connect.c ---- */
/* Text of the last coord_connect failure of this thread. */
const char *coord__connect_error(void);

/* ---- reply.c ---- */
/* Copies body and decodes it.  Returns NULL with *frame_status set
 * (a COORD_FRAME_* value) on a bad frame or no memory. */
struct coord_reply *coord__reply_new(const uint8_t *body, size_t len,
                                     int *frame_status);
/* True when ev is the event which (for the coord_event_* readers). */
bool coord__event_is(const coord_reply_t *ev, enum coord_event which);
/* The str (or bin) field key of m in *p, *n; "" when absent. */
void coord__map_bytes(coord_map m, const char *key, const char **p, size_t *n);
/* Text from the broker (an error's message) made safe to show: into
 * out[0..size) NUL-ended, printable ASCII and valid UTF-8 (but C1
 * controls) as they are, every other byte (controls, DEL, bytes that are
 * not UTF-8) as \xHH; cut at a character boundary when out is full.  */
void coord__escape_text(char *out, size_t size, const char *p, size_t n);
/* A malloc'd copy of p[0..n) plus a NUL byte; NULL when out of memory. */
void *coord__dup_bytes(const void *p, size_t n);

#endif
