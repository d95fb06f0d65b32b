/* sc-redis.c - redis: coord's lock cycle side by side with Redis's (SET NX
 * PX + the compare-and-delete EVALSHA), in the same run, with the same
 * client code.  The figures are coord's ratio to Redis: >= 1 is coord
 * ahead (for a p50, Redis's time over coord's).
 *
 * 1 client: the p50 of a cycle, rounds alternating between the two.  On a
 * VM, waking a process on a CPU that sleeps costs a hypervisor exit that
 * dwarfs the round trip (BENCHMARKS.md), so where the scheduler put each
 * server decides an unpinned figure: that row is reported as placement,
 * with how many rounds each server shared the client's CPU.  The figures
 * with targets place both servers alike: all three on one CPU (client,
 * coordd's loop thread, redis-server's main thread), then both servers on
 * the other CPU.
 *
 * 16 and 64 clients: the requests/s of the many-clients loop (one in
 * flight per connection, the same epoll threads) against Redis and
 * against the raw echo server, the three taking turns within each round.
 *
 * Skipped when redis-server is not installed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
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

/* rounds x per cycles of each, alternating which goes first; p50s in ns.
 * shared[0/1] (may be NULL): rounds coordd / redis-server last ran on the
 * client's CPU.  0 or -1 (*err may say why). */
static int alternate(struct wconn *co, struct wconn *rd, unsigned rounds, size_t per,
                     pid_t bpid, pid_t rpid, double *c50, double *r50, unsigned *shared,
                     int *err)
{
    double *cs = calloc(rounds * per, sizeof *cs), *rs = calloc(rounds * per, sizeof *rs);
    int rc = cs && rs ? 0 : -1;
    if (rc == 0 && (lock_cycles(co, NULL, NULL, NULL, per / 4 + 20, err) < 0 ||
                    redis_cycles(rd, NULL, per / 4 + 20) < 0))
        rc = -1;
    for (unsigned k = 0; rc == 0 && k < rounds; k++) {
        if (k % 2 == 0)
            rc = redis_cycles(rd, rs + k * per, per);
        if (rc == 0)
            rc = lock_cycles(co, cs + k * per, NULL, NULL, per, err);
        if (rc == 0 && shared)
            shared[0] += bpid > 0 && last_cpu(bpid) == sched_getcpu();
        if (rc == 0 && k % 2 == 1)
            rc = redis_cycles(rd, rs + k * per, per);
        if (rc == 0 && shared)
            shared[1] += rpid > 0 && last_cpu(rpid) == sched_getcpu();
    }
    if (rc == 0) {
        *c50 = percentile(cs, rounds * per, 50);
        *r50 = percentile(rs, rounds * per, 50);
    }
    free(cs);
    free(rs);
    return rc;
}

/* Both servers pinned alike, the client on CPU 0: servers on CPU 0 (one
 * CPU), then on CPU 1 (the other).  Skipped when they cannot be pinned
 * (one CPU, a broker not ours). */
static int placed(struct bench *b, struct result *r, struct wconn *co, struct wconn *rd,
                  pid_t bpid, pid_t rpid, unsigned rounds, size_t per, int *err)
{
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2 || !b->own_broker || bpid <= 0 || rpid <= 0) {
        res_note(r, "servers not pinned (one CPU, or a broker not started here): "
                 "only the placement row");
        return 0;
    }
    cpu_set_t self_mask, broker_mask, redis_mask;
    if (pin(0, 0, &self_mask) < 0)
        return 0;
    int rc = 0;
    if (pin(bpid, 0, &broker_mask) < 0 || pin(rpid, 0, &redis_mask) < 0)
        goto restore;
    static const char *const what[2][3] = {
        { "1 client, one CPU", "coord p50, all on one CPU", "Redis p50, all on one CPU" },
        { "1 client, other CPU", "coord p50, servers on the other CPU",
          "Redis p50, servers on the other CPU" },
    };
    static const double target[2] = { 1.2, 1.0 };
    for (int other = 0; other < 2 && rc == 0; other++) {
        if (other && (pin(bpid, 1, NULL) < 0 || pin(rpid, 1, NULL) < 0))
            break;
        double c50 = 0, r50 = 0;
        rc = alternate(co, rd, rounds, per, bpid, rpid, &c50, &r50, NULL, err);
        if (rc == 0)
            res_ratio(r, what[other][0], what[other][1], ns_to_us(c50), what[other][2],
                      ns_to_us(r50), "us", true, CMP_GE, target[other]);
    }
    sched_setaffinity(bpid, sizeof broker_mask, &broker_mask);
    sched_setaffinity(rpid, sizeof redis_mask, &redis_mask);
restore:
    sched_setaffinity(0, sizeof self_mask, &self_mask);
    return rc;
}

