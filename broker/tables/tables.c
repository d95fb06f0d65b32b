/* tables.c - fans the connection and shutdown hooks out to every table. */
#include "broker.h"
#include "channels.h"
#include "deadline.h"
#include "flight-gates.h"
#include "flights.h"
#include "leaders.h"
#include "locks.h"
#include "records.h"
#include "tables.h"

int tables_init(struct broker *b, char *err, size_t errsize)
{
    if (deadlines_init(b->loop, err, errsize) < 0)
        return -1;
    locks_init(b);
    flights_init(b);
    if (gates_init(b, err, errsize) < 0)
        return -1;
    if (leaders_init(b, err, errsize) < 0)
        return -1;
    channels_init(b);
    records_init(b);
    return 0;
}

void tables_conn_closed(struct conn *c)
{
    lockops_conn_closed(c);
    flights_conn_closed(c);
    leaders_conn_closed(c);
    channels_conn_closed(c);
}

void tables_shutdown(struct broker *b)
{
    (void)b;
    records_stop();
    leaders_stop();
}
