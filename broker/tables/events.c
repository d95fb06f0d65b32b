/* events.c - lifecycle events of the tables, as {ev:"lifecycle", channel,
 * what, ...} on the broker's channels of the entity's scope.  Cheap when
 * nobody watches: one counter test.  Never a flight's result payload. */
#include "log.h"
#include "conn.h"
#include "channels.h"
#include "events.h"
#include "leader-desc.h"
#include "locks.h"
#include "records.h"
#include "skey.h"

static void add_reason(coord_enc *e, enum reason reason)
{
    if (reason != REASON_NONE)
        coord_enc_kv_cstr(e, "reason", reason_name(reason));
}

static void finish(enum system_channel which, coord_enc *e, const uint8_t *skey)
{
    coord_enc_kv_uint(e, "at_ms", wall_ms());
    channels_event_end(which, e, skey_scope(skey), skey_scope_len(skey));
}

void events_lock_publish(const char *what, const struct lock_req *r, enum reason reason)
{
    size_t klen, nlen;
    const uint8_t *skey = lock_req_skey(r, &klen);
    const uint8_t *name = skey_name(skey, klen, &nlen);
    coord_enc e;
    channels_event_begin(CH_LOCKS, &e, what);
    coord_enc_kv_name(&e, "name", name, nlen);
    coord_enc_kv_uint(&e, "lock", r->id);
    coord_enc_kv_cstr(&e, "mode", r->mode == LOCK_SHARED ? "shared" : "exclusive");
    if (r->granted)
        coord_enc_kv_uint(&e, "token", r->token);
    coord_enc_kv_uint(&e, "conn", r->conn->id);
    coord_enc_kv_uint(&e, "pid", r->conn->pid);
    add_reason(&e, reason);
    finish(CH_LOCKS, &e, skey);
}

void events_flight(const struct flight_event *ev)
{
    if (!channels_watched(CH_FLIGHTS))
        return;
    size_t nlen;
    const uint8_t *key = skey_name(ev->skey, ev->sklen, &nlen);
    coord_enc e;
    channels_event_begin(CH_FLIGHTS, &e, ev->what);
    coord_enc_kv_name(&e, "key", key, nlen);
    coord_enc_kv_uint(&e, "flight", ev->flight);
    coord_enc_kv_uint(&e, "fence", ev->fence);
    add_reason(&e, ev->reason);
    if (ev->owner) {
        const struct conn *o = ev->owner;
        coord_enc_kv_uint(&e, "conn", o->id);
        coord_enc_kv_cstr(&e, "client", o->client ? o->client : "");
        coord_enc_kv_uint(&e, "pid", o->pid);
        coord_enc_kv_cstr(&e, "instance", o->instance ? o->instance : "");
    }
    if (ev->started_ms)
        coord_enc_kv_uint(&e, "started_ms", ev->started_ms);
    if (ev->deadline_ms)
        coord_enc_kv_uint(&e, "deadline_ms", ev->deadline_ms);
    if (ev->version_len)
        coord_enc_kv_name(&e, "version", ev->version, ev->version_len);
    if (ev->failed) {
        coord_enc_kv_name(&e, "code", ev->code_len ? ev->code : (const uint8_t *)"",
                          ev->code_len);
        coord_enc_kv_bool(&e, "retryable", ev->retryable);
    }
    if (ev->duration_ms >= 0)
        coord_enc_kv_uint(&e, "duration_ms", (uint64_t)ev->duration_ms);
    if (ev->wait_ms >= 0)
        coord_enc_kv_uint(&e, "wait_ms", (uint64_t)ev->wait_ms);
    finish(CH_FLIGHTS, &e, ev->skey);
}

void events_leader(const char *what, const uint8_t *skey, size_t sklen,
                   uint64_t generation, enum reason reason)
{
    events_leader_ex(what, skey, sklen, generation, reason, NULL, 0, -1);
}

void events_leader_ex(const char *what, const uint8_t *skey, size_t sklen,
                      uint64_t generation, enum reason reason,
                      const uint8_t *incident, size_t incident_len, int mode)
{
    if (!channels_watched(CH_LEADERS))
        return;
    size_t nlen;
    const uint8_t *name = skey_name(skey, sklen, &nlen);
    coord_enc e;
    channels_event_begin(CH_LEADERS, &e, what);
    coord_enc_kv_name(&e, "workstream", name, nlen);
    coord_enc_kv_uint(&e, "generation", generation);
    add_reason(&e, reason);
    if (incident_len)
        coord_enc_kv_name(&e, "incident", incident, incident_len);
    if (mode >= 0)
        coord_enc_kv_cstr(&e, "mode", ws_mode_name((unsigned)mode));
    finish(CH_LEADERS, &e, skey);
}
