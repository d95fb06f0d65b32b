/* sc-many.c - many-clients: 16 and 64 connections, each with one request
 * in flight (no pipelining), driven by a few client threads that poll their
 * connections with epoll.  The same threads and code drive the raw echo
 * connections (acquire-sized frames echoed) and the broker connections
 * (acquire/release alternating on each connection's own name; ping as
 * extra information).  Throughput is completed round trips per second. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "bench.h"


struct mc_thr {
    pthread_t th;
    struct wconn *conns;
    int n;
    enum mc_mode mode;
    _Atomic int *stop;
    _Atomic uint64_t done;
    int err;
    char pad[64];
};

static int mc_send(struct wconn *c, enum mc_mode mode)
{
    switch (mode) {
    case MC_RAW:
        c->expect = wq_acquire(c, c->name, false);
        break;
    case MC_LOCK:
        c->expect = c->holding ? wq_release(c, c->lock) : wq_acquire(c, c->name, false);
        break;
    case MC_PING:
        c->expect = wq_ping(c);
        break;
    case MC_REDIS:
        if (c->holding)
            rs_release(c);
        else
            rs_acquire(c);
        c->expect = 1;
        break;
    }
    return wc_flush(c);
}

/* The frame in c->msg: 1 it was the awaited reply, 0 something else, <0
 * an error. */
static int mc_handle(struct wconn *c, enum mc_mode mode)
{
    uint64_t rid;
    if (wm_is_event(c) || !wm_uint(c, "rid", &rid) || rid != c->expect)
        return 0;
    c->expect = 0;
    int st = wm_status(c);
    if (mode == MC_RAW)
        return 1;
    if (st != 0)
        return st;
    if (mode == MC_LOCK) {
        if (c->holding) {
            c->holding = false;
        } else {
            if (!wm_uint(c, "lock", &c->lock))
                return COORD_EPROTOCOL;
            c->holding = true;
        }
    }
    return 1;
}

/* A Redis reply on c: 1 the cycle's step done, <0 an error. */
static int rs_handle(struct wconn *c, const struct rs_reply *r)
{
    c->expect = 0;
    if (!c->holding && r->type == '+') {
        c->holding = true;
        return 1;
    }
    if (c->holding && r->type == ':' && r->num == 1) {
        c->holding = false;
        return 1;
    }
    return COORD_EPROTOCOL;
}

/* The next frame or reply on c, handled: 1 the awaited one, 0 none
 * (complete) or another, <0 an error; *got: whether one was taken. */
static int mc_take(struct wconn *c, enum mc_mode mode, bool *got)
{
    if (mode == MC_REDIS) {
        struct rs_reply r;
        int k = rs_next(c, &r);
        *got = k == 1;
        return k < 0 ? COORD_EPROTOCOL : k == 0 ? 0 : rs_handle(c, &r);
    }
    int f = wc_next(c);
    *got = f == 1;
    return f < 0 ? COORD_EPROTOCOL : f == 0 ? 0 : mc_handle(c, mode);
}

static void *mc_main(void *arg)
{
    struct mc_thr *t = arg;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) {
        t->err = COORD_ESYS;
        return NULL;
    }
    for (int j = 0; j < t->n; j++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)j };
        if (epoll_ctl(ep, EPOLL_CTL_ADD, t->conns[j].fd, &ev) < 0 ||
            mc_send(&t->conns[j], t->mode) < 0) {
            t->err = COORD_ECLOSED;
            goto out;
        }
    }
    struct epoll_event evs[64];
    uint64_t local = 0;
    while (!atomic_load_explicit(t->stop, memory_order_relaxed)) {
        int n = epoll_wait(ep, evs, 64, 50);
        if (n < 0 && errno != EINTR) {
            t->err = COORD_ESYS;
            break;
        }
        for (int i = 0; i < n; i++) {
            struct wconn *c = &t->conns[evs[i].data.u32];
            if (wc_fill(c) <= 0) {
                t->err = COORD_ECLOSED;
                goto out;
            }
            bool got = true;
            while (got) {
                int h = mc_take(c, t->mode, &got);
                if (h < 0) {
                    t->err = h;
                    goto out;
                }
                if (h == 1) {
                    atomic_store_explicit(&t->done, ++local, memory_order_relaxed);
                    if (!atomic_load_explicit(t->stop, memory_order_relaxed) &&
                        mc_send(c, t->mode) < 0) {
                        t->err = COORD_ECLOSED;
                        goto out;
                    }
                }
            }
        }
    }
