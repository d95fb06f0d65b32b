/* histo.c - see histo.h. */
#include <time.h>
#include "histo.h"

struct histo latencies[LAT_COUNT];

static unsigned bucket_of(uint64_t us)
{
    if (us < 64)
        return (unsigned)us;
    unsigned e = 63u - (unsigned)__builtin_clzll(us);   /* 6.. */
    unsigned sub = (unsigned)((us >> (e - 5)) & (HISTO_SUB - 1));
    unsigned b = 64 + (e - 6) * HISTO_SUB + sub;
    return b < HISTO_BUCKETS ? b : HISTO_BUCKETS - 1;
}

/* The largest value of bucket b. */
static uint64_t bucket_top(unsigned b)
{
    if (b < 64)
        return b;
    unsigned e = (b - 64) / HISTO_SUB + 6, sub = (b - 64) % HISTO_SUB;
    return (((uint64_t)HISTO_SUB + sub + 1) << (e - 5)) - 1;
}

void histo_add(struct histo *h, uint64_t us)
{
    h->count++;
    if (us > h->max_us)
        h->max_us = us;
    h->n[bucket_of(us)]++;
}

uint64_t histo_quantile(const struct histo *h, double q)
{
    if (!h->count)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if (rank >= h->count)
        rank = h->count - 1;
    uint64_t seen = 0;
    for (unsigned b = 0; b < HISTO_BUCKETS; b++) {
        seen += h->n[b];
        if (seen > rank) {
            uint64_t top = bucket_top(b);
            return top < h->max_us ? top : h->max_us;
        }
    }
    return h->max_us;
}

void histo_encode(coord_enc *e, const char *key, const struct histo *h)
{
    coord_enc_key(e, key);
    coord_enc_map_begin(e);
    coord_enc_kv_uint(e, "count", h->count);
    coord_enc_kv_double(e, "p50_ms", (double)histo_quantile(h, 0.50) / 1000.0);
    coord_enc_kv_double(e, "p99_ms", (double)histo_quantile(h, 0.99) / 1000.0);
    coord_enc_kv_double(e, "max_ms", (double)h->max_us / 1000.0);
    coord_enc_map_end(e);
}

void latency_add(enum latency which, uint64_t us)
{
    histo_add(&latencies[which], us);
}

void latency_encode(coord_enc *e)
{
    static const char *const names[LAT_COUNT] = {
        "lock_wait", "lock_hold", "flight_run", "follower_wait", "leader_transition",
    };
    coord_enc_key(e, "latency");
    coord_enc_map_begin(e);
    for (int i = 0; i < LAT_COUNT; i++)
        histo_encode(e, names[i], &latencies[i]);
    coord_enc_map_end(e);
}

