/* leader-desc.c - libcoord's workstream descriptors (leader.define,
 * leader.describe) and the term history (leader.history).  A define sends
 * exactly the fields the caller's masks name: a value, nil (back to the
 * default) or nothing (keep the stored one); the reply's descriptor is
 * copied into the fixed arrays of coord_leader_descriptor. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "leader-internal.h"

/* A string field of a define: sent with its value, as nil, or not at all. */
static void desc_str(coord_req_t *r, const coord_leader_define_opts *o, unsigned bit,
                     const char *key, const char *value)
{
    if (o->reset & bit)
        coord_req_cstr(r, key, NULL);
    else if (o->set & bit)
        coord_req_cstr(r, key, value);      /* NULL: nil */
}

static coord_req_t *define_req(const void *ws, size_t ws_len,
                               const coord_leader_define_opts *o)
{
    coord_req_t *r = coord__ws_req(COORD_OP_LEADER_DEFINE, ws, ws_len);
    if (!r || !o)
        return r;
    desc_str(r, o, COORD_DESC_PROTOCOL, "protocol", o->protocol);
    if (o->reset & COORD_DESC_MAX_HOLD)
        coord_req_cstr(r, "max_hold_ms", NULL);
    else if (o->set & COORD_DESC_MAX_HOLD)
        coord_req_uint(r, "max_hold_ms", o->max_hold_ms);
    desc_str(r, o, COORD_DESC_STEAL, "steal", o->steal);
    desc_str(r, o, COORD_DESC_MODE, "mode", o->mode);
    desc_str(r, o, COORD_DESC_FALLBACK, "fallback", o->fallback);
    desc_str(r, o, COORD_DESC_CANONICAL_FENCE, "canonical_fence", o->canonical_fence);
    desc_str(r, o, COORD_DESC_LOCK_NAME, "lock_name", o->lock_name);
    desc_str(r, o, COORD_DESC_CAPABILITIES, "capabilities", o->capabilities);
    desc_str(r, o, COORD_DESC_IF_AVAILABLE, "if_available", o->if_available);
    if (o->force)
        coord_req_bool(r, "force", true);
    return r;
}

/* The reply's descriptor map into *out: 0, or COORD_EPROTOCOL. */
static int read_descriptor(coord_t *c, const coord_reply_t *reply, enum coord_op op,
                           coord_leader_descriptor *out)
{
    coord_map d;
    memset(out, 0, sizeof *out);
    if (!coord_map_map(coord_reply_map(reply), "descriptor", &d)) {
        coord__set_error(c, "%s: reply without descriptor", coord_op_name(op));
        return COORD_EPROTOCOL;
    }
    static const struct {
        const char *key;
        size_t off, size;
    } strs[] = {
        { "protocol", offsetof(coord_leader_descriptor, protocol),
          sizeof out->protocol },
        { "pinned_protocol", offsetof(coord_leader_descriptor, pinned_protocol),
          sizeof out->pinned_protocol },
        { "steal", offsetof(coord_leader_descriptor, steal), sizeof out->steal },
        { "mode", offsetof(coord_leader_descriptor, mode), sizeof out->mode },
        { "fallback", offsetof(coord_leader_descriptor, fallback), sizeof out->fallback },
        { "canonical_fence", offsetof(coord_leader_descriptor, canonical_fence),
          sizeof out->canonical_fence },
        { "lock_name", offsetof(coord_leader_descriptor, lock_name), sizeof out->lock_name },
        { "capabilities", offsetof(coord_leader_descriptor, capabilities),
          sizeof out->capabilities },
        { "if_available", offsetof(coord_leader_descriptor, if_available),
          sizeof out->if_available },
    };
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (!coord__map_strcpy(d, strs[i].key, (char *)out + strs[i].off, strs[i].size)) {
            memset(out, 0, sizeof *out);
            coord__set_error(c, "%s: descriptor.%s too long", coord_op_name(op),
                             strs[i].key);
            return COORD_EPROTOCOL;
        }
    coord_map_uint(d, "max_hold_ms", &out->max_hold_ms);
    coord_map_uint(d, "defined_ms", &out->defined_ms);
    return 0;
}

/* A call answered with a descriptor. */
static int descriptor_call(coord_t *c, coord_req_t *r, enum coord_op op,
                           coord_leader_descriptor *out)
{
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    coord_leader_descriptor tmp;
    rc = read_descriptor(c, reply, op, &tmp);
    coord_reply_free(reply);
    if (rc == 0 && out)
        *out = tmp;
    return rc;
}

COORD_API int coord_leader_define(coord_t *c, const void *ws, size_t ws_len,
                                  const coord_leader_define_opts *o,
                                  coord_leader_descriptor *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    return descriptor_call(c, define_req(ws, ws_len, o), COORD_OP_LEADER_DEFINE, out);
}

COORD_API int coord_leader_describe(coord_t *c, const void *ws, size_t ws_len,
                                    coord_leader_descriptor *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !coord__bytes_ok(ws, ws_len) || !out)
        return COORD_EINVAL;
    return descriptor_call(c, coord__ws_req(COORD_OP_LEADER_DESCRIBE, ws, ws_len),
                           COORD_OP_LEADER_DESCRIBE, out);
}

COORD_API int coord_leader_history(coord_t *c, const void *ws, size_t ws_len,
                                   unsigned limit, coord_reply_t **reply)
{
    if (reply)
        *reply = NULL;
    if (!c || !coord__bytes_ok(ws, ws_len) || !reply)
        return COORD_EINVAL;
    coord_req_t *r = coord__ws_req(COORD_OP_LEADER_HISTORY, ws, ws_len);
    if (r && limit)
        coord_req_uint(r, "limit", limit);
    return coord__call_free(c, r, reply);
}
