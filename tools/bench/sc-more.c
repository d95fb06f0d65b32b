/* sc-more.c - durable-commits (leader.commit from 32 clients vs fsync/s of
 * a small file in the broker's data dir) and fanout (20 subscribers of one
 * channel, delivered messages/s). */
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
    } while ((t = now_ns()) < end);
    t = now_ns();
    free(buf);
    close(fd);
    unlink(path);
    return n ? (double)n / ((double)(t - t0) / 1e9) : -1;
}

/* A counter from the broker's stats reply, or -1. */
static double stat_of(struct wconn *w, const char *key)
{
    coord_enc e;
    wq_begin(w, &e, "stats");
    wq_end(&e);
    uint64_t v;
    if (wc_call(w) != 0 || !wm_uint(w, key, &v))
        return -1;
    return (double)v;
}

struct committer {
    const char *ws;
    uint64_t gen;
    unsigned seq;
    uint64_t next_op;
    uint64_t applied, dups, failed;
    int last_err;
};

static void send_commit(struct committer *cm, struct wconn *w)
{
    static const uint8_t value[VALUE_SIZE] = { 1, 2, 3 };
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

/* Keeps depth commits in flight on each of n connections for dur_ms. */
static int commit_run(struct committer *cm, struct wconn *c, int n, int depth,
                      unsigned dur_ms, double *rate)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        return COORD_ESYS;
    int rc = 0;
    long inflight = 0;
    for (int i = 0; i < n; i++) {
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        epoll_ctl(ep, EPOLL_CTL_ADD, c[i].fd, &ev);
        for (int d = 0; d < depth; d++)
            send_commit(cm, &c[i]);
        inflight += depth;
        if (wc_flush(&c[i]) < 0) {
            rc = COORD_ECLOSED;
            goto out;
        }
    }
    uint64_t t0 = now_ns(), end = t0 + (uint64_t)dur_ms * 1000000u, t1 = 0;
    uint64_t done_at_end = 0, done0 = cm->applied + cm->dups + cm->failed;
    struct epoll_event evs[64];
    while (inflight > 0) {
        uint64_t now = now_ns();
        if (!t1 && now >= end) {
            t1 = now;
            done_at_end = cm->applied + cm->dups + cm->failed;
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
            while ((f = wc_next(w)) == 1) {
                uint64_t rid;
                if (wm_is_event(w) || !wm_uint(w, "rid", &rid))
                    continue;
                inflight--;
                int st = wm_status(w);
                bool applied = false, dup = false;
                if (st == 0 && wm_bool(w, "applied", &applied) && applied) {
                    cm->applied++;
                } else if (st == 0 && wm_bool(w, "duplicate", &dup) && dup) {
                    cm->dups++;
                } else {
                    cm->failed++;
                    cm->last_err = st ? st : COORD_EPROTOCOL;
                }
                if (!t1 && !cm->failed) {
                    send_commit(cm, w);
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
        done_at_end = cm->applied + cm->dups + cm->failed;
    }
    *rate = (double)(done_at_end - done0) / ((double)(t1 - t0) / 1e9);
out:
    close(ep);
    return rc;
}

void sc_durable_commits(struct bench *b, struct result *r)
{
    static const char *const ops[] = { "leader.campaign", "leader.commit" };
    const char *miss = missing_op(b, ops, 2);
    if (miss) {
        res_skip(r, "not implemented yet: needs leader.* (the broker says UNKNOWN_OP to %s)",
                 miss);
        return;
    }
    enum { NC = 32 };
    unsigned pairs = b->quick ? 3 : 7;
    unsigned dur = scaled(b, b->quick ? 300 : 500, 100);
    unsigned fdur = scaled(b, b->quick ? 150 : 250, 50);
    const char *dir = b->data_dir[0] ? b->data_dir : b->tmpdir;
    res_title(r, "leader.campaign once, then %d clients leader.commit back to back vs "
              "write+fsync/s of a file in %s; ratio: median of %u pairs of windows",
              NC, b->data_dir[0] ? "the data dir" : "our temp dir", pairs);
    struct wconn lead, c[NC];
    wc_open(&lead);
    for (int i = 0; i < NC; i++)
        wc_open(&c[i]);
    char ws[64], why[300] = "";
    struct committer cm;
    memset(&cm, 0, sizeof cm);
    cm.seq = ++b->seq;
    snprintf(ws, sizeof ws, "bench/dc-%u-%d", cm.seq, (int)getpid());
    cm.ws = ws;
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
    cm.applied = cm.dups = cm.failed = 0;

    /* alternate fsync and commit windows; the figure is the median of
     * the per-pair ratios (storage here is shared and its speed drifts) */
    double fr[16], cr[16], ratio[16], secs = 0;
    double b0 = stat_of(&lead, "ledger_batches"), j0 = stat_of(&lead, "ledger_jobs");
    for (unsigned k = 0; k < pairs; k++) {
        double rate = 0;
        if (k % 2 == 0)
            fr[k] = fsync_rate(dir, fsize, fdur, why, sizeof why);
        uint64_t t0 = now_ns();
        rc = via_leader ? commit_run(&cm, &lead, 1, NC, dur, &rate)
                        : commit_run(&cm, c, NC, 1, dur, &rate);
        secs += (double)(now_ns() - t0) / 1e9;
        if (rc != 0)
            goto fail;
        if (cm.failed) {
            rc = cm.last_err;
            goto fail;
        }
        if (k % 2 == 1)
            fr[k] = fsync_rate(dir, fsize, fdur, why, sizeof why);
        if (fr[k] < 0) {
            res_error(r, "fsync baseline: %s", why);
            goto out;
        }
        cr[k] = rate;
        ratio[k] = rate / fr[k];
        vlog(b, "durable-commits: %.0f commits/s, %.0f fsyncs/s", cr[k], fr[k]);
    }
    double b1 = stat_of(&lead, "ledger_batches"), j1 = stat_of(&lead, "ledger_jobs");
    double fmin = fr[0], fmax = fr[0];
    for (unsigned k = 1; k < pairs; k++) {
        fmin = fr[k] < fmin ? fr[k] : fmin;
        fmax = fr[k] > fmax ? fr[k] : fmax;
    }
    double rat = median3(ratio, pairs);
    struct figure *fg = res_ratio(r, "commits/fsyncs", "leader.commit/s, 32 clients",
                                  median3(cr, pairs), "write+fsync/s, 1 thread",
                                  median3(fr, pairs), "/s", false, CMP_GE, 10);
    if (fg) {
        fg->value = rat;
        fg->verdict = rat >= 10 ? V_PASS : V_MISS;
    }
    res_info(r, "commits applied", (double)cm.applied, "");
    res_info(r, "fsync/s, slowest window", fmin, "/s");
    res_info(r, "fsync/s, fastest window", fmax, "/s");
    res_info(r, "write size", (double)fsize, "B");
    if (b0 >= 0 && b1 > b0) {
        res_info(r, "LMDB commits (batches)/s", (b1 - b0) / secs, "/s");
        res_info(r, "commits per batch", (j1 - j0) / (b1 - b0), "");
        res_info(r, "LMDB commits per fsync time", (b1 - b0) / secs / median3(fr, pairs), "");
    }
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
    for (int i = 0; i < NC; i++)
        wc_close(&c[i]);
}

void sc_fanout(struct bench *b, struct result *r)
{
    static const char *const ops[] = { "sub.subscribe", "sub.publish" };
    const char *miss = missing_op(b, ops, 2);
    if (miss) {
        res_skip(r, "not implemented yet: needs sub.* (the broker says UNKNOWN_OP to %s)",
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
    rc = 0;
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
