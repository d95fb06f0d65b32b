/* leader.c - libcoord's leadership calls on the leader's own term:
 * leader.campaign, renew, resign, drain, commit, read, info, disable,
 * enable, and reading the leadership events (leader.lost, leader.drain,
 * leader.mode).  The state of a campaign is in leader-term.c, descriptors
 * and history in leader-desc.c, claims and checks in leader-outbox.c.
 * Everything is built on the public request/reply calls of client.c. */
#include <stdlib.h>
#include <string.h>
#include "leader-internal.h"

coord_req_t *coord__ws_req(enum coord_op op, const void *ws, size_t ws_len)
{
    coord_req_t *r = coord__req_new(op);
    if (r)
        coord_req_str(r, "workstream", ws ? ws : "", ws_len);
    return r;
}

coord_req_t *coord__ws_gen_req(enum coord_op op, const void *ws, size_t ws_len,
                               uint64_t generation)
{
    coord_req_t *r = coord__ws_req(op, ws, ws_len);
    if (r)
        coord_req_uint(r, "generation", generation);
    return r;
}

void coord__strcpy_cut(char *dst, size_t size, const char *p, size_t n)
{
    if (n >= size)
        n = size - 1;
    memcpy(dst, p, n);
    dst[n] = '\0';
}

bool coord__map_strcpy(coord_map m, const char *key, char *dst, size_t size)
{
    const char *p;
    size_t n;
    coord__map_bytes(m, key, &p, &n);
    dst[0] = '\0';
    if (n >= size)
        return false;
    coord__strcpy_cut(dst, size, p, n);
    return true;
}

int coord__reply_lacks(coord_t *c, coord_reply_t *reply, enum coord_op op, const char *key)
{
    coord_reply_free(reply);
    coord__set_error(c, "%s: reply without %s", coord_op_name(op), key);
    return COORD_EPROTOCOL;
}

coord_req_t *coord__campaign_req(const void *ws, size_t ws_len, const coord_leader_opts *o)
{
    coord_req_t *r = coord__ws_req(COORD_OP_LEADER_CAMPAIGN, ws, ws_len);
    if (r && o) {
        if (o->lease_ms)
            coord_req_uint(r, "lease_ms", o->lease_ms);
        if (o->if_available)
            coord_req_bool(r, "if_available", true);
        if (o->steal)
            coord_req_bool(r, "steal", true);
        if (o->timeout_ms)
            coord_req_uint(r, "timeout_ms", o->timeout_ms);
        if (o->protocol)
            coord_req_cstr(r, "protocol", o->protocol);
        if (o->incident)
            coord_req_cstr(r, "incident", o->incident);
        if (o->capabilities)
            coord_req_cstr(r, "capabilities", o->capabilities);
    }
    return r;
}

int coord__campaign_reply(coord_t *c, const coord_reply_t *reply, coord_leader_term *t)
{
    coord_map m = coord_reply_map(reply);
    bool g = false;
    uint64_t gen = 0;
    memset(t, 0, sizeof *t);
    if (!coord_map_bool(m, "granted", &g) || (g && !coord_map_uint(m, "generation", &gen))) {
        if (c)
            coord__set_error(c, "%s: reply without granted/generation",
                             coord_op_name(COORD_OP_LEADER_CAMPAIGN));
        return COORD_EPROTOCOL;
    }
    if (!g) {
        t->state = COORD_LEADER_FOLLOWER;
        return 0;
    }
    t->state = COORD_LEADER_LEADER;
    t->generation = gen;
    coord_map_uint(m, "lease_ms", &t->lease_ms);
    coord__map_strcpy(m, "mode", t->mode, sizeof t->mode);
    return 0;
}

COORD_API int coord_leader_campaign(coord_t *c, const void *ws, size_t ws_len,
                                    const coord_leader_opts *o, uint64_t *generation,
                                    bool *granted)
{
    coord_leader_term t;
    memset(&t, 0, sizeof t);
    int rc = c ? coord_leader_campaign_term(c, ws, ws_len, o, &t) : COORD_EINVAL;
    bool g = rc == 0 && t.state == COORD_LEADER_LEADER;
    if (generation)
        *generation = g ? t.generation : 0;
    if (granted)
        *granted = g;
    return rc;
}

COORD_API int coord_leader_renew(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation, uint64_t *lease_ms)
{
    if (lease_ms)
        *lease_ms = 0;
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    return coord__call_uint(c, coord__ws_gen_req(COORD_OP_LEADER_RENEW, ws, ws_len, generation),
                            "lease_ms", lease_ms);
}

COORD_API int coord_leader_resign(coord_t *c, const void *ws, size_t ws_len,
                                  uint64_t generation)
{
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    return coord__call_free(c, coord__ws_gen_req(COORD_OP_LEADER_RESIGN, ws, ws_len,
                                                 generation), NULL);
}

COORD_API int coord_leader_drain(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation)
{
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    return coord__call_free(c, coord__ws_gen_req(COORD_OP_LEADER_DRAIN, ws, ws_len,
                                                 generation), NULL);
}

