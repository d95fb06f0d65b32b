/* channels.h - channels (sub.* ops) and the broker's lifecycle channels. */
#ifndef COORD_CHANNELS_H
#define COORD_CHANNELS_H

#include <stdbool.h>
#include "broker.h"

enum system_channel { CH_LOCKS = 0, CH_FLIGHTS = 1, CH_LEADERS = 2 };

void channels_init(struct broker *b);
void channels_conn_closed(struct conn *c);
void channels_stats(coord_enc *e);
/* Subscribers of each lifecycle channel across scopes (channels.c keeps
 * them; read only through channels_watched). */
extern unsigned channels_system_subs[3];
/* Cheap check before building an event: does anyone listen, in any scope?
 * Inline: every lock cycle asks it twice. */
static inline bool channels_watched(enum system_channel which)
{
    return channels_system_subs[which] > 0;
}
/* Build a lifecycle event: begin, add fields, end (delivers it to the
 * subscribers of that channel in scope). */
coord_enc *channels_event_begin(enum system_channel which, coord_enc *e, const char *what);
void channels_event_end(enum system_channel which, coord_enc *e,
                        const uint8_t *scope, uint32_t scope_len);

#endif