out:
    /* settle: every connection ends with no request in flight */
    for (int j = 0; j < t->n && !t->err; j++) {
        struct wconn *c = &t->conns[j];
        while (c->expect && !t->err) {
            bool got;
            int h = mc_take(c, t->mode, &got);
            if (h < 0)
                t->err = h;
            else if (h == 1)
                break;
            else if (!got && wc_fill(c) <= 0)
                t->err = COORD_ECLOSED;
        }
    }
    close(ep);
    return NULL;
}

static uint64_t mc_sum(struct mc_thr *t, int n)
{
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += atomic_load_explicit(&t[i].done, memory_order_relaxed);
    return s;
}

/* Round trips per second over dur_ms, after warm_ms. */
double mc_run(struct bench *b, struct wconn *conns, int n, enum mc_mode mode,
                     unsigned warm_ms, unsigned dur_ms, pid_t server, double *cpu,
                     int *err)
{
    int nt = b->threads < n ? b->threads : n;
    struct mc_thr *t = calloc((size_t)nt, sizeof *t);
    _Atomic int stop = 0;
    if (!t) {
        *err = COORD_ENOMEM;
        return -1;
    }
    int base = 0;
    for (int i = 0; i < nt; i++) {
        int k = n / nt + (i < n % nt);
        t[i].conns = conns + base;
        t[i].n = k;
        t[i].mode = mode;
        t[i].stop = &stop;
        base += k;
        pthread_create(&t[i].th, NULL, mc_main, &t[i]);
    }
    sleep_ms(warm_ms);
    uint64_t c0 = server ? cpu_ns(server) : 0;
    uint64_t s0 = mc_sum(t, nt), t0 = now_ns();
    sleep_ms(dur_ms);
    uint64_t s1 = mc_sum(t, nt), t1 = now_ns();
    uint64_t c1 = server ? cpu_ns(server) : 0;
    if (cpu)
        *cpu = s1 > s0 && c1 > c0 ? (double)(c1 - c0) / (double)(s1 - s0) : 0;
    atomic_store(&stop, 1);
    double rate = -1;
    for (int i = 0; i < nt; i++) {
        pthread_join(t[i].th, NULL);
        if (t[i].err)
            *err = t[i].err;
    }
    if (!*err)
        rate = (double)(s1 - s0) / ((double)(t1 - t0) / 1e9);
    free(t);
    return rate;
}

static int open_conns(struct bench *b, struct wconn *c, int n, bool broker,
                      unsigned tagbase, int *err)
{
    for (int i = 0; i < n; i++) {
        int rc = broker ? wc_dial(&c[i], b->socket_path) : wc_connect(&c[i], b->echo_path);
        if (rc != 0) {
            *err = broker ? rc : COORD_ECONNECT;
            return -1;
        }
        lock_name(c[i].name, sizeof c[i].name, "mc", tagbase + (unsigned)i);
    }
    return 0;
}

static void close_conns(struct wconn *c, int n)
{
    for (int i = 0; i < n; i++)
        wc_close(&c[i]);
}

