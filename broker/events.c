/* events.c - lifecycle events of the tables, as {ev:"lifecycle", channel,
 * what, ...} on the broker's channels of the entity's scope.  Cheap when
 * nobody watches: one counter test.  Never a flight's result payload. */
#include "broker.h"
#include "channels.h"
#include "events.h"
#include "locks.h"
#include "records.h"

void events_lock(struct broker *b, const char *what, const struct lock_req *r,
                 const char *reason)
{
    if (!channels_watched(CH_LOCKS))
        return;
    uint32_t nlen;
    const uint8_t *name = lock_req_name(r, &nlen);
    coord_enc e;
    channels_event_begin(CH_LOCKS, &e, what);
    coord_enc_kv_name(&e, "name", name, nlen);
    coord_enc_kv_uint(&e, "lock", r->id);
    coord_enc_kv_cstr(&e, "mode", r->mode == LOCK_SHARED ? "shared" : "exclusive");
    if (r->granted)
        coord_enc_kv_uint(&e, "token", r->token);
    coord_enc_kv_uint(&e, "conn", r->conn->id);
    coord_enc_kv_uint(&e, "pid", r->conn->pid);
    if (reason)
        coord_enc_kv_cstr(&e, "reason", reason);
    coord_enc_kv_uint(&e, "at_ms", wall_ms());
    (void)b;
    channels_event_end(CH_LOCKS, &e, r->conn->scope, r->conn->scope_len);
}

void events_flight(struct broker *b, const char *what, uint64_t flight, uint64_t fence,
                   const uint8_t *skey, size_t sklen, uint32_t scope_len,
                   const char *reason)
{
    if (!channels_watched(CH_FLIGHTS))
        return;
    const uint8_t *scope = skey + 4;     /* scoped key: length, scope, name */
    coord_enc e;
    channels_event_begin(CH_FLIGHTS, &e, what);
    coord_enc_kv_name(&e, "key", skey + 4 + scope_len, sklen - 4 - scope_len);
    coord_enc_kv_uint(&e, "flight", flight);
    coord_enc_kv_uint(&e, "fence", fence);
    if (reason)
        coord_enc_kv_cstr(&e, "reason", reason);
    coord_enc_kv_uint(&e, "at_ms", wall_ms());
    (void)b;
    channels_event_end(CH_FLIGHTS, &e, scope, scope_len);
}

void events_leader(struct broker *b, const char *what, const uint8_t *skey, size_t sklen,
                   uint32_t scope_len, uint64_t generation, const char *reason)
{
    if (!channels_watched(CH_LEADERS))
        return;
    const uint8_t *scope = skey + 4;     /* scoped key: length, scope, name */
    coord_enc e;
    channels_event_begin(CH_LEADERS, &e, what);
    coord_enc_kv_name(&e, "workstream", skey + 4 + scope_len, sklen - 4 - scope_len);
    coord_enc_kv_uint(&e, "generation", generation);
    if (reason)
        coord_enc_kv_cstr(&e, "reason", reason);
    coord_enc_kv_uint(&e, "at_ms", wall_ms());
    (void)b;
    channels_event_end(CH_LEADERS, &e, scope, scope_len);
}
