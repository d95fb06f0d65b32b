/* ids.h - the one allocator of the ids the broker hands out: lock tokens,
 * flight ids and fences.
 *
 * An id is epoch * 2^21 + counter.  The epoch is stored durably before the
 * first client is accepted, and is the larger of the stored epoch + 1 and
 * the wall-clock seconds since 2026-01-01 UTC, so ids keep increasing
 * across restarts and across a data dir deleted while the broker was down;
 * they stay below 2^53 (exact in every language's plain numbers) until the
 * year 2162.  When half of an epoch's counter is used, the next epoch is
 * stored by a ledger job, so the counter's end never waits for a disk.
 *
 * The guarantee assumes a clock that does not jump back, and an epoch that
 * has not run ahead of it (on average more than one start, or 2^21 ids,
 * per second).  Ids of the earlier format (epoch << 32 | counter) stay
 * below every id of this one: the first epoch after them is raised above
 * their range. */
#ifndef COORD_IDS_H
#define COORD_IDS_H

#include <stddef.h>
#include <stdint.h>

struct store;

#define IDS_COUNTER_BITS 21

/* Stores the first epoch (synchronously: nothing is served before).
 * Returns 0, or -1 with err. */
int ids_start(struct store *l, char *err, size_t errsize);
uint64_t ids_next(void);
uint64_t ids_epoch(void);
/* The last id handed out (0 before the first). */
uint64_t ids_last(void);
/* Seconds since 2026-01-01 UTC: the epoch's floor. */
uint64_t ids_clock_floor(void);

#endif
