/* leader-outbox.c - libcoord's outbox claims (leader.claim, abandon,
 * pending) and leader.check.  Each call is one request carrying the
 * generation; the broker decides everything (live generation, mode,
 * draining, limits) in its ledger, so nothing here is cached. */
#include <stdlib.h>
#include <string.h>
#include "leader-internal.h"

COORD_API int coord_leader_claim(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation, const char *op_id,
                                 coord_claim_result *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !coord__bytes_ok(ws, ws_len) || !op_id)
        return COORD_EINVAL;
    coord_req_t *r = coord__ws_gen_req(COORD_OP_LEADER_CLAIM, ws, ws_len, generation);
    if (r)
        coord_req_cstr(r, "op_id", op_id);
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    coord_map m = coord_reply_map(reply);
    coord_claim_result res;
    memset(&res, 0, sizeof res);
    if (!coord_map_bool(m, "claimed", &res.claimed))
        return coord__reply_lacks(c, reply, COORD_OP_LEADER_CLAIM, "claimed");
    if (res.claimed) {
        coord_map_bool(m, "reconcile", &res.reconcile);
        if (res.reconcile) {
            coord_map_uint(m, "previous_generation", &res.previous_generation);
            coord_map_uint(m, "claimed_ms", &res.claimed_ms);
        }
    } else {
        coord_map_bool(m, "applied", &res.applied);
        coord_map_bool(m, "abandoned", &res.abandoned);
        if (res.applied)
            coord_map_uint(m, "generation", &res.generation);
    }
    coord_reply_free(reply);
    if (out)
        *out = res;
    return 0;
}

COORD_API int coord_leader_abandon(coord_t *c, const void *ws, size_t ws_len,
                                   uint64_t generation, const char *op_id,
                                   const char *reason, bool *applied,
                                   uint64_t *applied_generation)
{
    if (applied)
        *applied = false;
    if (applied_generation)
        *applied_generation = 0;
    if (!c || !coord__bytes_ok(ws, ws_len) || !op_id || !reason)
        return COORD_EINVAL;
    coord_req_t *r = coord__ws_gen_req(COORD_OP_LEADER_ABANDON, ws, ws_len, generation);
    if (r) {
        coord_req_cstr(r, "op_id", op_id);
        coord_req_cstr(r, "reason", reason);
    }
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, r, &reply);
    if (rc < 0)
        return rc;
    coord_map m = coord_reply_map(reply);
    bool a = false;
    uint64_t g = 0;
    coord_map_bool(m, "applied", &a);
    if (a)
        coord_map_uint(m, "generation", &g);
    coord_reply_free(reply);
    if (applied)
        *applied = a;
    if (applied_generation)
        *applied_generation = g;
    return 0;
}

COORD_API int coord_leader_pending(coord_t *c, const void *ws, size_t ws_len,
                                   unsigned limit, coord_reply_t **reply)
{
    if (reply)
        *reply = NULL;
    if (!c || !coord__bytes_ok(ws, ws_len) || !reply)
        return COORD_EINVAL;
    coord_req_t *r = coord__ws_req(COORD_OP_LEADER_PENDING, ws, ws_len);
    if (r && limit)
        coord_req_uint(r, "limit", limit);
    return coord__call_free(c, r, reply);
}

COORD_API int coord_leader_check(coord_t *c, const void *ws, size_t ws_len,
                                 uint64_t generation, coord_leader_check_result *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, coord__ws_gen_req(COORD_OP_LEADER_CHECK, ws, ws_len,
                                                   generation), &reply);
    if (rc < 0)
        return rc;
    coord_map m = coord_reply_map(reply);
    coord_leader_check_result res;
    memset(&res, 0, sizeof res);
    if (!coord_map_bool(m, "live", &res.live))
        return coord__reply_lacks(c, reply, COORD_OP_LEADER_CHECK, "live");
    coord_map_uint(m, "lease_left_ms", &res.lease_left_ms);
    coord__map_strcpy(m, "mode", res.mode, sizeof res.mode);
    coord_reply_free(reply);
    if (out)
        *out = res;
    return 0;
}
