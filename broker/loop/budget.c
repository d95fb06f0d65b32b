/* budget.c - see budget.h. */
#include <stdio.h>
#include "conn.h"
#include "budget.h"
#include "coord-codes.h"

struct held_budget held_budget;

void budget_refuse(struct conn *c, uint64_t rid)
{
    char msg[128];
    held_budget.refused++;
    snprintf(msg, sizeof msg, "the broker holds its limit of %llu locks, waiting requests, "
             "flights and subscriptions (--max-held)", (unsigned long long)held_budget.max);
    conn_reply_error(c, rid, COORD_ELIMIT, msg);
}
