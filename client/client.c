/* client.c - the core of libcoord: building requests, writing frames,
 * reading and dispatching replies and events, blocking calls.
 *
 * Reading and dispatching are separate steps.  Bytes read from the socket
 * are cut into frames, decoded and appended to c->inbound; only then are
 * they delivered, one at a time, from process_inbound.  No user callback
 * ever runs while the frame reader is in the middle of a buffer, so a
 * callback may call coord_call, coord_send or coord_close on its own
 * handle (coord_close there is deferred until the outermost call returns).
 *
 * Wire order: frames are dispatched in the order they were read.  A
 * blocking call stops dispatching at its own reply; what was read after
 * it stays on c->inbound for the next dispatch, so that its caller has
 * the reply (a lock id, a term) before any event that refers to it.
 * Events queued for coord_next_event are handed to an event callback set
 * later, before anything newer (deliver_queued).
 *
 * Bounds: a frame is at most the max_frame hello announced (refused above
 * COORD_MAX_FRAME_CAP); the event queue is bounded (COORD_EVENT_QUEUE_MAX,
 * COORD_EVENT_QUEUE_BYTES: past it the connection fails with
 * COORD_EOVERFLOW); a blocking call that does not wait by design has a
 * deadline (request_timeout_ms).
 *
 * Descriptors (results by reference).  hello says fds: true, so reads use
 * recvmsg and keep the SCM_RIGHTS descriptors that come with them, in
 * arrival order (the broker sends one with the first byte of the frame
 * that declares it, so it is here by the time that frame is whole); a
 * frame that declares one (result_fd) takes the oldest, and the reply owns
 * it until the caller takes it (coord_reply_take_fd).  A request that
 * passes one (coord_flight_complete_fd) is written once everything queued
 * before it went out: its first byte alone with the descriptor (sendmsg),
 * the rest like any frame. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "errors.h"
#include "fdpass.h"
#include "internal.h"

int64_t coord__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline (-1: none) as a poll timeout. */
static int remaining_ms(int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t left = deadline - coord__now_ms();
    if (left <= 0)
        return 0;
    return left > 1000000000 ? 1000000000 : (int)left;
}

/* ---- errors ---- */

COORD_API const char *coord_strerror(int err)
{
    return coord_code_text(err);
}

COORD_API const char *coord_error_message(const coord_t *c)
{
    if (!c)
        return coord__connect_error();
    return c->errmsg[0] ? c->errmsg : "no error";
}

void coord__set_error(coord_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    c->errreason[0] = '\0';
    c->errbroker = false;
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
}

void coord__seconds(char *out, size_t size, uint64_t ms)
{
    snprintf(out, size, "%g s", (double)ms / 1000.0);
}

void coord__wait_timed_out(coord_t *c, int rc, const char *what, uint64_t wait_ms)
{
    if (rc != COORD_ETIMEOUT || !wait_ms || !c || !c->errbroker)
        return;
    char s[32];
    coord__seconds(s, sizeof s, wait_ms);
    coord__set_error(c, "%s: timed out after %s", what, s);
}

/* The message of an error reply, or the code's own text.  The broker's
 * text is quoted with coord__escape_text: no control byte of it reaches a
 * terminal or a log line through coord_error_message. */
static void error_from_reply(coord_t *c, const struct coord_reply *r)
{
    const char *msg;
    size_t n;
    coord_map m = coord_reply_map(r);
    c->errreason[0] = '\0';
    if (coord_map_str(m, "message", &msg, &n) && n > 0)
        coord__escape_text(c->errmsg, sizeof c->errmsg, msg, n);
    else
        coord__set_error(c, "%s", coord_code_text(r->status));
    c->errbroker = true;
    if (coord_map_str(m, "reason", &msg, &n) && n < sizeof c->errreason && !memchr(msg, 0, n)) {
        memcpy(c->errreason, msg, n);
        c->errreason[n] = '\0';
    }
}

COORD_API const char *coord_error_reason(const coord_t *c)
{
    return c ? c->errreason : "";
}

/* ---- the handle ---- */

coord_t *coord__alloc(int fd)
{
    coord_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    c->next_rid = 1;
    c->max_frame = COORD_MAX_FRAME_DEFAULT;
    c->request_timeout_ms = COORD_REQUEST_TIMEOUT_MS;
    coord_frame_reader_init(&c->reader, COORD_CLIENT_MAX_INBOUND);
    coord_buf_init(&c->wbuf);
    coord_buf_init(&c->out);
    return c;
}

