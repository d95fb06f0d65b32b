/* deadline.c - binary min-heap of deadlines driving one timer. */
#include <stdlib.h>
#include "deadline.h"

static struct {
    uv_loop_t *loop;
    uv_timer_t timer;
    struct deadline **heap;
    size_t n, cap;
    int firing;
} dl;

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

static void on_timer(uv_timer_t *t);

static void rearm(void)
{
    if (dl.firing)
        return;
    if (dl.n == 0) {
        uv_timer_stop(&dl.timer);
        return;
    }
    uint64_t now = uv_now(dl.loop), at = dl.heap[0]->at;
    uv_timer_start(&dl.timer, on_timer, at > now ? at - now : 0, 0);
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

static void on_timer(uv_timer_t *t)
{
    (void)t;
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

void deadlines_init(uv_loop_t *loop)
{
    dl.loop = loop;
    uv_timer_init(loop, &dl.timer);
}

void deadlines_free(void)
{
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
