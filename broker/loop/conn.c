/* conn.c - one client connection: reading frames, queueing replies and
 * events, writing them out once per loop turn, and closing.
 *
 * Output is batched: replies are appended to c->out and every connection
 * with output is flushed once per loop iteration (prepare and check
 * handles), so a burst of requests costs one write, not one per reply.
 *
 * Replies to a client's own requests get backpressure, not a cut: after a
 * request leaves the pause mark (broker.out_pause) or more queued, the
 * connection is paused: not read, and the rest of what was read is kept
 * in c->held undispatched.  Once its output drains below the mark it joins
 * the throttled list and is fed again at the next prepare.  A client is cut
 * off only when its output does not drain: queued bytes past max_outbuf
 * (events it does not read, replies that waited) or a pause with no
 * progress for LIMIT_OUTBUF_STALL_MS.  Nobody else waits for it.
 *
 * Cutting a connection off never closes it on the spot: output is produced
 * deep inside table walks (a grant while a queue is processed, a fan-out
 * over subscribers), and releasing the connection's locks, flights and
 * subscriptions there would change the very structures being walked.  A
 * cut only marks the connection (CONN_CUT: muted, not read); conn_reap
 * closes it at the loop turn's safe point.
 *
 * Input is bounded per loop turn: one read of LIMIT_READ_PER_TURN bytes per
 * connection, then the connection waits for the next turn, so a client
 * that pipelines thousands of requests delays another client's reply by
 * one read's worth of work at most.  Partial frames are buffered as their
 * bytes arrive (never reserved from the announced length) and all of them
 * together stay under LIMIT_PARTIAL_TOTAL.
 *
 * Descriptors (results by reference, PROTOCOL.md).  Connections are libuv
 * ipc pipes: libuv then reads with recvmsg (MSG_CMSG_CLOEXEC) and keeps
 * the SCM_RIGHTS descriptors that come with a read, which on_read takes at
 * once, before the read's frames are dispatched, through libuv's own API
 * (uv_accept into a throwaway pipe handle, whose descriptor is duplicated
 * and the handle closed): a descriptor arrives with the first read that
 * reaches its frame's bytes, so by the time a frame that declares one
 * (result_fd) is whole, it is in c->fdq.  More than LIMIT_FDS_QUEUED
 * unclaimed, or a frame that declares one when none is queued, is a bad
 * frame.  Reading the socket ourselves would have meant taking the
 * connection away from libuv's stream (one io watcher per fd); this keeps
 * libuv's read path, its read budget and its close, which closes whatever
 * is still queued.
 *
 * Sending one: the frame is queued in c->out like any other, and a mark
 * (c->marks) says where it starts and whose bytes go with it.  The flush
 * writes up to the next mark as usual; at a mark it opens the receiver's
 * own file description (resref_open: one per frame, offset 0, never
 * shared) and writes the frame's first byte alone with uv_write2, the
 * descriptor wrapped in a pipe handle: a one-byte write cannot be partial,
 * so the descriptor goes exactly once, with that byte, in the stream's
 * order; the rest of the frame follows as ordinary output once that write
 * completes.  The descriptor is opened only then, so a connection that does
 * not read holds no open file per queued frame, only a reference (the
 * output cap and the stall cut bound those as they bound its bytes). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "broker.h"
#include "resref.h"
#include "deadline.h"
#include "errors.h"
#include "coord-limits.h"
#include "tables.h"

static void on_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    c->flags |= CONN_HANDLE_CLOSED;
    conn_unref(c);
}

void conn_unref(struct conn *c)
{
    if (--c->refs > 0)
        return;
    free(c->marks);
    coord_frame_reader_free(&c->reader);
    coord_buf_free(&c->out);
    coord_buf_free(&c->inflight);
    coord_buf_free(&c->held);
    free(c->client);
    free(c->instance);
    free(c->scope);
    free(c);
}

static void close_handle(struct conn *c)
{
    if (c->flags & CONN_HANDLE_CLOSED_REQUESTED)
        return;
    c->flags |= CONN_HANDLE_CLOSED_REQUESTED;
    uv_close((uv_handle_t *)&c->pipe, on_handle_closed);
}

static void on_write_done(uv_write_t *req, int status);

static size_t out_queued(const struct conn *c)
{
    return c->out.len + c->inflight.len;
}

static void free_handle(uv_handle_t *h)
{
    free(h);
}

/* A result_ref a connection without descriptors holds. */
struct heldref {
    struct list link;            /* c->heldrefs */
    uint64_t id;
    struct resref *r;
};