void coord__apply_options(coord_t *c, const coord_options *o)
{
    c->request_timeout_ms = o->request_timeout_ms ? o->request_timeout_ms
                                                  : COORD_REQUEST_TIMEOUT_MS;
}

int coord__set_max_frame(coord_t *c, uint64_t v)
{
    if (v == 0 || v > COORD_MAX_FRAME_CAP) {
        coord__set_error(c, "the broker announced max_frame %llu, outside the "
                         "protocol's 1..%u: refused", (unsigned long long)v,
                         (unsigned)COORD_MAX_FRAME_CAP);
        return COORD_EPROTOCOL;
    }
    c->max_frame = (uint32_t)v;
    c->reader.max_frame = c->max_frame;
    return 0;
}

static void rqueue_push(struct coord_rqueue *q, struct coord_reply *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
    q->count++;
    q->bytes += r->len;
}

static struct coord_reply *rqueue_pop(struct coord_rqueue *q)
{
    struct coord_reply *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head)
            q->tail = NULL;
        q->count--;
        q->bytes -= r->len;
        r->next = NULL;
    }
    return r;
}

static void rqueue_clear(struct coord_rqueue *q)
{
    struct coord_reply *r;
    while ((r = rqueue_pop(q)))
        coord_reply_free(r);
}

void coord__free(coord_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    rqueue_clear(&c->inbound);
    rqueue_clear(&c->events);
    free(c->pending.slots);
    coord_frame_reader_free(&c->reader);
    coord_buf_free(&c->wbuf);
    coord_buf_free(&c->out);
    while (c->nfdq > 0)
        close(c->fdq[--c->nfdq]);
    free(c);
}

COORD_API uint64_t coord_conn_id(const coord_t *c)   { return c ? c->conn_id : 0; }
COORD_API uint64_t coord_epoch(const coord_t *c)     { return c ? c->epoch : 0; }
COORD_API uint32_t coord_max_frame(const coord_t *c) { return c ? c->max_frame : 0; }
COORD_API const char *coord_broker_version(const coord_t *c)
{
    return c ? c->broker : "";
}
COORD_API int coord_fd(const coord_t *c)             { return c ? c->fd : -1; }
COORD_API uint64_t coord_max_ref_bytes(const coord_t *c)
{
    return c && c->broker_fds ? c->max_ref_bytes : 0;
}

/* ---- pending requests: rid -> callback ---- */

static size_t home_slot(uint64_t rid, size_t cap)
{
    return (size_t)((rid * 0x9e3779b97f4a7c15ull) >> 32) & (cap - 1);
}

static int ptable_grow(struct coord_ptable *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 16;
    struct coord_pending *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->slots[i].rid)
            continue;
        size_t j = home_slot(t->slots[i].rid, ncap);
        while (ns[j].rid)
            j = (j + 1) & (ncap - 1);
        ns[j] = t->slots[i];
    }
    free(t->slots);
    t->slots = ns;
    t->cap = ncap;
    return 0;
}

static int ptable_put(struct coord_ptable *t, const struct coord_pending *p)
{
    if ((t->count + 1) * 2 > t->cap && ptable_grow(t) < 0)
        return -1;
    size_t j = home_slot(p->rid, t->cap);
    while (t->slots[j].rid)
        j = (j + 1) & (t->cap - 1);
    t->slots[j] = *p;
    t->count++;
    return 0;
}

/* Removes rid's entry into *out; false when there is none. */
static bool ptable_take(struct coord_ptable *t, uint64_t rid,
                        struct coord_pending *out)
{
    if (!t->count || !rid)
        return false;
    size_t mask = t->cap - 1;
    size_t j = home_slot(rid, t->cap);
    while (t->slots[j].rid != rid) {
        if (!t->slots[j].rid)
            return false;
        j = (j + 1) & mask;
    }
    *out = t->slots[j];
    t->count--;
    /* backward-shift deletion: pull later entries of the run into the hole */
    size_t hole = j;
    for (size_t k = (j + 1) & mask; t->slots[k].rid; k = (k + 1) & mask) {
        size_t home = home_slot(t->slots[k].rid, t->cap);
        /* k's entry may move to hole unless its home lies in (hole, k] */
        bool stays = hole <= k ? (home > hole && home <= k)
                               : (home > hole || home <= k);
        if (!stays) {
            t->slots[hole] = t->slots[k];
            hole = k;
        }
    }
    memset(&t->slots[hole], 0, sizeof t->slots[hole]);
    return true;
}

