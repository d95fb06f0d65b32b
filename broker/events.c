/* events.c - builds lifecycle events and hands them to the channels. */
#include "broker.h"
#include "events.h"
#include "locks.h"

void events_lock(struct broker *b, const char *what, const struct lock_req *r,
                 const char *reason)
{
    (void)b; (void)what; (void)r; (void)reason;
}
