/* budget.h - the broker-wide budget of held state.
 *
 * Every entry the broker keeps for a client costs memory until the client
 * lets go of it: a lock held, a request waiting (lock waits, flight joins,
 * campaigns), a flight owned, a flight watched (notify), a channel
 * subscription.  The per-connection caps (coord-limits.h) stop one runaway
 * process; this budget stops many of them together (65,536 locks on each of
 * 4,096 connections would be hundreds of GiB).  Past it a request that
 * would hold more gets LIMIT, saying so; what is held already is never
 * taken away.  `stats` shows held_entries and limits.max_held.
 *
 * The loop thread alone touches it. */
#ifndef COORD_BUDGET_H
#define COORD_BUDGET_H

#include <stdbool.h>
#include <stdint.h>

struct conn;

struct held_budget {
    uint64_t used;      /* entries held now, by every connection */
    uint64_t max;       /* --max-held */
    uint64_t refused;   /* requests refused because it was full */
};
extern struct held_budget held_budget;

static inline bool budget_full(void) { return held_budget.used >= held_budget.max; }
static inline void budget_take(void) { held_budget.used++; }
static inline void budget_give(void) { held_budget.used--; }

/* Replies LIMIT to rid: the budget is full (and counts the refusal). */
void budget_refuse(struct conn *c, uint64_t rid);

#endif