/* n bytes of c->out were written or moved: the marks follow. */
static void out_consume(struct conn *c, size_t n)
{
    coord_buf_consume(&c->out, n);
    for (unsigned i = 0; i < c->nmarks; i++)
        c->marks[i].off -= n;
}

/* Everything queued in c->out is dropped (cut, closed). */
static void out_drop(struct conn *c)
{
    c->out.len = 0;
    for (unsigned i = 0; i < c->nmarks; i++)
        resref_drop(c->marks[i].r);
    c->nmarks = 0;
}

/* Where c->out's next descriptor frame starts, else its length. */
static size_t out_plain(const struct conn *c)
{
    return c->nmarks ? c->marks[0].off : c->out.len;
}

/* The frame at the start of c->out carries a descriptor: its first byte
 * goes alone with it (uv_write2), the rest after that write completes. */
static void send_with_fd(struct conn *c)
{
    struct resref *r = c->marks[0].r;
    memmove(c->marks, c->marks + 1, (c->nmarks - 1) * sizeof *c->marks);
    c->nmarks--;
    int fd = resref_open(r);
    resref_drop(r);
    uv_pipe_t *h = fd >= 0 ? malloc(sizeof *h) : NULL;
    if (!h) {
        if (fd >= 0)
            close(fd);
        log_event(LOG_WARN, "conn.result_fd", "conn=%llu error=\"cannot open a result: %s\"",
                  (unsigned long long)c->id, fd < 0 ? strerror(errno) : "out of memory");
        out_drop(c);
        conn_cut(c, "cannot open a result's descriptor");
        return;
    }
    uv_pipe_init(c->pipe.loop, h, 0);
    int rc = uv_pipe_open(h, fd);
    if (rc < 0)
        close(fd);
    else   /* uv_pipe_open made it non-blocking: the receiver gets it as open() did */
        (void)fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    c->inflight.len = 0;
    if (rc < 0 || coord_buf_append(&c->inflight, c->out.data, 1) < 0) {
        uv_close((uv_handle_t *)h, free_handle);
        out_drop(c);
        conn_cut(c, "cannot send a result's descriptor");
        return;
    }
    out_consume(c, 1);
    c->sendh = h;
    uv_buf_t buf = uv_buf_init((char *)c->inflight.data, 1);
    c->wreq.data = c;
    if (uv_write2(&c->wreq, (uv_stream_t *)&c->pipe, &buf, 1, (uv_stream_t *)h,
                  on_write_done) == 0) {
        c->flags |= CONN_WRITING;
        c->b->stats.fds_sent++;
    } else {
        c->sendh = NULL;
        c->inflight.len = 0;
        uv_close((uv_handle_t *)h, free_handle);
        out_drop(c);
        conn_cut(c, "write failed");
    }
}

/* Joins the list read again at the next prepare. */
static void throttle(struct conn *c)
{
    if (c->flags & CONN_THROTTLED)
        return;
    c->flags |= CONN_THROTTLED;
    list_append(&c->b->throttled, &c->throttle_link);
}

/* Output went out: a paused connection below the mark is read again. */
static void out_progress(struct conn *c)
{
    c->out_progress_ms = broker_now_ms(c->b);
    if ((c->flags & CONN_PAUSED) && !conn_muted(c) && out_queued(c) < c->b->out_pause) {
        c->flags &= ~CONN_PAUSED;
        deadline_cancel(&c->out_stall);
        throttle(c);
    }
}

/* Write what is queued: try_write first (usually all of it goes at once),
 * the rest through a uv_write that owns c->inflight until it completes.
 * Bytes go up to the next frame with a descriptor (send_with_fd) only. */
