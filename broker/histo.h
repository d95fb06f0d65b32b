/* histo.h - fixed-size latency histograms (no memory per event).
 *
 * Log-linear buckets over microseconds: exact below 64 us, then 32
 * buckets per power of two (a relative error under 3.2%), up to 2^40 us
 * (12 days; longer is counted in the last bucket).  `stats.latency`
 * reports count, p50, p99 and max of each. */
#ifndef COORD_HISTO_H
#define COORD_HISTO_H

#include "clock.h"
#include <stdint.h>
#include "enc.h"

#define HISTO_SUB 32
#define HISTO_BUCKETS (64 + 35 * HISTO_SUB)

struct histo {
    uint64_t count;
    uint64_t max_us;
    uint32_t n[HISTO_BUCKETS];
};

void histo_add(struct histo *h, uint64_t us);
/* The value (us) at quantile q (0..1), from the bucket's upper edge. */
uint64_t histo_quantile(const struct histo *h, double q);
/* {count, p50_ms, p99_ms, max_ms} under key. */
void histo_encode(coord_enc *e, const char *key, const struct histo *h);

/* The broker's: kept by the tables, reported by stats. */
enum latency {
    LAT_LOCK_WAIT,          /* lock.acquire: request to grant */
    LAT_LOCK_HOLD,          /* grant to release (or loss) */
    LAT_FLIGHT_RUN,         /* an owner's start to complete or fail */
    LAT_FOLLOWER_WAIT,      /* flight.join to its answer */
    LAT_LEADER_TRANSITION,  /* one term's end to the next grant */
    LAT_COUNT
};
extern struct histo latencies[LAT_COUNT];
void latency_add(enum latency which, uint64_t us);
void latency_encode(coord_enc *e);

#endif