static int cmp_rid(const void *a, const void *b)
{
    uint64_t x = ((const struct coord_pending *)a)->rid;
    uint64_t y = ((const struct coord_pending *)b)->rid;
    return x < y ? -1 : x > y;
}

/* Answers every pending request with code, oldest first. */
static void fail_pending(coord_t *c, int code)
{
    struct coord_ptable old = c->pending;
    memset(&c->pending, 0, sizeof c->pending);
    if (!old.count) {
        free(old.slots);
        return;
    }
    size_t n = 0;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slots[i].rid)
            old.slots[n++] = old.slots[i];      /* compact in place */
    qsort(old.slots, n, sizeof *old.slots, cmp_rid);
    for (size_t i = 0; i < n; i++) {
        struct coord_pending *p = &old.slots[i];
        if (p->sync) {
            p->sync->done = true;
            p->sync->status = code;
            p->sync->reply = NULL;
        } else if (p->cb) {
            p->cb(c, code, NULL, p->ud);
        }
    }
    free(old.slots);
}

/* ---- connection state ---- */

/* Nesting of public calls that may run callbacks; coord_close inside one
 * only marks the handle, and the outermost call frees it on the way out. */
static void enter(coord_t *c)
{
    c->depth++;
}

static int leave(coord_t *c, int rc)
{
    if (--c->depth == 0 && c->closing) {
        coord__free(c);
        return COORD_ECLOSED;
    }
    return rc;
}

/* No more requests can be sent. */
static void mark_dead(coord_t *c, int code)
{
    if (!c->dead) {
        c->dead = true;
        c->dead_code = code;
    }
}

/* No more input either: what is queued is delivered, then every pending
 * request fails (process_inbound). */
static void mark_rx_done(coord_t *c, int code)
{
    mark_dead(c, code);
    c->rx_done = true;
}

static int on_frame(void *ud, const uint8_t *body, size_t len)
{
    coord_t *c = ud;
    int st;
    struct coord_reply *r = coord__reply_new(body, len, &st);
    if (!r) {
        c->frame_error = st;
        return 1;
    }
    if (c->nfdq > 0 && coord__declares_fd(coord_reply_map(r))) {
        r->fd = c->fdq[0];
        memmove(c->fdq, c->fdq + 1, (size_t)(c->nfdq - 1) * sizeof c->fdq[0]);
        c->nfdq--;
    }
    if (!r->is_event && r->rid == 0 && r->status) {
        /* the broker's last words before it closes (BAD_FRAME...) */
        const char *name = coord_code_name(r->status);
        const char *msg;
        size_t n;
        if (!coord_map_str(coord_reply_map(r), "message", &msg, &n)) {
            msg = coord_code_text(r->status);
            n = strlen(msg);
        }
        int k = snprintf(c->errmsg, sizeof c->errmsg, "%s: ", name ? name : "UNKNOWN");
        coord__escape_text(c->errmsg + k, sizeof c->errmsg - (size_t)k, msg, n);
        c->got_bye = true;
        c->bye_code = r->status;
    }
    rqueue_push(&c->inbound, r);
    return 0;
}

static int wait_readable(coord_t *c, int timeout_ms);
static bool out_pending(const coord_t *c);

/* The descriptors a read brought, queued; false when there is no room
 * (they are closed). */
static bool take_fds(coord_t *c, struct msghdr *mh)
{
    return coord_take_fds(mh, c->fdq, &c->nfdq, (int)(sizeof c->fdq / sizeof c->fdq[0]));
}

/* One read, cut into frames on c->inbound.  The socket is left blocking
 * (a blocking call then costs one send and one recv); reads that must not
 * block say MSG_DONTWAIT, and a blocking read copes with a descriptor made
 * non-blocking by an event loop (uv_poll_init does that).  Returns 1 when
 * bytes came, 0 when there were none (EAGAIN), -1 when input has ended. */
