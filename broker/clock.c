/* clock.c - the broker's monotonic and wall clocks (clock.h). */
#include <time.h>
#include "clock.h"

static uint64_t read_us(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t mono_ms(void) { return read_us(CLOCK_MONOTONIC) / 1000u; }
uint64_t now_us(void) { return read_us(CLOCK_MONOTONIC); }
uint64_t wall_ms(void) { return read_us(CLOCK_REALTIME) / 1000u; }
