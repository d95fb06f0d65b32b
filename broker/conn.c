/* conn.c - one client connection: reading frames, queueing replies and
 * events, writing them out once per loop turn, and closing.
 *
 * Output is batched: replies are appended to c->out and every connection
 * with output is flushed once per loop iteration (prepare and check
 * handles), so a burst of requests costs one write, not one per reply.  A
 * client that stops reading is cut off when its queued bytes pass
 * max_outbuf; nobody else waits for it. */
#include <stdlib.h>
#include <string.h>
#include "broker.h"
#include "deadline.h"
#include "errors.h"
#include "tables.h"

static void on_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    c->flags |= CONN_HANDLE_CLOSED;
    conn_unref(c);
}

void conn_unref(struct conn *c)
{
    if (c->refs > 0) {
        c->refs--;
        return;
    }
    coord_frame_reader_free(&c->reader);
    coord_buf_free(&c->out);
    coord_buf_free(&c->inflight);
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

/* Write what is queued: try_write first (usually all of it goes at once),
 * the rest through a uv_write that owns c->inflight until it completes. */
static void conn_flush(struct conn *c)
{
    if (c->flags & (CONN_WRITING | CONN_HANDLE_CLOSED_REQUESTED) || c->out.len == 0)
        return;
    uv_buf_t buf = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
    int n = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
    if (n == UV_EAGAIN || n == UV_ENOSYS)
        n = 0;
    if (n < 0) {
        c->out.len = 0;
        conn_close(c, "write failed");
        close_handle(c);
        return;
    }
    c->b->stats.bytes_out += (uint64_t)n;
    coord_buf_consume(&c->out, (size_t)n);
    if (c->out.len == 0 || (c->flags & CONN_CLOSING))
        return;
    coord_buf tmp = c->inflight;
    c->inflight = c->out;
    c->out = tmp;
    c->out.len = 0;
    buf = uv_buf_init((char *)c->inflight.data, (unsigned)c->inflight.len);
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->pipe, &buf, 1, on_write_done) == 0) {
        c->flags |= CONN_WRITING;
    } else {
        conn_close(c, "write failed");
        close_handle(c);
    }
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
    if (status == 0)
        c->b->stats.bytes_out += c->inflight.len;
    c->inflight.len = 0;
    if (c->flags & CONN_HANDLE_CLOSED_REQUESTED)
        return;
    if (status < 0) {
        conn_close(c, "write failed");
        close_handle(c);
        return;
    }
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
 * read; nobody else waits for it), else it is flushed this loop turn. */