static int pump_once(coord_t *c, bool block)
{
    uint8_t buf[65536];
    ssize_t n;
    union { char b[CMSG_SPACE(8 * sizeof(int))]; struct cmsghdr align; } cm;
    struct iovec iov = { buf, sizeof buf };
    struct msghdr mh;
    if (c->rx_done)
        return -1;
    if (block && out_pending(c))
        wait_readable(c, -1);              /* sends the rest meanwhile */
    for (;;) {
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        mh.msg_control = cm.b;
        mh.msg_controllen = sizeof cm.b;
        n = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | (block ? 0 : MSG_DONTWAIT));
        if (n >= 0)
            break;
        if (errno == EINTR)
            continue;
        if (block && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            wait_readable(c, -1);
            continue;
        }
        break;
    }
    if (n > 0 && !take_fds(c, &mh)) {
        coord__set_error(c, "the broker sent more descriptors than frames that declare them");
        mark_rx_done(c, COORD_EPROTOCOL);
        shutdown(c->fd, SHUT_RDWR);
        return -1;
    }
    if (n > 0) {
        c->frame_error = COORD_FRAME_OK;
        int st = coord_frame_feed(&c->reader, buf, (size_t)n, on_frame, c);
        if (st != COORD_FRAME_OK) {
            if (st == -1)
                st = c->frame_error;
            if (st == COORD_FRAME_NOMEM)
                coord__set_error(c, "out of memory reading a frame");
            else
                coord__set_error(c, "broker sent a malformed frame: %s",
                                 coord_frame_status_text(st));
            mark_rx_done(c, COORD_EPROTOCOL);
            shutdown(c->fd, SHUT_RDWR);
            return -1;
        }
        return 1;
    }
    if (n == 0) {
        if (!c->got_bye)
            coord__set_error(c, "connection closed by the broker");
        mark_rx_done(c, COORD_ECLOSED);
        return -1;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK)
        return 0;
    if (!c->got_bye)
        coord__set_error(c, "reading from the broker: %s", strerror(errno));
    mark_rx_done(c, COORD_ECLOSED);
    return -1;
}

/* Fails the connection because the event queue is full: nothing more is
 * read (what is on c->inbound is dropped), pending requests fail with
 * COORD_EOVERFLOW, the events already queued stay for coord_next_event. */
static void events_overflow(coord_t *c)
{
    coord__set_error(c, "more than %u events (or %u bytes of them) queued unread: "
                     "connection closed (set an event callback or call "
                     "coord_next_event)", COORD_EVENT_QUEUE_MAX,
                     COORD_EVENT_QUEUE_BYTES);
    mark_rx_done(c, COORD_EOVERFLOW);
    shutdown(c->fd, SHUT_RDWR);
    rqueue_clear(&c->inbound);
}

/* Hands the events queued while no callback was set to the callback now
 * set, oldest first: they are older than anything on c->inbound. */
static void deliver_queued(coord_t *c)
{
    struct coord_reply *r;
    while (!c->closing && c->event_cb && (r = rqueue_pop(&c->events))) {
        c->event_cb(c, r, c->event_ud);
        coord_reply_free(r);
    }
}

static void deliver(coord_t *c, struct coord_reply *r)
{
    if (r->is_event) {
        if (c->event_cb && !c->events.head) {
            c->event_cb(c, r, c->event_ud);
            coord_reply_free(r);
            return;
        }
        if (c->events.count >= COORD_EVENT_QUEUE_MAX ||
            c->events.bytes + r->len > COORD_EVENT_QUEUE_BYTES) {
            coord_reply_free(r);
            events_overflow(c);
            return;
        }
        rqueue_push(&c->events, r);
        deliver_queued(c);
        return;
    }
    struct coord_pending p;
    if (!ptable_take(&c->pending, r->rid, &p)) {
        /* rid 0 (connection error, recorded in on_frame), a reply to a
         * call that timed out, or a broker bug: nobody waits for it */
        coord_reply_free(r);
        return;
    }
    if (p.sync) {
        p.sync->done = true;
        p.sync->status = r->status;
        p.sync->reply = r;
        return;
    }
    if (r->status)
        error_from_reply(c, r);
    if (p.cb)
        p.cb(c, r->status, r, p.ud);
    coord_reply_free(r);
}

/* Delivers what was decoded so far, in wire order, up to and including
 * the reply that answers stop (NULL: everything); once input has ended and
 * all of it is delivered, fails what is still pending. */
static void process_inbound(coord_t *c, const struct coord_sync *stop)
{
    struct coord_reply *r;
    deliver_queued(c);
    while (!c->closing && !(stop && stop->done) && (r = rqueue_pop(&c->inbound)))
        deliver(c, r);
    if (!c->closing && c->rx_done && !c->inbound.head && c->pending.count)
        fail_pending(c, c->dead_code);
}

/* ---- writing ----
 *
 * A request is written without waiting: what the socket does not take at
 * once is kept on c->out, in order, and sent whenever the handle next
 * waits or dispatches (flush_out), or when the event loop reports the
 * socket writable (coord_want_write).  Waiting for room alone could
 * deadlock: a broker whose output to us is full stops reading us until we
 * read, so every wait of libcoord watches for input as well. */

