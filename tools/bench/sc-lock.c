/* sc-lock.c - lock-cycle (1 client, acquire+release vs one raw round
 * trip) and handoff (release -> next waiter's grant vs raw round trip).
 *
 * Baseline and broker samples are taken in alternating rounds so that a
 * noisy neighbour slows both sides alike. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "bench.h"

int broker_has_op(struct bench *b, const char *op)
{
    struct wconn w;
    wc_open(&w);
    int res = -1;
    if (wc_dial(&w, b->socket_path) == 0) {
        coord_enc e;
        wq_begin(&w, &e, op);   /* no fields: a known op says BAD_REQUEST */
        wq_end(&e);
        int rc = wc_call(&w);
        if (rc == COORD_EUNKNOWN_OP)
            res = 0;
        else if (rc != COORD_ECLOSED && rc != COORD_EPROTOCOL)
            res = 1;
    }
    wc_close(&w);
    return res;
}

/* The raw round trip: the client encodes the same acquire frame it would
 * send to the broker, writes it, reads the echo and parses it. */
int raw_round_trips(struct bench *b, struct wconn *w, double *out, size_t n)
{
    (void)b;
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        wq_acquire(w, w->name, false);
        if (wc_call_echo(w) != 0)
            return -1;
        uint64_t t1 = now_ns();
        if (out)
            out[i] = (double)(t1 - t0);
    }
    return 0;
}

/* n acquire+release cycles; total[i], acq[i], rel[i] in ns (may be NULL). */
int lock_cycles(struct wconn *w, double *total, double *acq, double *rel,
                       size_t n, int *err)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        wq_acquire(w, w->name, false);
        int rc = wc_call(w);
        uint64_t lock = 0;
        if (rc != 0 || !wm_uint(w, "lock", &lock)) {
            *err = rc ? rc : COORD_EPROTOCOL;
            return -1;
        }
        uint64_t t1 = now_ns();
        wq_release(w, lock);
        rc = wc_call(w);
        if (rc != 0) {
            *err = rc;
            return -1;
        }
        uint64_t t2 = now_ns();
        if (total)
            total[i] = (double)(t2 - t0);
        if (acq)
            acq[i] = (double)(t1 - t0);
        if (rel)
            rel[i] = (double)(t2 - t1);
    }
    return 0;
}

/* The same cycles while another connection holds a lock with a lease: a
 * broker always has some timeout pending in real use (a lease, a leader's
 * term), and how it waits for one must not tax every request. */
static void leased_cycles(struct bench *b, struct result *r, struct wconn *br, double *bs,
                          size_t per, double r50)
{
    struct wconn hold;
    wc_open(&hold);
    int err = 0;
    if (wc_dial(&hold, b->socket_path) == 0) {
        coord_enc e;
        wq_begin(&hold, &e, "lock.acquire");
        coord_enc_kv_cstr(&e, "name", "lc-leased");
        coord_enc_kv_cstr(&e, "mode", "exclusive");
        coord_enc_kv_uint(&e, "lease_ms", 600000);
        wq_end(&e);
        if (wc_call(&hold) == 0 && lock_cycles(br, NULL, NULL, NULL, per / 4 + 10, &err) == 0 &&
            lock_cycles(br, bs, NULL, NULL, per, &err) == 0) {
            double b50 = percentile(bs, per, 50);
            res_info(r, "the same, a lease held elsewhere", ns_to_us(b50), "us");
            res_info(r, "p50 ratio, one CPU, a lease held elsewhere", b50 / r50, "x");
        }
    }
    wc_close(&hold);
}

/* Where the scheduler put things decides a small round trip on a VM: a
 * wake-up on a CPU that sleeps costs a hypervisor exit.  So the default
 * (unpinned) run also says how often the client shared a CPU with the
 * echo server and with the broker, and two placements are measured alike
 * for both (the client, the echo server and the broker pinned for them,
 * then unpinned): all on the client's CPU, and servers on the other one. */
