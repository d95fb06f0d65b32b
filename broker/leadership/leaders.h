/* leaders.h - leadership over the fence ledger (leader.* ops; the ledger
 * itself is leader-ledger.h). */
#ifndef COORD_LEADERS_H
#define COORD_LEADERS_H

#include "conn.h"

/* Opens the leader ledger named by --ledger.  0, or -1 with err. */
int leaders_init(struct broker *b, char *err, size_t errsize);
/* Shutdown: answers what waits on the leader ledger, then closes it. */
void leaders_stop(void);
/* Reads the descriptor files of the config dir (leader-config.c): at
 * start, on SIGHUP, and on broker.reload. */
void leaders_config_load(struct broker *b);
/* Shutdown: the stores of descriptor files tried again are dropped. */
void leaders_config_stop(void);
/* The connection closed: whatever it led is lost (reason disconnected). */
void leaders_conn_closed(struct conn *c);
void leaders_stats(coord_enc *e);
/* The max-hold and claim counters: sent after the fixed counters, so that
 * with the smallest max_frame they are left out (truncated). */
void leaders_stats_holds_claims(coord_enc *e);

#endif
