/* events.c - builds lifecycle events and hands them to the channels. */
#include "broker.h"
#include "events.h"
#include "locks.h"

void events_lock(struct broker *b, const char *what, const struct lock_req *r,
                 const char *reason)
{
    (void)b; (void)what; (void)r; (void)reason;
}

void events_flight(struct broker *b, const char *what, uint64_t flight, uint64_t fence,
                   const uint8_t *skey, size_t sklen, uint32_t scope_len,
                   const char *reason)
{
    (void)b; (void)what; (void)flight; (void)fence; (void)skey; (void)sklen;
    (void)scope_len; (void)reason;
}

void events_leader(struct broker *b, const char *what, const uint8_t *skey, size_t sklen,
                   uint32_t scope_len, uint64_t generation, const char *reason)
{
    (void)b; (void)what; (void)skey; (void)sklen; (void)scope_len; (void)generation;
    (void)reason;
}