static void write_failed(coord_t *c)
{
    if (!c->got_bye)
        coord__set_error(c, "writing to the broker: %s",
                         errno ? strerror(errno) : "short write");
    mark_dead(c, COORD_ECLOSED);
    c->out.len = c->out_off = 0;
}

/* Sends what it can of p[0..n) without blocking.  Returns the bytes sent,
 * or -1 when the connection failed (message set). */
static ssize_t send_some(coord_t *c, const uint8_t *p, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t w = send(c->fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            done += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        write_failed(c);
        return -1;
    }
    return (ssize_t)done;
}

/* Sends what the socket takes of c->out.  0, or COORD_ECLOSED. */
static int flush_out(coord_t *c)
{
    if (c->dead)
        return c->out.len > c->out_off ? c->dead_code : 0;
    if (c->out_off == c->out.len)
        return 0;
    ssize_t w = send_some(c, c->out.data + c->out_off, c->out.len - c->out_off);
    if (w < 0)
        return COORD_ECLOSED;
    c->out_off += (size_t)w;
    if (c->out_off == c->out.len) {
        c->out.len = c->out_off = 0;
        if (c->out.cap > 65536)
            coord_buf_free(&c->out);             /* don't keep a big one */
    }
    return 0;
}

static bool out_pending(const coord_t *c)
{
    return !c->dead && c->out_off < c->out.len;
}

/* Waits up to timeout_ms (-1: forever) for input, sending queued output
 * whenever the socket has room meanwhile.  1: readable (or the socket
 * failed: let recv report it), 0: timed out. */
static int wait_readable(coord_t *c, int timeout_ms)
{
    int64_t deadline = timeout_ms < 0 ? -1 : coord__now_ms() + timeout_ms;
    for (;;) {
        struct pollfd pfd = { .fd = c->fd,
                              .events = (short)(POLLIN | (out_pending(c) ? POLLOUT : 0)) };
        int n = poll(&pfd, 1, timeout_ms);
        if (n < 0 && errno != EINTR)
            return 1;
        if (n > 0) {
            if (pfd.revents & ~POLLOUT)
                return 1;                  /* input, hang-up or error */
            flush_out(c);
        }
        if (n == 0)
            return 0;
        timeout_ms = remaining_ms(deadline);
        if (timeout_ms == 0)
            return 0;
    }
}

static int pump_once(coord_t *c, bool block);

/* The first byte of the frame in c->wbuf, alone with fd (SCM_RIGHTS), once
 * everything queued before it went out; reads meanwhile (the broker may
 * wait for us to read).  0 or COORD_ECLOSED. */
static int send_fd_byte(coord_t *c, int fd)
{
    for (;;) {
        if (c->dead)                       /* input ended too (mark_rx_done) */
            return c->dead_code;
        if (!out_pending(c)) {
            ssize_t w = coord_send_with_fd(c->fd, c->wbuf.data, 1, fd, MSG_DONTWAIT);
            if (w == 1)
                return 0;
            if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                write_failed(c);
                return COORD_ECLOSED;
            }
        }
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN | POLLOUT };
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
            return COORD_ECLOSED;
        if (pfd.revents & POLLIN)
            pump_once(c, false);           /* queued on inbound, not dispatched */
        if (pfd.revents & POLLOUT)
            flush_out(c);
    }
}

/* Queues (after what waits already) or sends the frame in c->wbuf; with
 * fd >= 0, the frame's first byte goes with it (send_fd_byte). */
static int write_frame_fd(coord_t *c, int fd)
{
    const uint8_t *p = c->wbuf.data;
    size_t n = c->wbuf.len;
    if (c->dead)
        return c->dead_code;
    if (fd >= 0) {
        int rc = send_fd_byte(c, fd);
        if (rc < 0)
            return rc;
        p++;
        n--;
    }
    if (c->out_off == c->out.len) {        /* nothing waits: try at once */
        ssize_t w = send_some(c, p, n);
        if (w < 0)
            return COORD_ECLOSED;
        p += w;
        n -= (size_t)w;
    }
    if (n > 0 && coord_buf_append(&c->out, p, n) < 0) {
        coord__set_error(c, "out of memory queueing a request");
        if (n < c->wbuf.len) {             /* half a frame went out */
            mark_dead(c, COORD_ECLOSED);
            shutdown(c->fd, SHUT_RDWR);
        }
        return COORD_ENOMEM;
    }
    return 0;
}

