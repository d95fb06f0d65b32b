/* leader-term.c - the state of a client's own campaign (FOLLOWER,
 * REQUESTING, LEADER, DRAINING, RELEASED, ABORTED) in a coord_leader_term:
 * the blocking and the event-loop campaign, the events that move a term,
 * and draining and resigning it.  The term is a plain struct of the
 * caller's; the library writes it only inside these calls (and, for the
 * async campaign, just before its callback). */
#include <stdlib.h>
#include <string.h>
#include "leader-internal.h"

COORD_API const char *coord_leader_state_name(coord_leader_state s)
{
    switch (s) {
    case COORD_LEADER_FOLLOWER: return "FOLLOWER";
    case COORD_LEADER_REQUESTING: return "REQUESTING";
    case COORD_LEADER_LEADER: return "LEADER";
    case COORD_LEADER_DRAINING: return "DRAINING";
    case COORD_LEADER_RELEASED: return "RELEASED";
    case COORD_LEADER_ABORTED: return "ABORTED";
    }
    return "UNKNOWN";
}

/* The state after a campaign's failure status. */
static void term_failed(coord_leader_term *t, int status)
{
    memset(t, 0, sizeof *t);
    t->state = status == COORD_EABORTED ? COORD_LEADER_ABORTED : COORD_LEADER_FOLLOWER;
}

static void set_reason(coord_leader_term *t, const char *p, size_t n)
{
    coord__strcpy_cut(t->end_reason, sizeof t->end_reason, p, n);
}

COORD_API int coord_leader_campaign_term(coord_t *c, const void *ws, size_t ws_len,
                                         const coord_leader_opts *o,
                                         coord_leader_term *t)
{
    if (!t)
        return COORD_EINVAL;
    memset(t, 0, sizeof *t);
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    t->state = COORD_LEADER_REQUESTING;
    coord_reply_t *reply = NULL;
    int rc = coord__call_free(c, coord__campaign_req(ws, ws_len, o), &reply);
    coord__wait_timed_out(c, rc, "not elected", o ? o->timeout_ms : 0);
    if (rc < 0) {
        term_failed(t, rc);
        return rc;
    }
    rc = coord__campaign_reply(c, reply, t);
    coord_reply_free(reply);
    if (rc < 0)
        term_failed(t, rc);
    return rc;
}

struct campaign_ctx {
    coord_leader_term *t;
    coord_leader_cb cb;
    void *ud;
    uint64_t timeout_ms;
};

static void on_campaign_reply(coord_t *c, int status, const coord_reply_t *reply, void *ud)
{
    struct campaign_ctx *ctx = ud;
    coord_leader_term *t = ctx->t;
    coord__wait_timed_out(c, status, "not elected", ctx->timeout_ms);
    if (status == 0)
        status = coord__campaign_reply(c, reply, t);
    if (status < 0)
        term_failed(t, status);
    coord_leader_cb cb = ctx->cb;
    void *cb_ud = ctx->ud;
    free(ctx);
    if (cb)
        cb(c, status, t, cb_ud);
}

COORD_API int coord_leader_campaign_async(coord_t *c, const void *ws, size_t ws_len,
                                          const coord_leader_opts *o,
                                          coord_leader_term *t, coord_leader_cb cb,
                                          void *ud, uint64_t *rid_out)
{
    if (rid_out)
        *rid_out = 0;
    if (!t)
        return COORD_EINVAL;
    memset(t, 0, sizeof *t);
    if (!c || !coord__bytes_ok(ws, ws_len))
        return COORD_EINVAL;
    struct campaign_ctx *ctx = malloc(sizeof *ctx);
    if (ctx) {
        ctx->t = t;
        ctx->cb = cb;
        ctx->ud = ud;
        ctx->timeout_ms = o ? o->timeout_ms : 0;
    }
    /* REQUESTING before the send: a reply can only come from a later
     * dispatch, never inside coord_send */
    t->state = COORD_LEADER_REQUESTING;
    uint64_t rid = 0;
    int rc = coord__send_ctx(c, coord__campaign_req(ws, ws_len, o), on_campaign_reply, ctx,
                             &rid);
    if (rc < 0) {
        memset(t, 0, sizeof *t);
        return rc;
    }
    t->rid = rid;
    if (rid_out)
        *rid_out = rid;
    return 0;
}

/* The event's workstream and generation are t's. */
static bool is_ours(const coord_leader_term *t, const void *ws, size_t ws_len,
                    const char *ews, size_t ews_len, uint64_t gen)
{
    return t->generation && gen == t->generation && ews_len == ws_len &&
           (ws_len == 0 || memcmp(ews, ws, ws_len) == 0);
}

COORD_API bool coord_leader_term_event(coord_leader_term *t, const void *ws,
                                       size_t ws_len, const coord_reply_t *ev)
{
    if (!t || !ev || !coord__bytes_ok(ws, ws_len))
        return false;
    bool live = t->state == COORD_LEADER_LEADER || t->state == COORD_LEADER_DRAINING;
    coord_leader_lost l;
    coord_leader_drain_event d;
    coord_leader_mode_event m;
    if (coord_event_leader_lost(ev, &l)) {
        if (!is_ours(t, ws, ws_len, l.workstream, l.workstream_len, l.generation))
            return false;
        if (live) {
            t->state = COORD_LEADER_RELEASED;
            set_reason(t, l.reason, l.reason_len);
        }
        return true;
    }
    if (coord_event_leader_drain(ev, &d)) {
        if (!is_ours(t, ws, ws_len, d.workstream, d.workstream_len, d.generation))
            return false;
        if (live) {
            t->state = COORD_LEADER_DRAINING;
            set_reason(t, d.reason, d.reason_len);
        }
        return true;
    }
    if (coord_event_leader_mode(ev, &m)) {
        if (!is_ours(t, ws, ws_len, m.workstream, m.workstream_len, m.generation))
            return false;
        coord__strcpy_cut(t->mode, sizeof t->mode, m.mode, m.mode_len);
        return true;
    }
    return false;
}

COORD_API int coord_leader_term_drain(coord_t *c, const void *ws, size_t ws_len,
                                      coord_leader_term *t)
{
    if (!c || !t)
        return COORD_EINVAL;
    int rc = coord_leader_drain(c, ws, ws_len, t->generation);
    if (rc == 0 && t->state == COORD_LEADER_LEADER) {
        t->state = COORD_LEADER_DRAINING;
        set_reason(t, "self", 4);
    } else if (rc == COORD_EFENCED) {
        t->state = COORD_LEADER_RELEASED;
        set_reason(t, "fenced", 6);
    }
    return rc;
}

COORD_API int coord_leader_term_resign(coord_t *c, const void *ws, size_t ws_len,
                                       coord_leader_term *t)
{
    if (!c || !t)
        return COORD_EINVAL;
    int rc = coord_leader_resign(c, ws, ws_len, t->generation);
    if (rc == 0) {
        t->state = COORD_LEADER_RELEASED;
        set_reason(t, "resigned", 8);
    } else if (rc == COORD_EFENCED) {
        if (t->state != COORD_LEADER_RELEASED)
            set_reason(t, "fenced", 6);
        t->state = COORD_LEADER_RELEASED;
    }
    return rc;
}
