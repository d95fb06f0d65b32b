/* ids.c - see ids.h. */
#include <stdlib.h>
#include <time.h>
#include "log.h"
#include "errors.h"
#include "ids.h"
#include "store.h"

#define COUNTER_END (1ull << IDS_COUNTER_BITS)
#define CLOCK_BASE 1767225600ull           /* 2026-01-01T00:00:00Z */

static struct {
    struct store *store;
    uint64_t epoch;
    uint64_t counter;                      /* ids issued in this epoch */
    uint64_t reserved;                     /* the next epoch, once stored */
    bool reserving;                        /* its job is on its way */
    uint64_t last;
} I;

uint64_t ids_clock_floor(void)
{
    time_t now = time(NULL);
    return (uint64_t)now > CLOCK_BASE ? (uint64_t)now - CLOCK_BASE : 0;
}

int ids_start(struct store *l, char *err, size_t errsize)
{
    I.store = l;
    I.epoch = store_epoch(l, ids_clock_floor(), err, errsize);
    I.counter = 0;
    return I.epoch ? 0 : -1;
}

uint64_t ids_epoch(void) { return I.epoch; }
uint64_t ids_last(void) { return I.last; }

struct epoch_job {
    struct store_job job;
    uint64_t floor;
    uint64_t stored;
};

static int apply_epoch(struct store *l, MDB_txn *txn, struct store_job *job)
{
    struct epoch_job *ej = (struct epoch_job *)job;
    return store_put_epoch(l, txn, ej->floor, &ej->stored);
}

static void epoch_done(struct store_job *job, int status)
{
    struct epoch_job *ej = (struct epoch_job *)job;
    I.reserving = false;
    if (status == 0)
        I.reserved = ej->stored;
    else
        log_event(LOG_ERROR, "ids.epoch_failed", "status=%d", status);
    free(ej);
}

/* Half the counter is used: store the next epoch in the background. */
static void reserve_next(void)
{
    struct epoch_job *ej = calloc(1, sizeof *ej);
    if (!ej)
        return;
    ej->floor = I.epoch + 1 > ids_clock_floor() ? I.epoch + 1 : ids_clock_floor();
    ej->job.apply = apply_epoch;
    ej->job.done = epoch_done;
    I.reserving = true;
    store_submit(I.store, &ej->job);
}

uint64_t ids_next(void)
{
    if (I.counter == COUNTER_END / 2 && !I.reserving && !I.reserved)
        reserve_next();
    if (I.counter + 1 >= COUNTER_END) {
        uint64_t next = I.reserved;
        if (!next) {
            /* more than 2^20 ids within one disk write: store it now */
            char err[256];
            next = store_epoch(I.store, I.epoch + 1, err, sizeof err);
            if (!next) {
                log_event(LOG_ERROR, "ids.epoch_failed", "error=\"%s\"", err);
                abort();           /* an id issued twice would break fencing */
            }
        }
        I.epoch = next;
        I.reserved = 0;
        I.counter = 0;
    }
    I.last = (I.epoch << IDS_COUNTER_BITS) | ++I.counter;
    return I.last;
}