static void conn_flush(struct conn *c)
{
    if (c->flags & (CONN_WRITING | CONN_HANDLE_CLOSED_REQUESTED) || c->out.len == 0)
        return;
    size_t lim;
    int n;
    for (;;) {
        lim = out_plain(c);
        if (lim == 0) {
            send_with_fd(c);
            return;
        }
        uv_buf_t buf = uv_buf_init((char *)c->out.data, (unsigned)lim);
        n = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
        if (n == UV_EAGAIN || n == UV_ENOSYS)
            n = 0;
        if (n < 0) {
            out_drop(c);
            conn_cut(c, "write failed");
            return;
        }
        c->b->stats.bytes_out += (uint64_t)n;
        out_consume(c, (size_t)n);
        if (n > 0)
            out_progress(c);
        if (c->out.len == 0 || conn_muted(c))
            return;
        if ((size_t)n < lim)
            break;
    }
    lim -= (size_t)n;
    if (lim == c->out.len) {
        coord_buf tmp = c->inflight;
        c->inflight = c->out;
        c->out = tmp;
        c->out.len = 0;
    } else {                      /* a descriptor frame follows: only up to it */
        c->inflight.len = 0;
        if (coord_buf_append(&c->inflight, c->out.data, lim) < 0) {
            out_drop(c);
            conn_cut(c, "out of memory for output");
            return;
        }
        out_consume(c, lim);
    }
    uv_buf_t buf = uv_buf_init((char *)c->inflight.data, (unsigned)c->inflight.len);
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->pipe, &buf, 1, on_write_done) == 0)
        c->flags |= CONN_WRITING;
    else
        conn_cut(c, "write failed");
}

static void mark_dirty(struct conn *c)
{
    if (!list_linked(&c->dirty_link))
        list_append(&c->b->dirty, &c->dirty_link);
}

static void on_write_done(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    c->flags &= ~CONN_WRITING;
    if (c->sendh) {               /* the receiver has its descriptor: ours goes */
        uv_close((uv_handle_t *)c->sendh, free_handle);
        c->sendh = NULL;
    }
    if (status == 0)
        c->b->stats.bytes_out += c->inflight.len;
    c->inflight.len = 0;
    if (c->flags & CONN_HANDLE_CLOSED_REQUESTED)
        return;
    if (status < 0) {
        conn_cut(c, "write failed");
        return;
    }
    out_progress(c);
    if (c->out.len > 0)
        mark_dirty(c);
}

void conn_flush_all(struct broker *b)
{
    while (!list_empty(&b->dirty)) {
        struct conn *c = list_entry(b->dirty.next, struct conn, dirty_link);
        list_del(&c->dirty_link);
        conn_flush(c);
    }
}

/* Output was appended: past the cap the client is cut off (it does not
 * read; nobody else waits for it), else it is flushed this loop turn.
 * Replies to requests being dispatched never get here past the cap: the
 * connection pauses at the mark, and max_outbuf leaves a max_frame above
 * it (main.c refuses less). */
static int queued(struct conn *c)
{
    if (c->out.len + c->inflight.len > c->b->opt.max_outbuf) {
        c->b->stats.outbuf_disconnects++;
        log_event(LOG_WARN, "conn.outbuf_limit", "conn=%llu queued=%zu limit=%zu",
                  (unsigned long long)c->id, c->out.len + c->inflight.len,
                  c->b->opt.max_outbuf);
        out_drop(c);
        conn_cut(c, "output buffer limit");
        return -1;
    }
    mark_dirty(c);
    return 0;
}

void conn_enc_begin_reply(struct conn *c, coord_enc *e, uint64_t rid)
{
    coord_enc_reply_begin(e, &c->out, rid);
}

void conn_enc_begin_event(struct conn *c, coord_enc *e, const char *ev)
{
    coord_enc_event_begin(e, &c->out, ev);
}

/* Ends a frame on c->out; where it starts there, or SIZE_MAX when it was
 * not queued. */
static size_t enc_finish(struct conn *c, coord_enc *e)
{
    if (conn_muted(c)) {
        coord_enc_abort(e);
        return SIZE_MAX;
    }
    size_t n = coord_enc_end(e);
    if (n == 0) {
        /* out of memory for this client's output: it loses its connection,
         * not the broker its life */
        conn_cut(c, "out of memory for output");
        return SIZE_MAX;
    }
    /* every frame sent fits the max_frame announced in hello: the tables
     * keep within it, this is the net under them */
    if (n - COORD_FRAME_HEADER > c->b->opt.max_frame) {
        c->out.len -= n;
        c->b->stats.oversized_frames++;
        log_event(LOG_WARN, "conn.frame_too_large", "conn=%llu size=%zu reply=%d",
                  (unsigned long long)c->id, n, (int)e->is_reply);
        if (e->is_reply)
            conn_reply_error(c, e->rid, COORD_ETOO_LARGE, "reply would exceed max_frame");
        return SIZE_MAX;
    }
    size_t at = c->out.len - n;
    return queued(c) == 0 ? at : SIZE_MAX;
}

