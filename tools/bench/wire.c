/* wire.c - the small blocking client that both the broker runs and the raw
 * baseline use, so that the client's own cost (encode, write, read, parse)
 * is the same on both sides of every ratio.
 *
 * It speaks the wire protocol directly with the protocol's own encoder and
 * parser (protocol/enc.h, msg.h): no libcoord, no allocation per request. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "bench.h"
#include "errors.h"
#include "fdpass.h"

#define IN_START 4096

int wc_open(struct wconn *w)
{
    memset(w, 0, sizeof *w);
    w->fd = -1;
    coord_buf_init(&w->out);
    if (coord_msg_init(&w->msg) < 0)
        return -1;
    return 0;
}

int wc_connect(struct wconn *w, const char *path)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof sa.sun_path)
        return -ENAMETOOLONG;
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    while (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        if (errno == EINTR)
            continue;
        int e = errno;
        close(fd);
        return -e;
    }
    w->fd = fd;
    w->ilen = w->ioff = 0;
    w->rid = 0;
    w->out.len = 0;
    w->holding = false;
    return 0;
}

void wc_close(struct wconn *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    free(w->in);
    w->in = NULL;
    w->ilen = w->ioff = w->icap = 0;
    coord_buf_free(&w->out);
    coord_msg_destroy(&w->msg);
    w->has_msg = false;
}

uint64_t wq_begin(struct wconn *w, coord_enc *e, const char *op)
{
    coord_enc_begin(e, &w->out);
    coord_enc_kv_cstr(e, "op", op);
    coord_enc_kv_uint(e, "rid", ++w->rid);
    return w->rid;
}

void wq_end(coord_enc *e)
{
    coord_enc_end(e);
}

void wc_enc_hello(struct wconn *w)
{
    coord_enc e;
    wq_begin(w, &e, "hello");
    coord_enc_kv_uint(&e, "proto", 1);
    coord_enc_kv_cstr(&e, "client", "coord-bench");
    coord_enc_kv_uint(&e, "pid", (uint64_t)getpid());
    coord_enc_kv_cstr(&e, "instance", "coord-bench");
    wq_end(&e);
}

int wc_dial(struct wconn *w, const char *path)
{
    int rc = wc_connect(w, path);
    if (rc < 0) {
        errno = -rc;
        return COORD_ECONNECT;
    }
    wc_enc_hello(w);
    rc = wc_call(w);
    if (rc != 0) {
        close(w->fd);
        w->fd = -1;
    }
    return rc;
}

int wc_flush(struct wconn *w)
{
    size_t off = 0;
    while (off < w->out.len) {
        ssize_t n = write(w->fd, w->out.data + off, w->out.len - off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        off += (size_t)n;
    }
    w->out.len = 0;
    return 0;
}

/* Room for at least 1 KiB more input: 0 or -ENOMEM. */
static int in_room(struct wconn *w)
{
    if (w->ioff == w->ilen) {
        w->ioff = w->ilen = 0;
    } else if (w->ioff > 0 && w->icap - w->ilen < 1024) {
        memmove(w->in, w->in + w->ioff, w->ilen - w->ioff);
        w->ilen -= w->ioff;
        w->ioff = 0;
    }
    if (w->icap - w->ilen < 1024) {
        size_t cap = w->icap ? w->icap * 2 : IN_START;
        uint8_t *p = realloc(w->in, cap);
        if (!p)
            return -ENOMEM;
        w->in = p;
        w->icap = cap;
    }
    return 0;
}

ssize_t wc_fill_fds(struct wconn *w, int *fdq, int *nfdq, int max)
{
    if (in_room(w) < 0)
        return -ENOMEM;
    union { char b[CMSG_SPACE(4 * sizeof(int))]; struct cmsghdr align; } cm;
    for (;;) {
        struct iovec iov = { w->in + w->ilen, w->icap - w->ilen };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                             .msg_controllen = sizeof cm.b };
        ssize_t n = recvmsg(w->fd, &mh, MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        coord_take_fds(&mh, fdq, nfdq, max);
        w->ilen += (size_t)n;
        return n;
    }
}

ssize_t wc_fill(struct wconn *w)
{
    if (in_room(w) < 0)
        return -ENOMEM;
    for (;;) {
        ssize_t n = read(w->fd, w->in + w->ilen, w->icap - w->ilen);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
        w->ilen += (size_t)n;
        return n;
    }
}

