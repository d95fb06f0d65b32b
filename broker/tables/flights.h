/* flights.h - the single-flight table (flight.* ops). */
#ifndef COORD_FLIGHTS_H
#define COORD_FLIGHTS_H

#include "conn.h"

void flights_init(struct broker *b);
/* The owner's connection closed: its flights get new owners. */
void flights_conn_closed(struct conn *c);
void flights_stats(coord_enc *e);
/* The later counters (superseded, follower timeouts, failed record reads,
 * version splits): in the part of stats a small max_frame may leave out. */
void flights_stats_transitions(coord_enc *e);
/* record.purge: ends every flight (running or completing) whose scoped key
 * starts with the scoped prefix sprefix (flights.c's top comment says
 * how).  Returns how many. */
uint64_t flights_purge(const uint8_t *sprefix, size_t plen);

#endif