static void placed_ratios(struct bench *b, struct result *r, struct wconn *raw,
                          struct wconn *br, pid_t bpid, pid_t epid, size_t per)
{
    int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (ncpu < 2 || !b->broker_pid || epid <= 0)
        return;              /* a broker that is not ours is not pinned */
    double *rs = calloc(per, sizeof *rs), *bs = calloc(per, sizeof *bs);
    double *as = calloc(per, sizeof *as), *ls = calloc(per, sizeof *ls);
    cpu_set_t self_mask, broker_mask, echo_mask;
    int err = 0;
    if (!rs || !bs || !as || !ls || pin(0, 0, &self_mask) < 0)
        goto out;
    if (pin(bpid, 0, &broker_mask) < 0 || pin(epid, 0, &echo_mask) < 0)
        goto restore;
    static const char *names[2][2] = {
        { "raw p50, all on one CPU", "acquire+release p50, all on one CPU" },
        { "raw p50, echo on the other CPU",
          "acquire+release p50, broker on other CPU" },
    };
    for (int other = 0; other < 2; other++) {
        if (other && (pin(bpid, 1, NULL) < 0 || pin(epid, 1, NULL) < 0))
            break;
        /* settle on the new CPUs, then alternate as the main rounds do */
        if (raw_round_trips(b, raw, NULL, per / 4 + 10) < 0 ||
            lock_cycles(br, NULL, NULL, NULL, per / 4 + 10, &err) < 0 ||
            raw_round_trips(b, raw, rs, per) < 0 ||
            lock_cycles(br, bs, as, ls, per, &err) < 0)
            break;
        double r50 = percentile(rs, per, 50), b50 = percentile(bs, per, 50);
        res_info(r, names[other][0], ns_to_us(r50), "us");
        res_info(r, names[other][1], ns_to_us(b50), "us");
        res_info(r, other ? "p50 ratio, servers on the other CPU" : "p50 ratio, all on one CPU",
                 b50 / r50, "x");
        if (!other)
            leased_cycles(b, r, br, bs, per, r50);
    }
    sched_setaffinity(bpid, sizeof broker_mask, &broker_mask);
    sched_setaffinity(epid, sizeof echo_mask, &echo_mask);
restore:
    sched_setaffinity(0, sizeof self_mask, &self_mask);
out:
    free(rs);
    free(bs);
    free(as);
    free(ls);
}

