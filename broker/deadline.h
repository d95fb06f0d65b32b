/* deadline.h - every timeout of the broker's tables (lock waits and leases,
 * flight deadlines, leader leases, the record sweep) in one min-heap behind
 * one timer (a timerfd armed lazily: deadline.c), so a held lock with a
 * lease costs a few words, not a libuv handle. */
#ifndef COORD_DEADLINE_H
#define COORD_DEADLINE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct deadline {
    uint64_t at;                          /* loop time, ms */
    size_t slot;                          /* heap index + 1; 0 = not set */
    void (*fire)(struct deadline *d);
};

/* 0, or -1 with err (no timerfd could be made). */
int deadlines_init(uv_loop_t *loop, char *err, size_t errsize);
/* After the loop has closed every handle (the timer's poll included). */
void deadlines_free(void);
/* (Re)arms d to fire at loop time 'at'. */
void deadline_set(struct deadline *d, uint64_t at, void (*fire)(struct deadline *d));
void deadline_cancel(struct deadline *d);
static inline int deadline_active(const struct deadline *d) { return d->slot != 0; }
size_t deadlines_count(void);

#endif