static int queued(struct conn *c)
{
    if (c->out.len + c->inflight.len > c->b->opt.max_outbuf) {
        c->b->stats.outbuf_disconnects++;
        log_event(LOG_WARN, "conn.outbuf_limit", "conn=%llu queued=%zu limit=%zu",
                  (unsigned long long)c->id, c->out.len + c->inflight.len,
                  c->b->opt.max_outbuf);
        c->out.len = 0;
        conn_close(c, "output buffer limit");
        close_handle(c);
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

void conn_enc_finish(struct conn *c, coord_enc *e)
{
    if (c->flags & CONN_CLOSING) {
        coord_enc_abort(e);
        return;
    }
    if (coord_enc_end(e) == 0) {
        /* out of memory for this client's output: it loses its connection,
         * not the broker its life */
        conn_close(c, "out of memory for output");
        return;
    }
    queued(c);
}

int conn_send_bytes(struct conn *c, const void *p, size_t n)
{
    if (c->flags & CONN_CLOSING)
        return -1;
    if (coord_buf_append(&c->out, p, n) < 0) {
        conn_close(c, "out of memory for output");
        return -1;
    }
    return queued(c);
}

void conn_reply_ok(struct conn *c, uint64_t rid)
{
    coord_enc e;
    conn_enc_begin_reply(c, &e, rid);
    conn_enc_finish(c, &e);
}

void conn_reply_error(struct conn *c, uint64_t rid, int code, const char *msg)
{
    if (c->flags & CONN_CLOSING)
        return;
    if (coord_enc_error(&c->out, rid, code, msg) == 0) {
        conn_close(c, "out of memory for output");
        return;
    }
    queued(c);
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
    c->flags |= CONN_CLOSING;
    uv_read_stop((uv_stream_t *)&c->pipe);
    deadline_cancel(&c->hello_deadline);
    pending_abort_all(c, 0);
    tables_conn_closed(c);
    list_del(&c->link);
    b->nconns--;
    log_event(LOG_DEBUG, "conn.close", "conn=%llu pid=%d reason=\"%s\"",
              (unsigned long long)c->id, (int)c->peer_pid, why);
    if (!(c->flags & CONN_WRITING) && c->out.len > 0 &&
        !(c->flags & CONN_HANDLE_CLOSED_REQUESTED)) {
        uv_buf_t buf = uv_buf_init((char *)c->out.data, (unsigned)c->out.len);
        int n = uv_try_write((uv_stream_t *)&c->pipe, &buf, 1);
        if (n > 0)
            b->stats.bytes_out += (uint64_t)n;
    }
    c->out.len = 0;
    if (list_linked(&c->dirty_link))
        list_del(&c->dirty_link);
    close_handle(c);
    broker_conn_count_changed(b);
}

static int on_frame(void *ud, const uint8_t *body, size_t len)
{
    struct conn *c = ud;
    dispatch_frame(c, body, len);
    return (c->flags & CONN_CLOSING) ? 1 : 0;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct conn *c = h->data;
    (void)suggested;
    *buf = uv_buf_init((char *)c->b->read_buf, sizeof c->b->read_buf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct conn *c = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        conn_close(c, nread == UV_EOF ? "eof" : uv_strerror((int)nread));
        return;
    }
    c->b->stats.bytes_in += (uint64_t)nread;
    int st = coord_frame_feed(&c->reader, (const uint8_t *)buf->base,
                              (size_t)nread, on_frame, c);
    if (st > 0) {
        c->b->stats.bad_frames++;
        log_event(LOG_INFO, "conn.bad_frame", "conn=%llu pid=%d why=\"%s\"",
                  (unsigned long long)c->id, (int)c->peer_pid,
                  coord_frame_status_text(st));
        conn_reply_error(c, 0, COORD_EBAD_FRAME, coord_frame_status_text(st));
        conn_close(c, "bad frame");
    }
}

/* The handshake deadline, on the broker's one deadline heap like every
 * other timeout. */
static void on_hello_timeout(struct deadline *d)
{
    struct conn *c = list_entry(d, struct conn, hello_deadline);
    c->b->stats.handshake_timeouts++;
    conn_reply_error(c, 0, COORD_EHELLO_REQUIRED, "no hello in time");
    conn_close(c, "handshake timeout");
}

void conn_hello_done(struct conn *c)
{
    c->flags |= CONN_HELLO_DONE;
    deadline_cancel(&c->hello_deadline);
}

void conn_accepted(struct broker *b, struct conn *c)
{
    c->b = b;
    c->id = ++b->next_conn_id;
    c->accepted_ms = broker_now_ms(b);
    c->pipe.data = c;
    coord_frame_reader_init(&c->reader, b->opt.max_frame);
    list_init(&c->pending);
    list_init(&c->locks);
    list_init(&c->flights);
    list_init(&c->leads);
    list_init(&c->subs);
    list_init(&c->dirty_link);
    list_append(&b->conns, &c->link);
    b->nconns++;
    b->stats.conns_accepted++;
    deadline_set(&c->hello_deadline, c->accepted_ms + b->opt.handshake_ms, on_hello_timeout);
    tables_conn_opened(c);
    broker_conn_count_changed(b);
    int rc = uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read);
    if (rc < 0)
        conn_close(c, uv_strerror(rc));
}