void conn_enc_finish(struct conn *c, coord_enc *e)
{
    (void)enc_finish(c, e);
}

void conn_enc_finish_ref(struct conn *c, coord_enc *e, struct resref *r)
{
    size_t at = enc_finish(c, e);
    if (at == SIZE_MAX || !r || !c->fds || conn_muted(c))
        return;
    if (c->nmarks == c->capmarks) {
        unsigned cap = c->capmarks ? 2 * c->capmarks : 4;
        struct outmark *m = realloc(c->marks, cap * sizeof *m);
        if (!m) {
            out_drop(c);
            conn_cut(c, "out of memory for output");
            return;
        }
        c->marks = m;
        c->capmarks = cap;
    }
    c->marks[c->nmarks].off = at;
    c->marks[c->nmarks].r = resref_hold(r);
    c->nmarks++;
}

bool conn_enc_result(struct conn *c, coord_enc *e, struct resref *r)
{
    if (c->fds) {
        coord_enc_kv_uint(e, "result_fd", r->size);
        return true;
    }
    struct heldref *h = c->nrefs < LIMIT_CONN_REFS ? malloc(sizeof *h) : NULL;
    if (!h)
        return false;
    h->id = ++c->last_ref;
    h->r = resref_hold(r);
    list_append(&c->heldrefs, &h->link);
    c->nrefs++;
    c->b->stats.refs_given++;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)getpid(), r->fd);
    coord_enc_key(e, "result_ref");
    coord_enc_map_begin(e);
    coord_enc_kv_uint(e, "size", r->size);
    coord_enc_kv_cstr(e, "path", path);
    coord_enc_kv_uint(e, "ino", r->ino);
    coord_enc_kv_uint(e, "ref", h->id);
    coord_enc_map_end(e);
    return true;
}

bool conn_unref_result(struct conn *c, uint64_t ref)
{
    struct list *pos, *tmp;
    list_for_each_safe(pos, tmp, &c->heldrefs) {
        struct heldref *h = list_entry(pos, struct heldref, link);
        if (h->id == ref) {
            list_del(&h->link);
            c->nrefs--;
            resref_drop(h->r);
            free(h);
            return true;
        }
    }
    return false;
}

int conn_take_frame_fd(struct conn *c)
{
    int fd = c->frame_fd;
    c->frame_fd = -1;
    return fd;
}

int conn_send_bytes(struct conn *c, const void *p, size_t n)
{
    if (conn_muted(c))
        return -1;
    if (coord_buf_append(&c->out, p, n) < 0) {
        conn_cut(c, "out of memory for output");
        return -1;
    }
    return queued(c);
}

void conn_reply_with(struct conn *c, uint64_t rid, const uint8_t *pairs, size_t len,
                     unsigned npairs)
{
    /* at most LIMIT_REPLY_OVERHEAD bytes (conn.h): within max_frame */
    if (conn_muted(c))
        return;
    if (coord_enc_reply_with(&c->out, rid, pairs, len, npairs) == 0) {
        conn_cut(c, "out of memory for output");
        return;
    }
    queued(c);
}

void conn_reply_ok(struct conn *c, uint64_t rid)
{
    conn_reply_with(c, rid, NULL, 0, 0);
}

void conn_reply_error(struct conn *c, uint64_t rid, int code, const char *msg)
{
    if (conn_muted(c))
        return;
    if (coord_enc_error(&c->out, rid, code, msg) == 0) {
        conn_cut(c, "out of memory for output");
        return;
    }
    queued(c);
}

void conn_reply_error_reason(struct conn *c, uint64_t rid, int code, const char *msg,
                             const char *reason)
{
    if (conn_muted(c))
        return;
    const char *name = coord_code_name(code);
    coord_enc e;
    coord_enc_begin(&e, &c->out);
    coord_enc_kv_uint(&e, "rid", rid);
    coord_enc_kv_bool(&e, "ok", false);
    coord_enc_kv_cstr(&e, "code", name ? name : "STORAGE");
    coord_enc_kv_cstr(&e, "message", msg ? msg : coord_code_text(code));
    coord_enc_kv_cstr(&e, "reason", reason);
    if (coord_enc_end(&e) == 0) {
        conn_cut(c, "out of memory for output");
        return;
    }
    queued(c);
}

static void partial_forget(struct conn *c)
{
    c->b->partial_bytes -= c->partial_counted;
    c->partial_counted = 0;
}

