/* sc-ref.c - result-by-ref: one owner completes a flight with a 64 MiB
 * sealed memfd (flight.complete result_fd, the descriptor passed with
 * SCM_RIGHTS) while 100 followers wait on the key; each follower gets its
 * own descriptor and reads all the bytes (mmap, a checksum checked against
 * the owner's).  Reported:
 *   - the time from the completion being sent to the last follower having
 *     its descriptor, and to every follower having read every byte;
 *   - those reads against the same reads of the owner's own memfd in this
 *     process (100 mmaps and checksums, same threads, before and after the
 *     followers': the faster counts): the work with no broker in the way;
 *   - per byte delivered, by reference against the same 100 followers
 *     getting an inline result of the largest size a frame allows;
 *   - the broker's VmHWM (peak RSS) before and after each: the bytes by
 *     reference never enter the broker's memory, inline ones are copied into
 *     each follower's output buffer.
 * The followers are connections of this process read by one epoll thread;
 * the reads run on two threads. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include "bench.h"
#include "fdpass.h"

#define READERS 2

/* The checksum of n bytes (n a multiple of 8): memory-bound, like a
 * follower that looks at every byte. */
static uint64_t checksum(const uint8_t *p, size_t n)
{
    const uint64_t *w = (const uint64_t *)p;
    uint64_t s = 0;
    for (size_t i = 0; i < n / 8; i++)
        s += w[i] ^ (uint64_t)i;
    return s;
}

struct readjob {
    const int *fds;
    int from, to;
    size_t size;
    uint64_t want;
    int bad;
};

static void *reader(void *arg)
{
    struct readjob *j = arg;
    for (int i = j->from; i < j->to; i++) {
        void *p = mmap(NULL, j->size, PROT_READ, MAP_SHARED, j->fds[i], 0);
        if (p == MAP_FAILED) {
            j->bad++;
            continue;
        }
        if (checksum(p, j->size) != j->want)
            j->bad++;
        munmap(p, j->size);
    }
    return NULL;
}

/* Maps and checksums each of fds[0..n) on READERS threads: seconds, and
 * *bad the descriptors whose bytes were wrong. */
static double read_all(const int *fds, int n, size_t size, uint64_t want, int *bad)
{
    pthread_t t[READERS];
    struct readjob j[READERS];
    uint64_t t0 = now_ns();
    for (int k = 0; k < READERS; k++) {
        j[k] = (struct readjob){ fds, n * k / READERS, n * (k + 1) / READERS, size, want, 0 };
        pthread_create(&t[k], NULL, reader, &j[k]);
    }
    *bad = 0;
    for (int k = 0; k < READERS; k++) {
        pthread_join(t[k], NULL);
        *bad += j[k].bad;
    }
    return (double)(now_ns() - t0) / 1e9;
}

static int hello_fds(struct wconn *w, const char *path)
{
    int rc = wc_connect(w, path);
    if (rc < 0)
        return COORD_ECONNECT;
    coord_enc e;
    wq_begin(w, &e, "hello");
    coord_enc_kv_uint(&e, "proto", 1);
    coord_enc_kv_cstr(&e, "client", "coord-bench");
    coord_enc_kv_bool(&e, "fds", true);
    wq_end(&e);
    return wc_call(w);
}

/* The owner's flight.complete, its first byte with fd when fd >= 0. */
static int send_complete(struct wconn *w, uint64_t flight, uint64_t fence, int fd,
                         uint64_t size, const uint8_t *inline_result)
{
    coord_enc e;
    wq_begin(w, &e, "flight.complete");
    coord_enc_kv_uint(&e, "flight", flight);
    coord_enc_kv_uint(&e, "fence", fence);
    if (fd >= 0)
        coord_enc_kv_uint(&e, "result_fd", size);
    else
        coord_enc_kv_bin(&e, "result", inline_result, (size_t)size);
    wq_end(&e);
    if (fd >= 0) {
        if (coord_send_with_fd(w->fd, w->out.data, 1, fd, 0) != 1)
            return -1;
        coord_buf_consume(&w->out, 1);
    }
    return wc_flush(w) < 0 ? -1 : 0;
}

/* One round: the owner joins key, n followers join and are in (a ping
 * after each join, answered after it), the owner completes (by reference
 * with fd, else inline with size bytes of data); every follower's answer is
 * read (by one epoll thread).  *deliver: seconds from the completion sent
 * to the last answer; fds[i]: follower i's descriptor (by reference).  0,
 * or -1 with why. */
