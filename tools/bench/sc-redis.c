/* sc-redis.c - redis: coord's lock cycle side by side with Redis's (SET NX
 * PX + the compare-and-delete EVALSHA), in the same run, with the same
 * client code: at 1 client the p50 of a cycle (rounds alternate between
 * the two, as in lock-cycle), at 16 and 64 clients the requests/s of the
 * many-clients loop (one in flight per connection, the same epoll
 * threads).  The figures are coord's ratio to Redis: >= 1 is coord ahead
 * (for the p50, Redis's time over coord's).  Skipped when redis-server is
 * not installed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench.h"

static int redis_cycles(struct wconn *w, double *out, size_t n)
{
    struct rs_reply r;
    for (size_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        rs_acquire(w);
        if (rs_call(w, &r) < 0 || r.type != '+')
            return -1;
        rs_release(w);
        if (rs_call(w, &r) < 0 || r.type != ':' || r.num != 1)
            return -1;
        if (out)
            out[i] = (double)(now_ns() - t0);
    }
    return 0;
}

static int open_pair(struct bench *b, struct wconn *co, struct wconn *rd, int n, unsigned tag,
                     int *err)
{
    for (int i = 0; i < n; i++) {
        wc_open(&co[i]);
        wc_open(&rd[i]);
    }
    for (int i = 0; i < n; i++) {
        int rc = wc_dial(&co[i], b->socket_path);
        if (rc != 0) {
            *err = rc;
            return -1;
        }
        if (wc_connect(&rd[i], b->redis_path) < 0) {
            *err = COORD_ECONNECT;
            return -1;
        }
        lock_name(co[i].name, sizeof co[i].name, "rp", tag + (unsigned)i);
        lock_name(rd[i].name, sizeof rd[i].name, "rp", tag + (unsigned)i);
        snprintf(rd[i].token, sizeof rd[i].token, "t%u-%d", tag, i);
    }
    return 0;
}

static void close_pair(struct wconn *co, struct wconn *rd, int n)
{
    for (int i = 0; i < n; i++) {
        wc_close(&co[i]);
        wc_close(&rd[i]);
    }
}

void sc_redis(struct bench *b, struct result *r)
{
    if (!redis_up(b)) {
        res_skip(r, "redis-server is not installed (apt-get install redis-server)");
        return;
    }
    unsigned rounds = b->quick ? 4 : 12;
    size_t per = scaled(b, b->quick ? 500 : 2000, 50);
    res_title(r, "coord lock cycle (acquire+release) vs Redis (SET NX PX + EVALSHA "
              "compare-and-delete) on a Unix socket, same client code; 1 client: p50, "
              "%u x %zu cycles each; 16/64 clients: requests/s, median of rounds", rounds, per);
    struct wconn co[64], rd[64];
    int err = 0;
    double *cs = calloc(rounds * per, sizeof *cs), *rs = calloc(rounds * per, sizeof *rs);
    if (!cs || !rs || open_pair(b, co, rd, 1, ++b->seq * 1000u, &err) < 0)
        goto fail1;
    if (lock_cycles(&co[0], NULL, NULL, NULL, per / 4 + 20, &err) < 0 ||
        redis_cycles(&rd[0], NULL, per / 4 + 20) < 0)
        goto fail1;
    for (unsigned k = 0; k < rounds; k++) {
        double *a = cs + k * per, *tmp_acq = calloc(per, sizeof *tmp_acq),
               *tmp_rel = calloc(per, sizeof *tmp_rel);
        int rc = tmp_acq && tmp_rel ? 0 : -1;
        if (rc == 0 && k % 2 == 0)
            rc = redis_cycles(&rd[0], rs + k * per, per);
        if (rc == 0)
            rc = lock_cycles(&co[0], a, tmp_acq, tmp_rel, per, &err);
        if (rc == 0 && k % 2 == 1)
            rc = redis_cycles(&rd[0], rs + k * per, per);
        free(tmp_acq);
        free(tmp_rel);
        if (rc < 0)
            goto fail1;
    }
    double c50 = percentile(cs, rounds * per, 50), r50 = percentile(rs, rounds * per, 50);
    res_ratio(r, "1 client", "coord acquire+release p50", ns_to_us(c50),
              "Redis SET NX PX + EVALSHA p50", ns_to_us(r50), "us", true, CMP_GE, 1.0);
    close_pair(co, rd, 1);

    static const int counts[] = { 16, 64 };
    unsigned mrounds = b->quick ? 3 : 7, dur = scaled(b, b->quick ? 300 : 500, 100);
    for (size_t ci = 0; ci < 2; ci++) {
        int n = counts[ci];
        double cr[16], rr[16], ratio[16];
        if (open_pair(b, co, rd, n, ++b->seq * 1000u, &err) < 0)
            goto fail;
        for (unsigned k = 0; k < mrounds; k++) {
            if (k % 2 == 0)
                rr[k] = mc_run(b, rd, n, MC_REDIS, 100, dur, 0, NULL, &err);
            cr[k] = err ? 0 : mc_run(b, co, n, MC_LOCK, 100, dur, 0, NULL, &err);
            if (k % 2 == 1 && !err)
                rr[k] = mc_run(b, rd, n, MC_REDIS, 100, dur, 0, NULL, &err);
            if (err)
                goto fail;
            ratio[k] = cr[k] / rr[k];
            vlog(b, "redis %d: coord %.0f/s redis %.0f/s", n, cr[k], rr[k]);
        }
        char key[48], what[96], bwhat[64];
        snprintf(key, sizeof key, "%d clients", n);
        snprintf(what, sizeof what, "%d clients: coord acquire/release requests/s", n);
        snprintf(bwhat, sizeof bwhat, "%d clients: Redis SET/EVALSHA commands/s", n);
        struct figure *fg = res_ratio(r, key, what, median3(cr, mrounds), bwhat,
                                      median3(rr, mrounds), "/s", false, CMP_GE, 1.0);
        if (fg) {
            fg->value = median3(ratio, mrounds);
            fg->verdict = fg->value >= 1.0 ? V_PASS : V_MISS;
        }
        close_pair(co, rd, n);
    }
    free(cs);
    free(rs);
    return;
fail:
    res_error(r, "%s", err ? code_name(err) : "redis connection failed");
    return;
fail1:
    res_error(r, "%s", err ? code_name(err) : "redis connection failed");
    close_pair(co, rd, 1);
    free(cs);
    free(rs);
}