int wc_next(struct wconn *w)
{
    size_t have = w->ilen - w->ioff;
    if (have < 4)
        return 0;
    uint32_t n = coord_be32(w->in + w->ioff);
    if (n == 0 || n > (64u << 20))
        return -1;
    if (have - 4 < n) {
        /* make sure the whole frame will fit */
        if (w->icap < (size_t)n + 4 + 1024) {
            size_t cap = w->icap;
            while (cap < (size_t)n + 4 + 1024)
                cap *= 2;
            uint8_t *p = realloc(w->in, cap);
            if (!p)
                return -1;
            w->in = p;
            w->icap = cap;
        }
        return 0;
    }
    const uint8_t *body = w->in + w->ioff + 4;
    w->ioff += 4 + (size_t)n;
    w->has_msg = coord_msg_parse(&w->msg, body, n) == COORD_FRAME_OK;
    return w->has_msg ? 1 : -1;
}

int wc_read(struct wconn *w)
{
    for (;;) {
        int r = wc_next(w);
        if (r != 0)
            return r > 0 ? 0 : -1;
        if (wc_fill(w) <= 0)
            return -1;
    }
}

static int call(struct wconn *w, bool echo)
{
    uint64_t want = w->rid;
    if (wc_flush(w) < 0)
        return COORD_ECLOSED;
    for (;;) {
        if (wc_read(w) < 0)
            return COORD_ECLOSED;
        uint64_t rid;
        if (wm_is_event(w) || !wm_uint(w, "rid", &rid) || rid != want)
            continue;
        int st = wm_status(w);
        return echo ? 0 : st;
    }
}

int wc_call(struct wconn *w)
{
    return call(w, false);
}

int wc_call_echo(struct wconn *w)
{
    return call(w, true);
}

void lock_name(char *out, size_t size, const char *tag, unsigned n)
{
    snprintf(out, size, "bench/%.2s-%06u", tag, n % 1000000u);
}

bool wm_uint(const struct wconn *w, const char *key, uint64_t *v)
{
    const msgpack_object *o = coord_map_find(w->msg.map, key);
    if (!o || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return false;
    *v = o->via.u64;
    return true;
}

bool wm_bool(const struct wconn *w, const char *key, bool *v)
{
    const msgpack_object *o = coord_map_find(w->msg.map, key);
    if (!o || o->type != MSGPACK_OBJECT_BOOLEAN)
        return false;
    *v = o->via.boolean;
    return true;
}

bool wm_str(const struct wconn *w, const char *key, const uint8_t **p, size_t *n)
{
    const msgpack_object *o = coord_map_find(w->msg.map, key);
    if (!o)
        return false;
    if (o->type == MSGPACK_OBJECT_STR) {
        *p = (const uint8_t *)o->via.str.ptr;
        *n = o->via.str.size;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_BIN) {
        *p = (const uint8_t *)o->via.bin.ptr;
        *n = o->via.bin.size;
        return true;
    }
    return false;
}

bool wm_is(const struct wconn *w, const char *key, const char *s)
{
    const uint8_t *p;
    size_t n;
    return wm_str(w, key, &p, &n) && n == strlen(s) && (n == 0 || memcmp(p, s, n) == 0);
}

bool wm_is_event(const struct wconn *w)
{
    return coord_map_find(w->msg.map, "ev") != NULL;
}

int code_from_wire(const uint8_t *p, size_t n)
{
    return coord_code_from_name((const char *)p, n);
}

const char *code_name(int code)
{
    const char *s = coord_code_name(code);
    return s ? s : coord_code_text(code);
}

int wm_status(const struct wconn *w)
{
    bool ok = false;
    if (wm_bool(w, "ok", &ok) && ok)
        return 0;
    const uint8_t *p;
    size_t n;
    if (!wm_str(w, "code", &p, &n))
        return COORD_EPROTOCOL;
    return code_from_wire(p, n);
}

/* A typical acquire: what libcoord sends for coord_lock-like calls. */
uint64_t wq_acquire(struct wconn *w, const char *name, bool if_available)
{
    coord_enc e;
    uint64_t rid = wq_begin(w, &e, "lock.acquire");
    coord_enc_kv_cstr(&e, "name", name);
    coord_enc_kv_cstr(&e, "mode", "exclusive");
    if (if_available)
        coord_enc_kv_bool(&e, "if_available", true);
    wq_end(&e);
    return rid;
}

uint64_t wq_release(struct wconn *w, uint64_t lock)
{
    coord_enc e;
    uint64_t rid = wq_begin(w, &e, "lock.release");
    coord_enc_kv_uint(&e, "lock", lock);
    wq_end(&e);
    return rid;
}

uint64_t wq_ping(struct wconn *w)
{
    coord_enc e;
    uint64_t rid = wq_begin(w, &e, "ping");
    wq_end(&e);
    return rid;
}