static int one_round(struct wconn *own, struct wconn *f, int n, const char *key, int fd,
                     size_t size, const uint8_t *data, int *fds, double *deliver,
                     char *why, size_t whysz)
{
    coord_enc e;
    wq_begin(own, &e, "flight.join");
    coord_enc_kv_cstr(&e, "key", key);
    wq_end(&e);
    uint64_t flight = 0, fence = 0;
    if (wc_call(own) != 0 || !wm_is(own, "role", "owner") ||
        !wm_uint(own, "flight", &flight) || !wm_uint(own, "fence", &fence)) {
        snprintf(why, whysz, "the owner's join did not make it the owner");
        return -1;
    }
    uint64_t *join = calloc((size_t)n, sizeof *join), *ping = calloc((size_t)n, sizeof *ping);
    int (*fdq)[4] = calloc((size_t)n, sizeof *fdq);
    int *nfdq = calloc((size_t)n, sizeof *nfdq);
    int ep = epoll_create1(EPOLL_CLOEXEC), rc = -1;
    if (!join || !ping || !fdq || !nfdq || ep < 0) {
        snprintf(why, whysz, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        fds[i] = -1;
        join[i] = wq_begin(&f[i], &e, "flight.join");
        coord_enc_kv_cstr(&e, "key", key);
        coord_enc_kv_uint(&e, "wait_ms", 120000);
        wq_end(&e);
        ping[i] = wq_ping(&f[i]);
        struct epoll_event ev = { .events = EPOLLIN, .data.u32 = (uint32_t)i };
        if (wc_flush(&f[i]) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, f[i].fd, &ev) < 0) {
            snprintf(why, whysz, "follower %d: send failed", i);
            goto out;
        }
    }
    int pinged = 0, answered = 0;
    uint64_t t0 = 0, t_last = 0, deadline = now_ns() + 120000000000ull;
    struct epoll_event evs[64];
    while (answered < n) {
        if (pinged == n && t0 == 0) {
            t0 = now_ns();
            if (send_complete(own, flight, fence, fd, size, data) < 0) {
                snprintf(why, whysz, "sending flight.complete failed");
                goto out;
            }
        }
        if (now_ns() > deadline) {
            snprintf(why, whysz, "timed out: %d/%d in, %d/%d answered", pinged, n, answered, n);
            goto out;
        }
        int k = epoll_wait(ep, evs, 64, 1000);
        for (int j = 0; j < k; j++) {
            int i = (int)evs[j].data.u32;
            if (wc_fill_fds(&f[i], fdq[i], &nfdq[i], 4) <= 0) {
                snprintf(why, whysz, "follower %d: connection closed", i);
                goto out;
            }
            int got;
            while ((got = wc_next(&f[i])) == 1) {
                uint64_t rid = 0, rsize = 0;
                wm_uint(&f[i], "rid", &rid);
                if (rid == ping[i]) {
                    pinged++;
                    continue;
                }
                if (rid != join[i])
                    continue;
                const uint8_t *p;
                size_t plen;
                bool ok = wm_status(&f[i]) == 0 && wm_is(&f[i], "role", "result");
                if (ok && fd >= 0)
                    ok = wm_uint(&f[i], "result_fd", &rsize) && rsize == size &&
                         nfdq[i] > 0;
                else if (ok)
                    ok = wm_str(&f[i], "result", &p, &plen) && plen == size &&
                         memcmp(p, data, plen) == 0;
                if (!ok) {
                    snprintf(why, whysz, "follower %d: not the result", i);
                    goto out;
                }
                if (fd >= 0) {
                    fds[i] = fdq[i][0];
                    nfdq[i] = 0;
                }
                answered++;
                t_last = now_ns();
            }
            if (got < 0) {
                snprintf(why, whysz, "follower %d: malformed frame", i);
                goto out;
            }
        }
    }
    uint64_t delivered = 0;
    if (wc_read(own) < 0 || wm_status(own) != 0 || !wm_uint(own, "delivered", &delivered) ||
        delivered != (uint64_t)n) {
        snprintf(why, whysz, "the owner's completion was not answered delivered %d", n);
        goto out;
    }
    *deliver = (double)(t_last - t0) / 1e9;
    rc = 0;
out:
    for (int i = 0; nfdq && i < n; i++)
        for (int k = 0; k < nfdq[i]; k++)
            close(fdq[i][k]);
    free(join);
    free(ping);
    free(fdq);
    free(nfdq);
    if (ep >= 0)
        close(ep);
    return rc;
}