static int send_req(coord_t *c, const coord_req_t *req, uint64_t rid)
{
    if (req->err) {
        coord__set_error(c, "building the request: %s", coord_code_text(req->err));
        return req->err;
    }
    if (req->enc.count[0] + 1 > 0xffff) {           /* + rid */
        coord__set_error(c, "request has too many fields");
        return COORD_ETOO_LARGE;
    }
    c->wbuf.len = 0;
    size_t total = coord_enc_request(&c->wbuf, &req->enc, rid);
    int rc;
    if (total == 0) {
        coord__set_error(c, "out of memory");
        rc = COORD_ENOMEM;
    } else if (total - COORD_FRAME_HEADER > c->max_frame) {
        coord__set_error(c, "request of %zu bytes exceeds the broker's max_frame %u",
                         total - COORD_FRAME_HEADER, (unsigned)c->max_frame);
        rc = COORD_ETOO_LARGE;
    } else {
        rc = write_frame_fd(c, req->has_fd ? req->fd : -1);
    }
    if (c->wbuf.cap > 65536)
        coord_buf_free(&c->wbuf);                    /* don't keep a big one */
    return rc;
}

/* Registers rid and sends.  The entry is removed again on failure. */
static int start_request(coord_t *c, const coord_req_t *req,
                         struct coord_pending *p)
{
    if (c->closing || c->dead)
        return c->closing ? COORD_ECLOSED : c->dead_code;
    p->rid = c->next_rid++;
    if (ptable_put(&c->pending, p) < 0) {
        coord__set_error(c, "out of memory");
        return COORD_ENOMEM;
    }
    int rc = send_req(c, req, p->rid);
    if (rc < 0) {
        struct coord_pending gone;
        ptable_take(&c->pending, p->rid, &gone);
    }
    return rc;
}

/* ---- requests ---- */

COORD_API coord_req_t *coord_req_new(const char *op)
{
    if (!op)
        return NULL;
    coord_req_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    coord_buf_init(&r->buf);
    coord_enc_begin(&r->enc, &r->buf);
    coord_enc_kv_cstr(&r->enc, "op", op);
    snprintf(r->op, sizeof r->op, "%s", op);
    r->waits = !strcmp(op, coord_op_name(COORD_OP_LOCK_ACQUIRE)) ||
               !strcmp(op, coord_op_name(COORD_OP_FLIGHT_JOIN)) ||
               !strcmp(op, coord_op_name(COORD_OP_LEADER_CAMPAIGN));
    if (r->enc.failed) {
        coord_req_free(r);
        return NULL;
    }
    return r;
}

coord_req_t *coord__req_new(enum coord_op op)
{
    const char *name = coord_op_name(op);
    return name ? coord_req_new(name) : NULL;
}

COORD_API void coord_req_free(coord_req_t *r)
{
    if (!r)
        return;
    coord_buf_free(&r->buf);
    free(r);
}

/* Checks a key before a field is added; false (and r->err) when refused. */
static bool req_key(coord_req_t *r, const char *key)
{
    if (!r)
        return false;
    if (r->err)
        return false;
    if (!key || strcmp(key, "rid") == 0 || strcmp(key, "op") == 0 ||
        r->enc.count[0] >= 0xfffe) {
        r->err = COORD_EINVAL;
        return false;
    }
    coord_enc_key(&r->enc, key);
    return true;
}

static void req_done(coord_req_t *r)
{
    if (r->enc.failed && !r->err)
        r->err = COORD_ENOMEM;
}

COORD_API void coord_req_str(coord_req_t *r, const char *key, const void *s, size_t n)
{
    if (r && !s && n) {
        r->err = r->err ? r->err : COORD_EINVAL;
        return;
    }
    if (!req_key(r, key))
        return;
    coord_enc_name(&r->enc, s ? s : "", n);
    req_done(r);
}

COORD_API void coord_req_cstr(coord_req_t *r, const char *key, const char *s)
{
    if (!req_key(r, key))
        return;
    if (s)
        coord_enc_name(&r->enc, s, strlen(s));
    else
        coord_enc_nil(&r->enc);                  /* nil: the field is absent */
    req_done(r);
}

COORD_API void coord_req_bin(coord_req_t *r, const char *key, const void *p, size_t n)
{
    if (r && !p && n) {
        r->err = r->err ? r->err : COORD_EINVAL;
        return;
    }
    if (!req_key(r, key))
        return;
    coord_enc_bin(&r->enc, p ? p : "", n);
    req_done(r);
}