void sc_many_clients(struct bench *b, struct result *r)
{
    static const int counts[] = { 16, 64 };
    unsigned rounds = b->quick ? 3 : 7;
    unsigned warm = 100;
    unsigned dur = scaled(b, b->quick ? 300 : 500, 100);
    bool ping = !b->quick;
    res_title(r, "broker requests/s (acquire/release alternating, 1 in flight per "
              "connection) vs raw echo round trips/s; %d client threads; ratio: median of "
              "%u rounds of %.1f s each",
              b->threads, rounds, dur / 1000.0);
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
        int n = counts[ci];
        struct wconn *raw = calloc((size_t)n, sizeof *raw);
        struct wconn *br = calloc((size_t)n, sizeof *br);
        double rr[16], lr[16], pr[16], rc_[16], lc_[16], ratio[16], pratio[16];
        pid_t bpid = b->broker_pid, epid = echo_pid(b->echo);
        int err = 0;
        if (!raw || !br) {
            res_error(r, "out of memory");
            free(raw);
            free(br);
            return;
        }
        for (int i = 0; i < n; i++) {
            wc_open(&raw[i]);
            wc_open(&br[i]);
        }
        if (open_conns(b, raw, n, false, 0, &err) < 0 ||
            open_conns(b, br, n, true, ++b->seq * 1000u, &err) < 0)
            goto fail;
        for (unsigned k = 0; k < rounds; k++) {
            /* alternate which side goes first, so a drift hits both */
            if (k % 2 == 0) {
                rr[k] = mc_run(b, raw, n, MC_RAW, warm, dur, epid, &rc_[k], &err);
                if (err)
                    goto fail;
            }
            lr[k] = mc_run(b, br, n, MC_LOCK, warm, dur, bpid, &lc_[k], &err);
            if (err)
                goto fail;
            if (k % 2 == 1) {
                rr[k] = mc_run(b, raw, n, MC_RAW, warm, dur, epid, &rc_[k], &err);
                if (err)
                    goto fail;
            }
            ratio[k] = lr[k] / rr[k];
            if (ping) {
                pr[k] = mc_run(b, br, n, MC_PING, warm, dur, 0, NULL, &err);
                if (err)
                    goto fail;
                pratio[k] = pr[k] / rr[k];
            }
            vlog(b, "many-clients %d: raw %.0f/s lock %.0f/s ping %.0f/s", n, rr[k],
                 lr[k], ping ? pr[k] : 0.0);
        }
        /* the figure: the median of the per-round ratios (each round's two
         * runs are back to back, so they saw the same neighbours) */
        double rmed = median3(rr, rounds), lmed = median3(lr, rounds);
        double rat = median3(ratio, rounds);
        char key[48], what[96], bwhat[64];
        snprintf(key, sizeof key, "%d clients", n);
        snprintf(what, sizeof what, "%d clients: acquire/release requests/s", n);
        snprintf(bwhat, sizeof bwhat, "%d clients: echo round trips/s", n);
        struct figure *fg = res_ratio(r, key, what, lmed, bwhat, rmed, "/s", false,
                                      CMP_GE, 0.9);
        if (fg) {
            fg->value = rat;
            fg->verdict = rat >= 0.9 ? V_PASS : V_MISS;
        }
        if (bpid && epid) {
            snprintf(key, sizeof key, "%d clients: broker CPU per request", n);
            res_info(r, key, median3(lc_, rounds) / 1000.0, "us");
            snprintf(key, sizeof key, "%d clients: echo CPU per round trip", n);
            res_info(r, key, median3(rc_, rounds) / 1000.0, "us");
        }
        if (ping) {
            double pmed = median3(pr, rounds);
            snprintf(key, sizeof key, "%d clients, ping", n);
            snprintf(what, sizeof what, "%d clients: ping requests/s", n);
            fg = res_ratio(r, key, what, pmed, bwhat, rmed, "/s", false, CMP_NONE, 0);
            if (fg)
                fg->value = median3(pratio, rounds);
        }
        close_conns(raw, n);
        close_conns(br, n);
        free(raw);
        free(br);
        continue;
fail:
        res_error(r, "%d clients: %s", n, err == COORD_ECONNECT ? strerror(errno) : code_name(err));
        close_conns(raw, n);
        close_conns(br, n);
        free(raw);
        free(br);
        return;
    }
}
