/* sc-more.c - durable-commits (leader.commit from 32 clients), durable-
 * records (flight.join + flight.complete with keep_ms from 32 clients:
 * completion records/s) and fanout (20 subscribers of one channel,
 * delivered messages/s).
 *
 * The durable figures are ratios to Redis with appendonly yes and
 * appendfsync always (what a user who needs an answered write to survive
 * would run instead): 32 clients SET (for records, SET .. PX keep_ms), one
 * in flight each, driven by the same epoll loop.  Redis answers a write
 * only after the fdatasync of its event-loop turn, one per turn: the same
 * group commit.  The ratio to write+fsync/s of a small file in the
 * broker's data dir stays as information. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "bench.h"

#define VALUE_SIZE 64

/* write+fsync of size bytes at offset 0 of a file in dir, for dur_ms. */
static double fsync_rate(const char *dir, size_t size, unsigned dur_ms, char *why,
                         size_t whysz)
{
    char path[512];
    snprintf(path, sizeof path, "%s/coord-bench-fsync", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, whysz, "%.200s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = calloc(1, size);
    uint64_t n = 0, t0 = now_ns(), end = t0 + (uint64_t)dur_ms * 1000000u, t;
    do {
        if (!buf || pwrite(fd, buf, size, 0) != (ssize_t)size || fsync(fd) < 0) {
            snprintf(why, whysz, "write+fsync %.200s: %s", path, strerror(errno));
            n = 0;
            break;
        }
        n++;
    } while (now_ns() < end);
    t = now_ns();
    free(buf);
    close(fd);
    unlink(path);
    return n ? (double)n / ((double)(t - t0) / 1e9) : -1;
}

/* fdatasync/s of k 4 KiB writes at distinct pages, no two adjacent, of a
 * preallocated 4 MiB file in dir (the shape of an LMDB commit: its pages
 * are rewritten where copy-on-write found them free, each its own write),
 * for dur_ms.  -1 with why set on an error. */
static double scatter_rate(const char *dir, unsigned k, unsigned dur_ms, char *why,
                           size_t whysz)
{
    enum { PAGE = 4096, PAGES = 1024 };
    char path[512];
    snprintf(path, sizeof path, "%s/coord-bench-scatter", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(why, whysz, "%.200s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = calloc(PAGES, PAGE);
    uint64_t n = 0, t0 = 0, t = 0;
    bool ok = buf && pwrite(fd, buf, (size_t)PAGES * PAGE, 0) == (ssize_t)PAGES * PAGE &&
              fsync(fd) == 0;
    if (ok) {
        unsigned seed = 12345, stride = PAGES / 2 / (k ? k : 1);
        t0 = now_ns();
        uint64_t end = t0 + (uint64_t)dur_ms * 1000000u;
        do {
            /* page 2 * (i * stride + r): even pages in k disjoint slots */
            for (unsigned i = 0; ok && i < k; i++) {
                seed = seed * 1103515245u + 12345u;
                off_t pg = 2 * ((off_t)i * stride + (seed >> 16) % (stride ? stride : 1));
                buf[0] = (char)n;
                ok = pwrite(fd, buf, PAGE, pg * PAGE) == PAGE;
            }
            ok = ok && fdatasync(fd) == 0;
            n++;
        } while (ok && now_ns() < end);
        t = now_ns();
    }
    if (!ok)
        snprintf(why, whysz, "scattered writes to %.200s: %s", path, strerror(errno));
    free(buf);
    close(fd);
    unlink(path);
    return ok && n ? (double)n / ((double)(t - t0) / 1e9) : -1;
}

/* n counters from one stats reply into out (-1: not there). */
static void stats_of(struct wconn *w, const char *const *keys, int n, double *out)
{
    coord_enc e;
    wq_begin(w, &e, "stats");
    wq_end(&e);
    bool ok = wc_call(w) == 0;
    for (int i = 0; i < n; i++) {
        uint64_t v;
        out[i] = ok && wm_uint(w, keys[i], &v) ? (double)v : -1;
    }
}

/* A counter from the broker's stats reply, or -1. */
static double stat_of(struct wconn *w, const char *key)
{
    double v;
    stats_of(w, &key, 1, &v);
    return v;
}

/* ---- requests kept in flight on many connections ----
 * A driver says what to send and what a reply means: send encodes the
 * next request of w into w->out; reply classifies the reply just parsed on
 * w (status: wm_status of it) as DRV_DONE (one unit of work, counted in
 * the rate), DRV_STEP (a step within a unit: the next request follows,
 * nothing counted) or a negative code (a failure: sending stops). */
enum { DRV_STEP = 0, DRV_DONE = 1 };

struct driver {
    void (*send)(void *ctx, struct wconn *w);
    int (*reply)(void *ctx, struct wconn *w, int status);
    void *ctx;
    bool resp;                 /* Redis: replies are RESP, status 0 for +OK */
    uint64_t done, failed;     /* replies so classified, over all windows */
    int last_err;
};

/* Keeps depth requests in flight on each of n connections for dur_ms,
 * then lets the ones in flight finish; *rate: units done per second of
 * the window. */
static int drive(struct driver *d, struct wconn *c, int n, int depth, unsigned dur_ms,
                 double *rate)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return COORD_ESYS;
    int rc = 0;
    long inflight = 0;
    for (int i = 0; i < n; i++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
        for (int k = 0; k < depth; k++)
            d->send(d->ctx, &c[i]);
        inflight += depth;
        if (wc_flush(&c[i]) < 0) {
            rc = COORD_ECLOSED;
            goto out;
        }
    }
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)dur_ms * 1000000u, t1 = 0;
    uint64_t done_at_end = 0, done0 = d->done;
    struct epoll_event evs[64];
    while (inflight > 0) {
        uint64_t now = now_ns();
        if (!t1 && now >= end) {
            t1 = now;
            done_at_end = d->done;
        }
        if (now > end + 30000000000ull) {
            rc = COORD_ETIMEOUT;
            goto out;
        }
        int k = epoll_wait(ep, evs, 64, 100);
        for (int j = 0; j < k; j++) {
            struct wconn *w = &c[evs[j].data.u32];
            if (wc_fill(w) <= 0) {
                rc = COORD_ECLOSED;
                goto out;
            }
            int f;
            struct rs_reply rr;
            while ((f = d->resp ? rs_next(w, &rr) : wc_next(w)) == 1) {
                uint64_t rid;
                if (!d->resp && (wm_is_event(w) || !wm_uint(w, "rid", &rid)))
                    continue;
                inflight--;
                int v = d->reply(d->ctx, w,
                                 d->resp ? (rr.type == '+' ? 0 : COORD_EPROTOCOL)
                                         : wm_status(w));
                if (v == DRV_DONE) {
                    d->done++;
                } else if (v < 0) {
                    d->failed++;
                    d->last_err = v;
                }
                if (!t1 && !d->failed) {
                    d->send(d->ctx, w);
                    inflight++;
                }
            }
            if (f < 0) {
                rc = COORD_EPROTOCOL;
                goto out;
            }
            if (wc_flush(w) < 0) {
                rc = COORD_ECLOSED;
                goto out;
            }
        }
    }
    if (!t1) {
        t1 = now_ns();
        done_at_end = d->done;
    }
    *rate = (double)(done_at_end - done0) / ((double)(t1 - t0) / 1e9);
out:
    close(ep);
    return rc;
}

/* ---- broker windows alternating with write+fsync windows ----
 * Storage here is shared and its speed drifts, so fsync and broker windows
 * alternate (fsync first in even pairs, second in odd ones) and the figure
 * is the median of the per-pair ratios. */

struct windows {
    unsigned pairs;
    double fr[16], br[16], ratio[16];  /* fsync/s, broker units/s, br/fr */
    bool redis;                        /* Redis windows too */
    double rr[16], rratio[16];         /* Redis SET/s, br/rr */
    double secs;                       /* spent in broker windows */
    double batches, jobs;              /* LMDB batches and jobs meanwhile; -1 unknown */
    /* the writer's time meanwhile (us): commits, extra flushes (and how
     * many), lingering; -1 unknown */
    double commit_us, flush_us, flushes, linger_us;
    double writes;                     /* the writer thread's write calls; -1 unknown */
};

static unsigned window_pairs(const struct bench *b)
{
    return b->quick ? 3 : 7;
}

static const char *fsync_dir(const struct bench *b)
{
    return b->data_dir[0] ? b->data_dir : b->tmpdir;
}

static const char *fsync_dir_name(const struct bench *b)
{
    return b->data_dir[0] ? "the data dir" : "our temp dir";
}

/* Redis's side: SET keys of its own, PX px_ms when px_ms, a value of
 * VALUE_SIZE bytes. */
struct redis_writer {
    char prefix[48];
    uint64_t next;
    unsigned px_ms;
};

static void send_redis_set(void *ctx, struct wconn *w)
{
    static const char value[VALUE_SIZE + 1] =
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    struct redis_writer *rw = ctx;
    char key[96], px[16];
    snprintf(key, sizeof key, "%s%llu", rw->prefix, (unsigned long long)++rw->next);
    snprintf(px, sizeof px, "%u", rw->px_ms);
    const char *argv[] = { "SET", key, value, "PX", px };
    rs_cmd(w, rw->px_ms ? 5 : 3, argv);
}

static int redis_set_reply(void *ctx, struct wconn *w, int st)
{
    (void)ctx;
    (void)w;
    return st ? st : DRV_DONE;
}

/* Runs the pairs of windows: the broker side is drive(d, c, n, depth);
 * with rd, Redis's is drive(rd, rc, n, 1) (n connections, one SET in flight
 * each); ctl (idle) reads the ledger counters.  fsize: the baseline's write
 * size.  0, or -1 with why set. */
static int run_windows(struct bench *b, const char *tag, struct driver *d, struct wconn *c,
                       int n, int depth, struct driver *rd, struct wconn *rc_, int rn,
                       struct wconn *ctl, size_t fsize, struct windows *wd, char *why,
                       size_t whysz)
{
    unsigned dur = scaled(b, b->quick ? 300 : 500, 100);
    unsigned fdur = scaled(b, b->quick ? 150 : 250, 50);
    const char *dir = fsync_dir(b);
    wd->pairs = window_pairs(b);
    wd->secs = 0;
    /* the ledger's counters, before and after the windows */
    enum { BATCHES, JOBS, COMMIT_US, FLUSH_US, FLUSHES, LINGER_US, NKEYS };
    static const char *const keys[NKEYS] = { "ledger_batches", "ledger_jobs",
                                             "ledger_commit_us", "ledger_flush_us",
                                             "ledger_flushes", "ledger_linger_us" };
    double c0[NKEYS], c1[NKEYS];
    stats_of(ctl, keys, NKEYS, c0);
    /* LMDB writes each page of a commit that is not next to another with
     * a call of its own, the meta page too: the writer thread's write
     * calls are the commits' separate writes */
    pid_t pid = b->broker_pid ? b->broker_pid : (pid_t)stat_of(ctl, "pid");
    double w0 = pid > 0 ? thread_syscw(pid, "coord-writer") : -1;
    wd->redis = rd != NULL;
    for (unsigned k = 0; k < wd->pairs; k++) {
        double rate = 0;
        if (k % 2 == 0)
            wd->fr[k] = fsync_rate(dir, fsize, fdur, why, whysz);
        if (k % 2 == 0 && rd) {
            int rc = drive(rd, rc_, rn, 1, dur, &wd->rr[k]);
            if (rc == 0 && rd->failed)
                rc = rd->last_err;
            if (rc != 0) {
                snprintf(why, whysz, "Redis: %s", code_name(rc));
                return -1;
            }
        }
        uint64_t t0 = now_ns();
        int rc = drive(d, c, n, depth, dur, &rate);
        wd->secs += (double)(now_ns() - t0) / 1e9;
        if (rc == 0 && d->failed)
            rc = d->last_err;
        if (rc != 0) {
            snprintf(why, whysz, "%s", code_name(rc));
            return -1;
        }
        if (k % 2 == 1 && rd) {
            rc = drive(rd, rc_, rn, 1, dur, &wd->rr[k]);
            if (rc == 0 && rd->failed)
                rc = rd->last_err;
            if (rc != 0) {
                snprintf(why, whysz, "Redis: %s", code_name(rc));
                return -1;
            }
        }
        if (k % 2 == 1)
            wd->fr[k] = fsync_rate(dir, fsize, fdur, why, whysz);
        if (wd->fr[k] < 0) {
            char w2[256];
            snprintf(w2, sizeof w2, "%s", why);
            snprintf(why, whysz, "fsync baseline: %s", w2);
            return -1;
        }
        wd->br[k] = rate;
        wd->ratio[k] = rate / wd->fr[k];
        wd->rratio[k] = rd ? rate / wd->rr[k] : 0;
        vlog(b, "%s: %.0f/s, %.0f fsyncs/s, Redis %.0f/s", tag, wd->br[k], wd->fr[k],
             rd ? wd->rr[k] : 0.0);
    }
    stats_of(ctl, keys, NKEYS, c1);
    double w1 = w0 >= 0 ? thread_syscw(pid, "coord-writer") : -1;
    wd->writes = w0 >= 0 && w1 >= w0 ? w1 - w0 : -1;
    double dv[NKEYS];
    for (int i = 0; i < NKEYS; i++)
        dv[i] = c0[i] >= 0 && c1[i] >= c0[i] ? c1[i] - c0[i] : -1;
    bool known = dv[BATCHES] >= 0 && dv[JOBS] >= 0;
    wd->batches = known ? dv[BATCHES] : -1;
    wd->jobs = known ? dv[JOBS] : -1;
    wd->commit_us = dv[COMMIT_US];
    wd->flush_us = dv[FLUSH_US];
    wd->flushes = dv[FLUSHES];
    wd->linger_us = dv[LINGER_US];
    return 0;
}

/* The ratio to Redis (median of the per-pair ratios), target >= 1.2x. */
static void redis_figure(struct result *r, const struct windows *wd, const char *key,
                         const char *what, const char *bwhat)
{
    if (!wd->redis)
        return;
    double rr[16], br[16], ratio[16];
    memcpy(rr, wd->rr, sizeof rr);
    memcpy(br, wd->br, sizeof br);
    memcpy(ratio, wd->rratio, sizeof ratio);
    struct figure *fg = res_ratio(r, key, what, median3(br, wd->pairs), bwhat,
                                  median3(rr, wd->pairs), "/s", false, CMP_GE, 1.2);
    if (fg) {
        fg->value = median3(ratio, wd->pairs);
        fg->verdict = fg->value >= 1.2 ? V_PASS : V_MISS;
    }
}

/* Redis's driver and connections (n of them) for a durable scenario:
 * NULL when no appendfsync-always Redis runs (a note says so). */
static struct driver *redis_side(struct bench *b, struct result *r, struct driver *d,
                                 struct redis_writer *rw, struct wconn *c, int n,
                                 unsigned px_ms, const char *tag)
{
    if (!redis_aof_up(b)) {
        res_note(r, "no redis-server (appendfsync always) to compare with: "
                 "apt-get install redis-server");
        return NULL;
    }
    memset(rw, 0, sizeof *rw);
    snprintf(rw->prefix, sizeof rw->prefix, "bench/%s-%u-%d/", tag, ++b->seq, (int)getpid());
    rw->px_ms = px_ms;
    memset(d, 0, sizeof *d);
    d->send = send_redis_set;
    d->reply = redis_set_reply;
    d->ctx = rw;
    d->resp = true;
    for (int i = 0; i < n; i++)
        if (wc_connect(&c[i], b->redis_aof_path) < 0) {
            res_note(r, "cannot connect to redis-server (appendfsync always)");
            return NULL;
        }
    return d;
}

/* The ratio figure (median of the per-pair ratios; broker and baseline:
 * medians of their own). */
static struct figure *windows_figure(struct result *r, const struct windows *wd,
                                     const char *key, const char *what, enum cmp cmp,
                                     double target)
{
    double fr[16], br[16], ratio[16];
    memcpy(fr, wd->fr, sizeof fr);
    memcpy(br, wd->br, sizeof br);
    memcpy(ratio, wd->ratio, sizeof ratio);
    struct figure *fg = res_ratio(r, key, what, median3(br, wd->pairs),
                                  "write+fsync/s, 1 thread", median3(fr, wd->pairs), "/s",
                                  false, cmp, target);
    if (fg) {
        double rat = median3(ratio, wd->pairs);
        fg->value = rat;
        if (cmp == CMP_GE)
            fg->verdict = rat >= target ? V_PASS : V_MISS;
    }
    return fg;
}

/* The info lines both scenarios give: baseline spread, write size, LMDB
 * batches (per_batch: the name of jobs per batch). */
static void windows_info(struct bench *b, struct result *r, const struct windows *wd,
                         size_t fsize, const char *per_batch)
{
    double fmin = wd->fr[0], fmax = wd->fr[0], fr[16];
    for (unsigned k = 1; k < wd->pairs; k++) {
        fmin = wd->fr[k] < fmin ? wd->fr[k] : fmin;
        fmax = wd->fr[k] > fmax ? wd->fr[k] : fmax;
    }
    memcpy(fr, wd->fr, sizeof fr);
    res_info(r, "fsync/s, slowest window", fmin, "/s");
    res_info(r, "fsync/s, fastest window", fmax, "/s");
    res_info(r, "write size", (double)fsize, "B");
    if (wd->batches > 0) {
        res_info(r, "LMDB commits (batches)/s", wd->batches / wd->secs, "/s");
        res_info(r, per_batch, wd->jobs / wd->batches, "");
        res_info(r, "LMDB commits per fsync time",
                 wd->batches / wd->secs / median3(fr, wd->pairs), "");
    }
    /* A batch's cycle in fsync times, from the writer's own clock: its
     * commit, the extra flush that covers it when nothing follows, the wait
     * for the next batch's committers, and the rest (answers, the clients'
     * round trips, wake-ups between threads and processes). */
    if (wd->batches > 0 && wd->commit_us >= 0 && wd->flush_us >= 0 && wd->linger_us >= 0) {
        double fsync_us = 1e6 / median3(fr, wd->pairs), nb = wd->batches;
        double cycle = wd->secs * 1e6 / nb, commit = wd->commit_us / nb;
        double flush = wd->flush_us / nb, linger = wd->linger_us / nb;
        res_info(r, "batch cycle, in fsync times", cycle / fsync_us, "x");
        res_info(r, "  its commit (apply, write, flush)", commit / fsync_us, "x");
        res_info(r, "  extra flushes covering it", flush / fsync_us, "x");
        res_info(r, "  waiting for its committers", linger / fsync_us, "x");
        res_info(r, "  the rest (answers, round trips)",
                 (cycle - commit - flush - linger) / fsync_us, "x");
        if (wd->flushes >= 0)
            res_info(r, "extra flushes per batch", wd->flushes / nb, "");
    }
    /* What a commit's flush costs on this storage for its shape: as many
     * separate 4 KiB writes as a batch made, flushed, against the small
     * write+fsync (the unit above), alternating (medians of 3 pairs). */
    if (wd->batches > 0 && wd->writes >= 0) {
        double per = wd->writes / wd->batches, ratio[3];
        unsigned k = (unsigned)(per + 0.5), dur = scaled(b, b->quick ? 100 : 200, 50), n = 0;
        char why[300];
        res_info(r, "data.mdb writes per batch (separate pages)", per, "");
        for (unsigned i = 0; k >= 1 && i < 3; i++) {
            double f = -1, sc = -1;
            if (i % 2 == 0)
                f = fsync_rate(fsync_dir(b), fsize, dur, why, sizeof why);
            sc = scatter_rate(fsync_dir(b), k, dur, why, sizeof why);
            if (i % 2 == 1)
                f = fsync_rate(fsync_dir(b), fsize, dur, why, sizeof why);
            if (f <= 0 || sc <= 0) {
                res_note(r, "scattered-write baseline: %s", why);
                break;
            }
            ratio[n++] = f / sc;
        }
        if (n == 3)
            res_info(r, "  as many scattered writes + flush",
                     median3(ratio, 3),
                     "x");
    }
}

/* ---- durable-commits ---- */

struct committer {
    const char *ws;
    uint64_t gen;
    unsigned seq;
    uint64_t next_op;
    uint64_t applied, dups;
};

static void send_commit(void *ctx, struct wconn *w)
{
    static const uint8_t value[VALUE_SIZE] = { 1, 2, 3 };
    struct committer *cm = ctx;
    char op_id[64], key[32];
    snprintf(op_id, sizeof op_id, "bench-%u-%llu", cm->seq,
             (unsigned long long)++cm->next_op);
    snprintf(key, sizeof key, "k%d", w->idx);
    coord_enc e;
    wq_begin(w, &e, "leader.commit");
    coord_enc_kv_cstr(&e, "workstream", cm->ws);
    coord_enc_kv_uint(&e, "generation", cm->gen);
    coord_enc_kv_cstr(&e, "op_id", op_id);
    coord_enc_kv_cstr(&e, "key", key);
    coord_enc_kv_bin(&e, "value", value, sizeof value);
    wq_end(&e);
}

/* applied or duplicate: a commit done; anything else fails the run. */
static int commit_reply(void *ctx, struct wconn *w, int st)
{
    struct committer *cm = ctx;
    bool applied = false, dup = false;
    if (st == 0 && wm_bool(w, "applied", &applied) && applied) {
        cm->applied++;
        return DRV_DONE;
    }
    if (st == 0 && wm_bool(w, "duplicate", &dup) && dup) {
        cm->dups++;
        return DRV_DONE;
    }
    return st ? st : COORD_EPROTOCOL;
}

void sc_durable_commits(struct bench *b, struct result *r)
{
    static const char *const ops[] = { "leader.campaign", "leader.commit" };
    const char *miss = missing_op(b, ops, 2);
    if (miss) {
        res_error(r, "the broker says UNKNOWN_OP to %s: leader.* is gone",
                 miss);
        return;
    }
    enum { NC = 32 };
    res_title(r, "leader.campaign once, then %d clients leader.commit back to back vs %d "
              "clients SET on Redis (appendfsync always) and vs write+fsync/s of a file in "
              "%s; ratios: medians of %u rounds of windows", NC, NC, fsync_dir_name(b),
              window_pairs(b));
    struct wconn lead, c[NC], rc_[NC];
    wc_open(&lead);
    for (int i = 0; i < NC; i++) {
        wc_open(&c[i]);
        wc_open(&rc_[i]);
    }
    struct driver rdrv, *rd;
    struct redis_writer rw;
    char ws[64], why[300] = "";
    struct committer cm;
    memset(&cm, 0, sizeof cm);
    cm.seq = ++b->seq;
    snprintf(ws, sizeof ws, "bench/dc-%u-%d", cm.seq, (int)getpid());
    cm.ws = ws;
    struct driver d = { .send = send_commit, .reply = commit_reply, .ctx = &cm };
    int rc;
    if ((rc = wc_dial(&lead, b->socket_path)) != 0)
        goto fail;
    coord_enc e;
    wq_begin(&lead, &e, "leader.campaign");
    coord_enc_kv_cstr(&e, "workstream", ws);
    coord_enc_kv_uint(&e, "lease_ms", 600000);
    wq_end(&e);
    bool granted = false;
    if ((rc = wc_call(&lead)) != 0)
        goto fail;
    if (!wm_bool(&lead, "granted", &granted) || !granted ||
        !wm_uint(&lead, "generation", &cm.gen)) {
        res_error(r, "leader.campaign was not granted");
        goto out;
    }
    for (int i = 0; i < NC; i++) {
        if ((rc = wc_dial(&c[i], b->socket_path)) != 0)
            goto fail;
        c[i].idx = i;
    }
    lead.idx = NC;
    /* May other connections commit with the leader's generation?  The
     * protocol checks the generation only; if this broker refuses, the 32
     * commits in flight go through the leader's own connection instead. */
    send_commit(&cm, &c[0]);
    int refused = wc_call(&c[0]);
    bool via_leader = refused != 0;
    if (via_leader) {
        send_commit(&cm, &lead);
        if ((rc = wc_call(&lead)) != 0)
            goto fail;
    }
    size_t fsize = lead.out.len;
    send_commit(&cm, &lead);       /* its size: the baseline's write size */
    fsize = lead.out.len - fsize;
    lead.out.len = 0;
    cm.applied = cm.dups = 0;

    rd = redis_side(b, r, &rdrv, &rw, rc_, NC, 0, "dc");
    struct windows wd;
    if ((via_leader ? run_windows(b, "durable-commits", &d, &lead, 1, NC, rd, rc_, NC, &lead,
                                  fsize, &wd, why, sizeof why)
                    : run_windows(b, "durable-commits", &d, c, NC, 1, rd, rc_, NC, &lead,
                                  fsize, &wd, why, sizeof why)) < 0) {
        res_error(r, "%s", why);
        goto out;
    }
    redis_figure(r, &wd, "commits/Redis", "leader.commit/s, 32 clients",
                 "Redis SET/s, appendfsync always, 32 clients");
    windows_figure(r, &wd, "commits/fsyncs", "leader.commit/s, 32 clients", CMP_NONE, 0);
    res_info(r, "commits applied", (double)cm.applied, "");
    windows_info(b, r, &wd, fsize, "commits per batch");
    if (via_leader)
        res_note(r, "this broker refuses commits from other connections (%s): the 32 "
                 "commits in flight went through the leader's connection", code_name(refused));
    wq_begin(&lead, &e, "leader.resign");
    coord_enc_kv_cstr(&e, "workstream", ws);
    coord_enc_kv_uint(&e, "generation", cm.gen);
    wq_end(&e);
    wc_call(&lead);
    goto out;
fail:
    res_error(r, "%s", rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
out:
    wc_close(&lead);
    for (int i = 0; i < NC; i++) {
        wc_close(&c[i]);
        wc_close(&rc_[i]);
    }
}

/* ---- durable-records ----
 * Each writer loops flight.join on a key of its own (so it owns the
 * flight) -> flight.complete with keep_ms (a completion record, written
 * durably before the reply).  One request in flight per connection; the
 * flight a join gave is completed by the connection's next request, even
 * when that is in the next window. */

#define DR_WRITERS 32
#define DR_KEEP_MS 600000

struct recorder {
    char prefix[48];           /* of every key: bench/dr-SEQ-PID/ */
    uint64_t next_key;
    struct writer_state {
        uint64_t flight, fence;
        bool owned;            /* joined as owner, not completed yet */
        bool completing;       /* the request in flight is the complete */
    } st[DR_WRITERS];
    uint64_t joins;
};

static const uint8_t dr_result[VALUE_SIZE] = { 'r', 'e', 'c', 'o', 'r', 'd' };

static void enc_complete(struct wconn *w, uint64_t flight, uint64_t fence)
{
    coord_enc e;
    wq_begin(w, &e, "flight.complete");
    coord_enc_kv_uint(&e, "flight", flight);
    coord_enc_kv_uint(&e, "fence", fence);
    coord_enc_kv_bin(&e, "result", dr_result, sizeof dr_result);
    coord_enc_kv_uint(&e, "keep_ms", DR_KEEP_MS);
    wq_end(&e);
}

static void send_record_step(void *ctx, struct wconn *w)
{
    struct recorder *rc = ctx;
    struct writer_state *s = &rc->st[w->idx];
    s->completing = s->owned;
    if (s->owned) {
        enc_complete(w, s->flight, s->fence);
        return;
    }
    char key[96];
    snprintf(key, sizeof key, "%s%llu", rc->prefix, (unsigned long long)++rc->next_key);
    coord_enc e;
    wq_begin(w, &e, "flight.join");
    coord_enc_kv_cstr(&e, "key", key);
    coord_enc_kv_uint(&e, "owner_ttl_ms", 120000);
    wq_end(&e);
}

/* A join must make us the owner (the key is new); a complete answered ok
 * is a record durably written. */
static int record_reply(void *ctx, struct wconn *w, int st)
{
    struct recorder *rc = ctx;
    struct writer_state *s = &rc->st[w->idx];
    if (st != 0)
        return st;
    if (s->completing) {
        s->owned = false;
        return DRV_DONE;
    }
    if (!wm_is(w, "role", "owner") || !wm_uint(w, "flight", &s->flight) ||
        !wm_uint(w, "fence", &s->fence))
        return COORD_EPROTOCOL;
    s->owned = true;
    rc->joins++;
    return DRV_STEP;
}

void sc_durable_records(struct bench *b, struct result *r)
{
    static const char *const ops[] = { "flight.join", "flight.complete" };
    const char *miss = missing_op(b, ops, 2);
    if (miss) {
        res_error(r, "the broker says UNKNOWN_OP to %s: flight.* is gone",
                 miss);
        return;
    }
    res_title(r, "%d clients loop flight.join (new key: owner) -> flight.complete "
              "{%d B result, keep_ms %d} vs %d clients SET .. PX %d on Redis (appendfsync "
              "always) and vs write+fsync/s of a file in %s; ratios: medians of %u rounds "
              "of windows", DR_WRITERS, VALUE_SIZE, DR_KEEP_MS, DR_WRITERS, DR_KEEP_MS,
              fsync_dir_name(b), window_pairs(b));
    struct wconn ctl, c[DR_WRITERS], rc_[DR_WRITERS];
    wc_open(&ctl);
    for (int i = 0; i < DR_WRITERS; i++) {
        wc_open(&c[i]);
        wc_open(&rc_[i]);
    }
    struct driver rdrv, *rd;
    struct redis_writer rw;
    char why[300] = "";
    struct recorder *rec = calloc(1, sizeof *rec);
    struct driver d = { .send = send_record_step, .reply = record_reply, .ctx = rec };
    int rc;
    if (!rec) {
        res_error(r, "out of memory");
        goto out;
    }
    snprintf(rec->prefix, sizeof rec->prefix, "bench/dr-%u-%d/", ++b->seq, (int)getpid());
    if ((rc = wc_dial(&ctl, b->socket_path)) != 0)
        goto fail;
    ctl.idx = DR_WRITERS;
    for (int i = 0; i < DR_WRITERS; i++) {
        if ((rc = wc_dial(&c[i], b->socket_path)) != 0)
            goto fail;
        c[i].idx = i;
    }
    /* the baseline's write size: that of a flight.complete frame */
    size_t fsize = ctl.out.len;
    enc_complete(&ctl, 1, 1);
    fsize = ctl.out.len - fsize;
    ctl.out.len = 0;

    rd = redis_side(b, r, &rdrv, &rw, rc_, DR_WRITERS, DR_KEEP_MS, "dr");
    double rec0 = stat_of(&ctl, "records");
    struct windows wd;
    if (run_windows(b, "durable-records", &d, c, DR_WRITERS, 1, rd, rc_, DR_WRITERS, &ctl,
                    fsize, &wd, why, sizeof why) < 0) {
        res_error(r, "%s", why);
        goto out;
    }
    double rec1 = stat_of(&ctl, "records");
    redis_figure(r, &wd, "records/Redis", "records written/s, 32 clients",
                 "Redis SET PX/s, appendfsync always, 32 clients");
    windows_figure(r, &wd, "records/fsyncs", "records written/s, 32 clients", CMP_NONE, 0);
    res_info(r, "completes answered ok", (double)d.done, "");
    res_info(r, "records afterwards (stats)", rec1, "");
    res_info(r, "records added (stats)", rec1 - rec0, "");
    windows_info(b, r, &wd, fsize, "records per batch");
    if (rec0 < 0 || rec1 < 0)
        res_note(r, "stats gave no \"records\" count");
    else if (rec1 - rec0 != (double)d.done)
        res_note(r, "records added (%.0f) differ from completes answered ok (%llu)",
                 rec1 - rec0, (unsigned long long)d.done);
    /* the records are ours alone: remove them */
    coord_enc e;
    wq_begin(&ctl, &e, "record.purge");
    coord_enc_kv_cstr(&e, "prefix", rec->prefix);
    wq_end(&e);
    uint64_t deleted = 0;
    if (wc_call(&ctl) == 0 && wm_uint(&ctl, "deleted", &deleted))
        res_info(r, "records purged afterwards", (double)deleted, "");
    goto out;
fail:
    res_error(r, "%s", rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
out:
    wc_close(&ctl);
    for (int i = 0; i < DR_WRITERS; i++) {
        wc_close(&c[i]);
        wc_close(&rc_[i]);
    }
    free(rec);
}

void sc_fanout(struct bench *b, struct result *r)
{
    static const char *const ops[] = { "sub.subscribe", "sub.publish" };
    const char *miss = missing_op(b, ops, 2);
    if (miss) {
        res_error(r, "the broker says UNKNOWN_OP to %s: sub.* is gone",
                 miss);
        return;
    }
    enum { NS = 20, WINDOW = 16 };
    unsigned nmsg = scaled(b, b->quick ? 2000 : 20000, 100);
    res_title(r, "%d subscribers of one channel; 1 publisher, %u messages of %d B, "
              "%d publishes in flight", NS, nmsg, VALUE_SIZE, WINDOW);
    struct wconn c[NS + 1];
    for (int i = 0; i <= NS; i++)
        wc_open(&c[i]);
    struct wconn *pub = &c[NS];
    unsigned count[NS];
    memset(count, 0, sizeof count);
    char ch[64];
    snprintf(ch, sizeof ch, "bench/fan-%u-%d", ++b->seq, (int)getpid());
    int rc, ep = -1;
    for (int i = 0; i <= NS; i++) {
        if ((rc = wc_dial(&c[i], b->socket_path)) != 0)
            goto fail;
        if (i == NS)
            break;
        coord_enc e;
        wq_begin(&c[i], &e, "sub.subscribe");
        coord_enc_kv_cstr(&e, "channel", ch);
        wq_end(&e);
        if ((rc = wc_call(&c[i])) != 0)
            goto fail;
    }
    ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i <= NS; i++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
    }
    uint8_t data[VALUE_SIZE];
    memset(data, 'm', sizeof data);
    unsigned sent = 0, replied = 0, short_delivery = 0;
    uint64_t events = 0, want = (uint64_t)nmsg * NS;
    uint64_t t0 = now_ns(), deadline = t0 + 60000000000ull;
    while (replied < nmsg || events < want) {
        while (sent < nmsg && sent - replied < WINDOW) {
            coord_enc e;
            wq_begin(pub, &e, "sub.publish");
            coord_enc_kv_cstr(&e, "channel", ch);
            coord_enc_kv_bin(&e, "data", data, sizeof data);
            wq_end(&e);
            sent++;
        }
        if (pub->out.len && wc_flush(pub) < 0) {
            rc = COORD_ECLOSED;
            goto fail;
        }
        if (now_ns() > deadline) {
            res_error(r, "timed out: %u/%u publishes answered, %llu/%llu messages", replied,
                      nmsg, (unsigned long long)events, (unsigned long long)want);
            goto out;
        }
        struct epoll_event evs[32];
        int k = epoll_wait(ep, evs, 32, 1000);
        for (int j = 0; j < k; j++) {
            int i = (int)evs[j].data.u32;
            if (wc_fill(&c[i]) <= 0) {
                rc = COORD_ECLOSED;
                goto fail;
            }
            int f;
            while ((f = wc_next(&c[i])) == 1) {
                if (i == NS) {
                    uint64_t rid, d = 0;
                    if (wm_is_event(pub) || !wm_uint(pub, "rid", &rid))
                        continue;
                    if ((rc = wm_status(pub)) != 0)
                        goto fail;
                    replied++;
                    if (!wm_uint(pub, "delivered", &d) || d != NS)
                        short_delivery++;
                } else if (wm_is(&c[i], "ev", "message")) {
                    count[i]++;
                    events++;
                }
            }
            if (f < 0) {
                rc = COORD_EPROTOCOL;
                goto fail;
            }
        }
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    res_abs(r, "delivered/s", "messages delivered/s (20 subscribers)", (double)events / secs,
            "/s", CMP_NONE, 0);
    res_info(r, "publishes/s", nmsg / secs, "/s");
    res_info(r, "publishes delivered to fewer than 20", short_delivery, "");
    goto out;
fail:
    res_error(r, "%s", rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
out:
    if (ep >= 0)
        close(ep);
    for (int i = 0; i <= NS; i++)
        wc_close(&c[i]);
}
