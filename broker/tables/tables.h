/* tables.h - the hooks every state table of the broker (locks, flights,
 * leaders, channels) provides for a connection's life and for shutdown. */
#ifndef COORD_TABLES_H
#define COORD_TABLES_H

struct conn;
struct broker;

#include <stddef.h>

/* 0, or -1 with err. */
int tables_init(struct broker *b, char *err, size_t errsize);
/* A connection went: the tables release what it held at once. */
void tables_conn_closed(struct conn *c);
void tables_shutdown(struct broker *b);

#endif
