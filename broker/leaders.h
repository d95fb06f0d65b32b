/* leaders.h - leadership and the fence ledger (leader.* ops). */
#ifndef COORD_LEADERS_H
#define COORD_LEADERS_H

#include "broker.h"

void leaders_init(struct broker *b);
/* The connection closed: whatever it led is lost (reason disconnected). */
void leaders_conn_closed(struct conn *c);
void leaders_stats(coord_enc *e);

#endif