void sc_result_by_ref(struct bench *b, struct result *r)
{
    int n = (int)scaled(b, 100, 10);
    size_t size = (size_t)scaled(b, 64, 2) << 20;
    res_title(r, "a %zu MiB sealed memfd to %d followers by reference; inline results "
              "of a frame's size for comparison", size >> 20, n);
    if (broker_has_op(b, "flight.unref") == 0) {
        res_skip(r, "the broker has no results by reference");
        return;
    }
    long lim = raise_nofile();
    if (lim < 2 * n + 64) {
        res_skip(r, "RLIMIT_NOFILE is %ld, %d needed", lim, 2 * n + 64);
        return;
    }
    struct wconn own, *f = calloc((size_t)n, sizeof *f);
    int *fds = calloc((size_t)n, sizeof *fds), *mine = calloc((size_t)n, sizeof *mine);
    uint8_t *data = malloc(size);
    int memfd = -1, bad = 0, rc;
    char why[160];
    wc_open(&own);
    for (int i = 0; f && i < n; i++)
        wc_open(&f[i]);
    if (!f || !fds || !mine || !data) {
        res_error(r, "out of memory");
        goto out;
    }
    if ((rc = hello_fds(&own, b->socket_path)) != 0) {
        res_error(r, "broker: %s", code_name(rc));
        goto out;
    }
    uint64_t max_frame = 0;
    wm_uint(&own, "max_frame", &max_frame);
    for (int i = 0; i < n; i++)
        if ((rc = hello_fds(&f[i], b->socket_path)) != 0) {
            res_error(r, "follower %d: %s", i, code_name(rc));
            goto out;
        }
    pid_t pid = b->broker_pid ? b->broker_pid : peer_pid(own.fd);
    for (size_t i = 0; i < size; i += 8) {
        uint64_t v = (i / 8) * 0x9e3779b97f4a7c15ull + b->seq;
        memcpy(data + i, &v, 8);
    }
    uint64_t want = checksum(data, size);
    memfd = memfd_create("coord-bench-result", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0 || write(memfd, data, size) != (ssize_t)size ||
        fcntl(memfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        res_error(r, "memfd: %s", strerror(errno));
        goto out;
    }

    /* the baseline: the owner's own memfd read as often, no broker (once
     * before and once after the followers' reads: the faster counts) */
    for (int i = 0; i < n; i++)
        mine[i] = memfd;
    double t_local = read_all(mine, n, size, want, &bad);

    /* by reference */
    long hwm0 = hwm_kib(pid);
    double t_deliver = 0, t_inline = 0;
    char key[48];
    snprintf(key, sizeof key, "bench/ref-%u", ++b->seq);
    if (one_round(&own, f, n, key, memfd, size, NULL, fds, &t_deliver, why, sizeof why) < 0) {
        res_error(r, "by reference: %s", why);
        goto out;
    }
    double t_read = read_all(fds, n, size, want, &bad);
    long hwm1 = hwm_kib(pid);
    for (int i = 0; i < n; i++)
        close(fds[i]);
    if (bad) {
        res_error(r, "%d followers read other bytes than the owner's", bad);
        goto out;
    }
    double t_local2 = read_all(mine, n, size, want, &bad);
    if (t_local2 < t_local)
        t_local = t_local2;

    /* inline, the largest result a frame takes */
    size_t isize = (size_t)max_frame > 1024 ? (size_t)max_frame - 1024 : 0;
    if (isize > size)
        isize = size;
    snprintf(key, sizeof key, "bench/inline-%u", ++b->seq);
    if (isize == 0 ||
        one_round(&own, f, n, key, -1, isize, data, fds, &t_inline, why, sizeof why) < 0) {
        res_error(r, "inline: %s", isize ? why : "no max_frame in hello");
        goto out;
    }
    long hwm2 = hwm_kib(pid);

    double total = (double)n * (double)size, itotal = (double)n * (double)isize;
    res_abs(r, "deliver_ms", "completion sent -> last of the followers has its descriptor",
            t_deliver * 1e3, "ms", CMP_NONE, 0);
    res_abs(r, "deliver_read_ms", "completion sent -> every follower read every byte",
            (t_deliver + t_read) * 1e3, "ms", CMP_NONE, 0);
    res_ratio(r, "reads_vs_local", "followers' mmap+checksum of their descriptors",
              t_read * 1e3, "the owner's memfd read as often here", t_local * 1e3, "ms",
              false, CMP_NONE, 0);
    res_ratio(r, "per_byte_inline_vs_ref", "by reference, delivered and read, per byte",
              (t_deliver + t_read) / total * 1e9, "inline, delivered, per byte",
              t_inline / itotal * 1e9, "ns/B", true, CMP_NONE, 0);
    res_abs(r, "hwm_growth_ref", "broker VmHWM growth, by reference",
            (double)(hwm1 - hwm0) / 1024.0, "MiB", CMP_LE, 16);
    res_info(r, "broker VmHWM before", (double)hwm0 / 1024.0, "MiB");
    res_info(r, "broker VmHWM after by reference", (double)hwm1 / 1024.0, "MiB");
    res_info(r, "broker VmHWM after inline", (double)hwm2 / 1024.0, "MiB");
    res_info(r, "inline result size", (double)isize / 1048576.0, "MiB");
    res_info(r, "inline delivery", t_inline * 1e3, "ms");
    res_info(r, "by reference delivered", total / (t_deliver + t_read) / 1048576.0, "MiB/s");
    if (!b->own_broker)
        res_note(r, "running broker: VmHWM is its peak over its life so far");
out:
    if (memfd >= 0)
        close(memfd);
    for (int i = 0; f && i < n; i++)
        wc_close(&f[i]);
    wc_close(&own);
    free(f);
    free(fds);
    free(mine);
    free(data);
}