COORD_API void coord_req_uint(coord_req_t *r, const char *key, uint64_t v)
{
    if (!req_key(r, key))
        return;
    coord_enc_uint(&r->enc, v);
    req_done(r);
}

COORD_API void coord_req_bool(coord_req_t *r, const char *key, bool v)
{
    if (!req_key(r, key))
        return;
    coord_enc_bool(&r->enc, v);
    req_done(r);
}

COORD_API void coord_req_strmap2(coord_req_t *r, const char *key,
                                 const char *k1, const char *s1,
                                 const char *k2, const char *s2)
{
    if (r && (!k1 || !k2)) {
        r->err = r->err ? r->err : COORD_EINVAL;
        return;
    }
    if (!req_key(r, key))
        return;
    coord_enc_map_begin(&r->enc);
    coord_enc_kv_name(&r->enc, k1, s1 ? s1 : "", s1 ? strlen(s1) : 0);
    coord_enc_kv_name(&r->enc, k2, s2 ? s2 : "", s2 ? strlen(s2) : 0);
    coord_enc_map_end(&r->enc);
    req_done(r);
}

/* ---- blocking calls ---- */

int coord__call_timeout(coord_t *c, const coord_req_t *req,
                        coord_reply_t **reply, int timeout_ms)
{
    if (reply)
        *reply = NULL;
    if (!c || !req)
        return COORD_EINVAL;
    if (c->closing)
        return COORD_ECLOSED;
    enter(c);
    struct coord_sync s = { .done = false };
    struct coord_pending p = { .sync = &s };
    int rc = start_request(c, req, &p);
    if (rc < 0)
        return leave(c, rc);

    int64_t deadline = timeout_ms < 0 ? -1 : coord__now_ms() + timeout_ms;
    for (;;) {
        process_inbound(c, &s);      /* may answer s, or fail it at the end */
        if (s.done || c->closing)
            break;
        if (deadline < 0) {
            pump_once(c, true);
            continue;
        }
        int wait = remaining_ms(deadline);
        if (wait == 0 || !wait_readable(c, wait)) {
            struct coord_pending gone;
            ptable_take(&c->pending, p.rid, &gone);
            char secs[32];
            coord__seconds(secs, sizeof secs, (uint64_t)timeout_ms);
            coord__set_error(c, "%s: no reply from the broker: timed out after %s",
                             req->op, secs);
            return leave(c, COORD_ETIMEOUT);
        }
        pump_once(c, false);
    }

    if (!s.done) {
        rc = COORD_ECLOSED;
    } else if (s.status == 0) {
        if (reply)
            *reply = s.reply;
        else
            coord_reply_free(s.reply);
        rc = 0;
    } else {
        if (s.reply)
            error_from_reply(c, s.reply);
        coord_reply_free(s.reply);
        rc = s.status;
    }
    return leave(c, rc);
}

COORD_API int coord_call(coord_t *c, const coord_req_t *req, coord_reply_t **reply)
{
    int timeout = -1;
    if (c && req && !req->waits)
        timeout = c->request_timeout_ms > INT32_MAX ? INT32_MAX
                                                    : (int)c->request_timeout_ms;
    return coord__call_timeout(c, req, reply, timeout);
}

int coord__call_free(coord_t *c, coord_req_t *r, coord_reply_t **reply)
{
    if (!r)
        return COORD_ENOMEM;
    int rc = coord_call(c, r, reply);
    coord_req_free(r);
    return rc;
}

int coord__call_uint(coord_t *c, coord_req_t *r, const char *key, uint64_t *out)
{
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    uint64_t v = 0;
    coord_map_uint(coord_reply_map(reply), key, &v);
    if (out)
        *out = v;
    coord_reply_free(reply);
    return 0;
}

COORD_API int coord_ping(coord_t *c)
{
    return coord__call_free(c, coord__req_new(COORD_OP_PING), NULL);
}

/* ---- event-loop mode ---- */

COORD_API int coord_send(coord_t *c, const coord_req_t *req, coord_reply_cb cb,
                         void *ud, uint64_t *rid_out)
{
    if (rid_out)
        *rid_out = 0;
    if (!c || !req)
        return COORD_EINVAL;
    struct coord_pending p = { .cb = cb, .ud = ud };
    int rc = start_request(c, req, &p);
    if (rc < 0)
        return rc;
    if (rid_out)
        *rid_out = p.rid;
    return 0;
}

