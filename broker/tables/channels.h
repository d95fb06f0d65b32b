/* channels.h - channels (sub.* ops) and the broker's lifecycle channels. */
#ifndef COORD_CHANNELS_H
#define COORD_CHANNELS_H

#include <stdbool.h>
#include "broker.h"

enum system_channel { CH_LOCKS = 0, CH_FLIGHTS = 1, CH_LEADERS = 2 };

void channels_init(struct broker *b);
void channels_conn_closed(struct conn *c);
void channels_stats(coord_enc *e);
/* Cheap check before building an event: does anyone listen, in any scope? */
bool channels_watched(enum system_channel which);
/* Build a lifecycle event: begin, add fields, end (delivers it to the
 * subscribers of that channel in scope). */
coord_enc *channels_event_begin(enum system_channel which, coord_enc *e, const char *what);
void channels_event_end(enum system_channel which, coord_enc *e,
                        const uint8_t *scope, uint32_t scope_len);

#endif