COORD_API int coord_leader_commit(coord_t *c, const void *ws, size_t ws_len,
                                  uint64_t generation, const char *op_id,
                                  const char *key, const void *value, size_t value_len,
                                  coord_commit_result *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !coord__bytes_ok(ws, ws_len) || !op_id ||
        !coord__bytes_ok(value, value_len) || (!key && (value || value_len)))
        return COORD_EINVAL;
    coord_req_t *r = coord__ws_gen_req(COORD_OP_LEADER_COMMIT, ws, ws_len, generation);
    if (r) {
        coord_req_cstr(r, "op_id", op_id);
        if (key) {
            coord_req_cstr(r, "key", key);
            coord_req_bin(r, "value", value ? value : "", value_len);
        }
    }
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    coord_map m = coord_reply_map(reply);
    bool applied = false, dup = false, abandoned = false;
    uint64_t gen = 0;
    if (!coord_map_bool(m, "applied", &applied))
        return coord__reply_lacks(c, reply, COORD_OP_LEADER_COMMIT, "applied");
    coord_map_bool(m, "duplicate", &dup);
    coord_map_bool(m, "abandoned", &abandoned);
    if (dup)
        coord_map_uint(m, "generation", &gen);
    coord_reply_free(reply);
    if (out) {
        out->applied = applied;
        out->duplicate = dup;
        out->abandoned = !applied && abandoned;
        out->generation = applied ? generation : gen;
    }
    return 0;
}

COORD_API int coord_leader_read(coord_t *c, const void *ws, size_t ws_len,
                                const char *key, void **value, size_t *value_len,
                                uint64_t *generation)
{
    if (value)
        *value = NULL;
    if (value_len)
        *value_len = 0;
    if (generation)
        *generation = 0;
    if (!c || !coord__bytes_ok(ws, ws_len) || !key || !value)
        return COORD_EINVAL;
    coord_req_t *r = coord__ws_req(COORD_OP_LEADER_READ, ws, ws_len);
    if (r)
        coord_req_cstr(r, "key", key);
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    coord_map m = coord_reply_map(reply);
    const void *p = NULL;
    size_t n = 0;
    if (!coord_map_bin(m, "value", &p, &n)) {
        /* a str is accepted too: only the bytes matter */
        const char *s = NULL;
        if (!coord_map_str(m, "value", &s, &n))
            return coord__reply_lacks(c, reply, COORD_OP_LEADER_READ, "value");
        p = s;
    }
    char *copy = coord__dup_bytes(p, n);
    if (!copy) {
        coord_reply_free(reply);
        return COORD_ENOMEM;
    }
    if (generation)
        coord_map_uint(m, "generation", generation);
    coord_reply_free(reply);
    *value = copy;
    if (value_len)
        *value_len = n;
    return 0;
}

COORD_API int coord_leader_info(coord_t *c, const void *ws, size_t ws_len,
                                coord_reply_t **reply)
{
    if (reply)
        *reply = NULL;
    if (!c || !coord__bytes_ok(ws, ws_len) || !reply)
        return COORD_EINVAL;
    return coord__call_free(c, coord__ws_req(COORD_OP_LEADER_INFO, ws, ws_len), reply);
}

COORD_API int coord_leader_disable(coord_t *c, const void *ws, size_t ws_len,
                                   uint64_t *generation)
{
    if (generation)
        *generation = 0;
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    return coord__call_uint(c, coord__ws_req(COORD_OP_LEADER_DISABLE, ws, ws_len),
                            "generation", generation);
}

COORD_API int coord_leader_enable(coord_t *c, const void *ws, size_t ws_len)
{
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    return coord__call_free(c, coord__ws_req(COORD_OP_LEADER_ENABLE, ws, ws_len), NULL);
}

/* ---- events ---- */

COORD_API bool coord_event_leader_lost(const coord_reply_t *ev, coord_leader_lost *out)
{
    if (!coord__event_is(ev, COORD_EV_LEADER_LOST))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    coord_map_uint(m, "generation", &out->generation);
    coord__map_bytes(m, "workstream", &out->workstream, &out->workstream_len);
    coord__map_bytes(m, "reason", &out->reason, &out->reason_len);
    coord__map_bytes(m, "incident", &out->incident, &out->incident_len);
    return true;
}

COORD_API bool coord_event_leader_drain(const coord_reply_t *ev,
                                        coord_leader_drain_event *out)
{
    if (!coord__event_is(ev, COORD_EV_LEADER_DRAIN))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    coord_map_uint(m, "generation", &out->generation);
    coord__map_bytes(m, "workstream", &out->workstream, &out->workstream_len);
    coord__map_bytes(m, "reason", &out->reason, &out->reason_len);
    return true;
}

COORD_API bool coord_event_leader_mode(const coord_reply_t *ev,
                                       coord_leader_mode_event *out)
{
    if (!coord__event_is(ev, COORD_EV_LEADER_MODE))
        return false;
    if (!out)
        return true;
    memset(out, 0, sizeof *out);
    coord_map m = coord_reply_map(ev);
    coord_map_uint(m, "generation", &out->generation);
    coord__map_bytes(m, "workstream", &out->workstream, &out->workstream_len);
    coord__map_bytes(m, "mode", &out->mode, &out->mode_len);
    return true;
}