int coord__send_ctx(coord_t *c, coord_req_t *r, coord_reply_cb cb, void *ctx,
                    uint64_t *rid_out)
{
    if (!ctx || !r) {
        free(ctx);
        coord_req_free(r);
        return COORD_ENOMEM;
    }
    int rc = coord_send(c, r, cb, ctx, rid_out);
    coord_req_free(r);
    if (rc < 0)
        free(ctx);      /* not registered: the callback will never run */
    return rc;
}

COORD_API int coord_cancel(coord_t *c, uint64_t rid)
{
    if (!c || !rid)
        return COORD_EINVAL;
    coord_req_t *r = coord__req_new(COORD_OP_CANCEL);
    if (!r)
        return COORD_ENOMEM;
    coord_req_uint(r, "target", rid);
    int rc = coord_send(c, r, NULL, NULL, NULL);   /* its reply is ignored */
    coord_req_free(r);
    return rc;
}

/* The connection's state after a dispatch: 0 while it lives. */
static int conn_status(const coord_t *c)
{
    if (c->closing)
        return COORD_ECLOSED;
    return c->rx_done ? c->dead_code : 0;
}

COORD_API int coord_dispatch(coord_t *c)
{
    if (!c)
        return COORD_EINVAL;
    if (c->closing)
        return COORD_ECLOSED;
    enter(c);
    flush_out(c);
    process_inbound(c, NULL);
    while (!c->closing && !c->rx_done && pump_once(c, false) > 0)
        process_inbound(c, NULL);
    process_inbound(c, NULL);
    return leave(c, conn_status(c));
}

COORD_API int coord_wait(coord_t *c, int timeout_ms)
{
    if (!c)
        return COORD_EINVAL;
    if (c->closing)
        return COORD_ECLOSED;
    if (!c->inbound.head && !c->rx_done && !(c->event_cb && c->events.head))
        wait_readable(c, timeout_ms);
    return coord_dispatch(c);
}

COORD_API void coord_set_event_cb(coord_t *c, coord_event_cb cb, void *ud)
{
    if (!c)
        return;
    c->event_cb = cb;
    c->event_ud = ud;
}

COORD_API int coord_next_event(coord_t *c, int timeout_ms, coord_reply_t **event)
{
    if (event)
        *event = NULL;
    if (!c || !event)
        return COORD_EINVAL;
    if (c->closing)
        return COORD_ECLOSED;
    enter(c);
    int64_t deadline = timeout_ms < 0 ? -1 : coord__now_ms() + timeout_ms;
    int rc;
    for (;;) {
        process_inbound(c, NULL);
        if (c->closing) {
            rc = COORD_ECLOSED;
            break;
        }
        if (c->events.head) {
            *event = rqueue_pop(&c->events);
            rc = 0;
            break;
        }
        if (c->rx_done) {
            rc = conn_status(c);
            break;
        }
        if (deadline < 0) {
            pump_once(c, true);
            continue;
        }
        int wait = remaining_ms(deadline);
        if (wait == 0 || !wait_readable(c, wait)) {
            rc = COORD_EAGAIN;
            break;
        }
        pump_once(c, false);
    }
    return leave(c, rc);
}

/* What coord_send queued still goes out before the socket closes, for at
 * most request_timeout_ms; input meanwhile is dropped (reading it keeps a
 * broker that waits for us to read from stopping to read us). */
static void flush_before_close(coord_t *c)
{
    int64_t deadline = coord__now_ms() + c->request_timeout_ms;
    while (out_pending(c)) {
        int wait = remaining_ms(deadline);
        if (wait == 0)
            break;
        struct pollfd pfd = { .fd = c->fd, .events = POLLIN | POLLOUT };
        int n = poll(&pfd, 1, wait);
        if (n < 0 && errno != EINTR)
            break;
        if (n <= 0)
            continue;
        if (pfd.revents & POLLIN) {
            uint8_t sink[4096];
            ssize_t r = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                           errno != EINTR))
                break;
        }
        if (pfd.revents & (POLLERR | POLLHUP))
            break;
        if (pfd.revents & POLLOUT)
            flush_out(c);
    }
}

COORD_API int coord_want_write(const coord_t *c)
{
    return c && !c->closing && out_pending(c);
}

COORD_API void coord_close(coord_t *c)
{
    if (!c || c->closing)
        return;
    flush_before_close(c);
    c->closing = true;
    mark_dead(c, COORD_ECLOSED);
    c->depth++;
    fail_pending(c, COORD_ECLOSED);
    c->depth--;
    if (c->depth == 0)
        coord__free(c);
}