void conn_cut(struct conn *c, const char *why)
{
    if (c->flags & (CONN_CUT | CONN_CLOSING))
        return;
    c->flags |= CONN_CUT;
    c->cut_why = why;
    uv_read_stop((uv_stream_t *)&c->pipe);
    if (c->flags & CONN_THROTTLED) {
        c->flags &= ~CONN_THROTTLED;
        list_del(&c->throttle_link);
    }
    list_append(&c->b->cut, &c->cut_link);
}

void conn_reap(struct broker *b)
{
    /* closing one may cut others (they miss an event at their cap): they
     * join the list and are closed in the same pass */
    while (!list_empty(&b->cut)) {
        struct conn *c = list_entry(b->cut.next, struct conn, cut_link);
        conn_close(c, c->cut_why);
    }
}

/* Release what c holds in every table, then close the handle.  Output
 * already queued gets one non-blocking write attempt (the error frame that
 * explains the close); what does not fit is dropped, so a peer that does not
 * read can never keep a closed connection alive. */
void conn_close(struct conn *c, const char *why)
{
    struct broker *b = c->b;
    if (c->flags & CONN_CLOSING)
        return;
    if (c->flags & CONN_CUT)
        list_del(&c->cut_link);
    if (c->flags & CONN_THROTTLED)
        list_del(&c->throttle_link);
    c->flags &= ~(CONN_CUT | CONN_THROTTLED | CONN_PAUSED);
    c->flags |= CONN_CLOSING;
    uv_read_stop((uv_stream_t *)&c->pipe);
    deadline_cancel(&c->hello_deadline);
    deadline_cancel(&c->out_stall);
    c->held.len = 0;
    partial_forget(c);
    size_t held = (size_t)c->nlocks_held + c->nflights_owned + c->nsubs + c->npending +
                  c->nwatches;
    size_t bufs = c->out.cap + c->inflight.cap + c->held.cap;
    pending_abort_all(c, 0);
    tables_conn_closed(c);
    while (c->nfdq > 0)
        close(c->fdq[--c->nfdq]);
    while (!list_empty(&c->heldrefs)) {
        struct heldref *h = list_entry(list_shift(&c->heldrefs), struct heldref, link);
        resref_drop(h->r);
        free(h);
    }
    c->nrefs = 0;
    if (held >= LIMIT_TRIM_ENTRIES || bufs >= LIMIT_TRIM_BYTES)
        broker_trim_soon(b);
    list_del(&c->link);
    b->nconns--;
    log_event(LOG_DEBUG, "conn.close", "conn=%llu pid=%d reason=\"%s\"",
              (unsigned long long)c->id, (int)c->peer_pid, why);
    if (!(c->flags & CONN_WRITING) && out_plain(c) > 0 &&
        !(c->flags & CONN_HANDLE_CLOSED_REQUESTED)) {
        uv_buf_t buf = uv_buf_init((char *)c->out.data, (unsigned)out_plain(c));
        int n = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
        if (n > 0)
            b->stats.bytes_out += (uint64_t)n;
    }
    out_drop(c);
    if (list_linked(&c->dirty_link))
        list_del(&c->dirty_link);
    close_handle(c);
    broker_conn_count_changed(b);
}

static void on_out_stall(struct deadline *d)
{
    struct conn *c = list_entry(d, struct conn, out_stall);
    if (!(c->flags & CONN_PAUSED) || conn_muted(c))
        return;
    uint64_t now = broker_now_ms(c->b);
    if (now - c->out_progress_ms < LIMIT_OUTBUF_STALL_MS) {
        deadline_set(&c->out_stall, c->out_progress_ms + LIMIT_OUTBUF_STALL_MS, on_out_stall);
        return;
    }
    c->b->stats.outbuf_disconnects++;
    c->b->stats.outbuf_stalls++;
    log_event(LOG_WARN, "conn.outbuf_stalled", "conn=%llu queued=%zu stalled_ms=%llu",
              (unsigned long long)c->id, out_queued(c),
              (unsigned long long)(now - c->out_progress_ms));
    out_drop(c);
    conn_cut(c, "output not drained");
}

/* Stops reading c until its output drains below the mark (out_progress). */
static void pause_reading(struct conn *c)
{
    c->flags |= CONN_PAUSED;
    c->b->stats.outbuf_pauses++;
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->out_progress_ms = broker_now_ms(c->b);
    deadline_set(&c->out_stall, c->out_progress_ms + LIMIT_OUTBUF_STALL_MS, on_out_stall);
}

