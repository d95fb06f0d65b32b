/* deadline.c - binary min-heap of deadlines driving one timer.
 *
 * The timer is a timerfd polled by the loop, not a uv_timer: with a
 * uv_timer pending (and a held lease, a leader's lease or a lock wait keeps
 * one pending) every epoll_wait of the loop is given a timeout, which arms
 * and cancels a kernel timer around each sleep, once per request on a busy
 * broker (0.4 us of a 3 us round trip in a VM, measured).  The timerfd is
 * armed lazily instead: only when the earliest deadline comes before the
 * time it is armed for.  A deadline cancelled or moved later leaves it
 * armed; it then fires once for nothing and is armed for the new earliest.
 * So a lock taken and released over and over with the same lease re-arms
 * it once per lease period, and the loop sleeps without a timeout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "clock.h"
#include "deadline.h"

static struct {
    uv_loop_t *loop;
    uv_poll_t poll;
    int fd;                        /* timerfd on CLOCK_MONOTONIC, or -1 */
    uint64_t armed;                /* loop time it fires at; 0: disarmed */
    struct deadline **heap;
    size_t n, cap;
    int firing;
} dl = { .fd = -1 };

static void swap_at(size_t i, size_t j)
{
    struct deadline *t = dl.heap[i];
    dl.heap[i] = dl.heap[j];
    dl.heap[j] = t;
    dl.heap[i]->slot = i + 1;
    dl.heap[j]->slot = j + 1;
}

static void sift_up(size_t i)
{
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (dl.heap[p]->at <= dl.heap[i]->at)
            break;
        swap_at(i, p);
        i = p;
    }
}

static void sift_down(size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < dl.n && dl.heap[l]->at < dl.heap[m]->at) m = l;
        if (r < dl.n && dl.heap[r]->at < dl.heap[m]->at) m = r;
        if (m == i)
            break;
        swap_at(i, m);
        i = m;
    }
}

/* Arms the timerfd for loop time `at`, relative to the monotonic clock
 * read now (the loop's time, cached for this turn, may be a whole turn
 * old, and the timer would fire that much late; updating it here would
 * move the time of the turn under its callers): so it fires once the
 * loop's clock reads `at`, like a uv_timer. */
static void arm(uint64_t at)
{
    uint64_t now = mono_ms(), ms = at > now ? at - now : 0;
    /* a loop clock read from CLOCK_MONOTONIC_COARSE lags up to 1 ms: a
     * deadline it has not reached yet is armed 1 ms on, not at once */
    if (ms == 0 && at > uv_now(dl.loop))
        ms = 1;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    its.it_value.tv_sec = (time_t)(ms / 1000);
    its.it_value.tv_nsec = (long)(ms % 1000) * 1000000L;
    if (ms == 0)
        its.it_value.tv_nsec = 1;  /* due: at once (zero would disarm it) */
    if (timerfd_settime(dl.fd, 0, &its, NULL) < 0)
        abort();                   /* only EINVAL/EFAULT: a bug, and a lost
                                      timeout would break a promise */
    dl.armed = at > now ? at : now;
}

/* After the heap's head changed: armed early enough, or armed now. */
static void rearm(void)
{
    if (dl.firing || dl.n == 0)
        return;
    uint64_t at = dl.heap[0]->at;
    if (!dl.armed || at < dl.armed)
        arm(at);
}

static void remove_at(size_t i)
{
    struct deadline *d = dl.heap[i];
    dl.n--;
    if (i != dl.n) {
        dl.heap[i] = dl.heap[dl.n];
        dl.heap[i]->slot = i + 1;
        sift_down(i);
        sift_up(i);
    }
    d->slot = 0;
}

static void on_timer(uv_poll_t *p, int status, int events)
{
    (void)p;
    (void)status;
    (void)events;
    uint64_t expirations;
    if (read(dl.fd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
        return;                    /* not readable after all: polled again */
    dl.armed = 0;
    uint64_t now = uv_now(dl.loop);
    dl.firing = 1;
    while (dl.n > 0 && dl.heap[0]->at <= now) {
        struct deadline *d = dl.heap[0];
        remove_at(0);
        d->fire(d);              /* may set or cancel other deadlines */
    }
    dl.firing = 0;
    rearm();
}

int deadlines_init(uv_loop_t *loop, char *err, size_t errsize)
{
    dl.loop = loop;
    dl.armed = 0;
    dl.fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    int rc = dl.fd < 0 ? uv_translate_sys_error(errno) : uv_poll_init(loop, &dl.poll, dl.fd);
    if (rc == 0)
        rc = uv_poll_start(&dl.poll, UV_READABLE, on_timer);
    if (rc) {
        snprintf(err, errsize, "cannot create the broker's timer: %s", uv_strerror(rc));
        if (dl.fd >= 0)
            close(dl.fd);
        dl.fd = -1;
        return -1;
    }
    return 0;
}

void deadlines_free(void)
{
    if (dl.fd >= 0)
        close(dl.fd);
    dl.fd = -1;
    free(dl.heap);
    dl.heap = NULL;
    dl.n = dl.cap = 0;
}

size_t deadlines_count(void) { return dl.n; }

void deadline_cancel(struct deadline *d)
{
    if (!d->slot)
        return;
    int was_head = d->slot == 1;
    remove_at(d->slot - 1);
    if (was_head)
        rearm();
}

void deadline_set(struct deadline *d, uint64_t at, void (*fire)(struct deadline *d))
{
    d->fire = fire;
    if (d->slot) {
        d->at = at;
        int was_head = d->slot == 1;
        sift_down(d->slot - 1);
        sift_up(d->slot - 1);
        if (was_head || d->slot == 1)
            rearm();
        return;
    }
    if (dl.n == dl.cap) {
        size_t cap = dl.cap ? dl.cap * 2 : 64;
        struct deadline **h = realloc(dl.heap, cap * sizeof *h);
        if (!h)
            abort();           /* a lost timeout would break a promise */
        dl.heap = h;
        dl.cap = cap;
    }
    d->at = at;
    dl.heap[dl.n] = d;
    d->slot = ++dl.n;
    sift_up(dl.n - 1);
    if (d->slot == 1)
        rearm();
}