static void one_client(struct bench *b, struct result *r)
{
    unsigned rounds = b->quick ? 4 : 12;
    size_t per = scaled(b, b->quick ? 500 : 2000, 50);
    struct wconn co, rd;
    int err = 0;
    pid_t bpid = b->broker_pid, rpid = redis_server_pid();
    if (open_pair(b, &co, &rd, 1, ++b->seq * 1000u, &err) < 0)
        goto fail;
    double c50 = 0, r50 = 0;
    unsigned shared[2] = { 0, 0 };
    if (alternate(&co, &rd, rounds, per, bpid, rpid, &c50, &r50, shared, &err) < 0)
        goto fail;
    res_ratio(r, "1 client, placement", "coord p50, unpinned (placement)", ns_to_us(c50),
              "Redis p50, unpinned", ns_to_us(r50), "us", true, CMP_NONE, 0);
    res_info(r, "rounds coordd shared the client's CPU", shared[0], "");
    res_info(r, "rounds redis-server shared the client's CPU", shared[1], "");
    if (placed(b, r, &co, &rd, bpid, rpid, b->quick ? 2 : 6, per, &err) < 0)
        goto fail;
    close_pair(&co, &rd, 1);
    return;
fail:
    res_error(r, "1 client: %s", err ? code_name(err) : "redis connection failed");
    close_pair(&co, &rd, 1);
}

static void many(struct bench *b, struct result *r, int n)
{
    unsigned rounds = b->quick ? 3 : 7, dur = scaled(b, b->quick ? 300 : 500, 100);
    struct wconn *co = calloc((size_t)n * 3, sizeof *co), *rd = co + n, *raw = co + 2 * n;
    double cr[16], rr[16], er[16], ratio[16], eratio[16];
    int err = 0, opened = 0;
    if (!co) {
        res_error(r, "out of memory");
        return;
    }
    for (int i = 0; i < n; i++)
        wc_open(&raw[i]);
    opened = 1;                   /* open_pair wc_opens them all first */
    if (open_pair(b, co, rd, n, ++b->seq * 1000u, &err) < 0)
        goto fail;
    for (int i = 0; i < n; i++) {
        if (wc_connect(&raw[i], b->echo_path) < 0) {
            err = COORD_ECONNECT;
            goto fail;
        }
        lock_name(raw[i].name, sizeof raw[i].name, "rp", (unsigned)i);
    }
    for (unsigned k = 0; k < rounds; k++) {
        /* the three take turns; the order flips every round */
        for (int s = 0; s < 3 && !err; s++) {
            int which = k % 2 ? 2 - s : s;
            if (which == 0)
                rr[k] = mc_run(b, rd, n, MC_REDIS, 100, dur, 0, NULL, &err);
            else if (which == 1)
                cr[k] = mc_run(b, co, n, MC_LOCK, 100, dur, 0, NULL, &err);
            else
                er[k] = mc_run(b, raw, n, MC_RAW, 100, dur, 0, NULL, &err);
        }
        if (err)
            goto fail;
        ratio[k] = cr[k] / rr[k];
        eratio[k] = cr[k] / er[k];
        vlog(b, "redis %d: coord %.0f/s redis %.0f/s echo %.0f/s", n, cr[k], rr[k], er[k]);
    }
    char key[48], what[96], bwhat[64];
    snprintf(key, sizeof key, "%d clients", n);
    snprintf(what, sizeof what, "%d clients: coord acquire/release requests/s", n);
    snprintf(bwhat, sizeof bwhat, "%d clients: Redis SET/EVALSHA commands/s", n);
    struct figure *fg = res_ratio(r, key, what, median3(cr, rounds), bwhat,
                                  median3(rr, rounds), "/s", false, CMP_GE, 1.2);
    if (fg) {
        fg->value = median3(ratio, rounds);
        fg->verdict = fg->value >= 1.2 ? V_PASS : V_MISS;
    }
    snprintf(key, sizeof key, "%d clients / raw echo", n);
    snprintf(bwhat, sizeof bwhat, "%d clients: raw echo round trips/s", n);
    fg = res_ratio(r, key, what, median3(cr, rounds), bwhat, median3(er, rounds), "/s", false,
                   CMP_GE, 0.9);
    if (fg) {
        fg->value = median3(eratio, rounds);
        fg->verdict = fg->value >= 0.9 ? V_PASS : V_MISS;
    }
    goto out;
fail:
    res_error(r, "%d clients: %s", n, err ? code_name(err) : "redis connection failed");
out:
    if (opened)
        close_pair(co, rd, n);
    for (int i = 0; i < n; i++)
        wc_close(&raw[i]);
    free(co);
}

void sc_redis(struct bench *b, struct result *r)
{
    if (!redis_up(b)) {
        res_skip(r, "redis-server is not installed (apt-get install redis-server)");
        return;
    }
    res_title(r, "coord lock cycle (acquire+release) vs Redis (SET NX PX + EVALSHA "
              "compare-and-delete) on Unix sockets, same client code; 1 client: p50, "
              "unpinned (placement), then both servers pinned to the client's CPU and to the "
              "other; 16/64 clients: requests/s vs Redis and vs raw echo, median of rounds");
    one_client(b, r);
    if (r->status == SC_ERROR)
        return;
    many(b, r, 16);
    if (r->status == SC_ERROR)
        return;
    many(b, r, 64);
}