static int on_frame(void *ud, const uint8_t *body, size_t len)
{
    struct conn *c = ud;
    dispatch_frame(c, body, len);
    if (conn_muted(c))
        return 1;
    if (out_queued(c) >= c->b->out_pause) {
        pause_reading(c);
        return 1;
    }
    return 0;
}

/* Feeds n bytes of c to its reader; when c pauses, what follows the last
 * frame dispatched is kept in c->held (data may be c->held itself).
 * Returns the reader's status (> 0: a bad frame), 0 otherwise. */
static int conn_feed(struct conn *c, const uint8_t *data, size_t n)
{
    int st = coord_frame_feed(&c->reader, data, n, on_frame, c);
    if (st > 0)
        return st;
    bool from_held = data == c->held.data;
    if (st < 0 && (c->flags & CONN_PAUSED) && !conn_muted(c)) {
        /* the frames dispatched took used bytes; the rest waits */
        size_t used = coord_frame_reader_used(&c->reader);
        if (from_held) {
            coord_buf_consume(&c->held, used);
        } else if (coord_buf_append(&c->held, data + used, n - used) < 0) {
            conn_cut(c, "out of memory for input");
            return 0;
        }
        return 0;
    }
    if (from_held)
        c->held.len = 0;
    return 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)suggested;
    _Static_assert(sizeof c->b->read_buf >= LIMIT_READ_PER_TURN, "read_buf too small");
    *buf = uv_buf_init((char *)c->b->read_buf, LIMIT_READ_PER_TURN);
}

/* Past LIMIT_PARTIAL_TOTAL, the connection holding the largest partial
 * frame is cut off (it may be c itself). */
static void partial_account(struct conn *c)
{
    struct broker *b = c->b;
    size_t now = coord_frame_reader_pending(&c->reader) + c->held.len;
    b->partial_bytes = b->partial_bytes - c->partial_counted + now;
    c->partial_counted = now;
    while (b->partial_bytes > LIMIT_PARTIAL_TOTAL) {
        struct conn *big = NULL;
        struct list *pos, *tmp;
        list_for_each_safe(pos, tmp, &b->conns) {
            struct conn *x = list_entry(pos, struct conn, link);
            if (!conn_muted(x) && (!big || x->partial_counted > big->partial_counted))
                big = x;
        }
        if (!big || big->partial_counted == 0)
            break;
        b->stats.partial_limit_cuts++;
        log_event(LOG_WARN, "conn.partial_limit", "conn=%llu partial=%zu total=%zu limit=%u",
                  (unsigned long long)big->id, big->partial_counted, b->partial_bytes,
                  LIMIT_PARTIAL_TOTAL);
        partial_forget(big);
        conn_cut(big, "partial frames over the broker's budget");
    }
}

static bool fed_ok(struct conn *c, int st);

/* One descriptor libuv received on c, as a descriptor c owns (-1: none or
 * out of memory). */
static int accept_passed_fd(struct conn *c)
{
    uv_pipe_t *tmp = malloc(sizeof *tmp);
    if (!tmp)
        return -1;
    uv_pipe_init(c->pipe.loop, tmp, 0);
    int fd = -1;
    uv_os_fd_t raw;
    if (uv_accept((uv_stream_t *)&c->pipe, (uv_stream_t *)tmp) == 0 &&
        uv_fileno((uv_handle_t *)tmp, &raw) == 0)
        fd = fcntl(raw, F_DUPFD_CLOEXEC, 3);
    uv_close((uv_handle_t *)tmp, free_handle);   /* closes raw */
    return fd;
}

/* Takes the descriptors that came with this read into c->fdq; false when
 * c was cut for it (too many unclaimed). */
static bool take_passed_fds(struct conn *c)
{
    while (uv_pipe_pending_count(&c->pipe) > 0) {
        int fd = accept_passed_fd(c);
        if (fd < 0) {
            conn_cut(c, "cannot take a descriptor");
            return false;
        }
        c->b->stats.fds_received++;
        if (c->nfdq >= LIMIT_FDS_QUEUED) {
            close(fd);
            char msg[80];
            snprintf(msg, sizeof msg, "more than %u descriptors queued unclaimed",
                     LIMIT_FDS_QUEUED);
            c->b->stats.bad_frames++;
            conn_reply_error(c, 0, COORD_EBAD_FRAME, msg);
            conn_cut(c, "bad frame");
            return false;
        }
        c->fdq[c->nfdq++] = fd;
    }
    return true;
}

