/* sc-mem.c - memory: the broker's RSS growth (VmRSS) with 10,000 idle
 * connections (after hello), and with 100,000 held locks of distinct names
 * spread over 8 connections.  When we own the broker each part starts
 * from a fresh broker, so memory freed by one part cannot hide the cost of
 * the next. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "bench.h"

#define BATCH 256

static long settle_rss(pid_t pid)
{
    sleep_ms(300);
    return rss_kib(pid);
}

/* One shared reader parses each connection's hello reply: the 10,000
 * connections themselves are bare fds, so the bench stays small. */
static int idle_conns(struct bench *b, int *fds, int n, int *made, int *err)
{
    struct wconn rd, hello;
    wc_open(&rd);
    wc_open(&hello);
    wc_enc_hello(&hello);               /* rid 1 on every connection */
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%.107s", b->socket_path);
    int rc = 0;
    *made = 0;
    for (int base = 0; base < n && rc == 0; base += BATCH) {
        int k = n - base < BATCH ? n - base : BATCH;
        for (int i = 0; i < k; i++) {
            int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                *err = errno;
                if (fd >= 0)
                    close(fd);
                rc = -1;
                k = i;
                break;
            }
            fds[base + i] = fd;
            (*made)++;
            if (write(fds[base + i], hello.out.data, hello.out.len) != (ssize_t)hello.out.len) {
                *err = errno;
                rc = -1;
                k = i + 1;
                break;
            }
        }
        for (int i = 0; i < k; i++) {
            rd.fd = fds[base + i];
            rd.ilen = rd.ioff = 0;
            if (wc_read(&rd) < 0) {
                *err = ECONNRESET;
                rc = -1;
                break;
            }
            int st = wm_status(&rd);
            if (st != 0) {
                *err = 0;
                rc = st;
                break;
            }
        }
    }
    rd.fd = -1;
    wc_close(&rd);
    wc_close(&hello);
    return rc;
}

static int hold_locks(struct bench *b, struct wconn *c, int nc, int nlocks, int *err)
{
    int per = nlocks / nc, name = 0;
    for (int i = 0; i < nc; i++) {
        int mine = per + (i < nlocks % nc);
        for (int done = 0; done < mine;) {
            int k = mine - done < BATCH ? mine - done : BATCH;
            char nm[32];
            for (int j = 0; j < k; j++) {
                lock_name(nm, sizeof nm, "mm", (unsigned)name++);
                wq_acquire(&c[i], nm, false);
            }
            if (wc_flush(&c[i]) < 0) {
                *err = COORD_ECLOSED;
                return -1;
            }
            for (int j = 0; j < k; j++) {
                if (wc_read(&c[i]) < 0) {
                    *err = COORD_ECLOSED;
                    return -1;
                }
                bool granted = false;
                int st = wm_status(&c[i]);
                if (st != 0 || !wm_bool(&c[i], "granted", &granted) || !granted) {
                    *err = st ? st : COORD_EPROTOCOL;
                    return -1;
                }
            }
            done += k;
        }
    }
    (void)b;
    return 0;
}

void sc_memory(struct bench *b, struct result *r)
{
    int nconn = 10000, nlocks = 100000, nlc = 8;
    res_title(r, "broker VmRSS growth: %d idle connections; %d held locks on %d "
              "connections", nconn, nlocks, nlc);
    long lim = raise_nofile();
    if (lim < nconn + 64) {
        res_note(r, "RLIMIT_NOFILE is %ld: measuring %ld connections and scaling", lim,
                 lim - 64);
        nconn = (int)lim - 64;
    }
    if (b->own_broker && broker_restart(b) < 0) {
        res_error(r, "cannot restart the broker");
        return;
    }
    struct wconn ctl;
    wc_open(&ctl);
    int *fds = calloc((size_t)nconn, sizeof *fds);
    struct wconn lc[8];
    for (int i = 0; i < nlc; i++)
        wc_open(&lc[i]);
    int made = 0, err = 0, rc;
    if (!fds) {
        res_error(r, "out of memory");
        goto out;
    }
    if ((rc = wc_dial(&ctl, b->socket_path)) != 0) {
        res_error(r, "broker: %s", rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
        goto out;
    }
    pid_t pid = b->broker_pid ? b->broker_pid : peer_pid(ctl.fd);
    long rss0 = settle_rss(pid);
    if (rss0 < 0) {
        res_error(r, "cannot read /proc/%d/status", (int)pid);
        goto out;
    }

    /* part 1: idle connections */
    uint64_t t0 = now_ns();
    rc = idle_conns(b, fds, nconn, &made, &err);
    double secs = (double)(now_ns() - t0) / 1e9;
    long rss1 = settle_rss(pid);
    for (int i = 0; i < made; i++)
        close(fds[i]);
    if (rc != 0) {
        res_error(r, "after %d connections: %s", made,
                  rc < 0 && err ? strerror(err) : code_name(rc));
        goto out;
    }
    double grow = (double)(rss1 - rss0) * 1024.0;
    res_abs(r, "10000 idle conns", "RSS growth, idle connections", grow / 1048576.0,
            "MiB", CMP_LE, 64);
    res_info(r, "bytes per connection", grow / nconn, "B");
    res_info(r, "RSS before connections", (double)rss0 / 1024.0, "MiB");
    res_info(r, "connect+hello rate", nconn / secs, "/s");

    /* part 2: held locks, on a fresh broker */
    wc_close(&ctl);
    wc_open(&ctl);
    if (b->own_broker) {
        sleep_ms(100);
        if (broker_restart(b) < 0) {
            res_error(r, "cannot restart the broker");
            goto out;
        }
        pid = b->broker_pid;
    } else {
        sleep_ms(500);     /* let the broker see the closes */
    }
    for (int i = 0; i < nlc; i++) {
        if ((rc = wc_dial(&lc[i], b->socket_path)) != 0) {
            res_error(r, "broker: %s", rc == COORD_ECONNECT ? strerror(errno) : code_name(rc));
            goto out;
        }
    }
    long rss2 = settle_rss(pid);
    t0 = now_ns();
    if (hold_locks(b, lc, nlc, nlocks, &err) < 0) {
        res_error(r, "acquiring %d locks: %s", nlocks, code_name(err));
        goto out;
    }
    secs = (double)(now_ns() - t0) / 1e9;
    long rss3 = settle_rss(pid);
    grow = (double)(rss3 - rss2) * 1024.0;
    res_abs(r, "100000 held locks", "RSS growth, held locks", grow / 1048576.0, "MiB",
            CMP_LE, 64);
    res_info(r, "bytes per lock", grow / nlocks, "B");
    res_info(r, "RSS before locks", (double)rss2 / 1024.0, "MiB");
    res_info(r, "pipelined acquire rate", nlocks / secs, "/s");
    if (!b->own_broker)
        res_note(r, "running broker: RSS growth is measured against what it already holds");
out:
    for (int i = 0; i < nlc; i++)
        wc_close(&lc[i]);
    wc_close(&ctl);
    free(fds);
    if (b->own_broker && r->status != SC_ERROR) {
        sleep_ms(50);
        broker_restart(b);    /* leave a small broker to what follows */
    }
}
