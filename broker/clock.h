/* clock.h - the broker's clocks, all in one place.
 *
 *   loop time   broker_now_ms (broker.h): libuv's time, read once per loop
 *               turn; deadlines, leases, waits, rates.  Everything in one
 *               turn sees the same instant, and nothing moves it mid-turn.
 *   monotonic   mono_ms, now_us: the real monotonic clock, for what must
 *               not wait for the next turn (arming the deadline timer,
 *               latencies, the writer thread, log rates).
 *   wall        wall_ms: the Unix epoch, for what is stored or shown
 *               (records' created_ms, terms' elected_ms, events' at_ms).
 * Safe from any thread. */
#ifndef COORD_BROKER_CLOCK_H
#define COORD_BROKER_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds: the clock libuv's loop time is read
 * from. */
uint64_t mono_ms(void);
/* CLOCK_MONOTONIC in microseconds. */
uint64_t now_us(void);
/* CLOCK_REALTIME in milliseconds since the Unix epoch. */
uint64_t wall_ms(void);

#endif