void sc_lock_cycle(struct bench *b, struct result *r)
{
    unsigned rounds = b->quick ? 4 : 16;
    size_t per = scaled(b, b->quick ? 1000 : 2500, 50);
    size_t warm = per / 4 + 50;
    size_t total = rounds * per;
    res_title(r, "1 client; p50 of acquire+release vs p50 of one raw round trip "
              "(frame %zu B, %u x %zu samples each)", b->frame_size, rounds, per);

    struct wconn raw, br;
    wc_open(&raw);
    wc_open(&br);
    double *rs = calloc(total, sizeof *rs), *bs = calloc(total, sizeof *bs);
    double *as = calloc(total, sizeof *as), *ls = calloc(total, sizeof *ls);
    double *ps = calloc(per, sizeof *ps);
    int rc, err = 0;
    if (!rs || !bs || !as || !ls || !ps) {
        res_error(r, "out of memory");
        goto out;
    }
    if ((rc = wc_connect(&raw, b->echo_path)) < 0) {
        res_error(r, "echo server: %s", strerror(-rc));
        goto out;
    }
    if ((rc = wc_dial(&br, b->socket_path)) != 0) {
        res_error(r, "broker: %s", rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
        goto out;
    }
    lock_name(raw.name, sizeof raw.name, "lc", 1);
    lock_name(br.name, sizeof br.name, "lc", 1);

    if (raw_round_trips(b, &raw, NULL, warm) < 0 ||
        lock_cycles(&br, NULL, NULL, NULL, warm, &err) < 0)
        goto fail;
    pid_t bpid = b->broker_pid ? b->broker_pid : peer_pid(br.fd);
    pid_t epid = echo_pid(b->echo);
    uint64_t bcpu = 0, ecpu = 0;
    unsigned raw_shared = 0, broker_shared = 0;
    for (unsigned k = 0; k < rounds; k++) {
        uint64_t c0 = cpu_ns(epid);
        if (raw_round_trips(b, &raw, rs + k * per, per) < 0)
            goto fail;
        raw_shared += epid > 0 && last_cpu(epid) == sched_getcpu();
        uint64_t c1 = cpu_ns(epid), c2 = cpu_ns(bpid);
        if (lock_cycles(&br, bs + k * per, as + k * per, ls + k * per, per, &err) < 0)
            goto fail;
        broker_shared += bpid > 0 && last_cpu(bpid) == sched_getcpu();
        bcpu += cpu_ns(bpid) - c2;
        ecpu += c1 - c0;
    }
    /* ping: the floor of any request (dispatch, no table) */
    for (size_t i = 0; i < per; i++) {
        uint64_t t0 = now_ns();
        wq_ping(&br);
        if ((err = wc_call(&br)) != 0)
            goto fail;
        ps[i] = (double)(now_ns() - t0);
    }
    double r50 = percentile(rs, total, 50), r99 = percentile(rs, total, 99);
    double b50 = percentile(bs, total, 50), b99 = percentile(bs, total, 99);
    double a50 = percentile(as, total, 50), l50 = percentile(ls, total, 50);
    res_ratio(r, "p50 ratio", "acquire+release p50", ns_to_us(b50),
              "round trip p50", ns_to_us(r50), "us", false, CMP_LE, 2.1);
    res_info(r, "acquire p50", ns_to_us(a50), "us");
    res_info(r, "release p50", ns_to_us(l50), "us");
    res_info(r, "acquire+release p99", ns_to_us(b99), "us");
    res_info(r, "raw round trip p99", ns_to_us(r99), "us");
    res_info(r, "p99 ratio", b99 / r99, "x");
    res_info(r, "ping p50", ns_to_us(percentile(ps, per, 50)), "us");
    if (bpid > 0 && bcpu)
        res_info(r, "broker CPU per request", bcpu / 2.0 / total / 1000.0, "us");
    if (epid > 0 && ecpu)
        res_info(r, "echo server CPU per round trip", ecpu / (double)total / 1000.0, "us");
    if (epid > 0 && bpid > 0) {
        res_info(r, "rounds echo shared the client's CPU", raw_shared, "");
        res_info(r, "rounds broker shared the client's CPU", broker_shared, "");
        placed_ratios(b, r, &raw, &br, bpid, epid, per);
    }
    goto out;
fail:
    res_error(r, "%s", err ? code_name(err) : "connection failed");
out:
    free(rs);
    free(bs);
    free(as);
    free(ls);
    free(ps);
    wc_close(&raw);
    wc_close(&br);
}

/* ---- handoff ---- */

#define HO_SKIP 64   /* even: both threads keep their holder/waiter parity */

struct ho {
    struct wconn c[2];
    sem_t queued;                 /* the waiter's acquire is in the queue */
    _Atomic uint64_t t_release;   /* when the holder sent its release */
    double *samples;
    _Atomic size_t n;
    double *rel;                  /* the holder's release round trips */
    _Atomic size_t nrel;
    size_t cap;
    unsigned phases;              /* holder+waiter phases per thread */
    _Atomic int err;
    int idx;
};

struct ho_arg {
    struct ho *h;
    int i;
};

static void ho_fail(struct ho *h, int err)
{
    int zero = 0;
    if (!atomic_compare_exchange_strong(&h->err, &zero, err))
        return;
    shutdown(h->c[0].fd, SHUT_RDWR);
    shutdown(h->c[1].fd, SHUT_RDWR);
    sem_post(&h->queued);
    sem_post(&h->queued);
}

static void *ho_thread(void *arg)
{
    struct ho_arg *a = arg;
    struct ho *h = a->h;
    struct wconn *w = &h->c[a->i];
    bool holder = a->i == 0;             /* thread 0 starts holding */
    for (unsigned k = 0; k < h->phases && !atomic_load(&h->err); k++) {
        if (holder) {
            while (sem_wait(&h->queued) < 0 && errno == EINTR)
                ;
            if (atomic_load(&h->err))
                break;
            uint64_t t0 = now_ns();
            atomic_store(&h->t_release, t0);
            wq_release(w, w->lock);
            int rc = wc_call(w);
            if (rc != 0) {
                ho_fail(h, rc);
                break;
            }
            size_t i = atomic_fetch_add(&h->nrel, 1);
            if (i >= HO_SKIP && i - HO_SKIP < h->cap)
                h->rel[i - HO_SKIP] = (double)(now_ns() - t0);
            holder = false;
            continue;
        }
        uint64_t acq = wq_acquire(w, w->name, false);
        uint64_t ping = wq_ping(w);
        if (wc_flush(w) < 0) {
            ho_fail(h, COORD_ECLOSED);
            break;
        }
        bool queued = false, granted = false;
        while (!granted) {
            if (wc_read(w) < 0) {
                ho_fail(h, COORD_ECLOSED);
                return NULL;
            }
            uint64_t now = now_ns(), rid;
            if (wm_is_event(w) || !wm_uint(w, "rid", &rid))
                continue;
            if (rid == ping) {
                queued = true;
                sem_post(&h->queued);    /* the holder may release now */
            } else if (rid == acq) {
                uint64_t lock;
                if (!queued || wm_status(w) != 0 || !wm_uint(w, "lock", &lock)) {
                    /* granted before our ping: the holder had not waited */
                    ho_fail(h, queued ? wm_status(w) : COORD_EPROTOCOL);
                    return NULL;
                }
                w->lock = lock;
                granted = true;
                /* the first handoffs of a round run on fresh threads and
                 * connections: they measure our set-up, not the broker */
                size_t i = atomic_fetch_add(&h->n, 1);
                if (i >= HO_SKIP && i - HO_SKIP < h->cap)
                    h->samples[i - HO_SKIP] = (double)(now - atomic_load(&h->t_release));
            }
        }
        holder = true;
    }
    return NULL;
}

/* The same handoffs driven by one thread (diagnostic): the waiter's
 * acquire is queued (its ping answered), then the holder's release is sent
 * and the waiter's socket read.  No wake-up of a second client thread. */
static int handoff_one_thread(struct bench *b, const char *name, unsigned n,
                              double *out, int *err)
{
    struct wconn c[2];
    int rc = 0;
    wc_open(&c[0]);
    wc_open(&c[1]);
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = wc_dial(&c[i], b->socket_path);
    if (rc == 0) {
        wq_acquire(&c[0], name, false);
        rc = wc_call(&c[0]);
        wm_uint(&c[0], "lock", &c[0].lock);
    }
    for (unsigned k = 0; rc == 0 && k < n + HO_SKIP; k++) {
        struct wconn *h = &c[k % 2], *w = &c[1 - k % 2];
        uint64_t acq = wq_acquire(w, name, false);
        wq_ping(w);
        if ((rc = wc_call(w)) != 0)        /* the ping's reply: queued */
            break;
        uint64_t t0 = now_ns();
        uint64_t rel = wq_release(h, h->lock);
        if (wc_flush(h) < 0) {
            rc = COORD_ECLOSED;
            break;
        }
        uint64_t rid = 0;
        while (rc == 0 && rid != acq) {
            if (wc_read(w) < 0)
                rc = COORD_ECLOSED;
            else if (!wm_is_event(w))
                wm_uint(w, "rid", &rid);
        }
        uint64_t t1 = now_ns();
        if (rc || (rc = wm_status(w)) != 0 || !wm_uint(w, "lock", &w->lock)) {
            rc = rc ? rc : COORD_EPROTOCOL;
            break;
        }
        if (k >= HO_SKIP)
            out[k - HO_SKIP] = (double)(t1 - t0);
        h->rid = rel;
        for (rid = 0; rc == 0 && rid != rel;) {
            if (wc_read(h) < 0)
                rc = COORD_ECLOSED;
            else if (!wm_is_event(h))
                wm_uint(h, "rid", &rid);
        }
    }
    wc_close(&c[0]);
    wc_close(&c[1]);
    if (rc)
        *err = rc;
    return rc ? -1 : 0;
}

/* One round: 2 * pairs handoffs; samples appended to out. */
static int handoff_round(struct bench *b, const char *name, unsigned pairs,
                         double *out, double *rel, size_t *nout, int *err)
{
    struct ho h;
    memset(&h, 0, sizeof h);
    h.samples = out;
    h.rel = rel;
    h.cap = 2 * (size_t)pairs;
    h.phases = 2 * pairs + HO_SKIP;
    int rc = 0;
    wc_open(&h.c[0]);
    wc_open(&h.c[1]);
    sem_init(&h.queued, 0, 0);
    for (int i = 0; i < 2; i++) {
        rc = wc_dial(&h.c[i], b->socket_path);
        if (rc != 0)
            goto out;
        snprintf(h.c[i].name, sizeof h.c[i].name, "%s", name);
    }
    /* thread 0 starts as the holder */
    wq_acquire(&h.c[0], name, false);
    if ((rc = wc_call(&h.c[0])) != 0)
        goto out;
    wm_uint(&h.c[0], "lock", &h.c[0].lock);
    pthread_t th[2];
    struct ho_arg args[2] = { { &h, 0 }, { &h, 1 } };
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, ho_thread, &args[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    rc = atomic_load(&h.err);
    size_t n = atomic_load(&h.n);
    n = n > HO_SKIP ? n - HO_SKIP : 0;
    *nout = n < h.cap ? n : h.cap;
out:
    if (rc != 0)
        *err = rc;
    sem_destroy(&h.queued);
    wc_close(&h.c[0]);
    wc_close(&h.c[1]);
    return rc ? -1 : 0;
}

void sc_handoff(struct bench *b, struct result *r)
{
    unsigned rounds = b->quick ? 4 : 12;
    unsigned pairs = scaled(b, b->quick ? 400 : 750, 20);
    size_t per_raw = 2 * (size_t)pairs;
    res_title(r, "2 clients ping-pong a lock; release sent -> waiter's grant "
              "received, p99, vs raw round trip p99 (%u x %u handoffs)",
              rounds, 2 * pairs);
    double *raw = calloc(rounds * per_raw, sizeof *raw);
    double *ho = calloc(rounds * per_raw, sizeof *ho);
    double *rel = calloc(rounds * per_raw, sizeof *rel);
    struct wconn w;
    wc_open(&w);
    int err = 0, rc;
    size_t nho = 0;
    char name[32];
    if (!raw || !ho || !rel) {
        res_error(r, "out of memory");
        goto out;
    }
    if ((rc = wc_connect(&w, b->echo_path)) < 0) {
        res_error(r, "echo server: %s", strerror(-rc));
        goto out;
    }
    lock_name(w.name, sizeof w.name, "ho", 1);
    lock_name(name, sizeof name, "ho", 1);
    size_t got;
    if (raw_round_trips(b, &w, NULL, per_raw / 4 + 50) < 0 ||
        handoff_round(b, name, pairs / 4 + 10, ho, rel, &got, &err) < 0)
        goto fail;
    for (unsigned k = 0; k < rounds; k++) {
        if (raw_round_trips(b, &w, raw + k * per_raw, per_raw) < 0 ||
            handoff_round(b, name, pairs, ho + nho, rel + nho, &got, &err) < 0)
            goto fail;
        if (b->verbose) {
            double *tmp = malloc(got * sizeof *tmp);
            if (tmp) {
                memcpy(tmp, ho + nho, got * sizeof *tmp);
                vlog(b, "handoff round %u: p50 %.1f us", k, ns_to_us(percentile(tmp, got, 50)));
                free(tmp);
            }
        }
        nho += got;
    }
    size_t nraw = rounds * per_raw;
    double h50 = percentile(ho, nho, 50), h99 = percentile(ho, nho, 99);
    double r50 = percentile(raw, nraw, 50), r99 = percentile(raw, nraw, 99);
    res_ratio(r, "p99 ratio", "release -> grant p99", ns_to_us(h99),
              "round trip p99", ns_to_us(r99), "us", false, CMP_LE, 2.0);
    res_info(r, "release -> grant p50", ns_to_us(h50), "us");
    res_info(r, "raw round trip p50", ns_to_us(r50), "us");
    res_info(r, "p50 ratio", h50 / r50, "x");
    res_info(r, "holder's release round trip p50", ns_to_us(percentile(rel, nho, 50)), "us");
    /* the same handoff with one client thread: tells a slow wake-up of the
     * second client thread (scheduler, VM) from a slow broker */
    if (handoff_one_thread(b, name, 2 * pairs, rel, &err) == 0) {
        res_info(r, "release -> grant p50, 1 client thread",
                 ns_to_us(percentile(rel, 2 * pairs, 50)), "us");
        double p99 = percentile(rel, 2 * pairs, 99);
        res_info(r, "release -> grant p99, 1 client thread", ns_to_us(p99), "us");
        res_info(r, "p99 ratio, 1 client thread", p99 / r99, "x");
    }
    res_info(r, "handoffs measured", (double)nho, "");
    goto out;
fail:
    res_error(r, "%s", err ? code_name(err) : "echo connection failed");
out:
    free(raw);
    free(ho);
    free(rel);
    wc_close(&w);
}