int conn_claim_fd(struct conn *c)
{
    if (c->nfdq == 0)
        return -1;
    int fd = c->fdq[0];
    memmove(c->fdq, c->fdq + 1, (c->nfdq - 1) * sizeof c->fdq[0]);
    c->nfdq--;
    return fd;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        conn_cut(c, nread == UV_EOF ? "eof" : uv_strerror((int)nread));
        return;
    }
    c->b->stats.bytes_in += (uint64_t)nread;
    if (!take_passed_fds(c))
        return;
    if (!fed_ok(c, conn_feed(c, (const uint8_t *)buf->base, (size_t)nread)))
        return;
    /* a full read: more is probably there; it waits for the next turn */
    if ((size_t)nread >= LIMIT_READ_PER_TURN && !(c->flags & CONN_PAUSED)) {
        uv_read_stop(s);
        throttle(c);
    }
}

/* After conn_feed: a bad frame cuts c; false when c reads no more. */
static bool fed_ok(struct conn *c, int st)
{
    if (st > 0) {
        c->b->stats.bad_frames++;
        log_event(LOG_INFO, "conn.bad_frame", "conn=%llu pid=%d why=\"%s\"",
                  (unsigned long long)c->id, (int)c->peer_pid,
                  coord_frame_status_text(st));
        conn_reply_error(c, 0, COORD_EBAD_FRAME, coord_frame_status_text(st));
        conn_cut(c, "bad frame");
        return false;
    }
    if (conn_muted(c))
        return false;
    partial_account(c);
    return !conn_muted(c);
}

/* Throttled connections (read budget used up, or unpaused): what a pause
 * held is dispatched first (at most one read's worth, so the turn's work
 * per client stays bounded), then reading starts again unless that paused
 * it anew. */
void conn_resume_throttled(struct broker *b)
{
    struct list todo;
    list_init(&todo);
    while (!list_empty(&b->throttled)) {
        struct list *l = b->throttled.next;
        list_del(l);
        list_append(&todo, l);
    }
    while (!list_empty(&todo)) {
        struct conn *c = list_entry(todo.next, struct conn, throttle_link);
        list_del(&c->throttle_link);
        c->flags &= ~CONN_THROTTLED;
        if (conn_muted(c) || (c->flags & CONN_PAUSED))
            continue;
        if (c->held.len > 0 && !fed_ok(c, conn_feed(c, c->held.data, c->held.len)))
            continue;
        if (c->flags & CONN_PAUSED)
            continue;
        int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
        if (rc < 0)
            conn_cut(c, uv_strerror(rc));
    }
}

/* The handshake deadline, on the broker's one deadline heap like every
 * other timeout. */
static void on_hello_timeout(struct deadline *d)
{
    struct conn *c = list_entry(d, struct conn, hello_deadline);
    c->b->stats.handshake_timeouts++;
    conn_reply_error(c, 0, COORD_EHELLO_REQUIRED, "no hello in time");
    conn_cut(c, "handshake timeout");
}

void conn_hello_done(struct conn *c)
{
    c->flags |= CONN_HELLO_DONE;
    deadline_cancel(&c->hello_deadline);
}

void conn_accepted(struct broker *b, struct conn *c)
{
    c->b = b;
    c->refs = 1;                 /* the handle's, dropped once it is closed */
    c->id = ++b->next_conn_id;
    c->accepted_ms = broker_now_ms(b);
    c->pipe.data = c;
    c->frame_fd = -1;
    list_init(&c->heldrefs);
    coord_frame_reader_init(&c->reader, b->opt.max_frame);
    coord_buf_init(&c->held);
    list_init(&c->pending);
    list_init(&c->locks);
    list_init(&c->flights);
    list_init(&c->watches);
    list_init(&c->leads);
    list_init(&c->subs);
    list_init(&c->dirty_link);
    list_init(&c->cut_link);
    list_init(&c->throttle_link);
    list_append(&b->conns, &c->link);
    b->nconns++;
    b->stats.conns_accepted++;
    deadline_set(&c->hello_deadline, c->accepted_ms + b->opt.handshake_ms, on_hello_timeout);
    broker_conn_count_changed(b);
    int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    if (rc < 0)
        conn_cut(c, uv_strerror(rc));
}
